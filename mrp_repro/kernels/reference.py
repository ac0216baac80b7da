"""PyTorch reference implementations of the decoding / training hot-path kernels.

These are the ground truth for the Triton kernels in ``triton_confidence.py`` and
``triton_residual_kl.py`` and the fallback the dispatcher uses on CPU. They
materialise ``[N, V]`` intermediates (that is what the Triton kernels avoid),
but all math is done in float32 (or float64 when the inputs are float64, which
``torch.autograd.gradcheck`` needs).

Tie rule for argmax (shared by every implementation in this package): the
LOWEST vocabulary index among the entries equal to the row maximum. We do not
rely on ``torch.argmax``'s behaviour (documented as "first maximal value" on
both CPU and CUDA in current PyTorch) but spell the rule out explicitly.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = [
    "ConfidenceOut",
    "ResidualConfidenceOut",
    "confidence_ref",
    "residual_confidence_ref",
    "residual_kl_ref",
]


class ConfidenceOut(NamedTuple):
    """Greedy token, its probability and (optionally) the entropy, per row."""

    argmax: torch.Tensor  # int64 [N]: lowest index of the row maximum
    max_prob: torch.Tensor  # fp32 [N]: softmax(x)[argmax]
    entropy: torch.Tensor | None  # fp32 [N] or None: -sum p log p (nats)


class ResidualConfidenceOut(NamedTuple):
    """Confidence of the corrected logits Z = A + s*C, plus per-token gathers."""

    argmax: torch.Tensor  # int64 [N]: argmax of Z (lowest index on ties)
    max_prob: torch.Tensor  # fp32 [N]: softmax(Z)[argmax]
    entropy: torch.Tensor | None  # fp32 [N] or None
    c_at_token: torch.Tensor | None  # fp32 [N]: C[row, tokens[row]] (unscaled)
    logp_at_token: torch.Tensor | None  # fp32 [N]: log_softmax(Z)[row, tok]
    logp_base_at_token: torch.Tensor | None  # fp32 [N]: log_softmax(A)[row, tok]


def _math_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _confidence_from_logits(z: torch.Tensor, return_entropy: bool):
    # One max pass gives the value and the first index on ties (torch.max documents "the indices of the first
    # maximal value"); then softmax(z)[argmax] = 1 / sum(exp(z - max)). logsumexp + argmax + gather read z five
    # times: at vocabulary 151,936 on CPU that was a quarter of a decode.
    zmax, am = z.max(dim=-1)
    sum_exp = (z - zmax[:, None]).exp_().sum(-1)
    lse = zmax + sum_exp.log()
    max_prob = sum_exp.reciprocal()
    ent = None
    if return_entropy:
        logp = z - lse[:, None]
        ent = -(logp.exp() * logp).sum(-1)
    return am, max_prob, ent, lse


def confidence_ref(logits: torch.Tensor, return_entropy: bool = False) -> ConfidenceOut:
    """Reference for :func:`mrp_repro.kernels.confidence`."""
    if logits.dim() != 2:
        raise ValueError(f"logits must be [N, V], got shape {tuple(logits.shape)}")
    z = logits.to(_math_dtype(logits))
    am, mp, ent, _ = _confidence_from_logits(z, return_entropy)
    f = torch.float32 if z.dtype == torch.float32 else z.dtype
    return ConfidenceOut(am, mp.to(f), None if ent is None else ent.to(f))


def residual_confidence_ref(
    A: torch.Tensor,
    C: torch.Tensor,
    scale: float = 1.0,
    tokens: torch.Tensor | None = None,
    return_entropy: bool = False,
) -> ResidualConfidenceOut:
    """Reference for :func:`mrp_repro.kernels.residual_confidence` (Z = A + scale*C)."""
    if A.dim() != 2 or A.shape != C.shape:
        raise ValueError(f"A and C must both be [N, V]; got {tuple(A.shape)} and {tuple(C.shape)}")
    md = _math_dtype(A)
    a = A.to(md)
    c = C.to(md)
    z = a + float(scale) * c
    am, mp, ent, lse_z = _confidence_from_logits(z, return_entropy)
    c_tok = lp = lpb = None
    if tokens is not None:
        t = tokens.to(torch.int64)[:, None]
        c_tok = c.gather(-1, t).squeeze(-1)
        lp = z.gather(-1, t).squeeze(-1) - lse_z
        lpb = a.gather(-1, t).squeeze(-1) - torch.logsumexp(a, dim=-1)
    return ResidualConfidenceOut(am, mp, ent, c_tok, lp, lpb)


def residual_kl_ref(A: torch.Tensor, C: torch.Tensor, B: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """Per-row forward KL( softmax(B) || softmax(A + scale*C) ), differentiable in C.

    A and B are treated as constants (frozen backbone): they are detached, so
    the gradient flows to C only, exactly like the Triton autograd path.
    Math in float32 (float64 for float64 inputs); returns that dtype, [N].
    """
    if not (A.dim() == 2 and A.shape == C.shape == B.shape):
        raise ValueError(
            f"A, C, B must share one [N, V] shape; got {tuple(A.shape)}, {tuple(C.shape)}, {tuple(B.shape)}"
        )
    md = _math_dtype(C)
    z = A.detach().to(md) + float(scale) * C.to(md)
    logq = torch.log_softmax(z, dim=-1)
    logp = torch.log_softmax(B.detach().to(md), dim=-1)
    return (logp.exp() * (logp - logq)).sum(-1)
