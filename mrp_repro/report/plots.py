"""Every figure of the reproduction, drawn from the tables of mrp_repro.report.paper and runs frames.

    from mrp_repro.report import paper, plots
    fig = plots.plot_lookahead(paper.lookahead_table(runs))
    plots.save_figure(fig, profile, "lookahead")          # figures/<profile>/lookahead.{png,pdf}

Each figure draws every series its table holds (each K, each benchmark, each subset its own series),
reads its columns by exact name (a missing one is a KeyError naming it), refuses a table with more than
one row per series point instead of blending them, and never draws an empty panel. One seaborn theme,
the colour-blind palette. Tables: mrp_repro.report.tables.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from mrp_repro.measure.adjacent import RANDOM_BASELINE, SUBSET, TRAINED
from mrp_repro.measure.schema import require
from mrp_repro.report.tables import out_dir

__all__ = [
    "set_theme", "save_figure", "plot_adjacent", "plot_remasking", "plot_lookahead", "plot_speculative",
    "plot_speedup", "at_batch", "plot_training_curve", "plot_trajectory", "plot_kernels", "legend_points",
    "remasking_controls", "speedup_controls", "nest_coincident_markers", "hidden_markers",
]  # fmt: skip

PALETTE = "colorblind"
LABELS = {
    "threshold": "confidence threshold τ",
    "accuracy": "accuracy (%)",
    "lookahead_k": "lookahead K",
    "distance": "step distance",
    "kl_median": "median KL(next ‖ current), nats",
    "top1_agreement": "top-1 agreement",
    "throughput_speedup": "speedup over static (×, wall clock)",
}


def set_theme() -> None:
    """The one look of every figure: seaborn whitegrid, colour-blind palette, readable font sizes."""
    sns.set_theme(style="whitegrid", palette=PALETTE, context="notebook", font_scale=1.0)
    plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 150, "savefig.bbox": "tight", "axes.titlesize": 11})


def _colors(n: int) -> list:
    return sns.color_palette(PALETTE, max(n, 1))


def _need(df: pd.DataFrame, cols, what: str) -> None:
    require(df, cols, what)
    if df.empty:
        raise ValueError(f"{what}: the table is empty; nothing to draw")


def _unique(df: pd.DataFrame, keys: list[str], what: str) -> None:
    """One row per series point, or a ValueError naming the duplicated point (never blend rows)."""
    dup = df.duplicated(keys, keep=False)
    if dup.any():
        point = df.loc[dup, keys].iloc[0].to_dict()
        raise ValueError(f"{what}: more than one row for {point}; select one row per {keys} first")


def _yerr(df: pd.DataFrame, col: str):
    lo = (df[col] - df[f"{col}_lo"]).clip(lower=0).to_numpy()
    hi = (df[f"{col}_hi"] - df[col]).clip(lower=0).to_numpy()
    return np.vstack([lo, hi])


def save_figure(fig, profile_or_dir, name: str) -> list[Path]:
    """Write `fig` as <dir>/<name>.png and .pdf; returns both paths."""
    from mrp_repro.integrity import atomic_file

    d = out_dir(profile_or_dir)
    paths = []
    for ext in ("png", "pdf"):
        p = d / f"{name}.{ext}"
        with atomic_file(p) as tmp:  # renamed into place: a link at p is replaced, never written through
            fig.savefig(tmp, format=ext)
        paths.append(p)
    return paths


def plot_adjacent(df: pd.DataFrame, subset: str = SUBSET):
    """The motivating observation: median KL and top-1 agreement vs step distance, one line per model (trained and
    each random init), one row of panels per subset of the table, `subset` first (default: positions with
    confidence < 0.99, the claim's)."""
    what = "plot_adjacent"
    _need(df, ["model", "subset", "distance", "kl_median", "top1_agreement"], what)
    if not (df["subset"] == subset).any():
        raise ValueError(f"{what}: no rows of subset {subset!r}; subsets present: {sorted(set(df['subset']))}")
    _unique(df, ["model", "subset", "distance"], what)
    subsets = [subset] + [x for x in dict.fromkeys(df["subset"]) if x != subset]
    set_theme()
    fig, axes = plt.subplots(len(subsets), 2, figsize=(9, 3.4 * len(subsets)), squeeze=False)
    models = list(dict.fromkeys(df["model"]))
    colors = dict(zip(models, _colors(len(models)), strict=True))
    for row, sub in zip(axes, subsets, strict=True):
        g = df[df["subset"] == sub]
        for m in models:
            h = g[g["model"] == m].sort_values("distance")
            style = {"lw": 2.5} if m == TRAINED else {"ls": "--" if m == RANDOM_BASELINE else ":"}
            for ax, col in zip(row, ("kl_median", "top1_agreement"), strict=True):
                ax.plot(h["distance"], h[col], marker="o", color=colors[m], label=str(m), **style)
        for ax, col in zip(row, ("kl_median", "top1_agreement"), strict=True):
            ax.set_xlabel(LABELS["distance"])
            ax.set_ylabel(LABELS[col])
            ax.xaxis.get_major_locator().set_params(integer=True)
        row[0].set_yscale("log")
        row[1].set_ylim(0, 1.02)
        row[0].set_title(f"logits at steps s and s + d (positions: {sub})", fontsize=10)
        row[1].set_title(f"greedy token unchanged (positions: {sub})", fontsize=10)
    axes[0][1].legend(title="backbone", frameon=False, fontsize=8)
    fig.tight_layout()
    return fig


#: remasking rules: one colour (index into the colour-blind palette), marker and line style each; the baseline is
#: black, thick and under them, so a rule that equals it (delta, often) shows as a thin line on a thick one
_RULE_STYLE = {"tau": (3, "o", "-"), "delta": (0, "v", "--"), "loo": (2, "s", "-."), "sequential": (4, "D", ":"),
               "logp-delta": (5, "^", (0, (5, 1, 1, 1))),
               # the no-MRP controls (decoding.controls): grey and orange, their own markers, dotted
               "random-veto": (7, "X", ":"), "confidence-veto": (1, "P", (0, (1, 2)))}  # fmt: skip
#: the remask controls' rules and what each is, for the legend (decoding.controls.CONTROL_RULES)
_CONTROL_LABELS = {"random-veto": "no-MRP control: random veto, as many revocations as rule tau",
                   "confidence-veto": "no-MRP control: lowest-confidence veto, as many as rule tau (head-free)"}
#: the upstream family (the released code): its baseline a wide light-grey band under everything, visible around
#: ours' black baseline and the δ series that equal it
_UPSTREAM_BASE = dict(color="0.75", marker="P", ms=14, mfc="0.75", mew=0, lw=8.0, zorder=2)


def _rule_style(rule: str, i: int) -> tuple:
    c, marker, ls = _RULE_STYLE.get(rule, (6 + i, "o", "-"))
    return sns.color_palette(PALETTE, 10)[c % 10], marker, ls


def _tpf_by(runs: pd.DataFrame, keys: list[str]) -> pd.Series:
    """TPF (tokens / denoising forwards, pooled over prompts) per `keys`."""
    g = runs.groupby(keys)[["tokens", "denoise_forwards"]].sum()
    return g["tokens"] / g["denoise_forwards"].where(g["denoise_forwards"] > 0)


def _remask_series(t: pd.DataFrame) -> list[tuple]:
    """(algorithm, rule, delta or None) of every remasking series, ours first."""
    deltas = [None if pd.isna(x) else float(x) for x in t["delta"]]  # NaN never equals itself: None as the key
    keys = dict.fromkeys(zip(t["algorithm"], t["rule"], deltas, strict=True))
    return sorted(keys, key=lambda k: (k[0] != "ours", list(keys).index(k)))


def _series_label(algo: str, rule: str, delta) -> str:
    """`ours`: our algorithm's rules; `upstream`: the released code's δ veto (both measured here, not the paper's)."""
    if rule in _CONTROL_LABELS:
        return _CONTROL_LABELS[rule]
    return f"MRP remask, rule {rule} (ours)" if algo == "ours" else f"MRP remask, δ veto δ={delta:g} (upstream)"


def _equals_dynamic(table: pd.DataFrame, algo: str, rule: str, delta) -> list[str]:
    """The benchmarks on which the series (algo, rule, delta) equals its family's dynamic baseline at every τ
    (same τ, accuracy within float tolerance): drawn there, it sits exactly on the baseline and would be lost
    under it, so its legend label and style say so."""
    s = table[_in_series(table, algo, rule, delta)]
    out = []
    for b, h in s.groupby("benchmark", sort=False):
        base = table[(table["algorithm"] == algo) & (table["benchmark"] == b)].drop_duplicates("threshold")
        base = base.set_index("threshold")["baseline_accuracy"]
        y, y0 = h["mrp_remask_accuracy"].to_numpy(float), base.reindex(h["threshold"]).to_numpy(float)
        if len(h) and np.isclose(y, y0, rtol=0, atol=1e-9, equal_nan=False).all():
            out.append(str(b))
    return out


def _in_series(t: pd.DataFrame, algo: str, rule: str, delta) -> pd.Series:
    """Rows of `t` in the series (algo, rule, delta)."""
    same_d = t["delta"].isna() if delta is None else np.isclose(t["delta"], delta)
    return (t["algorithm"] == algo) & (t["rule"] == rule) & same_d


def _paper_benchmark(g: pd.DataFrame) -> str:
    """The paper's benchmark of our rows `g` (their paper_benchmark column, else report.paper.BENCHMARK_MAP)."""
    from mrp_repro.report.paper import BENCHMARK_MAP

    if "paper_benchmark" in g and g["paper_benchmark"].notna().any():
        return str(g["paper_benchmark"].dropna().iloc[0])
    return BENCHMARK_MAP.get(str(g["benchmark"].iloc[0]), "")


def _paper_remasking(paper_model: str, g: pd.DataFrame) -> pd.DataFrame:
    """The paper's remasking rows of `paper_model` on the paper benchmark of our rows `g`, by τ."""
    from mrp_repro.report.paper import load

    t = load("remasking")
    t = t[(t["model"] == paper_model) & (t["benchmark"] == _paper_benchmark(g))]
    return t.dropna(subset=["baseline_accuracy", "mrp_remask_accuracy"]).sort_values("threshold")


def remasking_controls(runs: pd.DataFrame, controls: pd.DataFrame, n_boot: int = 1000, ci: float = 0.95) -> pd.DataFrame:
    """The remasking table's rows (paper.remasking_table(rule=None, algorithm=None)) of the remask controls in
    `controls` (controls_runs: the random and lowest-confidence vetoes, rules decoding.controls.CONTROL_RULES), each
    paired with our dynamic(τ) of `runs` as the MRP rules are: what plot_remasking(controls=...) draws."""
    from mrp_repro.report.paper import remasking_table

    veto = controls[(controls["mode"] == "remask") & controls["rule"].isin(list(_CONTROL_LABELS))]
    if veto.empty:
        return pd.DataFrame()
    dyn = runs[(runs["mode"] == "dynamic") & (runs["algorithm"] == "ours")]
    return remasking_table(pd.concat([dyn, veto], ignore_index=True), rule=None, algorithm=None, n_boot=n_boot, ci=ci)


def plot_remasking(table: pd.DataFrame, runs: pd.DataFrame | None = None, controls: pd.DataFrame | None = None,
                   n_boot: int = 1000, ci: float = 0.95):  # fmt: skip
    """Accuracy vs τ per benchmark: dynamic decoding without remasking (black, thick, under the rest), one MRP
    remasking series per rule (its own colour, marker and line style), and the paper's two series for the run's
    paper_model (grey, dashed: baseline and MRP remasking, at the τ the paper ran). A table of both families
    (remasking_table(algorithm=None)) adds the upstream family's own dynamic baseline (grey) and one upstream
    remasking series per δ, each paired with its own baseline. With `runs` (the dynamic and remask runs the table
    was built from), a second row: the TPF each series reaches, so a gain bought with fewer tokens per forward
    shows as such. With `controls` (controls_runs) and `runs`, the no-MRP remask controls as series of their own
    (the random veto, the head-free lowest-confidence veto: remasking_controls, n_boot / ci their CIs), beside the MRP
    rules. Where a later series' point sits on an earlier one's (τ = 0.9: nothing is revoked, every series is
    dynamic's), its markers are drawn hollow and larger (nest_coincident_markers), so no marker hides another. The
    legend sits below the panels.

    table: paper.remasking_table(rule=None); one row per benchmark x algorithm x rule x δ x τ."""
    what = "plot_remasking"
    if controls is not None and not controls.empty:
        if runs is None:
            raise ValueError(f"{what}: the controls are paired with dynamic(τ): pass the runs too")
        ctl = remasking_controls(runs, controls, n_boot, ci)
        if len(ctl):
            table = pd.concat([table, ctl[[c for c in ctl.columns if c in table.columns]]], ignore_index=True)
            runs = pd.concat([runs, controls[(controls["mode"] == "remask")
                                             & controls["rule"].isin(list(_CONTROL_LABELS))]], ignore_index=True)
    _need(table, ["benchmark", "algorithm", "delta", "threshold", "rule", "baseline_accuracy", "mrp_remask_accuracy",
                  "paper_baseline_accuracy", "paper_mrp_remask_accuracy", "paper_model"], what)  # fmt: skip
    _unique(table, ["benchmark", "algorithm", "rule", "delta", "threshold"], what)
    tpf = None
    if runs is not None:
        _need(runs, ["benchmark", "algorithm", "mode", "rule", "delta", "threshold", "tokens", "denoise_forwards"],
              what)  # fmt: skip
        r = runs[runs["mode"].isin(["dynamic", "remask"])].assign(threshold=lambda d: d["threshold"].round(3))
        r = r.assign(rule=r["rule"].where(r["mode"] == "remask", ""), delta=r["delta"].fillna(-1.0))
        tpf = _tpf_by(r, ["benchmark", "algorithm", "rule", "delta", "threshold"])
    set_theme()
    benches = list(dict.fromkeys(table["benchmark"]))
    nrows = 1 if tpf is None else 2
    fig, axes = plt.subplots(nrows, len(benches), figsize=(4.6 * len(benches), 3.3 * nrows + 1.1), squeeze=False,
                             sharex=True, sharey="row")  # fmt: skip
    series = _remask_series(table)
    n_up = sum(a != "ours" for a, _, _ in series)  # upstream δ series: a dark-to-light ramp none of ours uses
    upstream_colors = iter(sns.color_palette("mako", n_up + 2)[1 : n_up + 1])
    style = {}
    for i, (algo, rule, d) in enumerate(series):
        style[(algo, rule, d)] = _rule_style(rule, i) if algo == "ours" else (next(upstream_colors), "P", "-")
    algos = list(dict.fromkeys(a for a, _, _ in series))
    base_styles = {"ours": dict(color="black", marker="s", ms=10, mfc="white", mew=1.8, lw=3.5, zorder=3),
                   "upstream": _UPSTREAM_BASE}  # fmt: skip
    base_labels = {"ours": "dynamic, no remasking (ours)", "upstream": "dynamic, no remasking (upstream)"}
    paper_model = str(table["paper_model"].iloc[0])
    # a series equal to the dynamic baseline everywhere (delta, often) says so in its label; on some benchmarks
    # only, it names them; and it is drawn dashed with hollow markers, visible on the baseline it covers
    same = {k: _equals_dynamic(table, *k) for k in series}
    labels = {}
    for k in series:
        on, drawn_on = same[k], set(table.loc[_in_series(table, *k), "benchmark"])
        tag = f" (= dynamic on {', '.join(on)})" if on and len(on) < len(drawn_on) else " (= dynamic)" if on else ""
        labels[k] = _series_label(*k) + tag
    for j, b in enumerate(benches):
        g = table[table["benchmark"] == b]
        ax = axes[0][j]
        for algo in algos:
            base = g[g["algorithm"] == algo].drop_duplicates("threshold").sort_values("threshold")
            ax.errorbar(base["threshold"], base["baseline_accuracy"], yerr=_yerr(base, "baseline_accuracy"),
                        capsize=3, label=base_labels[algo], **base_styles[algo])  # fmt: skip
        for algo, rule, d in series:
            h = g[_in_series(g, algo, rule, d)].sort_values("threshold")
            color, marker, ls = style[(algo, rule, d)]
            on_base = dict(ls="--", ms=8, mfc="none", mew=1.8) if b in same[(algo, rule, d)] else dict(ls=ls, ms=5)
            ax.errorbar(h["threshold"], h["mrp_remask_accuracy"], yerr=_yerr(h, "mrp_remask_accuracy"), capsize=2,
                        color=color, marker=marker, lw=1.6, zorder=4, label=labels[(algo, rule, d)],
                        **on_base)  # fmt: skip
        # the paper's series from its own table, at every τ it ran (0.5-0.9, whether or not we ran that τ): the
        # table's paper columns sit beside our rows only, and are blank beside our rules the paper did not run
        p = _paper_remasking(paper_model, g)
        if len(p):
            ax.plot(p["threshold"], p["baseline_accuracy"], color="0.45", ls="--", marker="s", mfc="none",
                    label=f"dynamic, no remasking ({paper_model}, paper)")  # fmt: skip
            ax.plot(p["threshold"], p["mrp_remask_accuracy"], color="0.45", ls="--", marker="o",
                    label=f"MRP remask ({paper_model}, paper: its τ rule or the released δ veto)")  # fmt: skip
        ax.set_title(f"{b} (paper: {g['paper_benchmark'].iloc[0]})" if "paper_benchmark" in g else b)
        ax.set_ylabel(LABELS["accuracy"])
        ax.tick_params(labelleft=True)  # sharey hides them on all but the first panel: each panel reads alone
        if tpf is not None:
            ax = axes[1][j]
            if b not in tpf.index.get_level_values(0):
                raise ValueError(f"{what}: the runs hold no dynamic rows for {b}")
            t = tpf.loc[b]
            for algo in algos:
                key = (algo, "", -1.0)
                if key not in t.index.droplevel(-1):
                    raise ValueError(f"{what}: the runs hold no {algo} dynamic rows for {b}")
                d0 = t.loc[key].sort_index()
                ax.plot(d0.index, d0.to_numpy(), label=f"_tpf {algo} dynamic", **base_styles[algo])
            for algo, rule, d in series:
                key = (algo, rule, -1.0 if d is None else d)
                if key in t.index.droplevel(-1):
                    h = t.loc[key].sort_index()
                    color, marker, ls = style[(algo, rule, d)]
                    ax.plot(h.index, h.to_numpy(), color=color, marker=marker, ms=5, ls=ls, lw=1.6, zorder=4,
                            label=f"_tpf {algo} {rule} {d}")  # fmt: skip
            ax.set_ylabel("tokens per denoising forward")
            ax.tick_params(labelleft=True)
        axes[-1][j].set_xlabel(LABELS["threshold"])
    handles, labels = axes[0][0].get_legend_handles_labels()
    order = sorted(range(len(labels)), key=lambda i: ("paper" in labels[i], i))  # measured here, then the paper
    ncol = 3
    fig.legend([handles[i] for i in order], [labels[i] for i in order], loc="lower center", ncol=ncol, frameon=False,
               fontsize=8)  # fmt: skip
    for ax in axes.flat:  # after the legend: its keys keep each series' own marker
        nest_coincident_markers(ax)
    fig.tight_layout(rect=(0, 0.035 * math.ceil(len(labels) / ncol) / nrows, 1, 1))
    return fig


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
        ax.set_title(b)
        ax.set_xlabel(LABELS["lookahead_k"])
        ax.set_ylabel(LABELS["accuracy"])
        ax.tick_params(labelleft=True)  # sharey hides them on all but the first panel: every panel shows its own
        ax.xaxis.get_major_locator().set_params(integer=True)
    _legend_below(fig, axes[0])
    return fig


def _legend_below(fig, axes, ncol: int = 4) -> None:
    """One legend for every axis, below the panels (never over a line or a label), each label once."""
    seen: dict[str, object] = {}
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(label, h)
    rows = math.ceil(len(seen) / ncol)
    fig.legend(list(seen.values()), list(seen), loc="lower center", ncol=ncol, frameon=False, fontsize=8)
    # the legend's height in inches (8 pt rows), as a share of this figure's height: a figure of several rows
    # of panels would otherwise give it far more room than it needs
    bottom = min((0.19 * rows + 0.12) / fig.get_size_inches()[1], 0.5)
    fig.tight_layout(rect=(0, bottom, 1, 1))


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
    its own x category (hollow points). Right: the distribution of drafts accepted per round, one series per
    benchmark x K, the no-head drafter's dashed beside MRP's."""
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
    fig, axes = plt.subplots(1, 2, figsize=(10 + 2 * (len(ctl) > 0), 3.8))
    benches = list(dict.fromkeys(df["benchmark"]))
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
            # on top of the points and beside them: at K = 3 the ceiling sits where most prompts are
            xs = np.array([x_of[f"K={int(k)}"] + off for k in ceil.index], float)
            ax.hlines(ceil.to_numpy(), xs - width / 2, xs + width / 2, colors="black", linestyles="--", lw=1.2,
                      zorder=4)  # fmt: skip
            ax.scatter(xs + width / 2, ceil.to_numpy(), marker="<", s=70, color=colors[b], edgecolors="black",
                       linewidths=1.2, zorder=5, label=f"{b} oracle ceiling (mean TPF)")  # fmt: skip
    ax.set_xticks(range(len(settings)), settings, rotation=30, ha="right")
    ax.set_ylabel("tokens per denoising forward")
    ax.set_title(f"TPF per prompt (drafter {drafter}" + (f"; {_NO_HEAD} beside it)" if len(ctl) else ")"))
    ax = axes[1]
    def rows(b, a, k, dr):
        t = spec if dr == drafter else ctl
        return t[(t["benchmark"] == b) & (t["algorithm"] == a) & (t["K"] == k)]

    series = [(b, a, k, dr) for b in benches for a in ("ours", "upstream") for k in Ks
              for dr in (drafter, CONTROL_DRAFTER) if len(rows(b, a, k, dr))]  # fmt: skip
    main = [x for x in series if x[3] == drafter]
    cols = dict(zip([x[:3] for x in main], _colors(len(main)), strict=True))
    for b, a, k, dr in series:
        h = rows(b, a, k, dr)
        lengths = np.array([int(j) for x in h["accept_lengths"].fillna("") for j in str(x).split()])
        if lengths.size == 0:
            raise ValueError(f"{what}: no accepted-length records for {b} K={int(k)} (accept_lengths empty)")
        vals = np.arange(0, int(k) + 1)
        prob = np.array([(lengths == v).mean() for v in vals])
        ctl_style = dict(ls="--", marker="x", mfc="none") if dr != drafter else dict(marker="o")
        ax.plot(vals, prob, color=cols.get((b, a, k), "0.5"), label=f"{b} {_setting_label('speculative', k, a, dr)}",
                **ctl_style)  # fmt: skip
    ax.set_xlabel("drafts accepted per round")
    ax.set_ylabel("share of rounds")
    ax.set_title("acceptance length (the two families count\nacceptance differently: docs/upstream.md)", fontsize=9)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.legend(frameon=False, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    nest_coincident_markers(ax)  # two drafters' shares can coincide (both 0 at a length): nested, never hidden
    fig.tight_layout()
    _legend_under_ticks(axes[0], ncol=2)
    return fig


def _legend_under_ticks(ax, ncol: int) -> None:
    """`ax`'s legend below its (rotated, long) x tick labels, placed from their drawn extent: a fixed offset in
    axes units collides with them whenever the labels are longer than it assumed (the upstream settings)."""
    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in [*ax.get_xticklabels(), ax.xaxis.label] if t.get_text()]
    low = min((b.y0 for b in boxes), default=ax.get_window_extent(renderer).y0)
    pad = 4 * fig.dpi / 72  # 4 pt under the lowest label
    _, y = ax.transAxes.inverted().transform((0, low - pad))
    ax.legend(frameon=False, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, y), ncol=ncol)


def at_batch(table: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """`table` with the column batch_size of the runs it was built from (one batch size, else a ValueError):
    what plot_speedup splits its panels by."""
    sizes = sorted({int(b) for b in runs["batch_size"]})
    if len(sizes) != 1:
        raise ValueError(f"at_batch: the runs hold batch sizes {sizes}; build one table per batch size")
    return table.assign(batch_size=sizes[0])


#: the legend entry of a wall-clock number whose clock gate (report.wallclock) did not pass
GATED_LABEL = "× clock gate not passed (clock_gate: unchecked or failed)"

#: at most this many batch-size panels a row in plot_speedup; more wrap into further rows
SPEEDUP_COLUMNS = 2


#: speedup_controls' series names: the no-head drafter beside speculative K, naive MTP beside direct step K
_SPEC_CONTROL = "speculative K={k}, " + _NO_HEAD + " (no-MRP control)"
_DIRECT_CONTROL = "naive MTP K={k} (no-MRP control of direct step {k}: no head)"


def speedup_controls(*runs: pd.DataFrame, steps=(1, 2), n_boot: int = 1000, ci: float = 0.95) -> pd.DataFrame:
    """The no-MRP controls' wall-clock speedups over our static(1), one table for plot_speedup(controls=...): the
    no-head drafter speculative(K, naive) at every K, and naive_mtp(K) (direct(K) without a head) at the direct
    steps, per runs frame (each one batch size: a frame at a batch size an earlier one gave adds nothing), tagged
    with column batch_size and series."""
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
            parts.append(t.assign(batch_size=bs[0], series=[_SPEC_CONTROL.format(k=int(k)) for k in t["K"]],
                                  paper_throughput_speedup=math.nan))  # fmt: skip
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
                                 throughput_speedup=x, throughput_speedup_lo=lo, throughput_speedup_hi=hi,
                                 paper_throughput_speedup=math.nan,
                                 paper_model=str(g["paper_model"].iloc[0]) if "paper_model" in g else ""))
        if rows:
            parts.append(pd.DataFrame(rows))
    cols = ["benchmark", "batch_size", "series", "throughput_speedup", "throughput_speedup_lo", "throughput_speedup_hi",
            "paper_throughput_speedup", "paper_model"]  # fmt: skip
    return pd.concat([p[cols] for p in parts], ignore_index=True) if parts else pd.DataFrame(columns=cols)


def plot_speedup(speculative: pd.DataFrame, direct: pd.DataFrame | None = None, controls: pd.DataFrame | None = None):
    """Wall-clock speedup over static per benchmark, one panel per batch size (a speedup at batch 1 and one at
    batch 32 are different measurements and never share an axis): one bar series per speculative K and per direct
    step (ours with CI), the paper's number as a black diamond on each bar it stands beside (speculative: batch 1
    only, the paper's latency regime). Each table carries
    the batch size of its runs in column batch_size (plots.at_batch); a table may hold several. `controls`
    (speedup_controls: the no-head drafter at every K, naive MTP at the direct steps) adds each no-MRP control as a
    hatched bar series of its own beside MRP's, in every panel of its batch size. A table with column clock_gate
    (report.wallclock.mark_clock) has each bar whose gate is not in schema.CLOCK_TRUSTED marked with a red ×."""
    what = "plot_speedup"
    cols = ["benchmark", "batch_size", "throughput_speedup", "throughput_speedup_lo", "throughput_speedup_hi",
            "paper_throughput_speedup", "paper_model"]  # fmt: skip
    if "batch_size" not in speculative or (direct is not None and "batch_size" not in direct):
        raise KeyError(f"{what}: a table without column batch_size; tag it with plots.at_batch(table, runs)")
    _need(speculative, cols + ["K"], what)
    from mrp_repro.measure.schema import CLOCK_TRUSTED
    from mrp_repro.report.paper import PAPER_SPECULATIVE_K

    # the paper's speculative table is the released code's K = 3, one prompt at a time (its latency regime): its
    # number stands beside upstream K = 3 at batch 1 only
    algos = speculative["algorithm"]
    at_paper = ((speculative["K"] == PAPER_SPECULATIVE_K).to_numpy() & (algos.to_numpy() == "upstream")
                & (speculative["batch_size"] == 1).to_numpy())  # fmt: skip
    spec = speculative.assign(paper_throughput_speedup=speculative["paper_throughput_speedup"].where(at_paper))
    parts = [spec.assign(series=[f"{'' if a == 'ours' else 'upstream '}speculative K={int(k)}"
                                 for k, a in zip(spec["K"], algos, strict=True)])]  # fmt: skip
    if direct is not None:
        _need(direct, cols + ["setting"], what)
        d = direct[direct["setting"] != "baseline"]
        parts.append(d.assign(series=[f"direct step {s.replace('mrp_step', '')}" for s in d["setting"]]))
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
                ax.scatter(x[has], g["paper_throughput_speedup"].to_numpy()[has], marker="D", color="black", zorder=3,
                           s=22, label=f"paper ({models[0]})")  # fmt: skip
            if "clock_gate" in g:  # a number whose clock gate did not pass is drawn, marked, never silently
                gated = (g["clock_gate"].notna() & ~g["clock_gate"].isin(CLOCK_TRUSTED)).to_numpy()
                top = (g["throughput_speedup_hi"].fillna(g["throughput_speedup"])).to_numpy()
                if gated.any():
                    ax.scatter(x[gated], top[gated] * 1.04, marker="x", color="crimson", s=30, zorder=4,
                               label=GATED_LABEL)  # fmt: skip
        ax.axhline(1.0, color="0.4", lw=1, ls=":")
        ax.set_xticks(np.arange(len(benches)), benches)
        ax.set_title(f"batch {bs} ({'one prompt at a time' if bs == 1 else f'{bs} prompts per batch'})", fontsize=10)
        ax.tick_params(labelleft=True)  # sharey hides them off the first column: every panel reads alone
    for row in grid:
        row[0].set_ylabel(LABELS["throughput_speedup"])
    fig.suptitle(f"speedup per benchmark (paper, ◆: upstream speculative K = {PAPER_SPECULATIVE_K} and direct steps)",
                 fontsize=10)  # fmt: skip
    _legend_below(fig, axes, ncol=2 * ncols)
    return fig


#: the quantities of a training curve, one panel each: column -> (panel, legend label); a column not listed is
#: its own panel, labelled by its name
_CURVE = {
    "train_loss": ("training loss (nats, per step)", "KL(B ‖ A + C) on the training batch"),
    "heldout_kl": ("held-out KL (nats)", "KL(B ‖ A + C): with the MRP head"),
    "heldout_uncorrected_kl": ("held-out KL (nats)", "KL(B ‖ A): uncorrected, no head"),
}


def plot_training_curve(curve: pd.DataFrame, x: str = "step"):
    """A training curve, one panel per quantity (each its own y-label): the training loss per step (with its
    running mean when there are many steps) and the held-out KL of the head beside the uncorrected KL(B ‖ A)
    (dashed), for mrp_curve; any other numeric column (e.g. the backbone's loss) in a panel of its own."""
    set_theme()
    cols = [c for c in curve.columns if c != x and pd.api.types.is_numeric_dtype(curve[c]) and curve[c].notna().any()]
    cols = [c for c in cols if c not in ("lr", "epoch", "time_s", "wall_s", "tokens")]
    if not cols:
        raise ValueError(f"plot_training_curve: no numeric column beside {x!r} to draw")
    panels = list(dict.fromkeys(_CURVE.get(c, (c, c))[0] for c in cols))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.4 * len(panels), 3.6), squeeze=False)
    colors = dict(zip(cols, _colors(len(cols)), strict=True))
    for ax, panel in zip(axes[0], panels, strict=True):
        for c in (c for c in cols if _CURVE.get(c, (c, c))[0] == panel):
            g = curve[[x, c]].dropna()
            label = _CURVE.get(c, (c, c.replace("_", " ")))[1]
            baseline = any(w in c for w in ("baseline", "uncorrected", "no_mrp"))
            many = len(g) > 20
            ax.plot(g[x], g[c], ls="--" if baseline else "-", marker=None if many else "o", color=colors[c],
                    alpha=0.35 if many else 1.0, lw=1 if many else 1.8, label=label)  # fmt: skip
            if many:
                w = max(len(g) // 50, 5)
                ax.plot(g[x], g[c].rolling(w, min_periods=1).mean(), color=colors[c], lw=2,
                        label=f"running mean over {w} steps")  # fmt: skip
        ax.set_xlabel("training step")
        ax.set_ylabel(panel)
        ax.legend(frameon=False, fontsize=8)
    if any(c in _CURVE for c in cols):
        fig.suptitle("MRP head training", fontsize=11)
    fig.tight_layout()
    return fig


_KIND_STYLE = {"reveal": ("o", 0), "draft": ("s", 1), "accept": ("^", 2), "revoke": ("X", 3)}
_KIND_LABEL = {"reveal": "reveal (a token written)", "revoke": "revoke (masked again: red X)",
               "draft": "draft", "accept": "accepted draft"}  # fmt: skip


def plot_trajectory(trace: pd.DataFrame | list[dict], row: int | None = None, block: int | None = None,
                    decode_token=None, setting: str = "", row_names=None):  # fmt: skip
    """One block's reveal order, step by step: a marker per event at (position, step), revoked tokens as red X,
    each revealed or accepted token's text above its marker (what the step wrote there; · for whitespace).

    `trace`: the engine's events (row, block, step, kind in reveal/revoke/draft/accept, pos, token). Default
    block: the one with the most revocations (else the most events) of the chosen row. `setting` (the policy's
    name, e.g. remask(0.5,sequential): τ and rule) and `row_names` (per row, e.g. its benchmark and problem id)
    go into the title, so the figure says what it shows.
    """
    set_theme()
    df = pd.DataFrame(trace)
    if df.empty:
        fig, ax = plt.subplots(figsize=(6, 3))
        ax.text(0.5, 0.5, "empty trace", ha="center", va="center")
        return fig
    if row is None:
        rev = df[df["kind"] == "revoke"]
        row = int(rev["row"].value_counts().idxmax()) if len(rev) else int(df["row"].iloc[0])
    df = df[df["row"] == row]
    if block is None:
        rev = df[df["kind"] == "revoke"]
        block = int((rev if len(rev) else df)["block"].value_counts().idxmax())
    g = df[df["block"] == block]
    pos0 = g["pos"].min()
    colors = _colors(4)
    fig, ax = plt.subplots(
        figsize=(max(7, 0.55 * (g["pos"].max() - pos0 + 1) + 3), max(3, 0.35 * g["step"].nunique() + 1.5))
    )
    for kind, (marker, ci) in _KIND_STYLE.items():
        h = g[g["kind"] == kind]
        if h.empty:
            continue
        color = "crimson" if kind == "revoke" else colors[ci]
        ax.scatter(h["pos"] - pos0, h["step"], marker=marker, s=140 if kind == "revoke" else 90, color=color,
                   label=_KIND_LABEL.get(kind, kind), zorder=3 if kind == "revoke" else 2, alpha=0.9)  # fmt: skip
        if kind in ("reveal", "accept"):
            for p, s, t in zip(h["pos"], h["step"], h["token"], strict=True):
                txt = decode_token(int(t)) if decode_token else str(t)
                txt = txt.strip() or "·"  # whitespace
                ax.annotate(txt, (p - pos0, s), xytext=(0, 8), textcoords="offset points", ha="center", fontsize=8)
    steps = g["step"]
    ax.set_ylim(steps.max() + 0.5, steps.min() - 0.8)  # inverted: step 0 on top, room for its labels
    ax.set_xlabel("position in block")
    ax.set_ylabel("denoising step")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.yaxis.get_major_locator().set_params(integer=True)
    name = f"{row_names[row]}, " if row_names is not None and row < len(row_names) else ""
    first = " ".join(x for x in (setting, f"on {name}row {row}" if setting else f"{name}row {row}") if x)
    ax.set_title(f"{first}, block {block}:\nreveal order (text: the token written at that step)", fontsize=10)
    ax.legend(frameon=False, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
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


__all__ += ["plot_adjacent_relative"]


def plot_adjacent_relative(df: pd.DataFrame, subset: str = SUBSET):
    """The adjacent-similar claim's statistic (measure.adjacent): relative KL (adjacent-step KL over the KL
    between two positions of the same block state) with its CI, by step distance, one line per model, and the
    claim's threshold RELATIVE_KL_MAX (judged at distance 1). An untrained model sits near 1."""
    from mrp_repro.measure.adjacent import RELATIVE_KL_MAX

    what = "plot_adjacent_relative"
    _need(df, ["model", "subset", "distance", "relative_kl", "relative_kl_lo", "relative_kl_hi"], what)
    g = df[df["subset"] == subset]
    if g.empty:
        raise ValueError(f"{what}: no rows of subset {subset!r}; subsets present: {sorted(set(df['subset']))}")
    _unique(g, ["model", "distance"], what)
    set_theme()
    fig, ax = plt.subplots(figsize=(5.6, 3.6))
    models = list(dict.fromkeys(g["model"]))
    for color, m in zip(_colors(len(models)), models, strict=True):
        h = g[g["model"] == m].sort_values("distance")
        err = [h["relative_kl"] - h["relative_kl_lo"], h["relative_kl_hi"] - h["relative_kl"]]
        ax.errorbar(h["distance"], h["relative_kl"], yerr=err, marker="o", color=color, capsize=3, label=str(m),
                    lw=2.5 if m == TRAINED else 1.2, ls="-" if m == TRAINED else "--")  # fmt: skip
    ax.axhline(RELATIVE_KL_MAX, color="0.3", ls=":", lw=1.2, label=f"claim threshold {RELATIVE_KL_MAX} (at d = 1)")
    ax.set_yscale("log")
    ax.set_xlabel(LABELS["distance"])
    ax.set_ylabel("relative KL (adjacent / between positions)")
    ax.xaxis.get_major_locator().set_params(integer=True)
    # the null pairs a position with the next masked one of the same state: fewer remain at larger d, so the null
    # itself moves with d (kl_null_median in the table) and only d = 1 is the claim's statistic
    ax.set_title(f"relative KL by step distance ({subset});\nthe claim reads d = 1 (beyond it the null moves with d)",
                 fontsize=9)  # fmt: skip
    ax.legend(frameon=False, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return fig


_MARKERLESS = ("", "None", "none", " ", None, "_", "|")


def _marker_lines(ax) -> list:
    """The axis' lines that draw markers (not error-bar caps), in drawing order (zorder, then insertion)."""
    lines = [ln for ln in ax.get_lines() if ln.get_marker() not in _MARKERLESS and ln.get_visible()]
    return sorted(lines, key=lambda ln: ln.get_zorder())  # stable: insertion order within a zorder


def _points(ln) -> np.ndarray:
    x, y = np.asarray(ln.get_xdata(), float), np.asarray(ln.get_ydata(), float)
    xy = np.stack([x, y], 1) if x.size == y.size else np.zeros((0, 2))
    return xy[np.isfinite(xy).all(1)]


def _shared(a: np.ndarray, b: np.ndarray, tol: float = 1e-9) -> bool:
    """Whether some point of a and some point of b coincide (within tol, relative to the values' scale)."""
    if not len(a) or not len(b):
        return False
    d = np.abs(a[:, None, :] - b[None, :, :]) <= tol * np.maximum(1.0, np.abs(a[:, None, :]))
    return bool(d.all(-1).any())


def nest_coincident_markers(ax) -> None:
    """Where a line's marker would sit on an earlier line's (same point), draw it hollow and larger than every
    marker it covers, above them: the markers nest instead of hiding one another (plot_remasking: at τ = 0.9 every
    series is dynamic's point)."""
    drawn = []
    for ln in _marker_lines(ax):
        under = [o for o in drawn if _shared(_points(o), _points(ln))]
        if under:
            ln.set_markerfacecolor("none")
            ln.set_markeredgewidth(max(ln.get_markeredgewidth(), 1.5))
            ln.set_markersize(max(o.get_markersize() for o in under) + 2.5)
            ln.set_zorder(max(ln.get_zorder(), *(o.get_zorder() for o in under)) + 0.1)
        drawn.append(ln)


def hidden_markers(fig) -> list[tuple[str, str]]:
    """(covered, covering) label pairs of line markers that one draws exactly over the other in `fig` (the later
    not hollow and larger): a marker the reader cannot see. Empty for a figure where none hides another."""
    out = []
    for ax in fig.axes:
        lines = _marker_lines(ax)
        for i, a in enumerate(lines):
            for b in lines[i + 1:]:
                if not _shared(_points(a), _points(b)):
                    continue
                nested = (str(b.get_markerfacecolor()) == "none" and b.get_markersize() > a.get_markersize())
                if not nested:
                    out.append((a.get_label(), b.get_label()))
    return out


def _finite_points(artist) -> int:
    """Finite (x, y) points an artist draws: a line's data, a scatter's offsets, an errorbar's data line, a bar
    container's bars (finite heights), a patch's extent, a line collection's segments."""
    from matplotlib.collections import Collection, LineCollection
    from matplotlib.container import BarContainer, ErrorbarContainer
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle

    def finite(xy) -> int:
        a = np.asarray(xy, float).reshape(-1, 2) if np.size(xy) else np.zeros((0, 2))
        return int(np.isfinite(a).all(axis=1).sum())

    if isinstance(artist, ErrorbarContainer):
        return _finite_points(artist.lines[0]) if artist.lines[0] is not None else 0
    if isinstance(artist, BarContainer):
        return sum(int(np.isfinite(p.get_height()) and np.isfinite(p.get_x())) for p in artist.patches)
    if isinstance(artist, Line2D):
        x, y = np.asarray(artist.get_xdata(), float), np.asarray(artist.get_ydata(), float)
        return int((np.isfinite(x) & np.isfinite(y)).sum()) if x.size == y.size else 0
    if isinstance(artist, LineCollection):
        return sum(finite(seg) for seg in artist.get_segments())
    if isinstance(artist, Collection):
        return finite(artist.get_offsets())
    if isinstance(artist, Rectangle):
        return int(np.isfinite([artist.get_x(), artist.get_y(), artist.get_width(), artist.get_height()]).all())
    return 0


def legend_points(fig) -> dict[str, int]:
    """Every legend entry of `fig` (each axis' legend and the figure's) -> the finite points drawn, over every axis,
    by the artists carrying that label: 0 means the legend names a series the figure does not draw."""
    drawn: dict[str, int] = {}
    for ax in fig.axes:
        inside = {id(a) for c in ax.containers for a in c.get_children()}  # counted through their container
        artists = [*ax.containers, *(a for a in [*ax.lines, *ax.collections, *ax.patches] if id(a) not in inside)]
        for a in artists:
            label = a.get_label()
            if label and not label.startswith("_"):
                drawn[label] = drawn.get(label, 0) + _finite_points(a)
    legends = [ax.get_legend() for ax in fig.axes] + list(fig.legends)
    names = [t.get_text() for leg in legends if leg is not None for t in leg.get_texts()]
    return {n: drawn.get(n, 0) for n in names}
