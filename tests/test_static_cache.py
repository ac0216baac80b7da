"""model.KVCache(static=True): attention reads the whole preallocated cache (unused slots masked), so every block
forward, verify and head step of a generation has one shape (what CUDA graphs record once). It must not change
what is decoded: the verify stays bitwise equal to forward_block, speculative decoding stays token-identical to
static in fp32 and bf16, and every mode decodes what the growing cache decodes.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_static_cache.py
"""

import pytest
import torch

from mrp_repro.decoding import DRAFTERS, Direct, Dynamic, Remask, Speculative, Static, generate
from mrp_repro.decoding.mismatch import (
    MASK,
    PAD,
    cached_state,
    common_token,
    random_backbone,
    random_head,
    random_prompts,
)

torch.set_num_threads(1)

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


@pytest.mark.parametrize("dtype", DTYPES)
def test_static_cache_verify_bitwise_equals_forward_block(dtype):
    m = random_backbone(8, DTYPES[dtype])
    with torch.no_grad():
        for batch in (1, 5):
            cache, pos, kv, g = cached_state(m, batch, 8, context_blocks=2, seed=batch, static=True)
            assert cache.key_slots().shape[1] == cache.k.shape[3] > cache.length  # unused slots are read, masked
            cand = torch.randint(3, m.config.vocab_size, (batch, 4, 8), generator=g)
            cand[torch.rand(batch, 4, 8, generator=g) < 0.5] = MASK
            for path in ("exact", "loop"):
                got = m.forward_candidates(cand, pos, cache, kv, verify=path)
                for j in range(4):
                    assert torch.equal(got.logits[:, j], m.forward_block(cand[:, j], pos, cache, kv).logits), path
            # and close to the growing cache's logits (masked slots add exact zeros, in another summation order)
            grown, *_ = cached_state(m, batch, 8, context_blocks=2, seed=batch)
            a = m.forward_block(cand[:, 0], pos, cache, kv).logits.float()
            b = m.forward_block(cand[:, 0], pos, grown, kv).logits.float()
            assert (a - b).abs().max().item() < (0.1 if dtype == "bf16" else 1e-5)


def _run_static_cache(m, ps, policy, block, eos, max_new, batch=6):
    out = []
    for i in range(0, len(ps), batch):
        out += generate(m, ps[i : i + batch], policy, block, MASK, eos, max_new, pad_id=PAD, static_cache=True).tokens
    return out


@pytest.mark.parametrize("dtype", DTYPES)
def test_speculative_with_static_cache_equals_static_token_for_token(dtype):
    m, h = random_backbone(1, DTYPES[dtype]), random_head(101, DTYPES[dtype])
    rows = 0
    for block in (4, 8):
        ps = random_prompts(12, 7 + block, max_len=2 * block + 3)
        eos, max_new = [common_token(m, ps, block)], 2 * block + 3

        want = _run_static_cache(m, ps, Static(1), block, eos, max_new)
        for K in (2, 3):
            for drafter in DRAFTERS:
                got = _run_static_cache(m, ps, Speculative(K, drafter, head=h), block, eos, max_new)
                rows += len(got)
                bad = sum(g != w for g, w in zip(got, want, strict=True))
                assert bad == 0, f"speculative({K},{drafter}) block {block} {dtype}: {bad} rows differ from static"
    assert rows >= 100


def test_every_mode_decodes_the_same_with_a_static_cache():
    """float64: the summation-order difference of the masked slots cannot flip a pick."""
    m, h = random_backbone(3, torch.float64), random_head(4, torch.float64)
    ps = random_prompts(6, 5, max_len=11)
    eos = [common_token(m, ps, 4)]
    pols = [Static(1), Dynamic(0.3), Speculative(3, "mrp", head=h), Direct(2, head=h)]
    pols += [Remask(0.2, rule, head=h) for rule in ("tau", "loo", "sequential")]
    for pol in pols:
        for fuse in (False, True):
            a = generate(m, ps, pol, 4, MASK, eos, 13, pad_id=PAD, fuse_commit=fuse)
            b = generate(m, ps, pol, 4, MASK, eos, 13, pad_id=PAD, fuse_commit=fuse, static_cache=True)
            assert a.tokens == b.tokens and a.stats == b.stats, (pol.name, fuse)


def test_static_cache_gives_each_call_one_shape(monkeypatch):
    """The point of it: the masks of the block forwards and verifies (and of the head steps) keep one shape over
    a generation of several blocks, where the growing cache gives one shape per cache length."""
    from mrp_repro.model import SDARModel
    from mrp_repro.mrp import MRPHead

    m, h = random_backbone(2, torch.float32), random_head(3, torch.float32)
    ps = random_prompts(3, 2, max_len=9)
    shapes = {"backbone": [], "head": []}
    real_fwd, real_head = SDARModel.forward, MRPHead.forward

    def fwd(self, input_ids, position_ids, mask, *a, write_cache=False, **k):
        if not write_cache:  # block forwards and verifies; commits write, and may stay eager
            shapes["backbone"].append(tuple(mask.shape))
        return real_fwd(self, input_ids, position_ids, mask, *a, write_cache=write_cache, **k)

    def head_fwd(self, h_in, ids_after, positions, embed, cache=None, key_valid=None):
        shapes["head"].append((tuple(ids_after.shape), cache.key_slots().shape[1]))
        return real_head(self, h_in, ids_after, positions, embed, cache, key_valid)

    monkeypatch.setattr(SDARModel, "forward", fwd)
    monkeypatch.setattr(MRPHead, "forward", head_fwd)
    for static, want_one in ((True, True), (False, False)):
        for v in shapes.values():
            v.clear()
        generate(m, ps, Speculative(2, "mrp", head=h), 4, MASK, [MASK], 16, pad_id=PAD, static_cache=static)
        # keys read (mask (B, 1, T, S_past + T)): one width for the whole generation; the leading dim still takes
        # one value per candidate count (the fold verify's B * M), a bounded set of graphs, not one per length
        key_widths = {s[-1] for s in shapes["backbone"]}
        assert (len(key_widths) == 1) == want_one, (static, key_widths)
        assert {s[0] for s in shapes["backbone"]} <= {len(ps) * M for M in (1, 2, 3)}
        assert (len(set(shapes["head"])) == 1) == want_one, (static, set(shapes["head"]))
