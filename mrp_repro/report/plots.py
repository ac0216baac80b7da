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
    "plot_speedup", "plot_training_curve", "plot_trajectory",
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
    d = out_dir(profile_or_dir)
    paths = []
    for ext in ("png", "pdf"):
        p = d / f"{name}.{ext}"
        fig.savefig(p, format=ext)
        paths.append(p)
    return paths


def plot_adjacent(df: pd.DataFrame, subset: str = SUBSET):
    """The motivating observation on one subset (default: positions with confidence < 0.99, as the README):
    median KL and top-1 agreement vs step distance, one line per model (trained and each random init)."""
    what = "plot_adjacent"
    _need(df, ["model", "subset", "distance", "kl_median", "top1_agreement"], what)
    g = df[df["subset"] == subset]
    if g.empty:
        raise ValueError(f"{what}: no rows of subset {subset!r}; subsets present: {sorted(set(df['subset']))}")
    _unique(g, ["model", "distance"], what)
    set_theme()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    models = list(dict.fromkeys(g["model"]))
    for color, m in zip(_colors(len(models)), models, strict=True):
        h = g[g["model"] == m].sort_values("distance")
        style = {"lw": 2.5} if m == TRAINED else {"ls": "--" if m == RANDOM_BASELINE else ":"}
        for ax, col in zip(axes, ("kl_median", "top1_agreement"), strict=True):
            ax.plot(h["distance"], h[col], marker="o", color=color, label=str(m), **style)
    for ax, col in zip(axes, ("kl_median", "top1_agreement"), strict=True):
        ax.set_xlabel(LABELS["distance"])
        ax.set_ylabel(LABELS[col])
        ax.xaxis.get_major_locator().set_params(integer=True)
    axes[0].set_yscale("log")
    axes[1].set_ylim(0, 1.02)
    axes[0].set_title(f"logits at steps s and s + d ({subset})")
    axes[1].set_title("greedy token unchanged")
    axes[1].legend(title="backbone", frameon=False, fontsize=8)
    fig.tight_layout()
    return fig


def plot_remasking(table: pd.DataFrame):
    """Accuracy vs τ per benchmark: the dynamic baseline and one MRP remasking series per rule
    (table: paper.remasking_table(rule=None); one row per benchmark x rule x τ). A table of both families
    (algorithm=None) draws each family's own baseline, and upstream remasking one series per δ."""
    set_theme()
    benches = list(dict.fromkeys(table["benchmark"]))
    fig, axes = plt.subplots(1, len(benches), figsize=(4.3 * len(benches), 3.4), squeeze=False, sharey=True)
    _need(table, ["benchmark", "threshold", "rule", "baseline_accuracy", "mrp_remask_accuracy"], "plot_remasking")
    t = table.assign(algorithm=table["algorithm"] if "algorithm" in table.columns else "ours",
                     delta=table["delta"] if "delta" in table.columns else np.nan)  # fmt: skip
    _unique(t, ["benchmark", "algorithm", "rule", "delta", "threshold"], "plot_remasking")
    deltas = [None if pd.isna(x) else float(x) for x in t["delta"]]  # NaN never equals itself: None as the key
    series = list(dict.fromkeys(zip(t["algorithm"], t["rule"], deltas, strict=True)))
    algos = list(dict.fromkeys(t["algorithm"]))
    colors = _colors(len(series) + 1)
    for ax, b in zip(axes[0], benches, strict=True):
        g = t[t["benchmark"] == b]
        for algo, shade in zip(algos, ("0.3", "0.6"), strict=False):
            base = g[g["algorithm"] == algo].drop_duplicates("threshold").sort_values("threshold")
            ax.errorbar(base["threshold"], base["baseline_accuracy"],
                        yerr=_yerr(base, "baseline_accuracy"), color=shade, marker="s", capsize=3,
                        label="dynamic (no remasking)" if algo == "ours" else f"{algo} dynamic")  # fmt: skip
        for c, (algo, r, d) in zip(colors[1:], series, strict=False):
            same_d = g["delta"].isna() if d is None else g["delta"] == d
            h = g[(g["algorithm"] == algo) & (g["rule"] == r) & same_d].sort_values("threshold")
            label = f"MRP remask ({r})" if algo == "ours" else f"{algo} remask (δ={d:g})"
            ax.errorbar(h["threshold"], h["mrp_remask_accuracy"], yerr=_yerr(h, "mrp_remask_accuracy"), color=c,
                        marker="o", capsize=3, label=label)  # fmt: skip
        ax.set_title(b)
        ax.set_xlabel(LABELS["threshold"])
        ax.set_ylabel(LABELS["accuracy"])
    axes[0][-1].legend(frameon=False, fontsize=8)
    fig.tight_layout()
    return fig


def plot_lookahead(table: pd.DataFrame):
    """Accuracy vs lookahead K per benchmark, naive MTP vs MRP (ours with CI, solid; the paper's dashed); each
    of our points is labelled with the TPF it reaches, so equal-TPF K (e.g. K = 3 and 4 at block 8, TPF 4.0)
    are visible as such."""
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
            if h["paper_accuracy"].notna().any():
                ax.plot(h["lookahead_k"], h["paper_accuracy"], ls="--", marker="x", color=colors[method],
                        alpha=0.7, label=f"{label} ({h['paper_model'].iloc[0]}, paper)")  # fmt: skip
        ax.set_title(b)
        ax.set_xlabel(LABELS["lookahead_k"])
        ax.set_ylabel(LABELS["accuracy"])
        ax.xaxis.get_major_locator().set_params(integer=True)
    axes[0][-1].legend(frameon=False, fontsize=8)
    fig.tight_layout()
    return fig


def _setting_label(mode: str, K, algorithm: str = "ours") -> str:
    """x label of a speculative-figure point; the upstream family's points are their own labelled series."""
    label = "static" if mode == "static" else f"K={int(K)}"
    return label if algorithm == "ours" else f"upstream {label}"


def plot_speculative(runs: pd.DataFrame, drafter: str = "mrp"):
    """Speculative mode from a runs frame (static + speculative at every K and drafter).

    Left: TPF per prompt (one point each) for static and every speculative K of `drafter`, one series per
    benchmark, with the oracle drafter's mean TPF at each K marked as the ceiling. Right: the distribution of
    drafts accepted per round, one series per benchmark x K."""
    what = "plot_speculative"
    _need(runs, ["benchmark", "algorithm", "mode", "K", "drafter", "problem_id", "tokens", "denoise_forwards",
                 "accept_lengths"], what)  # fmt: skip
    df = runs[(runs["mode"] == "static") | ((runs["mode"] == "speculative") & (runs["drafter"] == drafter))]
    spec = df[df["mode"] == "speculative"]
    if spec.empty or not (df["mode"] == "static").any():
        raise ValueError(f"{what}: needs static and speculative drafter={drafter} rows")
    _unique(df, ["benchmark", "algorithm", "mode", "K", "problem_id"], what)
    oracle = runs[(runs["mode"] == "speculative") & (runs["drafter"] == "oracle")]
    set_theme()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    benches = list(dict.fromkeys(df["benchmark"]))
    Ks = sorted(spec["K"].unique())
    # ours first, then the upstream family's static and K, each a category of its own (never pooled)
    present = sorted({(a != "ours", m != "static", 0 if m == "static" else k, _setting_label(m, k, a))
                      for a, m, k in zip(df["algorithm"], df["mode"], df["K"], strict=True)})  # fmt: skip
    settings = [label for *_, label in present]
    x_of = {s: i for i, s in enumerate(settings)}
    colors = dict(zip(benches, _colors(len(benches)), strict=True))
    width = 0.7 / len(benches)
    rng = np.random.default_rng(0)
    ax = axes[0]
    for bi, b in enumerate(benches):
        g = df[df["benchmark"] == b]
        off = (bi - (len(benches) - 1) / 2) * width
        x = np.array([x_of[_setting_label(m, k, a)] for m, k, a in zip(g["mode"], g["K"], g["algorithm"], strict=True)],
                     float)  # fmt: skip
        tpf = g["tokens"] / g["denoise_forwards"].clip(lower=1)
        ax.scatter(x + off + rng.uniform(-width / 3, width / 3, len(x)), tpf, s=10, alpha=0.5, color=colors[b],
                   label=b)  # fmt: skip
        o = oracle[oracle["benchmark"] == b]
        if len(o):
            ceil = o.groupby("K").apply(lambda h: h["tokens"].sum() / max(h["denoise_forwards"].sum(), 1),
                                        include_groups=False)  # fmt: skip
            ax.scatter([x_of[f"K={int(k)}"] + off for k in ceil.index], ceil.to_numpy(), marker="_", s=400, lw=2.5,
                       color=colors[b], label=f"{b} oracle ceiling")  # fmt: skip
    ax.set_xticks(range(len(settings)), settings)
    ax.set_ylabel("tokens per denoising forward")
    ax.set_title(f"TPF per prompt (drafter {drafter})")
    ax.legend(frameon=False, fontsize=7)
    ax = axes[1]
    series = [(b, a, k) for b in benches for a in ("ours", "upstream") for k in Ks
              if len(spec[(spec["benchmark"] == b) & (spec["algorithm"] == a) & (spec["K"] == k)])]  # fmt: skip
    for (b, a, k), c in zip(series, _colors(len(series)), strict=True):
        h = spec[(spec["benchmark"] == b) & (spec["algorithm"] == a) & (spec["K"] == k)]
        lengths = np.array([int(j) for x in h["accept_lengths"].fillna("") for j in str(x).split()])
        if lengths.size == 0:
            raise ValueError(f"{what}: no accepted-length records for {b} K={int(k)} (accept_lengths empty)")
        vals = np.arange(0, int(k) + 1)
        prob = np.array([(lengths == v).mean() for v in vals])
        ax.plot(vals, prob, marker="o", color=c, label=f"{b} {_setting_label('speculative', k, a)}")
    ax.set_xlabel("drafts accepted per round")
    ax.set_ylabel("share of rounds")
    ax.set_title("acceptance length")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.legend(frameon=False, fontsize=7)
    fig.tight_layout()
    return fig


def plot_speedup(speculative: pd.DataFrame, direct: pd.DataFrame | None = None):
    """Wall-clock speedup over static per benchmark: one bar series per speculative K and per direct step
    (ours with CI), the paper's number as a black diamond on each bar it stands beside."""
    what = "plot_speedup"
    cols = ["benchmark", "throughput_speedup", "throughput_speedup_lo", "throughput_speedup_hi",
            "paper_throughput_speedup"]  # fmt: skip
    _need(speculative, cols + ["K"], what)
    algos = speculative["algorithm"] if "algorithm" in speculative.columns else ["ours"] * len(speculative)
    parts = [speculative.assign(series=[f"{'' if a == 'ours' else 'upstream '}speculative K={int(k)}"
                                        for k, a in zip(speculative["K"], algos, strict=True)])]  # fmt: skip
    if direct is not None:
        _need(direct, cols + ["setting"], what)
        d = direct[direct["setting"] != "baseline"]
        parts.append(d.assign(series=[f"direct {s.replace('mrp_', '')}" for s in d["setting"]]))
    df = pd.concat(parts, ignore_index=True)
    _unique(df, ["series", "benchmark"], what)
    set_theme()
    series = list(dict.fromkeys(df["series"]))
    benches = list(dict.fromkeys(df["benchmark"]))
    fig, ax = plt.subplots(figsize=(max(5, 1.2 * len(benches) * len(series)), 3.6))
    width = 0.8 / len(series)
    for i, (s, c) in enumerate(zip(series, _colors(len(series)), strict=True)):
        g = df[df["series"] == s].set_index("benchmark").reindex(benches)
        x = np.arange(len(benches)) + (i - (len(series) - 1) / 2) * width
        ax.bar(x, g["throughput_speedup"], width, color=c, label=s, yerr=_yerr(g, "throughput_speedup"), capsize=3)
        ax.scatter(x, g["paper_throughput_speedup"], marker="D", color="black", zorder=3, s=18,
                   label="paper" if i == 0 else None)  # fmt: skip
    ax.axhline(1.0, color="0.4", lw=1, ls=":")
    ax.set_xticks(np.arange(len(benches)), benches)
    ax.set_ylabel(LABELS["throughput_speedup"])
    ax.set_title("speedup per benchmark")
    ax.legend(frameon=False, fontsize=8, ncol=2)
    fig.tight_layout()
    return fig


def plot_training_curve(curve: pd.DataFrame, x: str = "step"):
    """MRP training curve: every numeric column against `x` (train / held-out KL; the uncorrected baseline dashed)."""
    set_theme()
    cols = [c for c in curve.columns if c != x and pd.api.types.is_numeric_dtype(curve[c]) and curve[c].notna().any()]
    cols = [c for c in cols if c not in ("lr", "epoch", "time_s", "wall_s", "tokens")]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for c, color in zip(cols, _colors(len(cols)), strict=False):
        g = curve[[x, c]].dropna()
        baseline = any(w in c for w in ("baseline", "uncorrected", "no_mrp"))
        ax.plot(g[x], g[c], ls="--" if baseline else "-", marker=None if len(g) > 20 else "o", color=color,
                label=c.replace("_", " "))  # fmt: skip
    ax.set_xlabel("training step")
    ax.set_ylabel("KL(B ‖ A + C), nats")
    ax.set_title("MRP training")
    ax.legend(frameon=False, fontsize=8)
    fig.tight_layout()
    return fig


_KIND_STYLE = {"reveal": ("o", 0), "draft": ("s", 1), "accept": ("^", 2), "revoke": ("X", 3)}


def plot_trajectory(trace: pd.DataFrame | list[dict], row: int | None = None, block: int | None = None,
                    decode_token=None):  # fmt: skip
    """One block's reveal order, step by step: a marker per event at (position, step), revoked tokens as red X.

    `trace`: the engine's events (row, block, step, kind in reveal/revoke/draft/accept, pos, token). Default
    block: the one with the most revocations (else the most events) of the chosen row.
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
        figsize=(max(5, 0.55 * (g["pos"].max() - pos0 + 1) + 2), max(3, 0.35 * g["step"].nunique() + 1.5))
    )
    for kind, (marker, ci) in _KIND_STYLE.items():
        h = g[g["kind"] == kind]
        if h.empty:
            continue
        color = "crimson" if kind == "revoke" else colors[ci]
        ax.scatter(h["pos"] - pos0, h["step"], marker=marker, s=140 if kind == "revoke" else 90, color=color,
                   label=kind, zorder=3 if kind == "revoke" else 2, alpha=0.9)  # fmt: skip
        if kind in ("reveal", "accept"):
            for p, s, t in zip(h["pos"], h["step"], h["token"], strict=True):
                txt = decode_token(int(t)) if decode_token else str(t)
                ax.annotate(txt, (p - pos0, s), xytext=(0, 7), textcoords="offset points", ha="center", fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("position in block")
    ax.set_ylabel("denoising step")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_title(
        f"row {row}, block {block}: reveal order" + (" (red X: revoked)" if (g["kind"] == "revoke").any() else "")
    )
    ax.legend(frameon=False, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return fig
