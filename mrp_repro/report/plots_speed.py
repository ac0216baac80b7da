"""The speed figures: speculative TPF and acceptance, wall-clock speedup per batch size, direct lookahead, kernels.

    from mrp_repro.report import plots_speed
    fig = plots_speed.plot_speculative(runs)                       # 05: TPF per prompt, acceptance lengths
    t = plots_speed.at_batch(paper.speculative_table(runs), runs)  # + batch_size: plot_speedup's panels
    fig = plots_speed.plot_speedup(t, controls=plots_speed.speedup_controls(runs))
    fig = plots_speed.plot_lookahead(paper.lookahead_table(runs))  # 06
    fig = plots_speed.plot_kernels(kernels.bench.run_benchmark())  # 08

The look and the checks every figure shares: report.plots_base.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from mrp_repro.report.plots_base import (
    LABELS,
    _colors,
    _legend_below,
    _legend_under_ticks,
    _need,
    _paper_benchmark,
    _unique,
    _yerr,
    mark_clock_gates,
    nest_coincident_markers,
    set_theme,
)

__all__ = ["plot_lookahead", "plot_speculative", "at_batch", "speedup_controls", "plot_speedup", "plot_kernels",
           "CONTROL_DRAFTER", "SPEEDUP_COLUMNS"]  # fmt: skip


def plot_lookahead(table: pd.DataFrame):
    """Accuracy vs lookahead K per benchmark, naive MTP vs MRP (ours with CI, solid; the paper's dashed, of the
    model that reports them, SDAR-4B, whatever the declared paper model); each
    of our points is labelled with the TPF it reaches, so equal-TPF K (e.g. K = 3 and 4 at block 8, TPF 4.0)
    are visible as such."""
    from mrp_repro.report.paper import load

    what = "plot_lookahead"
    _need(table, ["benchmark", "method", "lookahead_k", "accuracy", "accuracy_lo", "accuracy_hi", "tpf",
                  "paper_accuracy", "paper_model"], what)  # fmt: skip
    _unique(table, ["benchmark", "method", "lookahead_k"], what)
    set_theme()
    benches = list(dict.fromkeys(table["benchmark"]))
    fig, axes = plt.subplots(1, len(benches), figsize=(4.6 * len(benches), 3.6), squeeze=False, sharey=True)
    names = {"naive_mtp": "naive MTP", "mrp": "MRP"}
    colors = dict(zip(names, _colors(2), strict=True))
    for ax, b in zip(axes[0], benches, strict=True):
        g = table[table["benchmark"] == b]
        for method in (m for m in names if (g["method"] == m).any()):
            h = g[g["method"] == method].sort_values("lookahead_k")
            label = names[method]
            ax.errorbar(h["lookahead_k"], h["accuracy"], yerr=_yerr(h, "accuracy"), marker="o", capsize=3,
                        color=colors[method], label=f"{label} (ours)")  # fmt: skip
            for k, a, t in zip(h["lookahead_k"], h["accuracy"], h["tpf"], strict=True):
                ax.annotate(f"TPF {t:.1f}", (k, a), xytext=(4, 4 if method == "mrp" else -10),
                            textcoords="offset points", fontsize=7, color=colors[method])  # fmt: skip
            # the paper's values for this benchmark, of whichever model reports them (its lookahead table is
            # SDAR-4B GSM8K only: joined on the declared model, SDAR-8B, they would never show)
            ref = load("lookahead")
            ref = ref[(ref["benchmark"] == _paper_benchmark(h)) & (ref["method"] == method)]
            for model, r in ref.groupby("model", sort=False):
                r = r.sort_values("lookahead_k")
                ax.plot(r["lookahead_k"], r["accuracy"], ls="--", marker="x", color=colors[method], alpha=0.7,
                        label=f"{label} ({model}, paper)")  # fmt: skip
        nest_coincident_markers(ax)  # equal accuracy at a K (chain16's math at K = 1, 2): both markers show
        ax.set_title(b)
        ax.set_xlabel(LABELS["lookahead_k"])
        ax.set_ylabel(LABELS["accuracy"])
        ax.tick_params(labelleft=True)  # sharey hides them on all but the first panel: every panel shows its own
        ax.xaxis.get_major_locator().set_params(integer=True)
    _legend_below(fig, axes[0])
    return fig


#: the speculative figures' no-MRP drafter (the control of speculative mode: report.claims_controls) and its name
CONTROL_DRAFTER = "naive"
_NO_HEAD = "no-head drafter"


def _setting_label(mode: str, K, algorithm: str = "ours", drafter: str = "") -> str:
    """x label of a speculative-figure point; the upstream family's points are their own labelled series, and the
    no-head drafter's (the control) stand beside MRP's at each K."""
    label = "static" if mode == "static" else f"K={int(K)}"
    if mode != "static" and drafter == CONTROL_DRAFTER:
        label += f", {_NO_HEAD}"
    return label if algorithm == "ours" else f"upstream {label}"


def plot_speculative(runs: pd.DataFrame, drafter: str = "mrp"):
    """Speculative mode from a runs frame (static + speculative at every K and drafter).

    Left: TPF per prompt (one point each) for static and every speculative K of `drafter`, one series per
    benchmark, with the oracle drafter's mean TPF at each K marked as the ceiling, and, where the runs hold it, the
    no-head drafter (speculative(K, naive), MRP's control: drafts from the backbone's own logits) beside each K as
    its own x category (hollow points). Right, one panel per benchmark: the distribution of drafts accepted per
    round, one series per algorithm x K (a colour per drafter family, a marker per K), the no-head drafter's dashed
    and hollow beside MRP's."""
    what = "plot_speculative"
    _need(runs, ["benchmark", "algorithm", "mode", "K", "drafter", "problem_id", "tokens", "denoise_forwards",
                 "accept_lengths"], what)  # fmt: skip
    spec_all = runs[runs["mode"] == "speculative"]
    df = runs[(runs["mode"] == "static") | ((runs["mode"] == "speculative") & (runs["drafter"] == drafter))]
    spec = df[df["mode"] == "speculative"]
    if spec.empty or not (df["mode"] == "static").any():
        raise ValueError(f"{what}: needs static and speculative drafter={drafter} rows")
    _unique(df, ["benchmark", "algorithm", "mode", "K", "problem_id"], what)
    ctl = spec_all[(spec_all["drafter"] == CONTROL_DRAFTER) & (spec_all["algorithm"] == "ours")]
    if drafter == CONTROL_DRAFTER:
        ctl = ctl.iloc[:0]
    _unique(ctl, ["benchmark", "algorithm", "mode", "K", "problem_id"], what)
    oracle = runs[(runs["mode"] == "speculative") & (runs["drafter"] == "oracle")]
    set_theme()
    benches = list(dict.fromkeys(df["benchmark"]))
    fig, axes = plt.subplots(1, 1 + len(benches), figsize=(6 + 3.6 * len(benches) + 2 * (len(ctl) > 0), 3.8),
                             width_ratios=[1.6] + [1.0] * len(benches))  # fmt: skip
    Ks = sorted(spec["K"].unique())
    # ours first (each K, then its no-head drafter), then the upstream family's static and K, each its own category
    shown = pd.concat([df, ctl], ignore_index=True)
    present = sorted({(a != "ours", m != "static", 0 if m == "static" else k, dr == CONTROL_DRAFTER,
                       _setting_label(m, k, a, dr))
                      for a, m, k, dr in zip(shown["algorithm"], shown["mode"], shown["K"], shown["drafter"],
                                             strict=True)})  # fmt: skip
    settings = [label for *_, label in present]
    x_of = {s: i for i, s in enumerate(settings)}
    colors = dict(zip(benches, _colors(len(benches)), strict=True))
    width = 0.7 / len(benches)
    rng = np.random.default_rng(0)
    ax = axes[0]
    for bi, b in enumerate(benches):
        off = (bi - (len(benches) - 1) / 2) * width
        for part, hollow in ((df, False), (ctl, True)):
            g = part[part["benchmark"] == b]
            if g.empty:
                continue
            x = np.array([x_of[_setting_label(m, k, a, dr)] for m, k, a, dr in
                          zip(g["mode"], g["K"], g["algorithm"], g["drafter"], strict=True)], float)  # fmt: skip
            tpf = g["tokens"] / g["denoise_forwards"].clip(lower=1)
            style = (dict(facecolors="none", edgecolors=colors[b], linewidths=0.9) if hollow else
                     dict(color=colors[b]))  # fmt: skip
            ax.scatter(x + off + rng.uniform(-width / 3, width / 3, len(x)), tpf, s=10, alpha=0.6,
                       label=f"{b}, {_NO_HEAD} (no-MRP control, hollow)" if hollow else b, **style)  # fmt: skip
        o = oracle[oracle["benchmark"] == b]
        if len(o):
            ceil = o.groupby("K").apply(lambda h: h["tokens"].sum() / max(h["denoise_forwards"].sum(), 1),
                                        include_groups=False)  # fmt: skip
            # a bar in the benchmark's colour right over its own K column's points (a marker between two columns
            # read as belonging to neither), a ▼ at its middle pointing down at them
            xs = np.array([x_of[f"K={int(k)}"] + off for k in ceil.index], float)
            ax.hlines(ceil.to_numpy(), xs - width / 2.5, xs + width / 2.5, colors=colors[b], lw=2.5, zorder=4)
            ax.scatter(xs, ceil.to_numpy(), marker="v", s=60, color=colors[b], edgecolors="black",
                       linewidths=1.0, zorder=5, label=f"{b} oracle ceiling (mean TPF, over its K column)")  # fmt: skip
    ax.set_xticks(range(len(settings)), settings, rotation=30, ha="right")
    ax.set_ylabel("tokens per denoising forward")
    ax.set_title(f"TPF per prompt (drafter {drafter}" + (f"; {_NO_HEAD} beside it)" if len(ctl) else ")"))
    # right: one panel per benchmark (each benchmark's rounds apart, never one line over another's), a colour per
    # drafter family (not the left panel's benchmark colours) and a marker per K
    def rows(b, a, k, dr):
        t = spec if dr == drafter else ctl
        return t[(t["benchmark"] == b) & (t["algorithm"] == a) & (t["K"] == k)]

    # the released code's series larger and under ours: where their shares nearly meet (0.24 and 0.235), its
    # marker rings ours instead of covering it
    family_style = {("ours", drafter): dict(color="black", ls="-", ms=5, zorder=3),
                    ("ours", CONTROL_DRAFTER): dict(color="0.55", ls="--", ms=6, zorder=3),
                    ("upstream", drafter): dict(color="tab:purple", ls=":", ms=10, zorder=2)}  # fmt: skip
    k_marker = dict(zip(Ks, ("o", "s", "D", "^", "v", "P"), strict=False))
    for b, ax in zip(benches, axes[1:], strict=True):
        for a in ("ours", "upstream"):
            for k in Ks:
                for dr in (drafter, CONTROL_DRAFTER):
                    h = rows(b, a, k, dr)
                    if h.empty:
                        continue
                    lengths = np.array([int(j) for x in h["accept_lengths"].fillna("") for j in str(x).split()])
                    if lengths.size == 0:
                        raise ValueError(f"{what}: no accepted-length records for {b} K={int(k)} "
                                         "(accept_lengths empty)")  # fmt: skip
                    vals = np.arange(0, int(k) + 1)
                    prob = np.array([(lengths == v).mean() for v in vals])
                    st = family_style.get((a, dr), dict(color="0.3", ls="-."))
                    ax.plot(vals, prob, marker=k_marker.get(k, "o"), mfc="none" if dr != drafter else st["color"],
                            label=_setting_label("speculative", k, a, dr), **st)  # fmt: skip
        ax.set_xlabel("drafts accepted per round")
        ax.set_ylabel("share of rounds")
        ax.set_title(f"{b}: acceptance length", fontsize=9)
        ax.xaxis.get_major_locator().set_params(integer=True)
    axes[-1].legend(frameon=False, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0),
                    title="the two families count\nacceptance differently:\ndocs/upstream.md", title_fontsize=7)
    for ax in axes[1:]:  # after the legend: its keys keep each series' own marker
        nest_coincident_markers(ax)  # two drafters' shares can coincide (both 0 at a length): nested, never hidden
    fig.tight_layout()
    _legend_under_ticks(axes[0], ncol=2)
    return fig


def at_batch(table: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """`table` with the column batch_size of the runs it was built from (one batch size, else a ValueError):
    what plot_speedup splits its panels by."""
    sizes = sorted({int(b) for b in runs["batch_size"]})
    if len(sizes) != 1:
        raise ValueError(f"at_batch: the runs hold batch sizes {sizes}; build one table per batch size")
    return table.assign(batch_size=sizes[0])


#: at most this many batch-size panels a row in plot_speedup; more wrap into further rows
SPEEDUP_COLUMNS = 2


#: speedup_controls' series names: the no-head drafter beside speculative K, naive MTP beside direct step K
_SPEC_CONTROL = "speculative K={k}, " + _NO_HEAD + " (no-MRP control)"
_DIRECT_CONTROL = "naive MTP K={k} (no-MRP control of MRP direct step {k}: no head)"
#: plot_speedup's MRP series: ours, the released code's (the upstream family), direct mode
_SPEC_SERIES = "MRP speculative K={k}"
_UPSTREAM_SPEC_SERIES = "MRP speculative K={k}, released code (upstream)"
_DIRECT_SERIES = "MRP direct step {k}"


def speedup_controls(*runs: pd.DataFrame, steps=(1, 2), n_boot: int = 1000, ci: float = 0.95,
                     record: pd.DataFrame | None = None) -> pd.DataFrame:  # fmt: skip
    """The no-MRP controls' wall-clock speedups over our static(1), one table for plot_speedup(controls=...): the
    no-head drafter speculative(K, naive) at every K, and naive_mtp(K) (direct(K) without a head) at the direct
    steps, per runs frame (each one batch size: a frame at a batch size an earlier one gave adds nothing), tagged
    with column batch_size and series. With `record` (report.wallclock.record_table) each row carries its decode's
    clock_gate, which plot_speedup marks as it marks MRP's bars."""
    from mrp_repro.measure import stats
    from mrp_repro.report.paper import speculative_table

    parts, seen = [], set()
    for r in runs:
        if r is None or r.empty:
            continue
        bs = sorted({int(b) for b in r["batch_size"]})
        if len(bs) != 1:
            raise ValueError(f"speedup_controls: a runs frame of batch sizes {bs}; one per frame")
        if bs[0] in seen:
            continue
        seen.add(bs[0])
        ours = r[r["algorithm"] == "ours"]
        if ((ours["mode"] == "speculative") & (ours["drafter"] == CONTROL_DRAFTER)).any():
            t = speculative_table(ours, drafter=CONTROL_DRAFTER, n_boot=n_boot, ci=ci)
            spec = ours[(ours["mode"] == "speculative") & (ours["drafter"] == CONTROL_DRAFTER)]
            name = spec.drop_duplicates(["benchmark", "K"]).set_index(["benchmark", "K"])["setting"]
            parts.append(t.assign(batch_size=bs[0], series=[_SPEC_CONTROL.format(k=int(k)) for k in t["K"]],
                                  paper_throughput_speedup=math.nan,
                                  setting=[name.get((b, float(k)), "") for b, k in zip(t["benchmark"], t["K"],
                                                                                        strict=True)]))  # fmt: skip
        rows = []
        for (model, bench), g in ours.groupby(["model", "benchmark"], sort=False):
            st = g[g["mode"] == "static"].set_index("problem_id")
            for k in steps:
                nv = g[(g["mode"] == "naive") & np.isclose(g["K"].astype(float), k)].set_index("problem_id")
                ids = nv.index.intersection(st.index)
                if st.empty or not len(ids):
                    continue
                x, lo, hi = stats.ratio_ci(nv.loc[ids, "tokens"], nv.loc[ids, "wall_s"], st.loc[ids, "tokens"],
                                           st.loc[ids, "wall_s"], n_boot, ci)  # fmt: skip
                rows.append(dict(model=model, benchmark=bench, batch_size=bs[0], series=_DIRECT_CONTROL.format(k=k),
                                 setting=str(nv["setting"].iloc[0]),
                                 throughput_speedup=x, throughput_speedup_lo=lo, throughput_speedup_hi=hi,
                                 paper_throughput_speedup=math.nan,
                                 paper_model=str(g["paper_model"].iloc[0]) if "paper_model" in g else ""))
        if rows:
            parts.append(pd.DataFrame(rows))
    cols = ["benchmark", "batch_size", "series", "throughput_speedup", "throughput_speedup_lo", "throughput_speedup_hi",
            "paper_throughput_speedup", "paper_model"]  # fmt: skip
    if not parts:
        return pd.DataFrame(columns=cols)
    out = pd.concat([p[cols + ["setting"]] for p in parts], ignore_index=True)
    if record is not None:
        gates = record.set_index(["benchmark", "algorithm", "setting", "batch_size"])["clock_gate"]
        out["clock_gate"] = [gates.get((b, "ours", s, int(bs)), "unchecked: no measurement of record")
                             for b, s, bs in zip(out["benchmark"], out["setting"], out["batch_size"], strict=True)]
    return out.drop(columns="setting")


def plot_speedup(speculative: pd.DataFrame, direct: pd.DataFrame | None = None, controls: pd.DataFrame | None = None):
    """Wall-clock speedup over static per benchmark, one panel per batch size (a speedup at batch 1 and one at
    batch 32 are different measurements and never share an axis): one bar series per speculative K and per direct
    step (ours with CI), the paper's number as a black line across each bar it stands beside, exactly the bar's
    width (speculative: batch 1 only, the paper's latency regime). Each table carries
    the batch size of its runs in column batch_size (plots.at_batch); a table may hold several. `controls`
    (speedup_controls: the no-head drafter at every K, naive MTP at the direct steps) adds each no-MRP control as a
    hatched bar series of its own beside MRP's, in every panel of its batch size. A table with column clock_gate
    (report.wallclock.mark_clock) has each bar whose gate did not pass marked (plots_base.mark_clock_gates: × a
    check failed, ◇ unchecked)."""
    what = "plot_speedup"
    cols = ["benchmark", "batch_size", "throughput_speedup", "throughput_speedup_lo", "throughput_speedup_hi",
            "paper_throughput_speedup", "paper_model"]  # fmt: skip
    if "batch_size" not in speculative or (direct is not None and "batch_size" not in direct):
        raise KeyError(f"{what}: a table without column batch_size; tag it with plots.at_batch(table, runs)")
    _need(speculative, cols + ["K"], what)
    from mrp_repro.report.paper import PAPER_SPECULATIVE_K

    # the paper's speculative table is the released code's K = 3, one prompt at a time (its latency regime): its
    # number stands beside upstream K = 3 at batch 1 only
    algos = speculative["algorithm"]
    at_paper = ((speculative["K"] == PAPER_SPECULATIVE_K).to_numpy() & (algos.to_numpy() == "upstream")
                & (speculative["batch_size"] == 1).to_numpy())  # fmt: skip
    spec = speculative.assign(paper_throughput_speedup=speculative["paper_throughput_speedup"].where(at_paper))
    parts = [spec.assign(series=[(_SPEC_SERIES if a == "ours" else _UPSTREAM_SPEC_SERIES).format(k=int(k))
                                 for k, a in zip(spec["K"], algos, strict=True)])]  # fmt: skip
    if direct is not None:
        _need(direct, cols + ["setting"], what)
        d = direct[direct["setting"] != "baseline"]
        parts.append(d.assign(series=[_DIRECT_SERIES.format(k=s.replace("mrp_step", "")) for s in d["setting"]]))
    if controls is not None and len(controls):
        _need(controls, cols + ["series"], what)
        parts.append(controls.assign(paper_throughput_speedup=math.nan))
    df = pd.concat(parts, ignore_index=True)
    control_series = set(controls["series"]) if controls is not None and len(controls) else set()
    _unique(df, ["batch_size", "series", "benchmark"], what)
    models = sorted(set(df.loc[df["paper_throughput_speedup"].notna(), "paper_model"]))
    if len(models) > 1:
        raise ValueError(f"{what}: paper values of {models}; a run compares with one paper model")
    set_theme()
    sizes = sorted({int(b) for b in df["batch_size"]})
    # each control right after the MRP series it controls (speculative K=3 then its no-head drafter, direct step 1
    # then naive MTP K=1): the pair side by side in every panel
    def _key(s):
        import re

        k = re.search(r"K=(\d+)|step (\d+)", s)
        k = int(next(g for g in k.groups() if g)) if k else 0
        return ("direct" in s or "naive MTP" in s, "upstream" in s, k, s in control_series)

    series = sorted(dict.fromkeys(df["series"]), key=_key)
    colors = dict(zip(series, _colors(len(series)), strict=True))  # a series keeps its colour across panels
    benches = list(dict.fromkeys(df["benchmark"]))
    per = [[x for x in series if x in set(df.loc[df["batch_size"] == b, "series"])] for b in sizes]
    # a grid of at most SPEEDUP_COLUMNS panels a row, ~5 in each: one row of every batch size made a figure so wide
    # that, shrunk to a page, its fonts could not be read
    ncols = min(SPEEDUP_COLUMNS, len(sizes))
    nrows = math.ceil(len(sizes) / ncols)
    fig, grid = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.6 * nrows + 0.9), squeeze=False, sharey=True)
    for ax in grid.flat[len(sizes) :]:  # the last row's unused cells: no empty panel
        ax.remove()
    axes = list(grid.flat[: len(sizes)])
    for ax, bs, names in zip(axes, sizes, per, strict=True):
        width = 0.8 / len(names)
        for i, s in enumerate(names):
            g = df[(df["series"] == s) & (df["batch_size"] == bs)].set_index("benchmark").reindex(benches)
            x = np.arange(len(benches)) + (i - (len(names) - 1) / 2) * width
            hatch = dict(hatch="//", edgecolor="black", linewidth=0.6, alpha=0.8) if s in control_series else {}
            ax.bar(x, g["throughput_speedup"], width, color=colors[s], label=s, yerr=_yerr(g, "throughput_speedup"),
                   capsize=3, **hatch)  # fmt: skip
            has = g["paper_throughput_speedup"].notna().to_numpy()
            if has.any():
                # a black line across its bar, exactly its width: a ◆ beside the CI's cap sat on the edge it shares
                # with the next bar (direct step and its naive MTP control), claimed by both
                ax.hlines(g["paper_throughput_speedup"].to_numpy()[has], x[has] - width / 2, x[has] + width / 2,
                          colors="black", lw=2.4, zorder=3, label=f"paper ({models[0]})")  # fmt: skip
            if "clock_gate" in g:  # a number whose clock gate did not pass is drawn, marked, never silently
                # above the bar's CI and above the paper's line where it has one (under it, the × hid half of it)
                top = np.fmax(g["throughput_speedup_hi"].fillna(g["throughput_speedup"]).to_numpy(float),
                              g["paper_throughput_speedup"].to_numpy(float))  # fmt: skip
                mark_clock_gates(ax, x, top + 0.06 * np.nanmax([top.max(), 1.0]), g["clock_gate"], zorder=4)
        ax.axhline(1.0, color="0.4", lw=1, ls=":")
        ax.set_xticks(np.arange(len(benches)), benches)
        ax.set_title(f"batch {bs} ({'one prompt at a time' if bs == 1 else f'{bs} prompts per batch'})", fontsize=10)
        ax.tick_params(labelleft=True)  # sharey hides them off the first column: every panel reads alone
    for row in grid:
        row[0].set_ylabel(LABELS["throughput_speedup"])
    # which of the paper's benchmarks each line stands for (its numbers are SDAR's on GSM8K / HumanEval, not ours)
    has = df[df["paper_throughput_speedup"].notna()]
    on = (", ".join(f"{p} beside {b}" for b, p in sorted(set(zip(has["benchmark"], has["paper_benchmark"],
                                                                  strict=True))))  # fmt: skip
          if "paper_benchmark" in has and len(has) else "")
    fig.suptitle(f"speedup per benchmark (a black line across a bar: the paper's value for that bar, the released "
                 f"code's MRP speculative K = {PAPER_SPECULATIVE_K} at batch 1 and MRP's direct steps)"
                 + (f"\nthe paper's values: {models[0]} on {on}" if on else ""), fontsize=10)  # fmt: skip
    _legend_below(fig, axes, ncol=ncols + 1)  # 2 per panel made the legend twice the panels' width
    return fig


def plot_kernels(df: pd.DataFrame):
    """The kernel benchmark (kernels.bench.run_benchmark's rows), saying what it compares. With two or more
    implementations timed (CUDA: triton, torch, torch.compile): achieved read bandwidth vs N per op, one line each,
    the HBM peak where known. With the reference alone (CPU: Triton needs CUDA, compile not requested): its
    milliseconds per call vs N, and the title says so, naming why each other implementation is absent."""
    what = "plot_kernels"
    _need(df, ["op", "n", "vocab", "dtype", "device", "impl", "time_ms", "gbps", "note"], what)
    _unique(df, ["op", "n", "impl"], what)
    set_theme()
    ops = list(dict.fromkeys(df["op"]))
    timed = [i for i in dict.fromkeys(df["impl"]) if df.loc[df["impl"] == i, "time_ms"].notna().any()]
    if not timed:
        raise ValueError(f"{what}: no implementation was timed; notes: {sorted(set(df['note']))}")
    absent = {i: "; ".join(sorted(set(df.loc[df["impl"] == i, "note"].dropna().astype(str)))) or "not timed"
              for i in dict.fromkeys(df["impl"]) if i not in timed}  # fmt: skip
    compare = len(timed) > 1
    col, ylabel = ("gbps", "achieved read bandwidth (GB/s)") if compare else ("time_ms", "milliseconds per call")
    fig, axes = plt.subplots(1, len(ops), figsize=(3.6 * len(ops), 3.4), squeeze=False, sharey=not compare)
    colors = dict(zip(dict.fromkeys(df["impl"]), _colors(df["impl"].nunique()), strict=True))
    dev = str(df["device"].iloc[0])
    from mrp_repro.kernels.bench import _peak_gbps

    peak = _peak_gbps(dev) if compare else None
    ns = sorted(df["n"].unique())
    for ax, op in zip(axes[0], ops, strict=True):
        for impl in timed:
            g = df[(df["op"] == op) & (df["impl"] == impl)].dropna(subset=[col]).sort_values("n")
            ax.plot(g["n"], g[col], marker="o", color=colors[impl], label=impl)
        if peak:
            ax.axhline(peak, color="black", ls="--", lw=1, label=f"HBM peak {peak / 1000:.1f} TB/s")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.minorticks_off()
        if compare:
            ax.set_yscale("log")
        ax.set_xlabel("rows N of the [N, V] logits")
        ax.set_title(op, fontsize=10)
    axes[0][0].set_ylabel(ylabel)
    head = f"V = {int(df['vocab'].iloc[0])}, {df['dtype'].iloc[0]}, {dev}"
    if compare:
        title = f"{' vs '.join(timed)} ({head})"
    else:
        why = "; ".join(f"{i}: {n}" for i, n in absent.items())
        name = {"torch": "the PyTorch reference (torch)", "triton": "the Triton kernel"}.get(timed[0], timed[0])
        title = (f"only {name} is timed here: nothing to compare it with ({head})\nnot timed: {why}. The Triton "
                 "kernels' correctness off CUDA: tests/test_kernels.py (Triton interpreter)")  # fmt: skip
    fig.suptitle(title, fontsize=9)
    _legend_below(fig, axes[0])
    return fig
