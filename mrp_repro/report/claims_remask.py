"""The remasking claims' checks and the equal-speed checks (report.claims declares them; this module computes them).

    from mrp_repro.report import claims_remask
    claims_remask.recovers(tables, ctx)      # [Outcome]: recovery share at the paper's lowest τ, per benchmark

The paper's words as the tests (issue 27): "recovers most" = recovery share (remask − dynamic) / (static − dynamic)
above 0.5; the largest gain over the paper's τ with a Bonferroni CI over those τ; equal-speed margins at the paper's
τ = 0.5 only (remask) or the better of the paper's two direct steps with a Bonferroni CI over both, on three axes:
TPF, TPF with head calls charged at their measured cost (weighted_tpf), wall clock. Every MRP verdict is gated by its
no-MRP control of record, the dense dynamic frontier at equal TPF and weighted TPF (report.claims_controls; issue 35),
the head-free vetoes beside it.

remask-own-rules (issue 35): the package's own rules (loo, sequential, logp-delta: PACKAGE_RULES) are a best-of over
rules × τ × benchmarks, so they carry a declared test of their own: the best (rule, τ) per benchmark and axis against
the dense frontier at equal TPF and equal weighted TPF, its CI Bonferroni-corrected over every rule, τ and benchmark
compared. Every frontier comparison reads its segment's width: one across more than decoding.frontier_max_gap points
is not compared (report.pareto.GAP).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from mrp_repro.measure import stats
from mrp_repro.measure.schema import require
from mrp_repro.report import claims_controls as cc
from mrp_repro.report import paper, pareto
from mrp_repro.report.verdicts import (
    DIRECTION,
    HOLDS,
    NA,
    NOT,
    NOT_SHOWN,
    SHORT,
    Outcome,
    direction,
    fmt_ci,
    missing,
    na,
    sized,
)

__all__ = ["REMASK_CLAIMS_FROM", "RECOVERS_MOST", "GAIN_TOLERANCE", "PACKAGE_RULES", "paper_taus", "recovers",
           "max_gain", "shrinks", "equal_speed", "own_rules", "bonferroni"]  # fmt: skip

#: the remasking rows the claims read: our family's paper-v2 rule (upstream's delta veto is tabulated beside it)
REMASK_CLAIMS_FROM = dict(algorithm="ours", rule="tau")
#: "recovers most of the accuracy lost": the recovery share's CI must lie above this
RECOVERS_MOST = 0.5
#: sized claims on comparable profiles: gains >= the paper's - GAIN_TOLERANCE points
GAIN_TOLERANCE = 5.0
_FAMILY = f"algorithm {REMASK_CLAIMS_FROM['algorithm']}, rule {REMASK_CLAIMS_FROM['rule']}"


def bonferroni(ci: float, m: int) -> float:
    """The per-setting CI level of a best-of-m claim at family level `ci`."""
    return 1 - (1 - ci) / max(m, 1)


def paper_taus(paper_model: str) -> tuple[float, float] | None:
    """(lowest, highest) τ of the paper's remasking table for `paper_model`, or None when it has no rows."""
    t = paper.load("remasking")
    t = t[t["model"] == paper_model]
    return None if t.empty else (float(t["threshold"].min()), float(t["threshold"].max()))


def _range(ctx) -> tuple[float, float]:
    rng = paper_taus(ctx.paper_model)
    if rng is None:  # the declared model has no remasking rows: the paper's own grid, from any model
        t = paper.load("remasking")["threshold"]
        rng = (float(t.min()), float(t.max()))
    return rng


def _paper_row(ctx, bench) -> pd.DataFrame:
    t = paper.load("remasking")
    return t[(t["model"] == ctx.paper_model) & (t["benchmark"] == paper.BENCHMARK_MAP.get(bench))]


def _runs(tables, bench, mode, tau=None) -> pd.Series:
    """correct (float) by problem_id: our static(1), dynamic(τ) or remask(τ, tau) on `bench`."""
    if mode == "static":
        r = tables["static_runs"]
        r = r[(r["benchmark"] == bench) & (r["mode"] == "static") & (r["algorithm"] == "ours")]
    else:
        r = tables["remasking_runs"]
        r = r[(r["benchmark"] == bench) & (r["algorithm"] == "ours") & (r["mode"] == mode)
              & np.isclose(r["threshold"].astype(float), tau)]  # fmt: skip
        if mode == "remask":
            r = r[r["rule"] == REMASK_CLAIMS_FROM["rule"]]
    return r.set_index("problem_id")["correct"].astype(float)


def _taus(tables, bench) -> list[float]:
    r = tables["remasking_runs"]
    r = r[(r["benchmark"] == bench) & (r["algorithm"] == "ours") & (r["mode"] == "remask") & (r["rule"] == "tau")]
    return sorted({float(t) for t in r["threshold"]})


def _share(rem, dyn, sta, n_boot, ci, seed=0):
    """Recovery share (mean rem − mean dyn) / (mean sta − mean dyn) with a paired percentile bootstrap CI; NaN when
    nothing is lost (static's accuracy equals dynamic's)."""
    r, d, s = (np.asarray(x, float) for x in (rem, dyn, sta))
    lost = s.mean() - d.mean()
    if len(r) == 0 or lost <= 0:
        return math.nan, math.nan, math.nan
    idx = np.random.default_rng(seed).integers(0, len(r), size=(n_boot, len(r)))
    den = s[idx].mean(1) - d[idx].mean(1)
    with np.errstate(divide="ignore", invalid="ignore"):
        b = (r[idx].mean(1) - d[idx].mean(1)) / den
    b = b[np.isfinite(b) & (den > 0)]
    a = (1 - ci) / 2
    x = (r.mean() - d.mean()) / lost
    return (x, float(np.quantile(b, a)), float(np.quantile(b, 1 - a))) if b.size else (x, x, x)


def recovers(tables, ctx) -> list[Outcome]:
    if m := missing(tables, "remasking_runs", "static_runs"):
        return m
    lo_tau, _ = _range(ctx)
    out = []
    for bench in dict.fromkeys(tables["remasking_runs"]["benchmark"]):
        taus = _taus(tables, bench)
        if not any(math.isclose(t, lo_tau) for t in taus):
            out += na(f"no remasking run at the paper's lowest τ = {lo_tau:g}", bench)
        for tau, ext in [(lo_tau, False)] + [(t, True) for t in taus if t < lo_tau - 1e-9]:
            if not any(math.isclose(t, tau) for t in taus):
                continue
            rem, dyn, sta = _runs(tables, bench, "remask", tau), _runs(tables, bench, "dynamic", tau), _runs(
                tables, bench, "static")
            ids = rem.index.intersection(dyn.index).intersection(sta.index)
            x, lo, hi = _share(rem[ids], dyn[ids], sta[ids], ctx.n_boot, ctx.ci)
            scope = f"{bench}, τ={tau:g}" + (" (extension: not in the paper)" if ext else "")
            pr = _paper_row(ctx, bench)
            pr = pr[np.isclose(pr["threshold"], tau)]
            p = ""
            if len(pr) and {"baseline_accuracy", "mrp_remask_accuracy"} <= set(pr.columns):
                p = f"gain {float(pr['mrp_remask_accuracy'].iloc[0] - pr['baseline_accuracy'].iloc[0]):+.1f} pts"
            gain = 100 * (rem[ids].mean() - dyn[ids].mean())
            lost = 100 * (sta[ids].mean() - dyn[ids].mean())
            if math.isnan(x):
                o = Outcome(scope, f"gain {gain:+.1f} pts; static − dynamic {lost:+.1f} pts", p, NOT_SHOWN,
                            "dynamic loses nothing against static here: no share to recover", ext,
                            "recovery share", str(RECOVERS_MOST))  # fmt: skip
            else:
                v = direction(lo, hi, RECOVERS_MOST)
                why = {HOLDS: f"the recovery share's CI is above {RECOVERS_MOST}: remasking recovers most of what "
                       "dynamic lost", NOT: f"the recovery share's CI is below {RECOVERS_MOST}: it recovers less than "
                       "half of what dynamic lost", NOT_SHOWN: f"the recovery share's CI holds {RECOVERS_MOST}"}[v]
                o = Outcome(scope, f"recovery share {fmt_ci(x, lo, hi, 3)} (gain {gain:+.1f} of the {lost:.1f} pts "
                            "dynamic lost)", p, v, why, ext, "recovery share", str(RECOVERS_MOST))  # fmt: skip
            out.append(_gate(o, tables, ctx, bench, tau))
    return out


def _gate(o: Outcome, tables, ctx, bench: str, tau: float) -> Outcome:
    """o gated by remask(τ, tau)'s control of record (the dynamic frontier at equal TPF and weighted TPF), the
    head-free vetoes beside it."""
    record = cc.frontier(tables, ctx, bench, cc.remask_at(tau), f"remask({tau:g}, tau)")
    return cc.gate(o, record, ctx, cc.remask(tables, ctx, bench, tau))


def _gain(tables, bench, tau, n_boot, ci) -> dict | None:
    rem, dyn = _runs(tables, bench, "remask", tau), _runs(tables, bench, "dynamic", tau)
    ids = rem.index.intersection(dyn.index)
    return stats.paired_diff(rem[ids], dyn[ids], n_boot, ci) if len(ids) else None


def max_gain(tables, ctx) -> list[Outcome]:
    if m := missing(tables, "remasking_runs"):
        return m
    lo_t, hi_t = _range(ctx)
    out = []
    for bench in dict.fromkeys(tables["remasking_runs"]["benchmark"]):
        taus = [t for t in _taus(tables, bench) if lo_t - 1e-9 <= t <= hi_t + 1e-9]
        if not taus:
            out += na(f"no remask(τ, tau) run in the paper's τ range {lo_t:g}-{hi_t:g}", bench)
            continue
        level = bonferroni(ctx.ci, len(taus))
        gains = {t: _gain(tables, bench, t, ctx.n_boot, level) for t in taus}
        best = max(gains, key=lambda t: gains[t]["diff"])
        g = gains[best]
        pt = _paper_row(ctx, bench)
        pt = pt.assign(gain=pt["mrp_remask_accuracy"] - pt["baseline_accuracy"])
        has_p = not pt.empty
        p_gain = float(pt["gain"].max()) if has_p else math.nan
        p_s = f"{p_gain:+.1f} pts (τ={float(pt.loc[pt['gain'].idxmax(), 'threshold']):g})" if has_p else ""
        d = direction(g["diff_lo"], g["diff_hi"], 0.0)
        v = sized(d, ctx, has_p, has_p and g["diff"] >= p_gain - GAIN_TOLERANCE)
        why = {NOT_SHOWN: "the largest gain's Bonferroni CI holds 0", NOT: "the largest gain's CI is below 0",
               HOLDS: f"the largest gain's CI is above 0, within {GAIN_TOLERANCE:g} points of the paper's or above",
               DIRECTION: "the largest gain's Bonferroni CI is above 0; the size is not compared on this profile",
               SHORT: f"the largest gain's CI is above 0, but more than {GAIN_TOLERANCE:g} points below the "
               "paper's"}[v]  # fmt: skip
        ours = (f"{fmt_ci(g['diff'], g['diff_lo'], g['diff_hi'], 1, True)} pts (τ={best:g}, the best of {len(taus)} τ "
                f"in {lo_t:g}-{hi_t:g}; {100 * level:.1f}% Bonferroni CI)")  # fmt: skip
        o = Outcome(bench, ours, p_s, v, why, False, "largest paired gain", "0")
        out.append(_gate(o, tables, ctx, bench, best))
    return out


def shrinks(tables, ctx) -> list[Outcome]:
    if m := missing(tables, "remasking_runs"):
        return m
    lo_t, hi_t = _range(ctx)
    out = []
    for bench in dict.fromkeys(tables["remasking_runs"]["benchmark"]):
        taus = _taus(tables, bench)
        inside = [t for t in taus if lo_t - 1e-9 <= t <= hi_t + 1e-9]
        if len(inside) < 2:
            out += na("fewer than two τ in the paper's range on this profile", bench)
            continue
        a0, b = inside[0], inside[-1]
        pt = _paper_row(ctx, bench)
        pg = {float(r.threshold): r.mrp_remask_accuracy - r.baseline_accuracy for r in pt.itertuples()}
        for tau_a, ext in [(a0, False)] + [(t, True) for t in taus if t < a0 - 1e-9]:
            per = {}
            for key, tau in (("a", tau_a), ("b", b)):
                rem, dyn = _runs(tables, bench, "remask", tau), _runs(tables, bench, "dynamic", tau)
                per[key] = (rem - dyn).dropna()
            ids = per["a"].index.intersection(per["b"].index)
            scope = f"{bench}, τ={tau_a:g} vs {b:g}" + (" (extension: not in the paper)" if ext else "")
            if len(ids) == 0:
                out += na(f"no remask(tau) and dynamic runs at τ = {tau_a:g} and {b:g}", scope)
                continue
            d = stats.paired_diff(per["a"][ids], per["b"][ids], ctx.n_boot, ctx.ci)
            v = direction(d["diff_lo"], d["diff_hi"], 0.0)
            why = {HOLDS: "gain(low τ) − gain(high τ) has a CI above 0", NOT: "the gain is larger at the high τ (CI "
                   "below 0)", NOT_SHOWN: "the CI of gain(low τ) − gain(high τ) holds 0"}[v]  # fmt: skip
            p_s = f"{pg[tau_a]:+.1f} → {pg[b]:+.1f} pts" if tau_a in pg and b in pg else ""
            o = Outcome(scope, f"{fmt_ci(d['diff'], d['diff_lo'], d['diff_hi'], 1, True)} pts", p_s, v, why, ext,
                        "gain(lowest τ) − gain(highest τ)", "0")  # fmt: skip
            out.append(_gate(o, tables, ctx, bench, tau_a))
    return out


#: the equal-speed axes the claims judge: the matched table's two and TPF with head calls charged
EQUAL_SPEED_AXES = ("tpf", "weighted_tpf", "wall_speedup")
#: the package's own remask rules (not the paper's tau, not the released code's delta): judged by remask-own-rules
PACKAGE_RULES = ("loo", "sequential", "logp-delta")
#: remask-own-rules' axes: TPF and TPF with head calls charged (the rules' cost is their head calls)
OWN_RULES_AXES = ("tpf", "weighted_tpf")


def _best_over_frontier(tables, ctx, sel_fn, axes, family: str, per_bench_family: bool, label: str) -> list[Outcome]:
    """Per benchmark and axis: the best of the settings `sel_fn` selects (by margin, among the comparisons the frontier
    measures: not beyond it, not on a segment wider than ctx.frontier_max_gap) against the dense dynamic frontier
    (claims_controls.frontier_base), its CI Bonferroni-corrected over the family (the settings selected on one
    benchmark, or on every benchmark with per_bench_family False)."""
    runs = cc.frontier_base(tables)
    if runs is None:
        return na("no modes_runs (the dynamic frontier)")
    require(runs, ["mode", "algorithm", "setting", "threshold", "rule", "K", "mrp_forwards", "batch_size"], label)
    sel = sel_fn(runs)
    if not sel.any():
        return na(f"no {family} setting in modes_runs")
    n_bench = runs.loc[sel, "benchmark"].nunique()
    out = []
    for bench in dict.fromkeys(runs.loc[sel, "benchmark"]):
        g = runs[runs["benchmark"] == bench]
        s_b = sel_fn(g)
        n_set = g.loc[s_b, "setting"].nunique()
        m = n_set if per_bench_family else n_set * n_bench
        level = bonferroni(ctx.ci, m)
        cost = cc.head_cost(tables, int(g["batch_size"].iloc[0]))
        t = pareto.matched_speed_table(g[s_b | g["mode"].isin(pareto.FRONTIER)], ctx.n_boot, level, head_cost=cost,
                                       max_gap=ctx.frontier_max_gap)  # fmt: skip
        t = t[t["mode"].isin(pareto.COMPARED)]
        for axis in axes:
            scope = f"{bench}, equal {axis}"
            if axis == "weighted_tpf" and math.isnan(cost):
                out += na("no cost model: head calls cannot be charged", scope)
                continue
            a = t[t["axis"] == axis]
            ok = a[~a["at_equal_speed"].isin(["beyond", pareto.GAP])]
            gaps = a[a["at_equal_speed"] == pareto.GAP]
            if ok.empty:
                why = ("faster than the whole dynamic frontier" if gaps.empty else
                       f"every comparison interpolates a frontier segment wider than {ctx.frontier_max_gap:g} points "
                       f"({gaps['frontier_segment'].iloc[0]}: {gaps['frontier_gap'].iloc[0]:.1f}): decode more τ "
                       "there (decoding.frontier_thresholds)")  # fmt: skip
                out += na(why, scope)
                continue
            best = ok.loc[ok["margin"].idxmax()]
            v = direction(float(best["margin_lo"]), float(best["margin_hi"]), 0.0)
            fam = f"{m} ({n_set} per benchmark × {n_bench} benchmarks)" if not per_bench_family and n_bench > 1 else m
            what = (f"{best['setting']}" if m == 1 else
                    f"best {best['setting']} of {fam} ({100 * level:.1f}% Bonferroni CI)")  # fmt: skip
            ours = (f"{what}: {fmt_ci(best['margin'], best['margin_lo'], best['margin_hi'], 1, True)} pts vs the "
                    f"frontier's {best['dynamic_accuracy']:.1f}% at {axis} {best['speed']:.2f}")  # fmt: skip
            if axis == "weighted_tpf":
                ours += f" (head calls at {cost:.2f} forwards)"
            if len(gaps):
                ours += f"; {len(gaps)} more not compared (frontier gap over {ctx.frontier_max_gap:g} points)"
            why = {HOLDS: "the margin over the dynamic frontier has a CI above 0",
                   NOT: "below the dynamic frontier at equal speed (CI below 0)",
                   NOT_SHOWN: "the margin's CI holds 0: not shown to beat dynamic decoding"}[v]  # fmt: skip
            out.append(Outcome(scope, ours, "", v, why, False, "margin over the dynamic frontier", "0"))
    return out


def _record_is_the_statistic(o: Outcome) -> cc.Control:
    """An equal-speed claim's control of record is its own statistic: the dynamic frontier."""
    return cc.Control("the statistic itself: the margin over the dynamic frontier (the control of record)",
                      o.verdict if o.verdict in (HOLDS, NOT, NOT_SHOWN) else NA, o.reason)


def equal_speed(mode: str, steps=(1, 2)):
    """remask(the paper's lowest τ, tau) or the better of direct(steps) (Bonferroni over them) against the dense
    dynamic frontier of our family, per benchmark and axis; the other controls (the head-free vetoes, MTP without a
    head) beside it."""

    def check(tables, ctx) -> list[Outcome]:
        if m := missing(tables, "modes_runs"):
            return m
        lo_t, _ = _range(ctx)
        pick = cc.remask_at(lo_t) if mode == "remask" else cc.direct_steps(steps)
        sel = lambda g: pick(g) & (g["algorithm"] == "ours")  # noqa: E731
        outs = _best_over_frontier(tables, ctx, sel, EQUAL_SPEED_AXES, mode, True, f"{mode}-equal-speed")
        res = []
        for o in outs:
            if o.verdict == NA:
                res.append(o)
                continue
            bench = o.scope.split(",")[0]
            other = cc.remask(tables, ctx, bench, lo_t) if mode == "remask" else cc.direct(tables, ctx, bench, steps)
            res.append(cc.gate(o, _record_is_the_statistic(o), ctx, other))
        return res

    return check


def own_rules(tables, ctx) -> list[Outcome]:
    """remask-own-rules: the package's rules (PACKAGE_RULES in decoding.remask_rules) at every remasking τ, the best
    (rule, τ) per benchmark and axis against the dense dynamic frontier, Bonferroni over rules × τ × benchmarks."""
    if m := missing(tables, "modes_runs"):
        return m
    sel = lambda g: (g["mode"] == "remask") & g["rule"].isin(PACKAGE_RULES) & (g["algorithm"] == "ours")  # noqa: E731
    outs = _best_over_frontier(tables, ctx, sel, OWN_RULES_AXES, "package remask rule", False, "remask-own-rules")
    return [o if o.verdict == NA else cc.gate(o, _record_is_the_statistic(o), ctx) for o in outs]
