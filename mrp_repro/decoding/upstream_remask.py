"""The released code's residual remasking (issue 20: the `upstream` family), beside ours (`mrp_modes.Remask`).

    from mrp_repro.decoding.upstream import generate_upstream
    from mrp_repro.decoding.upstream_remask import UpstreamRemask
    res = generate_upstream(model, prompts, UpstreamRemask(0.5, delta=1.0, head=head), block_size, mask_id,
                            eos_ids, max_new_tokens)          # Backbone.generate: with the upstream numerics

What it reproduces (heavyball-research/multi-token-residual-prediction, `modeling_sdar_mrp.py`
`_generate_residual_remask` and `spec_decoding_utils.residual_remask_transfer`; the evaluation sets
DENOISING_STEPS = BLOCK_LENGTH, temperature 1, top-k 1), per step of a block, at most L steps per block:
  1. one backbone forward of the block as it stands; the pick of every position (`upstream_pick`: the full
     softmax in the logits' dtype, [MASK] a candidate); the proposals: the masked positions whose
     confidence > tau, else the single most confident masked one;
  2. ONE head forward on the same pre-reveal block, seeded by the backbone's post-norm hidden states, with
     no KV of earlier blocks (their head layers' cache is never written on this path: the head sees its
     own block only); C = lm_head(h_C), the raw residual, in the model dtype;
  3. a proposal at p is vetoed when |C[p, x0[p]]| > delta; a row whose proposals are all vetoed keeps the one
     with the smallest |C| (the first among equal ones);
  4. the survivors are committed. A [MASK] pick "committed" leaves its slot masked; a block still holding
     [MASK] after L steps is committed as it is (their loop moves on; the output drops [MASK] ids).
Layout, prefill, store-KV commits, stopping and output are `generate_upstream`'s (the family's loop).
`Backbone.generate` runs the family with the upstream numerics (`model.use_numerics`): RMSNorm as
F.rms_norm, unmasked attention where the mask is all True (bf16 logits in their order).

`UpstreamDynamic(tau)` is steps 1 and 4 alone: their `low_confidence_dynamic`, the remasking table's baseline.

How ours differs (`Remask(tau, "delta")`): the head sees the block AFTER the fresh reveals and the earlier
blocks through its own KV cache, as in training; fp32 confidence with [MASK] excluded; our numerics; default
delta 2.0 (tuned on SDAR-1.7B in their later runs) where theirs is 1.0, swept over {0.5, 1, 2, 4}.

Accounting: their per-batch counters in `UpstreamCounters` (`denoise_forwards` = num_target_fwd_denoising,
`mrp_forwards` = num_mrp_fwd_denoising: one per step, `tokens`); their `num_residual_vetoed` is the sum over
rows of `RowStats.revoked` (a vetoed proposal, never written). Per row (`RowStats`, as the family counts):
`denoise_forwards` and `mrp_forwards` while the row has a masked slot, `tokens` its real reveals, `revoked` its
vetoes. Theirs counts a [MASK] "commit" in num_committed; the family counts real tokens only.
"""

from __future__ import annotations

import torch

from mrp_repro.decoding.upstream import UpstreamPolicy
from mrp_repro.decoding.upstream_pick import upstream_confidence, upstream_static_select

__all__ = ["UpstreamDynamic", "UpstreamRemask", "DEFAULT_DELTA", "residual_veto"]

#: their `residual_delta` default
DEFAULT_DELTA = 1.0


def residual_veto(propose: torch.Tensor, tok: torch.Tensor, C: torch.Tensor, delta: float) -> torch.Tensor:
    """Their `residual_remask_transfer`: propose (B, L) bool, tok (B, L) the picks, C (B, L, V) the raw residual
    -> (B, L) bool, the proposals that survive |C[p, tok[p]]| <= delta; a row that proposed something and lost
    all of it keeps its smallest-|C| proposal (argmin: the first among equal magnitudes)."""
    mag = C.gather(-1, tok[..., None]).squeeze(-1).abs()  # (B, L) in C's dtype, as theirs
    survive = propose & (mag <= float(delta))
    lost = propose.any(1) & ~survive.any(1)  # (B,)
    big = torch.where(propose, mag, torch.full_like(mag, float("inf")))
    smallest = torch.zeros_like(propose).scatter_(1, big.argmin(1, keepdim=True), True)  # (B, L)
    return torch.where(lost[:, None], smallest & propose, survive)


class UpstreamDynamic(UpstreamPolicy):
    """Their `low_confidence_dynamic` (denoising_steps = L, one transfer per step): every masked slot whose
    confidence > tau, else the most confident one; at most L steps per block. The remasking table's baseline
    of the upstream family: UpstreamRemask is this with the head's veto."""

    def __init__(self, threshold: float):
        self.tau = threshold
        self.name = f"upstream_dynamic({threshold})"

    def propose(self, run, cur: torch.Tensor):
        """One backbone forward of the block -> (its output, picks (B, L), proposals (B, L) bool)."""
        masked = run.masked(cur)  # (B, L)
        out = run.model.forward_block(cur, run.positions, run.cache)
        run.batch.denoise_forwards += 1
        run.count("denoise_forwards", masked.any(1))
        tok, conf = upstream_confidence(out.logits)  # (B, L), (B, L) in the logits' dtype
        high = (conf > self.tau) & masked
        top = upstream_static_select(conf, masked, 1)  # their topk(confidence, 1) fallback
        return out, tok, torch.where(high.any(1, keepdim=True), high, top)  # empty on rows with no mask

    def judge(self, run, out, cur, tok, propose) -> torch.Tensor:
        return propose

    def denoise_block(self, run, cur: torch.Tensor) -> torch.Tensor:
        for _ in range(cur.shape[1]):  # their denoising_steps = block length
            if not bool(run.masked(cur).any()):
                break
            out, tok, propose = self.propose(run, cur)
            cur = run.reveal(cur, self.judge(run, out, cur, tok, propose), tok)
        return cur


class UpstreamRemask(UpstreamDynamic):
    """Their residual remasking: UpstreamDynamic's proposals vetoed by |C| > delta (module docstring). Runs in
    `decoding.upstream.generate_upstream` (their layout, prefill, store-KV commits and stopping)."""

    rule = "delta"  # the runs' `rule` column: their veto is a delta rule

    def __init__(self, threshold: float, delta: float = DEFAULT_DELTA, head=None):
        if head is None:
            raise ValueError("UpstreamRemask needs an MRP head")
        if getattr(head, "objective", "residual") != "residual":
            raise ValueError("UpstreamRemask vetoes with the raw residual C: it needs a residual head")
        super().__init__(threshold)
        self.delta, self.head = float(delta), head
        self.name = f"upstream_remask({threshold},{self.delta:g})"

    def judge(self, run, out, cur, tok, propose) -> torch.Tensor:
        # one head call on the pre-reveal block (cur), no cache: it sees its own block only
        h_C = self.head(out.hidden, cur, run.positions, run.model.embed_tokens)  # (B, L, H)
        run.batch.mrp_forwards += 1
        run.count("mrp_forwards", propose.any(1))
        keep = residual_veto(propose, tok, run.model.lm_head(h_C), self.delta)  # (B, L)
        run.count("revoked", (propose & ~keep).sum(1))
        return keep
