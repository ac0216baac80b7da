"""The remasking figures: accuracy and TPF vs τ per rule and family beside the no-MRP controls; one block's
trajectory.

    from mrp_repro.report import plots_remask
    fig = plots_remask.plot_remasking(paper.remasking_table(runs, rule=None, algorithm=None), runs, controls=controls)
    fig = plots_remask.plot_trajectory(trace, decode_token=..., setting="remask(0.5,sequential)")

The look and the checks every figure shares: report.plots_base.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from mrp_repro.report.plots_base import (
    LABELS,
    PALETTE,
    _colors,
    _need,
    _paper_benchmark,
    _unique,
    _yerr,
    nest_coincident_markers,
    set_theme,
)

__all__ = ["plot_remasking", "remasking_controls", "plot_trajectory", "dodge_offsets"]


def dodge_offsets(keys: list, x) -> dict:
    """key -> its x offset: the keys spread evenly, in order, over 0.6 of the smallest gap between the distinct x
    values (so series at one τ sit side by side, never reaching the next τ's group). One key: offset 0."""
    xs = np.unique(np.asarray(x, float)[np.isfinite(np.asarray(x, float))])
    gap = float(np.diff(xs).min()) if len(xs) > 1 else 0.1
    n = len(keys)
    step = 0.6 * gap / max(n - 1, 1) if n > 1 else 0.0
    return {k: (i - (n - 1) / 2) * step for i, k in enumerate(keys)}


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


def _tpf_equals_dynamic(tpf: pd.Series | None, b: str, algo: str, rule: str, delta) -> bool:
    """Whether the series' TPF (_tpf_by) equals its family's dynamic TPF at every τ it ran on benchmark `b`; True
    without runs (the figure then draws accuracy alone, where the series equals dynamic)."""
    if tpf is None:
        return True
    if b not in tpf.index.get_level_values(0):
        return False
    t = tpf.loc[b]
    key, base = (algo, rule, -1.0 if delta is None else delta), (algo, "", -1.0)
    if key not in t.index.droplevel(-1) or base not in t.index.droplevel(-1):
        return False
    h, d0 = t.loc[key], t.loc[base]
    return bool(len(h)) and np.isclose(h.to_numpy(float), d0.reindex(h.index).to_numpy(float), rtol=0,
                                       atol=1e-9).all()  # fmt: skip


def _equals_tag(table: pd.DataFrame, tpf: pd.Series | None, k: tuple, on: list[str]) -> str:
    """The legend tag of series `k` equal to dynamic in accuracy on benchmarks `on`: "= dynamic" where its TPF
    equals dynamic's too (the same decode, as far as the figure shows), "accuracy = dynamic" where only its accuracy
    does (its TPF panel differs); "on <benchmarks>" unless it holds wherever the series is drawn."""
    drawn_on = list(dict.fromkeys(table.loc[_in_series(table, *k), "benchmark"]))
    parts = []
    for what, bs in (("= dynamic", [b for b in on if _tpf_equals_dynamic(tpf, b, *k)]),
                     ("accuracy = dynamic", [b for b in on if not _tpf_equals_dynamic(tpf, b, *k)])):  # fmt: skip
        if bs:
            parts.append(what if len(bs) == len(drawn_on) else f"{what} on {', '.join(bs)}")
    return f" ({'; '.join(parts)})" if parts else ""


def _in_series(t: pd.DataFrame, algo: str, rule: str, delta) -> pd.Series:
    """Rows of `t` in the series (algo, rule, delta)."""
    same_d = t["delta"].isna() if delta is None else np.isclose(t["delta"], delta)
    return (t["algorithm"] == algo) & (t["rule"] == rule) & same_d


def _paper_remasking(paper_model: str, g: pd.DataFrame) -> pd.DataFrame:
    """The paper's remasking rows of `paper_model` on the paper benchmark of our rows `g`, by τ."""
    from mrp_repro.report.paper import load

    t = load("remasking")
    t = t[(t["model"] == paper_model) & (t["benchmark"] == _paper_benchmark(g))]
    return t.dropna(subset=["baseline_accuracy", "mrp_remask_accuracy"]).sort_values("threshold")


def remasking_controls(runs: pd.DataFrame, controls: pd.DataFrame, n_boot: int = 1000,
                       ci: float = 0.95) -> pd.DataFrame:  # fmt: skip
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
    """Accuracy vs τ per benchmark: dynamic decoding without remasking (black, thick, under the rest) and one MRP
    remasking series per rule (its own colour, marker and line style, the same in every panel and in the legend). A
    table of both families (remasking_table(algorithm=None)) adds the upstream family's own dynamic baseline (grey)
    and one upstream remasking series per δ, each paired with its own baseline. With `runs` (the dynamic and remask
    runs the table was built from), a second row: the TPF each series reaches over its family's dynamic(τ) TPF at the
    same τ (dynamic = 1; our dynamic(τ)'s own TPF on the panel's top axis), so a gain bought with fewer tokens per
    forward shows as such. With `controls` (controls_runs) and `runs`, the no-MRP remask controls as series of their
    own (the random veto, the head-free lowest-confidence veto: remasking_controls, n_boot / ci their CIs), beside the
    MRP rules. The paper's two series for the run's paper_model (grey, dashed: baseline and MRP remasking, at the τ the
    paper ran) sit in a row of their own below, on their own y axis: on our accuracy axis a backbone near its ceiling
    was squeezed into a sliver above the paper's curves (chain-math: ours 97-100, the paper's down to 67).
    Every measured series is drawn a little off its τ (dodge_offsets: at most ±0.3 of the τ grid's smallest step,
    the same offset in both rows; the ticks are the τ it ran), so the error bars of rules that equal dynamic (τ = 0.9,
    where nothing is revoked) sit side by side instead of on one another. The TPF row is a ratio because of that
    offset: drawn as TPF, an offset along a steep TPF curve read as a TPF the series does not reach; a ratio to
    dynamic(τ) is flat where the two decode alike. Each accuracy panel has its own y axis (a
    benchmark near its ceiling is not squeezed into another's range); the TPF ratio row shares one (a 2% loss of
    speed on one benchmark looked as steep as a 34% loss on the other). The legend sits below the panels.

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
    paper_model = str(table["paper_model"].iloc[0])
    with_paper = any(len(_paper_remasking(paper_model, table[table["benchmark"] == b])) for b in benches)
    nrows = 1 + (tpf is not None) + with_paper
    # ~7.5 in a panel: the legend's three columns fit under two panels, and the dodged markers sit apart
    fig, axes = plt.subplots(nrows, len(benches), figsize=(7.5 * len(benches), 3.3 * nrows + 1.1), squeeze=False,
                             sharex=True)  # fmt: skip
    series = _remask_series(table)
    n_up = sum(a != "ours" for a, _, _ in series)  # upstream δ series: a dark-to-light ramp none of ours uses
    upstream_colors = iter(sns.color_palette("mako", n_up + 2)[1 : n_up + 1])
    style = {}
    for i, (algo, rule, d) in enumerate(series):
        style[(algo, rule, d)] = _rule_style(rule, i) if algo == "ours" else (next(upstream_colors), "P", "-")
    algos = list(dict.fromkeys(a for a, _, _ in series))
    dodge = dodge_offsets([("base", a, None) for a in algos] + series, table["threshold"])
    base_styles = {"ours": dict(color="black", marker="s", ms=10, mfc="white", mew=1.8, lw=3.5, zorder=3),
                   "upstream": _UPSTREAM_BASE}  # fmt: skip
    base_labels = {"ours": "dynamic, no remasking (ours)", "upstream": "dynamic, no remasking (upstream)"}
    # a series equal to the dynamic baseline everywhere (delta, often) says so in its label; on some benchmarks
    # only, it names them (drawn beside the baseline, off its τ, it stays visible)
    same = {k: _equals_dynamic(table, *k) for k in series}
    labels = {k: _series_label(*k) + _equals_tag(table, tpf, k, same[k]) for k in series}
    for j, b in enumerate(benches):
        g = table[table["benchmark"] == b]
        ax = axes[0][j]
        for algo in algos:
            base = g[g["algorithm"] == algo].drop_duplicates("threshold").sort_values("threshold")
            ax.errorbar(base["threshold"] + dodge["base", algo, None], base["baseline_accuracy"],
                        yerr=_yerr(base, "baseline_accuracy"),
                        capsize=3, label=base_labels[algo], **base_styles[algo])  # fmt: skip
        for algo, rule, d in series:
            h = g[_in_series(g, algo, rule, d)].sort_values("threshold")
            color, marker, ls = style[(algo, rule, d)]
            ax.errorbar(h["threshold"] + dodge[algo, rule, d], h["mrp_remask_accuracy"],
                        yerr=_yerr(h, "mrp_remask_accuracy"), capsize=2, color=color, marker=marker, ms=5, ls=ls,
                        lw=1.6, zorder=4, label=labels[(algo, rule, d)])  # fmt: skip
        # the paper's series from its own table, at every τ it ran (0.5-0.9, whether or not we ran that τ), in the
        # last row: the table's paper columns sit beside our rows only, and are blank beside our rules the paper did
        # not run
        p = _paper_remasking(paper_model, g)
        if with_paper:
            pax = axes[-1][j]
            pax.set_ylabel(f"{paper_model}, paper: {LABELS['accuracy']}")
            pax.set_title(f"the paper's {paper_model} on {g['paper_benchmark'].iloc[0]}" if "paper_benchmark" in g
                          else f"the paper's {paper_model}", fontsize=10)  # fmt: skip
        if with_paper and not len(p):
            pax.text(0.5, 0.5, f"the paper reports no remasking of {paper_model} here", transform=pax.transAxes,
                     ha="center", va="center", color="0.45")  # fmt: skip
        if len(p):
            pax.plot(p["threshold"], p["baseline_accuracy"], color="0.45", ls="--", marker="s", mfc="none",
                    label=f"dynamic, no remasking ({paper_model}, paper)")  # fmt: skip
            pax.plot(p["threshold"], p["mrp_remask_accuracy"], color="0.45", ls="--", marker="o",
                    label=f"MRP remask ({paper_model}, paper: its τ rule or the released δ veto)")  # fmt: skip
        ax.set_title(f"{b} (paper: {g['paper_benchmark'].iloc[0]})" if "paper_benchmark" in g else b)
        ax.set_ylabel(LABELS["accuracy"])
        if tpf is not None:
            ax = axes[1][j]
            if b not in tpf.index.get_level_values(0):
                raise ValueError(f"{what}: the runs hold no dynamic rows for {b}")
            t = tpf.loc[b]
            base_tpf = {}
            for algo in algos:
                key = (algo, "", -1.0)
                if key not in t.index.droplevel(-1):
                    raise ValueError(f"{what}: the runs hold no {algo} dynamic rows for {b}")
                base_tpf[algo] = d0 = t.loc[key].sort_index()
                x0 = d0.index + dodge["base", algo, None]
                ax.plot(x0, np.ones(len(d0)), label=f"_tpf {algo} dynamic", **base_styles[algo])
                if algo == "ours":  # the scale: our dynamic(τ)'s own TPF, on the panel's top axis at each τ
                    top = ax.secondary_xaxis("top")
                    top.set_xticks(list(d0.index), [f"{v:.3g}" for v in d0.to_numpy()], fontsize=7)
                    top.set_xlabel("dynamic(τ)'s own TPF (ours)", fontsize=8)
            for algo, rule, d in series:
                key = (algo, rule, -1.0 if d is None else d)
                if key in t.index.droplevel(-1):
                    h = t.loc[key].sort_index() / base_tpf[algo]  # on its own family's dynamic(τ)
                    color, marker, ls = style[(algo, rule, d)]
                    ax.plot(h.index + dodge[algo, rule, d], h.to_numpy(), color=color, marker=marker, ms=5, ls=ls,
                            lw=1.6, zorder=4, label=f"_tpf {algo} {rule} {d}")  # fmt: skip
            ax.set_ylabel("TPF ÷ its family's\ndynamic(τ) TPF")
        axes[-1][j].set_xlabel(f"{LABELS['threshold']} (each measured series drawn a little off its τ)")
        axes[-1][j].set_xticks(sorted(table["threshold"].unique()))
    if tpf is not None:  # the ratio row on one y axis: a 2% loss of speed does not look like a 34% one
        for ax in axes[1][1:]:
            ax.sharey(axes[1][0])
    handles, labels = axes[0][0].get_legend_handles_labels()
    if with_paper:  # the paper's series: from the panels that hold them, once each
        for pax in axes[-1]:
            for h, lab in zip(*pax.get_legend_handles_labels(), strict=True):
                if lab not in labels:
                    handles.append(h), labels.append(lab)
    order = sorted(range(len(labels)), key=lambda i: ("paper" in labels[i], i))  # measured here, then the paper
    ncol = 3
    fig.legend([handles[i] for i in order], [labels[i] for i in order], loc="lower center", ncol=ncol, frameon=False,
               fontsize=8)  # fmt: skip
    for ax in axes.flat:  # after the legend: its keys keep each series' own marker
        nest_coincident_markers(ax)
    # the legend's rows (~0.16 in each at 8 pt) kept clear of the x labels
    fig.tight_layout(rect=(0, min(0.5, (0.16 * math.ceil(len(labels) / ncol) + 0.1) / fig.get_size_inches()[1]), 1, 1))
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
