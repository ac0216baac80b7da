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


def _cliff(taus, cliff=(0.5, 0.6), n=100, batch=32):
    """Runs of one benchmark: static(1) and dynamic(τ) whose accuracy is 90% above the cliff's top, 30% below its
    bottom and linear in between (a fraction of the prompts right, the first ones); TPF 1/τ."""
    import math as m

    from runs_helpers import synthetic_runs as sr

    base = sr(n=n, benchmarks=("synth-math",), batch_size=batch)
    static = base[base["mode"] == "static"]
    lo, hi = cliff
    rows = [static.assign(correct=static["prompt_index"] < 0.95 * n)]
    for t in taus:
        acc = 0.9 if t >= hi else 0.3 if t <= lo else 0.3 + 0.6 * (t - lo) / (hi - lo)
        r = static.assign(mode="dynamic", setting=f"dynamic({t})", threshold=float(t),
                          correct=static["prompt_index"] < acc * n,
                          denoise_forwards=(static["tokens"] * t).round().clip(lower=1).astype(int))
        rows.append(r)
    out = pd.concat(rows, ignore_index=True)
    assert not m.isnan(out["threshold"].iloc[-1])
    return out


def test_refine_taus_bisects_only_where_the_frontier_jumps():
    r = _cliff([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3])  # a 60-point cliff between τ 0.6 and 0.5
    assert pareto.refine_taus(r, max_gap=10.0, min_step=0.01) == [0.55]
    assert pareto.refine_taus(r, max_gap=70.0, min_step=0.01) == []  # no segment wider than the bound
    assert pareto.refine_taus(r, max_gap=10.0, min_step=0.06) == []  # 0.1 apart < 2 x 0.06: a jump, not refined
    step = _cliff([0.9, 0.5, 0.499], cliff=(0.499, 0.5))  # a true jump, at a resolution no grid resolves
    assert pareto.refine_taus(step, max_gap=10.0, min_step=0.01) == []  # the jump 0.5 - 0.499: left as it is


def test_refine_frontier_decodes_midpoints_until_no_segment_is_too_wide(monkeypatch):
    """grids.refine_frontier: each round decodes the midpoint τ of every segment wider than frontier_max_gap (on the
    frame's prompts and batch size), its wall clock on the frame's static scale, until none is left or the rounds
    run out; here the 60-point cliff closes to steps of at most 7.5 points."""
    from mrp_repro.report import grids

    P = load_profile("tiny")
    calls = []

    def fake_collect(profile, bb, head, n_prompts=None, benchmarks=None, settings=None, batch_size=None, inputs=None):
        taus = [p.tau for m, p in settings if m == "dynamic"]
        calls.append((taus, batch_size))
        out = _cliff(taus)
        return out.assign(wall_s=out["wall_s"] * 2.0)  # a slower pass: scaled back to the frame's static

    monkeypatch.setattr(grids, "collect_runs", fake_collect)
    frame = _cliff([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3])
    out, added = grids.refine_frontier(P, None, None, frame)
    assert added[0] == [0.55] and 1 < len(added) <= P.decoding.frontier_refine_rounds
    assert all(bs == 32 for _, bs in calls) and [c[0] for c in calls] == added
    assert pareto.refine_taus(out, P.decoding.frontier_max_gap, P.decoding.frontier_min_step) == []
    taus = sorted(out.loc[out["mode"] == "dynamic", "threshold"].unique())
    accs = [100 * out.loc[out["threshold"] == t, "correct"].mean() for t in taus]
    assert max(abs(a - b) for a, b in zip(accs, accs[1:], strict=False)) <= P.decoding.frontier_max_gap
    new = out[out["setting"] == "dynamic(0.55)"]
    ref = _cliff([0.55])
    assert np.allclose(new["wall_s"].to_numpy(), ref.loc[ref["setting"] == "dynamic(0.55)", "wall_s"].to_numpy())
    t = pareto.matched_speed_table(out, n_boot=0)
    assert (t.loc[t["mode"] == "dynamic", "frontier_gap"].isna()).all()
    one, added1 = grids.refine_frontier(P, None, None, frame, rounds=1)
    assert added1 == [[0.55]] and len(one) == len(frame) + 100
