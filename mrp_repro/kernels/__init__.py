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


# The submodules ``confidence.py`` and ``residual_kl.py`` share their names with
# the public functions. Importing a submodule makes Python set it as an
# attribute of this package, which would shadow the dispatch functions. Keep
# the functions: reach the Triton modules with
# ``importlib.import_module("mrp_repro.kernels.confidence")`` (or sys.modules).
import sys as _sys
import types as _types


class _KernelsPackage(_types.ModuleType):
    _PROTECTED = ("confidence", "residual_kl")

    def __setattr__(self, name, value):
        if name in self._PROTECTED and isinstance(value, _types.ModuleType):
            return  # keep the dispatch function; the module stays in sys.modules
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _KernelsPackage
