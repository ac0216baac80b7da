"""What every ablation variant reports, and the declared tests of an axis (report.ablations runs them).

    from mrp_repro.report import ablations_metrics as am
    rows = am.variant_metrics(head_runs, base_runs, metrics, family_runs)   # one row per task of one head
    am.check_claim("depth", table)                     # {ablation, statistic, comparison, verdict_rule, ours, verdict}
    am.recovery_ci(static, dynamic, remask)            # (recovery %, lo, hi, loss in points), paired over prompts

Every variant reports, per task (the same prompts for every head, evaluation.n_prompts unless --n):
- held-out KL(B‖A+C) against KL(B‖A) at step 1 (the head's training metrics; step 1 so K-step heads compare);
- speculative TPF share of the oracle at K = 3 and 5: TPF of speculative(K, mrp) over that of speculative(K, oracle)
  on the same prompts, with a bootstrap CI over prompts, per decoding family (FAMILY_PREFIX): `ours` (tpf_share_k*) and
  the released code's `upstream` speculative (upstream_tpf_share_k*: decoding.upstream, draft logits as the profile's
  decoding.upstream_draft_logits; decoded one prompt at a time, as its acceptance is the batch minimum), both over
  the same oracle drafter's TPF (ours: the released code has none; it is the ceiling of any drafter of K drafts per
  forward, and both families count TPF per row the same way);
- direct step 1 / 2 accuracy;
- remasking recovery at τ = 0.5 and 0.7 (rule `tau`, the paper's): recovery = (acc remask(τ) − acc dynamic(τ)) /
  (acc static − acc dynamic(τ)) in percent, over the same prompts: the share of dynamic decoding's accuracy loss
  against static that remasking wins back (100 = all of it, 0 = none, < 0 = worse than dynamic; blank where dynamic
  loses nothing), with a paired bootstrap CI over prompts (resamples without a loss dropped).

Column names: columns(Ks, taus, families) (COLUMNS at the defaults); the claims' columns CLAIM_COLUMNS.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from mrp_repro.measure.schema import TABLE_COLUMNS

__all__ = ["KS", "TAUS", "KL_TIE", "FAMILY_PREFIX", "AXIS_CLAIMS", "COLUMNS", "CLAIM_COLUMNS", "recovery_ci",
           "share_ci", "share_diff_ci", "variant_metrics", "columns", "check_claim"]  # fmt: skip


#: speculative draft lengths and remasking thresholds every variant is measured at
KS = (3, 5)
TAUS = (0.5, 0.7)
#: relative difference of two held-out KL ratios below which the declared tests call them tied
KL_TIE = 0.02


#: the column prefix of a family's speculative columns ("": ours)
FAMILY_PREFIX = {"ours": "", "upstream": "upstream_"}


def _tau_key(t: float) -> str:
    return f"tau{round(100 * t)}"


# ----------------------------------------------------------------------------- statistics


def _boot(n: int, n_boot: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n, size=(n_boot, n))


def _q(x: np.ndarray, ci: float) -> tuple[float, float]:
    x = x[np.isfinite(x)]
    if x.size == 0:
        return (math.nan, math.nan)
    a = (1 - ci) / 2
    return float(np.quantile(x, a)), float(np.quantile(x, 1 - a))


def recovery_ci(static, dynamic, remask, n_boot: int = 1000, ci: float = 0.95, seed: int = 0):
    """(recovery %, lo, hi, loss in points): 100 * (mean remask - mean dynamic) / (mean static - mean dynamic) over
    paired prompts (0/1 correctness arrays), NaN when dynamic loses nothing (static - dynamic <= 0)."""
    s, d, r = (np.asarray(x, dtype=float) for x in (static, dynamic, remask))
    if not (s.shape == d.shape == r.shape):
        raise ValueError("recovery_ci: static, dynamic and remask must be paired on the same prompts")

    def rec(idx):
        loss = s[idx].mean(-1) - d[idx].mean(-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(loss > 0, 100 * (r[idx].mean(-1) - d[idx].mean(-1)) / loss, np.nan)

    loss = 100 * float(s.mean() - d.mean()) if s.size else math.nan
    point = float(rec(np.arange(s.size))) if s.size else math.nan
    if s.size < 2 or n_boot <= 0 or math.isnan(point):
        return (point, point, point, loss)
    return (point, *_q(rec(_boot(s.size, n_boot, seed)), ci), loss)


def share_ci(tok_m, fwd_m, tok_o, fwd_o, n_boot: int = 1000, ci: float = 0.95, seed: int = 0):
    """(share, lo, hi): (Σ tok_m / Σ fwd_m) / (Σ tok_o / Σ fwd_o), the TPF of a drafter over the oracle's on paired
    prompts (measure.stats.ratio_ci, whose resampling it is)."""
    from mrp_repro.measure.stats import ratio_ci

    return ratio_ci(tok_m, fwd_m, tok_o, fwd_o, n_boot, ci, seed)


def share_diff_ci(a: tuple, b: tuple, oracle: tuple, n_boot: int = 1000, ci: float = 0.95, seed: int = 0):
    """(share_b - share_a, lo, hi): two drafters' TPF shares of the oracle on the same prompts, one resampling for
    both (a paired difference). a, b, oracle: (tokens, denoise_forwards) arrays per prompt."""
    arrs = [np.asarray(x, dtype=float) for pair in (a, b, oracle) for x in pair]
    n = arrs[0].size
    if any(x.size != n for x in arrs) or n == 0:
        raise ValueError("share_diff_ci: every array must hold the same prompts")

    def diff(idx):
        ta, fa, tb, fb, to, fo = (x[idx].sum(-1) for x in arrs)
        tpf_o = to / fo
        return (tb / fb) / tpf_o - (ta / fa) / tpf_o

    point = float(diff(np.arange(n)))
    if n < 2 or n_boot <= 0:
        return (point, point, point)
    return (point, *_q(diff(_boot(n, n_boot, seed)), ci))


def _by_problem(runs: pd.DataFrame, bench: str, mode: str, K: float | None = None,
                tau: float | None = None) -> pd.DataFrame:  # fmt: skip
    """The rows of one setting on one task (selected by the schema's mode, K, threshold), indexed by problem_id."""
    g = runs[(runs["mode"] == mode) & (runs["benchmark"] == bench)]
    if K is not None:
        g = g[np.isclose(g["K"].astype(float), K)]
    if tau is not None:
        g = g[np.isclose(g["threshold"].astype(float), tau)]
    if g.empty or g["setting"].nunique() != 1:
        raise ValueError(f"ablations: {g['setting'].nunique()} settings of mode {mode} (K={K}, τ={tau}) on {bench}")
    return g.set_index("problem_id").sort_index()


def variant_metrics(head_runs: pd.DataFrame, base_runs: pd.DataFrame, metrics: dict,
                    family_runs: dict[str, pd.DataFrame] | None = None, Ks: Sequence[int] = KS,
                    taus: Sequence[float] = TAUS, n_boot: int = 1000, ci: float = 0.95,
                    seed: int = 0) -> list[dict]:  # fmt: skip
    """One row per task of one head: the metrics of the module docstring (column names: columns()). head_runs: the
    head's decodes in family ours; family_runs: another family -> the head's speculative decodes in that family."""
    from mrp_repro.measure.stats import mean_ci

    kl, base = metrics.get("heldout_kl_step1", math.nan), metrics.get("heldout_baseline_kl_step1", math.nan)
    rows = []
    for bench in sorted(set(head_runs["benchmark"])):
        static = _by_problem(base_runs, bench, "static")
        row = {"benchmark": bench, "n": len(static), "heldout_kl_step1": kl, "heldout_baseline_kl_step1": base,
               "heldout_kl_ratio": kl / base if base and not math.isnan(base) else math.nan,
               "head_train_s": metrics.get("train_time_s", math.nan)}  # fmt: skip
        for fam, runs in {"ours": head_runs, **(family_runs or {})}.items():
            for K in Ks:
                m = _by_problem(runs, bench, "speculative", K=K)  # the head's drafter
                o = _by_problem(base_runs, bench, "speculative", K=K).loc[m.index]  # the oracle
                c = f"{FAMILY_PREFIX[fam]}tpf_share_k{K}"
                row[c], row[f"{c}_lo"], row[f"{c}_hi"] = share_ci(m["tokens"], m["denoise_forwards"], o["tokens"],
                                                                  o["denoise_forwards"], n_boot, ci, seed)  # fmt: skip
        row["static_accuracy"] = 100 * static["correct"].astype(float).mean()
        for s in (1, 2):
            g = _by_problem(head_runs, bench, "direct", K=s)
            c = f"direct_step{s}_accuracy"
            row[c], row[f"{c}_lo"], row[f"{c}_hi"] = mean_ci(g["correct"].astype(float), n_boot, ci, seed)
        for t in taus:
            dyn = _by_problem(base_runs, bench, "dynamic", tau=t).loc[static.index]
            rem = _by_problem(head_runs, bench, "remask", tau=t).loc[static.index]
            c = f"remask_recovery_{_tau_key(t)}"
            row[c], row[f"{c}_lo"], row[f"{c}_hi"], row[f"dynamic_loss_{_tau_key(t)}"] = recovery_ci(
                static["correct"], dyn["correct"], rem["correct"], n_boot, ci, seed)
        rows.append(row)
    return rows


def columns(Ks: Sequence[int] = KS, taus: Sequence[float] = TAUS, families: Sequence[str] = tuple(FAMILY_PREFIX)
            ) -> dict[str, str]:  # fmt: skip
    """Every column of an ablation table (name -> definition) for these K, τ and families; CIs: <column>_lo / _hi."""
    out = {
        "ablation": "the ablated design choice: depth, objective, k_steps, train_source, init (or released)",
        "label": "the head on this axis ('paper:' the paper's choice, 'ours:' the profile's)",
        "variant": "the profile overrides the head was trained with (mrp.pretrained: the released head it loads), "
        "key=value,...",
        "benchmark": "the benchmark the decoding metrics are measured on (a runs column)",
        "n": "prompts per task (the same prompts for every variant)",
        "heldout_kl_step1": "held-out mean KL(B‖A+C) per still-masked slot after one reveal (nats; the head's "
        "training metrics; direct objective: KL(B‖C)); blank for released heads",
        "heldout_baseline_kl_step1": "held-out mean KL(B‖A), the uncorrected baseline, on the same slots (nats)",
        "heldout_kl_ratio": "heldout_kl_step1 / heldout_baseline_kl_step1 (below 1: the head beats the baseline)",
        "head_train_s": "the head's training wall seconds (its metrics.json train_time_s)",
        "static_accuracy": "static(1) accuracy on these prompts (%), the reference of the recovery",
        "family": TABLE_COLUMNS["family"],
    }
    for K in Ks:
        out[f"tpf_share_k{K}"] = (f"TPF of speculative({K}, mrp) over that of speculative({K}, oracle) on the same "
                                  "prompts (tokens per denoising forward, pooled); CI: bootstrap over prompts")
        if "upstream" in families:
            out[f"upstream_tpf_share_k{K}"] = (f"TPF of the released code's speculative (upstream_speculative({K}, "
                                               f"…)) over that of speculative({K}, oracle) on the same prompts; CI: "
                                               "bootstrap over prompts")  # fmt: skip
    for s in (1, 2):
        out[f"direct_step{s}_accuracy"] = f"accuracy of direct mode, MRP step {s} (%, CI over prompts)"
    for t in taus:
        k = _tau_key(t)
        out[f"remask_recovery_{k}"] = (f"100 × (acc remask({t}, tau) − acc dynamic({t})) / (acc static − acc "
                                       f"dynamic({t})), same prompts; blank when dynamic({t}) loses nothing; "
                                       "paired bootstrap CI")  # fmt: skip
        out[f"dynamic_loss_{k}"] = f"acc static − acc dynamic({t}) in points: the loss the recovery divides"
    return out


#: the columns of the default K and τ (every table written by `run` with the defaults)
COLUMNS = columns()
#: ablation_claims' columns, defined once in the schema (with the claims report's)
CLAIM_COLUMNS = {c: TABLE_COLUMNS[c] for c in ("ablation", "paper", "statistic", "comparison", "verdict_rule", "ours",
                                               "verdict")}  # fmt: skip


# ----------------------------------------------------------------------------- declared tests


@dataclass(frozen=True)
class AxisClaim:
    axis: str
    statistic: str
    comparison: str
    rule: str


AXIS_CLAIMS = {
    "depth": AxisClaim("depth", "held-out step-1 KL ratio KL(B‖A+C) / KL(B‖A) of each head (lower is better)",
                       "the best of the 2- and 3-layer heads against every other depth run",
                       f"holds: the best 2-3 layer ratio is below every other depth's by more than {KL_TIE:.0%} "
                       f"(depth 8, when run, among them); not shown: it is within {KL_TIE:.0%} of the lowest (a tie); "
                       "does not hold otherwise; not measured without a 2- or 3-layer head"),
    "objective": AxisClaim("objective", "held-out step-1 KL ratio (residual: KL(B‖A+C); direct: KL(B‖C); both over "
                           "the same KL(B‖A))", "residual head against direct head",
                           f"holds: residual's ratio is lower by more than {KL_TIE:.0%}; does not hold otherwise "
                           "(a tie does not show residual beats direct); not measured without both heads (or "
                           "without training metrics: released heads)"),
    "k_steps": AxisClaim("k_steps", "TPF share of the oracle at the largest K of the sweep (multi-draft rounds), per "
                         "task", "the best K-step head (k >= 2) against the 1-step head, paired bootstrap over prompts",
                         "holds: higher on every task with the difference's CI above 0; not shown: higher on average "
                         "over tasks, CI not above 0 on every task; does not hold otherwise"),
}  # fmt: skip


def check_claim(axis: str, table: pd.DataFrame, diffs: dict | None = None) -> dict:
    """{ablation, statistic, comparison, verdict_rule, ours, verdict} of one axis's declared test; `diffs` (k_steps:
    task -> (diff, lo, hi) of share_diff_ci (best K-step head minus the 1-step head)."""
    from mrp_repro.report.verdicts import HOLDS, NA, NOT, NOT_SHOWN

    c = AXIS_CLAIMS[axis]
    per = table.drop_duplicates("label").set_index("label")
    out = {"ablation": axis, "statistic": c.statistic, "comparison": c.comparison, "verdict_rule": c.rule}
    if axis in ("depth", "objective"):
        r = per["heldout_kl_ratio"].astype(float)
        if r.isna().all():
            return {**out, "ours": "–", "verdict": NA, "reason": "no training metrics (released heads)"}
        ours = "; ".join(f"{v}: {x:.3f}" for v, x in r.items())
        if axis == "depth":
            depth = {v: int(str(v).split()[0]) for v in r.index}
            good = [v for v in r.index if depth[v] in (2, 3)]
            if not good:
                return {**out, "ours": ours, "verdict": NA}
            best = r[good].min()
            others = r[[v for v in r.index if v not in good]]
            if (others * (1 - KL_TIE) > best).all():
                verdict = HOLDS
            elif (others >= best * (1 - KL_TIE)).all():
                verdict = NOT_SHOWN
            else:
                verdict = NOT
            if not any(depth[v] >= 8 for v in r.index):
                ours += " (8 layers not run)"
        else:
            if not {"residual", "direct"} <= set(r.index):
                return {**out, "ours": ours, "verdict": NA}
            verdict = HOLDS if r["residual"] < r["direct"] * (1 - KL_TIE) else NOT
        return {**out, "ours": ours, "verdict": verdict}
    if axis == "k_steps":
        if not diffs:
            return {**out, "ours": "–", "verdict": NA}
        ours = "; ".join(f"{t}: {lab} {d:+.3f} [{lo:+.3f}, {hi:+.3f}]" for t, (lab, d, lo, hi) in diffs.items())
        ds = [d for _, d, _, _ in diffs.values()]
        if all(d > 0 and lo > 0 for _, d, lo, _ in diffs.values()):
            verdict = HOLDS
        elif np.mean(ds) > 0:
            verdict = NOT_SHOWN
        else:
            verdict = NOT
        return {**out, "ours": ours, "verdict": verdict}
    raise ValueError(f"no declared test for axis {axis!r}; valid: {', '.join(AXIS_CLAIMS)}")


def _kstep_diffs(table, head_runs: dict, base_runs, k_of: dict, K: int, n_boot, ci, seed) -> dict:
    """task -> (label, diff, lo, hi): the K-step head (k >= 2) with the highest mean share at K minus the 1-step head.
    k_of: variant label -> its mrp.k_steps."""
    col = f"tpf_share_k{K}"
    one = [v for v in table["label"].unique() if k_of[v] == 1]
    multi = [v for v in table["label"].unique() if k_of[v] >= 2]
    if not one or not multi:
        return {}
    best = table[table["label"].isin(multi)].groupby("label")[col].mean().idxmax()
    out = {}
    for task in sorted(table["benchmark"].unique()):
        a = _by_problem(head_runs[one[0]], task, "speculative", K=K)
        b = _by_problem(head_runs[best], task, "speculative", K=K).loc[a.index]
        o = _by_problem(base_runs, task, "speculative", K=K).loc[a.index]
        d = share_diff_ci((a["tokens"], a["denoise_forwards"]), (b["tokens"], b["denoise_forwards"]),
                          (o["tokens"], o["denoise_forwards"]), n_boot, ci, seed)  # fmt: skip
        out[task] = (best, *d)
    return out
