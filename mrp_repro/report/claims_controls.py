"""The no-MRP control beside every MRP verdict (issues 27, 35): MRP minus (or over) its control, paired over prompts.

    from mrp_repro.report import claims_controls as cc
    cc.speculative(tables, ctx, "synth-math", "ours", 3)   # Control: speculative(3, mrp) over (3, naive)
    cc.frontier(tables, ctx, bench, cc.direct_steps((1, 2)))  # direct(1), direct(2) vs the dynamic frontier
    cc.gate(outcome, control, ctx, other)              # an MRP verdict holds only beside a control of record MRP beats
    cc.mode_sentences(report)                          # per mode, one sentence: does MRP itself help here?

The control of record of each mode, declared (each claim's `declared` text in report.claims names it); a holding
verdict is gated by it:

- speculative: speculative(K, naive) on the same prompts of the same grid (drafts from the backbone's own logits, no
  head). Statistic: the ratio of *weighted TPF* (weighted_tpf) (tokens / (denoising forwards + head_cost × head
  calls), head_cost the run's measured cost model at the grid's batch size, measure.cost; "uncharged" when the run
  has none) of MRP over the control, paired bootstrap CI over prompts; null 1. The oracle drafter's TPF (the
  backbone's own future picks) is printed as the ceiling, the wall-clock ratio beside it.
- direct mode and remasking (issue 35): the **dynamic-τ frontier** (report.pareto: static(1) and dynamic(τ) at
  decoding.thresholds and the controls grid's dense decoding.frontier_thresholds, Pareto points joined) at the MRP
  setting's TPF and at its weighted TPF (head calls charged at head_cost: plain dynamic decoding pays for no head).
  Statistic: the margin accuracy − frontier(speed) per MRP setting the claim reads (direct(1), direct(2) for
  direct-tradeoff; direct(K), K >= 2, for mrp-graceful; remask(τ, tau) at the claim's τ) and axis, paired bootstrap
  CI over prompts (the frontier recomputed per replicate); null 0; holds when every margin's CI is above 0. A
  comparison on a frontier segment wider than decoding.frontier_max_gap points (10), or faster than every dynamic
  setting, or without a cost model for the weighted axis, is not measured: its reason says which, and where to add τ.

The other no-MRP controls, beside the control of record in `other_control` (beating them alone never makes "MRP
helps"; failing one, a verdict that beats the frontier still reads not shown):
- direct mode, "vs MTP without a head": naive_mtp(K) (= direct(K) with a zero head: C = 0 picks from A alone) and
  direct(K, untrained) (the same head shape, structured init, never trained: decoding.controls), at the paper's steps
  K = 1, 2; mrp-graceful: naive_mtp(K) at every K >= 2. Statistic: the paired accuracy difference MRP − control; null 0.
- remasking, "vs a head-free veto of as many": the random veto and the lowest-confidence veto at the same τ
  (decoding.controls: matched to remask(τ, tau)'s revocations per state and in total, at the same head cost).
  Statistic: the paired accuracy difference remask(τ, tau) − veto(τ); null 0.

gate(): where the run decoded the controls (ctx.controls: controls_runs is present), a verdict that would hold (or
hold in direction) reads **not shown** unless its control of record's verdict holds and no measured other control
beats or ties MRP: the effect is then not shown to be MRP's. Runs without controls keep their verdict, the control
column "not measured".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from mrp_repro.measure import stats
from mrp_repro.measure.cost import weighted_denoise_forwards  # re-exported: the claims' charge
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
           "combine", "frontier", "frontier_base", "direct_steps", "remask_at", "FRONTIER_AXES", "mode_sentences",
           "MODE_CLAIMS", "UNTRAINED_SETTING", "RANDOM_VETO_SETTING", "CONFIDENCE_VETO_SETTING",
           "VETO_SETTINGS"]  # fmt: skip

#: the settings of controls_runs (decoding.controls' policy names)
UNTRAINED_SETTING = "direct({k},untrained)"
RANDOM_VETO_SETTING = "random_veto({tau:g},tau,total)"
CONFIDENCE_VETO_SETTING = "confidence_veto({tau:g},tau,total)"
#: the head-free vetoes: (name in the text, setting, the setting of a run before issue 35: matched per state only)
VETO_SETTINGS = (("random_veto", RANDOM_VETO_SETTING, "random_veto({tau:g},tau)"),
                 ("confidence_veto", CONFIDENCE_VETO_SETTING, None))  # fmt: skip
#: the speed axes of the frontier control: TPF, and TPF with head calls charged at their measured cost
FRONTIER_AXES = ("tpf", "weighted_tpf")


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
    x, lo, hi = stats.ratio_ci(m["tokens"], weighted_denoise_forwards(m, cost),
                               n["tokens"], weighted_denoise_forwards(n, cost), ctx.n_boot, ctx.ci)  # fmt: skip
    w = stats.ratio_ci(m["tokens"], m["wall_s"], n["tokens"], n["wall_s"], ctx.n_boot, ctx.ci)
    tpf = lambda r: r["tokens"].sum() / max(r["denoise_forwards"].sum(), 1)  # noqa: E731
    ceiling = f"; oracle ceiling TPF {tpf(o):.2f}" if len(o) else ""
    text = (f"vs speculative({K},naive) (no head): TPF {tpf(m):.2f} vs {tpf(n):.2f}{ceiling}; weighted_tpf ratio "
            f"{fmt_ci(x, lo, hi, 2)}× ({charge}, batch {bs}); wall-clock ratio {fmt_ci(*w, 2)}×")  # fmt: skip
    v = direction(lo, hi, 1.0)
    why = {HOLDS: "MRP's drafts beat the no-head drafter's at their charged cost",
           NOT: "the no-head drafter beats MRP's drafts at their charged cost",
           NOT_SHOWN: "the weighted_tpf ratio's CI holds 1: MRP's drafts are not shown to beat the no-head "
                      "drafter's"}[v]  # fmt: skip
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
    why = {HOLDS: "MRP beats MTP without a head (the zero head: naive MTP; the untrained head) at every step",
           NOT: "MTP without a head beats MRP at some step", NA: "no control rows",
           NOT_SHOWN: "some MRP − control CI holds 0"}[v]  # fmt: skip
    return Control("vs MTP without a head, accuracy, pts: " + "; ".join(parts), v, why)


def lookahead(pairs: dict) -> Control:
    """mrp-graceful's control: pairs K -> paired MRP − naive_mtp(K) (report.claims._lookahead_pairs), K >= 2."""
    if not pairs:
        return _na("no naive_mtp(K) beside direct(K)")
    vs = [direction(d["diff_lo"], d["diff_hi"], 0.0) for d in pairs.values()]
    text = "vs MTP without a head: MRP − naive_mtp(K), pts: " + ", ".join(
        f"K={k} {fmt_ci(d['diff'], d['diff_lo'], d['diff_hi'], 1, True)}" for k, d in sorted(pairs.items())
    )  # fmt: skip
    v = combine(vs)
    return Control(text, v, {HOLDS: "MRP beats naive MTP at every K >= 2", NOT: "naive MTP beats MRP at some K",
                             NOT_SHOWN: "at some K the CI holds 0"}[v])  # fmt: skip


def remask(tables, ctx, bench: str, tau: float) -> Control:
    """remask(τ, tau) against the head-free vetoes of as many revocations at the same τ (controls_runs): paired
    accuracy remask − veto per veto; holds when it beats every veto decoded."""
    rr, ctrl = tables.get("remasking_runs"), tables.get("controls_runs")
    if ctrl is None or ctrl.empty:
        return _na("no controls_runs (the head-free vetoes)")
    if rr is None or rr.empty:
        return _na("no remasking_runs")
    m = _one(rr[(rr["benchmark"] == bench) & (rr["algorithm"] == "ours")], mode="remask", rule="tau", threshold=tau)
    cb = ctrl[ctrl["benchmark"] == bench]
    parts, vs, revoked = [], [], [f"remask {m['revoked'].mean():.2f}" if len(m) else ""]
    for name, setting, older in VETO_SETTINGS:
        c, note = _one(cb, setting=setting.format(tau=tau)), ""
        if c.empty and older is not None:  # a run before issue 35: matched per state only
            c, note = _one(cb, setting=older.format(tau=tau)), " (matched per state only)"
        if m.empty or c.empty:
            continue
        d = _diff(m, c, "correct", ctx)
        a, b = _pair(m, c)
        parts.append(f"remask({tau:g},tau) − {name}({tau:g}){note} "
                     f"{fmt_ci(d['diff'], d['diff_lo'], d['diff_hi'], 1, True)}")  # fmt: skip
        revoked.append(f"{name} {b['revoked'].mean():.2f}")
        vs.append(direction(d["diff_lo"], d["diff_hi"], 0.0))
    if not vs:
        return _na(f"no head-free veto at τ = {tau:g} beside remask({tau:g}, tau)")
    text = f"vs a head-free veto of as many: {'; '.join(parts)} pts (revoked per prompt: {', '.join(revoked)})"
    v = combine(vs)
    why = {HOLDS: "the head's choice of which reveals to revoke beats every head-free choice of as many",
           NOT: "a head-free veto of as many reveals beats the head's choice",
           NOT_SHOWN: "a CI holds 0: the head's choice is not shown to beat a head-free veto of as many"}[v]
    return Control(text, v, why)


# ------------------------------------------------------------ the control of record: the dynamic frontier


def frontier_base(tables) -> pd.DataFrame | None:
    """Our family's modes grid (modes_runs) with the controls grid's dense frontier rows joined
    (report.pareto.frontier_runs), or None when the run has no modes grid."""
    from mrp_repro.report import pareto

    runs = tables.get("modes_runs")
    if runs is None or runs.empty:
        return None
    ours = runs[runs["algorithm"] == "ours"]
    ctrl = tables.get("controls_runs")
    return pareto.frontier_runs(ours, None if ctrl is None else ctrl[ctrl["algorithm"] == "ours"])


def direct_steps(steps):
    """frontier()'s pick: direct(K) for K in `steps`."""
    ks = [float(k) for k in steps]
    return lambda g: (g["mode"] == "direct") & g["K"].astype(float).isin(ks)


def remask_at(tau: float, rule: str = "tau"):
    """frontier()'s pick: remask(τ, rule) of our family."""
    return lambda g: (g["mode"] == "remask") & (g["rule"] == rule) & np.isclose(g["threshold"].astype(float), tau)


def _frontier_verdict(r, axis: str, cost: float) -> tuple[str, str]:
    """(verdict, why not measured) of one matched-speed row (report.pareto's at_equal_speed)."""
    from mrp_repro.report import pareto

    a = r["at_equal_speed"]
    if a == "beyond":
        return NA, f"{r['setting']} is faster ({axis} {r['speed']:.2f}) than every dynamic τ: decode a lower τ"
    if a == pareto.GAP:
        return NA, (f"the frontier at {axis} {r['speed']:.2f} interpolates {r['frontier_segment']} across "
                    f"{r['frontier_gap']:.1f} points (more than the declared maximum): decode more τ there "
                    "(decoding.frontier_thresholds)")  # fmt: skip
    return {"beats": HOLDS, "worse": NOT, "tie": NOT_SHOWN}[a], ""


def frontier(tables, ctx, bench: str, pick, what: str = "MRP") -> Control:
    """The control of record of direct mode and remasking (the module docstring): the settings `pick` selects on
    `bench` against the dynamic frontier at equal TPF and equal weighted TPF."""
    from mrp_repro.report import pareto

    runs = frontier_base(tables)
    if runs is None:
        return _na("no modes_runs (static and dynamic rows: the dynamic frontier)")
    g = runs[runs["benchmark"] == bench]
    sel = pick(g)
    if not sel.any():
        return _na(f"no {what} rows in modes_runs")
    if not (g["mode"] == "dynamic").any() or not (g["mode"] == "static").any():
        return _na("no static(1) and dynamic(τ) rows: no frontier")
    sub = g[sel | g["mode"].isin(pareto.FRONTIER)]
    cost = head_cost(tables, int(sub["batch_size"].iloc[0]))
    t = pareto.matched_speed_table(sub, ctx.n_boot, ctx.ci, head_cost=cost, max_gap=ctx.frontier_max_gap)
    n_tau = int((t["mode"] == "dynamic").sum() / max(t["axis"].nunique(), 1))
    t = t[t["mode"].isin(pareto.COMPARED)]
    parts, vs, why_na = [], [], []
    for setting, rows in t.groupby("setting", sort=False):
        bits = []
        for axis in FRONTIER_AXES:
            r = rows[rows["axis"] == axis]
            if r.empty:  # no cost model: head calls cannot be charged
                vs.append(NA)
                why_na.append("no cost model: head calls cannot be charged (weighted_tpf)")
                continue
            r = r.iloc[0]
            v, why = _frontier_verdict(r, axis, cost)
            vs.append(v)
            if why:
                why_na.append(why)
            m = fmt_ci(r["margin"], r["margin_lo"], r["margin_hi"], 1, True)  # "–" beyond the frontier
            bits.append(f"{axis} {r['speed']:.2f}: {m} vs {r['dynamic_accuracy']:.1f}%"
                        + (f" ({r['at_equal_speed']})" if v == NA else ""))  # fmt: skip
        parts.append(f"{setting}: " + ", ".join(bits))
    charge = "no cost model" if math.isnan(cost) else f"head calls at {cost:.2f} forwards"
    text = (f"vs the dynamic frontier (static and {n_tau} dynamic τ; {charge}), margin pts: " + "; ".join(parts))
    v = combine(vs)
    why = {HOLDS: f"{what} beats dynamic decoding at equal TPF and equal weighted TPF",
           NOT: f"dynamic decoding beats {what} at equal speed (a margin CI below 0)",
           NOT_SHOWN: f"a margin CI holds 0: {what} is not shown to beat dynamic decoding at equal speed",
           NA: "; ".join(dict.fromkeys(why_na)) or "not measured"}[v]  # fmt: skip
    return Control(text, v, why)


# -------------------------------------------------------------- gating (the per-mode sentence: verdicts.mode_sentences)


def gate(o: Outcome, c: Control, ctx, other: Control | None = None) -> Outcome:
    """o with its control of record and the other controls beside it. Where the run has controls, a holding verdict
    becomes NOT_SHOWN unless MRP beats its control of record, and also where a measured other control is not beaten
    (a head no better than MTP without a head, or than a head-free veto, is not shown to help whatever the frontier
    says); beating the other controls alone never makes a verdict hold."""
    o = replace(o, control=c.text, control_verdict=c.verdict)
    if other is not None:
        o = replace(o, other_control=other.text, other_control_verdict=other.verdict)
    if ctx.controls and o.verdict in (HOLDS, DIRECTION, SHORT):
        if c.verdict != HOLDS:
            o = replace(o, verdict=NOT_SHOWN, reason=f"{o.reason}; but not shown to be MRP's: {c.reason or c.text}")
        elif other is not None and other.verdict not in (HOLDS, NA):
            o = replace(o, verdict=NOT_SHOWN, reason=f"{o.reason}; but not shown to be MRP's: it beats the dynamic "
                        f"frontier, not its other control: {other.reason or other.text}")  # fmt: skip
    return o
