"""The plain reference loop: no cache, no batching, the whole sequence recomputed every step.

It exists to check the engine: for the same selection rule, `generate` must produce the
same tokens as this loop, token for token.
"""

from __future__ import annotations

import torch

from mrp_repro.decoding.engine import Dynamic, Static, masked_confidence, top_masked
from mrp_repro.model import SDARModel, block_causal_mask


@torch.no_grad()
def reference_generate(
    model: SDARModel,
    prompt: list[int],
    policy: Static | Dynamic,
    block_size: int,
    mask_id: int,
    eos_ids,
    max_new_tokens: int,
) -> list[int]:
    device = model.lm_head.weight.device
    L, n = block_size, len(prompt)
    total = -(-(n + max_new_tokens) // L) * L
    x = torch.full((1, total), mask_id, dtype=torch.long, device=device)
    x[0, :n] = torch.tensor(prompt, device=device)
    for b in range(n // L, total // L):
        end = (b + 1) * L
        mask = block_causal_mask(torch.ones(1, end, dtype=torch.bool, device=device), L)
        pos = torch.arange(end, device=device)[None]
        while (x[0, b * L : end] == mask_id).any():
            logits = model(x[:, :end], pos, mask).logits[:, b * L : end]  # (1, L, V)
            masked = x[:, b * L : end] == mask_id
            tok, conf = masked_confidence(logits, masked, mask_id)
            if isinstance(policy, Dynamic):
                pick = policy.select(conf, masked)
            else:
                pick = top_masked(conf, masked, policy.k)
            x[:, b * L : end] = torch.where(pick, tok, x[:, b * L : end])
        block = x[0, max(b * L, n) : end].tolist()
        if any(t in set(eos_ids) for t in block):
            break
    gen = x[0, n : n + max_new_tokens].tolist()
    cut = next((i for i, t in enumerate(gen) if t in set(eos_ids)), len(gen))
    return gen[:cut]
