"""Batch-invariant numerics (issue 36): an opt-in mode in which every reduction of the forward has an order that does
not depend on how many rows are in the batch, so row r of a folded verify (B x M rows) equals the batch-1 (or
batch-B) block forward bit for bit on any device, and verify is one call with no check and no fallback.

    from mrp_repro.kernels.batch_invariant import batch_invariant
    with batch_invariant():                      # "auto": Triton kernels on CUDA, the PyTorch reference elsewhere
        generate(model, prompts, Speculative(3, "mrp", head=head), ...)   # verify "exact" = one folded call
    with batch_invariant("triton"):              # force the Triton kernels (on CPU: TRITON_INTERPRET=1)

What the mode answers (a torch function mode: model.py's code is unchanged; every other op runs as torch runs it):

  F.linear                 GEMM, fp32 accumulation. Reference: the sum over K in index order (k = 0, 1, ...), one
                           fp32 multiply and one fp32 add per term, so every output element's rounding is a function
                           of its own row and column only. Triton (triton_batch_invariant.matmul): fixed tiles
                           chosen from (N, K) alone, the K loop in order, no split-K.
  F.scaled_dot_product_attention
                           softmax attention, fp32. Reference: scores as the in-order sum over head_dim; exact max;
                           the exponentials' sum and P @ V as in-order sums over the keys. Triton: one program per
                           (batch, head, 16 queries), the keys in a fixed chunk of 64 (online softmax), so the split
                           of the keys never depends on the batch.
  Tensor.mean / torch.mean over the last dim (RMSNorm under our numerics), F.rms_norm (upstream numerics:
                           normalise and scale in fp32, one rounding), softmax / log_softmax over the last dim:
                           per-row in-order sums (Triton: one program per row, a fixed block).

Elementwise ops are batch-invariant already (each element is its own computation); embedding lookups, the KV cache's
torch.cat and the masks are exact. The decoding's confidence kernels (kernels.confidence) are batch-invariant by
construction on every backend (triton_confidence's tiles depend on V only; the reference is per row).

Not covered: flash-attn's flash_attn_func (the upstream numerics' unmasked call, where the optional package is
installed on CUDA) is not a torch function, so this mode cannot answer it: there the upstream family's all-ones-mask
calls keep flash-attn's batch-dependent split (gpu_check's environment section says whether flash-attn is installed).

The reference is slow by design (one torch op per term of every sum): it is the specification, for CPU tests at toy
widths and for checking the Triton kernels on a device (gpu_check's batch_invariant section), never a fast path.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

__all__ = ["IMPLS", "KERNEL_NUMERICS", "BatchInvariant", "active", "batch_invariant", "kernel_numerics", "linear_ref",
           "attention_ref", "mean_ref", "rms_norm_ref", "softmax_ref"]  # fmt: skip

IMPLS = ("auto", "torch", "triton")
#: decoding.kernel_numerics (a profile's setting, read by Backbone.generate through kernel_numerics()): "default", the
#: kernels torch picks; "batch_invariant", this mode ("auto": Triton on CUDA, the reference elsewhere)
KERNEL_NUMERICS = ("default", "batch_invariant")
_depth = [0]  # modes entered and not yet left (active())


def active() -> bool:
    """True inside a batch_invariant() block (model.resolve_verify then takes "exact" as "fold")."""
    return _depth[0] > 0


# -- the reference: in-order sums, elementwise fp32 ops only ----------------------------------------------------------
def _seq_sum(x: torch.Tensor, dim: int) -> torch.Tensor:
    """The fp32 sum of x along `dim` in index order: ((x0 + x1) + x2) + ..., one add per term."""
    x = x.float().movedim(dim, 0)
    acc = x[0].clone()
    for i in range(1, x.shape[0]):
        acc = acc + x[i]
    return acc


def linear_ref(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    """x (..., K) @ w (N, K).T (+ b), fp32 in-order accumulation over K, one rounding to x's dtype."""
    K = x.shape[-1]
    xf, wf = x.reshape(-1, K).float(), w.float()
    acc = xf[:, 0:1] * wf[:, 0]
    for k in range(1, K):
        acc = acc + xf[:, k : k + 1] * wf[:, k]
    if b is not None:
        acc = acc + b.float()
    return acc.to(x.dtype).reshape(*x.shape[:-1], w.shape[0])


def attention_ref(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """SDPA's contract (q (B, H, T, D), k, v (B, Hkv, S, D), a bool or additive mask broadcastable to (B, H, T, S)),
    every sum in index order in fp32; the output cast to q's dtype."""
    if dropout_p or is_causal:
        raise NotImplementedError("batch-invariant attention: no dropout, no is_causal (pass the mask)")
    H, Hk = q.shape[1], k.shape[1]
    if Hk != H:
        k, v = (t.repeat_interleave(H // Hk, 1) for t in (k, v))
    sc = q.shape[-1] ** -0.5 if scale is None else scale
    qf, kf, vf = q.float(), k.float(), v.float()
    s = _seq_sum(qf[..., :, None, :] * kf[..., None, :, :], -1) * sc  # (B, H, T, S)
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else s + attn_mask.float()
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp(s - m)
    den = _seq_sum(p, -1)[..., None]
    num = _seq_sum(p[..., None] * vf[..., None, :, :], -2)  # (B, H, T, D)
    return (num / den).to(q.dtype)


def mean_ref(x: torch.Tensor, keepdim: bool = False, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The mean over the last dim: the in-order fp32 sum / n, cast to x's dtype (or `dtype`)."""
    out = (_seq_sum(x, -1) / x.shape[-1]).to(dtype or x.dtype)
    return out[..., None] if keepdim else out


def rms_norm_ref(x, normalized_shape, weight=None, eps=None):
    """F.rms_norm's contract over the last dim: x * rsqrt(mean(x^2) + eps) * weight in fp32, one rounding."""
    if len(tuple(normalized_shape)) != 1:
        raise NotImplementedError("batch-invariant rms_norm: the last dim only")
    eps = torch.finfo(x.dtype).eps if eps is None else eps
    xf = x.float()
    y = xf * torch.rsqrt(mean_ref(xf * xf, keepdim=True) + eps)
    return (y * weight.float() if weight is not None else y).to(x.dtype)


def softmax_ref(x: torch.Tensor, log: bool = False, dtype: torch.dtype | None = None) -> torch.Tensor:
    """softmax (log_softmax) over the last dim with an in-order fp32 sum of the exponentials."""
    xf = x.float()
    m = xf.amax(-1, keepdim=True)
    z = xf - m
    s = _seq_sum(torch.exp(z), -1)[..., None]
    out = z - torch.log(s) if log else torch.exp(z) / s
    return out.to(dtype or x.dtype)


# -- the mode -------------------------------------------------------------------------------------------------------
def _interpret() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "yes", "on")


def _last_dim(x, dim) -> bool:
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() == 0:
        return False
    if isinstance(dim, list | tuple):
        dim = dim[0] if len(dim) == 1 else None
    return isinstance(dim, int) and dim in (-1, x.dim() - 1)


_MEANS = (torch.Tensor.mean, torch.mean)
_SOFTMAX = (F.softmax, torch.softmax, torch.Tensor.softmax)
_LOG_SOFTMAX = (F.log_softmax, torch.log_softmax, torch.Tensor.log_softmax)


_HANDLED = frozenset((F.linear, F.scaled_dot_product_attention, F.rms_norm) + _MEANS + _SOFTMAX + _LOG_SOFTMAX)


class BatchInvariant(TorchFunctionMode):
    """The mode (module docstring); `impl`: "auto" (Triton on CUDA tensors when triton imports, the reference
    elsewhere), "torch" (the reference), "triton" (the kernels; CPU tensors need TRITON_INTERPRET=1).
    `calls` counts the calls answered, per (op, impl)."""

    def __init__(self, impl: str = "auto"):
        super().__init__()
        if impl not in IMPLS:
            raise ValueError(f"batch_invariant impl={impl!r}: choose one of {IMPLS}")
        self.impl = impl
        self.calls: dict = {}

    def __enter__(self):
        _depth[0] += 1
        return super().__enter__()

    def __exit__(self, *exc):
        _depth[0] -= 1
        return super().__exit__(*exc)

    def _use_triton(self, x: torch.Tensor) -> bool:
        if self.impl == "torch":
            return False
        if self.impl == "triton":
            if not x.is_cuda and not _interpret():
                raise RuntimeError("batch_invariant('triton') on a CPU tensor needs TRITON_INTERPRET=1 set before "
                                   "triton is imported")  # fmt: skip
            return True
        if not x.is_cuda:
            return False
        from .dispatch import triton_available

        return triton_available()[0]

    def _count(self, op: str, triton: bool):
        key = (op, "triton" if triton else "torch")
        self.calls[key] = self.calls.get(key, 0) + 1

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func not in _HANDLED:
            return func(*args, **kwargs)
        # The answers below are elementwise torch ops (the reference) or Triton launches: no outer torch function
        # mode (a test's EmulatedGPU) needs to see them, and skipping it keeps the reference's many small ops cheap.
        with torch._C.DisableTorchFunction():
            return self._answer(func, args, kwargs)

    def _answer(self, func, args, kwargs):
        if func is F.linear:
            x = args[0]
            t = self._use_triton(x)
            self._count("linear", t)
            if t:
                from .triton_batch_invariant import linear

                return linear(*args, **kwargs)
            return linear_ref(*args, **kwargs)
        if func is F.scaled_dot_product_attention:
            t = self._use_triton(args[0])
            self._count("attention", t)
            if t:
                from .triton_batch_invariant import attention

                return attention(*args, **kwargs)
            return attention_ref(*args, **kwargs)
        dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
        if func in _MEANS and _last_dim(args[0] if args else None, dim):
            x = args[0]
            keepdim = kwargs.get("keepdim", args[2] if len(args) > 2 else False)
            t = self._use_triton(x)
            self._count("mean", t)
            if t:
                from .triton_batch_invariant import mean

                return mean(x, keepdim=keepdim, dtype=kwargs.get("dtype"))
            return mean_ref(x, keepdim=keepdim, dtype=kwargs.get("dtype"))
        if func is F.rms_norm:
            t = self._use_triton(args[0])
            self._count("rms_norm", t)
            if t:
                from .triton_batch_invariant import rms_norm

                return rms_norm(*args, **kwargs)
            return rms_norm_ref(*args, **kwargs)
        if func in _SOFTMAX or func in _LOG_SOFTMAX:
            x = args[0]
            if _last_dim(x, dim):
                log = func in _LOG_SOFTMAX
                t = self._use_triton(x)
                self._count("log_softmax" if log else "softmax", t)
                dtype = kwargs.get("dtype")
                if t:
                    from .triton_batch_invariant import softmax

                    return softmax(x, log=log, dtype=dtype)
                return softmax_ref(x, log=log, dtype=dtype)
        return func(*args, **kwargs)


@contextmanager
def batch_invariant(impl: str = "auto"):
    """Run the block with batch-invariant numerics (module docstring); yields the mode (its `calls`)."""
    mode = BatchInvariant(impl)
    with mode:
        yield mode


@contextmanager
def kernel_numerics(name: str, impl: str = "auto"):
    """The kernels a decode runs with for decoding.kernel_numerics = `name` (KERNEL_NUMERICS): "default" runs the
    block as it is (yields None), "batch_invariant" inside batch_invariant(impl) (yields the mode; inside a mode
    already entered, that one: yields None). Backbone.generate wraps both decoding families in it, so a profile's
    static and speculative runs share the mode. An unknown name is a ValueError naming the choices."""
    if name not in KERNEL_NUMERICS:
        raise ValueError(f"decoding.kernel_numerics={name!r}: choose one of {KERNEL_NUMERICS}")
    if name == "default" or active():
        yield None
        return
    with batch_invariant(impl) as mode:
        yield mode
