"""The quick check's expected numbers and wall-time arithmetic (mrp_repro.report.quickcheck), and where `make
gpu-check` writes (issue 21).

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_released_quickcheck.py
"""

import math
from pathlib import Path

import numpy as np
import pytest

from mrp_repro import gpu_check
from mrp_repro.config import load_profile
from mrp_repro.measure.stats import mean_ci
from mrp_repro.model import ModelConfig
from mrp_repro.mrp import MRPHead
from mrp_repro.report import paper, peers, quickcheck
from mrp_repro.report.grids import GRIDS


@pytest.fixture(scope="module")
def quick():
    return load_profile("sdar-4b-released-quick")


def test_quick_profile_is_the_released_4b_head_on_a_subset(quick):
    assert quick.paper.model == "SDAR-4B" and quick.mrp.pretrained == "heavyball/sdar-4b-mrp-3lyr"
    assert quick.evaluation.n_prompts == 64 and set(quick.evaluation.benchmarks) == {"gsm8k", "humaneval"}
    assert quick.decoding.speculative_k == (3,) and set(quick.decoding.thresholds) == {0.5, 0.7}


@pytest.mark.parametrize("p", [0.323, 0.677, 0.9])
def test_ci_width_matches_the_bootstrap_of_64_outcomes(p):
    """The stated width is what the tables' percentile bootstrap gives for 64 prompts at that accuracy (+-15%)."""
    k = round(p * 64)
    lo, hi = mean_ci(np.array([1.0] * k + [0.0] * (64 - k)), n_boot=4000, seed=0)[1:]
    assert quickcheck.ci_width(k / 64, 64) == pytest.approx(hi - lo, rel=0.15)


def test_expected_cells_are_the_paper_values_of_the_declared_model(quick):
    exp = quickcheck.expected(quick)
    assert set(exp["table"]) == {"speculative", "remasking", "lookahead"}  # the paper's direct table is SDAR-8B only
    spec = paper.load("speculative").set_index(["model", "benchmark"])
    for r in exp[(exp["table"] == "speculative") & (exp["metric"] == "accuracy")].itertuples():
        assert r.paper == spec.loc[("SDAR-4B", r.benchmark), "accuracy"] and r.n == 64
        assert r.ci_width == pytest.approx(quickcheck.ci_width(r.paper / 100, 64), abs=0.05)
    rem = paper.load("remasking")
    row = rem[(rem["model"] == "SDAR-4B") & (rem["threshold"] == 0.5) & (rem["benchmark"] == "gsm8k")].iloc[0]
    gain = exp[(exp["setting"] == "remask(0.5,tau) - dynamic") & (exp["benchmark"] == "gsm8k")].iloc[0]
    assert gain["paper"] == pytest.approx(row.mrp_remask_accuracy - row.baseline_accuracy)
    assert "paper - 5" in gain["tolerance"]
    assert set(exp.loc[exp["table"] == "lookahead", "setting"]) == {"naive_mtp K=1", "naive_mtp K=2", "mrp K=1",
                                                                     "mrp K=2"}  # fmt: skip
    eight = quickcheck.expected(quick.replace({"paper.model": "SDAR-8B"}))
    assert "direct" in set(eight["table"]) and "lookahead" not in set(eight["table"])


def test_wall_time_counts_the_forwards_the_code_makes(quick):
    wt = quickcheck.wall_time(quick).set_index(["grid", "setting"])
    longest = quickcheck.ASSUMED["longest_tokens"][0]
    batches = math.ceil(64 / 16) * 2
    static = wt.loc[("modes_runs", "static(1)")]
    for end, name in ((0, "low"), (1, "high")):  # a token per forward + a commit per block, at both answer lengths
        assert static[f"forwards_{name}"] == batches * (longest[end] + longest[end] // 16)
    assert wt.loc[("modes_runs", "direct(2)"), "forwards_low"] < wt.loc[("modes_runs", "direct(1)"), "forwards_low"] \
        < static["forwards_low"]  # fmt: skip
    assert wt.loc[("speculative_runs", "static(1)"), "batches"] == 128  # batch 1: one prompt at a time
    total = wt.loc[("total", "+ 3 min fixed")]
    assert total["minutes_low"] == pytest.approx(wt["minutes_low"].iloc[:-1].sum() + 3)
    assert total["minutes_low"] < total["minutes_high"]
    slower = quickcheck.wall_time(quick, forward_ms=30.0)["minutes_low"].iloc[-1]
    assert slower > total["minutes_low"]  # a measured per-forward cost replaces the assumed one
    assert {g for g, _ in wt.index} == set(GRIDS) | {peers.GRID, "total"}  # every grid the notebooks run
    # the peers grid: what it decodes, not what it reads from modes_runs (our static(1) is decoded: its clock)
    spec = peers.grid_settings(quick, MRPHead(ModelConfig(8, 8, 8, 1, 1, 1, 8), 1), None, prepare=False)
    reused = set(peers.reused_settings(quick, object(), spec))
    estimated = set(wt.loc[peers.GRID].index)
    assert reused and not reused & estimated and estimated | reused == {pol.name for _, _, pol in spec}
    assert {"static(1)", "spiffy(3,chain)", "wino(0.5,0.9)"} <= estimated


def test_block_calls_are_what_speculative_decodes():
    """A block of 16 at one token per round, K = 3, as mrp_modes.Speculative and upstream.UpstreamSpeculative decode
    it: ours verifies min(K, m - 1) candidates with m masked (none on the last slot) after min(K, m) - 1 head drafts;
    upstream verifies K + 1 every round after K - 1 head calls (the old arithmetic: K head calls, one verify)."""
    from mrp_repro.decoding import Speculative
    from mrp_repro.decoding.upstream import UpstreamSpeculative

    parts, heads = quickcheck.block_calls("speculative", Speculative(3, "mrp", head=object()), 16, fused=False)
    verifies = [M for M, n in parts for _ in range(n) if M > 0]
    assert len(verifies) == 15 and verifies[-2:] == [2, 1] and heads == 2 * 14 + 1
    parts, heads = quickcheck.block_calls("speculative", UpstreamSpeculative(3, object()), 16, fused=False)
    assert (4, 16) in parts and heads == 16 * 2


def test_block_calls_of_the_peers():
    """A draft graph of D nodes verifies as the chain at K = D, with no head call; the MRP draft tree drafts one head
    step fewer a round than the chain; WINO makes one wide call (block and shadow block) per token, no head call."""
    from mrp_repro.decoding import Speculative
    from mrp_repro.decoding.mrp_tree import SpeculativeTree
    from mrp_repro.decoding.peers_spiffy import DraftGraph, Spiffy
    from mrp_repro.decoding.peers_wino import Wino

    chain, chain_heads = quickcheck.block_calls("speculative", Speculative(3, "mrp", head=object()), 16, fused=True)
    graph, graph_heads = quickcheck.block_calls("speculative", Spiffy(DraftGraph.chain(3)), 16, fused=True)
    assert graph == chain and graph_heads == 0
    naive = quickcheck.block_calls("speculative", Speculative(3, "naive"), 16, fused=True)
    assert naive == (chain, 0)  # the SSD / FreeDave chain: Spiffy's chain graph
    tree, tree_heads = quickcheck.block_calls("speculative", SpeculativeTree(3, head=object()), 16, fused=True)
    assert tree == chain and tree_heads == 1 * 14 + 0  # min(3, m) - 2 drafts with m masked: 14 rounds of 1
    assert chain_heads - tree_heads == 15  # one fewer in every round with a draft to spare
    parts, heads = quickcheck.block_calls("remask", Wino(0.5, 0.9), 16, fused=False)
    assert parts == [(quickcheck.WIDE, 16), (0, 1)] and heads == 0
    # as many calls, each over twice the query rows: dearer where a batch of 64 is compute-bound, not in calls
    wide = quickcheck._block_cost("remask", Wino(0.5, 0.9), 64, 16, False, 100.0, "loop", 0, None)
    plain = quickcheck._block_cost("dynamic", Speculative(3, "naive"), 64, 16, False, 100.0, "loop", 0, None)
    assert wide[0] == plain[0] == 17 and wide[2] > plain[2]
    # S2D2 (a dynamic-mode peer): a draft forward and a 2-block verify per token; the class, not (mode, family),
    # says so: another peer decoded in mode dynamic is charged as dynamic decoding
    from mrp_repro.decoding import Dynamic
    from mrp_repro.decoding.peers_s2d2 import S2D2

    assert quickcheck.block_calls("dynamic", S2D2(0.9, 1.0), 16, fused=False) == (
        [(0, 16), (quickcheck.WIDE, 16), (0, 1)], 0)
    other_peer = Dynamic(0.9)
    other_peer.algorithm = "peer"
    assert quickcheck.block_calls("dynamic", other_peer, 16, fused=False) == ([(0, 16), (0, 1)], 0)


def test_docs_table_is_the_code_s(quick):
    """docs/gpu.md's time table is docs_table() of the quick profile (rewrite: quickcheck --write-docs docs/gpu.md)."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "gpu.md").read_text()
    i, j = text.index(quickcheck.DOCS_BEGIN) + len(quickcheck.DOCS_BEGIN), text.index(quickcheck.DOCS_END)
    assert text[i:j].strip() == quickcheck.docs_table(quick).strip()


def test_gpu_check_writes_only_its_out_dir(tmp_path, monkeypatch):
    """--out is the only output: nothing under figures/ or runs/ (it used to default to figures/gpu_check-<device>)."""
    monkeypatch.setenv("MRP_REPRO_FIGURES", str(tmp_path / "figures"))
    monkeypatch.setenv("MRP_REPRO_RUNS", str(tmp_path / "runs"))
    gpu_check.main(["--out", str(tmp_path / "out"), "--device", "cpu", "--small", "--sections", "verify_bitwise"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert not hasattr(gpu_check, "default_out")
