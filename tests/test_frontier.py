"""The dense dynamic-τ frontier, the control of record of direct mode and remasking (issue 35; report.pareto): a
comparison never interpolates across a frontier segment wider than the declared bound (it reads `gap`, with the
segment named), and the controls grid's dense τ join the modes grid's frontier with their wall clock on its scale."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from runs_helpers import synthetic_runs

from mrp_repro.config import load_profile
from mrp_repro.report import pareto


def test_gap_is_the_accuracy_span_of_the_segment_read():
    speed = np.array([1.0, 2.0, 3.0, 2.5])
    acc = np.array([80.0, 60.0, 40.0, 30.0])  # (2.5, 30) is off the frontier
    span, lo = pareto.frontier_gap([0.5, 1.0, 1.5, 2.0, 2.7, 3.5], speed, acc)
    assert span[:5].tolist() == [0.0, 0.0, 20.0, 0.0, 20.0] and math.isnan(span[5])
    assert lo.tolist() == [-1, -1, 0, -1, 1, -1]  # the slower end's index among the Pareto points


def _sparse(n=40):
    """synthetic_runs: dynamic(τ) at 0.9, 0.7, 0.5, 0.3 only; the frontier's segments span ~12 points."""
    return synthetic_runs(n=n, benchmarks=("synth-math",), good=True)


def test_a_comparison_across_a_wide_segment_reads_gap_and_names_it():
    r = _sparse()
    t = pareto.matched_speed_table(r, n_boot=50, max_gap=5.0)
    row = t[(t["setting"] == "direct(2)") & (t["axis"] == "tpf")].iloc[0]  # TPF 3: between dynamic(0.5) and (0.3)
    assert row["at_equal_speed"] == pareto.GAP and row["frontier_gap"] > 5.0
    assert row["frontier_segment"] == "dynamic(0.5) – dynamic(0.3)"
    assert not math.isnan(row["margin"])  # the margin is still printed, never judged
    free = pareto.matched_speed_table(r, n_boot=50, max_gap=None)  # no bound: judged as before
    row = free[(free["setting"] == "direct(2)") & (free["axis"] == "tpf")].iloc[0]
    assert row["at_equal_speed"] in ("beats", "tie", "worse") and row["frontier_gap"] > 5.0
    counts = pareto.verdict_counts(t)
    assert "gap" in counts.columns and counts["gap"].sum() > 0


def test_the_dense_grid_joins_the_frontier_and_closes_the_gaps():
    """The controls grid's dynamic(τ) every 0.05 (the profile default) joined to the modes grid: every comparison on
    the synthetic frontier is then read on a segment under 10 points, and its margin moves by less than the old
    interpolation error."""
    from test_claims import dense_frontier

    r = _sparse()
    ctrl = dense_frontier(r, list(load_profile("tiny").decoding.frontier_thresholds))
    ctrl = ctrl.assign(wall_s=ctrl["wall_s"] * 3.0)  # another pass of the machine: three times slower throughout
    s = r[r["mode"] == "static"]
    ctrl = pd.concat([s.assign(wall_s=s["wall_s"] * 3.0), ctrl], ignore_index=True)
    joined = pareto.frontier_runs(r, ctrl)
    added = joined[~joined.index.isin(range(len(r)))]
    assert set(added["mode"]) == {"dynamic"} and added["threshold"].nunique() == 15  # 19 less the 4 it had
    assert not set(added["setting"]) & set(r["setting"])
    # the wall clock of the added rows on the modes grid's scale: its static time over the controls grid's
    assert np.allclose(added["wall_s"].to_numpy(), ctrl.loc[ctrl["setting"].isin(added["setting"]), "wall_s"]
                       .to_numpy() / 3.0)  # fmt: skip
    t = pareto.matched_speed_table(joined, n_boot=0)
    comp = t[t["mode"].isin(pareto.COMPARED) & (t["at_equal_speed"] != "beyond")]
    assert len(comp) and (comp["frontier_gap"] <= pareto.FRONTIER_MAX_GAP).all(), comp["frontier_gap"].max()
    assert (comp["at_equal_speed"] != pareto.GAP).all()
    dense_wall = t[(t["axis"] == "wall_speedup") & (t["setting"] == added["setting"].iloc[0])]
    assert 0.5 < float(dense_wall["speed"].iloc[0]) < 50  # on the modes grid's static, not three times off


def test_frontier_runs_refuses_other_batch_sizes_and_needs_a_static_reference():
    from test_claims import dense_frontier

    r = _sparse(10)
    ctrl = dense_frontier(r)
    assert len(pareto.frontier_runs(r, ctrl)) == len(r)  # no static(1) in it: its wall clock has no reference
    with pytest.raises(ValueError, match="batch sizes"):
        pareto.frontier_runs(r, ctrl.assign(batch_size=1))
    assert pareto.frontier_runs(r, None) is r


def test_the_profile_declares_the_grid_and_the_bound():
    d = load_profile("tiny").decoding
    assert d.frontier_max_gap == pareto.FRONTIER_MAX_GAP == 10.0
    steps = np.diff(sorted(d.frontier_thresholds))
    assert len(d.frontier_thresholds) == 19 and np.allclose(steps, 0.05)  # τ steps of 0.05
    chain = load_profile("chain16").decoding  # every profile inherits the dense grid unless it declares its own
    assert chain.frontier_thresholds == d.frontier_thresholds
