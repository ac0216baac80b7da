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
(settings outside the paper's grid, e.g. τ = 0.3) in rows of their own, never folded into the paper's claim. The
checks: report.claims_checks (backbone, head, speculative, direct, lookahead), report.claims_remask (remasking and
equal speed), each gated by its no-MRP control (report.claims_controls); this module declares them and evaluates.

Each claim also carries `declared`: its statistic, null and control in one line, fixed before the numbers were
looked at and kept in version control (tests/test_claims.py checks that every check names the statistic and null it
computes in that text), and a `group`: GROUPS, counted apart in claims.md's headline, which counts the paper's claims
only (implementation checks are true by construction under exact verification; the package's own claims are ours).
Every MRP claim has a no-MRP control beside it (report.claims_controls): MRP minus the control, paired over prompts;
where the run decoded the controls an MRP verdict holds only if MRP beats its control.

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

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pandas as pd

from mrp_repro.measure.adjacent import RELATIVE_KL_MAX
from mrp_repro.report import claims_checks as ck
from mrp_repro.report import claims_peers as cp
from mrp_repro.report import claims_remask as cr
from mrp_repro.report import paper, pareto, wallclock
from mrp_repro.report.claims_checks import (
    DIRECT_MAX_DROP,
    DIRECT_STEPS,
    GRACEFUL_MODEL,
    PAPER_SPEC_K,
    SPEEDUP_TOLERANCE,
)
from mrp_repro.report.claims_remask import GAIN_TOLERANCE, REMASK_CLAIMS_FROM, paper_taus
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
    na,
    report_markdown,
    write_report,
)

__all__ = ["Claim", "CLAIMS", "GROUPS", "PAPER_SPEC_K", "SPEEDUP_TOLERANCE", "GAIN_TOLERANCE", "DIRECT_MAX_DROP",
           "tables_from_results", "check_claims", "is_numeric_profile", "paper_taus", "REMASK_CLAIMS_FROM",
           # the verdict vocabulary and the writer (report.verdicts), for the report's callers
           "VERDICTS", "HOLDS", "DIRECTION", "SHORT", "NOT_SHOWN", "NOT", "NA", "Outcome", "report_markdown",
           "write_report"]  # fmt: skip


#: the three groups of the tally, counted apart: the paper's claims (the headline), the implementation's checks (true
#: by construction under exact verification, for any weights), the package's own claims (not the paper's)
GROUPS = {"paper": "the paper's claims", "implementation": "implementation checks (true by construction under "
          "exact verification)", "package": "the package's own claims (not the paper's)"}  # fmt: skip


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
    group: str = "paper"  # GROUPS
    #: statistic, null and control in one line, declared before looking; must name each Outcome's stat and null
    declared: str = ""


_REMASK_FAMILY = f"algorithm {REMASK_CLAIMS_FROM['algorithm']}, rule {REMASK_CLAIMS_FROM['rule']}"


def _named(check, stat: str, null: str):
    """check, its outcomes naming the statistic and null it computes (not-measured rows name none)."""

    def named(tables, ctx) -> list[Outcome]:
        return [o if o.verdict == NA else replace(o, stat=stat, null=null) for o in check(tables, ctx)]

    return named


_CI_RULE = "holds: CI above the null; does not hold: CI below it; not shown: the CI holds it"


_CONTROL_GATE = ("where the run decoded the controls, a holding verdict reads not shown unless MRP beats its control "
                 "of record (report.claims_controls)")
#: the control of record of direct mode and remasking, in the declared texts (report.claims_controls.frontier)
_FRONTIER = ("the dynamic frontier (static(1) and dynamic(τ) at decoding.thresholds and the dense "
             "decoding.frontier_thresholds, Pareto points joined) at the MRP setting's TPF and at its weighted TPF "
             "(head calls charged at the measured head_cost), margin paired bootstrap CI, null 0, never read across a "
             "frontier segment wider than decoding.frontier_max_gap points")


CLAIMS: tuple[Claim, ...] = (
    Claim("adjacent-similar", "Logits of a block at adjacent denoising steps are very similar.",
          "abstract; motivation section",
          "relative KL at distance 1 (positions with confidence < 0.99, 03_adjacent_step_logits): median KL(A_t‖A_t+1) "
          "of a position over the median KL between that position and the next other masked position of the same "
          "block state, bootstrap CI over positions",
          f"{RELATIVE_KL_MAX} (adjacent steps an order of magnitude closer than two positions); the random inits of "
          "the same shape must fail it", "none (qualitative)", "–",
          f"holds: CI at or below {RELATIVE_KL_MAX} and every random init's CI above; does not hold: CI above; not "
          "shown: the CI holds it, or a random init passes too", "adjacent",
          _named(ck.adjacent_similar, "relative KL", str(RELATIVE_KL_MAX)),
          declared=f"statistic: relative KL (median adjacent-step KL over the median KL between two positions), "
          f"bootstrap CI over positions; null: {RELATIVE_KL_MAX}; control: the random inits of the same shape, which "
          "must fail it"),
    Claim("mrp-fits-residual", "A small MRP head learns the residual B − A, so A + C approximates the next step.",
          "method", "held-out KL(B‖A+C) at the last training step, or of the loaded released head (04_train_mrp)",
          "the uncorrected KL(B‖A)", "none (training objective)", "–",
          "holds: below the uncorrected KL; else does not hold", "mrp_curve",
          _named(ck.mrp_fits_residual, "held-out KL(B‖A+C)", "KL(B‖A)"),
          declared="statistic: held-out KL(B‖A+C) of the head (no CI: one held-out set); null: KL(B‖A), which is "
          "also the zero head's (C = 0) value, i.e. the control"),
    Claim("speculative-lossless", "Speculative mode is lossless: output identical to static greedy decoding.",
          "abstract; speculative table", "share of outputs token-identical to static(1) (batch-1 grid, every K)",
          "1.0 (exact)", "lossless", "–", "holds: 100% identical on every K; else does not hold", "speculative",
          _named(ck.spec_lossless, "share of outputs token-identical", "1.0"), group="implementation",
          declared="statistic: share of outputs token-identical to static(1); null: 1.0; true by construction under "
          "exact verification, for any head weights (an implementation check, not evidence about MRP)"),
    Claim("speculative-accuracy", "Speculative mode keeps the baseline's accuracy.", "speculative table",
          f"accuracy of speculative(K={PAPER_SPEC_K}, mrp) vs static(1) on the same prompts (batch-1 grid)",
          "static(1)'s accuracy (exact)", "speculative accuracy per benchmark (speculative.csv)", "–",
          "holds: equal; else does not hold", "speculative",
          _named(ck.spec_accuracy, "accuracy of speculative", "static(1)'s accuracy"), group="implementation",
          declared="statistic: accuracy of speculative(3, mrp); null: static(1)'s accuracy (exact); true by "
          "construction under exact verification, for any head weights (an implementation check)"),
    Claim("speculative-speedup", "Up to 1.4× lossless throughput speedup (K = 3).", "abstract; speculative table",
          f"wall-clock tokens/s of speculative(K={PAPER_SPEC_K}, mrp) over static(1), paired bootstrap CI over "
          "prompts; measurement of record: 05's batch-1 grid (speculative_runs: one prompt at a time, every "
          "setting of a prompt decoded in turn)", "1.0 (static)",
          "throughput_speedup per benchmark (speculative.csv, K = 3)",
          f"comparable profiles: speedup >= {1 - SPEEDUP_TOLERANCE:.2f} × the paper's",
          f"{_CI_RULE}; sized (see tolerance); {_CONTROL_GATE}", "speculative", ck.spec_speedup,
          declared="statistic: wall-clock speedup over static(1) of speculative(3, mrp), paired bootstrap CI over "
          "prompts; null: 1; control: speculative(3, naive) (no head), the weighted_tpf ratio MRP / control with head "
          "calls charged at the measured head_cost, null 1; the oracle drafter's TPF as the ceiling"),
    Claim("direct-tradeoff", "Direct mode trades a little accuracy for more speed (MRP step 1 / step 2).",
          "direct table", "per benchmark and step: wall-clock speedup over static(1) (CI) and the paired accuracy "
          "change (CI), modes grid at the decoding batch size",
          f"speedup 1.0; accuracy change -{DIRECT_MAX_DROP:g} points (the paper's largest drop, 9.8, rounded up); "
          "step 2 faster than step 1",
          "speedup and accuracy change per benchmark and step (direct.csv)",
          f"comparable profiles: speedup >= {1 - SPEEDUP_TOLERANCE:.2f} × the paper's and accuracy change >= the "
          f"paper's − {GAIN_TOLERANCE:g} points",
          "holds: every speedup CI above 1, step 2 faster, every accuracy-change CI above the bound; does not hold: a "
          f"CI on the wrong side or step 2 not faster; not shown: a CI holds its null; {_CONTROL_GATE}", "direct",
          ck.direct_tradeoff,
          declared=f"statistic: speedup over static(1) and paired accuracy change of direct(1), direct(2); null: "
          f"speedup 1 and -{DIRECT_MAX_DROP:g} points; control of record: {_FRONTIER} (direct(1) and direct(2) must "
          "both beat it on both axes); beside it, vs MTP without a head: naive_mtp(K) (the zero head) and direct(K, "
          "untrained) at K = 1, 2, paired accuracy difference MRP − control, null 0"),
    Claim("naive-mtp-collapses", "Naive multi-token prediction collapses as lookahead K grows.", "lookahead table",
          "paired per-prompt difference naive MTP(largest K) − half of static(1) (CI), modes grid",
          "0 (naive MTP at the largest K keeps half of static(1)'s accuracy)",
          "naive_mtp accuracy by K (lookahead.csv; SDAR-4B GSM8K only)", "–",
          "holds: CI below 0; does not hold: CI above; not shown: the CI holds it", "lookahead", ck.naive_collapses,
          declared="statistic: naive MTP at the largest K minus half of static(1), paired over prompts; null: 0 "
          "(collapse is judged against static(1), not against naive K = 1); no MRP in it, so no control"),
    Claim("mrp-graceful", "MRP degrades gracefully with lookahead where naive MTP collapses.", "lookahead table",
          "paired accuracy change direct(K) − static(1) on the same prompts, every K >= 2 the paper has",
          f"the paper's change at that K ({GRACEFUL_MODEL} GSM8K, its only lookahead model) minus {GAIN_TOLERANCE:g} "
          "points", "mrp accuracy by K (lookahead.csv; SDAR-4B GSM8K only)", f"{GAIN_TOLERANCE:g} points (the bound)",
          f"holds: every CI above its bound; does not hold: some CI below it; not shown: otherwise; {_CONTROL_GATE}",
          "lookahead", ck.mrp_graceful,
          declared=f"statistic: paired accuracy change direct(K) − static(1), K >= 2; null: the paper's change minus "
          f"the tolerance (the paper's MRP from its K = 1, {GRACEFUL_MODEL} GSM8K: −3.7, −17.7, −31.4 at K = 2, 3, 4, "
          f"minus {GAIN_TOLERANCE:g}; its table has no static row); control of record: {_FRONTIER} (direct(K) at every "
          "K >= 2); beside it, vs MTP without a head: naive_mtp(K), paired MRP − naive, null 0"),
    Claim("remask-recovers", "Remasking recovers most of the accuracy lost at low confidence thresholds.",
          "abstract; remasking table", f"recovery share (remask(τ) − dynamic(τ)) / (static(1) − dynamic(τ)) "
          f"({_REMASK_FAMILY}) at the paper's lowest τ, per benchmark, paired bootstrap CI over prompts; τ below the "
          "paper's range in extension rows", f"{cr.RECOVERS_MOST} (\"most\")",
          "gain at the same τ and benchmark (remasking.csv)", "–", f"{_CI_RULE}; {_CONTROL_GATE}", "remasking",
          cr.recovers,
          declared=f"statistic: recovery share (remask − dynamic) / (static − dynamic) at τ = 0.5, paired bootstrap "
          f"CI; null: {cr.RECOVERS_MOST}; control of record: {_FRONTIER} (remask(τ, tau)); beside it, the head-free "
          "vetoes random_veto(τ) and confidence_veto(τ) (as many reveals revoked per state and in total, at random or "
          "the least confident), paired accuracy remask − veto, null 0; τ = 0.3 an extension, never in the paper's "
          "claim"),
    Claim("remask-max-gain", "Remasking gains up to +22.6 points (HumanEval, SDAR-8B) and +17.7 (GSM8K, SDAR-4B).",
          "abstract; remasking table",
          f"the largest paired gain over the paper's τ range ({_REMASK_FAMILY}), per benchmark, its CI Bonferroni-"
          "corrected over the τ compared", "0", "the declared model's largest gain over τ for the benchmark "
          "(remasking.csv)", f"comparable profiles: gain >= the paper's − {GAIN_TOLERANCE:g} points",
          f"{_CI_RULE}; sized; {_CONTROL_GATE}", "remasking", cr.max_gain,
          declared="statistic: largest paired gain remask(τ) − dynamic(τ) over the paper's τ, Bonferroni CI over the "
          f"τ compared; null: 0; control of record: {_FRONTIER} (remask at that τ); beside it, the head-free vetoes at "
          "that τ, paired, null 0"),
    Claim("remask-gain-shrinks", "The lower the threshold, the more remasking helps.", "remasking table",
          "paired difference gain(lowest τ) − gain(highest τ) over the τ run within the paper's range (tiny: 0.5 "
          "and 0.9), rule tau, per benchmark; a τ below the paper's range vs the highest in extension rows", "0",
          "the declared model's gains at those τ (remasking.csv)", "–", f"{_CI_RULE}; {_CONTROL_GATE}", "remasking",
          cr.shrinks,
          declared="statistic: gain(lowest τ) − gain(highest τ), paired over prompts; null: 0; control of record: "
          f"{_FRONTIER} (remask at the lowest τ); beside it, the head-free vetoes at the lowest τ, paired, null 0; "
          "τ = 0.3 an extension"),
    Claim("remask-equal-speed", "(Not a paper claim.) Remasking beats plain dynamic decoding at equal speed.",
          "issue 23: matched-speed comparison", "accuracy margin of remask(τ, tau) at the paper's τ = 0.5 over the "
          "dynamic frontier (static + dynamic(τ), Pareto points joined) at the same TPF, the same TPF with head "
          "calls charged at their measured cost (weighted_tpf), and the same wall-clock speedup; paired bootstrap CI; "
          "no best-of over τ (report.claims_remask)", "0", "none (the paper compares at equal τ only)", "–",
          f"{_CI_RULE}; {_CONTROL_GATE}", "matched_speed", cr.equal_speed("remask"), group="package",
          declared="statistic: margin over the dynamic frontier of remask(0.5, tau), per axis (tpf, weighted_tpf, "
          "wall_speedup), paired bootstrap CI, the dense frontier (decoding.frontier_thresholds), never read across a "
          "segment wider than decoding.frontier_max_gap points; null: 0; control of record: the frontier (the "
          "statistic itself); beside it, the head-free vetoes at 0.5, as remask-recovers"),
    Claim("direct-equal-speed", "(Not a paper claim.) Direct mode beats plain dynamic decoding at equal speed.",
          "issue 23: matched-speed comparison", f"accuracy margin of direct(K in {DIRECT_STEPS}) over the dynamic "
          "frontier at the same TPF, weighted_tpf and wall-clock speedup; the better step, its CI Bonferroni-corrected "
          "over the steps", "0", "none", "–", f"{_CI_RULE} (the better step's margin, Bonferroni CI); {_CONTROL_GATE}",
          "matched_speed", cr.equal_speed("direct", DIRECT_STEPS), group="package",
          declared="statistic: margin over the dynamic frontier of the better of direct(1), direct(2), Bonferroni CI "
          "over the two, per axis, the dense frontier, never read across a segment wider than "
          "decoding.frontier_max_gap points; null: 0; control of record: the frontier (the statistic itself); beside "
          "it, vs MTP without a head: naive_mtp(K) and direct(K, untrained), as direct-tradeoff"),
    Claim("remask-own-rules", "(Not a paper claim.) The package's own remask rules (loo, sequential, logp-delta) beat "
          "plain dynamic decoding at equal speed.", "the package's rules (decoding.mrp_modes.REMASK_RULES; issue 35)",
          "accuracy margin over the dense dynamic frontier of the best (rule, τ) of the package's rules "
          f"({', '.join(cr.PACKAGE_RULES)}) at every remasking τ, per benchmark, at equal TPF and equal weighted_tpf "
          "(head calls charged at their measured cost); paired bootstrap CI Bonferroni-corrected over every rule, τ "
          "and benchmark compared; comparisons on a frontier segment wider than decoding.frontier_max_gap points are "
          "left out (report.claims_remask.own_rules)", "0", "none (the paper has no such rules)", "–",
          f"{_CI_RULE} (the best (rule, τ)'s margin, Bonferroni CI)", "matched_speed", cr.own_rules, group="package",
          declared="statistic: margin over the dynamic frontier of the best (rule, τ) of the package's rules loo, "
          "sequential and logp-delta, per benchmark and axis (tpf, weighted_tpf), Bonferroni CI over rules × τ × "
          "benchmarks, never read across a frontier segment wider than decoding.frontier_max_gap points; null: 0; "
          "control of record: the frontier (the statistic itself); no head-free veto is decoded for these rules, so a "
          "holding verdict says the rule beats dynamic decoding at equal speed, not that its head's choice beats a "
          "head-free one"),
    Claim("mrp-vs-peers-speculative", "(Not a paper claim.) MRP speculative decoding is faster than the best "
          "training-free lossless drafter at equal cost.", "issue 37: MRP against its peers",
          "charged-TPF ratio (tokens over forwards, head calls at head_cost and extra block-rows at row_cost, the cost "
          "model's at the grid's batch size) of MRP speculative(3) over the SSD / FreeDave chain speculative(3, naive) "
          "and the Spiffy draft graph spiffy(3), each at the same verify rows and token-identical to static(1); "
          "paired bootstrap CI over prompts (report.claims_peers)", "1", "none (the paper compares with no peer)", "–",
          "holds: the ratio's CI above 1 against every training-free drafter; does not hold: below 1 against one; "
          "not shown otherwise", "peers_runs", cp.speculative, group="package",
          declared="statistic: charged-TPF ratio of MRP speculative(K) over each training-free lossless drafter "
          "(the SSD / FreeDave chain, the Spiffy graph, at K = 3 verify rows; a drafter not token-identical to "
          "static(1) is left out and named), paired bootstrap CI over prompts; null: 1; control of record: the best "
          "training-free drafter (the statistic itself). Declared after tiny's peers table was seen (issue 37), before "
          "any chain16 head"),
    Claim("mrp-vs-peers-remask", "(Not a paper claim.) MRP remasking beats the best training-free method at equal "
          "cost.", "issue 37: MRP against its peers", "accuracy margin (points) of remask(0.5, tau) over the "
          "training-free frontier at its charged TPF: static(1), every dynamic(τ) and WINO(τ1, τ2) of the peers grid, "
          "Pareto points joined; paired bootstrap CI over prompts; not measurable beyond the frontier's fastest point "
          "or across a segment wider than decoding.frontier_max_gap points (report.claims_peers)", "0",
          "none (the paper compares with no peer)", "–", _CI_RULE, "peers_runs", cp.remask, group="package",
          declared="statistic: accuracy margin of remask(0.5, tau) over the training-free frontier at its charged TPF "
          "(static(1), dynamic(τ) and WINO(τ1, τ2), head calls and extra block-rows charged), paired bootstrap CI; "
          "null: 0; control of record: the training-free frontier (the statistic itself). Declared after tiny's "
          "peers table was seen (issue 37), before any chain16 head"),
)  # fmt: skip


# ----------------------------------------------------------------------------- evaluation and report


def is_numeric_profile(profile) -> bool:
    """Whether sized claims compare the paper's numbers (the profile's declared paper.comparable: the real SDAR
    backbones) or only their direction (tiny, smoke, sdar-mini)."""
    return profile.paper.comparable


def tables_from_results(results: dict[str, pd.DataFrame], n_boot: int = 1000, ci: float = 0.95,
                        seed: int = 0) -> dict[str, pd.DataFrame]:  # fmt: skip
    """The tables the claims read, built from the notebooks' result files (paper.RESULTS names): the summaries, and
    the runs frames the paired checks and the controls read (static_runs: our static(1) of modes_runs)."""
    out: dict[str, pd.DataFrame] = {}
    for name in ("adjacent", "mrp_curve", "mrp_heldout", "backbone", "direct_runs", "lookahead_runs", "remasking_runs",
                 "speculative_runs", "controls_runs", "cost_model", "peers_runs"):  # fmt: skip
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
    static = [results[n] for n in ("modes_runs", "backbone_runs", "direct_runs") if n in results]
    if static:  # our static(1) on the decoding grid's prompts (the seed runs: their backbone grid)
        s = static[0]
        out["static_runs"] = s[(s["mode"] == "static") & (s["algorithm"] == "ours")]
    modes = set(results["modes_runs"]["mode"]) if "modes_runs" in results else set()
    if {"static", "dynamic"} <= modes and modes & set(pareto.COMPARED):  # else: not measured
        out["modes_runs"] = results["modes_runs"]
    if "wallclock_passes" in results:  # 05's repeated passes: the speed verdicts' sanity checks (report.wallclock)
        out["wallclock_checks"] = wallclock.checks_table(results, **kw)
    if "speculative" in out:  # one measurement of record per decode, its gate on every wall-clock row
        record = wallclock.record_table(results, out.get("wallclock_checks"), **kw)
        out["speculative"] = wallclock.mark_clock(out["speculative"], "speculative_runs", record,
                                                  runs=results["speculative_runs"], batch_size=1)
    return out


def _declared_model(tables: dict[str, pd.DataFrame]) -> str:
    for t in tables.values():
        if "paper_model" in t.columns and len(t):
            return str(t["paper_model"].iloc[0])
    return ""


def check_claims(tables: dict[str, pd.DataFrame], numeric: bool = False, paper_model: str | None = None,
                 n_boot: int = 1000, ci: float = 0.95, frontier_max_gap: float = pareto.FRONTIER_MAX_GAP,
                 ) -> pd.DataFrame:  # fmt: skip
    """One row per claim and scope: id, scope, claim, paper, ours, verdict, reason, extension, the controls (of record
    and the others), and the claim's declared test (statistic, null, paper_number, tolerance, verdict_rule, table,
    source). paper_model: the profile's declared paper.model (default: the tables' own paper_model column);
    frontier_max_gap: the profile's decoding.frontier_max_gap (the widest frontier segment a comparison reads)."""
    controls = tables.get("controls_runs") is not None and len(tables["controls_runs"]) > 0
    ctx = Context(numeric, paper_model if paper_model is not None else _declared_model(tables), n_boot, ci, controls,
                  frontier_max_gap)  # fmt: skip
    rows = []
    for c in CLAIMS:
        try:
            outs = c.check(tables, ctx)
        except KeyError as e:  # a table without a column the check reads (require names it)
            outs = na(f"could not read `{c.table}`: {type(e).__name__}: {e}")
        outs = wallclock.gate(c.id, outs, tables.get("wallclock_checks"))  # a failed clock check: not measurable
        for o in outs:
            rows.append({"id": c.id, "group": c.group, "scope": o.scope, "claim": c.text, "paper": o.paper,
                         "ours": o.ours, "verdict": o.verdict, "reason": o.reason, "extension": o.extension,
                         "control": o.control, "control_verdict": o.control_verdict,
                         "other_control": o.other_control, "other_control_verdict": o.other_control_verdict,
                         "declared": c.declared,
                         "stat": o.stat, "stat_null": o.null, "statistic": c.statistic, "null": c.null,
                         "paper_number": c.paper_number, "tolerance": c.tolerance, "verdict_rule": c.rule,
                         "table": c.table, "source": c.source})  # fmt: skip
    return pd.DataFrame(rows)
