"""The seed spread of the headline numbers: one row per headline, task and kind of seed, and its figure.

    from mrp_repro.report import variance_spread
    variance_spread.spread_table(per_seed, published_seed=0)   # variance.{md,csv}: variance.COLUMNS
    variance_spread.plot_spread(per_seed, published_seed=0)    # variance.png: every seed beside the published one

per_seed is variance_seeds.csv (variance.SEED_COLUMNS: one row per seed and headline), as report.variance.run writes
it.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from mrp_repro.measure.schema import RUN_COLUMNS, TABLE_COLUMNS
from mrp_repro.report.variance_store import BACKBONE, HEAD

#: headline -> what it is (its unit); the variance table's rows
HEADLINES = {
    "static_accuracy": "static(1) accuracy (%)",
    "dynamic_accuracy_tau50": "dynamic(0.5) accuracy (%)",
    "max_remask_gain": "largest remasking gain over τ: remask(τ, tau) − dynamic(τ) accuracy, points",
    "adjacent_kl_median": "adjacent-step median KL, confidence < 0.99, distance 1 (nats), both tasks pooled",
    "adjacent_relative_kl": "adjacent-similar's statistic: that median KL over the median KL between two positions",
    "heldout_kl_ratio": "held-out KL(B‖A+C) / KL(B‖A) over every training step of the head",
    "spec_tpf_k3": "speculative(3, mrp) tokens per denoising forward",
}
#: variance.csv's columns (one row per headline, task and kind of seed): defined once in the schema
_VARIANCE = ("headline", "benchmark", "seed_kind", "n_seeds", "seeds", "published", "published_lo", "published_hi",
             "seed_mean", "seed_std", "seed_min", "seed_max", "ci_covers_seeds")  # fmt: skip
COLUMNS = {c: TABLE_COLUMNS.get(c) or RUN_COLUMNS[c] for c in _VARIANCE}

__all__ = ["HEADLINES", "COLUMNS", "SEED_STEP", "spread_table", "plot_spread"]

#: plot_spread's horizontal step between a task's seeds of one kind (the kinds sit 0.25 apart)
SEED_STEP = 0.06


def spread_table(per_seed: pd.DataFrame, published_seed: int) -> pd.DataFrame:
    """per_seed (SEED_COLUMNS) -> one row per (headline, benchmark, seed_kind): COLUMNS."""
    rows = []
    for (kind, h, bench), g in per_seed.groupby(["seed_kind", "headline", "benchmark"], sort=False):
        pub = g[g["seed"] == published_seed]
        v = g["seed_value"].astype(float)
        p = pub.iloc[0] if len(pub) else None
        lo, hi = (float(p["seed_value_lo"]), float(p["seed_value_hi"])) if p is not None else (math.nan, math.nan)
        covers = "" if math.isnan(lo) else bool(((v >= lo - 1e-12) & (v <= hi + 1e-12)).all())
        rows.append({"headline": h, "benchmark": bench, "seed_kind": kind, "n_seeds": len(g),
                     "seeds": " ".join(str(int(x)) for x in g["seed"]),
                     "published": float(p["seed_value"]) if p is not None else math.nan, "published_lo": lo,
                     "published_hi": hi, "seed_mean": float(v.mean()),
                     "seed_std": float(v.std(ddof=1)) if len(v) > 1 else math.nan, "seed_min": float(v.min()),
                     "seed_max": float(v.max()), "ci_covers_seeds": covers})  # fmt: skip
    out = pd.DataFrame(rows, columns=list(COLUMNS))
    order = {h: i for i, h in enumerate(HEADLINES)}
    return out.sort_values(["headline", "benchmark", "seed_kind"], kind="stable",
                           key=lambda c: c.map(order) if c.name == "headline" else c).reset_index(drop=True)


def plot_spread(per_seed: pd.DataFrame, published_seed: int):
    """One panel per headline: every seed's value (x: task, marker colour: kind), the published seed ringed with
    its bootstrap CI."""
    import matplotlib.pyplot as plt

    from mrp_repro.report.plots_base import _colors, set_theme

    if per_seed.empty:
        raise ValueError("plot_spread: no seed values; nothing to draw")
    set_theme()
    heads = [h for h in HEADLINES if h in set(per_seed["headline"])]
    kinds = [k for k in (HEAD, BACKBONE) if k in set(per_seed["seed_kind"])]
    cols = dict(zip(kinds, _colors(len(kinds)), strict=True))
    ncol = min(4, len(heads))
    nrow = math.ceil(len(heads) / ncol)
    fig, axs = plt.subplots(nrow, ncol, figsize=(3.6 * ncol, 3.4 * nrow), squeeze=False)
    for ax in axs.flat[len(heads):]:
        ax.set_visible(False)
    for ax, h in zip(axs.flat, heads, strict=False):
        g = per_seed[per_seed["headline"] == h]
        tasks = sorted(g["benchmark"].unique())
        for j, kind in enumerate(kinds):
            k = g[g["seed_kind"] == kind]
            off = (j - (len(kinds) - 1) / 2) * 0.25
            for i, t in enumerate(tasks):
                pts = k[k["benchmark"] == t].sort_values("seed", kind="stable")
                # each seed a step right of the one before: seeds of equal value stay apart (chain16's backbone
                # seeds 1 and 2 both at 100% static on code)
                xs = i + off + (np.arange(len(pts)) - (len(pts) - 1) / 2) * SEED_STEP
                ax.scatter(xs, pts["seed_value"], color=cols[kind], s=22, label=kind if i == 0 else None, zorder=3)
                at = np.flatnonzero(pts["seed"].to_numpy() == published_seed)
                if len(at):
                    pub = pts.iloc[at[0]]
                    y, lo, hi = (float(pub[c]) for c in ("seed_value", "seed_value_lo", "seed_value_hi"))
                    yerr = None if math.isnan(lo) else [[max(y - lo, 0)], [max(hi - y, 0)]]
                    ax.errorbar([xs[at[0]]], [y], yerr=yerr, fmt="o", mfc="none", mec="black", ecolor="black",
                                ms=9, capsize=3, zorder=4, label="published (CI)" if i == 0 and j == 0 else None)
        ax.set_xticks(range(len(tasks)), tasks, fontsize=8)
        ax.set_title(h, fontsize=9)
        ax.margins(x=0.3)
    axs[0][0].legend(fontsize=7, loc="best")
    fig.suptitle("seed spread of the headline numbers (points: seeds, left to right in seed order; ringed: the "
                 "published seed with its bootstrap CI over prompts; head and backbone seeds side by side)",
                 fontsize=10)  # fmt: skip
    fig.tight_layout()
    return fig
