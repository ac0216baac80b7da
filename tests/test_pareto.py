"""Matched-speed comparisons (report.pareto): the dynamic frontier and the margin rule on runs whose answer is known."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from runs_helpers import synthetic_runs

from mrp_repro.report import pareto


def test_frontier_interpolates_pareto_points_flat_below_and_undefined_beyond():
    speed = np.array([1.0, 2.0, 3.0, 2.5, 1.5])
    acc = np.array([80.0, 60.0, 40.0, 30.0, 50.0])  # (2.5, 30) and (1.5, 50) are beaten on both axes
    ps, pa = pareto.pareto_points(speed, acc)
    assert ps.tolist() == [1.0, 2.0, 3.0] and pa.tolist() == [80.0, 60.0, 40.0]
    got = pareto.frontier([0.5, 1.5, 2.5, 3.0, 3.5], speed, acc)
    assert got[:4].tolist() == [80.0, 70.0, 50.0, 40.0] and math.isnan(got[4])


def _runs(remask_correct: dict, remask_den: dict, n: int = 60):
    """synthetic_runs of one benchmark with remask(τ, tau) rows overwritten: correct (a fraction of prompts, the
    first ones) and denoise forwards per prompt (tokens are 32)."""
    r = synthetic_runs(n=n, benchmarks=("synth-math",), good=True)
    for tau, frac in remask_correct.items():
        at = (r["mode"] == "remask") & (r["rule"] == "tau") & np.isclose(r["threshold"], tau)
        idx = r.index[at]
        r.loc[idx, "correct"] = np.arange(len(idx)) < frac * len(idx)
        r.loc[idx, "denoise_forwards"] = remask_den[tau]
    return r


def _row(t, setting, axis="tpf"):
    return t[(t["setting"] == setting) & (t["axis"] == axis)].iloc[0]


def test_margin_is_accuracy_minus_the_frontier_at_the_same_speed():
    """A plain reference: the frontier's accuracy at the setting's pooled TPF from the frontier's own points."""
    r = _runs({0.5: 0.9}, {0.5: 16})  # TPF 2.0, 90% correct
    t = pareto.matched_speed_table(r, n_boot=0)
    f = r[r["mode"].isin(["static", "dynamic"])].groupby("setting").agg(
        tok=("tokens", "sum"), den=("denoise_forwards", "sum"), acc=("correct", "mean"))
    want = 90.0 - float(pareto.frontier(2.0, (f["tok"] / f["den"]).to_numpy(), 100 * f["acc"].to_numpy())[0])
    row = _row(t, "remask(0.5,tau)")
    assert row["speed"] == pytest.approx(2.0) and row["margin"] == pytest.approx(want)
    assert row["margin_lo"] == row["margin"] == row["margin_hi"]  # n_boot 0: no interval


def test_rule_knows_both_answers():
    """remask(0.5) at dynamic(0.5)'s TPF with far higher accuracy beats the frontier; remask(0.7) slower than
    dynamic(0.9) (TPF 1.0 < 1.11) at a lower accuracy than dynamic(0.9)'s is worse; remask(0.9) faster than every
    dynamic setting is beyond the frontier."""
    r = _runs({0.5: 0.95, 0.7: 0.3, 0.9: 0.5}, {0.5: 16, 0.7: 32, 0.9: 4})
    t = pareto.matched_speed_table(r, n_boot=300)
    b, w, x = (_row(t, f"remask({tau},tau)") for tau in (0.5, 0.7, 0.9))
    assert b["at_equal_speed"] == "beats" and b["margin_lo"] > 0, b
    assert w["at_equal_speed"] == "worse" and w["margin_hi"] < 0, w
    assert x["at_equal_speed"] == "beyond" and math.isnan(x["margin"]), x
    assert b["margin_lo"] <= b["margin"] <= b["margin_hi"]
    counts = pareto.verdict_counts(t)
    tau = counts[(counts["mode"] == "remask") & (counts["rule"] == "tau") & (counts["axis"] == "tpf")].iloc[0]
    assert (tau["beats"], tau["worse"], tau["beyond"]) == (2, 1, 1)  # 0.3 (synthetic, TPF 2.8 > 2.0) beats too


def test_wall_axis_is_tokens_per_second_over_static():
    r = synthetic_runs(n=20, benchmarks=("synth-code",))
    t = pareto.matched_speed_table(r, n_boot=0)
    s, d = (r[r["setting"] == x] for x in ("static(1)", "dynamic(0.5)"))
    want = (d["tokens"].sum() / d["wall_s"].sum()) / (s["tokens"].sum() / s["wall_s"].sum())
    assert _row(t, "dynamic(0.5)", "wall_speedup")["speed"] == pytest.approx(want)
    assert _row(t, "static(1)", "wall_speedup")["speed"] == pytest.approx(1.0)


def test_unpaired_settings_are_refused():
    r = synthetic_runs(n=20, benchmarks=("synth-code",))
    r = r.drop(r.index[(r["setting"] == "remask(0.5,tau)")][:3])
    with pytest.raises(ValueError, match="same problems"):
        pareto.matched_speed_table(r, n_boot=0)


def test_plot_has_a_panel_per_benchmark_and_axis():
    t = pareto.matched_speed_table(synthetic_runs(n=10), n_boot=0)
    fig = pareto.plot_matched_speed(t)
    assert len(fig.axes) == 4 and {a.get_xlabel() for a in fig.axes} == {pareto.AXIS_LABELS[a] for a in pareto.AXES}


def test_plot_marks_every_wall_clock_point_whose_clock_gate_did_not_pass():
    """The wall-clock panels carry each decode's clock gate (report.wallclock.mark_clock): a point whose gate is not in
    schema.CLOCK_TRUSTED gets a red × (in the legend once), a passed one does not, and the TPF panels none."""
    import matplotlib.pyplot as plt

    from mrp_repro.report.plots_base import GATE_FAILED_LABEL as GATED_LABEL

    t = pareto.matched_speed_table(synthetic_runs(n=10, benchmarks=("synth-code",)), n_boot=0)
    failed = t["setting"] == "dynamic(0.5)"
    t = t.assign(clock_gate=np.where(t["mode"] == "static", "reference",
                                     np.where(failed, "failed: repeatable", "passed")))  # fmt: skip
    fig = pareto.plot_matched_speed(t)
    marks = {ax.get_xlabel(): [c for c in ax.collections if c.get_label() == GATED_LABEL] for ax in fig.axes}
    wall = pareto.AXIS_LABELS["wall_speedup"]
    assert [len(c.get_offsets()) for c in marks[wall]] == [1]
    want = t[failed & (t["axis"] == "wall_speedup")][["speed", "accuracy"]].to_numpy(float)
    np.testing.assert_allclose(marks[wall][0].get_offsets(), want)
    assert not any(v for k, v in marks.items() if k != wall)
    assert GATED_LABEL in [x.get_text() for x in fig.legends[0].get_texts()]
    plt.close(fig)


def test_plot_draws_each_delta_of_one_rule_as_its_own_series():
    """Upstream's δ sweep shares one rule: each δ is a line of its own τ points, never one line through all."""
    t = pareto.matched_speed_table(synthetic_runs(n=10, benchmarks=("synth-code",)), n_boot=0)
    rem = t[t["mode"] == "remask"]
    rem = rem[rem["rule"] == rem["rule"].iloc[0]]  # one rule, swept over δ below
    sweep = pd.concat([rem.assign(setting=rem["setting"].str.replace(")", f",{d})"), rule="delta") for d in (1, 2)])
    fig = pareto.plot_matched_speed(pd.concat([t[t["mode"] != "remask"], sweep]))
    labels = [ln.get_label() for ln in fig.axes[0].get_lines() if ln.get_label().startswith("remask")]
    assert len(labels) == 2 and len(set(labels)) == 2  # one line per δ
    n_tau = rem.loc[rem["axis"] == "tpf", "threshold"].nunique()
    assert all(len(ln.get_xdata()) == n_tau for ln in fig.axes[0].get_lines() if ln.get_label().startswith("remask"))


def test_weighted_tpf_axis_charges_head_calls_at_their_cost():
    """With head_cost, the comparison also at equal weighted_tpf: tokens / (denoise forwards + head_cost x head
    calls), the same charge as wallclock.with_weighted_forwards' column; the frontier (no head) keeps its TPF."""
    from mrp_repro.report import wallclock

    r = synthetic_runs(n=20, benchmarks=("synth-code",))
    t = pareto.matched_speed_table(r, n_boot=0, head_cost=0.25)
    assert set(t["axis"]) == {"tpf", "wall_speedup", "weighted_tpf"}
    w, p = t[t["axis"] == "weighted_tpf"], t[t["axis"] == "tpf"]
    assert len(w) == len(p) and list(w.columns) == pareto.MATCHED_COLUMNS
    for s in ("direct(2)", "remask(0.5,tau)", "dynamic(0.5)"):
        g = r[r["setting"] == s]
        want = g["tokens"].sum() / (g["denoise_forwards"] + 0.25 * g["mrp_forwards"]).sum()
        assert _row(t, s, "weighted_tpf")["speed"] == pytest.approx(want)
    assert _row(t, "direct(2)", "weighted_tpf")["speed"] < _row(t, "direct(2)")["speed"]  # head calls are not free
    assert _row(t, "dynamic(0.5)", "weighted_tpf")["speed"] == pytest.approx(_row(t, "dynamic(0.5)")["speed"])
    mw = wallclock.with_weighted_forwards(t, r, head_cost=0.25)  # the notebook's column beside it agrees
    at = mw[mw["axis"] == "weighted_tpf"]
    assert np.allclose(at["speed"], at["weighted_tpf"])
    assert (w["at_equal_speed"] != "").sum() == (p["at_equal_speed"] != "").sum()  # every compared setting judged
    free = pareto.matched_speed_table(r, n_boot=0, head_cost=0.0)  # a free head: weighted = plain
    fw, fp = (free[free["axis"] == a].reset_index(drop=True) for a in ("weighted_tpf", "tpf"))
    assert np.allclose(fw["speed"], fp["speed"]) and np.allclose(fw["margin"], fp["margin"], equal_nan=True)
    for none in (None, math.nan):  # no cost model: no weighted rows (never head calls charged nothing)
        assert set(pareto.matched_speed_table(r, n_boot=0, head_cost=none)["axis"]) == set(pareto.AXES)
    with pytest.raises(KeyError, match="mrp_forwards"):
        pareto.matched_speed_table(r.drop(columns="mrp_forwards"), n_boot=0, head_cost=0.25)


def test_plot_has_a_weighted_tpf_panel_when_the_table_has_the_axis():
    from mrp_repro.report import plots

    t = pareto.matched_speed_table(synthetic_runs(n=10), n_boot=0, head_cost=0.25)
    fig = pareto.plot_matched_speed(t)
    assert len(fig.axes) == 6 and {a.get_xlabel() for a in fig.axes} == set(pareto.AXIS_LABELS.values())
    assert [a.get_xlabel() for a in fig.axes[:3]] == list(pareto.AXIS_LABELS.values())  # tpf, weighted, wall
    assert all(n > 0 for n in plots.legend_points(fig).values())


def _as_dynamic(t: pd.DataFrame, rule: str, where=None) -> pd.DataFrame:
    """`t` with remask rule `rule`'s speed and accuracy set to dynamic(τ)'s on the same benchmark, axis and τ (on the
    rows `where` selects, default all)."""
    t = t.copy()
    dyn = t[t["mode"] == "dynamic"].set_index(["benchmark", "axis", "threshold"])
    at = (t["mode"] == "remask") & (t["rule"] == rule) & (True if where is None else where(t))
    keys = pd.MultiIndex.from_frame(t.loc[at, ["benchmark", "axis", "threshold"]])
    for c in ("speed", "accuracy"):
        t.loc[at, c] = dyn[c].reindex(keys).to_numpy()
    return t


def _remask_lines(fig) -> dict:
    return {ln.get_label(): ln for ln in fig.axes[0].get_lines() if ln.get_label().startswith("remask")}


def test_plot_tags_a_remask_rule_that_equals_dynamic_and_draws_it_visible():
    """A rule at dynamic(τ)'s own points at every τ sits exactly under the frontier: its label says (= dynamic) and
    it is drawn dashed, hollow and above the frontier; a rule that differs is untagged and drawn as before."""
    import matplotlib.pyplot as plt

    from mrp_repro.report import plots

    t = pareto.matched_speed_table(synthetic_runs(n=10, benchmarks=("synth-code",)), n_boot=0)
    fig = pareto.plot_matched_speed(_as_dynamic(t, "delta"))
    lines = _remask_lines(fig)
    same = [lab for lab in lines if lab.startswith("remask, rule delta")]
    other = [lab for lab in lines if lab.startswith("remask, rule tau")]
    assert len(same) == 1 and same[0].endswith("(= dynamic)"), list(lines)
    assert len(other) == 1 and "= dynamic" not in other[0], list(lines)
    ln, frontier_line = lines[same[0]], fig.axes[0].get_lines()[0]
    assert ln.get_linestyle() == "--" and ln.get_markerfacecolor() == "none" and ln.get_markersize() == 8
    assert ln.get_zorder() > frontier_line.get_zorder()
    assert lines[other[0]].get_linestyle() == "-" and lines[other[0]].get_markersize() == 4
    legend = [x.get_text() for x in fig.legends[0].get_texts()]
    assert same[0] in legend and other[0] in legend
    assert all(n > 0 for n in plots.legend_points(fig).values())
    plt.close(fig)
    # a speed off by more than the tolerance at one τ is no longer the dynamic point
    off = _as_dynamic(t, "delta")
    at = (off["rule"] == "delta") & np.isclose(off["threshold"], 0.5)
    off.loc[at, "speed"] *= 1.01
    fig = pareto.plot_matched_speed(off)
    assert not any("= dynamic" in lab for lab in _remask_lines(fig)), list(_remask_lines(fig))
    plt.close(fig)


def test_plot_counts_the_panels_where_a_rule_equals_dynamic():
    """Equal to dynamic on the tpf panels only (2 of the 6 benchmark x axis panels): the label counts them, and the
    series is dashed only where it coincides."""
    import matplotlib.pyplot as plt

    t = pareto.matched_speed_table(synthetic_runs(n=10), n_boot=0)
    fig = pareto.plot_matched_speed(_as_dynamic(t, "delta", where=lambda d: d["axis"] == "tpf"))
    n_panels = len(fig.axes)
    lab = next(lab for lab in _remask_lines(fig) if lab.startswith("remask, rule delta"))
    assert lab.endswith(f"(= dynamic in 2 of {n_panels} panels: dashed, hollow there)"), lab
    styles = {ax.get_xlabel(): next(ln for ln in ax.get_lines() if ln.get_label() == lab).get_linestyle()
              for ax in fig.axes}  # fmt: skip
    assert styles[pareto.AXIS_LABELS["tpf"]] == "--" and styles[pareto.AXIS_LABELS["wall_speedup"]] == "-"
    # its legend key in the style of most panels, solid and filled, not of the first panel that drew it (dashed)
    (key,) = [h for h, t in zip(fig.legends[0].legend_handles, fig.legends[0].get_texts(), strict=True)
              if t.get_text() == lab]  # fmt: skip
    assert key.get_linestyle() == "-" and str(key.get_markerfacecolor()) != "none"
    plt.close(fig)


def test_point_labels_sit_over_the_frontier_line_and_under_every_marker():
    """matched_speed's τ and K labels: a white halo around the glyphs, drawn above the frontier's line (which crossed
    the text) and under every other series' markers and direct(K)'s triangles (a label never hides a marker)."""
    import matplotlib.pyplot as plt
    from matplotlib.collections import PathCollection
    from matplotlib.text import Annotation

    t = pareto.matched_speed_table(synthetic_runs(n=10, benchmarks=("synth-code",)), n_boot=0)
    fig = pareto.plot_matched_speed(t)
    ax = fig.axes[0]
    labels = [c for c in ax.get_children() if isinstance(c, Annotation)]
    assert any(x.get_text().startswith("τ=") for x in labels) and any(x.get_text().startswith("K=") for x in labels)
    frontier = next(ln for ln in ax.get_lines() if ln.get_label().startswith("dynamic frontier"))
    markers = [a for a in ax.get_children() if isinstance(a, PathCollection) or a in ax.get_lines()]
    others = [a for a in markers if a is not frontier]
    assert len(others) > 2
    for x in labels:
        assert x.get_path_effects() and frontier.get_zorder() < x.get_zorder() < min(a.get_zorder() for a in others)
    # the frontier's filled markers among those above the labels (under a label's halo they read as hollow)
    dots = [ln for ln in ax.get_lines() if ln.get_marker() == "o" and ln.get_markerfacecolor() == "black"]
    assert dots and all(ln.get_zorder() > max(x.get_zorder() for x in labels) for ln in dots)
    plt.close(fig)
    # a zoomed panel: the inset's frame and connectors sit under the labels, which they crossed
    from matplotlib.inset import InsetIndicator

    ax = plt.figure().add_subplot()
    t = pareto.matched_speed_table(synthetic_runs(n=10, benchmarks=("synth-code",)), n_boot=0)
    t = t[t["axis"] == "tpf"].copy()
    crowd = t["mode"].isin(["dynamic", "remask"])
    t.loc[crowd, "speed"] = 10 + 0.01 * t.loc[crowd, "speed"]  # the crowd in under a quarter of the axis
    draw = lambda a, legend: a.plot(t["speed"], t["accuracy"], "o")  # noqa: E731
    draw(ax, True)
    ins = pareto._zoom_crowded(ax, t, draw)
    assert ins is not None
    (ind,) = [c for c in ax.get_children() if isinstance(c, InsetIndicator)]
    assert ind.get_zorder() < pareto._label_style()["zorder"]
    # its frame within the panel (padded past the panel's limits, it ran into the title and tick labels)
    for lim, parent in ((ins.get_xlim(), ax.get_xlim()), (ins.get_ylim(), ax.get_ylim())):
        assert parent[0] <= lim[0] < lim[1] <= parent[1]
    plt.close(ax.figure)


def test_a_remask_series_names_its_tau_as_open_not_its_delta_as_a_tau():
    """The δ sweep's series keep τ's place open: "upstream_remask(τ,0.5)", never "upstream_remask(0.5)", which a
    reader of the legend took for τ = 0.5 (a cold read of matched_speed_upstream.png)."""
    settings = ["upstream_remask(0.3,2)", "upstream_remask(0.25,0.5)", "remask(0.9,delta,2.0)"]
    got = pareto._series_key(pd.Series(settings))
    assert got.tolist() == ["upstream_remask(τ,2)", "upstream_remask(τ,0.5)", "remask(τ,delta,2.0)"]


def test_direct_k_has_a_colour_of_its_own():
    """direct(K)'s triangles share no colour with a remask series or a failed clock gate's × (in red they were rule
    loo's colour, and a red × over one hid it)."""
    import matplotlib.pyplot as plt
    from matplotlib.collections import PathCollection
    from matplotlib.colors import to_rgba

    from mrp_repro.report import plots_base

    t = pareto.matched_speed_table(synthetic_runs(n=10, benchmarks=("synth-code",)), n_boot=0)
    rem = t[t["mode"] == "remask"]
    rule = rem["rule"].iloc[0]
    extra = [rem[rem["rule"] == rule].assign(rule=f"r{i}", setting=lambda d, i=i: d["setting"] + f"-r{i}")
             for i in range(6)]  # fmt: skip
    t = pd.concat([t, *extra], ignore_index=True)  # enough rule series to take every tab10 colour but one
    fig = pareto.plot_matched_speed(t)
    ax = fig.axes[0]
    (direct,) = [c for c in ax.collections if isinstance(c, PathCollection) and c.get_label() == "direct(K)"]
    colour = tuple(direct.get_facecolors()[0])
    others = {tuple(to_rgba(ln.get_color())) for ln in ax.get_lines() if ln.get_label().startswith("remask")}
    assert len(others) >= 7 and colour not in others and colour != to_rgba("crimson")
    f, a = plt.subplots()
    plots_base.mark_clock_gates(a, [1], [1], ["failed: repeatable"])
    cross = a.collections[0]
    assert colour not in {tuple(c) for c in [*cross.get_edgecolors(), *cross.get_facecolors()]}
    plt.close(f)
    plt.close(fig)


def test_fit_labels_widens_the_limits_until_every_label_is_inside_its_panel():
    """A label at a panel's edge printed into the next panel (matched_speed's τ labels at the fast end): fit_labels
    widens the limits, on a linear and on a log axis, until none is drawn past the frame."""
    import matplotlib.pyplot as plt

    from mrp_repro.report import plots_labels

    for scale in ("linear", "log"):
        fig, ax = plt.subplots(figsize=(3, 2))
        ax.set_xscale(scale)
        ax.plot([1, 2, 8], [40, 60, 10], "o")
        ax.set_xlim(1, 8), ax.set_ylim(10, 60)
        for x, y in ((8, 10), (8, 60)):
            ax.annotate("τ=0.05…0.35 a long label", (x, y), xytext=(3, -9), textcoords="offset points")
        fig.canvas.draw()
        assert len(plots_labels.labels_outside(ax)) == 2  # past the right edge, one past the bottom too
        plots_labels.fit_labels(ax)
        assert plots_labels.labels_outside(ax) == [], scale
        assert ax.get_xlim()[1] > 8 and ax.get_ylim()[0] < 10 and ax.get_xscale() == scale
        plt.close(fig)


def test_plot_draws_no_label_past_a_panel_and_the_wall_clock_axis_on_a_log_scale():
    import matplotlib.pyplot as plt

    from mrp_repro.report import plots_labels

    t = pareto.matched_speed_table(synthetic_runs(n=10), n_boot=0)
    fig = pareto.plot_matched_speed(t)
    for ax in [a for p in fig.axes for a in (p, *p.child_axes)]:
        assert plots_labels.labels_outside(ax) == [], ax.get_title()
    scales = {a.get_xlabel(): a.get_xscale() for a in fig.axes}
    assert scales[pareto.AXIS_LABELS["wall_speedup"]] == "log" and scales[pareto.AXIS_LABELS["tpf"]] == "linear"
    plt.close(fig)


def test_the_wall_clock_frontier_is_dashed_on_each_segment_to_a_point_whose_clock_gate_failed():
    """The frontier is every point the table and the claims read, but a segment with an end whose clock gate failed
    is dashed (the cold read: the wall-clock frontier was drawn solid through failed points); the TPF panels' is
    solid whatever the gates."""
    import matplotlib.pyplot as plt

    t = pareto.matched_speed_table(synthetic_runs(n=10, benchmarks=("synth-code",)), n_boot=0)
    wall = t[(t["axis"] == "wall_speedup") & t["mode"].isin(pareto.FRONTIER)]
    order = pareto._pareto_order(wall["speed"].to_numpy(float), wall["accuracy"].to_numpy(float))
    assert len(order) >= 3
    bad = wall.index[order[1]]  # an inner Pareto point: both its segments dashed
    t = t.assign(clock_gate=np.where(t["mode"] == "static", "reference", "passed"))
    t.loc[t["setting"] == t.loc[bad, "setting"], "clock_gate"] = "failed: repeatable"
    fig = pareto.plot_matched_speed(t)
    by_axis = {a.get_xlabel(): a for a in fig.axes}
    lines = {ln.get_label(): ln for ln in by_axis[pareto.AXIS_LABELS["wall_speedup"]].get_lines()}
    dashed = lines[pareto.FRONTIER_FAILED_LABEL]
    # dashed in the failed gate's crimson: a label's white halo cutting the black line never reads as one
    assert dashed.get_linestyle() == "--" and dashed.get_color() == "crimson"
    p = (t.loc[bad, "speed"], t.loc[bad, "accuracy"])
    dx, dy = dashed.get_data()
    assert np.isclose(dx, p[0]).sum() == 1 and np.isfinite(dx).sum() == 3  # one run: the point and its neighbours
    solid = lines["dynamic frontier (static, dynamic τ)"]
    sx = np.asarray(solid.get_xdata(), float)
    assert not np.isclose(sx, p[0]).any()  # no solid segment reaches it
    # every Pareto point keeps its filled marker: on the solid line, or alone where no solid segment reaches it
    drawn = np.concatenate([np.asarray(ln.get_xdata(), float) for k, ln in lines.items()
                            if k in ("dynamic frontier (static, dynamic τ)", "_frontier points")])  # fmt: skip
    assert set(np.round(drawn[np.isfinite(drawn)], 9)) == set(np.round(wall["speed"].to_numpy(float)[order], 9))
    tpf = {ln.get_label() for ln in by_axis[pareto.AXIS_LABELS["tpf"]].get_lines()}
    assert pareto.FRONTIER_FAILED_LABEL not in tpf
    assert pareto.FRONTIER_FAILED_LABEL in [x.get_text() for x in fig.legends[0].get_texts()]
    plt.close(fig)


def test_a_label_over_another_points_label_is_never_merged_into_it():
    """drop_overlapping_labels merges two labels into one ("τ=0.25…0.3") only where their points are one spot on
    screen (NEAR_PX); a label over the label of a point further away moves to a clear place beside its own point or
    goes, and the other label keeps its text (a cold read: "τ=0.05…0.3" printed at τ=0.05's point named τ=0.3,
    drawn 1 TPF away)."""
    import matplotlib.pyplot as plt

    from mrp_repro.report import plots_labels

    f, ax = plt.subplots(figsize=(4, 3))
    ax.set_xlim(0, 10), ax.set_ylim(0, 10)
    r = f.canvas.get_renderer()
    a = ax.annotate("τ=0.05…0.2", (5.0, 5.0), xytext=(3, -9), textcoords="offset points")
    b = ax.annotate("τ=0.3", (6.0, 5.0), xytext=(3, -9), textcoords="offset points")
    f.canvas.draw()
    gap = ax.transData.transform((6.0, 5.0))[0] - ax.transData.transform((5.0, 5.0))[0]
    assert gap > plots_labels.NEAR_PX and plots_labels.text_extent(a, r).overlaps(plots_labels.text_extent(b, r))
    plots_labels.drop_overlapping_labels(ax, merge=pareto._merge_tau_labels)
    assert a.get_text() == "τ=0.05…0.2"
    assert b not in ax.texts or not plots_labels.text_extent(a, r).overlaps(plots_labels.text_extent(b, r))
    # one spot: merged
    c = ax.annotate("τ=0.25", (5.0, 5.05), xytext=(3, -9), textcoords="offset points")
    plots_labels.drop_overlapping_labels(ax, merge=pareto._merge_tau_labels)
    assert c not in ax.texts and a.get_text() == "τ=0.05…0.25"
    plt.close(f)


def test_a_zoom_inset_magnifies_and_carries_no_labels():
    """The zoom inset keeps the zoom it was made for (widened to hold its labels it magnified 1.4x and less): its
    labels stay on the panel."""
    import matplotlib.pyplot as plt

    t = pd.read_csv(__import__("pathlib").Path(__file__).resolve().parents[1] / "figures/chain16/matched_speed.csv")
    fig = pareto.plot_matched_speed(t, "ours")
    insets = [(p, i) for p in fig.axes for i in p.child_axes]
    assert insets
    for p, ins in insets:
        assert not ins.texts
        mag = (ins.bbox.width / np.ptp(ins.get_xlim())) / (p.bbox.width / np.ptp(p.get_xlim()))
        assert mag > 2, (p.get_title(), mag)
    plt.close(fig)
