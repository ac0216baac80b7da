"""The paper's numbers ship as package data; our tables have the paper's rows and columns."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from runs_helpers import SPEC_K, synthetic_runs

from mrp_repro.config import load_profile
from mrp_repro.measure import stats
from mrp_repro.measure.runs import model_for_profile
from mrp_repro.report import claims, paper

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
    assert model_for_profile(load_profile("sdar-8b")) == "SDAR-8B"
    assert model_for_profile(load_profile("tiny")) == "tiny"
    assert paper.reports("SDAR-8B", "direct") and not paper.reports("SDAR-8B", "lookahead")


def test_a_profile_extending_sdar_4b_under_another_name_compares_with_sdar_4b(tmp_path):
    """The paper model is declared (paper.model), inherited through extends, never guessed from the name."""
    y = tmp_path / "my-4b-run.yaml"
    y.write_text("extends: sdar-4b\nname: my-4b-run\n")
    p = load_profile(str(y))
    assert (p.paper.model, p.paper.comparable, model_for_profile(p)) == ("SDAR-4B", True, "SDAR-4B")
    assert claims.is_numeric_profile(p)
    # every paper value beside its rows is SDAR-4B's: the remasking table of 4B runs quotes 4B's baselines
    runs = synthetic_runs(n=10, model="SDAR-4B")
    runs["paper_model"] = p.paper.model
    t = paper.remasking_table(runs, n_boot=0)
    ref = paper.load("remasking")
    ref = ref[ref["model"] == "SDAR-4B"]
    for r in t.itertuples():
        want = ref[(ref["benchmark"] == r.paper_benchmark) & ((ref["threshold"] - r.threshold).abs() < 1e-9)]
        assert set(t["paper_model"]) == {"SDAR-4B"}
        if len(want):
            assert r.paper_baseline_accuracy == pytest.approx(float(want["baseline_accuracy"].iloc[0]))
    # and a tiny run (declared SDAR-8B) gets no value for a table the paper reports for 4B only
    tiny = synthetic_runs(n=10)
    tiny["paper_model"] = load_profile("tiny").paper.model
    assert paper.lookahead_table(tiny, n_boot=0)["paper_accuracy"].isna().all()


@pytest.fixture(scope="module")
def runs():
    return synthetic_runs(n=30)


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
    assert row["paper_baseline_accuracy"] == 67.9 and row["paper_model"] == "SDAR-8B"  # tiny's declared model
    assert row["gain"] > 0 and row["gain_lo"] <= row["gain"] <= row["gain_hi"]
    assert t[t["threshold"] == 0.3]["paper_baseline_accuracy"].isna().all()  # not in the paper
    assert len(paper.remasking_table(runs, rule=None, n_boot=10)) == 2 * 4 * 2


def test_remasking_table_keeps_the_families_apart():
    """Upstream remasking rows pair with upstream dynamic(τ), one row per δ; ours stays the default table."""
    runs = synthetic_runs(n=20, algorithms=("ours", "upstream"))
    assert paper.remasking_table(runs, n_boot=0).equals(
        paper.remasking_table(runs[runs["algorithm"] == "ours"], n_boot=0))
    up = paper.remasking_table(runs, rule="delta", algorithm="upstream", n_boot=0)
    assert "algorithm" not in up.columns and sorted(set(up["delta"])) == [1.0, 2.0] and len(up) == 2 * 4 * 2
    base = runs[(runs["setting"] == "upstream_dynamic(0.5)") & (runs["benchmark"] == "synth-math")]
    row = up[(up["benchmark"] == "synth-math") & (up["threshold"] == 0.5) & (up["delta"] == 1.0)].iloc[0]
    assert row["baseline_accuracy"] == pytest.approx(100 * base["correct"].mean())  # its own family's baseline
    both = paper.remasking_table(runs, rule=None, algorithm=None, n_boot=0)
    assert set(zip(both["algorithm"], both["rule"], strict=True)) == {("ours", "tau"), ("ours", "delta"),
                                                                       ("upstream", "delta")}  # fmt: skip
    assert len(both) == 2 * 4 * (2 + 2)  # benchmarks x thresholds x (ours tau, ours delta, upstream δ 1, 2)
    assert both.loc[both["rule"] == "tau", "delta"].isna().all()


def test_speculative_table_keeps_every_k(runs):
    t = paper.speculative_table(runs, n_boot=100)
    _same_shape(t, "speculative")
    # one row per benchmark x K: no K is dropped (the old table kept the best K per benchmark)
    assert sorted(zip(t["benchmark"], t["K"], strict=True)) == sorted(
        (b, k) for b in ("synth-code", "synth-math") for k in SPEC_K
    )
    assert (t["identical_share"] == 1.0).all() and (t["accuracy"] == t["static_accuracy"]).all()
    assert (t["throughput_speedup"] > 1).all()
    assert t["nfe_speedup"].iloc[0] == pytest.approx(36 / (19 + 4))  # 32 tokens / (19 + 4) vs 32 / (32 + 4)
    # the paper's speculative table is the released code's K = 3: nothing beside our own algorithm's rows
    assert t["paper_throughput_speedup"].isna().all()
    assert t["paper_accuracy"].isna().all()
    oracle = paper.speculative_table(runs, drafter="oracle", n_boot=10)
    assert (oracle["tpf"] > t["tpf"]).all()


def test_speculative_table_keys_the_algorithm_never_pooled():
    both = synthetic_runs(n=20, algorithms=("ours", "upstream"))
    t = paper.speculative_table(both, n_boot=20)
    assert sorted(zip(t["benchmark"], t["algorithm"], t["K"], strict=True)) == sorted(
        (b, a, k) for b in ("synth-code", "synth-math") for a in ("ours", "upstream") for k in SPEC_K
    )
    up, ours = t[t["algorithm"] == "upstream"], t[t["algorithm"] == "ours"]
    # each family against its own static: upstream 32 tokens / (16 + 4) forwards vs its static 32 / (32 + 4)
    assert up["nfe_speedup"].iloc[0] == pytest.approx(36 / 20)
    assert ours["nfe_speedup"].iloc[0] == pytest.approx(36 / 23)
    # their accounting on upstream rows only: tokens per their (batched) denoising forward
    assert ours["upstream_tpf"].isna().all() and up["upstream_tpf"].to_numpy() == pytest.approx(1.5 * up["tpf"])
    at_paper = (t["algorithm"] == "upstream") & (t["K"] == paper.PAPER_SPECULATIVE_K)
    assert set(t.loc[at_paper, "paper_throughput_speedup"]) == {1.40, 1.34}  # SDAR-8B gsm8k, humaneval
    assert t.loc[~at_paper, "paper_throughput_speedup"].isna().all()  # upstream K = 5, ours at every K
    s = stats.summarize(both[both["mode"].isin(["static", "speculative"])], n_boot=0)
    assert (s.loc[s["setting"] == "upstream_static(1)", "speedup"] == 1.0).all()  # its own static, not ours


def test_direct_and_lookahead_tables(runs):
    d = paper.direct_table(runs, n_boot=50)
    _same_shape(d, "direct")
    assert sorted(set(d["setting"])) == ["baseline", "mrp_step1", "mrp_step2"]
    la = paper.lookahead_table(runs, n_boot=50)
    _same_shape(la, "lookahead")
    gsm = la[la["benchmark"] == "synth-math"]
    assert gsm["paper_accuracy"].isna().all() and len(gsm) == 8  # the paper's lookahead table is SDAR-4B only
    la4 = paper.lookahead_table(runs.assign(paper_model="SDAR-4B"), n_boot=0)
    assert la4[la4["benchmark"] == "synth-math"]["paper_accuracy"].notna().all()


def test_tables_name_missing_columns_and_refuse_blends(runs):
    with pytest.raises(KeyError, match="identical_to_static"):
        paper.speculative_table(runs.drop(columns="identical_to_static"))
    with pytest.raises(KeyError, match="K"):
        paper.lookahead_table(runs.drop(columns="K"))
    with pytest.raises(ValueError, match="no remask"):
        paper.remasking_table(runs[runs["mode"] != "remask"])
    two_batches = pd.concat([runs, runs.assign(batch_size=1)], ignore_index=True)
    with pytest.raises(ValueError, match="more than once"):
        paper.speculative_table(two_batches, n_boot=10)


def test_backbone_and_modes_tables_in_percent(runs):
    b = paper.backbone_table(runs, n_boot=50)
    assert set(b["setting"]) == {"static(1)"} | {f"dynamic({t})" for t in (0.9, 0.7, 0.5, 0.3)}
    st = b[b["setting"] == "static(1)"]
    assert (st["speedup"] == 1.0).all()
    assert ((b["accuracy_lo"] <= b["accuracy"]) & (b["accuracy"] <= b["accuracy_hi"])).all()
    assert b["accuracy"].max() > 1  # percent, not a fraction
    m = paper.modes_table(runs, n_boot=20)
    assert set(m["mode"]) == {"static", "dynamic", "speculative", "direct", "naive", "remask"}
    spec = m[(m["mode"] == "speculative") & (m["benchmark"] == "synth-math")]
    spec = spec.set_index("setting")["tpf_share_of_oracle"]
    assert spec["speculative(3,oracle)"] == 1.0 and 0 < spec["speculative(3,mrp)"] < 1
    assert m["tpf_share_of_oracle"][m["mode"] != "speculative"].isna().all()


def test_result_files_roundtrip(tmp_runs, smoke_profile):
    df = pd.DataFrame({"a": [1, 2]})
    p = paper.save_result(smoke_profile, "adjacent", df)
    assert smoke_profile.hash in str(p) and str(p).startswith(str(tmp_runs)) and paper.RESULTS_SCHEMA in str(p)
    pd.testing.assert_frame_equal(paper.load_result(smoke_profile, "adjacent"), df)
    assert paper.load_result(smoke_profile, "trace") is None
    assert set(paper.load_results(smoke_profile)) == {"adjacent"}
    with pytest.raises(ValueError):
        paper.result_path(smoke_profile, "nope")


def test_paper_remasking_number_only_beside_the_rules_the_paper_ran():
    """Its v2 τ rule and the released δ veto (upstream) carry the paper's remasking number; our other rules do not,
    while every row keeps the paper's dynamic baseline (the same setting)."""
    both = synthetic_runs(n=10, algorithms=("ours", "upstream"))
    t = paper.remasking_table(both, rule=None, algorithm=None, n_boot=0)
    at_paper_tau = t["paper_baseline_accuracy"].notna()
    ours_other = (t["algorithm"] == "ours") & (t["rule"] != "tau")
    assert ours_other.any() and t.loc[ours_other, ["paper_mrp_remask_accuracy", "paper_gain"]].isna().all().all()
    ran = ~ours_other & at_paper_tau
    assert ran.any() and t.loc[ran, "paper_mrp_remask_accuracy"].notna().all()
    assert t.loc[ours_other & at_paper_tau, "paper_baseline_accuracy"].notna().all()


def test_every_shipped_profiles_benchmark_stands_for_a_paper_benchmark():
    """The claims read the paper's row of our benchmark through BENCHMARK_MAP: a profile's benchmark without one would
    leave every sized claim of it blank (chain16's tasks had none)."""
    from mrp_repro.config import load_profile, repo_root

    for f in sorted((repo_root() / "configs").glob("*.yaml")):
        p = load_profile(f.stem)
        assert set(p.evaluation.benchmarks) <= set(paper.BENCHMARK_MAP), (p.name, p.evaluation.benchmarks)
