"""One place that decides Triton vs the PyTorch reference for every kernel.

Rule: use Triton when the input tensor is on CUDA and the Triton kernels
import; otherwise use the PyTorch reference (``reference.py``). The
environment variable ``MRP_REPRO_KERNELS`` overrides this:

- ``auto`` (default): the rule above;
- ``torch``: always the reference;
- ``triton``: always Triton; on CPU this works only with ``TRITON_INTERPRET=1``
  (the Triton interpreter), otherwise a ``RuntimeError`` says so.

The decision and its reason are logged once per (kernel, backend, reason) on
the ``mrp_repro.kernels`` logger. Importing this module never imports triton.
"""

from __future__ import annotations

import importlib
import logging
import os

import torch

from . import reference as _ref
from .reference import ConfidenceOut, ResidualConfidenceOut

__all__ = [
    "confidence",
    "residual_confidence",
    "residual_kl",
    "select_backend",
    "triton_available",
    "ENV_VAR",
]

ENV_VAR = "MRP_REPRO_KERNELS"
logger = logging.getLogger("mrp_repro.kernels")
_logged: set = set()
_triton_state: tuple[bool, str] | None = None


def _interpret() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "yes", "on")


def triton_available() -> tuple[bool, str]:
    """(ok, detail): whether the Triton kernel modules import (cached)."""
    global _triton_state
    if _triton_state is None:
        try:
            importlib.import_module(".triton_confidence", __package__)
            importlib.import_module(".triton_residual_kl", __package__)
            _triton_state = (True, "triton imports")
        except Exception as exc:  # ImportError, or a broken triton install
            _triton_state = (False, f"triton unavailable ({type(exc).__name__}: {exc})")
    return _triton_state


def _mode() -> str:
    mode = os.environ.get(ENV_VAR, "auto").strip().lower() or "auto"
    if mode not in ("auto", "torch", "triton"):
        raise ValueError(f"{ENV_VAR}={mode!r}: expected one of auto, torch, triton")
    return mode


def select_backend(x: torch.Tensor) -> tuple[str, str]:
    """Return (backend, reason) for a kernel call whose main input is ``x``."""
    mode = _mode()
    if mode == "torch":
        return "torch", f"{ENV_VAR}=torch forces the PyTorch reference"
    if mode == "triton":
        ok, detail = triton_available()
        if not ok:
            raise RuntimeError(f"{ENV_VAR}=triton but {detail}")
        if not x.is_cuda and not _interpret():
            raise RuntimeError(
                f"{ENV_VAR}=triton with a {x.device.type} tensor: Triton on CPU works only "
                "under the interpreter; set TRITON_INTERPRET=1 before triton is imported, "
                f"or unset {ENV_VAR}"
            )
        where = "CUDA" if x.is_cuda else "CPU via TRITON_INTERPRET=1"
        return "triton", f"{ENV_VAR}=triton forces Triton ({where})"
    if not x.is_cuda:
        return "torch", f"tensor on {x.device.type}: PyTorch reference (Triton needs CUDA)"
    ok, detail = triton_available()
    if not ok:
        return "torch", f"tensor on CUDA but {detail}: PyTorch reference"
    return "triton", "tensor on CUDA and triton imports: Triton kernels"


def _choose(kernel: str, x: torch.Tensor) -> str:
    backend, reason = select_backend(x)
    key = (kernel, backend, reason)
    if key not in _logged:
        _logged.add(key)
        logger.info("%s: using %s backend (%s)", kernel, backend, reason)
    return backend


def confidence(logits: torch.Tensor, return_entropy: bool = False) -> ConfidenceOut:
    """Per row of logits [N, V]: (argmax int64, max_prob fp32, entropy fp32 | None).

    argmax ties resolve to the lowest index; no [N, V] softmax on the Triton path.
    """
    if _choose("confidence", logits) == "triton":
        from .triton_confidence import confidence as _k

        return _k(logits, return_entropy)
    return _ref.confidence_ref(logits, return_entropy)


def residual_confidence(
    A: torch.Tensor,
    C: torch.Tensor,
    scale: float = 1.0,
    tokens: torch.Tensor | None = None,
    return_entropy: bool = False,
) -> ResidualConfidenceOut:
    """Confidence of Z = A + scale*C plus, for given tokens, C[row, tok],
    log_softmax(Z)[row, tok] and log_softmax(A)[row, tok] (see ResidualConfidenceOut)."""
    if _choose("residual_confidence", A) == "triton":
        from .triton_confidence import residual_confidence as _k

        return _k(A, C, scale, tokens, return_entropy)
    return _ref.residual_confidence_ref(A, C, scale, tokens, return_entropy)


def residual_kl(A: torch.Tensor, C: torch.Tensor, B: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """Per-row KL(softmax(B) || softmax(A + scale*C)), fp32 [N], differentiable in C only."""
    if _choose("residual_kl", C) == "triton":
        from .triton_residual_kl import residual_kl as _k

        return _k(A, C, B, scale)
    return _ref.residual_kl_ref(A, C, B, scale)
