"""The paper's numbers ship as package data; our tables have the paper's rows and columns."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mrp_repro import paper

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "paper"


@pytest.mark.parametrize("table", paper.TABLES)
def test_package_data_equals_shared_csv(table):
    src = SHARED / f"{table}.csv"
    if not src.exists():
        pytest.skip(f"{src} is absent (the shared directory is not beside this checkout)")
    pd.testing.assert_frame_equal(paper.load(table), pd.read_csv(src))


def test_paper_headline_numbers():
    r = paper.load("remasking")
    gain = r["mrp_remask_accuracy"] - r["baseline_accuracy"]
    assert gain[r["benchmark"] == "humaneval"].max() == pytest.approx(22.6)
    assert gain[r["benchmark"] == "gsm8k"].max() == pytest.approx(17.7)
    assert paper.load("speculative")["throughput_speedup"].max() == pytest.approx(1.40)


def test_mappings():
    assert paper.BENCHMARK_MAP["synth-math"] == "gsm8k"
    assert paper.BENCHMARK_MAP["synth-code"] == "humaneval"
    assert paper.model_for_profile("sdar-8b") == "SDAR-8B"
    assert paper.model_for_profile("tiny") == "tiny"
    assert paper.paper_model("tiny", "direct") == "SDAR-8B"
    assert paper.paper_model("SDAR-4B", "remasking") == "SDAR-4B"


def test_bootstrap_ci_brackets_the_mean():
    m, lo, hi = paper.bootstrap_ci(np.r_[np.ones(30), np.zeros(10)], n_boot=500)
    assert m == pytest.approx(75.0)
    assert lo < m < hi
    assert paper.bootstrap_ci([], 10) != paper.bootstrap_ci([1.0], 10)  # nan vs value


@pytest.fixture(scope="module")
def runs():
    return paper.synthetic_runs(n=30)


def _same_shape(ours: pd.DataFrame, table: str):
    ref = paper.load(table)
    for c in ref.columns:
        assert c in ours.columns, c
        if c not in ("model", "benchmark", "setting", "method", "threshold", "lookahead_k"):
            assert f"paper_{c}" in ours.columns, c
            assert f"{c}_lo" in ours.columns and f"{c}_hi" in ours.columns, c


def test_remasking_table(runs):
    t = paper.remasking_table(runs, n_boot=100)
    _same_shape(t, "remasking")
    assert len(t) == 2 * 4  # benchmarks x thresholds (rule tau)
    row = t[(t["benchmark"] == "synth-math") & (t["threshold"] == 0.5)].iloc[0]
    assert row["paper_baseline_accuracy"] == 41.6 and row["paper_model"] == "SDAR-1.7B"
    assert row["gain"] > 0 and row["gain_lo"] <= row["gain"] <= row["gain_hi"]
    assert t[t["threshold"] == 0.3]["paper_baseline_accuracy"].isna().all()  # not in the paper
    assert len(paper.remasking_table(runs, rule=None, n_boot=10)) == 2 * 4 * 2


def test_speculative_table(runs):
    t = paper.speculative_table(runs, n_boot=100)
    _same_shape(t, "speculative")
    assert (t["identical"] == 1.0).all()
    assert (t["throughput_speedup"] > 1).all() and (t["speedup_basis"] == "wall clock").all()
    assert set(t["paper_throughput_speedup"]) == {1.36, 1.35}


def test_direct_and_lookahead_tables(runs):
    d = paper.direct_table(runs, n_boot=50)
    _same_shape(d, "direct")
    assert sorted(set(d["setting"])) == ["baseline", "mrp_step1", "mrp_step2"]
    la = paper.lookahead_table(runs, n_boot=50)
    _same_shape(la, "lookahead")
    gsm = la[la["benchmark"] == "synth-math"]
    assert gsm["paper_accuracy"].notna().all() and len(gsm) == 8


def test_speedup_falls_back_to_nfe_without_wall_clock(runs):
    t = paper.speculative_table(runs.drop(columns="wall_s"), n_boot=20)
    assert (t["speedup_basis"] == "backbone NFE").all()
    assert t["throughput_speedup"].iloc[0] == pytest.approx(1 / 0.6)


def test_empty_runs_give_empty_tables_with_columns():
    empty = pd.DataFrame(columns=["model", "benchmark", "mode", "problem_id", "correct"])
    for fn in (paper.remasking_table, paper.speculative_table, paper.direct_table, paper.lookahead_table):
        assert fn(empty).empty


def test_result_files_roundtrip(tmp_runs, smoke_profile):
    df = pd.DataFrame({"a": [1, 2]})
    p = paper.save_result(smoke_profile, "adjacent", df)
    assert smoke_profile.hash in str(p) and str(p).startswith(str(tmp_runs))
    pd.testing.assert_frame_equal(paper.load_result(smoke_profile, "adjacent"), df)
    assert paper.load_result(smoke_profile, "trace") is None
    assert set(paper.load_results(smoke_profile)) == {"adjacent"}
    with pytest.raises(ValueError):
        paper.result_path(smoke_profile, "nope")
