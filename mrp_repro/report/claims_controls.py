"""The no-MRP control beside every MRP verdict (issue 27): MRP minus (or over) its control, paired over prompts.

    from mrp_repro.report import claims_controls as cc
    cc.speculative(tables, ctx, "synth-math", "ours", 3)   # Control: speculative(3, mrp) over (3, naive)
    cc.gate(outcome, control, ctx)                     # an MRP verdict holds only beside a control MRP beats
    cc.mode_sentences(report)                          # per mode, one sentence: does MRP itself help here?

The controls, declared (each claim's `declared` text in report.claims names the one it uses):

- speculative: speculative(K, naive) on the same prompts of the same grid (drafts from the backbone's own logits, no
  head). Statistic: the ratio of *weighted TPF* (weighted_tpf) (tokens / (denoising forwards + head_cost × head calls), head_cost the
  run's measured cost model at the grid's batch size, measure.cost; "uncharged" when the run has none) of MRP over
  the control, paired bootstrap CI over prompts; null 1. The oracle drafter's TPF (the backbone's own future picks)
  is printed as the ceiling, the wall-clock ratio beside it.
- direct: naive_mtp(K) (= direct(K) with a zero head: C = 0 picks from A alone) and direct(K, untrained) (the same
  head shape, structured init, never trained: decoding.controls), at the paper's steps K = 1, 2. Statistic: the
  paired accuracy difference MRP − control per step and control; null 0; holds when every CI is above 0.
- lookahead (mrp-graceful): naive_mtp(K) at every K >= 2, MRP − naive paired accuracy difference; null 0.
- remasking: the random veto at the same τ (decoding.controls.RandomVeto: on every state as many fresh reveals
  revoked as remask(τ, tau) would, chosen at random, at the same head cost). Statistic: the paired accuracy
  difference remask(τ, tau) − random_veto(τ); null 0. Equal speed with head calls charged is remask-equal-speed's
  `weighted_tpf` axis (report.claims_remask).

gate(): where the run decoded the controls (ctx.controls: controls_runs is present), a verdict that would hold (or
hold in direction) reads **not shown** unless its control verdict holds: the effect is then not shown to be MRP's.
Runs without controls (the seed runs of report.variance) keep their verdict, the control column "not measured".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from mrp_repro.measure import stats
from mrp_repro.report.verdicts import (
    DIRECTION,
    HOLDS,
    MODE_CLAIMS,
    NA,
    NOT,
    NOT_SHOWN,
    SHORT,
    Outcome,
    direction,
    fmt_ci,
    mode_sentences,
)

__all__ = ["Control", "head_cost", "weighted_denoise_forwards", "speculative", "direct", "lookahead", "remask", "gate",
           "combine", "mode_sentences", "MODE_CLAIMS", "UNTRAINED_SETTING", "RANDOM_VETO_SETTING"]  # fmt: skip

#: the settings of controls_runs (decoding.controls' policy names)
UNTRAINED_SETTING = "direct({k},untrained)"
RANDOM_VETO_SETTING = "random_veto({tau:g},tau)"


@dataclass(frozen=True)
class Control:
    text: str  # what the control is, and MRP minus / over it with its CI
    verdict: str  # HOLDS: MRP beats the control; NOT: the control beats MRP; NOT_SHOWN; NA: not measured
    reason: str = ""


def _na(why: str) -> Control:
    return Control(f"not measured: {why}", NA, why)


def combine(verdicts) -> str:
    vs = list(verdicts)
    if not vs or NA in vs:
        return NA
    return NOT if NOT in vs else (NOT_SHOWN if NOT_SHOWN in vs else HOLDS)


def head_cost(tables, batch_size: int) -> float:
    """The run's measured head_cost at `batch_size` (the cost_model result: measure.cost.run_cost_model), else NaN."""
    t = tables.get("cost_model")
    if t is None or t.empty or "head_cost" not in t.columns:
        return math.nan
    hit = t[t["batch_size"] == batch_size]
    return float(hit["head_cost"].iloc[0]) if len(hit) else math.nan


def weighted_denoise_forwards(runs: pd.DataFrame, cost: float) -> pd.Series:
    """Denoising forwards plus head calls charged at `cost` forwards each (0 where the run has no cost model)."""
    c = 0.0 if math.isnan(cost) else cost
    return runs["denoise_forwards"].astype(float) + c * runs["mrp_forwards"].astype(float)


def _one(runs: pd.DataFrame, **keys) -> pd.DataFrame:
    g = runs
    for k, v in keys.items():
        g = g[np.isclose(g[k].astype(float), v)] if isinstance(v, float) else g[g[k] == v]
    return g.set_index("problem_id")


def _pair(a: pd.DataFrame, b: pd.DataFrame):
    ids = a.index.intersection(b.index)
    return a.loc[ids], b.loc[ids]


def _diff(a, b, col, ctx) -> dict:
    a, b = _pair(a, b)
    return stats.paired_diff(a[col].astype(float), b[col].astype(float), ctx.n_boot, ctx.ci)


# ----------------------------------------------------------------------------- per mode


def speculative(tables, ctx, bench: str, algorithm: str, K: int) -> Control:
    runs = tables.get("speculative_runs")
    if runs is None or runs.empty:
        return _na("no speculative_runs")
    if algorithm != "ours":
        return _na(f"no no-head drafter in the {algorithm} family (speculative(K, naive) is ours)")
    g = runs[(runs["benchmark"] == bench) & (runs["algorithm"] == "ours") & (runs["mode"] == "speculative")]
    m, n, o = (_one(g, K=float(K), drafter=d) for d in ("mrp", "naive", "oracle"))
    if m.empty or n.empty:
        return _na(f"no speculative({K}, naive) rows beside speculative({K}, mrp)")
    m, n = _pair(m, n)
    bs = int(m["batch_size"].iloc[0])
    cost = head_cost(tables, bs)
    charge = "uncharged: no cost model" if math.isnan(cost) else f"head calls at {cost:.2f} forwards"
    x, lo, hi = stats.ratio_ci(m["tokens"], weighted_denoise_forwards(m, cost), n["tokens"], weighted_denoise_forwards(n, cost),
                               ctx.n_boot, ctx.ci)  # fmt: skip
    w = stats.ratio_ci(m["tokens"], m["wall_s"], n["tokens"], n["wall_s"], ctx.n_boot, ctx.ci)
    tpf = lambda r: r["tokens"].sum() / max(r["denoise_forwards"].sum(), 1)  # noqa: E731
    ceiling = f"; oracle ceiling TPF {tpf(o):.2f}" if len(o) else ""
    text = (f"vs speculative({K},naive) (no head): TPF {tpf(m):.2f} vs {tpf(n):.2f}{ceiling}; weighted_tpf ratio "
            f"{fmt_ci(x, lo, hi, 2)}× ({charge}, batch {bs}); wall-clock ratio {fmt_ci(*w, 2)}×")  # fmt: skip
    v = direction(lo, hi, 1.0)
    why = {HOLDS: "MRP's drafts beat the no-head drafter's at their charged cost",
           NOT: "the no-head drafter beats MRP's drafts at their charged cost",
           NOT_SHOWN: "the weighted_tpf ratio's CI holds 1: MRP's drafts are not shown to beat the no-head drafter's"}[v]
    return Control(text, v, why)


def direct(tables, ctx, bench: str, steps) -> Control:
    look, ctrl = tables.get("lookahead_runs"), tables.get("controls_runs")
    if look is None or look.empty:
        return _na("no lookahead_runs")
    look = look[look["benchmark"] == bench]
    parts, vs = [], []
    for k in steps:
        mrp = _one(look, mode="direct", K=float(k))
        against = [("naive_mtp", _one(look, mode="naive", K=float(k)))]
        if ctrl is not None and not ctrl.empty:
            against.append(("untrained", _one(ctrl[ctrl["benchmark"] == bench], setting=UNTRAINED_SETTING.format(k=k))))
        for name, c in against:
            if mrp.empty or c.empty:
                parts.append(f"K={k} vs {name}: –")
                vs.append(NA)
                continue
            d = _diff(mrp, c, "correct", ctx)
            parts.append(f"K={k} − {name} {fmt_ci(d['diff'], d['diff_lo'], d['diff_hi'], 1, True)}")
            vs.append(direction(d["diff_lo"], d["diff_hi"], 0.0))
    if ctrl is None or ctrl.empty:
        parts.append("untrained head: not decoded")
    v = combine(v for v in vs if v != NA) if any(v != NA for v in vs) else NA
    why = {HOLDS: "MRP beats the zero head (naive MTP) and the untrained head at every step",
           NOT: "a no-MRP control beats MRP at some step", NA: "no control rows",
           NOT_SHOWN: "some MRP − control CI holds 0"}[v]  # fmt: skip
    return Control("accuracy, pts: " + "; ".join(parts), v, why)


def lookahead(pairs: dict) -> Control:
    """mrp-graceful's control: pairs K -> paired MRP − naive_mtp(K) (report.claims._lookahead_pairs), K >= 2."""
    if not pairs:
        return _na("no naive_mtp(K) beside direct(K)")
    vs = [direction(d["diff_lo"], d["diff_hi"], 0.0) for d in pairs.values()]
    text = "MRP − naive_mtp(K), pts: " + ", ".join(f"K={k} {fmt_ci(d['diff'], d['diff_lo'], d['diff_hi'], 1, True)}"
                                                  for k, d in sorted(pairs.items()))  # fmt: skip
    v = combine(vs)
    return Control(text, v, {HOLDS: "MRP beats naive MTP at every K >= 2", NOT: "naive MTP beats MRP at some K",
                             NOT_SHOWN: "at some K the CI holds 0"}[v])  # fmt: skip


def remask(tables, ctx, bench: str, tau: float) -> Control:
    rr, ctrl = tables.get("remasking_runs"), tables.get("controls_runs")
    if ctrl is None or ctrl.empty:
        return _na("no controls_runs (the random veto)")
    if rr is None or rr.empty:
        return _na("no remasking_runs")
    m = _one(rr[(rr["benchmark"] == bench) & (rr["algorithm"] == "ours")], mode="remask", rule="tau", threshold=tau)
    c = _one(ctrl[ctrl["benchmark"] == bench], setting=RANDOM_VETO_SETTING.format(tau=tau))
    if m.empty or c.empty:
        return _na(f"no random_veto({tau:g}) beside remask({tau:g}, tau)")
    d = _diff(m, c, "correct", ctx)
    m, c = _pair(m, c)
    text = (f"remask({tau:g},tau) − random_veto({tau:g}) {fmt_ci(d['diff'], d['diff_lo'], d['diff_hi'], 1, True)} "
            f"pts (revoked per prompt {m['revoked'].mean():.2f} vs {c['revoked'].mean():.2f})")  # fmt: skip
    v = direction(d["diff_lo"], d["diff_hi"], 0.0)
    why = {HOLDS: "the head's choice of which reveals to revoke beats a random choice of as many",
           NOT: "a random veto of as many reveals beats the head's choice",
           NOT_SHOWN: "the CI holds 0: the head's choice is not shown to beat a random veto of as many"}[v]
    return Control(text, v, why)


# ---------------------------------------------------------------- gating (the per-mode sentence: verdicts.mode_sentences)


def gate(o: Outcome, c: Control, ctx) -> Outcome:
    """o with its control; a holding verdict becomes NOT_SHOWN where the run has controls and MRP does not beat it."""
    o = replace(o, control=c.text, control_verdict=c.verdict)
    if ctx.controls and o.verdict in (HOLDS, DIRECTION, SHORT) and c.verdict != HOLDS:
        o = replace(o, verdict=NOT_SHOWN, reason=f"{o.reason}; but not shown to be MRP's: {c.reason or c.text}")
    return o
