"""Every claim of the paper's abstract and results as a declared test, checked against our tables.

    from mrp_repro.report import claims, paper, tables
    results = paper.load_results(profile)
    found = claims.tables_from_results(results, n_boot=1000)
    report = claims.check_claims(found, numeric=claims.is_numeric_profile(profile), paper_model=profile.paper.model)
    claims.write_report(report, tables.out_dir(profile), profile.name, numeric, profile.paper.model)  # claims.md

Each Claim states, in the fields the report prints: the statistic (and the measurement of record it is read
from), the null or comparison it must beat, the paper's number (always the declared paper model's row of
mrp_repro/paper_data/, for the same benchmark; blank where the paper has none), the tolerance, and the verdict
rule. A check returns one row per scope: per benchmark where the paper reports per benchmark, and *extensions*
(settings outside the paper's grid, e.g. τ = 0.3) in rows of their own, never folded into the paper's claim.

Verdicts (report.verdicts.VERDICTS, re-exported here), the same rule shape for every claim with a CI:
- ``holds``: the statistic's CI clears the null (and, for a sized claim on a comparable profile, the paper's
  number within the tolerance);
- ``holds in direction; size not compared``: a sized claim whose direction holds on a profile whose numbers are
  not the paper's experiment (paper.comparable false: tiny, smoke, sdar-mini), or where the paper has no number;
- ``holds in direction, not in size``: a sized claim on a comparable profile, direction shown, outside tolerance;
- ``not shown``: the CI holds the null (or the null check fails, e.g. the random init passes too);
- ``does not hold``: the CI lies on the wrong side of the null;
- ``not measured``: the table it needs is missing, empty, or lacks the paper's setting (e.g. K = 3).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from mrp_repro.measure import stats
from mrp_repro.measure.adjacent import RANDOM_MODELS, RELATIVE_KL_MAX, SUBSET, TRAINED
from mrp_repro.measure.schema import require
from mrp_repro.report import paper, pareto, wallclock
from mrp_repro.report.verdicts import (
    DIRECTION,
    HOLDS,
    NA,
    NOT,
    NOT_SHOWN,
    SHORT,
    VERDICTS,
    Context,
    Outcome,
    direction,
    fmt,
    fmt_ci,
    missing,
    na,
    report_markdown,
    sized,
    write_report,
)

__all__ = ["Claim", "CLAIMS", "PAPER_SPEC_K", "SPEEDUP_TOLERANCE", "GAIN_TOLERANCE", "DIRECT_MAX_DROP",
           "tables_from_results", "check_claims", "is_numeric_profile", "paper_taus",
           # the verdict vocabulary and the writer (report.verdicts), for the report's callers
           "VERDICTS", "HOLDS", "DIRECTION", "SHORT", "NOT_SHOWN", "NOT", "NA", "Outcome", "report_markdown",
           "write_report"]  # fmt: skip

#: the paper's speculative K (its speculative table is K = 3 only: paper_data/SOURCE.md)
PAPER_SPEC_K = 3
#: sized claims on comparable profiles: speedup >= (1 - SPEEDUP_TOLERANCE) x the paper's
SPEEDUP_TOLERANCE = 0.10
#: sized claims on comparable profiles: accuracy gains / changes >= the paper's - GAIN_TOLERANCE points
GAIN_TOLERANCE = 5.0
#: "a little accuracy" (direct mode): the paired accuracy change's CI must stay above -DIRECT_MAX_DROP points
#: (the paper's largest direct drop is 9.8, SDAR-8B HumanEval step 2)
DIRECT_MAX_DROP = 10.0
#: the paper's direct-mode steps
DIRECT_STEPS = (1, 2)


@dataclass(frozen=True)
class Claim:
    id: str
    text: str  # the claim, in the paper's words or close
    source: str  # where the paper says it
    statistic: str  # what we compute, from which measurement of record
    null: str  # the comparison or null the statistic must beat
    paper_number: str  # which of the paper's numbers stands beside it (the declared model's)
    tolerance: str  # for sized claims on comparable profiles; "–" otherwise
    rule: str  # the verdict rule, as printed
    table: str  # the table it reads
    check: Callable[[dict[str, pd.DataFrame], Context], list[Outcome]] = field(repr=False)


def paper_taus(paper_model: str) -> tuple[float, float] | None:
    """(lowest, highest) τ of the paper's remasking table for `paper_model`, or None when it has no rows."""
    t = paper.load("remasking")
    t = t[t["model"] == paper_model]
    return None if t.empty else (float(t["threshold"].min()), float(t["threshold"].max()))


def _paper_row(table: str, ctx: Context, **keys) -> pd.DataFrame:
    t = paper.load(table)
    t = t[t["model"] == ctx.paper_model]
    for k, v in keys.items():
        t = t[np.isclose(t[k], v)] if isinstance(v, float) else t[t[k] == v]
    return t


# ----------------------------------------------------------------------------- checks


def _adjacent_similar(tables, ctx) -> list[Outcome]:
    if m := missing(tables, "adjacent"):
        return m
    cols = ["model", "subset", "distance", "kl_median", "kl_null_median", "top1_agreement", "relative_kl",
            "relative_kl_lo", "relative_kl_hi"]  # fmt: skip
    t = require(tables["adjacent"], cols, "adjacent-similar")
    t = t[(t["subset"] == SUBSET) & (t["distance"] == 1)]
    tr = t[t["model"] == TRAINED]
    if tr.empty:
        return na(f"no `{TRAINED}` row of subset {SUBSET} at distance 1")
    if len(tr) > 1 or t["model"].duplicated().any():
        raise ValueError(f"adjacent-similar: more than one row per model in subset {SUBSET} at distance 1")
    r = tr.iloc[0]
    rnd = t[t["model"].isin(RANDOM_MODELS)]
    ours = (f"relative KL {fmt_ci(r['relative_kl'], r['relative_kl_lo'], r['relative_kl_hi'], 3)} (median KL "
            f"{fmt(r['kl_median'], 4)} adjacent / {fmt(r['kl_null_median'], 4)} between positions); top-1 agreement "
            f"{fmt(r['top1_agreement'], 3)}")  # fmt: skip
    if not rnd.empty:
        ours += "; " + ", ".join(f"{m}: {fmt(v, 3)}" for m, v in zip(rnd["model"], rnd["relative_kl"], strict=True))
    # holds when the whole CI is at or below the threshold: the null is "at least RELATIVE_KL_MAX"
    v = direction(-float(r["relative_kl_hi"]), -float(r["relative_kl_lo"]), -RELATIVE_KL_MAX)
    if v == HOLDS and (rnd["relative_kl_hi"] <= RELATIVE_KL_MAX).any():
        return [Outcome("distance 1", ours, "", NOT_SHOWN, "a random init passes as well: the statistic does not "
                        "discriminate on this profile")]  # fmt: skip
    reason = {HOLDS: f"relative KL CI at or below {RELATIVE_KL_MAX}; every random init is above it",
              NOT: f"relative KL CI above {RELATIVE_KL_MAX}: adjacent steps are not an order of magnitude closer "
              "than two positions of the same state",
              NOT_SHOWN: f"the relative KL CI holds {RELATIVE_KL_MAX}"}[v]  # fmt: skip
    if v == HOLDS and rnd.empty:
        reason = f"relative KL CI at or below {RELATIVE_KL_MAX} (no random-init rows to check the null)"
    return [Outcome("distance 1", ours, "", v, reason)]


#: the remasking rows the claims read (tables_from_results), named in each remasking claim's "ours": our family's
#: paper-v2 rule; upstream remasking (the released code's delta veto) is tabulated beside it (07's by-rule table)
REMASK_CLAIMS_FROM = dict(algorithm="ours", rule="tau")
_REMASK_FAMILY = f"algorithm {REMASK_CLAIMS_FROM['algorithm']}, rule {REMASK_CLAIMS_FROM['rule']}"


def _mrp_fits_residual(tables, ctx) -> list[Outcome]:
    """A trained head: its curve's last held-out step (mrp_curve). A released head (mrp.pretrained, nothing trained):
    notebook 04's held-out check of the loaded head (mrp_heldout). The same rule either way."""
    if "mrp_heldout" in tables:
        r = require(tables["mrp_heldout"], ["heldout_kl", "heldout_uncorrected_kl", "sequences", "source"],
                    "mrp-fits-residual").iloc[-1]  # fmt: skip
        h, b = float(r["heldout_kl"]), float(r["heldout_uncorrected_kl"])
        ours = (f"released head: held-out KL(B‖A+C) {fmt(h, 3)} vs KL(B‖A) {fmt(b, 3)} ({int(r['sequences'])} packed "
                f"{r['source']} sequences)")  # fmt: skip
    else:
        if m := missing(tables, "mrp_curve"):
            return m
        cols = ["step", "heldout_kl", "heldout_uncorrected_kl"]
        c = require(tables["mrp_curve"], cols, "mrp-fits-residual")[cols].dropna()
        if c.empty:
            return na("no step with both held-out and uncorrected KL")
        last = c.sort_values("step").iloc[-1]
        h, b = float(last["heldout_kl"]), float(last["heldout_uncorrected_kl"])
        ours = f"held-out KL(B‖A+C) {fmt(h, 3)} vs uncorrected KL(B‖A) {fmt(b, 3)} (step {int(last['step'])})"
    if h < b:
        return [Outcome("", ours, "", HOLDS, "A + C is closer to the next-step logits than A alone, held out")]
    return [Outcome("", ours, "", NOT, "A + C is not closer to the next-step logits than A alone, held out")]


def _spec_lossless(tables, ctx) -> list[Outcome]:
    if m := missing(tables, "speculative"):
        return m
    t = require(tables["speculative"], ["benchmark", "algorithm", "K", "identical_share"], "speculative-lossless")
    out = []
    for (b, a), g in t.groupby(["benchmark", "algorithm"], sort=False):
        ident = float(g["identical_share"].min())
        ours = f"{100 * ident:.1f}% identical to {a} static (worst K of {', '.join(str(int(k)) for k in g['K'])})"
        v, why = (HOLDS, "every output equals static's token for token") if ident == 1.0 else (
            NOT, "some outputs differ from static's")  # fmt: skip
        out.append(Outcome(f"{b}, {a}", ours, "lossless", v, why))
    return out


def _spec_k(tables, what: str) -> pd.DataFrame | list[Outcome]:
    t = tables["speculative"]
    k3 = t[t["K"] == PAPER_SPEC_K]
    if k3.empty:
        return na(f"no speculative rows at the paper's K = {PAPER_SPEC_K} ({what})")
    return k3


def _spec_accuracy(tables, ctx) -> list[Outcome]:
    if m := missing(tables, "speculative"):
        return m
    require(tables["speculative"], ["benchmark", "algorithm", "K", "accuracy", "static_accuracy", "paper_accuracy"],
            "speculative-accuracy")  # fmt: skip
    t = _spec_k(tables, "speculative-accuracy")
    if isinstance(t, list):
        return t
    out = []
    for r in t.itertuples():
        d = float(r.accuracy - r.static_accuracy)
        ours = f"{fmt(r.accuracy)} vs static {fmt(r.static_accuracy)} (K={PAPER_SPEC_K})"
        v, why = (HOLDS, "equal to static") if abs(d) < 1e-9 else (NOT, f"differs from static by {d:+.1f} points")
        out.append(Outcome(f"{r.benchmark}, {r.algorithm}", ours, fmt(r.paper_accuracy), v, why))
    return out


def _spec_speedup(tables, ctx) -> list[Outcome]:
    if m := missing(tables, "speculative"):
        return m
    cols = ["benchmark", "algorithm", "K", "throughput_speedup", "throughput_speedup_lo", "throughput_speedup_hi",
            "paper_throughput_speedup"]  # fmt: skip
    require(tables["speculative"], cols, "speculative-speedup")
    t = _spec_k(tables, "speculative-speedup")
    if isinstance(t, list):
        return t
    out = []
    for r in t.itertuples():
        x, lo, hi, p = (float(v) for v in (r.throughput_speedup, r.throughput_speedup_lo, r.throughput_speedup_hi,
                                             r.paper_throughput_speedup))  # fmt: skip
        has_p = not math.isnan(p)
        d = direction(lo, hi, 1.0)
        v = sized(d, ctx, has_p, has_p and x >= (1 - SPEEDUP_TOLERANCE) * p)
        why = {NOT_SHOWN: "the CI holds 1: faster than static is not shown",
               NOT: "the CI is below 1: slower than static",
               HOLDS: f"CI above 1 and within {SPEEDUP_TOLERANCE:.0%} of the paper's {fmt(p, 2)}× or above",
               DIRECTION: "CI above 1: faster than static; the size is not compared on this profile",
               SHORT: f"CI above 1, but below {1 - SPEEDUP_TOLERANCE:.2f} × the paper's {fmt(p, 2)}×"}[v]  # fmt: skip
        out.append(Outcome(f"{r.benchmark}, {r.algorithm}", f"{fmt_ci(x, lo, hi, 2)}× (K={PAPER_SPEC_K})",
                           f"{fmt(p, 2)}×" if has_p else "", v, why))  # fmt: skip
    return out


def _direct_tradeoff(tables, ctx) -> list[Outcome]:
    if m := missing(tables, "direct", "direct_runs"):
        return m
    cols = ["setting", "benchmark", "throughput_speedup", "throughput_speedup_lo", "throughput_speedup_hi",
            "paper_accuracy", "paper_throughput_speedup"]  # fmt: skip
    t = require(tables["direct"], cols, "direct-tradeoff")
    runs = require(tables["direct_runs"], ["benchmark", "mode", "K", "problem_id", "correct"], "direct-tradeoff")
    out = []
    for bench, g in t.groupby("benchmark", sort=False):
        g = g.set_index("setting")
        steps = [f"mrp_step{s}" for s in DIRECT_STEPS]
        if not set(steps) <= set(g.index) or "baseline" not in g.index:
            out += na(f"direct runs lack the baseline or steps {DIRECT_STEPS}", bench)
            continue
        static = runs[(runs["benchmark"] == bench) & (runs["mode"] == "static")].set_index("problem_id")["correct"]
        parts, paper_parts, verdicts, size_ok, has_p = [], [], [], True, True
        for s, name in zip(DIRECT_STEPS, steps, strict=True):
            d = runs[(runs["benchmark"] == bench) & (runs["mode"] == "direct") & (runs["K"] == s)]
            d = d.set_index("problem_id")["correct"]
            ids = d.index.intersection(static.index)
            dd = stats.paired_diff(d[ids].astype(float), static[ids].astype(float), ctx.n_boot, ctx.ci)
            r = g.loc[name]
            sp, sp_lo, sp_hi = (float(r[c]) for c in ("throughput_speedup", "throughput_speedup_lo",
                                                       "throughput_speedup_hi"))  # fmt: skip
            p_sp = float(r["paper_throughput_speedup"])
            p_dacc = float(r["paper_accuracy"] - g.loc["baseline", "paper_accuracy"])
            has_p = has_p and not (math.isnan(p_sp) or math.isnan(p_dacc))
            dacc = fmt_ci(dd["diff"], dd["diff_lo"], dd["diff_hi"], 1, True)
            parts.append(f"step {s}: {fmt_ci(sp, sp_lo, sp_hi, 2)}×, {dacc} pts")
            if has_p:
                paper_parts.append(f"step {s}: {p_sp:.2f}×, {p_dacc:+.1f} pts")
                size_ok = size_ok and sp >= (1 - SPEEDUP_TOLERANCE) * p_sp and dd["diff"] >= p_dacc - GAIN_TOLERANCE
            verdicts += [direction(sp_lo, sp_hi, 1.0), direction(dd["diff_lo"], dd["diff_hi"], -DIRECT_MAX_DROP)]
        faster = float(g.loc[steps[-1], "throughput_speedup"]) > float(g.loc[steps[0], "throughput_speedup"])
        d = NOT if NOT in verdicts or not faster else (NOT_SHOWN if NOT_SHOWN in verdicts else HOLDS)
        v = sized(d, ctx, has_p, size_ok)
        why = {NOT: f"a step is not faster than static, step {DIRECT_STEPS[-1]} is not faster than step "
               f"{DIRECT_STEPS[0]}, or the accuracy CI is below -{DIRECT_MAX_DROP:g} points",
               NOT_SHOWN: f"a speedup CI holds 1 or an accuracy-change CI holds -{DIRECT_MAX_DROP:g} points",
               HOLDS: "faster with more steps, accuracy within the bound, and within tolerance of the paper",
               DIRECTION: f"faster with more steps at an accuracy change above -{DIRECT_MAX_DROP:g} points; the size "
               "is not compared on this profile",
               SHORT: "faster with more steps, but outside the tolerance of the paper's speedup or accuracy "
               "change"}[v]  # fmt: skip
        out.append(Outcome(bench, "; ".join(parts), "; ".join(paper_parts), v, why))
    return out


def _lookahead_pairs(tables, bench) -> dict[int, dict]:
    """K -> paired accuracy difference (mrp - naive_mtp) on the same problems, lookahead runs of `bench`."""
    runs = tables["lookahead_runs"]
    runs = runs[runs["benchmark"] == bench]
    out = {}
    for k, g in runs[runs["mode"] == "direct"].groupby("K"):
        nv = runs[(runs["mode"] == "naive") & (runs["K"] == k)].set_index("problem_id")["correct"]
        d = g.set_index("problem_id")["correct"]
        ids = d.index.intersection(nv.index)
        if len(ids):
            out[int(k)] = stats.paired_diff(d[ids].astype(float), nv[ids].astype(float))
    return out


def _naive_collapses(tables, ctx) -> list[Outcome]:
    if m := missing(tables, "lookahead"):
        return m
    t = require(tables["lookahead"], ["benchmark", "method", "lookahead_k", "accuracy", "accuracy_lo", "accuracy_hi",
                                      "paper_accuracy"], "naive-mtp-collapses")  # fmt: skip
    out = []
    for bench, g in t[t["method"] == "naive_mtp"].groupby("benchmark", sort=False):
        g = g.sort_values("lookahead_k")
        if len(g) < 2:
            out += na("fewer than two lookahead K for naive MTP", bench)
            continue
        a, z = g.iloc[0], g.iloc[-1]
        half = 0.5 * float(a["accuracy"])
        v = direction(-float(z["accuracy_hi"]), -float(z["accuracy_lo"]), -half)
        ours = f"K={int(a['lookahead_k'])} {fmt(a['accuracy'])}% → K={int(z['lookahead_k'])} " + fmt_ci(
            z["accuracy"], z["accuracy_lo"], z["accuracy_hi"]) + "%"
        pp = g["paper_accuracy"].dropna()
        paper_s = " → ".join(fmt(x) for x in pp) if len(pp) else ""
        why = {HOLDS: "the largest K's accuracy CI is below half of K=1's", NOT: "the largest K's accuracy CI is "
               "above half of K=1's", NOT_SHOWN: "the largest K's accuracy CI holds half of K=1's"}[v]  # fmt: skip
        out.append(Outcome(bench, ours, paper_s, v, why))
    return out


def _mrp_graceful(tables, ctx) -> list[Outcome]:
    if m := missing(tables, "lookahead", "lookahead_runs"):
        return m
    t = require(tables["lookahead"], ["benchmark", "method", "lookahead_k", "paper_accuracy"], "mrp-graceful")
    out = []
    for bench, g in t.groupby("benchmark", sort=False):
        pairs = {k: d for k, d in _lookahead_pairs(tables, bench).items() if k >= 2}
        if not pairs:
            out += na("no lookahead K >= 2 with both MRP and naive MTP", bench)
            continue
        vs = [direction(d["diff_lo"], d["diff_hi"], 0.0) for d in pairs.values()]
        v = NOT if NOT in vs else (NOT_SHOWN if NOT_SHOWN in vs else HOLDS)
        ours = "MRP − naive: " + ", ".join(f"K={k} {fmt_ci(d['diff'], d['diff_lo'], d['diff_hi'], 1, True)}"
                                            for k, d in sorted(pairs.items()))  # fmt: skip
        p = g.pivot_table(index="lookahead_k", columns="method", values="paper_accuracy")
        paper_s = ""
        if {"mrp", "naive_mtp"} <= set(p.columns) and p.notna().any().any():
            paper_s = ", ".join(f"K={k} {p.loc[k, 'mrp'] - p.loc[k, 'naive_mtp']:+.1f}" for k in p.index if k >= 2)
        why = {HOLDS: "the paired difference's CI is above 0 at every K >= 2", NOT: "MRP is below naive MTP at some "
               "K >= 2 (CI below 0)", NOT_SHOWN: "at some K >= 2 the paired difference's CI holds 0"}[v]  # fmt: skip
        out.append(Outcome(bench, ours, paper_s, v, why))
    return out


def _remask_rows(tables, ctx):
    """The remasking table (rule tau) split into the paper's τ range and the extensions outside it."""
    t = require(tables["remasking"], ["threshold", "benchmark", "gain", "gain_lo", "gain_hi", "paper_gain"],
                "remasking claims")  # fmt: skip
    rng = paper_taus(ctx.paper_model)
    if rng is None:  # the declared model has no remasking rows: the paper's own grid, from any model
        all_t = paper.load("remasking")["threshold"]
        rng = (float(all_t.min()), float(all_t.max()))
    inside = t["threshold"].between(rng[0] - 1e-9, rng[1] + 1e-9)
    return t[inside], t[~inside], rng


def _gain_outcome(r, scope: str, extension: bool = False) -> Outcome:
    v = direction(float(r.gain_lo), float(r.gain_hi), 0.0)
    why = {HOLDS: "the paired gain's CI is above 0", NOT: "the paired gain's CI is below 0",
           NOT_SHOWN: "the paired gain's CI holds 0"}[v]  # fmt: skip
    return Outcome(scope, f"{fmt_ci(r.gain, r.gain_lo, r.gain_hi, 1, True)} pts", "" if math.isnan(r.paper_gain)
                   else f"{r.paper_gain:+.1f} pts", v, why, extension)  # fmt: skip


def _remask_recovers(tables, ctx) -> list[Outcome]:
    if m := missing(tables, "remasking"):
        return m
    inside, outside, (lo_tau, _) = _remask_rows(tables, ctx)
    out = []
    for bench, g in inside.groupby("benchmark", sort=False):
        r = g[np.isclose(g["threshold"], lo_tau)]
        out += ([_gain_outcome(next(r.itertuples()), f"{bench}, τ={lo_tau:g}")] if len(r) else
                na(f"no remasking run at the paper's lowest τ = {lo_tau:g}", bench))  # fmt: skip
    for r in outside[outside["threshold"] < lo_tau].itertuples():
        out.append(_gain_outcome(r, f"{r.benchmark}, τ={r.threshold:g} (extension: not in the paper)", True))
    return out


def _remask_max(tables, ctx) -> list[Outcome]:
    if m := missing(tables, "remasking"):
        return m
    inside, _, rng = _remask_rows(tables, ctx)
    out = []
    for bench, g in inside.groupby("benchmark", sort=False):
        r = g.loc[g["gain"].idxmax()]
        pb = paper.BENCHMARK_MAP.get(bench)
        pt = _paper_row("remasking", ctx, benchmark=pb)
        pt = pt.assign(gain=pt["mrp_remask_accuracy"] - pt["baseline_accuracy"])
        has_p = not pt.empty
        p_gain = float(pt["gain"].max()) if has_p else math.nan
        p_s = f"{p_gain:+.1f} pts (τ={float(pt.loc[pt['gain'].idxmax(), 'threshold']):g})" if has_p else ""
        d = direction(float(r["gain_lo"]), float(r["gain_hi"]), 0.0)
        v = sized(d, ctx, has_p, has_p and float(r["gain"]) >= p_gain - GAIN_TOLERANCE)
        why = {NOT_SHOWN: "the largest gain's CI holds 0", NOT: "the largest gain's CI is below 0",
               HOLDS: f"the largest gain's CI is above 0, within {GAIN_TOLERANCE:g} points of the paper's or above",
               DIRECTION: "the largest gain's CI is above 0; the size is not compared on this profile",
               SHORT: f"the largest gain's CI is above 0, but more than {GAIN_TOLERANCE:g} points below the "
               "paper's"}[v]  # fmt: skip
        ours = f"{fmt_ci(r['gain'], r['gain_lo'], r['gain_hi'], 1, True)} pts (τ={r['threshold']:g}; τ in "
        ours += f"{rng[0]:g}-{rng[1]:g})"
        out.append(Outcome(bench, ours, p_s, v, why))
    return out


def _gain_difference(tables, bench, tau_a, tau_b, ctx) -> dict | None:
    """Paired CI of gain(τ_a) - gain(τ_b) (rule tau): per prompt (remask_a - dynamic_a) - (remask_b - dynamic_b)."""
    runs = tables.get("remasking_runs")
    if runs is None:
        return None
    rule, algo = REMASK_CLAIMS_FROM["rule"], REMASK_CLAIMS_FROM["algorithm"]
    runs = runs[(runs["benchmark"] == bench) & (runs["algorithm"] == algo)
                & ((runs["mode"] == "dynamic") | (runs["rule"] == rule))]  # fmt: skip
    per = {}
    for key, tau in (("a", tau_a), ("b", tau_b)):
        g = runs[np.isclose(runs["threshold"], tau)]
        rem = g[g["mode"] == "remask"].set_index("problem_id")["correct"].astype(float)
        dyn = g[g["mode"] == "dynamic"].set_index("problem_id")["correct"].astype(float)
        per[key] = rem - dyn
    ids = per["a"].dropna().index.intersection(per["b"].dropna().index)
    if len(ids) == 0:
        return None
    return stats.paired_diff(per["a"][ids], per["b"][ids], ctx.n_boot, ctx.ci)


def _remask_shrinks(tables, ctx) -> list[Outcome]:
    if m := missing(tables, "remasking", "remasking_runs"):
        return m
    inside, outside, _ = _remask_rows(tables, ctx)
    ran = sorted(set(inside["threshold"]))  # the paper-range τ this profile ran: its lowest vs its highest
    if len(ran) < 2:
        return na("fewer than two τ in the paper's range on this profile")
    lo_tau, hi_tau = float(ran[0]), float(ran[-1])
    out = []
    below = [float(x) for x in sorted(set(outside["threshold"])) if x < lo_tau]
    for bench in dict.fromkeys(inside["benchmark"]):
        pt = _paper_row("remasking", ctx, benchmark=paper.BENCHMARK_MAP.get(bench))
        pg = {float(r.threshold): r.mrp_remask_accuracy - r.baseline_accuracy for r in pt.itertuples()}
        for tau_a, ext in [(lo_tau, False)] + [(x, True) for x in below]:
            d = _gain_difference(tables, bench, tau_a, hi_tau, ctx)
            scope = f"{bench}, τ={tau_a:g} vs {hi_tau:g}" + (" (extension: not in the paper)" if ext else "")
            if d is None:
                out += na(f"no remask(tau) and dynamic runs at τ = {tau_a:g} and {hi_tau:g}", scope)
                continue
            v = direction(d["diff_lo"], d["diff_hi"], 0.0)
            why = {HOLDS: "gain(low τ) − gain(high τ) has a CI above 0", NOT: "the gain is larger at the high τ (CI "
                   "below 0)", NOT_SHOWN: "the CI of gain(low τ) − gain(high τ) holds 0"}[v]  # fmt: skip
            p_s = (f"{pg[tau_a]:+.1f} → {pg[hi_tau]:+.1f} pts" if tau_a in pg and hi_tau in pg else "")
            diff = fmt_ci(d["diff"], d["diff_lo"], d["diff_hi"], 1, True)
            out.append(Outcome(scope, f"{diff} pts", p_s, v, why, ext))
    return out


def _equal_speed(mode: str):
    """remask (rule tau, the paper's τ range) or direct (the paper's steps) against the dynamic frontier."""

    def check(tables, ctx) -> list[Outcome]:
        if m := missing(tables, "matched_speed"):
            return m
        t = require(tables["matched_speed"], pareto.MATCHED_COLUMNS, f"{mode}-equal-speed")
        t = t[t["mode"] == mode]
        if mode == "remask":
            rng = paper_taus(ctx.paper_model) or (0.5, 0.9)
            t = t[t["threshold"].between(rng[0] - 1e-9, rng[1] + 1e-9)]
            sel, others = t[t["rule"] == "tau"], t[t["rule"] != "tau"]
        else:
            sel, others = t[t["K"].isin(DIRECT_STEPS)], t.iloc[0:0]
        out = []
        for (bench, axis), g in sel.groupby(["benchmark", "axis"], sort=False):
            g = g[g["at_equal_speed"] != "beyond"]
            scope = f"{bench}, equal {axis}"
            if g.empty:
                out += na("every setting is faster than the whole dynamic frontier", scope)
                continue
            best = g.loc[g["margin"].idxmax()]
            v = direction(float(best["margin_lo"]), float(best["margin_hi"]), 0.0)
            margin = fmt_ci(best["margin"], best["margin_lo"], best["margin_hi"], 1, True)
            ours = f"best {best['setting']}: {margin} pts"
            o = others[(others["benchmark"] == bench) & (others["axis"] == axis)]
            o = o[o["at_equal_speed"] == "beats"]
            ours += "; other rules beating the frontier: " + (", ".join(o["setting"]) if len(o) else "none")
            why = {HOLDS: "the best setting's margin over the frontier has a CI above 0",
                   NOT: "even the best setting is below the frontier (CI below 0)",
                   NOT_SHOWN: "the best setting's margin CI holds 0: not shown to beat dynamic"}[v]  # fmt: skip
            out.append(Outcome(scope, ours, "", v, why))
        return out

    return check


_CI_RULE = "holds: CI above the null; does not hold: CI below it; not shown: the CI holds it"

CLAIMS: tuple[Claim, ...] = (
    Claim("adjacent-similar", "Logits of a block at adjacent denoising steps are very similar.",
          "abstract; motivation section",
          "relative KL at distance 1 (positions with confidence < 0.99, 03_adjacent_step_logits): median KL(A_t‖A_t+1) "
          "of a position over the median KL between that position and the next other masked position of the same "
          "block state, bootstrap CI over positions",
          f"{RELATIVE_KL_MAX} (adjacent steps an order of magnitude closer than two positions); the random inits of "
          "the same shape must fail it", "none (qualitative)", "–",
          f"holds: CI at or below {RELATIVE_KL_MAX} and every random init's CI above; does not hold: CI above; not "
          "shown: the CI holds it, or a random init passes too", "adjacent", _adjacent_similar),
    Claim("mrp-fits-residual", "A small MRP head learns the residual B − A, so A + C approximates the next step.",
          "method", "held-out KL(B‖A+C) at the last training step, or of the loaded released head (04_train_mrp)",
          "the uncorrected KL(B‖A)", "none (training objective)", "–",
          "holds: below the uncorrected KL; else does not hold", "mrp_curve",
          _mrp_fits_residual),
    Claim("speculative-lossless", "Speculative mode is lossless: output identical to static greedy decoding.",
          "abstract; speculative table", "share of outputs token-identical to static(1) (batch-1 grid, every K)",
          "1.0 (exact)", "lossless", "–", "holds: 100% identical on every K; else does not hold", "speculative",
          _spec_lossless),
    Claim("speculative-accuracy", "Speculative mode keeps the baseline's accuracy.", "speculative table",
          f"accuracy of speculative(K={PAPER_SPEC_K}, mrp) vs static(1) on the same prompts (batch-1 grid)",
          "static(1)'s accuracy (exact)", "speculative accuracy per benchmark (speculative.csv)", "–",
          "holds: equal; else does not hold", "speculative", _spec_accuracy),
    Claim("speculative-speedup", "Up to 1.4× lossless throughput speedup (K = 3).", "abstract; speculative table",
          f"wall-clock tokens/s of speculative(K={PAPER_SPEC_K}, mrp) over static(1), paired bootstrap CI over "
          "prompts; measurement of record: 05's batch-1 grid (speculative_runs: one prompt at a time, every "
          "setting of a prompt decoded in turn)", "1.0 (static)",
          "throughput_speedup per benchmark (speculative.csv, K = 3)",
          f"comparable profiles: speedup >= {1 - SPEEDUP_TOLERANCE:.2f} × the paper's",
          f"{_CI_RULE}; sized (see tolerance)", "speculative", _spec_speedup),
    Claim("direct-tradeoff", "Direct mode trades a little accuracy for more speed (MRP step 1 / step 2).",
          "direct table", "per benchmark and step: wall-clock speedup over static(1) (CI) and the paired accuracy "
          "change (CI), modes grid at the decoding batch size",
          f"speedup 1.0; accuracy change -{DIRECT_MAX_DROP:g} points (the paper's largest drop, 9.8, rounded up); "
          "step 2 faster than step 1",
          "speedup and accuracy change per benchmark and step (direct.csv)",
          f"comparable profiles: speedup >= {1 - SPEEDUP_TOLERANCE:.2f} × the paper's and accuracy change >= the "
          f"paper's − {GAIN_TOLERANCE:g} points",
          "holds: every speedup CI above 1, step 2 faster, every accuracy-change CI above the bound; does not hold: a "
          "CI on the wrong side or step 2 not faster; not shown: a CI holds its null", "direct", _direct_tradeoff),
    Claim("naive-mtp-collapses", "Naive multi-token prediction collapses as lookahead K grows.", "lookahead table",
          "naive MTP accuracy at the largest lookahead K (CI), modes grid", "half of its accuracy at K = 1",
          "naive_mtp accuracy by K (lookahead.csv; SDAR-4B GSM8K only)", "–",
          "holds: CI below half; does not hold: CI above; not shown: the CI holds it", "lookahead", _naive_collapses),
    Claim("mrp-graceful", "MRP degrades gracefully with lookahead where naive MTP collapses.", "lookahead table",
          "paired accuracy difference direct(K) − naive MTP(K) on the same prompts, every K >= 2", "0",
          "mrp − naive_mtp by K (lookahead.csv; SDAR-4B GSM8K only)", "–",
          "holds: every CI above 0; does not hold: some CI below 0; not shown: otherwise", "lookahead", _mrp_graceful),
    Claim("remask-recovers", "Remasking recovers accuracy lost at low confidence thresholds.",
          "abstract; remasking table", f"paired accuracy gain of remask(τ, tau) over dynamic(τ) ({_REMASK_FAMILY}) at "
          "the paper's lowest τ, per benchmark; τ below the paper's range in extension rows", "0",
          "gain at the same τ and benchmark (remasking.csv)", "–", _CI_RULE, "remasking", _remask_recovers),
    Claim("remask-max-gain", "Remasking gains up to +22.6 points (HumanEval, SDAR-8B) and +17.7 (GSM8K, SDAR-4B).",
          "abstract; remasking table",
          f"the largest paired gain over the paper's τ range ({_REMASK_FAMILY}), per benchmark",
          "0", "the declared model's largest gain over τ for the benchmark (remasking.csv)",
          f"comparable profiles: gain >= the paper's − {GAIN_TOLERANCE:g} points", f"{_CI_RULE}; sized",
          "remasking", _remask_max),
    Claim("remask-gain-shrinks", "The lower the threshold, the more remasking helps.", "remasking table",
          "paired difference gain(lowest τ) − gain(highest τ) over the τ run within the paper's range (tiny: 0.5 "
          "and 0.9), rule tau, per benchmark; a τ below the paper's range vs the highest in extension rows", "0",
          "the declared model's gains at those τ "
          "(remasking.csv)", "–", _CI_RULE, "remasking", _remask_shrinks),
    Claim("remask-equal-speed", "(Not a paper claim.) Remasking beats plain dynamic decoding at equal speed.",
          "issue 23: matched-speed comparison", "accuracy margin of remask(τ, tau) over the dynamic frontier "
          "(static + dynamic(τ), Pareto points joined) at the same TPF / wall-clock speedup, paired bootstrap CI; "
          "the best τ in the paper's range, per benchmark and axis (report.pareto, matched_speed.md)", "0",
          "none (the paper compares at equal τ only)", "–",
          f"{_CI_RULE} (the best setting's margin)", "matched_speed", _equal_speed("remask")),
    Claim("direct-equal-speed", "(Not a paper claim.) Direct mode beats plain dynamic decoding at equal speed.",
          "issue 23: matched-speed comparison", f"accuracy margin of direct(K in {DIRECT_STEPS}) over the dynamic "
          "frontier at the same TPF / wall-clock speedup, paired bootstrap CI; the better step, per benchmark and axis",
          "0", "none", "–", f"{_CI_RULE} (the best setting's margin)", "matched_speed", _equal_speed("direct")),
)  # fmt: skip


# ----------------------------------------------------------------------------- evaluation and report


def is_numeric_profile(profile) -> bool:
    """Whether sized claims compare the paper's numbers (the profile's declared paper.comparable: the real SDAR
    backbones) or only their direction (tiny, smoke, sdar-mini)."""
    return profile.paper.comparable


def tables_from_results(results: dict[str, pd.DataFrame], n_boot: int = 1000, ci: float = 0.95,
                        seed: int = 0) -> dict[str, pd.DataFrame]:  # fmt: skip
    """The tables the claims read, built from the notebooks' result files (paper.RESULTS names)."""
    out: dict[str, pd.DataFrame] = {}
    for name in ("adjacent", "mrp_curve", "mrp_heldout", "backbone", "direct_runs", "lookahead_runs", "remasking_runs"):
        if name in results:
            out[name] = results[name]
    kw = {"n_boot": n_boot, "ci": ci, "seed": seed}
    if "speculative_runs" in results:  # the measurement of record: batch 1, every setting of a prompt in turn
        out["speculative"] = paper.speculative_table(results["speculative_runs"], **kw)
    if "direct_runs" in results:
        out["direct"] = paper.direct_table(results["direct_runs"], **kw)
    if "lookahead_runs" in results:
        out["lookahead"] = paper.lookahead_table(results["lookahead_runs"], **kw)
    if "remasking_runs" in results:
        out["remasking"] = paper.remasking_table(results["remasking_runs"], **REMASK_CLAIMS_FROM, **kw)
    modes = set(results["modes_runs"]["mode"]) if "modes_runs" in results else set()
    if {"static", "dynamic"} <= modes and modes & set(pareto.COMPARED):  # else: not measured
        out["matched_speed"] = pareto.matched_speed_table(results["modes_runs"], **kw)
    if "wallclock_passes" in results:  # 05's repeated passes: the speed verdicts' sanity checks (report.wallclock)
        out["wallclock_checks"] = wallclock.checks_table(results, **kw)
    return out


def _declared_model(tables: dict[str, pd.DataFrame]) -> str:
    for t in tables.values():
        if "paper_model" in t.columns and len(t):
            return str(t["paper_model"].iloc[0])
    return ""


def check_claims(tables: dict[str, pd.DataFrame], numeric: bool = False, paper_model: str | None = None,
                 n_boot: int = 1000, ci: float = 0.95) -> pd.DataFrame:  # fmt: skip
    """One row per claim and scope: id, scope, claim, paper, ours, verdict, reason, extension, and the claim's
    declared test (statistic, null, paper_number, tolerance, verdict_rule, table, source). paper_model: the profile's
    declared paper.model (default: the tables' own paper_model column)."""
    ctx = Context(numeric, paper_model if paper_model is not None else _declared_model(tables), n_boot, ci)
    rows = []
    for c in CLAIMS:
        try:
            outs = c.check(tables, ctx)
        except KeyError as e:  # a table without a column the check reads (require names it)
            outs = na(f"could not read `{c.table}`: {type(e).__name__}: {e}")
        outs = wallclock.gate(c.id, outs, tables.get("wallclock_checks"))  # a failed clock check: not measurable
        for o in outs:
            rows.append({"id": c.id, "scope": o.scope, "claim": c.text, "paper": o.paper, "ours": o.ours,
                         "verdict": o.verdict, "reason": o.reason, "extension": o.extension, "statistic": c.statistic,
                         "null": c.null, "paper_number": c.paper_number, "tolerance": c.tolerance,
                         "verdict_rule": c.rule,
                         "table": c.table, "source": c.source})  # fmt: skip
    return pd.DataFrame(rows)


