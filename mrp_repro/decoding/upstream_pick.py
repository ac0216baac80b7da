"""The released code's pick rule (heavyball-research/multi-token-residual-prediction, `modeling_sdar_mrp.py`:
`sample_with_temperature_topk_topp` with the evaluation's temperature 1.0, top_k = 1, top_p = 1.0, and the
`low_confidence_static` / `_pick_low_conf_static` selections), made deterministic.

    from mrp_repro.decoding.upstream_pick import upstream_confidence, upstream_pick, upstream_static_select
    tok, conf = upstream_confidence(logits)                  # (B, L), (B, L) in logits.dtype
    pos, tok1, valid = upstream_pick(logits, state, mask_id, eligible)      # speculative: one per row
    sel = upstream_static_select(conf, state == mask_id, n)                  # static: n per row

How it differs from ours (`mrp_repro.decoding.engine.masked_confidence`, `mrp_modes.static_pick`):
  * confidence is the full softmax computed in the logits' own dtype (bf16 in their evaluation: a bf16
    probability, so many more exact ties between positions than our fp32 confidence has);
  * [MASK] is a candidate like any other token: if it has the top logit it is "revealed", i.e. the slot
    stays [MASK] (their code comments on this livelock risk; the policies in `upstream.py` say what
    they do about it);
  * the token is their top-k = 1 multinomial draw: uniform among the EXACTLY tied top logits. We take the
    lowest vocabulary index among them (torch.argmax returns the first maximal value), which is one of the
    draws their code can make; without ties it is their token exactly. The confidence of the token is the
    same whichever tied token is drawn.
  * positions: the speculative path ranks with `confidence.argmax` (lowest index among tied confidences:
    documented for torch.argmax, CPU and CUDA). The static path ranks with `torch.topk(confidence[j], n)`,
    which gives no guarantee about which of exactly tied entries it returns: the PyTorch docs say the
    indices of tied elements are not stable and may vary across invocations and devices; on CPU it is not
    the lowest index (our measurement in issue 20), and on CUDA reported cases return a higher index first
    (pytorch/pytorch#127196: topk(k=2) of [3, 2, 3, 2, 1, 1] gives indices [2, 0]). We choose the lowest
    index (a stable descending sort), the same rule as the speculative path, so that upstream static and
    upstream speculative reveal in the same order. Where their static run met a tie in bf16 its order may
    differ from ours; no deterministic rule can match an unspecified one.

Temperature, top-k > 1 and top-p are not implemented: the published runs use 1.0 / 1 / 1.0.
"""

from __future__ import annotations

import torch

__all__ = ["upstream_confidence", "upstream_pick", "upstream_static_select"]


def upstream_confidence(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """logits (..., V) in the model's dtype -> token (...,) long, confidence (...,) in logits.dtype.

    confidence = softmax(logits)[token], the softmax over the full vocabulary ([MASK] included) in the
    logits' dtype, as `F.softmax` computes it for them; token = the lowest index of the top logit."""
    probs = torch.softmax(logits, dim=-1)  # (..., V) in logits.dtype
    tok = logits.argmax(-1)  # (...,) first maximal value: the lowest index among exact ties
    conf = probs.gather(-1, tok[..., None]).squeeze(-1)  # (...,)
    return tok, conf


def upstream_pick(logits: torch.Tensor, state: torch.Tensor, mask_id: int, eligible: torch.Tensor):
    """Their speculative `_pick_low_conf_static` (n = 1): the most confident [MASK] slot of `state`.

    logits (B, L, V); state (B, L) ids whose [MASK] slots may be picked; eligible (B,) bool (their
    `~finished`). -> pos (B,), tok (B,), valid (B,) bool: False where the row has no eligible [MASK]
    slot (pos and tok are then meaningless, as theirs: argmax of all -inf is slot 0)."""
    tok, conf = upstream_confidence(logits)  # (B, L), (B, L)
    masked = (state == mask_id) & eligible[:, None]  # (B, L)
    score = torch.where(masked, conf, torch.full_like(conf, float("-inf")))  # (B, L)
    pos = score.argmax(-1)  # (B,) lowest slot among tied confidences
    return pos, tok.gather(1, pos[:, None]).squeeze(1), masked.any(-1)


def upstream_static_select(conf: torch.Tensor, masked: torch.Tensor, n: int | torch.Tensor) -> torch.Tensor:
    """Their `low_confidence_static` selection: per row, the min(n, #masked) most confident masked slots.

    conf (B, L) (upstream_confidence's, any dtype); masked (B, L) bool; n int or (B,). -> (B, L) bool.
    Ties: the lowest slot first (their torch.topk leaves it unspecified; see the module docstring)."""
    score = torch.where(masked, conf, torch.full_like(conf, float("-inf")))  # (B, L)
    order = torch.sort(score, dim=1, descending=True, stable=True).indices  # (B, L) stable: ties low-first
    B, L = conf.shape
    n = torch.as_tensor(n, device=conf.device).expand(B)
    rank_ok = torch.arange(L, device=conf.device)[None, :] < n[:, None]  # (B, L) the first n ranks
    sel = torch.zeros_like(masked).scatter_(1, order, rank_ok)
    return sel & masked  # never more than the masked slots
