"""GPU numerics emulated on CPU (issue 36): under a backend whose GEMMs, attention and row means split their reductions
by the call's shape and the cache length (kernels.emulate.EmulatedGPU, cuBLAS / flash attention / CUDA reduce style),
the default fold is not lossless, "checked" with its old key (batch, candidates, block, dtype, static: no cache
length) decodes differently from Static(1), and the sound key (the attended key count in blocks, a static cache's
capacity) and the batch-invariant numerics (kernels.batch_invariant) never do; the lossless suite (verify logits
bitwise forward_block's, every drafter token-identical to Static(1)) passes in both, and a batch-invariant verify is
one backbone call.

The emulated GPU has 12 SMs and plans attention on 16-key blocks (a toy model's 4 heads and short caches play SDAR's
32 heads on 132 SMs and 128-key blocks), and "checked"'s key step is set to the same 16 (model.CHECK_KEY_BLOCK),
except in test_old_key_decodes_differently_the_sound_key_never, which runs the production step 128 against 128-key
blocks at 8x the length.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_gpu_numerics_emulation.py
"""

from __future__ import annotations

import random
import types

import pytest
import torch

import mrp_repro.model as model_mod
from mrp_repro.decoding import DRAFTERS, Speculative, Static, generate
from mrp_repro.decoding.mismatch import MASK, PAD, cached_state, random_backbone, random_head
from mrp_repro.kernels.batch_invariant import active, batch_invariant
from mrp_repro.kernels.emulate import EmulatedGPU, flash_num_splits
from mrp_repro.measure.cost import verify_passes

torch.set_num_threads(1)
pytestmark = pytest.mark.filterwarnings("ignore:verify 'checked'")  # the sound check's fallbacks, expected here

KV = 16  # the emulated GPU's keys per attention block, and "checked"'s key step here


def emulated(**kw) -> EmulatedGPU:
    return EmulatedGPU(sms=12, kv_block=KV, **kw)


@pytest.fixture
def key_block(monkeypatch):
    monkeypatch.setattr(model_mod, "CHECK_KEY_BLOCK", KV)


def old_key(self, input_ids, cache, kv):
    """The key of verify "checked" before issue 36: no cache length, no capacity."""
    B, M, L = input_ids.shape
    return (str(input_ids.device), str(self.lm_head.weight.dtype), B, M, L, cache is not None and cache.static)


def _prompts(n, seed, lo=3, hi=7):
    rng = random.Random(seed)
    return [[rng.randrange(3, 64) for _ in range(rng.randint(lo, hi))] for _ in range(n)]


def _fresh(m):
    m.__dict__.pop("_fold_bitwise", None)
    m.__dict__.pop("_fold_warned", None)


def _decode_each(m, prompts, policy, max_new, block=4):
    """Each prompt alone (batch 1, as the latency grids decode speculative)."""
    return [generate(m, [p], policy, block, MASK, [MASK], max_new, pad_id=PAD).tokens[0] for p in prompts]


def test_the_flash_heuristic_is_the_issues_arithmetic():
    """SDAR-4B at batch 1 on 132 SMs (32 heads, a block of 16 queries): a fold of 2 candidates takes the loop's split
    up to 256 keys, then 2 against the loop's 3 (issue 36's reading of num_splits_heuristic)."""
    splits = [(flash_num_splits(32, 132, -(-S // 128)), flash_num_splits(64, 132, -(-S // 128))) for S in
              (128, 256, 384, 512)]  # fmt: skip
    assert splits == [(1, 1), (2, 2), (3, 2), (4, 2)]


@torch.no_grad()
def test_the_emulation_rounds_by_batch_and_cache_length():
    """Fold is loop's bits on a short cache and not on a long one under the emulation (bf16, batch 1, 3 candidates);
    without it both are bitwise on this CPU."""
    m = random_backbone(4, torch.bfloat16)
    out = {}
    for ctx in (1, 6):  # 8 keys (one 16-key block) or 28 (two)
        cache, pos, kv, g = cached_state(m, 1, 4, context_blocks=ctx, seed=ctx, finished=False)
        cand = torch.randint(3, 64, (1, 3, 4), generator=g)
        for name, mode in (("emulated", emulated()), ("cpu", None)):
            if mode is not None:
                mode.__enter__()
            try:
                fold = m.forward_candidates(cand, pos, cache, kv, verify="fold")
                loop = m.forward_candidates(cand, pos, cache, kv, verify="loop")
            finally:
                if mode is not None:
                    mode.__exit__(None, None, None)
            out[(name, ctx)] = torch.equal(fold.logits, loop.logits) and torch.equal(fold.hidden, loop.hidden)
    assert out == {("emulated", 1): True, ("cpu", 1): True, ("emulated", 6): False, ("cpu", 6): True}


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


@pytest.mark.parametrize("dtype", DTYPES)
@torch.no_grad()
def test_batch_invariant_verify_is_forward_block_bitwise_under_the_emulation(dtype):
    """The lossless suite's logit check (tests/test_lossless_bf16.py) under the emulation in batch-invariant mode:
    every candidate of verify "exact" (= fold there) is forward_block's bits, batch 1 / 3 / 8 with padded and
    finished rows, 1-4 candidates, growing and static caches; the same states fold apart without the mode."""
    m = random_backbone(8, DTYPES[dtype])
    apart = 0
    with emulated():
        for batch in (1, 3, 8):
            for static in (False, True):
                cache, pos, kv, g = cached_state(m, batch, 4, context_blocks=6, seed=batch, static=static)
                for M in (1, 2, 3, 4):
                    cand = torch.randint(3, 64, (batch, M, 4), generator=g)
                    cand[torch.rand(batch, M, 4, generator=g) < 0.5] = MASK
                    with batch_invariant("torch"):
                        assert active()
                        want = [m.forward_block(cand[:, j], pos, cache, kv) for j in range(M)]
                        got = m.forward_candidates(cand, pos, cache, kv, verify="exact")
                    for j in range(M):
                        assert torch.equal(got.logits[:, j], want[j].logits), (batch, static, M, j)
                        assert torch.equal(got.hidden[:, j], want[j].hidden), (batch, static, M, j)
                    fold = m.forward_candidates(cand, pos, cache, kv, verify="fold").logits
                    apart += any(not torch.equal(fold[:, j], m.forward_block(cand[:, j], pos, cache, kv).logits)
                                 for j in range(M))  # fmt: skip
    assert not active() and apart > 0


@torch.no_grad()
def test_every_drafter_is_static_in_batch_invariant_mode_and_with_the_sound_check(key_block):
    """Speculative(K, drafter) token-identical to Static(1) under the emulation, batch 1 and a padded batch of 3, for
    every drafter and K = 2, 3: in batch-invariant mode (verify "exact" = one folded call, no check) and with
    verify "checked" (the sound key); the default fold is not (shown above)."""
    m, h = random_backbone(3, torch.bfloat16), random_head(103, torch.bfloat16)
    ps = _prompts(3, 7)
    args = (4, MASK, [MASK], 24)
    with emulated():
        want = {1: _decode_each(m, ps, Static(1), 24),
                3: generate(m, ps, Static(1), *args, pad_id=PAD).tokens}  # fmt: skip
        with batch_invariant("torch"):
            want_bi = {1: _decode_each(m, ps, Static(1), 24), 3: generate(m, ps, Static(1), *args, pad_id=PAD).tokens}
        for K in (2, 3):
            for dr in DRAFTERS:
                for mode in ("batch_invariant", "checked"):
                    _fresh(m)
                    pol = Speculative(K, dr, head=h, verify="exact" if mode == "batch_invariant" else "checked")
                    ctx = batch_invariant("torch") if mode == "batch_invariant" else _nothing()
                    with ctx:
                        got = {1: _decode_each(m, ps, pol, 24), 3: generate(m, ps, pol, *args, pad_id=PAD).tokens}
                    assert got == (want_bi if mode == "batch_invariant" else want), (K, dr, mode)


@torch.no_grad()
def test_batch_invariant_verify_is_one_backbone_call_per_round():
    """Counted: every forward_candidates of a batch-invariant Speculative(3) makes one backbone call (checked's first
    calls at a plan make M + 1, loop makes M)."""
    m, h = random_backbone(2, torch.bfloat16), random_head(2, torch.bfloat16)
    ps = _prompts(3, 9)
    calls, verifies, real = [], [0], m.forward_candidates

    def counted(*a, **k):
        verifies[0] += 1
        out = []
        calls.append(verify_passes(m, lambda: out.append(real(*a, **k))))
        return out[0]

    m.forward_candidates = counted
    try:
        with emulated(), batch_invariant("torch"):
            want = generate(m, ps, Static(1), 4, MASK, [MASK], 16, pad_id=PAD).tokens
            got = generate(m, ps, Speculative(3, "mrp", head=h), 4, MASK, [MASK], 16, pad_id=PAD)
    finally:
        del m.forward_candidates
    assert got.tokens == want
    rounds = sum(s.rounds for s in got.stats)
    assert verifies[0] > 0 and set(calls) == {1}, calls
    assert rounds >= verifies[0]


@pytest.mark.slow  # the old key's failure, shown once in make test-slow; the sound key is checked in make test above
@torch.no_grad()
def test_old_key_decodes_differently_the_sound_key_never(capsys):
    """The production key step (CHECK_KEY_BLOCK = 128) against an emulated GPU that plans attention on 128-key blocks
    (flash-attn 2 at head_dim <= 128): Speculative(3, mrp) against Static(1), each prompt alone, prompts of 90-110
    tokens decoded 64 tokens on, past 128 keys. The old key checks fold once on a short cache and keeps it; the new
    key re-checks when the key count enters another 128-key block, finds fold apart there and loops."""
    rows = {"fold": 0, "old key": 0, "new key": 0}
    m, h = random_backbone(0, torch.bfloat16), random_head(100, torch.bfloat16)
    ps = _prompts(6, 0, 90, 110)
    with EmulatedGPU(sms=12, kv_block=128) as emu:
        want = _decode_each(m, ps, Static(1), 64)
        for name in rows:
            _fresh(m)
            if name == "old key":
                m._verify_check_key = types.MethodType(old_key, m)
            try:
                pol = Speculative(3, "mrp", head=h, verify="fold" if name == "fold" else "checked")
                got = _decode_each(m, ps, pol, 64)
            finally:
                m.__dict__.pop("_verify_check_key", None)
            rows[name] += sum(g != w for g, w in zip(got, want, strict=True))
    assert {s for op, s in emu.counts if op == "attention"} >= {1, 2}  # both plans occurred
    with capsys.disabled():
        print(f"\n  rows decoded differently from Static(1) under the emulation, of {len(ps)}: {rows}")
    assert rows["fold"] > 0 and rows["old key"] > 0  # the default fold and the old check are not lossless here
    assert rows["new key"] == 0
