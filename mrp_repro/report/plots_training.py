"""The backbone's and the head's figures: the adjacent-step observation that motivates the head, and training curves.

    from mrp_repro.report import plots_training
    plots_training.plot_adjacent(paper.load_result(P, "adjacent"))          # 03: KL and top-1 agreement by distance
    plots_training.plot_adjacent_relative(adjacent)                         # 03: the claim's relative KL
    plots_training.plot_training_curve(paper.mrp_curve_frame(loss_curve))   # 01 / 04: loss and held-out KL

The look and the checks every figure shares: report.plots_base.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from mrp_repro.measure.adjacent import RANDOM_BASELINE, SUBSET, TRAINED
from mrp_repro.report.plots_base import LABELS, _colors, _need, _unique, set_theme

__all__ = ["plot_adjacent", "plot_adjacent_relative", "plot_training_curve"]


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
