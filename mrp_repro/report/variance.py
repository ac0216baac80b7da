"""Seed spread of every headline number (issue 22): how far each moves with the head's seed and the backbone's.

    .venv/bin/python -m mrp_repro.report.variance --profile tiny                  # make variance: seeds 0 1 2 of both
    .venv/bin/python -m mrp_repro.report.variance --profile tiny --head-seeds 0 1 2 --backbone-seeds 0 1 --threads 1

    from mrp_repro.report import variance
    res = variance.run(profile, head_seeds=(0, 1, 2), backbone_seeds=(0, 1))   # figures/<profile>/variance.*
    variance.robust_verdict(["holds", "holds in direction; size not compared", "holds"])  # Robustness(robust=True)
    variance.seed_results(profile, variance.HEAD, 1)    # one seed's result frames, for claims.tables_from_results

Two kinds of seed, each a full re-run of what it covers:
- head seed s: a head trained with profile seed s (its initialisation, batch order and held-out split: train_mrp
  keys all three by the seed) on the profile's own (published) backbone and trajectories, under
  runs/<profile>/variance-head-<key>/ (stages' head directory of seed s would name seed-s trajectories);
- backbone seed s: the whole pipeline of profile.replace({"seed": s}) through mrp_repro.stages: the backbone's init
  and noise (its data order is keyed by data.seed, which also picks the evaluation prompts, so it stays), then its
  trajectories and its head. The profile's own seed is the published run of both kinds.

Every control on every seed (issue 35): each seed run decodes, beside MRP's settings (static, dynamic(τ), remask(τ,
tau), speculative(3, mrp), direct(K), naive_mtp(K)), every no-MRP control of the published run (report.grids'
controls: the dense dynamic frontier, the random and lowest-confidence vetoes, the untrained head's direct(K), and the
no-head drafter speculative(3, naive)) with its cost model (head_cost at the decoding batch), so claims.md gives each
control verdict across seeds (control_across_seeds, other_control_across_seeds).

The published head is chosen by a rule declared before decoding (PUBLISHED_HEAD_RULE: the head seed whose held-out KL
ratio KL(B‖A+C) / KL(B‖A), from training alone, is the median of the head seeds): `run` trains every head seed first,
applies the rule and records which seed it chooses beside the published one (variance_heads.{md,csv}); a published
head the rule does not choose is said so in variance.md's note (republishing is the profile owner's step).

Headlines (HEADLINES), each per task where it has one, on the same prompts for every seed: static accuracy,
dynamic τ=0.5 accuracy, the largest remasking gain over τ (rule tau, paired against dynamic(τ)), the adjacent-step
median KL (confidence < 0.99, distance 1), the held-out KL ratio KL(B‖A+C) / KL(B‖A), speculative TPF at K=3.
variance.{md,csv,tex}: per headline and kind, the published value (the profile's seed) with its bootstrap CI over
prompts, and the across-seed mean, standard deviation, min and max; variance_seeds.csv every seed's value;
variance.{png,pdf} every seed's value beside the published one.

Cost (tiny, 2 cores): a head seed ~3 min of training + ~1 min of decoding before issue 35 (the controls add the
dense frontier's 15 dynamic τ, 8 veto decodes with their dry runs, direct(K) and naive_mtp(K) at 4 K, the untrained
head and the no-head drafter: a few minutes more per seed, not yet measured); a backbone seed adds its backbone (9 min
on 2 free cores, 22.7 min in a clean `make reproduce`) and its trajectories. docs/ablations.md has the measured times.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from mrp_repro.config import DEFAULT_PROFILE
from mrp_repro.measure.schema import TABLE_COLUMNS
from mrp_repro.report import verdicts
from mrp_repro.report.variance_spread import COLUMNS, HEADLINES
from mrp_repro.report.variance_store import BACKBONE, HEAD, SEED_COLUMNS

__all__ = ["HEADLINES", "COLUMNS", "SEED_COLUMNS", "Robustness", "robust_verdict", "headline_values", "seed_run",
           "seed_results", "SEED_CLAIMS", "CONTROL_ONLY_CLAIMS", "ALL_SEEDS", "CLAIM_COLUMNS", "claims_across_seeds",
           "load_claims_across_seeds", "PUBLISHED_HEAD_RULE", "HEAD_COLUMNS", "rule_choice",
           "run", "main"]  # fmt: skip

# the headlines and the spread table's columns (variance_spread), the seed kinds and the per-seed files' columns
# (variance_store): defined there, where the modules that write them need them without importing this one
#: the seed_kind of variance_claims' rows judged over every seed run: the published one, then both kinds' others
ALL_SEEDS = verdicts.ALL_SEEDS
#: the claims judged on every seed (variance_claims.*, and claims.md's across-seeds columns): each reads only what a
#: seed run measures (_settings: MRP's settings and every control, at the decoding batch size; the head's curve;
#: adjacent steps at distance 1), their controls too. Not judged: the package's own rules (a seed decodes rule tau
#: only) and the wall-clock gate's passes (so a wall-clock verdict claims.md reads "not measurable here" is another
#: test across seeds: not attached). A seed's adjacent-similar check has no random-init rows: the random inits do not
#: depend on the seed, and the published run's fail the statistic (claims.md).
SEED_CLAIMS = ("adjacent-similar", "mrp-fits-residual", "speculative-lossless", "speculative-accuracy",
               "speculative-speedup", "direct-tradeoff", "naive-mtp-collapses", "mrp-graceful", "remask-recovers",
               "remask-max-gain", "remask-gain-shrinks", "remask-equal-speed", "direct-equal-speed")  # fmt: skip
#: claims whose verdict a seed run measures otherwise than claims.md (speculative-speedup: claims.md reads the batch-1
#: grid's wall clock, a seed its decoding batch): only their controls are judged across seeds (the weighted-TPF
#: ratio to the no-head drafter is a TPF measure, the batch's head_cost its charge)
CONTROL_ONLY_CLAIMS = ("speculative-speedup",)
_CLAIMS = ("id", "scope", "seed_kind", "seeds", "seed_verdicts", "verdict_across_seeds", "robust", "robust_reason",
           "declared", "seed_control_verdicts", "control_across_seeds", "seed_other_control_verdicts",
           "other_control_across_seeds")
#: the rule that chooses the published head among the head seeds, declared before any decoding (issue 35)
PUBLISHED_HEAD_RULE = ("the head seed whose held-out KL ratio KL(B‖A+C) / KL(B‖A) (the head's metrics.json, from "
                       "training alone) is the median of the head seeds (an even count: the lower of the two middle "
                       "ones; ties: the lower seed)")
_HEADS = ("seed", "heldout_kl", "heldout_baseline_kl", "heldout_kl_ratio", "chosen_by_rule", "published_head",
          "computed_at", "profile_hash")  # fmt: skip
CLAIM_COLUMNS = {c: TABLE_COLUMNS[c] for c in _CLAIMS}
HEAD_COLUMNS = {c: TABLE_COLUMNS[c] for c in _HEADS}


# ----------------------------------------------------------------------------- robustness


@dataclass(frozen=True)
class Robustness:
    robust: bool
    verdict: str  # the weakest verdict over the measured seeds
    reason: str


def robust_verdict(verdicts: Sequence[str]) -> Robustness:
    """A claim's verdict judged across seeds: `verdicts` has one verdict (report.claims.VERDICTS) per seed, each
    computed by the same check on that seed's tables. Seeds where it is not measurable are left out; robust only
    when at least two seeds were measured and every one holds (or holds in direction, its size not compared); the
    verdict is the weakest measured one, in the order of report.verdicts.VERDICTS."""
    from mrp_repro.report.verdicts import DIRECTION, HOLDS, NA, VERDICTS

    bad = [v for v in verdicts if v not in VERDICTS]
    if bad:
        raise ValueError(f"robust_verdict: unknown verdict(s) {bad}; valid: {', '.join(VERDICTS)}")
    measured = [v for v in verdicts if v != NA]
    if not measured:
        return Robustness(False, NA, f"measurable on none of {len(verdicts)} seeds")
    rank = {v: i for i, v in enumerate(VERDICTS)}  # holds, direction, short, not shown, does not hold
    weakest = max(measured, key=rank.__getitem__)
    passing = sum(v in (HOLDS, DIRECTION) for v in measured)
    where = f"holds on {passing} of {len(measured)} measured seeds"
    if len(measured) < 2:
        return Robustness(False, weakest, f"{where}: one seed cannot show robustness")
    return Robustness(weakest in (HOLDS, DIRECTION), weakest, where)


# ----------------------------------------------------------------------------- one seed


def _settings(P, head):
    """A seed run's settings: MRP's (static, dynamic(τ) and remask(τ, tau) at every remasking τ, speculative(3, mrp),
    direct(K) at the direct steps and every lookahead K, naive_mtp(K)) and every no-MRP control beside them (the
    no-head drafter speculative(3, naive); report.grids.control_settings: the dense frontier, both vetoes, the
    untrained head), in that order; the control rows are seed_results' controls_runs."""
    from mrp_repro.decoding import Direct, Dynamic, NaiveLookahead, Remask, Speculative, Static
    from mrp_repro.report.grids import control_settings

    d = P.decoding
    taus = sorted({0.5, 0.3, *d.thresholds}, reverse=True)
    out = [("static", Static(1))] + [("dynamic", Dynamic(t)) for t in taus]
    out += [("remask", Remask(t, "tau", head=head)) for t in taus]
    out += [("speculative", Speculative(3, dr, head=head, verify=d.verify)) for dr in ("mrp", "naive")]
    out += [("direct", Direct(k, head=head)) for k in sorted({1, 2, *d.lookahead_k})]
    out += [("naive", NaiveLookahead(k + 1)) for k in d.lookahead_k]
    return out + [x for x in control_settings(P, head) if x[0] != "static"]


def _control_names(P, head) -> set[str]:
    from mrp_repro.report.grids import control_settings

    return {p.name for m, p in control_settings(P, head) if m != "static"}


def headline_values(runs: pd.DataFrame, adjacent: pd.DataFrame, metrics: dict, n_boot: int = 1000,
                    ci: float = 0.95, seed: int = 0) -> list[dict]:  # fmt: skip
    """[{headline, benchmark, seed_value, seed_value_lo, seed_value_hi}] of one seed: its runs frame (static,
    dynamic(τ), remask(τ, tau), speculative(3, mrp)), its adjacent-step frame (measure.adjacent) and its head's
    metrics.json."""
    from mrp_repro.measure.adjacent import SUBSET, TRAINED
    from mrp_repro.measure.stats import mean_ci, ratio_ci
    from mrp_repro.report.paper import remasking_table

    out = []
    for task, g in runs.groupby("benchmark"):
        for name, sel in (("static_accuracy", g["mode"] == "static"),
                          ("dynamic_accuracy_tau50", (g["mode"] == "dynamic") & np.isclose(g["threshold"], 0.5))):
            v = mean_ci(g.loc[sel, "correct"].astype(float), n_boot, ci, seed)
            out.append(dict(headline=name, benchmark=task, seed_value=v[0], seed_value_lo=v[1], seed_value_hi=v[2]))
        rem = remasking_table(g, rule="tau", n_boot=n_boot, ci=ci, seed=seed)
        i = rem["gain"].idxmax()
        out.append(dict(headline="max_remask_gain", benchmark=task, seed_value=float(rem.loc[i, "gain"]),
                        seed_value_lo=float(rem.loc[i, "gain_lo"]), seed_value_hi=float(rem.loc[i, "gain_hi"])))
        s = g[(g["mode"] == "speculative") & np.isclose(g["K"], 3)]
        ones = np.ones(len(s))
        v = ratio_ci(s["tokens"], s["denoise_forwards"], ones, ones, n_boot, ci, seed)  # a ratio over 1: TPF
        out.append(dict(headline="spec_tpf_k3", benchmark=task, seed_value=v[0], seed_value_lo=v[1],
                        seed_value_hi=v[2]))
    a = adjacent[(adjacent["model"] == TRAINED) & (adjacent["subset"] == SUBSET) & (adjacent["distance"] == 1)]
    out.append(dict(headline="adjacent_kl_median", benchmark="all", seed_value=float(a["kl_median"].iloc[0])
                    if len(a) else math.nan, seed_value_lo=math.nan, seed_value_hi=math.nan))  # fmt: skip
    rel = [float(a[c].iloc[0]) if len(a) else math.nan for c in ("relative_kl", "relative_kl_lo", "relative_kl_hi")]
    out.append(dict(headline="adjacent_relative_kl", benchmark="all", seed_value=rel[0], seed_value_lo=rel[1],
                    seed_value_hi=rel[2]))
    base = metrics.get("heldout_baseline_kl") or math.nan
    out.append(dict(headline="heldout_kl_ratio", benchmark="all", seed_value=metrics.get("heldout_kl", math.nan) / base,
                    seed_value_lo=math.nan, seed_value_hi=math.nan))  # fmt: skip
    return out


def _csv_cached(path: Path, compute) -> pd.DataFrame:
    """path's frame, computed and written first when missing, with the commit that computed it (runtime.
    stamp_computed): the variance tables' provenance line names every seed decode they read and whether this run or
    an earlier one computed it (runtime.note_read)."""
    from mrp_repro.runtime import note_read, stamp_computed

    if not path.exists():
        df = compute()
        tmp = path.with_name(f".{path.name}.tmp")
        df.to_csv(tmp, index=False)
        tmp.replace(path)
        stamp_computed(path)
    note_read(path)
    return pd.read_csv(path, keep_default_na=False, na_values=[""])


def _head_seed(P, bb, s: int, progress: bool):
    """(head, its directory) of head seed s on P's backbone and P's own trajectories (see the module docstring)."""
    from mrp_repro import stages
    from mrp_repro.mrp import load_head
    from mrp_repro.runtime import artifact_dir
    from mrp_repro.training.mrp import train_mrp, train_sources
    from mrp_repro.trajectories import model_fingerprint

    if s == P.seed:
        return stages.head(P, bb, progress=progress), stages.head_dir(P, bb)
    if P.mrp.pretrained or P.mrp_training.recipe != "offline":
        raise ValueError("variance: head seeds train offline heads; this profile loads a released head or trains "
                         "online (run backbone seeds, or set mrp_training.recipe: offline)")
    Ps = P.replace({"seed": s})
    dirs = [stages.trajectories(P, bb, src, progress=progress) for src in train_sources(P)]
    key = hashlib.sha256(f"{stages.head_dir(Ps, bb).name}|{'|'.join(d.name for d in dirs)}".encode()).hexdigest()
    out = artifact_dir(P, "variance-head", key[:12])
    if not (out / "done.json").exists():
        train_mrp(Ps, bb, dirs, out, progress=progress, resume=True)
    m = bb.model
    head = load_head(out / "head", m.config, device=m.lm_head.weight.device, dtype=m.lm_head.weight.dtype,
                     backbone_hash=model_fingerprint(m))  # fmt: skip
    return head, out


def seed_run(P, kind: str, s: int, n_prompts: int | None = None, threads: int | None = None,
             progress: bool = False, bb=None) -> dict:  # fmt: skip
    """One seed of one kind: {"runs", "adjacent", "metrics", "head_dir", "values"}; every part cached. bb: the
    profile's own backbone (head seeds; loaded when None)."""
    from mrp_repro import published, stages
    from mrp_repro.measure.adjacent import adjacent_step_similarity
    from mrp_repro.measure.runs import collect_runs, eval_problems
    from mrp_repro.report.grids import refine_frontier
    from mrp_repro.report.paper import RESULTS_SCHEMA
    from mrp_repro.runtime import runs_root, set_num_threads

    if kind == HEAD:
        bb = bb if bb is not None else stages.backbone(P, progress=progress)
        set_num_threads(threads)
        head, hdir = _head_seed(P, bb, s, progress)
        Pe = P
    elif kind == BACKBONE:
        Pe = P.replace({"seed": s})
        trained = published.backbone_dir(Pe) is not None or (stages.backbone_dir(Pe) / "done.json").exists()
        if threads is not None and not trained:  # the published seed is never retrained here
            from mrp_repro.training.backbone import train_backbone

            train_backbone(Pe, stages.backbone_dir(Pe), progress, num_threads=threads)  # the profile's key, N threads
        bb = stages.backbone(Pe, progress=progress)
        set_num_threads(threads)
        head, hdir = stages.head(Pe, bb, progress=progress), stages.head_dir(Pe, bb)
    else:
        raise ValueError(f"kind {kind!r}: {HEAD!r} or {BACKBONE!r}")
    metrics = json.loads((hdir / "metrics.json").read_text())
    d = runs_root() / P.name / "variance"
    d.mkdir(parents=True, exist_ok=True)
    settings = _settings(Pe, head)
    key = hashlib.sha256("|".join(map(str, (hdir.name, [p.name for _, p in settings], n_prompts,
                                            Pe.section_hash("decoding", "data", "evaluation"), RESULTS_SCHEMA)))
                         .encode()).hexdigest()[:12]  # fmt: skip
    base = _csv_cached(d / f"runs-{key}.csv", lambda: collect_runs(Pe, bb, head, n_prompts=n_prompts,
                                                                   settings=settings))  # fmt: skip
    # the frontier refined where it jumps by more than frontier_max_gap (report.grids.refine_frontier), as the
    # published run's controls grid is
    runs = _csv_cached(d / f"runs-{key}-refined.csv", lambda: refine_frontier(Pe, bb, head, base,
                                                                              n_prompts=n_prompts)[0])  # fmt: skip
    refined = sorted(set(runs["setting"]) - set(base["setting"]))
    cost = _cost_cached(d / f"cost-{key}-b{Pe.decoding.batch_size}.csv", Pe, bb, head)
    adj = _csv_cached(d / f"adjacent-{hdir.name}.csv", lambda: adjacent_step_similarity(
        bb, eval_problems(Pe, n=32), max_distance=1, random_baseline=False))
    ev = Pe.evaluation
    controls = _control_names(Pe, head) | set(refined)
    values = headline_values(runs[~runs["setting"].isin(controls)], adj, metrics, ev.bootstrap_samples, ev.ci)
    return {"runs": runs, "adjacent": adj, "metrics": metrics, "head_dir": hdir, "values": values, "cost_model": cost,
            "controls": sorted(controls)}


def _cost_cached(path: Path, P, bb, head) -> pd.DataFrame:
    """The seed's cost model at the decoding batch size (measure.cost.run_cost_model: head_cost charges head calls
    in the weighted-TPF controls), as the cost_model result frame notebook 07 stores."""
    from mrp_repro.measure.cost import run_cost_model

    def compute():
        c = run_cost_model(P, bb, head, batch=P.decoding.batch_size)
        return pd.DataFrame([{"batch_size": c["batch"], "head_cost": c["head_cost"], "t_forward_s": c["t_forward_s"],
                              "source": c["source"]}])  # fmt: skip

    return _csv_cached(path, compute)


def seed_results(P, kind: str, s: int, n_prompts: int | None = None, bb=None,
                 run: dict | None = None) -> dict[str, pd.DataFrame]:  # fmt: skip
    """One seed's result frames under the notebooks' names (report.paper.RESULTS: backbone_runs, backbone,
    remasking_runs, mrp_curve), from its cached runs (seed_run; computed if missing), so that a claim can be
    checked on every seed: claims.check_claims(claims.tables_from_results(seed_results(P, kind, s))), then
    robust_verdict over the seeds' verdicts of each claim."""
    from mrp_repro.report import paper

    r = run if run is not None else seed_run(P, kind, s, n_prompts, bb=bb)  # run: that seed_run, already loaded
    runs, ev = r["runs"], P.evaluation
    is_ctl = runs["setting"].isin(set(r.get("controls", ())))
    static = runs[runs["mode"] == "static"]
    mrp = runs[~is_ctl].reset_index(drop=True)  # the modes grid's part: MRP's settings and their own baselines
    out = {"backbone_runs": mrp[mrp["mode"].isin(["static", "dynamic"])].reset_index(drop=True),
           "backbone": paper.backbone_table(mrp, ev.bootstrap_samples, ev.ci),
           "modes_runs": mrp, **paper.split_runs(mrp),
           "speculative_runs": runs[runs["mode"].isin(["static", "speculative"])].reset_index(drop=True),
           "adjacent": r["adjacent"],
           "mrp_curve": paper.mrp_curve_frame(r["head_dir"] / "loss_curve.csv")}  # fmt: skip
    if is_ctl.any():  # a seed run cached before issue 35 decoded no control: none here
        out["controls_runs"] = pd.concat([static, runs[is_ctl]], ignore_index=True)
    if r.get("cost_model") is not None:
        out["cost_model"] = r["cost_model"]
    return out


def claims_across_seeds(reports: dict[tuple[str, int], pd.DataFrame], published_seed: int) -> pd.DataFrame:
    """reports: (seed kind, seed) -> that seed's claims report (claims.check_claims on seed_results) ->
    CLAIM_COLUMNS: per SEED_CLAIMS claim and scope, robust_verdict over each kind's seeds and over every seed run
    (ALL_SEEDS: the published run once, then both kinds' other seeds). A scope missing on a seed counts as not
    measured there."""
    from mrp_repro.report.verdicts import NA

    def col(r, c):
        v = getattr(r, c, "")
        return "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)

    verdicts = {k: {(r.id, r.scope): r.verdict for r in rep[rep["id"].isin(SEED_CLAIMS)].itertuples()}
                for k, rep in reports.items()}  # fmt: skip
    controls = {c: {k: {(r.id, r.scope): col(r, c) for r in rep[rep["id"].isin(SEED_CLAIMS)].itertuples()}
                    for k, rep in reports.items()} for c in ("control_verdict", "other_control_verdict")}
    # the declared test each verdict was judged by: claims.md attaches an across-seeds verdict only to the same test
    declared = {r.id: getattr(r, "declared", "") for rep in reports.values() for r in rep.itertuples()}
    keys = list(dict.fromkeys(key for v in verdicts.values() for key in v))
    kinds = [k for k in (HEAD, BACKBONE) if any(kk == k for kk, _ in reports)]
    members = {k: sorted((m for m in reports if m[0] == k), key=lambda m: m[1]) for k in kinds}
    pub = next((m for k in kinds for m in members[k] if m[1] == published_seed), None)
    members[ALL_SEEDS] = ([pub] if pub else []) + [m for k in kinds for m in members[k] if m[1] != published_seed]

    def label(m, kind):
        return str(m[1]) if kind != ALL_SEEDS or m == pub else f"{m[0].split()[0]} {m[1]}"

    def across(vs, ms, kind):
        """(per-seed text, weakest (reason)) of one verdict column; blank where no seed has a verdict there."""
        if not any(vs):
            return "", ""
        vs = [v or NA for v in vs]
        rb = robust_verdict(vs)
        per = "; ".join(f"{label(m, kind)}: {v}" for m, v in zip(ms, vs, strict=True))
        return per, f"{rb.verdict} ({rb.reason})"

    rows = []
    for cid, scope in sorted(keys, key=lambda k: SEED_CLAIMS.index(k[0])):
        for kind, ms in members.items():
            vs = [verdicts[m].get((cid, scope), NA) for m in ms]
            rb = robust_verdict(vs)
            c_per, c_all = across([controls["control_verdict"][m].get((cid, scope), "") for m in ms], ms, kind)
            o_per, o_all = across([controls["other_control_verdict"][m].get((cid, scope), "") for m in ms], ms, kind)
            row = {"id": cid, "scope": scope, "seed_kind": kind, "seeds": " ".join(label(m, kind) for m in ms),
                   "seed_verdicts": "; ".join(f"{label(m, kind)}: {v}" for m, v in zip(ms, vs, strict=True)),
                   "verdict_across_seeds": rb.verdict, "robust": rb.robust, "robust_reason": rb.reason,
                   "declared": declared.get(cid, ""), "seed_control_verdicts": c_per, "control_across_seeds": c_all,
                   "seed_other_control_verdicts": o_per, "other_control_across_seeds": o_all}
            if cid in CONTROL_ONLY_CLAIMS:  # another measurement of the verdict itself: only its controls across seeds
                row.update(seed_verdicts="", verdict_across_seeds="", robust="", robust_reason="")
            rows.append(row)
    return pd.DataFrame(rows, columns=list(CLAIM_COLUMNS))


def rule_choice(ratios: dict[int, float]) -> int:
    """PUBLISHED_HEAD_RULE: the seed whose held-out KL ratio is the median of `ratios` (seed -> ratio); an even count
    takes the lower of the two middle ones, ties the lower seed."""
    if not ratios:
        raise ValueError("rule_choice: no head seeds")
    order = sorted(ratios, key=lambda s: (ratios[s], s))
    return order[(len(order) - 1) // 2]


def head_choice(P, bb, head_seeds, progress: bool = False, kept: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every head seed trained (cached), before any decoding, and PUBLISHED_HEAD_RULE applied: HEAD_COLUMNS, one row
    per seed (chosen_by_rule: the rule's seed; published_head: the profile's own seed, the published head). kept:
    head rows an earlier run computed (variance_store.kept_seeds), judged by the rule with the seeds trained now."""
    from mrp_repro.report.variance_store import computed_now

    prov = computed_now(P)
    rows = {int(r["seed"]): {c: r[c] for c in _HEADS[:4] + ("computed_at", "profile_hash")}
            for r in (kept.to_dict("records") if kept is not None else ())}  # fmt: skip
    for s in head_seeds:
        _, hdir = _head_seed(P, bb, s, progress)
        m = json.loads((hdir / "metrics.json").read_text())
        base = m.get("heldout_baseline_kl") or math.nan
        rows[s] = dict(seed=s, heldout_kl=m.get("heldout_kl", math.nan), heldout_baseline_kl=base,
                       heldout_kl_ratio=m.get("heldout_kl", math.nan) / base, **prov)
    chosen = rule_choice({s: r["heldout_kl_ratio"] for s, r in rows.items()})
    out = pd.DataFrame([{**r, "chosen_by_rule": s == chosen, "published_head": s == P.seed}
                        for s, r in sorted(rows.items())], columns=list(_HEADS))  # fmt: skip
    out.attrs["chosen"] = chosen
    return out


def load_claims_across_seeds(directory) -> pd.DataFrame | None:
    """<directory>/variance_claims.csv (written by `make variance`), or None when it has not run."""
    path = Path(directory) / "variance_claims.csv"
    return pd.read_csv(path, keep_default_na=False) if path.exists() else None


def run(profile, head_seeds: Sequence[int] = (0, 1, 2), backbone_seeds: Sequence[int] = (0, 1, 2),
        n_prompts: int | None = None, threads: int | None = None, out=None, progress: bool = False,
        keep_other_seeds: bool = True) -> dict:  # fmt: skip
    """Every seed of both kinds (cached: a killed run resumes), then the tables and the figure. keep_other_seeds: the
    seeds out/'s per-seed files hold from an earlier run and not run now stay in the tables, each named with the
    commit that computed it (report.variance_store); False: only the seeds run now."""
    from mrp_repro import stages
    from mrp_repro.report import tables, variance_store
    from mrp_repro.report.plots_base import save_figure
    from mrp_repro.report.variance_spread import plot_spread, spread_table
    from mrp_repro.runtime import seed_everything, set_num_threads

    P = profile
    seed_everything(P.seed)
    t0 = time.perf_counter()
    from mrp_repro.report import claims

    figs = tables.out_dir(out if out is not None else P)
    n = n_prompts if n_prompts is not None else P.evaluation.n_prompts
    running = {(HEAD, int(s)) for s in head_seeds} | {(BACKBONE, int(s)) for s in backbone_seeds}
    kept = variance_store.kept_seeds(figs, P, running, n) if keep_other_seeds else variance_store.nothing_kept()
    for why in kept.dropped:
        print(f"[variance] not kept: {why}", flush=True)
    prov = variance_store.provenance_of(P, n)
    rows, timing, reports, seed_claims = [], [], dict(kept.reports), list(kept.reports.values())
    ev = P.evaluation
    bb = stages.backbone(P, progress=progress) if head_seeds else None
    heads = None
    if head_seeds or (kept.heads is not None and len(kept.heads)):
        # every head trained, and the published head's rule applied, before anything is decoded
        set_num_threads(threads)
        heads = head_choice(P, bb, head_seeds, progress, kept=kept.heads)
        print(f"[variance] {PUBLISHED_HEAD_RULE}: head seed {heads.attrs['chosen']} (published: {P.seed})", flush=True)
    for kind, seeds in ((HEAD, head_seeds), (BACKBONE, backbone_seeds)):
        for s in seeds:
            ts = time.perf_counter()
            r = seed_run(P, kind, s, n_prompts, threads, progress, bb=bb if kind == HEAD else None)
            rows += [{"seed_kind": kind, "seed": s, **v, **prov} for v in r["values"]]
            found = claims.tables_from_results(seed_results(P, kind, s, run=r), n_boot=ev.bootstrap_samples,
                                               ci=ev.ci)  # fmt: skip
            reports[(kind, s)] = claims.check_claims(found, numeric=claims.is_numeric_profile(P),
                                                     paper_model=P.paper.model, n_boot=ev.bootstrap_samples, ci=ev.ci,
                                                     frontier_max_gap=P.decoding.frontier_max_gap)  # fmt: skip
            seed_claims.append(variance_store.seed_claim_rows(kind, s, reports[(kind, s)], SEED_CLAIMS, prov))
            timing.append((kind, s, time.perf_counter() - ts))
            print(f"[variance] {kind} {s}: {timing[-1][2]:.0f}s ({r['head_dir'].name})", flush=True)
    per_seed = pd.concat([f for f in (pd.DataFrame(rows, columns=list(SEED_COLUMNS)), kept.values) if len(f)]
                         or [pd.DataFrame(columns=list(SEED_COLUMNS))], ignore_index=True)  # fmt: skip
    per_seed = variance_store.in_seed_order(per_seed)
    reports = dict(sorted(reports.items(), key=lambda kv: variance_store.seed_order(*kv[0])))
    table = spread_table(per_seed, P.seed)

    def seeds_of(kind):
        return " ".join(map(str, sorted({s for k, s in reports if k == kind}))) or "none"

    note = (f"Published = the profile's seed {P.seed} (its backbone and head); {n} prompts per task; head seeds "
            f"{seeds_of(HEAD)}, backbone seeds {seeds_of(BACKBONE)}. CIs: bootstrap over prompts of the published "
            "run; std over seeds. Columns: docs/ablations.md." + variance_store.kept_note(kept))  # fmt: skip
    if heads is not None:
        chosen = heads.attrs["chosen"]
        note += (" The published head's rule, declared before decoding "
                 f"(variance.PUBLISHED_HEAD_RULE: {PUBLISHED_HEAD_RULE}),"
                 f" chooses head seed {chosen}: " + ("the published head." if chosen == P.seed else
                 f"not the published head (seed {P.seed}); republishing head seed {chosen} is the profile's next step "
                 "(variance_heads.md)."))  # fmt: skip
        tables.save_table(heads, figs, "variance_heads", digits=4, note=(
            f"Every head seed's held-out KL on its own held-out split (metrics.json, training only: nothing decoded) "
            f"and the seed the declared rule chooses ({PUBLISHED_HEAD_RULE})."))
    tables.save_table(table, figs, "variance", digits=4, note=note)
    tables.write_csv(per_seed, figs / "variance_seeds.csv")
    claim_rows = pd.concat(seed_claims, ignore_index=True) if seed_claims else None
    if claim_rows is not None:
        tables.write_csv(variance_store.in_seed_order(claim_rows)[list(variance_store.SEED_CLAIM_COLUMNS)],
                         figs / variance_store.SEED_CLAIMS_FILE)
    across = claims_across_seeds(reports, P.seed)
    tables.save_table(across, figs, "variance_claims", note=(
        f"Each claim's verdict on every seed (the same checks as claims.md, on that seed's decodes: {n} prompts per "
        "task, speculative at the decoding batch size where claims.md reads the batch-1 grid), judged across seeds "
        "by variance.robust_verdict: robust only when measured on at least two seeds and "
        "holding (or holding in direction) on every one; the verdict is the weakest. Only the claims a seed run "
        "measures (variance.SEED_CLAIMS)."))
    if (figs / "claims.csv").exists():  # claims.md gains its across-seeds column now, not at the next reproduce
        from mrp_repro.report.verdicts import write_report

        report = pd.read_csv(figs / "claims.csv", keep_default_na=False)
        report["extension"] = report["extension"].astype(str) == "True"
        write_report(report, figs, P.name, claims.is_numeric_profile(P), P.paper.model, across)
    fig = plot_spread(per_seed, P.seed)
    save_figure(fig, figs, "variance")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return {"table": table, "per_seed": per_seed, "claims": across, "timing": timing, "heads": heads,
            "kept": kept, "seconds": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default=DEFAULT_PROFILE)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="both kinds (default 0 1 2)")
    ap.add_argument("--head-seeds", type=int, nargs="*", default=None, help="override --seeds for head seeds")
    ap.add_argument("--backbone-seeds", type=int, nargs="*", default=None, help="override --seeds for backbones")
    ap.add_argument("--n", type=int, default=None, help="prompts per task (default evaluation.n_prompts)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads for training and decoding")
    ap.add_argument("--out", type=Path, default=None, help="default: figures/<profile>/")
    ap.add_argument("--fresh", action="store_true", help="drop the seeds an earlier run left in --out's per-seed "
                    "files (default: keep those not run now, each named with the commit that computed it)")
    a = ap.parse_args(argv)
    from mrp_repro.config import load_profile

    hs = a.head_seeds if a.head_seeds is not None else a.seeds
    bs = a.backbone_seeds if a.backbone_seeds is not None else a.seeds
    res = run(load_profile(a.profile), hs, bs, a.n, a.threads, a.out, keep_other_seeds=not a.fresh)
    print(res["table"].to_string(index=False))
    print(f"[variance] done in {res['seconds']:.0f}s")


if __name__ == "__main__":
    from mrp_repro.cli import run_cli

    run_cli(main)
