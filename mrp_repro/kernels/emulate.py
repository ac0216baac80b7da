"""A CPU emulation of a GPU's shape-dependent rounding (issue 36): a test backend whose GEMMs, attention and row
reductions choose their reduction split from the call's shape, as cuBLAS, flash attention and CUDA's reduce kernels
do, so that a folded verify (B x M rows) can round apart from the block forwards (B rows) on CPU.

    from mrp_repro.kernels.emulate import EmulatedGPU
    with EmulatedGPU(sms=16):            # every F.linear, SDPA and last-dim mean inside rounds "like a GPU"
        generate(model, prompts, Speculative(3, "mrp", head=head), ...)

Nothing here runs unless a test enters the mode; it changes no default path. What each op does under it (a torch
function mode: the model's code is unchanged, only these three ops are answered differently):

  F.linear        split-K: K is cut into `gemm_splits(M, N, K)` contiguous chunks, M the rows of the call: one chunk
                  when the output tiles (ceil(M / gemm_tile) x ceil(N / gemm_tile)) fill the SMs, more when they do
                  not (cuBLAS's split-K for skinny GEMMs); each chunk's product is exact-then-fp32 (fp64 on CPU,
                  rounded once), the partials are summed in order in the output dtype when
                  `reduced_precision_reduction` (PyTorch's default for bf16 / fp16 GEMMs on CUDA,
                  torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction), else in fp32.
  SDPA            flash-decoding: the keys are cut into blocks of `kv_block` (flash-attn 2: 128 keys at head_dim
                  <= 128) and the blocks into `attention_splits(B, H, T, S)` splits by flash-attn's
                  num_splits_heuristic(B * H * ceil(T / 64), sms, ceil(S / kv_block), 128); each split's softmax
                  uses its own running max, its probabilities are cast to the input dtype for the P @ V product (as
                  flash does), the splits are merged by their log-sum-exp in fp32, then one cast. One split is the
                  plain fp32 softmax. So the split count, hence the rounding, depends on the batch (B * H) and on
                  the cache length (the number of key blocks): at batch 1 and a short cache the loop and the fold
                  take the same split, later they do not (the case "checked"'s old key missed).
  Tensor.mean     over the last dim (RMSNorm): rows with fewer than `reduce_rows` outputs are summed in two halves
                  (CUDA's reduce kernel gives a row more threads when there are few rows), else in one pass.

Every chunk is computed exactly (fp64) and rounded to fp32 once, so a call's bits depend on its split and its
values only, never on CPU BLAS blocking: equal splits give equal bits, which is what makes the emulation a test of
whether a verify path's kernels *plan* alike. `counts` records how many calls took each split (per op).
"""

from __future__ import annotations

import math
from collections import Counter

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

__all__ = ["EmulatedGPU", "flash_num_splits"]


def flash_num_splits(batch_nheads_mblocks: int, num_sms: int, num_n_blocks: int, max_splits: int = 128) -> int:
    """flash-attn 2's num_splits_heuristic (csrc/flash_attn/flash_api.cpp), as written there."""
    if batch_nheads_mblocks >= 0.8 * num_sms:
        return 1
    max_splits = min(max_splits, num_sms, num_n_blocks)
    if max_splits <= 1:
        return 1

    def eligible(s):
        return s == 1 or math.ceil(num_n_blocks / s) != math.ceil(num_n_blocks / (s - 1))

    eff = []
    for s in range(1, max_splits + 1):
        if not eligible(s):
            eff.append(0.0)
        else:
            waves = batch_nheads_mblocks * s / num_sms
            eff.append(waves / math.ceil(waves))
    best = max(eff)
    for s in range(1, max_splits + 1):
        if eligible(s) and eff[s - 1] >= 0.85 * best:
            return s
    return 1


class EmulatedGPU(TorchFunctionMode):
    """The emulation (module docstring). sms: the GPU's SM count (132 = H100 / H200; a toy model needs fewer for its
    few heads to leave SMs idle as SDAR's 32 heads do on 132); kv_block: keys per attention block; gemm_tile: rows and
    columns of a GEMM output tile; gemm, attention, reduce: which ops are emulated (False: the op as torch does it)."""

    def __init__(self, sms: int = 132, kv_block: int = 128, gemm_tile: int = 64, max_split_k: int = 4,
                 reduce_rows: int = 64, gemm: bool = True, attention: bool = True, reduce: bool = True,
                 reduced_precision_reduction: bool = True):  # fmt: skip
        super().__init__()
        self.sms, self.kv_block, self.gemm_tile, self.max_split_k = sms, kv_block, gemm_tile, max_split_k
        self.reduce_rows, self.rpr = reduce_rows, reduced_precision_reduction
        self.ops = {"linear": gemm, "attention": attention, "mean": reduce}
        self.counts: Counter = Counter()

    # -- the plans --------------------------------------------------------------------------------------------
    def gemm_splits(self, M: int, N: int, K: int) -> int:
        tiles = math.ceil(M / self.gemm_tile) * math.ceil(N / self.gemm_tile)
        if tiles >= self.sms:
            return 1
        return max(1, min(self.max_split_k, self.sms // tiles, K // 16))

    def attention_splits(self, B: int, H: int, T: int, S: int) -> int:
        return flash_num_splits(B * H * math.ceil(T / 64), self.sms, math.ceil(S / self.kv_block))

    # -- the ops --------------------------------------------------------------------------------------------------
    def linear(self, x, w, b=None):
        K, N = x.shape[-1], w.shape[0]
        M = x.numel() // max(K, 1)
        s = self.gemm_splits(M, N, K)
        self.counts[("linear", s)] += 1
        xd, wd = x.double(), w.double()
        bounds = [round(i * K / s) for i in range(s + 1)]
        acc = None
        for lo, hi in zip(bounds, bounds[1:], strict=False):
            part = (xd[..., lo:hi] @ wd[:, lo:hi].T).float()  # one chunk, exact then fp32
            if acc is None:
                acc = part.to(x.dtype) if (self.rpr and s > 1) else part
            elif self.rpr:
                acc = (acc.float() + part).to(x.dtype)  # the partial sums in the output dtype
            else:
                acc = acc + part
        out = acc.float()
        if b is not None:
            out = out + b.float()
        return out.to(x.dtype)

    def attention(self, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if dropout_p or is_causal:
            raise NotImplementedError("EmulatedGPU: SDPA with dropout or is_causal")
        B, H, T, D = q.shape
        S = k.shape[-2]
        if k.shape[1] != H:
            k, v = (t.repeat_interleave(H // t.shape[1], 1) for t in (k, v))
        sc = D**-0.5 if scale is None else scale
        s = (q.double() @ k.double().transpose(-1, -2)).float() * sc  # (B, H, T, S) fp32 scores
        if attn_mask is not None:
            s = s.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else s + attn_mask
        nb = math.ceil(S / self.kv_block)
        splits = self.attention_splits(B, H, T, S)
        per = math.ceil(nb / splits)
        splits = math.ceil(nb / per)
        self.counts[("attention", splits)] += 1
        parts = []
        for j in range(splits):
            lo, hi = j * per * self.kv_block, min(S, (j + 1) * per * self.kv_block)
            sj = s[..., lo:hi]
            mj = sj.amax(-1, keepdim=True)
            mj = torch.where(torch.isfinite(mj), mj, torch.zeros_like(mj))  # an all-masked split: p = 0
            pj = torch.exp(sj - mj)
            lj = pj.double().sum(-1, keepdim=True).float()
            oj = (pj.to(q.dtype).double() @ v[..., lo:hi, :].double()).float()
            parts.append((mj, lj, oj, torch.isfinite(sj).any(-1, keepdim=True)))
        if splits == 1:
            _, lj, oj, _ = parts[0]
            return (oj / lj).to(q.dtype)
        m = torch.stack([torch.where(f, mj, torch.full_like(mj, float("-inf"))) for mj, _, _, f in parts]).amax(0)
        num, den = None, None
        for mj, lj, oj, f in parts:  # merged in split order, fp32
            w = torch.where(f, torch.exp(mj - m), torch.zeros_like(mj))
            num = w * oj if num is None else num + w * oj
            den = w * lj if den is None else den + w * lj
        return (num / den).to(q.dtype)

    def mean(self, x, dim=None, keepdim=False, *, dtype=None):
        n = x.shape[-1]
        rows = x.numel() // max(n, 1)
        s = 2 if rows < self.reduce_rows and n >= 2 else 1
        self.counts[("mean", s)] += 1
        xd = x.double() if dtype is None else x.to(dtype).double()
        halves = [xd[..., : n // 2], xd[..., n // 2 :]] if s == 2 else [xd]
        tot = None
        for h in halves:
            part = h.sum(-1, keepdim=True).float()
            tot = part if tot is None else tot + part
        out = (tot / n).to(x.dtype if dtype is None else dtype)
        return out if keepdim else out.squeeze(-1)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func not in _HANDLED:
            return func(*args, **kwargs)
        if func is F.linear and self.ops["linear"]:
            return self.linear(*args, **kwargs)
        if func is F.scaled_dot_product_attention and self.ops["attention"]:
            return self.attention(*args, **kwargs)
        if func in (torch.Tensor.mean, torch.mean) and self.ops["mean"] and _last_dim(args, kwargs):
            x = args[0]
            keepdim = kwargs.get("keepdim", args[2] if len(args) > 2 else False)
            return self.mean(x, keepdim=keepdim, dtype=kwargs.get("dtype"))
        return func(*args, **kwargs)


_HANDLED = frozenset((F.linear, F.scaled_dot_product_attention, torch.Tensor.mean, torch.mean))


def _last_dim(args, kwargs) -> bool:
    """A mean over exactly the last dim of a floating tensor (RMSNorm's); any other mean runs as torch's."""
    x = args[0] if args else None
    dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() == 0:
        return False
    if isinstance(dim, list | tuple):
        dim = dim[0] if len(dim) == 1 else None
    return isinstance(dim, int) and dim in (-1, x.dim() - 1)
