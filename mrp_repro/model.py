"""The SDAR backbone: Qwen3's architecture run as a block-diffusion LM, in one file.

SDAR (METHOD.md §1) is Qwen3 (RMSNorm, RoPE, GQA, SwiGLU, q_norm/k_norm, untied
lm_head) with two changes at inference: no shift (the hidden state at position i
predicts token i) and block-causal attention (bidirectional inside a block, causal
across blocks, earlier blocks read from a KV cache). Every call returns logits and
the final post-norm hidden states, which the MRP head consumes.

Attention paths, all through `SDARModel.forward` with an explicit boolean mask:
  (a) `prefill`            whole blocks, block-causal, writes the KV cache
  (b) `forward_block`      the current block, reads the cache, does not write it
  (c) `commit_block`       a finished block, written into the cache
  (e) `commit_and_forward` a finished block's commit fused into the next block's first forward
  (d) `forward_candidates` M candidate states of one block in one verify, by one of VERIFY_PATHS:
        "fold"   the M candidates folded into the batch (B*M rows over the shared cache, expanded,
                 not copied): each row runs exactly forward_block's shapes and reduction order, so
                 its logits are bitwise those of forward_block wherever the kernels are
                 batch-size invariant (measured: CPU, torch 2.13, bf16 and fp32);
        "loop"   one forward_block per candidate at batch B: bitwise equal by construction, M calls;
        "packed" the M copies side by side along the sequence with a block-diagonal mask: one call,
                 but a different attention length, hence different rounding (bf16: up to ~0.08 in
                 the logits, enough to flip near-ties; fp32: ~6e-6);
        "checked" "fold", checked against "loop" once per kernel plan (_verify_check_key: batch, candidates,
                 block, dtype, device, numerics, the attended key count in blocks of CHECK_KEY_BLOCK = 128, a static
                 cache's capacity, the mask's call form) in this process: where the two are bitwise equal it runs
                 "fold" (one call) until the plan changes, elsewhere "loop" (a one-line warning per shape), so it is
                 one call where the kernels plan alike and exact in any case (the check's call returns loop's);
        "exact"  (default; decoding.verify) "fold" on CPU (bitwise, tested) and inside
                 kernels.batch_invariant.batch_invariant() on any device (bitwise by construction), "checked"
                 elsewhere: never a rounding other than forward_block's.

Rows of a batch are left-padded by whole blocks; pad keys are never attended to
(`KVCache.valid`), so a row's output does not depend on its batch neighbours.

Numerics (`NUMERICS`, switched per module tree by `use_numerics`; equal in fp32, they round apart in bf16):
  "ours"      (default) RMSNorm normalises in fp32, casts, then scales in the input dtype (Qwen3's HF code);
              attention always takes the explicit boolean mask.
  "upstream"  as the released MRP code computes (issues 20, 38; the upstream decoding family turns it on):
              RMSNorm is `F.rms_norm` (normalise and scale in fp32, one rounding), and every attention call in
              the released code's form for its mask (`attention_mask`, `released_attention`): an all-True mask
              runs flash-attn's `flash_attn_func` where the optional flash-attn package can run it (CUDA, fp16 /
              bf16), SDPA without a mask otherwise; any other mask runs SDPA with the released mask (1, T, S)
              bool, `scale=head_dim**-0.5`, `enable_gqa=True` (on CPU a 3-D mask selects SDPA's math kernel, the
              4-D one its flash kernel: they round apart in bf16). docs/upstream.md: per call kind.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6
    max_position_embeddings: int = 40960

    def __post_init__(self):
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads={self.num_heads} is not a multiple of num_kv_heads={self.num_kv_heads}")

    def to_dict(self) -> dict:
        return asdict(self)


class ModelOutput(NamedTuple):
    logits: torch.Tensor | None  # (B, T, V); None from a commit asked for no logits (with_logits=False)
    hidden: torch.Tensor  # (B, T, H) final post-norm hidden states


NUMERICS = ("ours", "upstream")


class RMSNorm(nn.Module):
    numerics = "ours"  # NUMERICS; set by use_numerics

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.numerics == "upstream":  # the released code: the product with the gain in fp32, one rounding
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        # Normalise in fp32 like Qwen3 so bf16 runs match the reference within rounding.
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


#: the released call forms of a mask under upstream numerics (attention_mask): all True (run unmasked), every row the
#: same (the released (1, T, S) mask), rows that differ (the (B, 1, T, S) mask as given)
MASK_FORMS = ("unmasked", "shared", "rows")
#: True: attention_mask also reads every mask whose form the host decided and raises where the two differ (tests)
VERIFY_MASK_FORMS = False


def mask_form_of(mask: torch.Tensor) -> str:
    """The form (MASK_FORMS) of `mask` (B, 1, T, S) read from its contents: one or two host syncs."""
    if bool(mask.all()):
        return "unmasked"
    if mask.shape[0] == 1 or bool((mask == mask[:1]).all()):
        return "shared"
    return "rows"


def attention_mask(module: nn.Module, mask: torch.Tensor, form: str | None = None) -> torch.Tensor | None:
    """The mask attention is called with, once per forward: `mask` (B, 1, T, S) itself under our numerics. Where
    `module` runs upstream numerics, the released code's form (MASK_FORMS): None where `mask` is all True (their
    all-ones calls: `released_attention` runs them unmasked), the released shape (1, T, S) bool where every row of it
    is the same (their layout: rows share positions, no padding; their prefill and verify masks are [1, T, S]), else
    `mask` (rows that differ, a padded batch of our engine's, have no released form).

    `form`: the form as the caller knows it on the host (SDARModel._mask_form: from the cache's host flag
    `KVCache.known_valid`, whether key_valid was given, the mask's structure), else a hint set by mask_form_hint;
    with neither, it is read from the mask (mask_form_of: one or two host syncs per forward; issue 36)."""
    if getattr(module, "numerics", "ours") != "upstream":
        return mask
    if form is None:
        form = module.__dict__.get("_mask_form_hint")
    if form is None:
        form = mask_form_of(mask)
    elif VERIFY_MASK_FORMS and form != mask_form_of(mask) and not (form == "rows" and mask.shape[0] == 1):
        raise AssertionError(f"attention_mask: the host said {form!r}, the mask is {mask_form_of(mask)!r}")
    if form not in MASK_FORMS:
        raise ValueError(f"mask form {form!r}: choose one of {MASK_FORMS}")
    if form == "unmasked":
        return None
    return mask[:1, 0].contiguous() if form == "shared" or mask.shape[0] == 1 else mask


@contextmanager
def mask_form_hint(module: nn.Module, form: str):
    """Inside the block, `module`'s attention_mask takes its mask's form (MASK_FORMS) from the caller instead of
    reading the mask (no host sync): for a caller that knows it from how it calls, e.g. the upstream speculative
    round's head calls (MRPHead.forward with no cache and no key_valid: its block mask is all True). Checked against
    the mask under VERIFY_MASK_FORMS."""
    if form not in MASK_FORMS:
        raise ValueError(f"mask form {form!r}: choose one of {MASK_FORMS}")
    old = module.__dict__.get("_mask_form_hint")
    module._mask_form_hint = form
    try:
        yield
    finally:
        if old is None:
            del module._mask_form_hint
        else:
            module._mask_form_hint = old


_FLASH_ATTN: list = []  # [flash_attn_func or None, version or None]: flash-attn looked up once per process


def flash_attn_package() -> tuple:
    """(flash_attn_func, version) of the optional flash-attn package, or (None, None) where it is not installed
    (an extra, never required). Looked up once per process."""
    if not _FLASH_ATTN:
        try:
            from flash_attn import flash_attn_func
        except Exception:  # noqa: BLE001 - absent, or built for another torch / CUDA: SDPA it is
            _FLASH_ATTN.extend([None, None])
        else:
            from importlib import metadata

            try:
                version = metadata.version("flash-attn")
            except metadata.PackageNotFoundError:
                version = "unknown"
            _FLASH_ATTN.extend([flash_attn_func, version])
    return _FLASH_ATTN[0], _FLASH_ATTN[1]


def released_unmasked_backend(device, dtype: torch.dtype) -> str:
    """What an all-ones-mask attention call runs under upstream numerics on `device` in `dtype`: "flash_attn" (flash-
    attn's flash_attn_func, as the released code on a GPU) where the package is installed and can run it (CUDA,
    fp16 / bf16), else "sdpa" (PyTorch's SDPA without a mask)."""
    fn, _ = flash_attn_package()
    ok = fn is not None and torch.device(device).type == "cuda" and dtype in (torch.float16, torch.bfloat16)
    return "flash_attn" if ok else "sdpa"


def released_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                       scale: float) -> torch.Tensor:  # fmt: skip
    """The released code's attention call at inference (upstream numerics), by its mask (`attention_mask`):
    None, an all-ones mask: `flash_attn_func(q, k, v, causal=False, softmax_scale=scale)` on (B, T, heads, hd)
    where released_unmasked_backend says "flash_attn", else SDPA without a mask (the same scale and enable_gqa as
    below); a mask: SDPA with it as given, is_causal=False, the explicit scale, enable_gqa=True.
    q (B, nh, T, hd), k, v (B, nkv, S, hd) -> (B, nh, T, hd)."""
    if mask is None:
        if released_unmasked_backend(q.device, q.dtype) == "flash_attn":
            fn, _ = flash_attn_package()
            y = fn(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=False, softmax_scale=scale)
            return y.transpose(1, 2)
        return F.scaled_dot_product_attention(q, k, v, is_causal=False, scale=scale, enable_gqa=True)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=False, scale=scale, enable_gqa=True)


@contextmanager
def use_numerics(numerics: str, *modules: nn.Module | None):
    """Run `modules` (a backbone, a head; None is skipped) and all their submodules with `numerics` (NUMERICS)
    inside the block; each module's own setting is restored after it."""
    if numerics not in NUMERICS:
        raise ValueError(f"numerics={numerics!r}: choose one of {NUMERICS}")
    subs = [m for mod in modules if mod is not None for m in mod.modules() if isinstance(m, RMSNorm | NumericsAware)]
    saved = [m.__dict__.get("numerics") for m in subs]
    for m in subs:
        m.numerics = numerics
    try:
        yield
    finally:
        for m, old in zip(subs, saved, strict=True):
            if old is None:
                del m.numerics  # back to the class default
            else:
                m.numerics = old


class NumericsAware:
    """A module whose forward reads `self.numerics` (NUMERICS): SDARModel and the MRP head (attention_mask), and
    Attention (released_attention)."""

    numerics = "ours"


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype):
    """positions (B, T) -> cos, sin (B, 1, T, head_dim), Qwen3's rotate-half layout."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim))
    freqs = positions.float()[..., None] * inv_freq  # (B, T, D/2)
    emb = torch.cat([freqs, freqs], dim=-1)  # (B, T, D)
    return emb.cos().to(dtype)[:, None], emb.sin().to(dtype)[:, None]


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos + _rotate_half(x) * sin


class Attention(NumericsAware, nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.nh, self.nkv, self.hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, self.nh * self.hd, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, cfg.hidden_size, bias=False)
        self.q_norm = RMSNorm(self.hd, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(self.hd, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, mask, past: tuple[torch.Tensor, torch.Tensor] | None, fold: int = 1):
        """x (B, T, H); mask (B, 1, T, S_past + T) bool; past k, v (B // fold, nkv, S_past, hd):
        input row i reads past row i // fold (fold > 1: candidates folded into the batch).

        Returns the output (B, T, H) and this call's new k, v (B, nkv, T, hd)."""
        B, T, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(B, T, self.nh, self.hd)).transpose(1, 2)  # (B, nh, T, hd)
        k = self.k_norm(self.k_proj(x).view(B, T, self.nkv, self.hd)).transpose(1, 2)  # (B, nkv, T, hd)
        v = self.v_proj(x).view(B, T, self.nkv, self.hd).transpose(1, 2)  # (B, nkv, T, hd)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if past is None:
            k_all, v_all = k, v
        elif fold == 1:
            k_all, v_all = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
        else:
            # The cache is broadcast (a stride-0 view), and the one copy is the concat every block
            # forward makes anyway: each row gets the same contiguous (nkv, S_past + T, hd) layout.
            k_all, v_all = (
                torch.cat([p[:, None].expand(-1, fold, -1, -1, -1), n.view(-1, fold, *n.shape[1:])], 3).flatten(0, 1)
                for p, n in ((past[0], k), (past[1], v))
            )
        if self.numerics == "upstream":  # the released code's call for this mask (attention_mask)
            y = released_attention(q, k_all, v_all, mask, self.hd**-0.5)
        else:
            y = F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=mask, enable_gqa=self.nh != self.nkv)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.nh * self.hd)), (k, v)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """One Qwen3 decoder layer; the MRP head stacks the same kind."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, mask, past=None, fold: int = 1):
        a, kv = self.self_attn(self.input_layernorm(x), cos, sin, mask, past, fold)
        x = x + a
        return x + self.mlp(self.post_attention_layernorm(x)), kv


class KVCache:
    """Per-layer keys/values of committed blocks plus which key slots are real (not padding).

    k, v: (layers, B, nkv, capacity, hd); valid: (B, capacity) bool; `length` slots used.

    static=True: attention reads every slot (capacity keys, the unused ones invalid, so masked out), so a block
    forward, a verify and a head step have one shape for the whole generation: what CUDA graphs need to record
    once (torch.compile "reduce-overhead") instead of once per cache length."""

    def __init__(self, num_layers, batch, num_kv_heads, head_dim, capacity, device, dtype, static: bool = False):
        self.k = torch.zeros(num_layers, batch, num_kv_heads, capacity, head_dim, device=device, dtype=dtype)
        self.v = torch.zeros_like(self.k)
        self.valid = torch.zeros(batch, capacity, dtype=torch.bool, device=device)
        self.length = 0
        self.static = static
        # on the host: every slot written so far is valid in every row (each write's key_valid was all True by
        # construction, i.e. not given); read by SDARModel._mask_form instead of the mask's contents (no host sync)
        self.known_valid = True
        _static_addresses(self)

    @classmethod
    def for_model(cls, cfg: ModelConfig, batch: int, capacity: int, device, dtype, num_layers: int | None = None,
                  static: bool = False):  # fmt: skip
        return cls(num_layers or cfg.num_layers, batch, cfg.num_kv_heads, cfg.head_dim, capacity, device, dtype,
                   static)  # fmt: skip

    def past(self, layer: int):
        if self.static:
            return self.k[layer], self.v[layer]
        return self.k[layer, :, :, : self.length], self.v[layer, :, :, : self.length]

    def key_slots(self) -> torch.Tensor:
        """(B, S) bool: which of the slots attention reads (S = capacity if static, else length) are real."""
        return self.valid if self.static else self.valid[:, : self.length]

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        T = k.shape[2]
        if self.length + T > self.k.shape[3]:
            raise RuntimeError(f"KV cache full: {self.length} + {T} > capacity {self.k.shape[3]}")
        self.k[layer, :, :, self.length : self.length + T] = k
        self.v[layer, :, :, self.length : self.length + T] = v

    def advance(self, key_valid: torch.Tensor, all_valid: bool = False):
        """Mark the T slots just written (key_valid (B, T)) as used. all_valid: the caller knows on the host that
        key_valid is all True (it built it so); else `known_valid` is off for the rest of the cache's life."""
        T = key_valid.shape[1]
        self.valid[:, self.length : self.length + T] = key_valid
        self.length += T
        self.known_valid = self.known_valid and all_valid

    def select_rows(self, rows: torch.Tensor) -> KVCache:
        """A cache holding only the given batch rows (shares no storage)."""
        out = KVCache.__new__(KVCache)
        out.k, out.v, out.valid, out.length, out.static, out.known_valid = (
            self.k[:, rows].clone(),
            self.v[:, rows].clone(),
            self.valid[rows].clone(),
            self.length,
            self.static,
            self.known_valid,
        )
        return _static_addresses(out)


def _static_addresses(cache: KVCache) -> KVCache:
    """Mark the cache's tensors (k, v, valid) as static addresses for torch.compile, as
    torch._dynamo.mark_static_address(t, guard=False) does (the attribute it sets; set here without importing dynamo
    for every cache, tests/test_gpu_static_cache.py checks it is the same): a CUDA-graph replay (compile_model,
    "reduce-overhead") then reads and writes them in place, where an unmarked cache, a graph input like any other,
    was copied whole into graph-owned memory before every replay (~10 GB at batch 16 on SDAR-4B) and its writes
    (commits: a mutated input) made cudagraph trees skip the graph. A new cache at another address re-records the
    graphs that read it (not a recompile, no guard on the address). replay_copy_bytes measures what is left."""
    for t in (cache.k, cache.v, cache.valid):
        t._dynamo_static_input_type = "unguarded"
    return cache


def block_causal_mask(key_valid: torch.Tensor, block_size: int) -> torch.Tensor:
    """key_valid (B, T) -> (B, 1, T, T): query i sees key j iff block(j) <= block(i) and j is real.

    Padding queries see themselves so their softmax stays finite."""
    T = key_valid.shape[1]
    blk = torch.arange(T, device=key_valid.device) // block_size
    allowed = (blk[None, :] <= blk[:, None])[None] & key_valid[:, None, :]  # (B, T, T)
    allowed = allowed | torch.eye(T, dtype=torch.bool, device=key_valid.device)[None]
    return allowed[:, None]


class SDARModel(NumericsAware, nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def init_weights(self, std: float = 0.02, generator: torch.Generator | None = None):
        for name, p in self.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                nn.init.ones_(p)
            else:
                nn.init.normal_(p, 0.0, std, generator=generator)
            if name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
                p.data.mul_(1 / math.sqrt(2 * self.config.num_layers))
        return self

    def new_cache(self, batch: int, capacity: int, static: bool = False) -> KVCache:
        p = self.lm_head.weight
        return KVCache.for_model(self.config, batch, capacity, p.device, p.dtype, static=static)

    # -- the one forward every path goes through ------------------------------------------------
    def forward(
        self,
        input_ids: torch.Tensor,  # (B, T)
        position_ids: torch.Tensor,  # (B, T)
        mask: torch.Tensor,  # (B, 1, T, S_past + T) bool, True = attend
        cache: KVCache | None = None,
        write_cache: bool = False,
        key_valid: torch.Tensor | None = None,  # (B, T): which new keys are real, when writing
        fold: int = 1,  # > 1: input row i reads cache row i // fold (read-only)
        write_len: int | None = None,  # write only the first write_len keys (a fused commit); None: all T
        with_logits: bool = True,  # False: skip lm_head (a commit's logits are never read)
        logits_from: int = 0,  # lm_head over positions >= logits_from only (a fused commit's new block)
        mask_form: str | None = None,  # MASK_FORMS, known on the host (_mask_form); None: attention_mask reads it
    ) -> ModelOutput:
        if fold > 1 and write_cache:
            raise ValueError("a folded forward reads the cache; it cannot write it (use fold=1)")
        x = self.embed_tokens(input_ids)  # (B, T, H)
        cos, sin = rope_cos_sin(position_ids, self.config.head_dim, self.config.rope_theta, x.dtype)
        mask = attention_mask(self, mask, mask_form)
        W = input_ids.shape[1] if write_len is None else write_len
        for i, layer in enumerate(self.layers):
            x, (k, v) = layer(x, cos, sin, mask, cache.past(i) if cache is not None else None, fold)
            if write_cache:
                cache.write(i, k[:, :, :W], v[:, :, :W])
        if write_cache:
            if key_valid is None:
                cache.advance(torch.ones_like(input_ids[:, :W], dtype=torch.bool), all_valid=True)
            else:
                cache.advance(key_valid[:, :W])
        hidden = self.norm(x)
        if not with_logits:
            return ModelOutput(None, hidden)
        return ModelOutput(self.lm_head(hidden[:, logits_from:] if logits_from else hidden), hidden)

    # -- the four attention paths -------------------------------------------------------------
    def _cache_keys(self, cache: KVCache | None, B: int, T: int, device, fold: int = 1) -> torch.Tensor:
        """(B, 1, T, S_past) visibility of committed cache slots; row i sees cache row i // fold."""
        if cache is None:
            return torch.zeros(B, 1, T, 0, dtype=torch.bool, device=device)
        valid = cache.key_slots()  # (B // fold, S)
        if fold > 1:
            valid = valid[:, None].expand(-1, fold, -1).flatten(0, 1)
        return valid[:, None, None, :].expand(B, 1, T, valid.shape[1])

    def _mask_form(self, cache: KVCache | None, own_valid: bool, structured: bool = False) -> str | None:
        """The form (MASK_FORMS) attention_mask would read from a mask [cache key slots | own keys], decided on the
        host with no sync (issue 36), under the upstream numerics; None (read from the mask) where the host does not
        know, and under ours (unused). own_valid: the own keys' key_valid was not given (all True by construction);
        structured: the own part has False entries whatever the validity (block-causal over several blocks,
        packed candidates). The cache part is known where every slot written so far was (KVCache.known_valid):
        then every row is alike, all True for a growing cache, for a static one only once full."""
        if getattr(self, "numerics", "ours") != "upstream" or not own_valid:
            return None
        if cache is None:
            cache_all = True
        elif isinstance(cache, KVCache) and cache.known_valid:
            cache_all = not cache.static or cache.length == cache.k.shape[3]
        else:
            return None
        return "unmasked" if cache_all and not structured else "shared"

    def prefill(
        self, input_ids, position_ids, key_valid, cache: KVCache, block_size: int, with_logits: bool = True
    ) -> ModelOutput:
        """(a) whole blocks, block-causal among themselves, after whatever the cache holds. key_valid None: every
        key is real."""
        B, T = input_ids.shape
        if T % block_size:
            raise ValueError(f"prefill takes whole blocks: length {T} is not a multiple of block {block_size}")
        kv = key_valid if key_valid is not None else torch.ones_like(input_ids, dtype=torch.bool)
        mask = torch.cat([self._cache_keys(cache, B, T, input_ids.device), block_causal_mask(kv, block_size)], -1)
        form = self._mask_form(cache, key_valid is None, structured=T > block_size)
        return self(input_ids, position_ids, mask, cache, write_cache=True, key_valid=key_valid,
                    with_logits=with_logits, mask_form=form)  # fmt: skip

    def commit_and_forward(
        self, prev_ids, prev_positions, prev_valid, input_ids, position_ids, cache: KVCache, key_valid=None
    ) -> tuple[ModelOutput, ModelOutput]:
        """(e) a fused commit: writes the finished block(s) prev_ids (B, P) into the cache (block-causal among
        themselves, P a multiple of L = input_ids.shape[1]) and, in the same call, forwards the new block
        (B, L) as forward_block would after that commit. The new block's keys are laid out exactly as in
        that forward_block ([cache | prev | block]); only the query count differs (P + L rows).

        Returns (prev: hidden only, logits None; block: logits and hidden)."""
        B, P = prev_ids.shape
        L = input_ids.shape[1]
        if P % L:
            raise ValueError(f"commit_and_forward commits whole blocks: {P} is not a multiple of block {L}")
        kv = key_valid if key_valid is not None else torch.ones_like(input_ids, dtype=torch.bool)
        dev = input_ids.device
        old = self._cache_keys(cache, B, P + L, dev)  # (B, 1, P + L, S)
        S = old.shape[-1]
        prev_rows = torch.cat(
            [block_causal_mask(prev_valid, L), torch.zeros(B, 1, P, L, dtype=torch.bool, device=dev)], -1
        )
        own = kv[:, None, None, :].expand(B, 1, L, L) | torch.eye(L, dtype=torch.bool, device=dev)
        new_rows = torch.cat([prev_valid[:, None, None, :].expand(B, 1, L, P), own], -1)
        mask = torch.cat([old, torch.cat([prev_rows, new_rows], 2)], -1)
        assert mask.shape[-1] == S + P + L
        out = self(
            torch.cat([prev_ids, input_ids], 1),
            torch.cat([prev_positions, position_ids], 1),
            mask,
            cache,
            write_cache=True,
            key_valid=torch.cat([prev_valid, kv], 1),
            write_len=P,
            logits_from=P,
        )
        return ModelOutput(None, out.hidden[:, :P]), ModelOutput(out.logits, out.hidden[:, P:])

    def _block_mask(self, cache, key_valid, fold: int = 1):
        B, L = key_valid.shape
        own = key_valid[:, None, None, :].expand(B, 1, L, L) | torch.eye(L, dtype=torch.bool, device=key_valid.device)
        return torch.cat([self._cache_keys(cache, B, L, key_valid.device, fold), own], -1)

    def forward_block(self, input_ids, position_ids, cache: KVCache, key_valid=None) -> ModelOutput:
        """(b) the current block, bidirectional inside, reading (not writing) the cache."""
        kv = key_valid if key_valid is not None else torch.ones_like(input_ids, dtype=torch.bool)
        form = self._mask_form(cache, key_valid is None)
        return self(input_ids, position_ids, self._block_mask(cache, kv), cache, mask_form=form)

    def commit_block(self, input_ids, position_ids, cache: KVCache, key_valid=None, with_logits=True) -> ModelOutput:
        """(c) a finished block: same attention as (b), and its K/V are written into the cache."""
        kv = key_valid if key_valid is not None else torch.ones_like(input_ids, dtype=torch.bool)
        mask, form = self._block_mask(cache, kv), self._mask_form(cache, key_valid is None)
        return self(input_ids, position_ids, mask, cache, write_cache=True, key_valid=key_valid,
                    with_logits=with_logits, mask_form=form)  # fmt: skip

    def forward_candidates(
        self, input_ids, position_ids, cache: KVCache, key_valid=None, verify: str = "exact"
    ) -> ModelOutput:
        """(d) input_ids (B, M, L): M candidate states of one block in one verify (path: VERIFY_PATHS).

        Each candidate attends to the cache and to its own L tokens only; all share position_ids (B, L)
        and key_valid (B, L). Returns logits (B, M, L, V) and hidden (B, M, L, H)."""
        path = resolve_verify(verify, input_ids.device)
        if path == "checked":
            return self._verify_checked(input_ids, position_ids, cache, key_valid)
        return getattr(self, f"_verify_{path}")(input_ids, position_ids, cache, key_valid)

    # The _verify_* paths take key_valid as given (None: all True, known on the host: _mask_form).
    @staticmethod
    def _candidate_keys(input_ids, key_valid) -> torch.Tensor:
        B, _, L = input_ids.shape
        return key_valid if key_valid is not None else torch.ones(B, L, dtype=torch.bool, device=input_ids.device)

    def _verify_loop(self, input_ids, position_ids, cache, key_valid) -> ModelOutput:
        M = input_ids.shape[1]
        # Under CUDA graphs each call's outputs live in memory the next call reuses: compile_model's wrapper
        # returns clones, so the M outputs stacked here are still the M forwards' (tests/test_compiled.py).
        outs = [self.forward_block(input_ids[:, j], position_ids, cache, key_valid) for j in range(M)]
        return ModelOutput(torch.stack([o.logits for o in outs], 1), torch.stack([o.hidden for o in outs], 1))

    def _verify_fold(self, input_ids, position_ids, cache, key_valid) -> ModelOutput:
        B, M, L = input_ids.shape
        # Row b*M + j is candidate j of row b: the same mask, positions and cache row as forward_block.
        rep = lambda t: t[:, None].expand(B, M, *t.shape[1:]).flatten(0, 1)  # noqa: E731
        mask = self._block_mask(cache, rep(self._candidate_keys(input_ids, key_valid)), fold=M)
        out = self(input_ids.reshape(B * M, L), rep(position_ids), mask, cache, fold=M,
                   mask_form=self._mask_form(cache, key_valid is None))  # fmt: skip
        return ModelOutput(out.logits.view(B, M, L, -1), out.hidden.view(B, M, L, -1))

    def _verify_packed(self, input_ids, position_ids, cache, key_valid) -> ModelOutput:
        B, M, L = input_ids.shape
        kv = self._candidate_keys(input_ids, key_valid)
        cand = torch.arange(M * L, device=input_ids.device) // L
        own = (cand[None, :] == cand[:, None])[None] & kv.repeat(1, M)[:, None, :]  # (B, ML, ML)
        own = own | torch.eye(M * L, dtype=torch.bool, device=input_ids.device)[None]
        mask = torch.cat([self._cache_keys(cache, B, M * L, input_ids.device), own[:, None]], -1)
        form = self._mask_form(cache, key_valid is None, structured=M > 1)
        out = self(input_ids.reshape(B, M * L), position_ids.repeat(1, M), mask, cache, mask_form=form)
        return ModelOutput(out.logits.view(B, M, L, -1), out.hidden.view(B, M, L, -1))

    def _verify_check_key(self, input_ids, cache, key_valid) -> tuple:
        """What "checked" keys its fold-vs-loop verdict on: everything that can change a kernel's plan between the
        check and a later verify (issue 36). The shapes fold changes (batch B, candidates M, block L, device,
        dtype), the numerics; the attended key count in CHECK_KEY_BLOCK steps (flash attention's split count is a
        function of ceil(keys / 128): at batch 1 loop and fold take the same split up to 256 keys, then not, so a
        verdict from a short cache does not carry to a long one); a static cache's capacity (the key count it
        attends to, fixed); under the upstream numerics the mask's call form (attention_mask: unmasked, released
        or 4-D, which picks the attention kernel). A new key re-checks: with a growing cache about once per
        CHECK_KEY_BLOCK / L blocks per candidate count."""
        B, M, L = input_ids.shape
        static = cache is not None and cache.static
        capacity = cache.k.shape[3] if static else None
        past = 0 if cache is None else (capacity if static else cache.length)
        form = None
        if getattr(self, "numerics", "ours") == "upstream":  # the call form attention_mask picks
            form = self._mask_form(cache, key_valid is None)  # on the host; else read from the mask (host syncs)
            if form is None:
                form = mask_form_of(self._block_mask(cache, self._candidate_keys(input_ids, key_valid)))
            form = "3-d" if form == "shared" or (form == "rows" and B == 1) else "4-d" if form == "rows" else form
        return (str(input_ids.device), str(self.lm_head.weight.dtype), getattr(self, "numerics", "ours"), B, M, L,
                static, capacity, -(-(past + L) // CHECK_KEY_BLOCK), form)  # fmt: skip

    def _verify_checked(self, input_ids, position_ids, cache, key_valid) -> ModelOutput:
        """"checked" (VERIFY_PATHS): fold where it was bitwise loop's under the same kernel plan
        (_verify_check_key: the shapes, the attended key count in blocks of CHECK_KEY_BLOCK, a static cache's
        capacity, the mask's call form), loop elsewhere; the check's own call returns loop's logits."""
        B, M, L = input_ids.shape
        key = self._verify_check_key(input_ids, cache, key_valid)
        memo = self.__dict__.setdefault("_fold_bitwise", {})
        if key not in memo:
            loop = self._verify_loop(input_ids, position_ids, cache, key_valid)
            fold = self._verify_fold(input_ids, position_ids, cache, key_valid)
            memo[key] = bool(torch.equal(fold.logits, loop.logits) and torch.equal(fold.hidden, loop.hidden))
            warned = self.__dict__.setdefault("_fold_warned", set())
            if not memo[key] and key[:6] not in warned:  # one warning per shape, whatever the cache length
                import warnings

                warned.add(key[:6])
                keys = cache.k.shape[3] if cache is not None and cache.static else (cache.length if cache else 0)
                warnings.warn(f"verify 'checked': fold is not bitwise forward_block's at batch {B}, {M} candidates, "
                              f"block {L} on {key[0]} ({key[1]}) with {keys + L} keys: it verifies by loop ({M} "
                              "calls) until a check under another plan (key count, cache) finds fold bitwise",
                              stacklevel=3)  # fmt: skip
            return loop
        return (self._verify_fold if memo[key] else self._verify_loop)(input_ids, position_ids, cache, key_valid)


VERIFY_PATHS = ("exact", "fold", "loop", "packed", "checked")
#: keys per step of "checked"'s key (_verify_check_key): flash-attn 2 plans its KV splits on ceil(keys / 128) at
#: head_dim <= 128 (256 at <= 64, a multiple, so also covered); a backend that plans on finer steps needs 1 here
CHECK_KEY_BLOCK = 128


def resolve_verify(verify: str, device) -> str:
    """The concrete verify path: "exact" is "fold" on CPU (bitwise equal to forward_block there, tested
    in tests/test_lossless_bf16.py) and "checked" elsewhere (fold where a first call shows it bitwise, else loop);
    inside kernels.batch_invariant.batch_invariant() "fold" on every device (every reduction's order is independent
    of the batch there, so fold is forward_block's bits by construction: one call, no check)."""
    if verify not in VERIFY_PATHS:
        raise ValueError(f"verify={verify!r}: choose one of {VERIFY_PATHS}")
    if verify == "exact":
        from mrp_repro.kernels.batch_invariant import active

        return "fold" if torch.device(device).type == "cpu" or active() else "checked"
    return verify


def _clone_outputs(out):
    """A copy of a forward's outputs (a tensor, or a tuple / NamedTuple of tensors and None) in memory of its own."""
    if isinstance(out, torch.Tensor):
        return out.clone()
    if isinstance(out, tuple):
        vals = [_clone_outputs(x) for x in out]
        return type(out)(*vals) if hasattr(out, "_fields") else type(out)(vals)
    return out


def graph_safe(fn):
    """fn (a torch.compile'd forward in mode "reduce-overhead") made safe to call as the engine calls it: each call
    begins a new CUDA-graph step (torch.compiler.cudagraph_mark_step_begin: the previous call's graph memory may be
    reused) and returns clones of the outputs, which outlive later calls (the backbone's hidden fed to the head
    after another forward, a loop verify stacking M forwards, a seed's logits kept across a verify). The clones
    cost one copy of the logits per call: B x T x V x 2 bytes, ~78 MB (~20 us on an H200) at batch 16 x block 16."""

    def call(*args, **kwargs):
        torch.compiler.cudagraph_mark_step_begin()
        return _clone_outputs(fn(*args, **kwargs))

    call.compiled = fn
    return call


def compile_model(model: SDARModel, head: nn.Module | None = None, mode: str | None = "auto") -> SDARModel:
    """torch.compile the backbone's forward (every path goes through it: block forward, verify, commit) and the
    head's, in place; returns the model. Dynamic shapes, since the KV cache grows block by block. mode "auto":
    "reduce-overhead" (CUDA graphs) on CUDA, the default mode elsewhere (CPU needs a C++ compiler).
    "reduce-overhead" (also asked for on CPU, where inductor runs without graphs) goes through graph_safe: a
    new CUDA-graph step per call and outputs cloned, so no output is read after a later replay overwrote it.

    Measured on CPU (tests/test_compiled.py): tokens and RowStats identical to eager; the first generate
    compiles for ~1 min; under a stand-in for CUDA graphs that overwrites every earlier output at each call, the
    graph-safe forwards decode as eager (without graph_safe they do not). With the growing cache CUDA graphs
    re-record per cache length: pair it with decoding.static_cache (KVCache(static=True)), which keeps every
    call's shape fixed. What only a GPU can check: docs/gpu.md."""
    if mode == "auto":
        mode = "reduce-overhead" if model.lm_head.weight.device.type == "cuda" else None
    for m in (model, head) if head is not None else (model,):
        if not getattr(m.forward, "mrp_compiled", False):  # once: stages compile the backbone, then its head
            fn = torch.compile(m.forward, dynamic=True, mode=mode)
            m.forward = graph_safe(fn) if mode == "reduce-overhead" else fn
            m.forward.mrp_compiled = True
    return model


class _Traced(Exception):
    """Raised by graph_inputs' recording backend: the graph is seen, nothing runs."""


def _footprint(t: torch.Tensor) -> int:
    """Bytes a copy of t moves: its elements, once per distinct address (an expanded, stride-0 dim counts once)."""
    n = 1
    for size, stride in zip(t.shape, t.stride(), strict=True):
        n *= size if stride != 0 else 1
    return n * t.element_size()


def graph_inputs(fn, *args, **kwargs) -> list[dict]:
    """The tensor inputs of the graph torch.compile makes of fn(*args, **kwargs) (dynamic shapes, as compile_model),
    traced only: a recording backend stops the compile once it has the graph, so nothing runs (no side effect on a
    cache, no kernel; CPU or CUDA alike). Each input: source (dynamo's name, e.g. L['cache'].k), shape, bytes (its
    footprint), static (a parameter, buffer or torch._dynamo.mark_static_address tensor: what cudagraph trees neither
    copy nor re-allocate). A graph break is an error (the forwards compile whole: fullgraph)."""
    seen: list[dict] = []

    def backend(gm, example_inputs):
        for node, ex in zip(gm.graph.find_nodes(op="placeholder"), example_inputs, strict=False):
            if isinstance(ex, torch.Tensor):
                src = getattr(node, "_dynamo_source", None)
                static = isinstance(ex, nn.Parameter) or bool(
                    node.meta.get("tensor_dict", {}).get("_dynamo_static_input_type"))
                seen.append(dict(source=src.name if src is not None else node.name, shape=tuple(ex.shape),
                                 bytes=_footprint(ex), static=static))  # fmt: skip
        raise _Traced

    code = getattr(fn, "__func__", fn).__code__
    # dynamo keeps what it compiled or traced on fn's code object, shared by every compile of fn in the process: an
    # earlier compile_model (another model, another test) can have filled it to the recompile limit or marked the
    # code to be skipped, and the trace then fails ('found no compiled frames', FailOnRecompileLimitHit). Cleared
    # before and after: a live compiled model of fn compiles again at its next call (time, not results).
    torch._dynamo.reset_code(code)
    try:
        torch.compile(fn, backend=backend, dynamic=True, fullgraph=True)(*args, **kwargs)
    except Exception as exc:  # dynamo wraps a backend's exception (BackendCompilerFailed)
        e: BaseException | None = exc
        while e is not None and not isinstance(e, _Traced):
            e = getattr(e, "inner_exception", None) or e.__cause__
        if e is None:
            raise
    finally:
        torch._dynamo.reset_code(code)  # each traced kind would count against a later compile's recompile limit
    return seen


def replay_copy_bytes(modules: nn.Module | tuple, call) -> list[dict]:
    """What a CUDA-graph replay of the compiled forwards of `modules` (the backbone, a head: compile_model,
    "reduce-overhead") copies into graph-owned memory, per forward that call() makes (issue 36): cudagraph trees copy
    every tensor input that is not static (graph_inputs) before each replay. call() runs eagerly; at each forward of
    a new kind (the module, its arguments' shapes and options; a growing cache's length) the forward is traced
    first, with its arguments as they are then (graph_inputs: traced only, nothing runs twice). Returns one dict per
    kind: module (its class), kind, bytes (copied per replay), copied {source: bytes}, static_bytes (read in place:
    weights, a KV cache at static addresses: _static_addresses). Measured on CPU as on a GPU: the rule is dynamo's
    and cudagraph trees', not the device's (gpu_check records it on the device)."""
    out, kinds = [], set()

    def sig(x):
        if isinstance(x, torch.Tensor):
            return tuple(x.shape)
        if isinstance(x, KVCache):  # a growing cache's graphs differ by its length, a static one's do not
            return ("KVCache", tuple(x.k.shape), x.static, None if x.static else x.length)
        return x if isinstance(x, int | float | str | bool | type(None)) else type(x).__name__

    def hook(mod, args, kwargs):
        kind = (type(mod).__name__, tuple(sig(a) for a in args), tuple(sorted((k, sig(v)) for k, v in kwargs.items())))
        if kind in kinds:
            return
        kinds.add(kind)
        ins = graph_inputs(type(mod).forward, mod, *args, **kwargs)
        copied = {i["source"]: i["bytes"] for i in ins if not i["static"]}
        out.append(dict(module=kind[0], kind=kind, bytes=sum(copied.values()), copied=copied,
                        static_bytes=sum(i["bytes"] for i in ins if i["static"])))  # fmt: skip

    mods = modules if isinstance(modules, tuple | list) else (modules,)
    handles = [m.register_forward_pre_hook(hook, with_kwargs=True) for m in mods if m is not None]
    try:
        call()
    finally:
        for h in handles:
            h.remove()
    return out


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
