"""S2D2-style self-speculation (Han et al., "S2D2: Fast Decoding for Diffusion LLMs via Training-Free
Self-Speculation", arXiv 2603.25702) on our engine: a training-free peer that drafts in block-diffusion mode and
verifies in the same backbone's autoregressive mode (block size 1), with a routing rule deciding when to verify.

    from mrp_repro.decoding import generate
    from mrp_repro.decoding.peers_s2d2 import S2D2
    generate(model, prompts, S2D2(0.85, score_cost=1.0), block_size, mask_id, eos_ids, max_new_tokens)
    S2D2(0.85, score_cost=0.0)      # E[K] >= 0 always: every step with a masked span verifies (their block-16 setting)

The method (their paper and public code, read with `search`, in our words; no code of theirs). Each step of a block:
  1. draft: one denoising forward of the block; every masked slot's greedy token and confidence;
  2. span: the first contiguous run of masked slots, left to right (slots decoded earlier end it);
  3. route (their `score_threshold` policy, `static` score): s = E[K] - c with E[K] = sum_k prod_{i <= k} a_i over the
     span, a_i = exp(-H_i / log V) (their `soft_entropy_negexp` estimator, temperature 1: H_i the entropy of slot
     i's draft distribution); verify when s >= 0. Their SDAR settings: block 4 with c = 1, block 16 with c = 0;
  4. verify (one backbone call of 2L rows): the block with every masked slot set to its draft, then L [MASK] slots at
     the same positions. The first L rows attend token-causally among themselves (the block read left to right, as
     the AR mode reads it); [MASK] row i attends to the block's slots before i and to itself: SDAR decoding slot i as a
     one-token block, so its logits are the AR mode's prediction of slot i from the drafts before it;
  5. accept: walking the span, keep each draft equal to the AR mode's greedy token; at the first that differs write
     the AR mode's token there and stop (at least one token a verified step). A step that does not verify reveals as
     dynamic(τ) does: every masked slot above τ, else the most confident one.
[MASK] is never a candidate (its logit -inf, as everywhere in the engine).

Where ours differs from their code, on purpose (issue 37 asks for greedy acceptance): their acceptance is
speculative sampling (keep a draft with probability min(1, q / p), redraw the first rejected slot from (q - p)+), random
even for greedy drafts; ours keeps a draft only when it equals the AR mode's greedy token and writes that token at the
first rejection, the deterministic limit of theirs (p a point mass on the draft). Their paper's runs also re-encode
committed blocks causally (`cache_ver`) and read the block's decoded prefix causally in the draft call (`draft_ver`);
ours verifies against the engine's cache (committed blocks encoded as block diffusion does, their setting without
`cache_ver`) and drafts with the plain block forward. S2D2 is not lossless against static or dynamic decoding.

It needs a backbone whose AR mode is a good critic: trained with block-size-1 steps, as SDAR's released models (the
SDAR profiles: decoding.s2d2_thresholds). chain16 and tiny were trained at blocks 4 / 16 and 8 only, and decode
poorly at block 1 (scripts/ar_mode_probe.py), so they leave s2d2_thresholds empty.

Accounting: the draft forward is one denoising forward per working row; the verify one more, with one extra
block-row (its L [MASK] rows: RowStats.extra_rows, charged by peers.md's charged_tpf as WINO's shadow block is).
"""

from __future__ import annotations

import math

import torch

from mrp_repro.decoding.engine import BlockState, Policy, masked_confidence, top_masked
from mrp_repro.model import ModelOutput

__all__ = ["S2D2", "S2D2_TAU", "first_masked_span", "expected_accepted", "ar_verify_mask", "greedy_accept"]

#: their SDAR runs' confidence threshold (low_confidence_dynamic, τ_conf = 0.85)
S2D2_TAU = 0.85


def first_masked_span(masked: torch.Tensor) -> torch.Tensor:
    """(B, L) bool: the first contiguous run of masked slots of each row (empty on a row with none)."""
    started = masked.long().cummax(1).values.bool()  # at or after the first masked slot
    broken = (started & ~masked).long().cummax(1).values.bool()  # at or after the first decoded slot past it
    return started & ~broken


def expected_accepted(logits: torch.Tensor, span: torch.Tensor) -> torch.Tensor:
    """(B,) E[K] = sum_k prod_{i <= k} a_i over each row's span, a_i = exp(-H_i / log V) of logits (B, L, V) (their
    soft_entropy_negexp at temperature 1; -inf logits, as [MASK]'s, carry no probability)."""
    V = logits.shape[-1]
    logp = logits.float().log_softmax(-1)
    ent = -(logp.exp() * logp.nan_to_num(neginf=0.0)).sum(-1)  # (B, L)
    a = torch.where(span, torch.exp(-ent / math.log(V)), torch.ones_like(ent))
    prefix = torch.cumprod(a, 1)  # a slot outside the span multiplies by 1 and adds nothing below
    return torch.where(span, prefix, torch.zeros_like(prefix)).sum(1)


def ar_verify_mask(model, cache, key_valid: torch.Tensor) -> torch.Tensor:
    """(B, 1, 2L, S + 2L) bool attention of [drafted block | L [MASK] slots] (True = attend): draft row i sees the
    cache and the block's real slots j <= i; [MASK] row i the cache, the block's real slots j < i and itself."""
    B, L = key_valid.shape
    dev = key_valid.device
    causal = torch.ones(L, L, dtype=torch.bool, device=dev).tril()  # j <= i
    eye = torch.eye(L, dtype=torch.bool, device=dev)
    past = model._cache_keys(cache, B, 2 * L, dev)  # (B, 1, 2L, S): the committed cache slots
    real = key_valid[:, None, None, :].expand(B, 1, L, L)  # (B, 1, L, L) keys that exist
    draft = torch.cat([real & causal, torch.zeros_like(real)], -1)  # (B, 1, L, 2L)
    query = torch.cat([real & causal & ~eye, real & eye | eye], -1)  # (B, 1, L, 2L)
    return torch.cat([past, torch.cat([draft, query], 2)], -1)


def greedy_accept(draft: torch.Tensor, ar_tokens: torch.Tensor, span: torch.Tensor) -> torch.Tensor:
    """(B, L) bool: the span's slots a verify reveals. Draft slots equal to the AR mode's greedy token, walking the
    span from its left end, up to and including the first that differs (written with the AR token there)."""
    bad = span & (draft != ar_tokens)
    earlier_bad = (bad.long().cumsum(1) - bad.long()) > 0  # a differing slot before this one
    return span & ~earlier_bad


class S2D2(Policy):
    """Drafts by block diffusion, verifies the first masked span in the AR mode when the routing score says so, and
    otherwise reveals as dynamic(τ) (module docstring). score_cost: c of s = E[K] - c (0: verify every step)."""

    algorithm = "peer"

    def __init__(self, tau: float = S2D2_TAU, score_cost: float = 1.0):
        if not 0 < tau < 1:
            raise ValueError(f"tau={tau}: a confidence threshold in (0, 1)")
        if not (score_cost >= 0 and math.isfinite(score_cost)):
            raise ValueError(f"score_cost={score_cost}: c >= 0 (0: verify every step; their SDAR block-4 setting: 1)")
        self.tau, self.score_cost = float(tau), float(score_cost)
        self.name = f"s2d2({tau},{score_cost:g})"

    def _verify(self, st: BlockState, tok: torch.Tensor, masked: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """(B, L) the AR mode's greedy token at each slot, given the drafted block before it (one call, 2L rows)."""
        B, L = st.ids.shape
        st._count("denoise_forwards", rows)
        st._count("extra_rows", rows, 1)
        draft = torch.where(masked, tok, st.ids)  # (B, L) every masked slot at its draft
        ids = torch.cat([draft, torch.full_like(draft, st.mask_id)], 1)  # (B, 2L)
        pos = torch.cat([st.positions, st.positions], 1)  # (B, 2L) the [MASK] slots at the block's positions
        out: ModelOutput = st.model(ids, pos, ar_verify_mask(st.model, st.cache, st.key_valid), st.cache,
                                    logits_from=L)  # (B, L, V): the [MASK] rows only  # fmt: skip
        logits = out.logits
        logits[..., st.mask_id] = float("-inf")
        return logits.argmax(-1)

    def denoise(self, st: BlockState) -> None:
        B, L = st.ids.shape
        guard = 2 * L + 2  # every step reveals at least one token: never reached
        while st.rows_needing_work().any():
            if st.step > guard:
                raise RuntimeError(f"{self.name} made no progress in block {st.block}")
            masked = st.masked  # (B, L)
            out = st.backbone()
            tok, conf = masked_confidence(out.logits, masked, st.mask_id)  # (B, L), (B, L)
            reveal = ((conf > self.tau) & masked) | top_masked(conf, masked, 1)  # dynamic(τ)'s step
            span = first_masked_span(masked)
            verify = span.any(1) & (expected_accepted(out.logits, span) - self.score_cost >= 0)  # (B,)
            if verify.any():  # one host sync a step: no verify call when no row routes to it
                ar = self._verify(st, tok, masked, verify)
                accepted = greedy_accept(tok, ar, span)
                st._count("rounds", verify)
                st._count("drafted", verify, span.sum(1))
                st._count("accepted", verify, (accepted & (tok == ar)).sum(1))  # drafts kept, not the AR token
                reveal = torch.where(verify[:, None], accepted, reveal)
                tok = torch.where(verify[:, None] & accepted, ar, tok)  # equal where kept; AR's at the rejection
            st.reveal(reveal, tok)
            st.step += 1
