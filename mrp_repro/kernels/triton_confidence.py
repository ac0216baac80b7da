"""Triton kernels: greedy confidence of a logits row, fused with the MRP residual.

``confidence(logits)`` returns, per row of ``logits [N, V]``, the greedy token
(lowest index on ties), its probability ``max softmax`` and optionally the
entropy, in one pass over V. ``residual_confidence(A, C, scale, tokens)``
computes the same for the corrected logits ``Z = A + scale*C`` without ever
writing Z, and gathers ``C[row, tok]``, ``log_softmax(Z)[row, tok]`` and
``log_softmax(A)[row, tok]`` (the remasking rules of METHOD.md section 5).

Algorithm (online softmax, per lane): every one of the BLOCK lanes of a program
keeps its own running max ``m``, rescaled sum ``s = sum exp(x - m)``, entropy
numerator ``t = sum exp(x - m) * (x - m)`` and the index of its first maximum.
A new element costs ONE exp: ``e = exp(-|x - m|)`` is either the rescale factor
(new maximum) or the element's weight. Lanes are merged at the end of every
TILE (``TILE_BLOCKS`` blocks of fixed columns) into one partial per tile; a
second tiny kernel merges the tiles in an order fixed by the tile count and
finalises. Rows can be split over several programs (``num_splits``) so that
small N still fills the GPU, but a split only decides WHICH program reduces a
tile, never how: the bits of every output depend on V, ``block`` and
``num_warps`` only, not on N, the split count or the GPU's SM count (issue 30:
splits came from rows and SMs, 33 at 16 rows and 3 at 256 on an H200, and
rounded differently). Nothing of size [N, V] is allocated; extra memory is
O(N * tiles).

This module imports triton at the top: import it through
``mrp_repro.kernels`` (the dispatcher), which does so lazily.
Reference implementations: ``mrp_repro.kernels.reference``.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from .reference import ConfidenceOut, ResidualConfidenceOut

__all__ = ["confidence", "residual_confidence", "interpreter_enabled"]

_INT32_MAX = 2147483647  # host-side bound on V (a plain int: @triton.jit code may read only constexpr globals)
_NO_INDEX = tl.constexpr(2147483647)  # "no index yet" inside the kernels; larger than any column
TILE_BLOCKS = 4  # BLOCKs per tile when V holds at least that many (fewer partials; see _tiling)
_SUPPORTED = (torch.float32, torch.bfloat16, torch.float16)


def interpreter_enabled() -> bool:
    """True when TRITON_INTERPRET is set (kernels then run on CPU tensors)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "yes", "on")


@triton.jit
def _confidence_partial_kernel(
    a_ptr,  # *fp32|bf16|fp16 [N, V] logits (or the backbone logits A of Z = A + s*C)
    c_ptr,  # *fp32|bf16|fp16 [N, V] residual logits C (unused unless HAS_C)
    stride_a,  # row stride of A, in elements (last dim is contiguous)
    stride_c,  # row stride of C, in elements
    scale,  # fp32 scalar s in Z = A + s*C
    V,  # vocabulary size
    n_tiles,  # tiles per row: cdiv(V, TILE_BLOCKS * BLOCK), fixed by V and BLOCK alone
    tiles_per_split,  # tiles handled by one program (the last split may have fewer)
    pm_ptr,  # *fp32 [N, n_tiles] out: max of Z over the tile
    ps_ptr,  # *fp32 [N, n_tiles] out: sum exp(Z - max) over the tile
    pt_ptr,  # *fp32 [N, n_tiles] out: sum exp(Z - max) * (Z - max) (if WITH_ENTROPY)
    pidx_ptr,  # *int32 [N, n_tiles] out: lowest index attaining the tile max
    pma_ptr,  # *fp32 [N, n_tiles] out: max of A alone (if WITH_BASE_LSE)
    psa_ptr,  # *fp32 [N, n_tiles] out: sum exp(A - max A) (if WITH_BASE_LSE)
    HAS_C: tl.constexpr,  # add scale*C to A
    WITH_ENTROPY: tl.constexpr,  # accumulate the entropy numerator t
    WITH_BASE_LSE: tl.constexpr,  # also accumulate logsumexp(A) (for log_softmax(A)[tok])
    BLOCK: tl.constexpr,  # columns per loop iteration (power of two)
    TILE_BLOCKS: tl.constexpr,  # BLOCKs per tile: the unit whose partials are written
):
    row = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    lanes = tl.arange(0, BLOCK)
    t_begin = split * tiles_per_split
    t_end = tl.minimum(t_begin + tiles_per_split, n_tiles)
    # One partial per TILE (fixed columns), never per split: a tile is always reduced the same way by whichever
    # program owns it, so the result does not depend on the split count (rows, SM count).
    for tile in range(t_begin, t_end):
        # per-lane running state
        m = tl.full([BLOCK], float("-inf"), tl.float32)
        s = tl.zeros([BLOCK], tl.float32)
        t = tl.zeros([BLOCK], tl.float32)
        idx = tl.full([BLOCK], _NO_INDEX, tl.int32)
        ma = tl.full([BLOCK], float("-inf"), tl.float32)
        sa = tl.zeros([BLOCK], tl.float32)
        for b in tl.static_range(TILE_BLOCKS):
            offs = (tile * TILE_BLOCKS + b) * BLOCK + lanes
            mask = offs < V
            a = tl.load(a_ptr + row * stride_a + offs, mask=mask, other=float("-inf")).to(tl.float32)
            if HAS_C:
                c = tl.load(c_ptr + row * stride_c + offs, mask=mask, other=0.0).to(tl.float32)
                x = a + scale * c
            else:
                x = a
            valid = mask & (x > float("-inf"))
            new_max = valid & (x > m)  # strict: equal values keep the earlier index
            e = tl.exp(-tl.abs(x - m))  # rescale factor if new_max, else weight of x
            e = tl.where(valid, e, 0.0)
            if WITH_ENTROPY:
                shift = tl.where(s > 0, (m - x) * s, 0.0)
                t_new = tl.where(new_max, e * (t + shift), t + e * (x - m))
                t = tl.where(valid, t_new, t)
            s = tl.where(new_max, s * e + 1.0, s + e)
            idx = tl.where(new_max, offs, idx)
            m = tl.where(new_max, x, m)
            if WITH_BASE_LSE:
                va = mask & (a > float("-inf"))
                nma = va & (a > ma)
                ea = tl.where(va, tl.exp(-tl.abs(a - ma)), 0.0)
                sa = tl.where(nma, sa * ea + 1.0, sa + ea)
                ma = tl.where(nma, a, ma)
        # merge the lanes
        M = tl.max(m, axis=0)
        live = s > 0
        w = tl.where(live, tl.exp(m - M), 0.0)
        out = row * n_tiles + tile
        tl.store(pm_ptr + out, M)
        tl.store(ps_ptr + out, tl.sum(s * w, axis=0))
        tl.store(pidx_ptr + out, tl.min(tl.where(live & (m == M), idx, _NO_INDEX), axis=0))
        if WITH_ENTROPY:
            tl.store(pt_ptr + out, tl.sum(tl.where(live, w * (t + (m - M) * s), 0.0), axis=0))
        if WITH_BASE_LSE:
            MA = tl.max(ma, axis=0)
            wa = tl.where(sa > 0, tl.exp(ma - MA), 0.0)
            tl.store(pma_ptr + out, MA)
            tl.store(psa_ptr + out, tl.sum(sa * wa, axis=0))


@triton.jit
def _confidence_combine_kernel(
    pm_ptr,  # *fp32 [N, T] per-tile max
    ps_ptr,  # *fp32 [N, T] per-tile sum exp
    pt_ptr,  # *fp32 [N, T] per-tile entropy numerator (if WITH_ENTROPY)
    pidx_ptr,  # *int32 [N, T] per-tile first argmax
    pma_ptr,  # *fp32 [N, T] per-tile max of A (if HAS_TOKENS)
    psa_ptr,  # *fp32 [N, T] per-tile sum exp of A (if HAS_TOKENS)
    n_tiles,  # T
    a_ptr,  # *A [N, V] logits A (read at the token only, if HAS_TOKENS)
    c_ptr,  # *C [N, V] residual C (read at the token only, if HAS_TOKENS)
    stride_a,  # row stride of A
    stride_c,  # row stride of C
    scale,  # fp32 s
    tok_ptr,  # *int64 [N] tokens (if HAS_TOKENS)
    argmax_ptr,  # *int64 [N] out: argmax of Z
    maxp_ptr,  # *fp32 [N] out: softmax(Z)[argmax] = 1 / sum exp(Z - max)
    ent_ptr,  # *fp32 [N] out: entropy of softmax(Z) (if WITH_ENTROPY)
    ctok_ptr,  # *fp32 [N] out: C[row, tok] (if HAS_TOKENS)
    lp_ptr,  # *fp32 [N] out: log_softmax(Z)[row, tok] (if HAS_TOKENS)
    lpb_ptr,  # *fp32 [N] out: log_softmax(A)[row, tok] (if HAS_TOKENS)
    WITH_ENTROPY: tl.constexpr,  # write the entropy
    HAS_TOKENS: tl.constexpr,  # do the per-token gathers
    BLOCK_T: tl.constexpr,  # tiles per loop iteration (power of two, fixed by T alone)
):
    row = tl.program_id(0).to(tl.int64)
    lanes = tl.arange(0, BLOCK_T)
    base = row * n_tiles
    # pass 1: the maxima (exact in any order) and the lowest index attaining the max of Z
    mv = tl.full([BLOCK_T], float("-inf"), tl.float32)
    iv = tl.full([BLOCK_T], _NO_INDEX, tl.int32)
    mav = tl.full([BLOCK_T], float("-inf"), tl.float32)
    for j0 in range(0, n_tiles, BLOCK_T):
        j = j0 + lanes
        jm = j < n_tiles
        m = tl.load(pm_ptr + base + j, mask=jm, other=float("-inf"))
        s = tl.load(ps_ptr + base + j, mask=jm, other=0.0)
        idx = tl.load(pidx_ptr + base + j, mask=jm, other=_NO_INDEX)
        upd = (s > 0) & (m > mv)  # a lane sees its tiles in increasing order: strict keeps the lowest index
        iv = tl.where(upd, idx, iv)
        mv = tl.where(upd, m, mv)
        if HAS_TOKENS:
            mav = tl.maximum(mav, tl.load(pma_ptr + base + j, mask=jm, other=float("-inf")))
    M = tl.max(mv, axis=0)
    IDX = tl.min(tl.where(mv == M, iv, _NO_INDEX), axis=0)
    MA = tl.max(mav, axis=0)
    # pass 2: the sums, rescaled to the row max, in an order fixed by T (never by the split count)
    sv = tl.zeros([BLOCK_T], tl.float32)
    tv = tl.zeros([BLOCK_T], tl.float32)
    sav = tl.zeros([BLOCK_T], tl.float32)
    for j0 in range(0, n_tiles, BLOCK_T):
        j = j0 + lanes
        jm = j < n_tiles
        m = tl.load(pm_ptr + base + j, mask=jm, other=float("-inf"))
        s = tl.load(ps_ptr + base + j, mask=jm, other=0.0)
        live = s > 0
        w = tl.where(live, tl.exp(m - M), 0.0)
        sv += s * w
        if WITH_ENTROPY:
            t = tl.load(pt_ptr + base + j, mask=jm, other=0.0)
            tv += tl.where(live, w * (t + (m - M) * s), 0.0)
        if HAS_TOKENS:
            ma = tl.load(pma_ptr + base + j, mask=jm, other=float("-inf"))
            sa = tl.load(psa_ptr + base + j, mask=jm, other=0.0)
            sav += tl.where(sa > 0, sa * tl.exp(ma - MA), 0.0)
    S = tl.sum(sv, axis=0)
    tl.store(argmax_ptr + row, IDX.to(tl.int64))
    tl.store(maxp_ptr + row, 1.0 / S)
    if WITH_ENTROPY:
        T = tl.sum(tv, axis=0)
        tl.store(ent_ptr + row, tl.maximum(tl.log(S) - T / S, 0.0))
    if HAS_TOKENS:
        SA = tl.sum(sav, axis=0)
        tok = tl.load(tok_ptr + row)
        a_t = tl.load(a_ptr + row * stride_a + tok).to(tl.float32)
        c_t = tl.load(c_ptr + row * stride_c + tok).to(tl.float32)
        z_t = a_t + scale * c_t
        tl.store(ctok_ptr + row, c_t)
        # (x - max) first: exact for x near max, so no fp32 loss at |logits| ~ 1e4
        tl.store(lp_ptr + row, (z_t - M) - tl.log(S))
        tl.store(lpb_ptr + row, (a_t - MA) - tl.log(SA))


# --------------------------------------------------------------------------- wrappers


def _check_logits(name: str, x: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise ValueError(f"{name} must be a 2-D [N, V] tensor, got {getattr(x, 'shape', type(x))}")
    if x.dtype not in _SUPPORTED:
        raise TypeError(f"{name}: dtype {x.dtype} not supported (use float32, bfloat16 or float16)")
    if x.stride(-1) != 1:
        raise ValueError(f"{name} must be contiguous along V (stride(-1) == 1); call .contiguous()")
    if x.shape[1] == 0 or x.shape[1] >= _INT32_MAX:
        raise ValueError(f"{name}: vocabulary size {x.shape[1]} out of range")
    check_device(name, x)


def check_device(name: str, x: torch.Tensor) -> None:
    """Triton needs CUDA tensors, or CPU tensors under TRITON_INTERPRET=1."""
    if x.is_cuda:
        return
    if x.device.type == "cpu" and interpreter_enabled():
        return
    raise RuntimeError(
        f"{name} is on {x.device}: the Triton kernels need a CUDA tensor "
        "(CPU tensors work only with TRITON_INTERPRET=1 set before triton is imported)"
    )


def _default_block(v: int) -> int:
    return 1024 if v >= 1024 else triton.next_power_of_2(v)


def _tiling(v: int, block: int) -> tuple[int, int]:
    """(blocks per tile, tiles per row): fixed by V and BLOCK alone, so the result is too (never by N or SMs)."""
    tile_blocks = TILE_BLOCKS if v >= TILE_BLOCKS * block else 1
    return tile_blocks, triton.cdiv(v, tile_blocks * block)


def _sm_count(device: torch.device) -> int | None:
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else None


def _pick_splits(n: int, n_tiles: int, sms: int | None, num_splits: int | None) -> int:
    """Programs per row: parallelism only (each owns whole tiles), so any choice gives the same bits."""
    if num_splits is not None:
        return max(1, min(int(num_splits), n_tiles))
    if sms is None:
        return 1
    # aim for ~4 programs per SM (small N still fills the GPU), at most one per tile
    return max(1, min(triton.cdiv(4 * sms, max(n, 1)), n_tiles))


def _launch(A, C, scale, tokens, return_entropy, block, num_splits, num_warps):
    n, v = A.shape
    dev = A.device
    f32 = torch.float32
    out_argmax = torch.empty(n, dtype=torch.int64, device=dev)
    out_maxp = torch.empty(n, dtype=f32, device=dev)
    out_ent = torch.empty(n, dtype=f32, device=dev) if return_entropy else None
    has_tok = tokens is not None
    out_ctok = torch.empty(n, dtype=f32, device=dev) if has_tok else None
    out_lp = torch.empty(n, dtype=f32, device=dev) if has_tok else None
    out_lpb = torch.empty(n, dtype=f32, device=dev) if has_tok else None
    if n == 0:
        return out_argmax, out_maxp, out_ent, out_ctok, out_lp, out_lpb
    if block is None:
        block = _default_block(v)
    if block & (block - 1):
        raise ValueError(f"block must be a power of two, got {block}")
    tile_blocks, T = _tiling(v, block)
    S = _pick_splits(n, T, _sm_count(dev), num_splits)
    per_split = triton.cdiv(T, S)
    S = triton.cdiv(T, per_split)
    pm = torch.empty((n, T), dtype=f32, device=dev)
    ps = torch.empty((n, T), dtype=f32, device=dev)
    pidx = torch.empty((n, T), dtype=torch.int32, device=dev)
    pt = torch.empty((n, T), dtype=f32, device=dev) if return_entropy else pm
    pma = torch.empty((n, T), dtype=f32, device=dev) if has_tok else pm
    psa = torch.empty((n, T), dtype=f32, device=dev) if has_tok else ps
    Cx = C if C is not None else A
    if num_warps is None:
        num_warps = 8 if block >= 2048 else 4
    _confidence_partial_kernel[(n, S)](
        A,
        Cx,
        A.stride(0),
        Cx.stride(0),
        float(scale),
        v,
        T,
        per_split,
        pm,
        ps,
        pt,
        pidx,
        pma,
        psa,
        HAS_C=C is not None,
        WITH_ENTROPY=bool(return_entropy),
        WITH_BASE_LSE=has_tok,
        BLOCK=block,
        TILE_BLOCKS=tile_blocks,
        num_warps=num_warps,
    )
    tok = tokens if has_tok else out_argmax
    _confidence_combine_kernel[(n,)](
        pm,
        ps,
        pt,
        pidx,
        pma,
        psa,
        T,
        A,
        Cx,
        A.stride(0),
        Cx.stride(0),
        float(scale),
        tok,
        out_argmax,
        out_maxp,
        out_ent if out_ent is not None else out_maxp,
        out_ctok if has_tok else out_maxp,
        out_lp if has_tok else out_maxp,
        out_lpb if has_tok else out_maxp,
        WITH_ENTROPY=bool(return_entropy),
        HAS_TOKENS=has_tok,
        BLOCK_T=min(max(triton.next_power_of_2(T), 2), 256),
        num_warps=1,
    )
    return out_argmax, out_maxp, out_ent, out_ctok, out_lp, out_lpb


def confidence(
    logits: torch.Tensor,
    return_entropy: bool = False,
    *,
    block: int | None = None,
    num_splits: int | None = None,
    num_warps: int | None = None,
) -> ConfidenceOut:
    """Greedy token, its softmax probability and optionally the entropy, per row.

    logits: [N, V] float32/bfloat16/float16, contiguous along V, on CUDA (or CPU
    under TRITON_INTERPRET=1). Returns ``ConfidenceOut(argmax int64 [N],
    max_prob fp32 [N], entropy fp32 [N] | None)``; argmax ties go to the lowest
    index. ``block``/``num_splits``/``num_warps`` are tuning knobs (defaults:
    1024, enough splits to fill the GPU, 4 warps).
    """
    _check_logits("logits", logits)
    am, mp, ent, *_ = _launch(logits, None, 1.0, None, return_entropy, block, num_splits, num_warps)
    return ConfidenceOut(am, mp, ent)


def residual_confidence(
    A: torch.Tensor,
    C: torch.Tensor,
    scale: float = 1.0,
    tokens: torch.Tensor | None = None,
    return_entropy: bool = False,
    *,
    block: int | None = None,
    num_splits: int | None = None,
    num_warps: int | None = None,
) -> ResidualConfidenceOut:
    """Confidence of Z = A + scale*C without materialising Z, plus token gathers.

    A, C: [N, V] (same shape and device, dtypes float32/bfloat16/float16, may
    differ), contiguous along V. tokens: int64 [N] or None (values must lie in
    [0, V); not range-checked on the GPU, which would need a host sync).
    Returns ``ResidualConfidenceOut(argmax, max_prob, entropy|None,
    c_at_token|None, logp_at_token|None, logp_base_at_token|None)`` where
    ``c_at_token = C[row, tok]`` (unscaled), ``logp_at_token =
    log_softmax(Z)[row, tok]`` and ``logp_base_at_token = log_softmax(A)[row, tok]``.
    """
    _check_logits("A", A)
    _check_logits("C", C)
    if A.shape != C.shape:
        raise ValueError(f"A and C shapes differ: {tuple(A.shape)} vs {tuple(C.shape)}")
    if A.device != C.device:
        raise ValueError(f"A and C on different devices: {A.device} vs {C.device}")
    if tokens is not None:
        if tokens.dtype != torch.int64 or tokens.dim() != 1 or tokens.shape[0] != A.shape[0]:
            raise ValueError(
                f"tokens must be int64 [N={A.shape[0]}], got {tokens.dtype} {tuple(tokens.shape)}"
            )
        if tokens.device != A.device:
            raise ValueError(f"tokens on {tokens.device}, logits on {A.device}")
        tokens = tokens.contiguous()
        if not tokens.is_cuda and tokens.numel() and (tokens.min() < 0 or tokens.max() >= A.shape[1]):
            raise ValueError("tokens out of range [0, V)")
    outs = _launch(A, C, scale, tokens, return_entropy, block, num_splits, num_warps)
    return ResidualConfidenceOut(*outs)
