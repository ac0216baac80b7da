"""Triton kernels of the batch-invariant numerics (kernels.batch_invariant, issue 36): a GEMM, softmax attention, a
row sum (mean, RMSNorm) and a row softmax whose reduction order never depends on the number of rows.

How: every launch parameter that shapes a reduction (tiles, the K step, the KV chunk, warps, stages) is a constant or
a function of the reduced length and the weight's shape only (N, K; head_dim; the row length), never of the row
count M, the batch or the GPU's SM count; there is no split-K and no split-KV, so one program owns every output
element's whole reduction and walks it in index order; the row count is excluded from Triton's specialisation
(do_not_specialize), so one binary serves every batch. A row's bits are then the same alone or among any number of
rows (tests/test_kernels_batch_invariant.py checks it under TRITON_INTERPRET=1; gpu_check's batch_invariant
section on the device; kernels.compile_check compiles every variant for sm_80 / sm_90).

The cost: a skinny GEMM (decode: M = 16 rows at batch 1) gets ceil(N / 64) programs and no split-K to fill the GPU,
so it can run below cuBLAS's bandwidth; gpu_check measures the mode against the default kernels.

This module imports triton at the top: import it through kernels.batch_invariant, which does so lazily.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

__all__ = ["linear", "attention", "mean", "rms_norm", "softmax", "matmul_config", "ATTN_BLOCK_M", "ATTN_BLOCK_N"]

ATTN_BLOCK_M = 16  # queries per attention program
ATTN_BLOCK_N = 64  # the fixed KV chunk: keys per step of the online softmax
_SUPPORTED = (torch.float32, torch.bfloat16, torch.float16)


def _interpret() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "yes", "on")


def _check(name: str, t: torch.Tensor):
    if t.dtype not in _SUPPORTED:
        raise TypeError(f"batch-invariant {name}: dtype {t.dtype} not supported ({_SUPPORTED})")
    if not t.is_cuda and not _interpret():
        raise RuntimeError(f"batch-invariant {name}: a {t.device.type} tensor needs TRITON_INTERPRET=1")


@triton.jit(do_not_specialize=["M"])
def _bi_matmul_kernel(x_ptr, w_ptr, b_ptr, o_ptr, M, N, K, stride_xm, stride_wn, stride_om,
                      HAS_BIAS: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr, BLOCK_M: tl.constexpr,
                      BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):  # fmt: skip
    """o[M, N] = x[M, K] @ w[N, K]^T (+ b): one program per BLOCK_M x BLOCK_N tile, K walked in order (no split)."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        a = tl.load(x_ptr + rm[:, None] * stride_xm + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K),
                    other=0.0)  # fmt: skip
        b = tl.load(w_ptr + rn[None, :] * stride_wn + kk[:, None], mask=(rn[None, :] < N) & (kk[:, None] < K),
                    other=0.0)  # fmt: skip
        if UPCAST:  # the interpreter's dot mishandles bf16 / fp16 operands; exact products in fp32 instead
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
        elif IEEE:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
    if HAS_BIAS:
        acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    tl.store(o_ptr + rm[:, None] * stride_om + rn[None, :], acc.to(o_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))  # fmt: skip


def matmul_config(N: int, K: int, dtype: torch.dtype) -> dict:
    """The GEMM's tiles from the weight's shape and dtype only (never the rows): BLOCK_M 64, BLOCK_N 64, BLOCK_K 64
    (32 in fp32), 4 warps, 3 stages."""
    return dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32 if dtype == torch.float32 else 64, num_warps=4, num_stages=3)


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear's contract: x (..., K) @ w (N, K)^T (+ b) in x's dtype, fp32 accumulation."""
    _check("linear", x)
    K, N = x.shape[-1], w.shape[0]
    x2 = x.reshape(-1, K)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    w = w.to(x.dtype) if w.dtype != x.dtype else w
    if w.stride(-1) != 1:
        w = w.contiguous()
    M = x2.shape[0]
    out = torch.empty(M, N, dtype=x.dtype, device=x.device)
    if M == 0 or N == 0:
        return out.reshape(*x.shape[:-1], N)
    cfg = matmul_config(N, K, x.dtype)
    grid = (triton.cdiv(M, cfg["BLOCK_M"]), triton.cdiv(N, cfg["BLOCK_N"]))
    _bi_matmul_kernel[grid](x2, w, b if b is not None else w, out, M, N, K, x2.stride(0), w.stride(0), out.stride(0),
                            HAS_BIAS=b is not None, IEEE=x.dtype == torch.float32,
                            UPCAST=_interpret() and x.dtype != torch.float32, **cfg)  # fmt: skip
    return out.reshape(*x.shape[:-1], N)


@triton.jit(do_not_specialize=["H", "T"])
def _bi_attention_kernel(q_ptr, k_ptr, v_ptr, m_ptr, o_ptr,
                         sqb, sqh, sqt, skb, skh, sks, svb, svh, svs, smb, smh, smt, sms, sob, soh, sot,
                         H, T, S, D, GROUP, scale,
                         HAS_MASK: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr, BLOCK_M: tl.constexpr,
                         BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):  # fmt: skip
    """One program per (batch x head, BLOCK_M queries); the S keys in chunks of BLOCK_N, in order (online softmax
    in fp32, P cast to V's dtype for P @ V); the last dim of q, k, v, o is contiguous."""
    pid_bh = tl.program_id(0)
    pid_m = tl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
    hk = h // GROUP
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rd = tl.arange(0, BLOCK_D)
    rn = tl.arange(0, BLOCK_N)
    q = tl.load(q_ptr + b * sqb + h * sqh + rm[:, None] * sqt + rd[None, :],
                mask=(rm[:, None] < T) & (rd[None, :] < D), other=0.0)  # fmt: skip
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for n0 in range(0, S, BLOCK_N):
        kn = n0 + rn
        k = tl.load(k_ptr + b * skb + hk * skh + kn[None, :] * sks + rd[:, None],
                    mask=(kn[None, :] < S) & (rd[:, None] < D), other=0.0)  # fmt: skip
        if UPCAST:
            s = tl.dot(q.to(tl.float32), k.to(tl.float32), input_precision="ieee") * scale
        elif IEEE:
            s = tl.dot(q, k, input_precision="ieee") * scale
        else:
            s = tl.dot(q, k) * scale
        valid = (kn[None, :] < S) & (rm[:, None] < T)
        if HAS_MASK:
            mk = tl.load(m_ptr + b * smb + h * smh + rm[:, None] * smt + kn[None, :] * sms, mask=valid, other=0)
            valid = valid & (mk != 0)
        s = tl.where(valid, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - m_safe)
        p = tl.exp(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + b * svb + hk * svh + kn[:, None] * svs + rd[None, :],
                    mask=(kn[:, None] < S) & (rd[None, :] < D), other=0.0)  # fmt: skip
        if UPCAST:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype).to(tl.float32), v.to(tl.float32), input_precision="ieee")
        elif IEEE:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    tl.store(o_ptr + b * sob + h * soh + rm[:, None] * sot + rd[None, :], out.to(o_ptr.dtype.element_ty),
             mask=(rm[:, None] < T) & (rd[None, :] < D))  # fmt: skip


def _last_contiguous(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """SDPA's contract for q (B, H, T, D), k, v (B, Hkv, S, D) and a bool mask broadcastable to (B, H, T, S)."""
    if dropout_p or is_causal:
        raise NotImplementedError("batch-invariant attention: no dropout, no is_causal (pass the mask)")
    if attn_mask is not None and attn_mask.dtype != torch.bool:
        raise NotImplementedError("batch-invariant attention (Triton): a bool mask only")
    _check("attention", q)
    B, H, T, D = q.shape
    Hk, S = k.shape[1], k.shape[2]
    if H % Hk:
        raise ValueError(f"batch-invariant attention: {H} heads are not a multiple of {Hk} KV heads")
    q, k, v = (_last_contiguous(t) for t in (q, k.to(q.dtype), v.to(q.dtype)))
    out = torch.empty(B, H, T, D, dtype=q.dtype, device=q.device)
    if attn_mask is not None:
        mask = attn_mask.expand(B, H, T, S).view(torch.uint8)
        ms = mask.stride()
    else:
        mask, ms = q, (0, 0, 0, 0)
    BLOCK_D = max(16, triton.next_power_of_2(D))
    grid = (B * H, triton.cdiv(T, ATTN_BLOCK_M))
    _bi_attention_kernel[grid](q, k, v, mask, out, q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1),
                               k.stride(2), v.stride(0), v.stride(1), v.stride(2), ms[0], ms[1], ms[2], ms[3],
                               out.stride(0), out.stride(1), out.stride(2), H, T, S, D, H // Hk,
                               float(D**-0.5 if scale is None else scale), HAS_MASK=attn_mask is not None,
                               IEEE=q.dtype == torch.float32, UPCAST=_interpret() and q.dtype != torch.float32,
                               BLOCK_M=ATTN_BLOCK_M, BLOCK_N=ATTN_BLOCK_N,
                               BLOCK_D=BLOCK_D, num_warps=4, num_stages=2)  # fmt: skip
    return out


@triton.jit
def _bi_row_sum_kernel(x_ptr, o_ptr, n, stride_x, BLOCK: tl.constexpr):
    """o[row] = the fp32 sum of x[row, :n]: BLOCK lanes walk the row in order, then one fixed tree over the lanes."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for c in range(0, n, BLOCK):
        acc += tl.load(x_ptr + row * stride_x + c + cols, mask=c + cols < n, other=0.0).to(tl.float32)
    tl.store(o_ptr + row, tl.sum(acc, 0))


def _row_block(n: int) -> int:
    return min(1024, max(16, triton.next_power_of_2(n)))


def _row_sum(x2: torch.Tensor) -> torch.Tensor:
    rows, n = x2.shape
    out = torch.empty(rows, dtype=torch.float32, device=x2.device)
    if rows:
        _bi_row_sum_kernel[(rows,)](x2, out, n, x2.stride(0), BLOCK=_row_block(n), num_warps=4)
    return out


def mean(x: torch.Tensor, keepdim: bool = False, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The mean over the last dim (fp32 sum / n, cast to x's dtype or `dtype`)."""
    _check("mean", x)
    n = x.shape[-1]
    s = _row_sum(_last_contiguous(x.reshape(-1, n))) / n
    out = s.to(dtype or x.dtype).reshape(*x.shape[:-1])
    return out[..., None] if keepdim else out


def rms_norm(x, normalized_shape, weight=None, eps=None):
    """F.rms_norm's contract over the last dim: x * rsqrt(mean(x^2) + eps) * weight in fp32, one rounding."""
    if len(tuple(normalized_shape)) != 1:
        raise NotImplementedError("batch-invariant rms_norm: the last dim only")
    eps = torch.finfo(x.dtype).eps if eps is None else eps
    xf = x.float()
    y = xf * torch.rsqrt(mean(xf * xf, keepdim=True) + eps)
    return (y * weight.float() if weight is not None else y).to(x.dtype)


@triton.jit
def _bi_softmax_kernel(x_ptr, o_ptr, n, stride_x, stride_o, LOG: tl.constexpr, BLOCK: tl.constexpr):
    """softmax (LOG: log_softmax) of x[row, :n] in fp32: max, the exponentials' sum (lanes in order, then a fixed
    tree), then the outputs; three passes over the row."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = tl.full((BLOCK,), float("-inf"), dtype=tl.float32)
    for c in range(0, n, BLOCK):
        m = tl.maximum(m, tl.load(x_ptr + row * stride_x + c + cols, mask=c + cols < n, other=float("-inf")).to(
            tl.float32))  # fmt: skip
    mx = tl.max(m, 0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for c in range(0, n, BLOCK):
        z = tl.load(x_ptr + row * stride_x + c + cols, mask=c + cols < n, other=float("-inf")).to(tl.float32)
        acc += tl.exp(z - mx)
    tot = tl.sum(acc, 0)
    for c in range(0, n, BLOCK):
        z = tl.load(x_ptr + row * stride_x + c + cols, mask=c + cols < n, other=0.0).to(tl.float32) - mx
        y = z - tl.log(tot) if LOG else tl.exp(z) / tot
        tl.store(o_ptr + row * stride_o + c + cols, y.to(o_ptr.dtype.element_ty), mask=c + cols < n)


def softmax(x: torch.Tensor, log: bool = False, dtype: torch.dtype | None = None) -> torch.Tensor:
    """softmax / log_softmax over the last dim, fp32 inside, the output in x's dtype (or `dtype`)."""
    _check("softmax", x)
    n = x.shape[-1]
    x2 = _last_contiguous(x.reshape(-1, n))
    out = torch.empty(x2.shape, dtype=dtype or x.dtype, device=x.device)
    if x2.shape[0]:
        _bi_softmax_kernel[(x2.shape[0],)](x2, out, n, x2.stride(0), out.stride(0), LOG=log, BLOCK=_row_block(n),
                                           num_warps=4)  # fmt: skip
    return out.reshape(x.shape)
