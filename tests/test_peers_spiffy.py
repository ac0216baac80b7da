"""decoding.peers_spiffy: the calibrated draft graph is lossless against its base (static(1), dynamic(0.9)) in fp32
and bf16 on random models full of near-ties; the chain graph is the no-head drafter round for round; calibration
counts every anchor's path; the comparison can fail (a verify one ulp off changes tokens).

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_peers_spiffy.py
"""

import pytest
import torch

from mrp_repro.decoding import Dynamic, Speculative, Static, generate
from mrp_repro.decoding.mismatch import MASK, PAD, common_token, random_backbone, random_prompts
from mrp_repro.decoding.peers_spiffy import DraftGraph, GraphRecorder, Spiffy, calibrate
from mrp_repro.model import ModelOutput

torch.set_num_threads(1)

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def _run(m, ps, policy, block, eos, max_new, batch=8, **kw):
    toks, stats = [], []
    for i in range(0, len(ps), batch):
        r = generate(m, ps[i : i + batch], policy, block, MASK, eos, max_new, pad_id=PAD, **kw)
        toks += r.tokens
        stats += r.stats
    return toks, stats


def _forwards(stats):
    return sum(s.denoise_forwards for s in stats)


def _graphs(m, block, eos, max_new, base, Ds, seed):
    """Graphs calibrated on held-out prompts (another seed than the evaluated ones), plus the chains."""
    held_out = random_prompts(12, 1000 + seed, max_len=2 * block + 3)
    rec = GraphRecorder(base)
    for i in range(0, len(held_out), 6):
        generate(m, held_out[i : i + 6], rec, block, MASK, eos, max_new, pad_id=PAD, trace=False)
    return [rec.build_graph(D) for D in Ds] + [DraftGraph.chain(D, base.name) for D in Ds]


def _compare(dtype, base, std, Ds, model=None, n_prompts=12):
    """(rows, rows differing from `base`, forwards of base, of the best graph) over blocks 4 / 8 / 16."""
    m = random_backbone(0, dtype, std=std)
    if model is not None:
        m = model(m)
    rows = bad = 0
    base_fw = best_fw = 0
    for block in (4, 8, 16):
        ps = random_prompts(n_prompts, block, max_len=2 * block + 3)
        max_new = 2 * block + 3
        eos = [common_token(m, ps, block)]
        want, ws = _run(m, ps, base, block, eos, max_new)
        assert any(len(t) < max_new for t in want), "no row stops at EOS: finished rows untested"
        base_fw += _forwards(ws)
        fws = []
        for g in _graphs(m, block, eos, max_new, base, Ds, block):
            got, gs = _run(m, ps, Spiffy(g, base), block, eos, max_new)
            rows += len(got)
            bad += sum(a != b for a, b in zip(got, want, strict=True))
            fws.append(_forwards(gs))
        best_fw += min(fws)
    return rows, bad, base_fw, best_fw


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("std", [0.3, 1.0])
def test_spiffy_equals_static_token_for_token(dtype, std):
    """D = K and 2K (K = 2, 3), calibrated and chain graphs, batches with left padding and finished rows."""
    rows, bad, base_fw, best_fw = _compare(DTYPES[dtype], Static(1), std, Ds=(2, 3, 4, 6))
    assert rows >= 3 * 8 * 12
    assert bad == 0, f"{bad} of {rows} spiffy rows differ from static(1) in {dtype}"
    assert best_fw < base_fw  # the walk did accept: the identity is not that of a graph that never moves


@pytest.mark.parametrize("dtype", DTYPES)
def test_spiffy_over_dynamic_equals_dynamic_token_for_token(dtype):
    """Over dynamic(0.9) on models sharp enough that dynamic(0.9) reveals several tokens in a step."""
    m = random_backbone(0, DTYPES[dtype], std=1.0)
    ps = random_prompts(12, 8, max_len=19)
    eos = [common_token(m, ps, 8)]
    assert _forwards(_run(m, ps, Dynamic(0.9), 8, eos, 19)[1]) < _forwards(_run(m, ps, Static(1), 8, eos, 19)[1])
    rows, bad, base_fw, best_fw = _compare(DTYPES[dtype], Dynamic(0.9), 1.0, Ds=(3, 6))
    assert rows >= 3 * 4 * 12
    assert bad == 0, f"{bad} of {rows} spiffy rows differ from dynamic(0.9) in {dtype}"
    assert best_fw < base_fw


def _one_ulp_verify(m):
    """m, whose verify returns forward_block's logits with the runner-up set one ulp above the top everywhere."""
    exact = m.forward_candidates

    def verify(*args, **kw):
        out = exact(*args, **kw)
        logits = out.logits.clone()
        top = logits.topk(2, dim=-1)
        bumped = torch.nextafter(top.values[..., :1], torch.full_like(top.values[..., :1], float("inf")))
        logits.scatter_(-1, top.indices[..., 1:], bumped)
        return ModelOutput(logits, out.hidden)

    m.forward_candidates = verify
    return m


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_comparison_can_fail(dtype):
    """A verify one ulp off (by construction, on any CPU) sends some rows elsewhere: the identity above is tested."""
    rows, bad, _, _ = _compare(DTYPES[dtype], Static(1), 0.3, Ds=(3,), model=_one_ulp_verify, n_prompts=6)
    assert bad > 0, f"a one-ulp verify matched static(1) on all {rows} rows"


@pytest.mark.parametrize("K", [1, 2, 3, 5])
def test_chain_graph_is_the_no_head_drafter(K):
    """Spiffy(chain(K)) = speculative(K, naive): tokens, forwards, extra rows, rounds and accept lengths."""
    m = random_backbone(1, torch.float32)
    for block in (4, 8):
        ps = random_prompts(10, block + K, max_len=2 * block + 3)
        eos = [common_token(m, ps, block)]
        a, sa = _run(m, ps, Spiffy(DraftGraph.chain(K)), block, eos, 2 * block + 3, batch=4)
        b, sb = _run(m, ps, Speculative(K, "naive"), block, eos, 2 * block + 3, batch=4)
        assert a == b
        for x, y in zip(sa, sb, strict=True):
            assert (x.denoise_forwards, x.extra_rows, x.rounds, x.accepted, x.accept_lengths) == (
                y.denoise_forwards, y.extra_rows, y.rounds, y.accepted, y.accept_lengths)  # fmt: skip
        assert K == 1 or sum(s.extra_rows for s in sa) > 0


def test_fused_commit_keeps_the_identity():
    """With fuse_commit the block's first forward is the fused one for both: spiffy still reproduces static(1)."""
    m = random_backbone(2, torch.bfloat16)
    ps = random_prompts(12, 5, max_len=11)
    eos = [common_token(m, ps, 4)]
    want, _ = _run(m, ps, Static(1), 4, eos, 11, fuse_commit=True)
    g = _graphs(m, 4, eos, 11, Static(1), (4,), 0)[0]
    got, stats = _run(m, ps, Spiffy(g), 4, eos, 11, fuse_commit=True)
    assert got == want and sum(s.fused_commits for s in stats) > 0


def test_calibration_counts_every_anchor_path():
    """With every token rank kept, each (row, step) anchor whose S1 has a mask left traces one node per later step:
    anchors sum over row-blocks n - 1 (n: the block's reveals; the last step's S1 is full), and the nodes of d >= 1
    pairs max(n - d, 0) (anchors t = 0 .. n - 1 - d reach depth d)."""
    m = random_backbone(3, torch.float32)
    block = 8
    ps = random_prompts(6, 7, max_len=19)
    eos = [common_token(m, ps, block)]
    rec = GraphRecorder(Static(1), token_ranks=m.config.vocab_size)
    res = generate(m, ps, rec, block, MASK, eos, 19, pad_id=PAD)
    per_block: dict = {}
    for e in res.trace:
        per_block[(e["row"], e["block"])] = per_block.get((e["row"], e["block"]), 0) + 1
    assert rec.anchors == sum(max(n - 1, 0) for n in per_block.values())
    for d in (1, 2, 3):
        got = sum(c for node, c in rec.nodes.items() if len(node) == d)
        assert got == sum(max(n - d, 0) for n in per_block.values()), d
    g = rec.build_graph(6)
    assert g.nodes[0] == () and len(g.nodes) == 6 and g.counts[0] == rec.anchors
    for node in g.nodes[1:]:  # every node hangs from an earlier one (one pair less, over static(1))
        assert any(set(p) < set(node) and len(p) == len(node) - 1 for p in g.nodes[: g.nodes.index(node)])


def test_greedy_graph_keeps_the_most_frequent_reachable_nodes():
    rec = GraphRecorder(Static(1))
    a, b, c = ((0, 0),), ((1, 0),), ((0, 1),)
    ab, ac = ((0, 0), (1, 0)), ((0, 0), (1, 1))
    for parent, child, n in (((), a, 10), ((), b, 5), (a, ab, 6), (b, ab, 2), (a, ac, 1), ((), c, 5)):
        rec.edges[(parent, child)] += n
        rec.nodes[child] += n
    rec.anchors = 20
    assert rec.build_graph(1).nodes == ((),)
    assert rec.build_graph(3).nodes == ((), a, ab)  # ab (8) before b (5): reachable through a
    assert rec.build_graph(5).nodes == ((), a, ab, c, b)  # b and c tie at 5: the lexicographically first, c
    assert rec.build_graph(9).nodes == ((), a, ab, c, b, ac)  # no more observed nodes
    assert rec.build_graph(3).counts == (20, 10, 8)


def test_graph_declarations():
    g = DraftGraph.chain(3)
    assert g.nodes == ((), ((0, 0),), ((0, 0), (1, 0))) and g.D == 3 and g.kind == "chain"
    assert DraftGraph.from_json(g.to_json()) == g
    assert Spiffy(g).name == "spiffy(3,chain)" and Spiffy(g).K == 3
    cal = DraftGraph(((), ((0, 1),)), "dynamic(0.9)", counts=(4, 2))
    assert Spiffy(cal, Dynamic(0.9)).name == "spiffy(2,dynamic(0.9))"
    assert DraftGraph.from_json(cal.to_json()).counts == (4, 2)
    with pytest.raises(ValueError, match="calibrated over"):
        Spiffy(cal)  # a graph of dynamic(0.9) decoding over static(1)
    with pytest.raises(ValueError, match="root"):
        DraftGraph((((0, 0),),))
    with pytest.raises(ValueError, match="one token per slot"):
        DraftGraph(((), ((0, 0), (0, 1))))
    with pytest.raises(ValueError, match="static\\(1\\) or dynamic"):
        Spiffy(DraftGraph.chain(2, "static(2)"), Static(2))
    with pytest.raises(ValueError, match="choose one of"):
        Spiffy(g, verify="fast")


def test_calibrate_convenience_matches_the_recorder():
    m = random_backbone(4, torch.float32)
    ps = random_prompts(8, 3, max_len=11)
    eos = [common_token(m, ps, 4)]
    g = calibrate(m, ps, Static(1), 4, 4, MASK, eos, 11, pad_id=PAD, batch_size=8)
    rec = GraphRecorder(Static(1))
    generate(m, ps, rec, 4, MASK, eos, 11, pad_id=PAD)
    assert g == rec.build_graph(4) and g.kind == "calibrated"
