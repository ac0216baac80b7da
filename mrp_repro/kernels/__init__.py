"""Decoding / training hot-path kernels for MRP (Triton, with PyTorch references).

Public API (use only these; they dispatch to Triton on CUDA, to the PyTorch
reference elsewhere, overridable with ``MRP_REPRO_KERNELS=auto|torch|triton``):

- ``confidence(logits, return_entropy=False) -> ConfidenceOut``
- ``residual_confidence(A, C, scale=1.0, tokens=None, return_entropy=False)
  -> ResidualConfidenceOut``
- ``residual_kl(A, C, B, scale=1.0) -> kl [N]`` (autograd w.r.t. C)
- ``check_against_reference(device, vocab, dtypes, strict=True) -> DataFrame``:
  the Triton kernels against the references on a device (``kernels.bench``)

Importing this package needs neither a GPU nor triton.
"""

import torch as _torch

from .dispatch import ENV_VAR, confidence, residual_confidence, residual_kl, select_backend, triton_available
from .reference import ConfidenceOut, ResidualConfidenceOut


def check_against_reference(
    device="cuda", vocab: int = 151936, dtypes=(_torch.float32, _torch.bfloat16), *, strict: bool = True
):
    """The Triton kernels (not the dispatch) against the PyTorch references on ``device``, one row per check
    (check, dtype, max_abs_err, atol, ok), split and batch invariance included; see kernels.bench."""
    from .bench import check_against_reference as _check

    return _check(device, vocab, dtypes, strict=strict)


__all__ = [
    "confidence",
    "residual_confidence",
    "residual_kl",
    "select_backend",
    "triton_available",
    "ConfidenceOut",
    "ResidualConfidenceOut",
    "ENV_VAR",
    "check_against_reference",
]

