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

Fallback (auto mode): when a Triton kernel fails to compile or launch (a
``CompilationError`` from Triton's code generator, ptxas, out of resources, a
driver error), the call is answered by the PyTorch reference and that kernel
stays on the reference for the rest of the process, with ONE warning
(``RuntimeWarning`` and a log line) that names the kernel and the error. Bad
input (``ValueError``/``TypeError`` from the wrappers' checks) is raised, not
hidden, and ``MRP_REPRO_KERNELS=triton`` raises instead of falling back.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable

import torch

from . import fallback as _fb
from . import reference as _ref
from .fallback import ENV_VAR, report_fallback
from .reference import ConfidenceOut, ResidualConfidenceOut

__all__ = [
    "confidence",
    "residual_confidence",
    "residual_kl",
    "select_backend",
    "triton_available",
    "report_fallback",
    "ENV_VAR",
]

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


def _is_cuda(x: torch.Tensor) -> bool:
    return x.is_cuda  # one place, so a test can take the CUDA branch of the rule with CPU tensors


def select_backend(x: torch.Tensor, kernel: str | None = None) -> tuple[str, str]:
    """Return (backend, reason) for a call of ``kernel`` whose main input is ``x``."""
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
    if not _is_cuda(x):
        return "torch", f"tensor on {x.device.type}: PyTorch reference (Triton needs CUDA)"
    ok, detail = triton_available()
    if not ok:
        return "torch", f"tensor on CUDA but {detail}: PyTorch reference"
    if kernel in _fb.failed:
        return "torch", f"the Triton kernel failed earlier ({_fb.failed[kernel]}): PyTorch reference"
    return "triton", "tensor on CUDA and triton imports: Triton kernels"


def _run(kernel: str, x: torch.Tensor, fast: Callable, ref: Callable):
    """``fast()`` (Triton) when the dispatch rule picks Triton and it works, else ``ref()``."""
    if _choose(kernel, x) == "triton":
        try:
            return fast()
        except (ValueError, TypeError):
            raise  # bad input, found by the wrappers' checks: the caller's to fix, not a kernel failure
        except Exception as exc:  # CompilationError, PTXASError, OutOfResources, a driver error, ...
            if _mode() == "triton":
                raise
            report_fallback(kernel, exc)
    return ref()


def _choose(kernel: str, x: torch.Tensor) -> str:
    backend, reason = select_backend(x, kernel)
    key = (kernel, backend, reason)
    if key not in _logged:
        _logged.add(key)
        logger.info("%s: using %s backend (%s)", kernel, backend, reason)
    return backend


def confidence(logits: torch.Tensor, return_entropy: bool = False) -> ConfidenceOut:
    """Per row of logits [N, V]: (argmax int64, max_prob fp32, entropy fp32 | None).

    argmax ties resolve to the lowest index; no [N, V] softmax on the Triton path.
    """

    def fast():
        from .triton_confidence import confidence as _k

        return _k(logits, return_entropy)

    return _run("confidence", logits, fast, lambda: _ref.confidence_ref(logits, return_entropy))


def residual_confidence(
    A: torch.Tensor,
    C: torch.Tensor,
    scale: float = 1.0,
    tokens: torch.Tensor | None = None,
    return_entropy: bool = False,
) -> ResidualConfidenceOut:
    """Confidence of Z = A + scale*C plus, for given tokens, C[row, tok],
    log_softmax(Z)[row, tok] and log_softmax(A)[row, tok] (see ResidualConfidenceOut)."""

    def fast():
        from .triton_confidence import residual_confidence as _k

        return _k(A, C, scale, tokens, return_entropy)

    return _run("residual_confidence", A, fast,
                lambda: _ref.residual_confidence_ref(A, C, scale, tokens, return_entropy))  # fmt: skip


def residual_kl(A: torch.Tensor, C: torch.Tensor, B: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """Per-row KL(softmax(B) || softmax(A + scale*C)), fp32 [N], differentiable in C only.

    A backward kernel that fails falls back inside the autograd function (triton_residual_kl)."""

    def fast():
        from .triton_residual_kl import residual_kl as _k

        return _k(A, C, B, scale)

    return _run("residual_kl", C, fast, lambda: _ref.residual_kl_ref(A, C, B, scale))
