"""Matched-speed comparisons: remasking and direct mode against the dynamic-τ frontier at equal speed.

    from mrp_repro.report import pareto
    t = pareto.matched_speed_table(modes_runs, n_boot=1000)    # one row per (setting, speed axis)
    fig = pareto.plot_matched_speed(t)                         # accuracy against speed, a panel per task and axis
    pareto.verdict_counts(t)                                   # how many settings beat / lose to dynamic

Comparing remask(τ) with dynamic(τ) at the same τ (the paper's remasking table) leaves speed aside: remasking
revokes tokens and re-reveals them, so it runs at a lower TPF than dynamic(τ); a practitioner asks whether it beats
plain dynamic decoding at a higher τ *at the same speed*. The rule, declared here and printed by the claims report:

- The baseline is the **dynamic frontier**: static(1) and every dynamic(τ) of the same model and benchmark, each a
  point (speed, accuracy); the points no other point beats on both (the Pareto points), joined by straight lines.
  frontier(x) = that line's accuracy at speed x; for x at or below the slowest Pareto point, that point's accuracy
  (a slower setting is matched by a faster, more accurate one); for x above the fastest dynamic point, undefined
  (``beyond``: the frontier is not extrapolated).
- margin = accuracy(setting) - frontier(speed(setting)), in points, with a paired percentile bootstrap CI: each
  replicate resamples prompts (the same ones for every setting) and recomputes every setting's accuracy and
  speed, the frontier and the margin.
- at_equal_speed: ``beats`` when margin_lo > 0, ``worse`` when margin_hi < 0, ``tie`` when the CI holds 0, ``beyond``
  when the setting is faster than every dynamic setting, ``gap`` when the frontier segment it is compared on spans
  more than `max_gap` accuracy points (issue 35: the frontier is the control of record, and a straight line across
  a cliff between two sampled τ is a guess, not a control): frontier_gap is that span (0 at or below the slowest
  Pareto point, where the frontier is a point's own accuracy) and frontier_segment names its two ends; the remedy is
  more τ there (decoding.frontier_thresholds), never a verdict.

The frontier is sampled densely (issue 35): the modes grid's dynamic(τ) at decoding.thresholds, and the controls
grid's at decoding.frontier_thresholds (every 0.05 by default), refined where the frontier still jumps by more than
max_gap (`refine_taus`: the midpoint τ, decoded by report.grids.refine_frontier, a few rounds); `frontier_runs` joins
the grids (the frontier rows of the second grid that the first lacks, their wall clock scaled to the first grid's
static(1)).

Two speed axes (AXES): ``tpf`` (tokens per denoising forward, pooled over prompts) and ``wall_speedup`` (tokens/s over
static(1)'s on the same prompts, wall clock of the runs frame: its batch size, in one process). Given the run's
measured ``head_cost`` (one MRP head call in backbone forwards, measure.cost), a third, WEIGHTED: ``weighted_tpf``,
TPF with every head call charged at that cost (measure.cost.weighted_denoise_forwards, the charge the
equal-speed claims apply), so a setting that buys TPF with head calls is compared at the speed it costs. Rows: every
remask and direct setting, and the frontier's own settings (static, dynamic: margin blank).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from mrp_repro.measure.cost import weighted_denoise_forwards
from mrp_repro.measure.schema import require

__all__ = ["AXES", "WEIGHTED", "AXIS_LABELS", "MATCHED_COLUMNS", "FRONTIER_MAX_GAP", "GAP", "matched_speed_table",
           "frontier", "frontier_gap", "frontier_runs", "refine_taus", "pareto_points", "verdict_counts",
           "plot_matched_speed"]  # fmt: skip

#: speed axes: column value -> what it is
AXES = {"tpf": "tokens per denoising forward", "wall_speedup": "wall-clock tokens/s over static(1)"}
#: the axis added when the head's cost is known (matched_speed_table(head_cost=...)): the speed tables' column name
WEIGHTED = "weighted_tpf"
#: every axis a table may hold -> its x label, in panel order
AXIS_LABELS = {"tpf": AXES["tpf"], WEIGHTED: "tokens per forward, head calls charged at their cost",
               "wall_speedup": AXES["wall_speedup"] + " (log scale)"}  # fmt: skip
#: the compared modes and the frontier's
COMPARED = ("remask", "direct")
FRONTIER = ("static", "dynamic")
MATCHED_COLUMNS = ["model", "benchmark", "algorithm", "mode", "setting", "threshold", "rule", "K", "axis", "n",
                   "speed", "accuracy", "dynamic_accuracy", "margin", "margin_lo", "margin_hi",
                   "at_equal_speed", "frontier_gap", "frontier_segment"]  # fmt: skip
#: the widest frontier segment (accuracy points between its two Pareto points) a comparison may be read on
#: (DecodingConfig.frontier_max_gap's default)
FRONTIER_MAX_GAP = 10.0
#: at_equal_speed of a comparison refused for a frontier segment wider than max_gap
GAP = "gap"
#: a wall-clock gate's × or ◇ on matched_speed's wall-clock panels (points²): at 70, chain-code's ~25 ◇ at 1.3-2.3×
#: covered the remask points inside them (a cold read); above the off-frontier rings' 40, so a ◇ rings a ring
GATE_MARK_SIZE = 55
#: matched_speed.png's legend entries: the dynamic frontier, and a wall-clock frontier segment drawn dashed
FRONTIER_LABEL = "dynamic frontier (static, dynamic τ)"
FRONTIER_FAILED_LABEL = "frontier segment at a failed clock gate (dashed)"
_NEEDS = ["model", "benchmark", "algorithm", "mode", "setting", "threshold", "rule", "K", "problem_id", "correct",
          "tokens", "denoise_forwards", "wall_s"]  # fmt: skip


def pareto_points(speed: np.ndarray, acc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The points (speed, acc) that no other point beats on both, sorted by speed ascending (acc descending)."""
    keep = _pareto_order(speed, acc)  # fastest first, at equal speed the more accurate first; then reversed
    return speed[keep], acc[keep]


def frontier(x, speed: np.ndarray, acc: np.ndarray) -> np.ndarray:
    """The dynamic frontier's accuracy at speeds x (the module's rule): NaN beyond the fastest point."""
    ps, pa = pareto_points(np.asarray(speed, float), np.asarray(acc, float))
    x = np.atleast_1d(np.asarray(x, float))
    out = np.interp(x, ps, pa)  # flat (the slowest point's accuracy) below ps[0]
    out[x > ps[-1] * (1 + 1e-12)] = np.nan
    return out


def frontier_gap(x, speed: np.ndarray, acc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(span, lower end index) per speed x: the accuracy span in points of the Pareto segment frontier(x) is read on
    (0 at or below the slowest Pareto point and on a point itself; NaN beyond the fastest), and the index into
    pareto_points' order of the segment's slower end (-1 where none)."""
    ps, pa = pareto_points(np.asarray(speed, float), np.asarray(acc, float))
    x = np.atleast_1d(np.asarray(x, float))
    span = np.zeros(len(x))
    lo = np.full(len(x), -1)
    for i, v in enumerate(x):
        if v > ps[-1] * (1 + 1e-12):
            span[i] = math.nan
            continue
        if v <= ps[0] or np.isclose(ps, v, rtol=1e-12, atol=0).any():
            continue
        j = int(np.searchsorted(ps, v)) - 1  # ps[j] < v < ps[j + 1]
        span[i], lo[i] = abs(pa[j] - pa[j + 1]), j
    return span, lo


def frontier_runs(runs: pd.DataFrame, *more: pd.DataFrame | None) -> pd.DataFrame:
    """`runs` with the frontier rows (static, dynamic) of `more` (the controls grid's dense dynamic τ) whose setting
    it lacks, per model, benchmark and algorithm, on the same problems at the same batch size. Their wall_s is
    scaled by runs' static(1) wall time over theirs (summed over the problems): each grid's wall clock against its
    own static, so the wall_speedup axis compares like with like. A frame in `more` without static(1) rows of its
    own adds nothing (its wall clock has no reference)."""
    out = [runs]
    for extra in more:
        if extra is None or extra.empty:
            continue
        need = ["model", "benchmark", "algorithm", "mode", "setting", "problem_id", "wall_s", "batch_size"]
        require(extra, need, "frontier_runs")
        front = extra[extra["mode"].isin(FRONTIER)]
        for (model, bench, algo), g in front.groupby(["model", "benchmark", "algorithm"], sort=False):
            have = runs[(runs["model"] == model) & (runs["benchmark"] == bench) & (runs["algorithm"] == algo)]
            if have.empty:
                continue
            if set(g["batch_size"]) != set(have["batch_size"]):
                raise ValueError(f"frontier_runs: {model}/{bench} frontier rows at batch sizes "
                                 f"{sorted(set(g['batch_size']))} beside {sorted(set(have['batch_size']))}")
            new = g[~g["setting"].isin(set(have["setting"]))]
            s_have, s_new = (x[x["mode"] == "static"] for x in (have, g))
            if new.empty or s_have.empty or s_new.empty:
                continue
            ids = sorted(set(s_have["problem_id"]) & set(s_new["problem_id"]))
            scale = (s_have.set_index("problem_id").loc[ids, "wall_s"].sum()
                     / s_new.set_index("problem_id").loc[ids, "wall_s"].sum())  # fmt: skip
            out.append(new[new["mode"] == "dynamic"].assign(wall_s=lambda d, scale=scale: d["wall_s"] * scale))
    return pd.concat(out, ignore_index=True) if len(out) > 1 else runs


def refine_taus(runs: pd.DataFrame, max_gap: float = FRONTIER_MAX_GAP, min_step: float = 0.01) -> list[float]:
    """The τ to decode next where the dynamic frontier is too coarse (issue 35: "τ steps of 0.05 or finer where
    accuracy moves fast"): for every pair of neighbouring Pareto points (TPF, accuracy) of static(1) (τ = 1) and
    dynamic(τ), per model, benchmark and algorithm, whose accuracies differ by more than max_gap points, the midpoint
    of the two neighbouring decoded τ between them (dominated ones included) where accuracy moves most, unless those
    are less than 2 × min_step apart (the midpoint would be closer than min_step to a decoded τ: the frontier jumps
    there, at a resolution no denser grid resolves). Every benchmark's τ pooled, descending."""
    need = ["model", "benchmark", "algorithm", "mode", "setting", "threshold", "correct", "tokens", "denoise_forwards"]
    require(runs, need, "refine_taus")
    front = runs[runs["mode"].isin(FRONTIER)]
    have = {round(float(t), 6) for t in front.loc[front["mode"] == "dynamic", "threshold"]}
    new: set[float] = set()
    for _, g in front.groupby(["model", "benchmark", "algorithm"], sort=False):
        pts = g.groupby("setting").agg(tok=("tokens", "sum"), den=("denoise_forwards", "sum"),
                                       acc=("correct", "mean"), tau=("threshold", "first"), mode=("mode", "first"))
        if (pts["mode"] == "dynamic").sum() < 1:
            continue
        tau = np.where(pts["mode"] == "static", 1.0, pts["tau"].astype(float))
        speed = (pts["tok"] / pts["den"].clip(lower=1)).to_numpy(float)
        acc = 100 * pts["acc"].astype(float).to_numpy()
        keep = _pareto_order(speed, acc)
        by_tau = np.argsort(-tau, kind="stable")  # every decoded τ, static (1) first
        for a, b in zip(keep, keep[1:], strict=False):
            if abs(acc[a] - acc[b]) <= max_gap:
                continue
            lo, hi = min(tau[a], tau[b]), max(tau[a], tau[b])
            inside = [i for i in by_tau if lo - 1e-12 <= tau[i] <= hi + 1e-12]
            # the segment's cliff: the neighbouring decoded τ (dominated ones too) between which accuracy moves most
            pairs = [(abs(acc[i] - acc[j]), i, j) for i, j in zip(inside, inside[1:], strict=False)
                     if tau[i] - tau[j] >= 2 * min_step - 1e-12]  # fmt: skip
            if not pairs:
                continue
            _, i, j = max(pairs, key=lambda x: x[0])
            mid = round((tau[i] + tau[j]) / 2, 6)
            if mid not in have and 0 < mid < 1:
                new.add(mid)
    return sorted(new, reverse=True)


def _stack(g: pd.DataFrame, settings: list[str], ids: np.ndarray, col: str) -> np.ndarray:
    """(settings, problems) array of `col`, rows in `settings` order, columns in `ids` order."""
    wide = g.pivot(index="setting", columns="problem_id", values=col)
    return wide.loc[settings, ids].to_numpy(float)


def _speeds(tok, den, wall, static_idx: int, idx, wden=None) -> dict[str, np.ndarray]:
    """Per setting (rows) and replicate (idx (R, n)): tpf and wall speedup, (S, R); weighted_tpf with `wden` (the
    charged forwards)."""
    t = tok[:, idx].sum(-1)
    rate = t / wall[:, idx].sum(-1)
    out = {"tpf": t / den[:, idx].sum(-1), "wall_speedup": rate / rate[static_idx]}
    if wden is not None:
        out[WEIGHTED] = t / wden[:, idx].sum(-1)
    return out


def matched_speed_table(runs: pd.DataFrame, n_boot: int = 1000, ci: float = 0.95, seed: int = 0,
                        head_cost: float | None = None, max_gap: float | None = FRONTIER_MAX_GAP) -> pd.DataFrame:
    """MATCHED_COLUMNS, one row per setting and axis, per model x benchmark (the module docstring's rule).

    head_cost: one MRP head call in backbone forwards at the runs' batch size (measure.cost.run_cost_model's
    head_cost); given and finite, the rows of axis weighted_tpf too (the runs then need mrp_forwards). None or NaN
    (no cost model): no such rows, rather than charging head calls nothing and calling that weighted.
    max_gap: a comparison on a frontier segment wider than this (accuracy points) reads GAP (None: never refused;
    frontier_gap is filled either way)."""
    what = "matched_speed_table"
    weighted = head_cost is not None and math.isfinite(head_cost)
    require(runs, _NEEDS + (["mrp_forwards"] if weighted else []), what)
    runs = runs[runs["mode"].isin(COMPARED + FRONTIER)]
    if weighted:  # the one charge the claims use (claims_remask.equal_speed), not a second derivation of it
        runs = runs.assign(_wden=weighted_denoise_forwards(runs, float(head_cost)))
    rows = []
    # each algorithm against its own frontier (its static and dynamic); an algorithm without remask or direct
    # settings (upstream speculative only) has nothing to compare
    for (model, bench, algo), g in runs.groupby(["model", "benchmark", "algorithm"], sort=False):
        if not g["mode"].isin(COMPARED).any():
            continue
        if g.duplicated(["setting", "problem_id"]).any():
            raise ValueError(f"{what}: {model}/{bench} has a setting twice on one problem (several batch sizes?)")
        if not (g["mode"] == "static").any() or not (g["mode"] == "dynamic").any():
            raise ValueError(f"{what}: {model}/{bench} needs static(1) and dynamic(τ) rows (the frontier)")
        meta = g.drop_duplicates("setting").set_index("setting")
        base = list(meta.index[meta["mode"].isin(FRONTIER)])
        comp = list(meta.index[meta["mode"].isin(COMPARED)])
        settings = base + comp
        counts = g.groupby("setting")["problem_id"].nunique()
        ids = np.array(sorted(set.intersection(*(set(g.loc[g["setting"] == s, "problem_id"]) for s in settings))))
        if len(ids) < counts.max():
            raise ValueError(f"{what}: {model}/{bench}: the settings were not run on the same problems")
        acc = _stack(g.assign(correct=g["correct"].astype(float)), settings, ids, "correct")
        tok, den, wall = (_stack(g, settings, ids, c) for c in ("tokens", "denoise_forwards", "wall_s"))
        s0 = settings.index(str(meta.index[meta["mode"] == "static"][0]))
        n, nb = len(ids), len(base)
        point = np.arange(n)[None]  # (1, n): the point estimate as replicate 0
        boot = np.random.default_rng(seed).integers(0, n, size=(max(n_boot, 0), n))
        wden = _stack(g, settings, ids, "_wden") if weighted else None
        sp_all = _speeds(tok, den, wall, s0, np.concatenate([point, boot]), wden)  # axis -> (S, 1 + R)
        acc_all = 100 * np.concatenate([acc[:, point[0]].mean(-1, keepdims=True), acc[:, boot].mean(-1)], 1)
        for axis, sp in sp_all.items():
            margins = np.full((len(comp), sp.shape[1]), np.nan)
            for r in range(sp.shape[1]):
                margins[:, r] = acc_all[nb:, r] - frontier(sp[nb:, r], sp[:nb, r], acc_all[:nb, r])
            span, lo_end = frontier_gap(sp[nb:, 0], sp[:nb, 0], acc_all[:nb, 0])  # the point estimate's segment
            kept = _pareto_order(sp[:nb, 0], acc_all[:nb, 0])  # settings index of each Pareto point, by speed
            for i, s in enumerate(settings):
                m = meta.loc[s]
                row = {"model": model, "benchmark": bench, "algorithm": algo, "mode": m["mode"], "setting": s,
                       "threshold": m["threshold"], "rule": m["rule"], "K": m["K"], "axis": axis, "n": n,
                       "speed": sp[i, 0], "accuracy": acc_all[i, 0]}  # fmt: skip
                if i < nb:
                    row.update(dynamic_accuracy=math.nan, margin=math.nan, margin_lo=math.nan, margin_hi=math.nan,
                               at_equal_speed="", frontier_gap=math.nan, frontier_segment="")  # fmt: skip
                else:
                    mg = margins[i - nb]
                    lo, hi = _ci(mg[1:], ci) if n_boot > 0 else (mg[0], mg[0])
                    gap, j = float(span[i - nb]), int(lo_end[i - nb])
                    seg = f"{settings[kept[j]]} – {settings[kept[j + 1]]}" if j >= 0 else ""
                    v = _verdict(mg[0], lo, hi)
                    if max_gap is not None and v != "beyond" and gap > max_gap:
                        v = GAP
                    row.update(dynamic_accuracy=acc_all[i, 0] - mg[0], margin=mg[0], margin_lo=lo, margin_hi=hi,
                               at_equal_speed=v, frontier_gap=gap, frontier_segment=seg)  # fmt: skip
                rows.append(row)
    out = pd.DataFrame(rows, columns=MATCHED_COLUMNS)
    keys = ["model", "benchmark", "algorithm", "axis", "mode", "rule", "threshold", "K"]
    return out.sort_values(keys, kind="stable").reset_index(drop=True)


def _pareto_order(speed: np.ndarray, acc: np.ndarray) -> list[int]:
    """The indices of pareto_points' points in `speed`, in its order (slowest first)."""
    order = np.lexsort((-acc, -speed))  # fastest first; at equal speed the more accurate first
    keep, best = [], -np.inf
    for i in order:
        if acc[i] > best:
            keep.append(int(i))
            best = acc[i]
    return keep[::-1]


def _ci(x: np.ndarray, ci: float) -> tuple[float, float]:
    """Percentile interval of the finite replicates; NaN when most replicates fall beyond the frontier."""
    f = x[np.isfinite(x)]
    if f.size < 0.5 * x.size or f.size == 0:
        return (math.nan, math.nan)
    a = (1 - ci) / 2
    return float(np.quantile(f, a)), float(np.quantile(f, 1 - a))


def _verdict(point: float, lo: float, hi: float) -> str:
    if math.isnan(point):
        return "beyond"
    if lo > 0:
        return "beats"
    if hi < 0:
        return "worse"
    return "tie"


def verdict_counts(table: pd.DataFrame) -> pd.DataFrame:
    """Settings per (model, benchmark, axis, mode, rule) by at_equal_speed (beats / tie / worse / beyond / gap)."""
    t = table[table["mode"].isin(COMPARED)]
    keys = ["model", "benchmark", "axis", "mode", "rule"]
    return t.groupby(keys, dropna=False)["at_equal_speed"].value_counts().unstack(fill_value=0).reset_index()


#: a remask series' point equals its dynamic(τ) point within these (speed relative to max(1, |speed|); accuracy in
#: points): drawn at the frontier's own points, it says so (plot_matched_speed)
_SAME_SPEED_RTOL, _SAME_ACC_ATOL = 1e-6, 1e-6


def _series_key(setting: pd.Series) -> pd.Series:
    """A remask setting with its τ left open: "upstream_remask(0.3,2)" -> "upstream_remask(τ,2)" (as
    "upstream_remask(2)" a legend read the δ as a τ: a cold read)."""
    return setting.str.replace(r"\([0-9.]+(?=[,)])", "(τ", regex=True)


def _equals_dynamic(g: pd.DataFrame, dyn: pd.DataFrame) -> bool:
    """Whether a series' rows `g` on one panel (benchmark x axis) sit on that panel's dynamic rows `dyn` at every τ:
    a dynamic row at the same τ with the same speed and accuracy (within the tolerances above). Drawn as usual, such
    a series lies exactly under the frontier and cannot be seen."""
    if g.empty:
        return False
    d = dyn.assign(_tau=dyn["threshold"].astype(float).round(6)).drop_duplicates("_tau").set_index("_tau")
    tau = g["threshold"].astype(float).round(6)
    if not tau.isin(d.index).all():
        return False
    s, a = g["speed"].to_numpy(float), g["accuracy"].to_numpy(float)
    s0, a0 = d.loc[tau, "speed"].to_numpy(float), d.loc[tau, "accuracy"].to_numpy(float)
    tol = _SAME_SPEED_RTOL * np.maximum(1.0, np.abs(s))
    return bool((np.abs(s - s0) <= tol).all() and (np.abs(a - a0) <= _SAME_ACC_ATOL).all())


#: direct(K)'s triangles in plot_matched_speed: tab10's first colour, which the remask series (from index 1) skip
DIRECT_COLOR = "tab:blue"


def _label_style() -> dict:
    """A point's label (τ, K) in plot_matched_speed: a thin white halo around its glyphs, above the frontier's line
    (zorder 3) and the grid, which crossed the text; under every marker: the frontier's filled ones (3.6: under a
    halo one read as hollow, "off the frontier"), the remask series and direct(K)'s (4-5), so a label never hides a
    marker (a box under the whole label greyed the line and the markers it covered)."""
    from matplotlib import patheffects

    return dict(fontsize=7, textcoords="offset points", zorder=3.5,
                path_effects=[patheffects.withStroke(linewidth=1.6, foreground="white")])  # fmt: skip


def _draw_matched_panel(ax, t: pd.DataFrame, axis: str, keys: list, panel: dict, colors: dict, series_labels: dict,
                        legend: bool = True) -> None:
    """One panel of plot_matched_speed (its docstring): `t` the table's rows of one benchmark and axis, `panel` each
    remask series' (rows, on the dynamic points). legend False: every label hidden from the legend (a zoom inset)."""
    from mrp_repro.report.plots_base import mark_clock_gates, nest_coincident_markers

    name = (lambda x: x) if legend else (lambda x: "_" + x)  # noqa: E731
    fr = t[t["mode"].isin(FRONTIER)]
    order = _pareto_order(fr["speed"].to_numpy(float), fr["accuracy"].to_numpy(float))
    ps, pa = fr["speed"].to_numpy(float)[order], fr["accuracy"].to_numpy(float)[order]
    # the frontier the table and the claims read, every point of it; on the wall-clock axis a segment with an end
    # whose clock gate failed is dashed: that stretch of the line rests on a clock a sanity check refused
    failed = np.zeros(len(order), bool)
    if axis == "wall_speedup" and "clock_gate" in fr:
        failed = fr["clock_gate"].fillna("").astype(str).str.startswith("failed").to_numpy()[order]
    shaky = failed[:-1] | failed[1:]  # (segments,)
    # the line under the point labels (it crossed their text), its filled markers above them (a label's white halo
    # over a marker made it read as hollow: "off the frontier"); the legend key shows both (FRONTIER_KEY)
    xs, ys = _segments(ps, pa, ~shaky)
    ax.plot(xs if len(xs) else ps[:1], ys if len(xs) else pa[:1], "-", color="black", lw=2, zorder=3,
            label=name(FRONTIER_LABEL))  # fmt: skip
    ax.plot(ps, pa, "o", color="black", ms=5, zorder=3.6, label="_frontier points")
    if shaky.any():  # in the failed gate's crimson: a halo's gap in the black line never reads as one
        xs, ys = _segments(ps, pa, shaky)
        ax.plot(xs, ys, "--", color="crimson", lw=1.4, label=name(FRONTIER_FAILED_LABEL), zorder=3)
    # every frontier setting hollow: those on the frontier are filled by the line's markers
    ax.scatter(fr["speed"], fr["accuracy"], facecolors="none", edgecolors="black", s=40, zorder=4,
               label=name("static or dynamic τ off the frontier (hollow)"))  # fmt: skip
    for _, r in fr.iterrows():
        lab = "static" if r["mode"] == "static" else f"τ={r['threshold']:g}"
        ax.annotate(lab, (r["speed"], r["accuracy"]), xytext=(3, -9), **_label_style())
    n_same = 0  # series on the dynamic points so far: each next one's hollow markers a size larger, so
    for k in keys:  # several (δ 1, 2, 4 of upstream, say) nest rather than hide one another
        g, same = panel[k]
        style = (dict(ls="--", marker="s", ms=8 + 3 * n_same, mfc="none", mew=1.5, lw=1.6, zorder=5)
                 if same else dict(ls="-", marker="s", ms=4, lw=1, alpha=0.85, zorder=4))  # fmt: skip
        n_same += bool(same)
        ax.plot(g["speed"], g["accuracy"], color=colors[k], label=name(series_labels[k]), **style)
    d = t[t["mode"] == "direct"].sort_values("K")
    if len(d):  # a family without direct mode (upstream) names no direct(K) series
        # blue, a colour no rule series takes (theirs: tab10 from index 1): in red it was rule loo's colour, and a
        # failed clock gate's red × hid it
        ax.scatter(d["speed"], d["accuracy"], marker="^", color=DIRECT_COLOR, s=45, zorder=4, label=name("direct(K)"))
    # one label per drawn point: direct(3) and direct(4) share one on chain-math (equal cost and accuracy), and one ▲
    # over the other read as one setting; set off enough to clear a wall-clock gate's mark (GATE_MARK_SIZE)
    for (speed, acc), at in d.groupby(["speed", "accuracy"], sort=False):
        ks = ",".join(str(int(k)) for k in at["K"])
        ax.annotate(f"K={ks}", (speed, acc), xytext=(5, 5), **_label_style())
    nest_coincident_markers(ax)  # two rules on one point (loo and sequential on chain-math) nest, not hide
    if axis == "wall_speedup" and "clock_gate" in t:  # drawn, marked, never silently trusted
        mark_clock_gates(ax, t["speed"], t["accuracy"], t["clock_gate"], size=GATE_MARK_SIZE, lw=1.0)


def _segments(x: np.ndarray, y: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The segments i -> i + 1 of the polyline (x, y) where keep[i], as one line broken by NaN between runs."""
    idx: list[float] = []
    for i in np.flatnonzero(keep):
        if not idx or idx[-1] != i:  # a new run: break the line, then start at the segment's first end
            idx += [np.nan, i] if idx else [i]
        idx.append(i + 1)
    pick = np.array(idx, float)
    ok = ~np.isnan(pick)
    xs, ys = np.full(len(pick), np.nan), np.full(len(pick), np.nan)
    xs[ok], ys[ok] = x[pick[ok].astype(int)], y[pick[ok].astype(int)]
    return xs, ys


def _merge_tau_labels(kept: str, removed: str) -> str | None:
    """The label of a frontier point that a removed τ label overlapped: the range of both ("τ=0.25…0.3"), so the
    removed label's point is not read as the kept one's; None when either is not a τ label."""
    import re

    if not (kept.startswith("τ=") and removed.startswith("τ=")):
        return None
    vals = [float(v) for v in re.findall(r"[0-9]*\.?[0-9]+", kept[2:] + " " + removed[2:])]
    return f"τ={min(vals):g}…{max(vals):g}"


#: a panel's dynamic and remask points crowded into under this share of its speed axis get a zoomed inset
ZOOM_SHARE = 0.25
#: where an inset may go (axes fractions: x0, y0, width, height); the one over the fewest points is used
_INSET_SLOTS = ((0.28, 0.16, 0.38, 0.74), (0.05, 0.16, 0.38, 0.74), (0.57, 0.16, 0.38, 0.74), (0.3, 0.16, 0.42, 0.5),
                (0.3, 0.42, 0.42, 0.5))  # fmt: skip


def _zoom_crowded(ax, t: pd.DataFrame, draw) -> object | None:
    """An inset of `ax` zoomed onto its dynamic(τ) and remask points when they fill under ZOOM_SHARE of the panel's
    speed axis (chain-math: TPF 13.5-16 on an axis from static's 1), redrawn there by `draw(inset, legend=False)`,
    in the slot over the fewest of the panel's points, its frame marked on the panel. -> the inset, or None."""
    crowd = t[t["mode"].isin(["dynamic", "remask"])]
    xs, all_x = crowd["speed"].to_numpy(float), t["speed"].to_numpy(float)
    xs, all_x = xs[np.isfinite(xs)], all_x[np.isfinite(all_x)]
    log = ax.get_xscale() == "log"
    span = (lambda v: np.ptp(np.log(v))) if log else np.ptp  # noqa: E731  (shares of the axis as drawn)
    if len(xs) < 4 or span(all_x) == 0 or span(xs) >= ZOOM_SHARE * span(all_x):
        return None
    ys = crowd["accuracy"].to_numpy(float)
    ys = ys[np.isfinite(ys)]
    pad_x, pad_y = max(0.08 * np.ptp(xs), 0.05), max(0.12 * np.ptp(ys), 0.25)
    ax.get_xlim(), ax.get_ylim()  # the panel's limits autoscaled (a full canvas.draw() per panel cost as much)
    pts = ax.transAxes.inverted().transform(ax.transData.transform(np.column_stack([all_x, t["accuracy"]])))
    inside = lambda b: int(((pts[:, 0] >= b[0]) & (pts[:, 0] <= b[0] + b[2])  # noqa: E731
                            & (pts[:, 1] >= b[1]) & (pts[:, 1] <= b[1] + b[3])).sum())  # fmt: skip
    slot = min(_INSET_SLOTS, key=inside)
    ins = ax.inset_axes(slot)
    if log:
        _log_speed_axis(ins)
    draw(ins, False)
    # markers only: magnified, the labels crowded the inset (widened to hold them, it no longer zoomed); the panel
    # names every point
    for t in list(ins.texts):
        t.remove()
    # within the panel's own limits (which hold every point): padded past them, the frame drawn on the panel ran
    # into its title and tick labels
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    ins.set_xlim(max(xs.min() - pad_x, x0), min(xs.max() + pad_x, x1))
    ins.set_ylim(max(ys.min() - pad_y, y0), min(ys.max() + pad_y, y1))
    ins.tick_params(labelsize=7)
    ins.grid(alpha=0.3)
    ins.set_title("zoom (no labels)", fontsize=7, pad=2)
    # its frame and connectors under the point labels (_label_style) and markers: drawn over them, they crossed both
    ax.indicate_inset_zoom(ins, edgecolor="0.4").set_zorder(3.2)
    return ins


def plot_matched_speed(table: pd.DataFrame, algorithm: str = "ours"):
    """Accuracy against speed for one decoding family (`algorithm`: its own frontier and settings, never another
    family's), one row of panels per benchmark, one column per axis the table holds (tpf, weighted_tpf when the
    table was built with head_cost, wall_speedup): the dynamic frontier (line through its Pareto points; static
    and dynamic settings off it hollow), every remask rule's τ points, direct(K). A remask series whose points are
    the dynamic settings' own (same τ, speed and accuracy) is drawn dashed with larger hollow markers above the
    frontier on those panels, and its label says " (= dynamic)" (on every panel it is drawn on) or " (= dynamic in
    N of M panels)". A point of the wall-clock axis whose clock_gate (report.wallclock.mark_clock) is not in
    schema.CLOCK_TRUSTED is marked (plots_base.mark_clock_gates: × a check failed, ◇ unchecked), as speedup.png
    marks its bars. A panel whose dynamic and remask points fill under ZOOM_SHARE of its speed axis (chain-math's TPF
    13.5-16 beside static's 1) has them again in a zoomed inset (_zoom_crowded), its frame marked on the panel."""
    import matplotlib.pyplot as plt

    from mrp_repro.report.plots_base import NESTED_KEY, NESTED_PREFIX, set_theme
    from mrp_repro.report.plots_labels import drop_overlapping_labels, fit_labels

    set_theme()
    require(table, MATCHED_COLUMNS, "plot_matched_speed")
    table = table[table["algorithm"] == algorithm]
    if table.empty:
        raise ValueError(f"plot_matched_speed: no rows of algorithm {algorithm!r}")
    benches = list(dict.fromkeys(table["benchmark"]))
    axes_names = [a for a in AXIS_LABELS if a in set(table["axis"])]
    fig, axes = plt.subplots(len(benches), len(axes_names), figsize=(5.2 * len(axes_names), 3.8 * len(benches)),
                             squeeze=False)  # fmt: skip
    # one series per remask setting with its τ taken out: a rule, or (upstream) a rule at one δ of the sweep
    rem = table[table["mode"] == "remask"]
    series_of = _series_key(rem["setting"])
    keys = sorted(set(zip(rem["rule"], series_of, strict=True)))
    shared = {r for r, _ in keys if sum(k == r for k, _ in keys) > 1}  # rules with several series (δ sweep)
    cmap = plt.get_cmap("tab10")
    colors = {k: cmap((i + 1) % 10) for i, k in enumerate(keys)}
    # each series' rows per panel, and whether they are the panel's dynamic points (then hidden under the frontier)
    panels = {}  # (bench, axis) -> {key: (rows, on the dynamic points)}
    for bench in benches:
        for axis in axes_names:
            t = table[(table["benchmark"] == bench) & (table["axis"] == axis)]
            dyn, tr = t[t["mode"] == "dynamic"], t[t["mode"] == "remask"]
            t_series = _series_key(tr["setting"])
            panels[bench, axis] = {}
            for k in keys:
                g = tr[(tr["rule"] == k[0]) & (t_series == k[1])].sort_values("threshold")
                panels[bench, axis][k] = (g, _equals_dynamic(g, dyn))
    series_labels, keys_style = {}, {}
    for rule, series in keys:
        drawn = [same for p in panels.values() for k, (g, same) in p.items() if k == (rule, series) and len(g)]
        on = sum(drawn)
        tag = ("" if not on else " (= dynamic)" if on == len(drawn)
               else f" (= dynamic in {on} of {len(drawn)} panels: dashed, hollow there)")  # fmt: skip
        what = f"{rule}, {series}" if rule in shared else rule
        series_labels[rule, series] = f"remask, rule {what} (τ points){tag}"
        # its legend key in the style of most of its panels (not of whichever panel drew it first)
        hollow = dict(ls="--", marker="s", ms=8, mfc="none", mew=1.5, lw=1.6)
        keys_style[series_labels[rule, series]] = hollow if on == len(drawn) else dict(ls="-", marker="s", ms=4, lw=1)
    for bi, bench in enumerate(benches):
        for ai, axis in enumerate(axes_names):
            ax = axes[bi][ai]
            t = table[(table["benchmark"] == bench) & (table["axis"] == axis)]
            draw = lambda a, legend, t=t, axis=axis, bench=bench: _draw_matched_panel(  # noqa: E731
                a, t, axis, keys, panels[bench, axis], colors, series_labels, legend)
            if axis in LOG_AXES:
                _log_speed_axis(ax)
            draw(ax, True)
            _zoom_crowded(ax, t, draw)
            ax.set_xlabel(AXIS_LABELS[axis])
            ax.set_ylabel("accuracy (%)")
            ax.set_title(f"{bench}, {algorithm}: accuracy at equal speed")  # the x label names the speed
            ax.grid(alpha=0.3)
    seen: dict[str, object] = {}  # every panel's legend entries once (the × appears on the wall-clock panels only)
    for ax in fig.axes:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(lab, h)
    from matplotlib.lines import Line2D

    for lab, st in keys_style.items():
        if lab in seen:
            seen[lab] = Line2D([], [], color=seen[lab].get_color(), **st)
    if FRONTIER_LABEL in seen:  # its line and its markers are two artists (_draw_matched_panel)
        seen[FRONTIER_LABEL] = Line2D([], [], color="black", lw=2, marker="o", ms=5)
    if any(ln.get_label().startswith(NESTED_PREFIX) for ax in fig.axes for ln in ax.get_lines()):
        seen[NESTED_KEY] = Line2D([], [], ls="none", marker="s", ms=9, mfc="none", mec="0.3", mew=1.5)
    handles, labels = list(seen.values()), list(seen)
    fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), frameon=False, fontsize=8,
               bbox_to_anchor=(0.5, -0.02 - 0.02 * (len(labels) // 4)))  # fmt: skip
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    for panel in list(fig.axes):  # after the layout: the τ labels of the frontier's crowded fast end overprinted;
        # and a label at a panel's edge printed into the next panel: the limits widen to hold every label, before
        # and after the overlapping ones merge (a merged label is longer)
        fit_labels(panel)
        drop_overlapping_labels(panel, keep=lambda text: text.startswith("K=") or text == "static",
                                merge=_merge_tau_labels)  # fmt: skip
        fit_labels(panel)
        for ins in panel.child_axes:  # a zoom inset's frame is drawn on its panel: within the panel's limits
            for get, set_ in ((ins.get_xlim, panel.set_xlim), (ins.get_ylim, panel.set_ylim)):
                lo, hi = (panel.get_xlim if set_ == panel.set_xlim else panel.get_ylim)()
                set_(min(lo, get()[0]), max(hi, get()[1]))
            fit_labels(panel)
    return fig


#: the axes drawn on a log scale: a ratio, so equal factors sit equal distances apart (chain-code's wall clock: the
#: direct and remask settings at 1.3-2.3× were a crowd beside the frontier's 8× on a linear axis)
LOG_AXES = ("wall_speedup",)


def _log_speed_axis(ax) -> None:
    """A log-2 speed axis with plain tick labels (1, 1.5, 2, 3, 4, 6, 8), no minor ticks."""
    from matplotlib import ticker

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(ticker.LogLocator(base=2, subs=(1.0, 1.5)))
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_locator(ticker.NullLocator())
