"""Every figure and table of the reproduction, written under figures/<profile>/.

    from mrp_repro import plots
    fig = plots.plot_lookahead(paper.lookahead_table(runs))
    plots.save_figure(fig, profile, "lookahead")          # figures/<profile>/lookahead.{png,pdf}
    plots.save_table(table, plots.out_dir(profile), "lookahead")   # .md, .tex, .csv

Figures use one seaborn theme and the colour-blind palette. Tables keep their
numeric columns in the CSV; Markdown and LaTeX show ``ours [lo, hi]`` beside
the paper's number.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

if TYPE_CHECKING:
    from mrp_repro.config import Profile

__all__ = [
    "set_theme",
    "out_dir",
    "save_figure",
    "save_table",
    "format_table",
    "plot_adjacent",
    "plot_remasking",
    "plot_lookahead",
    "plot_speculative",
    "plot_speedup",
    "plot_training_curve",
    "plot_trajectory",
]

PALETTE = "colorblind"
LABELS = {
    "threshold": "confidence threshold τ",
    "accuracy": "accuracy (%)",
    "lookahead_k": "lookahead K",
    "distance": "step distance",
    "kl_mean": "KL(next ‖ current), nats",
    "top1_agreement": "top-1 agreement",
    "throughput_speedup": "speedup over static (×)",
}


def set_theme() -> None:
    """The one look of every figure: seaborn whitegrid, colour-blind palette, readable font sizes."""
    sns.set_theme(style="whitegrid", palette=PALETTE, context="notebook", font_scale=1.0)
    plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 150, "savefig.bbox": "tight", "axes.titlesize": 11})


def _colors(n: int) -> list:
    return sns.color_palette(PALETTE, max(n, 1))


# ----------------------------------------------------------------------------- output


def out_dir(profile_or_dir: Profile | str | os.PathLike) -> Path:
    """figures/<profile>/ for a Profile or a profile name; a Path (or a string with a separator) as is."""
    from mrp_repro.runtime import figures_dir, figures_root

    if isinstance(profile_or_dir, Path):
        d = profile_or_dir
    elif isinstance(profile_or_dir, str):
        d = Path(profile_or_dir) if (os.sep in profile_or_dir) else figures_root() / profile_or_dir
    elif hasattr(profile_or_dir, "name") and hasattr(profile_or_dir, "hash"):
        return figures_dir(profile_or_dir)
    else:
        d = Path(profile_or_dir)
    d.mkdir(parents=True, exist_ok=True)
    return d


def save_figure(fig, profile_or_dir, name: str) -> list[Path]:
    """Write `fig` as <dir>/<name>.png and .pdf; returns both paths."""
    d = out_dir(profile_or_dir)
    paths = []
    for ext in ("png", "pdf"):
        p = d / f"{name}.{ext}"
        fig.savefig(p, format=ext)
        paths.append(p)
    return paths


def _fmt(x, digits: int) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if isinstance(x, (float, np.floating)):
        return f"{x:.{digits}f}"
    return str(x)


def format_table(df: pd.DataFrame, digits: int = 1) -> pd.DataFrame:
    """Strings for display: ``x [lo, hi]`` wherever x_lo and x_hi exist; other numbers rounded."""
    out = pd.DataFrame(index=df.index)
    skip = set()
    for c in df.columns:
        if c in skip:
            continue
        if f"{c}_lo" in df.columns and f"{c}_hi" in df.columns:
            d = 2 if "speedup" in c else digits
            out[c] = [
                f"{_fmt(x, d)} [{_fmt(lo, d)}, {_fmt(hi, d)}]" if not _isnan(x) else "–"
                for x, lo, hi in zip(df[c], df[f"{c}_lo"], df[f"{c}_hi"], strict=True)
            ]
            skip |= {f"{c}_lo", f"{c}_hi"}
        else:
            d = 2 if ("speedup" in c or c in ("identical", "tpf", "threshold")) else digits
            out[c] = [_fmt(x, d) for x in df[c]]
    return out


def _isnan(x) -> bool:
    return x is None or (isinstance(x, (float, np.floating)) and math.isnan(x))


def markdown(df: pd.DataFrame) -> str:
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(str(v).replace("|", "\\|") for v in row) + " |")
    return "\n".join(lines) + "\n"


def _latex(df: pd.DataFrame) -> str:
    def esc(s: str) -> str:
        for a, b in (("\\", r"\textbackslash{}"), ("_", r"\_"), ("%", r"\%"), ("&", r"\&"), ("#", r"\#")):
            s = s.replace(a, b)
        return s.replace("–", "--")

    cols = [esc(str(c)) for c in df.columns]
    lines = [r"\begin{tabular}{" + "l" * len(cols) + "}", r"\toprule", " & ".join(cols) + r" \\", r"\midrule"]
    for row in df.itertuples(index=False):
        lines.append(" & ".join(esc(str(v)) for v in row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def save_table(df: pd.DataFrame, directory, name: str, digits: int = 1) -> list[Path]:
    """Write <dir>/<name>.csv (numbers as they are), .md and .tex (formatted, CIs merged)."""
    d = out_dir(directory)
    shown = format_table(df, digits)
    paths = [d / f"{name}.md", d / f"{name}.tex", d / f"{name}.csv"]
    paths[0].write_text(markdown(shown))
    paths[1].write_text(_latex(shown))
    df.to_csv(paths[2], index=False)
    return paths


# ----------------------------------------------------------------------------- figures


def plot_adjacent(df: pd.DataFrame):
    """The motivating observation: KL and top-1 agreement vs step distance, one line per model (trained / random)."""
    set_theme()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    models = list(dict.fromkeys(df["model"])) if "model" in df else ["model"]
    for color, m in zip(_colors(len(models)), models, strict=False):
        g = df[df["model"] == m] if "model" in df else df
        g = g.sort_values("distance")
        for ax, col in zip(axes, ("kl_mean", "top1_agreement"), strict=True):
            if col in g:
                ax.plot(g["distance"], g[col], marker="o", color=color, label=str(m))
    for ax, col in zip(axes, ("kl_mean", "top1_agreement"), strict=True):
        ax.set_xlabel(LABELS["distance"])
        ax.set_ylabel(LABELS[col])
        ax.xaxis.get_major_locator().set_params(integer=True)
    axes[1].set_ylim(0, 1.02)
    axes[0].set_title("logits of a block at steps s and s + d")
    axes[1].set_title("greedy token unchanged")
    axes[1].legend(title="backbone", frameon=False)
    fig.tight_layout()
    return fig


def plot_remasking(table: pd.DataFrame):
    """Accuracy vs τ: dynamic baseline and MRP remasking per rule (table from remasking_table(rule=None))."""
    set_theme()
    benches = list(dict.fromkeys(table["benchmark"]))
    fig, axes = plt.subplots(1, len(benches), figsize=(4.3 * len(benches), 3.4), squeeze=False, sharey=True)
    rules = list(dict.fromkeys(table["rule"])) if "rule" in table else ["tau"]
    colors = _colors(len(rules) + 1)
    for ax, b in zip(axes[0], benches, strict=True):
        g = table[table["benchmark"] == b]
        base = g.drop_duplicates("threshold").sort_values("threshold")
        ax.errorbar(base["threshold"], base["baseline_accuracy"],
                    yerr=_yerr(base, "baseline_accuracy"), color="0.3", marker="s", capsize=3,
                    label="dynamic (no remasking)")  # fmt: skip
        for c, r in zip(colors[1:], rules, strict=False):
            h = (g[g["rule"] == r] if "rule" in g else g).sort_values("threshold")
            ax.errorbar(h["threshold"], h["mrp_remask_accuracy"], yerr=_yerr(h, "mrp_remask_accuracy"),
                        color=c, marker="o", capsize=3, label=f"MRP remask ({r})")  # fmt: skip
        ax.set_title(b)
        ax.set_xlabel(LABELS["threshold"])
        ax.set_ylabel(LABELS["accuracy"])
    axes[0][-1].legend(frameon=False, fontsize=8)
    fig.tight_layout()
    return fig


def _yerr(df: pd.DataFrame, col: str):
    if f"{col}_lo" not in df or f"{col}_hi" not in df:
        return None
    lo = (df[col] - df[f"{col}_lo"]).clip(lower=0).to_numpy()
    hi = (df[f"{col}_hi"] - df[col]).clip(lower=0).to_numpy()
    return np.vstack([lo, hi])


def plot_lookahead(table: pd.DataFrame):
    """Accuracy vs lookahead K, naive MTP vs MRP (ours solid with CI; the paper's dashed)."""
    set_theme()
    benches = list(dict.fromkeys(table["benchmark"]))
    fig, axes = plt.subplots(1, len(benches), figsize=(4.3 * len(benches), 3.4), squeeze=False, sharey=True)
    names = {"naive_mtp": "naive MTP", "mrp": "MRP"}
    colors = dict(zip(names, _colors(2), strict=True))
    for ax, b in zip(axes[0], benches, strict=True):
        g = table[table["benchmark"] == b]
        for method, label in names.items():
            h = g[g["method"] == method].sort_values("lookahead_k")
            if h.empty:
                continue
            ax.errorbar(h["lookahead_k"], h["accuracy"], yerr=_yerr(h, "accuracy"), marker="o", capsize=3,
                        color=colors[method], label=f"{label} (ours)")  # fmt: skip
            if "paper_accuracy" in h and h["paper_accuracy"].notna().any():
                pm = h["paper_model"].iloc[0] if "paper_model" in h else "paper"
                ax.plot(h["lookahead_k"], h["paper_accuracy"], ls="--", marker="x", color=colors[method],
                        alpha=0.7, label=f"{label} ({pm}, paper)")  # fmt: skip
        ax.set_title(b)
        ax.set_xlabel(LABELS["lookahead_k"])
        ax.set_ylabel(LABELS["accuracy"])
        ax.xaxis.get_major_locator().set_params(integer=True)
    axes[0][-1].legend(frameon=False, fontsize=8)
    fig.tight_layout()
    return fig


def plot_speculative(runs: pd.DataFrame, accept: pd.DataFrame | None = None):
    """Speculative mode: tokens per forward per prompt (static vs speculative K) and accepted-draft lengths."""
    set_theme()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    df = runs.copy()
    if "denoise_nfe" in df and "tokens" in df:
        df = df[df["mode"].isin(["static", "speculative"])].copy()
        df["setting"] = [
            "static" if m == "static" else f"speculative K={int(k)}" for m, k in zip(df["mode"], df["k"], strict=True)
        ]
        df["tpf"] = df["tokens"] / df["denoise_nfe"].clip(lower=1)
        sns.boxplot(data=df, x="setting", y="tpf", hue="benchmark", ax=axes[0])
        axes[0].set_ylabel("tokens per backbone forward")
        axes[0].set_xlabel("")
        axes[0].legend(frameon=False, fontsize=8)
    axes[0].set_title("TPF per prompt")
    if accept is not None and len(accept):
        hue = "k" if "k" in accept else None
        sns.histplot(data=accept, x="accept_length", hue=hue, discrete=True, stat="probability",
                     common_norm=False, multiple="dodge", palette=PALETTE, ax=axes[1], shrink=0.8)  # fmt: skip
        axes[1].set_xlabel("drafts accepted per round")
    else:
        axes[1].text(0.5, 0.5, "no acceptance data", ha="center", va="center", transform=axes[1].transAxes)
    axes[1].set_title("acceptance length")
    fig.tight_layout()
    return fig


def plot_speedup(*tables: pd.DataFrame, labels: tuple[str, ...] | None = None):
    """Speedup over static per benchmark (ours with CI as bars, the paper's as markers).

    Each table is a speculative_table or direct_table; ``labels`` names them (default: speculative, direct).
    """
    set_theme()
    parts = []
    labels = labels or ("speculative", "direct")
    for t, lab in zip(tables, labels, strict=False):
        t = t.copy()
        if "setting" in t:
            t = t[t["setting"] != "baseline"]
            t["series"] = [f"{lab} {s.replace('mrp_', '')}" for s in t["setting"]]
        else:
            t["series"] = [f"{lab} K={int(k)}" if not _isnan(k) else lab for k in t.get("k", [np.nan] * len(t))]
        parts.append(t)
    df = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    fig, ax = plt.subplots(figsize=(max(5, 1.6 * df["benchmark"].nunique() * max(df["series"].nunique(), 1)), 3.6))
    series = list(dict.fromkeys(df["series"]))
    benches = list(dict.fromkeys(df["benchmark"]))
    width = 0.8 / max(len(series), 1)
    for i, (s, c) in enumerate(zip(series, _colors(len(series)), strict=False)):
        g = df[df["series"] == s].set_index("benchmark").reindex(benches)
        x = np.arange(len(benches)) + (i - (len(series) - 1) / 2) * width
        ax.bar(x, g["throughput_speedup"], width, color=c, label=s, yerr=_yerr(g, "throughput_speedup"), capsize=3)
        if "paper_throughput_speedup" in g:
            ax.scatter(x, g["paper_throughput_speedup"], marker="D", color="black", zorder=3, s=18,
                       label="paper" if i == 0 else None)  # fmt: skip
    ax.axhline(1.0, color="0.4", lw=1, ls=":")
    ax.set_xticks(np.arange(len(benches)), benches)
    ax.set_ylabel(LABELS["throughput_speedup"])
    basis = df["speedup_basis"].dropna().unique() if "speedup_basis" in df else []
    ax.set_title("speedup per benchmark" + (f" ({', '.join(basis)})" if len(basis) else ""))
    ax.legend(frameon=False, fontsize=8, ncol=2)
    fig.tight_layout()
    return fig


def plot_training_curve(curve: pd.DataFrame, x: str = "step"):
    """MRP training curve: every numeric column against `x` (train / held-out KL; the uncorrected baseline dashed).

    Long form (columns split, value) is accepted too.
    """
    set_theme()
    if {"split", "value"} <= set(curve.columns):
        curve = curve.pivot_table(index=x, columns="split", values="value").reset_index()
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
