"""Which Triton kernels failed in this process, and the one warning each (used by dispatch and the autograd path).

A module of its own so that ``triton_residual_kl`` (whose backward can fail after its forward compiled) and
``dispatch`` share one record without importing each other.
"""

from __future__ import annotations

import logging
import os
import warnings

__all__ = ["ENV_VAR", "failed", "forced", "report_fallback"]

ENV_VAR = "MRP_REPRO_KERNELS"
logger = logging.getLogger("mrp_repro.kernels")
failed: dict[str, str] = {}  # kernel -> why its Triton path failed (that kernel then runs the reference)


def forced() -> bool:
    """MRP_REPRO_KERNELS=triton: a failing kernel raises instead of falling back."""
    return os.environ.get(ENV_VAR, "auto").strip().lower() == "triton"


def report_fallback(kernel: str, exc: BaseException, part: str = "") -> None:
    """Record that ``kernel``'s Triton path failed and warn, once per kernel; re-raise when Triton is forced.

    ``part`` names the failing piece when it is not the forward (e.g. "backward")."""
    if forced():
        raise exc
    if kernel in failed:
        return
    lines = str(exc).strip().splitlines()
    why = f"{type(exc).__name__}: {lines[-1][:200] if lines else ''}"
    failed[kernel] = why
    what = f"{kernel} ({part})" if part else kernel
    msg = (f"mrp_repro.kernels: the Triton kernel for {what} failed ({why}); {kernel} uses the PyTorch "
           f"reference for the rest of this process (set {ENV_VAR}=triton to get the error instead)")  # fmt: skip
    logger.warning(msg)
    warnings.warn(msg, RuntimeWarning, stacklevel=3)
