"""Triton kernels: the MRP training loss KL(softmax(B) || softmax(A + s*C)) per row.

Forward: one program per row streams A, C, B once over V (chunks of BLOCK) with
per-lane online log-sum-exp for Z = A + s*C and for B, plus the running
``sum exp(B - max B) * (B - Z)``; it writes the KL and the two per-row
log-sum-exps (O(N) extra memory). Per row:

    KL = E_{p_B}[B - Z] - (lse_B - lse_Z)

Backward (gradient w.r.t. C only; A and B come from the frozen backbone):
``dC = g * s * (softmax(Z) - softmax(B))``, recomputed chunk by chunk from the
saved log-sum-exps on a 2-D grid (rows x V-chunks). The only [N, V] tensor is
the gradient itself.

This module imports triton at the top: use it through ``mrp_repro.kernels``.
Reference: ``mrp_repro.kernels.reference.residual_kl_ref``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .fallback import report_fallback
from .triton_confidence import _SUPPORTED, check_device

__all__ = ["residual_kl", "ResidualKLFunction"]


@triton.jit
def _residual_kl_fwd_kernel(
    a_ptr,  # *fp32|bf16|fp16 [N, V] backbone logits before the reveal (constant)
    c_ptr,  # *fp32|bf16|fp16 [N, V] MRP residual logits (trained)
    b_ptr,  # *fp32|bf16|fp16 [N, V] backbone logits after the reveal (target, constant)
    stride_a,  # row stride of A (elements)
    stride_c,  # row stride of C
    stride_b,  # row stride of B
    scale,  # fp32 s in Z = A + s*C
    V,  # vocabulary size
    kl_ptr,  # *fp32 [N] out: KL(softmax(B) || softmax(Z))
    lse_z_ptr,  # *fp32 [N] out: logsumexp(Z), saved for backward
    lse_b_ptr,  # *fp32 [N] out: logsumexp(B), saved for backward
    BLOCK: tl.constexpr,  # columns per loop iteration (power of two)
):
    row = tl.program_id(0).to(tl.int64)
    lanes = tl.arange(0, BLOCK)
    mz = tl.full([BLOCK], float("-inf"), tl.float32)
    sz = tl.zeros([BLOCK], tl.float32)
    mb = tl.full([BLOCK], float("-inf"), tl.float32)
    sb = tl.zeros([BLOCK], tl.float32)
    u = tl.zeros([BLOCK], tl.float32)  # sum exp(B - mb) * (B - Z), per lane
    for k in range(0, V, BLOCK):
        offs = k + lanes
        mask = offs < V
        a = tl.load(a_ptr + row * stride_a + offs, mask=mask, other=0.0).to(tl.float32)
        c = tl.load(c_ptr + row * stride_c + offs, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + row * stride_b + offs, mask=mask, other=0.0).to(tl.float32)
        z = a + scale * c
        # online lse of Z (one exp per element)
        nz = mask & (z > mz)
        ez = tl.where(mask, tl.exp(-tl.abs(z - mz)), 0.0)
        sz = tl.where(nz, sz * ez + 1.0, sz + ez)
        mz = tl.where(nz, z, mz)
        # online lse of B and the p_B-weighted sum of (B - Z)
        nb = mask & (b > mb)
        eb = tl.where(mask, tl.exp(-tl.abs(b - mb)), 0.0)
        d = b - z
        sb = tl.where(nb, sb * eb + 1.0, sb + eb)
        u = tl.where(nb, u * eb + d, u + eb * d)
        mb = tl.where(nb, b, mb)
    Mz = tl.max(mz, axis=0)
    Sz = tl.sum(tl.where(sz > 0, sz * tl.exp(mz - Mz), 0.0), axis=0)
    Mb = tl.max(mb, axis=0)
    wb = tl.where(sb > 0, tl.exp(mb - Mb), 0.0)
    Sb = tl.sum(sb * wb, axis=0)
    U = tl.sum(u * wb, axis=0)
    kl = U / Sb - ((Mb - Mz) + tl.log(Sb / Sz))
    tl.store(kl_ptr + row, kl)
    tl.store(lse_z_ptr + row, Mz + tl.log(Sz))
    tl.store(lse_b_ptr + row, Mb + tl.log(Sb))


@triton.jit
def _residual_kl_bwd_kernel(
    a_ptr,  # *A [N, V] backbone logits (constant)
    c_ptr,  # *C [N, V] residual logits
    b_ptr,  # *B [N, V] target logits (constant)
    dc_ptr,  # *C.dtype [N, V] out: dKL/dC, same strides as C
    stride_a,  # row stride of A
    stride_c,  # row stride of C and of dC
    stride_b,  # row stride of B
    scale,  # fp32 s
    V,  # vocabulary size
    lse_z_ptr,  # *fp32 [N] logsumexp(Z) from the forward
    lse_b_ptr,  # *fp32 [N] logsumexp(B) from the forward
    g_ptr,  # *fp32 [N] upstream gradient dL/dKL
    BLOCK: tl.constexpr,  # columns per program (power of two)
):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < V
    a = tl.load(a_ptr + row * stride_a + offs, mask=mask, other=0.0).to(tl.float32)
    c = tl.load(c_ptr + row * stride_c + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + row * stride_b + offs, mask=mask, other=0.0).to(tl.float32)
    lse_z = tl.load(lse_z_ptr + row)
    lse_b = tl.load(lse_b_ptr + row)
    g = tl.load(g_ptr + row)
    z = a + scale * c
    dc = (g * scale) * (tl.exp(z - lse_z) - tl.exp(b - lse_b))
    tl.store(dc_ptr + row * stride_c + offs, dc.to(dc_ptr.dtype.element_ty), mask=mask)


def _check(A, C, B):
    for name, x in (("A", A), ("C", C), ("B", B)):
        if not isinstance(x, torch.Tensor) or x.dim() != 2:
            raise ValueError(f"{name} must be a 2-D [N, V] tensor")
        if x.dtype not in _SUPPORTED:
            raise TypeError(f"{name}: dtype {x.dtype} not supported (float32, bfloat16, float16)")
        if not x.is_contiguous():
            raise ValueError(f"{name} must be contiguous")
        check_device(name, x)
    if not (A.shape == C.shape == B.shape):
        raise ValueError(f"shapes differ: A {tuple(A.shape)}, C {tuple(C.shape)}, B {tuple(B.shape)}")
    if not (A.device == C.device == B.device):
        raise ValueError("A, C, B must be on one device")
    if A.requires_grad or B.requires_grad:
        raise ValueError("residual_kl differentiates w.r.t. C only; detach A and B (frozen backbone)")


class ResidualKLFunction(torch.autograd.Function):
    """Autograd wrapper: forward/backward Triton kernels, gradient w.r.t. C only."""

    @staticmethod
    def forward(ctx, A, C, B, scale: float, block: int, bwd_block: int):
        n, v = A.shape
        dev = A.device
        kl = torch.empty(n, dtype=torch.float32, device=dev)
        lse_z = torch.empty(n, dtype=torch.float32, device=dev)
        lse_b = torch.empty(n, dtype=torch.float32, device=dev)
        if n:
            _residual_kl_fwd_kernel[(n,)](
                A,
                C,
                B,
                A.stride(0),
                C.stride(0),
                B.stride(0),
                float(scale),
                v,
                kl,
                lse_z,
                lse_b,
                BLOCK=block,
                num_warps=8 if block >= 2048 else 4,
            )
        ctx.save_for_backward(A, C, B, lse_z, lse_b)
        ctx.scale = float(scale)
        ctx.bwd_block = bwd_block
        return kl

    @staticmethod
    def backward(ctx, g):
        A, C, B, lse_z, lse_b = ctx.saved_tensors
        n, v = A.shape
        dC = torch.empty_like(C)
        if n:
            g = g.to(torch.float32).contiguous()
            blk = ctx.bwd_block
            try:
                _residual_kl_bwd_kernel[(n, triton.cdiv(v, blk))](
                    A,
                    C,
                    B,
                    dC,
                    A.stride(0),
                    C.stride(0),
                    B.stride(0),
                    ctx.scale,
                    v,
                    lse_z,
                    lse_b,
                    g,
                    BLOCK=blk,
                    num_warps=4,
                )
            except Exception as exc:  # the forward compiled but the backward did not: same fallback, same warning
                report_fallback("residual_kl", exc, "backward")
                z = A.float() + ctx.scale * C.float()
                dC = ((g * ctx.scale)[:, None] * (torch.softmax(z, -1) - torch.softmax(B.float(), -1))).to(C.dtype)
        return None, dC, None, None, None, None


def residual_kl(
    A: torch.Tensor,
    C: torch.Tensor,
    B: torch.Tensor,
    scale: float = 1.0,
    *,
    block: int | None = None,
    bwd_block: int | None = None,
) -> torch.Tensor:
    """Per-row KL(softmax(B) || softmax(A + scale*C)) -> fp32 [N], differentiable in C.

    A, C, B: contiguous [N, V] float32/bfloat16/float16 tensors on CUDA (CPU
    under TRITON_INTERPRET=1). A and B must not require grad. Extra memory in
    forward: 3 fp32 values per row; backward writes dC (dtype of C) only.
    """
    _check(A, C, B)
    v = A.shape[1]
    if block is None:
        block = 2048 if v >= 2048 else triton.next_power_of_2(v)
    if bwd_block is None:
        bwd_block = 1024 if v >= 1024 else triton.next_power_of_2(v)
    for b_ in (block, bwd_block):
        if b_ & (b_ - 1):
            raise ValueError(f"block sizes must be powers of two, got {b_}")
    return ResidualKLFunction.apply(A, C, B, scale, block, bwd_block)
