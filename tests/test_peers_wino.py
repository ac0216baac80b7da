"""decoding.peers_wino: WINO's reveal rule is dynamic(τ1)'s (with nothing re-masked and no cap, the exact shadow
decodes dynamic(τ1) token for token, fp32 and bf16); its shadow pass is charged in RowStats.extra_rows; the shadow
block is leave-one-out (slot i never sees its own token); re-masking keeps WINO's net progress and caps.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_peers_wino.py
"""

import pytest
import torch

from mrp_repro.decoding import Dynamic, generate
from mrp_repro.decoding.mismatch import CONFIG, MASK, PAD, cached_state, common_token, random_backbone, random_prompts
from mrp_repro.decoding.peers_wino import Wino, shadow_mask, wino_max_accept
from mrp_repro.model import ModelConfig, SDARModel

torch.set_num_threads(1)

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def _run(m, ps, policy, block, eos, max_new, batch=8, **kw):
    toks, stats, trace = [], [], []
    for i in range(0, len(ps), batch):
        r = generate(m, ps[i : i + batch], policy, block, MASK, eos, max_new, pad_id=PAD, **kw)
        toks += r.tokens
        stats += r.stats
        trace.append(r.trace)
    return toks, stats, trace


def _setup(dtype, block=8, seed=0, n=16):
    m = random_backbone(seed, dtype, std=1.0)  # sharp enough that dynamic reveals several tokens per step
    ps = random_prompts(n, block + seed, max_len=2 * block + 3)
    return m, ps, [common_token(m, ps, block)], 2 * block + 3


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tau", [0.9, 0.5])
def test_exact_shadow_without_remasking_is_dynamic(dtype, tau):
    """τ2 = 0 re-masks nothing; with no cap the reveals are dynamic(τ1)'s on logits bitwise a block forward's."""
    for block in (4, 8):
        m, ps, eos, max_new = _setup(DTYPES[dtype], block)
        want, ws, _ = _run(m, ps, Dynamic(tau), block, eos, max_new)
        got, gs, _ = _run(m, ps, Wino(tau, 0.0, shadow="exact", max_accept=None), block, eos, max_new)
        assert got == want, (dtype, tau, block)
        assert [s.denoise_forwards for s in gs] == [s.denoise_forwards for s in ws]
        assert sum(s.revoked for s in gs) == 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_shadow_block_is_charged_its_extra_row(dtype):
    """shadow="block": one forward of 2L rows per step, charged 1 extra row per step on every row that needs it; a
    policy that did not charge it (extra_rows 0) fails here."""
    m, ps, eos, max_new = _setup(DTYPES[dtype])
    _, stats, _ = _run(m, ps, Wino(0.5, 0.9), 8, eos, max_new)
    assert all(s.extra_rows == s.denoise_forwards > 0 for s in stats)
    _, dyn, _ = _run(m, ps, Dynamic(0.5), 8, eos, max_new)
    assert all(s.extra_rows == 0 for s in dyn)  # a plain block forward has none


def test_the_exact_shadow_is_charged_its_leave_one_out_rows():
    """shadow="exact", one row per batch: each step verifies the block and one state per earlier reveal, so the
    extra rows are, summed over steps, the reveals standing in the block before the step (counted from the trace)."""
    m, ps, eos, max_new = _setup(torch.float32, n=8)
    _, stats, traces = _run(m, ps, Wino(0.3, 0.99, shadow="exact"), 8, eos, max_new, batch=1)
    assert sum(s.revoked for s in stats) > 0
    assert sum(s.extra_rows for s in stats) > 0
    for s, trace in zip(stats, traces, strict=True):
        standing: dict = {}  # block -> slots revealed and not revoked
        steps: dict = {}
        for e in trace:
            steps.setdefault((e["block"], e["step"]), []).append(e)
        want = 0
        for (block, _), events in sorted(steps.items()):
            want += len(standing.get(block, set()))
            for e in events:
                slots = standing.setdefault(block, set())
                (slots.add if e["kind"] == "reveal" else slots.discard)(e["pos"])
        assert s.extra_rows == want  # 0 on a row whose blocks each took one step


@pytest.mark.parametrize("dtype", DTYPES)
def test_remasking_keeps_net_progress_and_caps(dtype):
    """Per step: reveals at most max_accept(n), re-masks only when it revealed more than one, never as many as the
    previous step revealed; tokens is net of re-masks; every block ends; the wino cap bites sometimes."""
    m, ps, eos, max_new = _setup(DTYPES[dtype], block=16, n=12)
    toks, stats, traces = _run(m, ps, Wino(0.3, 0.95), 16, eos, max_new, batch=4)
    assert sum(s.revoked for s in stats) > 0
    capped = 0
    for trace in traces:
        per: dict = {}
        for e in trace:
            per.setdefault((e["row"], e["block"]), {}).setdefault(e["step"], []).append(e["kind"])
        for steps in per.values():
            kinds = [k for ks in steps.values() for k in ks]
            masked = kinds.count("reveal") - kinds.count("revoke")  # the block ends with none: its masks at the start
            last = None
            for step in sorted(steps):
                rev, rem = steps[step].count("reveal"), steps[step].count("revoke")
                cap = int(wino_max_accept(torch.tensor([masked]))[0])
                assert 1 <= rev <= cap
                assert rem == 0 or rev > 1
                assert last is None or rem <= last - 1
                capped += rev == cap < masked
                masked += rem - rev
                last = rev
            assert masked == 0
    assert sum(s.tokens for s in stats) >= sum(len(t) for t in toks)
    assert capped > 0


def test_fused_commit_is_written_on_its_own():
    """The wide call cannot carry a fused commit: it is written first, so fuse_commit decodes as without it."""
    m, ps, eos, max_new = _setup(torch.bfloat16)
    a, sa, _ = _run(m, ps, Wino(0.5, 0.9), 8, eos, max_new)
    b, sb, _ = _run(m, ps, Wino(0.5, 0.9), 8, eos, max_new, fuse_commit=True)
    assert a == b
    assert [s.denoise_forwards for s in sa] == [s.denoise_forwards for s in sb]
    assert [s.commit_forwards for s in sa] == [s.commit_forwards for s in sb]


def test_shadow_block_attention():
    """Main rows of the wide call are a block forward (float64, to rounding); shadow row i is blind to main slot i:
    in a one-layer model its logits do not move when slot i's token changes, and they do when another's does."""
    block = 8
    m = random_backbone(5, torch.float64)
    with torch.no_grad():
        cache, pos, kv, g = cached_state(m, 4, block, context_blocks=2, seed=1)
        ids = torch.randint(3, CONFIG.vocab_size, (4, block), generator=g)
        ids[torch.rand(4, block, generator=g) < 0.4] = MASK
        wide = m(torch.cat([ids, torch.full_like(ids, MASK)], 1), torch.cat([pos, pos], 1),
                 shadow_mask(m, cache, kv), cache)  # fmt: skip
        want = m.forward_block(ids, pos, cache, kv)
        assert torch.allclose(wide.logits[:, :block], want.logits, atol=1e-9)

        cfg = ModelConfig(**{**CONFIG.__dict__, "num_layers": 1})
        one = SDARModel(cfg).init_weights(std=0.5, generator=torch.Generator().manual_seed(2)).double().eval()
        cache1, pos1, kv1, _ = cached_state(one, 4, block, context_blocks=2, seed=1, finished=False)

        def shadow(x):
            out = one(torch.cat([x, torch.full_like(x, MASK)], 1), torch.cat([pos1, pos1], 1),
                      shadow_mask(one, cache1, kv1), cache1)  # fmt: skip
            return out.logits[:, block:]

        base = shadow(ids)
        for i in (0, 3):
            x = ids.clone()
            x[:, i] = (x[:, i] + 7) % CONFIG.vocab_size
            moved = shadow(x)
            assert torch.equal(moved[:, i], base[:, i])  # slot i's own token is hidden from its shadow
            assert not torch.allclose(moved[:, (i + 1) % block], base[:, (i + 1) % block])


def test_names_and_arguments():
    assert Wino().name == "wino(0.6,0.9)" and Wino(0.5, 0.8, "exact", None).name == "wino(0.5,0.8,exact,nocap)"
    w = Wino(0.5, 0.8)
    assert (w.tau, w.rule, w.delta, w.algorithm) == (0.5, "wino", 0.8, "peer")
    assert wino_max_accept(torch.tensor([16, 4, 40, 8])).tolist() == [11, 5, 20, 5]
    with pytest.raises(ValueError, match="choose one of"):
        Wino(shadow="half")
    with pytest.raises(ValueError, match="max_accept"):
        Wino(max_accept="all")
    with pytest.raises(ValueError, match="thresholds"):
        Wino(1.5, 0.9)
