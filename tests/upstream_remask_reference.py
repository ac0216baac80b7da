"""A reference of the released code's residual remasking (`_generate_residual_remask` and
`residual_remask_transfer` in heavyball-research/multi-token-residual-prediction,
src/models/SDAR-1.7B-MRP/), written from reading it: plain loops, one row at a time, every tensor op in
their order and dtype. tests/test_upstream_remask.py checks mrp_repro.decoding.upstream_remask against it.

    from tests.upstream_remask_reference import reference_remask, reference_forward
    tokens, counts = reference_remask(model, head, prompt, tau=0.5, delta=1.0, block=8, mask_id=1,
                                      eos_ids=[2], max_new_tokens=16)

What the released loop does, per block (block length L, at most L denoising steps, their DENOISING_STEPS =
BLOCK_LENGTH): a backbone forward of the block as it stands (nothing written to the cache); the pick (token
x0 and its confidence) at every position; the proposals are the masked positions whose confidence > tau, or
the single most confident masked one; if the row proposes anything, ONE head forward on the same pre-reveal
block, seeded by the backbone's post-norm hidden states, whose layers never had a KV cache written (the head
sees its own block only); C = lm_head(h_C) (the raw residual, in the model dtype); a proposal at p is vetoed
when |C[p, x0[p]]| > delta; if every proposal of the row is vetoed, the one with the smallest |C| is kept
(first index among equal ones: argmin); the survivors are committed (x0 may be [MASK] itself: the slot stays
masked). Then one forward writes the finished block into the cache; a row stops after the block in which it
wrote an EOS at a generated position; their decode drops [MASK] ids from the text. Their counters
(profile_tpf): target forwards of the denoising loop, MRP forwards, committed tokens (here real tokens only, as
the upstream family counts them: a [MASK] "commit" writes nothing), vetoed proposals; prefill and store-KV
forwards apart. `steps` (per block) lets a test rebuild their per-batch counts of equal-length rows;
`masks_left` counts the slots still [MASK] when their blocks were committed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mrp_repro.model import SDARModel, apply_rope, rope_cos_sin


# -- the backbone and the head in their order -------------------------------------------------------------
def _norm(module, x):
    return F.rms_norm(x, module.weight.shape, module.weight, module.eps)


def _layer(layer, x, cos, sin, past, mask):
    """One decoder layer as theirs: x (1, T, H); past (k, v) (1, nkv, S, hd) or None; mask (1, T, S + T) bool or
    None (their decode calls: unmasked). -> x, (k, v) of this call's T positions."""
    at = layer.self_attn
    T = x.shape[1]
    h = _norm(layer.input_layernorm, x)
    q = _norm(at.q_norm, at.q_proj(h).view(1, T, at.nh, at.hd)).transpose(1, 2)
    k = _norm(at.k_norm, at.k_proj(h).view(1, T, at.nkv, at.hd)).transpose(1, 2)
    v = at.v_proj(h).view(1, T, at.nkv, at.hd).transpose(1, 2)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    ka = k if past is None else torch.cat([past[0], k], 2)
    va = v if past is None else torch.cat([past[1], v], 2)
    y = F.scaled_dot_product_attention(q, ka, va, attn_mask=mask, enable_gqa=at.nh != at.nkv)
    x = x + at.o_proj(y.transpose(1, 2).reshape(1, T, at.nh * at.hd))
    h = _norm(layer.post_attention_layernorm, x)
    return x + layer.mlp.down_proj(F.silu(layer.mlp.gate_proj(h)) * layer.mlp.up_proj(h)), (k, v)


def reference_forward(model: SDARModel, ids: torch.Tensor, start: int, past: list | None, mask=None):
    """The backbone on one row: ids (T,) at positions start.. start+T-1 after the cached keys `past` (a list of
    per-layer (k, v), or None). -> logits (T, V), post-norm hidden (T, H), this call's per-layer (k, v)."""
    T = ids.shape[0]
    x = F.embedding(ids[None], model.embed_tokens.weight)
    pos = torch.arange(start, start + T)[None]
    cos, sin = rope_cos_sin(pos, model.config.head_dim, model.config.rope_theta, x.dtype)
    new = []
    for i, layer in enumerate(model.layers):
        x, kv = _layer(layer, x, cos, sin, None if past is None else past[i], mask)
        new.append(kv)
    h = _norm(model.norm, x)
    return model.lm_head(h)[0], h[0], new


def reference_head(head, model: SDARModel, h_A: torch.Tensor, ids: torch.Tensor, start: int) -> torch.Tensor:
    """The head on its own block only (no KV of earlier blocks): h_A (L, H), ids (L,) -> h_C (L, H)."""
    L = ids.shape[0]
    e = F.embedding(ids[None], model.embed_tokens.weight)
    x = head.eh_proj(torch.cat([_norm(head.enorm, e), _norm(head.hnorm, h_A[None].to(e.dtype))], -1))
    cos, sin = rope_cos_sin(torch.arange(start, start + L)[None], model.config.head_dim, model.config.rope_theta,
                            x.dtype)  # fmt: skip
    for layer in head.layers:
        x, _ = _layer(layer, x, cos, sin, None, None)
    return _norm(head.norm, x)[0]


def block_causal(T: int, L: int) -> torch.Tensor | None:
    """Their prefill mask in their shape, (1, T, T) bool (a slice of their [1, N, N] block mask: on CPU SDPA runs
    its math kernel for a 3-D mask, issue 38); None when it is all True (one block: their unmasked call)."""
    blk = torch.arange(T) // L
    m = blk[None, :] <= blk[:, None]
    return None if bool(m.all()) else m[None]


def reference_pick(logits: torch.Tensor):
    """Their pick at temperature 1, top-k 1, one position at a time: the softmax over the full vocabulary in the
    logits' dtype ([MASK] included); the token with the top logit (the lowest index among exact ties, the draw
    upstream_pick makes); its probability. logits (L, V) -> token (L,), confidence (L,) in logits.dtype."""
    toks, confs = [], []
    for row in logits:
        p = F.softmax(row, dim=-1)
        top = float(row.max())
        t = next(i for i, v in enumerate(row.tolist()) if v == top)
        toks.append(t)
        confs.append(p[t])
    return torch.tensor(toks), torch.stack(confs)


# -- residual remasking, one row ---------------------------------------------------------------------------
@torch.no_grad()
def reference_remask(model, head, prompt: list[int], tau: float, delta: float | None, block: int, mask_id: int,
                     eos_ids, max_new_tokens: int, pick=reference_pick) -> tuple[list[int], dict]:  # fmt: skip
    """One row through their residual remasking (delta None: their low_confidence_dynamic, the baseline).
    pick(logits (L, V)) -> (token (L,), confidence (L,)).
    -> (generated tokens to the end of the last block, [MASK] dropped, cut at the first EOS; counts)."""
    L, P = block, len(prompt)
    n_blocks = -(-(P + max_new_tokens) // L)
    x = torch.full((n_blocks * L,), mask_id, dtype=torch.long)
    x[:P] = torch.tensor(prompt)
    counts = dict(denoise_forwards=0, mrp_forwards=0, tokens=0, revoked=0, commit_forwards=0, steps=[],
                  masks_left=0)  # fmt: skip
    past = None
    first = P // L  # their prefill: the prompt's whole blocks, block-causal, written to the cache
    if first > 0:
        _, _, past = reference_forward(model, x[: first * L], 0, None, block_causal(first * L, L))
        counts["commit_forwards"] += 1
    for b in range(first, n_blocks):
        lo = b * L
        cur = x[lo : lo + L].clone()
        counts["steps"].append(0)
        for _step in range(L):
            masked = cur == mask_id
            if not bool(masked.any()):
                break
            logits, h_A, _ = reference_forward(model, cur, lo, past)
            counts["denoise_forwards"] += 1
            counts["steps"][-1] += 1
            x0, p = pick(logits)
            conf = torch.where(masked, p, torch.full_like(p, float("-inf")))
            high = conf > tau
            if bool(high.any()):
                transfer = high
            else:  # their torch.topk(confidence, 1); ties: the lowest slot (upstream_pick's stated rule)
                transfer = torch.zeros_like(masked)
                best = max(range(L), key=lambda i: (float(conf[i]), -i))
                transfer[best] = True
            survive = transfer
            if delta is not None:  # the veto; None: their low_confidence_dynamic, no head
                C = model.lm_head(reference_head(head, model, h_A, cur, lo))  # (L, V) the raw residual
                counts["mrp_forwards"] += 1
                mag = C.gather(-1, x0[:, None])[:, 0].abs()
                survive = transfer & (mag <= float(delta))
                if not bool(survive.any()):
                    big = torch.where(transfer, mag, torch.full_like(mag, float("inf")))
                    survive[int(big.argmin())] = True
            counts["tokens"] += int((survive & (x0 != mask_id)).sum())
            counts["revoked"] += int(transfer.sum() - survive.sum())
            cur = torch.where(survive, x0, cur)
        _, _, new = reference_forward(model, cur, lo, past)  # the store-KV forward
        counts["commit_forwards"] += 1
        past = new if past is None else [(torch.cat([pk, k], 2), torch.cat([pv, v], 2))
                                         for (pk, pv), (k, v) in zip(past, new, strict=True)]  # fmt: skip
        x[lo : lo + L] = cur
        counts["masks_left"] += int((cur == mask_id).sum())  # [MASK] picks that never became a token
        if any(int(t) in set(eos_ids) for t in x[P : lo + L].tolist()):
            break
    gen = [t for t in x[P:].tolist() if t != mask_id]  # their total: whole blocks, up to L - 1 past max_new
    cut = next((i for i, t in enumerate(gen) if t in set(eos_ids)), len(gen))
    return gen[:cut], counts
