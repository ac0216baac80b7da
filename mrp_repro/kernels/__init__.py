"""Decoding / training hot-path kernels for MRP (Triton, with PyTorch references).

Public API (use only these; they dispatch to Triton on CUDA, to the PyTorch
reference elsewhere, overridable with ``MRP_REPRO_KERNELS=auto|torch|triton``):

- ``confidence(logits, return_entropy=False) -> ConfidenceOut``
- ``residual_confidence(A, C, scale=1.0, tokens=None, return_entropy=False)
  -> ResidualConfidenceOut``
- ``residual_kl(A, C, B, scale=1.0) -> kl [N]`` (autograd w.r.t. C)

Importing this package needs neither a GPU nor triton.
"""

from .dispatch import ENV_VAR, confidence, residual_confidence, residual_kl, select_backend, triton_available
from .reference import ConfidenceOut, ResidualConfidenceOut

__all__ = [
    "confidence",
    "residual_confidence",
    "residual_kl",
    "select_backend",
    "triton_available",
    "ConfidenceOut",
    "ResidualConfidenceOut",
    "ENV_VAR",
]

