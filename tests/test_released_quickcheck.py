"""The quick check's expected numbers and wall-time arithmetic (mrp_repro.report.quickcheck), and where `make
gpu-check` writes (issue 21).

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_released_quickcheck.py
"""

import math

import numpy as np
import pytest
from mrp_repro import gpu_check
from mrp_repro.config import load_profile
from mrp_repro.measure.stats import mean_ci
from mrp_repro.report import paper, quickcheck


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


def test_wall_time_counts_each_grid_s_forwards(quick):
    wt = quickcheck.wall_time(quick).set_index(["grid", "setting"])
    longest = quickcheck.ASSUMED["longest_tokens"][0]
    batches = math.ceil(64 / 16) * 2
    static = wt.loc[("modes_runs", "static(1)")]
    assert static["forwards"] == batches * (longest + longest // 16)  # a token per forward + a commit per block
    assert wt.loc[("modes_runs", "direct(2)"), "forwards"] < wt.loc[("modes_runs", "direct(1)"), "forwards"] < \
        static["forwards"]  # fmt: skip
    assert wt.loc[("speculative_runs", "static(1)"), "batches"] == 128  # batch 1: one prompt at a time
    total = wt.loc[("total", "+ 3 min fixed")]
    assert total["minutes"] == pytest.approx(wt["minutes"].iloc[:-1].sum() + 3)
    assert 20 < total["minutes"] < 90  # the profile is sized for about one GPU-hour
    slower = quickcheck.wall_time(quick, forward_ms=30.0)["minutes"].iloc[-1]
    assert slower > total["minutes"]  # a measured per-forward cost replaces the assumed one


def test_gpu_check_writes_only_its_out_dir(tmp_path, monkeypatch):
    """--out is the only output: nothing under figures/ or runs/ (it used to default to figures/gpu_check-<device>)."""
    monkeypatch.setenv("MRP_REPRO_FIGURES", str(tmp_path / "figures"))
    monkeypatch.setenv("MRP_REPRO_RUNS", str(tmp_path / "runs"))
    gpu_check.main(["--out", str(tmp_path / "out"), "--device", "cpu", "--small", "--sections", "verify_bitwise"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert not hasattr(gpu_check, "default_out")
