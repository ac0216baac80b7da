"""The statistics of every table: bootstrap CIs, paired differences and ratios, one summary per setting.

    from mrp_repro.measure import stats
    stats.mean_ci(runs["correct"], n_boot=1000)             # (mean, lo, hi) in percent
    stats.paired_diff(a, b)                                 # mean(a - b), its CI, a two-sided p
    stats.ratio_ci(tok_m, wall_m, tok_s, wall_s)            # (tokens/s of m) / (tokens/s of s), paired
    stats.summarize(runs)                                   # one row per setting, percent, *_lo / *_hi
    stats.clock_ci(ratio, ratio_lo, ratio_hi, pass_speedups)  # a wall-clock ratio's CI with the clock's noise in it

Percentile bootstrap over items (prompts), seeded. Accuracy-like numbers are in percent, every CI is a
pair of columns ``<metric>_lo`` / ``<metric>_hi``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from mrp_repro.measure.schema import SETTING_KEYS, require

__all__ = ["bootstrap_ci", "mean_ci", "paired_diff", "ratio_ci", "summarize", "upstream_tpf", "SUMMARY_NEEDS",
           "median_pass", "pass_deviation_ci", "clock_ci"]


def _boot_idx(n: int, n_boot: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n, size=(n_boot, n))


def _quantiles(x: np.ndarray, ci: float) -> tuple[float, float]:
    a = (1 - ci) / 2
    return float(np.quantile(x, a)), float(np.quantile(x, 1 - a))


def bootstrap_ci(values, n_boot: int = 1000, ci: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """(lo, hi): percentile bootstrap interval of the mean of `values` (NaNs dropped), in their own scale."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return (math.nan, math.nan)
    if v.size == 1 or n_boot <= 0:
        return (float(v.mean()), float(v.mean()))
    return _quantiles(v[_boot_idx(v.size, n_boot, seed)].mean(1), ci)


def mean_ci(values, n_boot: int = 1000, ci: float = 0.95, seed: int = 0, scale: float = 100.0):
    """(mean, lo, hi) of `values` times `scale` (default: percent)."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return (math.nan, math.nan, math.nan)
    lo, hi = bootstrap_ci(v, n_boot, ci, seed)
    return (float(v.mean()) * scale, lo * scale, hi * scale)


def paired_diff(a, b, n_boot: int = 1000, ci: float = 0.95, seed: int = 0, scale: float = 100.0) -> dict:
    """mean(a - b) over paired items times `scale`: {diff, diff_lo, diff_hi, p_value, n}.

    p_value: two-sided, from the bootstrap distribution's mass on either side of 0."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"paired samples of different sizes: {a.shape} vs {b.shape}; pair them on problem_id")
    d = a - b
    if d.size == 0:
        return {"diff": math.nan, "diff_lo": math.nan, "diff_hi": math.nan, "p_value": math.nan, "n": 0}
    if d.size == 1 or n_boot <= 0:
        x = float(d.mean()) * scale
        return {"diff": x, "diff_lo": x, "diff_hi": x, "p_value": math.nan, "n": int(d.size)}
    means = d[_boot_idx(d.size, n_boot, seed)].mean(1)
    lo, hi = _quantiles(means, ci)
    p = 2 * min((means <= 0).mean(), (means >= 0).mean())
    return {"diff": float(d.mean()) * scale, "diff_lo": lo * scale, "diff_hi": hi * scale,
            "p_value": float(min(p, 1.0)), "n": int(d.size)}  # fmt: skip


def ratio_ci(num_m, den_m, num_s, den_s, n_boot: int = 1000, ci: float = 0.95, seed: int = 0):
    """(point, lo, hi) of (sum num_m / sum den_m) / (sum num_s / sum den_s), resampling paired items."""
    arrs = [np.asarray(x, dtype=float) for x in (num_m, den_m, num_s, den_s)]
    n = arrs[0].size
    if any(x.size != n for x in arrs):
        raise ValueError("ratio_ci: the four samples must be paired (same length); pair them on problem_id")
    if n == 0 or any(x.sum() == 0 for x in arrs):
        return (math.nan, math.nan, math.nan)

    def ratio(s):
        nm, dm, ns, ds = (x[s].sum(axis=-1) for x in arrs)
        return (nm / dm) / (ns / ds)

    point = float(ratio(np.arange(n)))
    if n == 1 or n_boot <= 0:
        return (point, point, point)
    r = ratio(_boot_idx(n, n_boot, seed))
    return (point, *_quantiles(r[np.isfinite(r)], ci))


# ----------------------------------------------------------------------------- clock noise


def median_pass(values) -> float:
    """The median pass of repeated timings: the lower median (an actual pass, also for an even count), so that passes
    spread further from it leave it where it is; NaN when none is finite and positive."""
    v = np.sort(_positive(values))
    return float(v[(v.size - 1) // 2]) if v.size else math.nan


def _positive(values) -> np.ndarray:
    v = np.asarray(values, dtype=float).ravel()
    return v[np.isfinite(v) & (v > 0)]


def pass_deviation_ci(pass_values, n_boot: int = 1000, ci: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """(lo, hi), in log space, lo <= 0 <= hi: how far one pass's value falls from the median pass (median_pass),
    resampling the passes (a pass drawn at random per replicate; quantiles taken at order statistics, no
    interpolation). One pass, not the mean of the passes: a grid's timing is itself one pass of its settings.
    Monotone in the clock's noise: passes that each lie further from the median pass (on the same side) never give
    a narrower interval. (nan, nan) with fewer than 2 passes: no clock measured."""
    v = _positive(pass_values)
    if v.size < 2:
        return (math.nan, math.nan)
    d = np.log(v) - math.log(median_pass(v))
    draws = d[np.random.default_rng(seed).integers(0, v.size, size=max(n_boot, 1))]
    a = (1 - ci) / 2
    lo = float(np.quantile(draws, a, method="lower"))
    hi = float(np.quantile(draws, 1 - a, method="higher"))
    return (min(lo, 0.0), max(hi, 0.0))


def clock_ci(point: float, lo: float, hi: float, pass_values, n_boot: int = 1000, ci: float = 0.95,
             seed: int = 0) -> tuple[float, float]:  # fmt: skip
    """(lo, hi) of a wall-clock ratio with the clock's noise in it: its prompt CI `lo`-`hi` around `point` (ratio_ci:
    prompts resampled) and the repeated passes' spread (pass_deviation_ci: passes resampled), two independent
    sources of error added in quadrature on the log scale (half-width sqrt(prompt**2 + clock**2) on each side).
    The quadrature of the two intervals, not the quantiles of a joint bootstrap: those can narrow when a pass moves
    away from the others (a replicate pairing a slow pass with a fast prompt draw), this cannot. Without at least 2
    passes the prompt CI is returned as it is (no clock measured: the caller says so)."""
    c_lo, c_hi = pass_deviation_ci(pass_values, n_boot, ci, seed)
    if not (math.isfinite(point) and point > 0 and math.isfinite(lo) and math.isfinite(hi)):
        return (lo, hi)
    if math.isnan(c_lo):
        return (lo, hi)
    lp = math.log(point)
    p_lo = lp - math.log(lo) if lo > 0 else math.inf
    p_hi = math.log(hi) - lp if hi > 0 else 0.0
    w_lo = math.hypot(max(p_lo, 0.0), c_lo)
    w_hi = math.hypot(max(p_hi, 0.0), c_hi)
    return (math.exp(lp - w_lo), math.exp(lp + w_hi))


#: the modes whose outputs are token-identical to static(1) by construction: `lossless` checks them
LOSSLESS_MODES = ("static", "speculative")


def _claims_lossless(key, by: list[str]) -> bool:
    mode = dict(zip(by, key, strict=True)).get("mode")
    return mode is None or mode in LOSSLESS_MODES


#: the runs columns summarize reads
SUMMARY_NEEDS = [*SETTING_KEYS, "correct", "valid_chain", "tokens", "denoise_forwards", "commit_forwards",
                 "mrp_forwards", "rounds", "revoked", "accept_lengths", "wall_s", "identical_to_static",
                 "upstream_denoise_forwards"]  # fmt: skip


def upstream_tpf(g: pd.DataFrame) -> float:
    """The released code's TPF of upstream rows: tokens summed over rows per batched denoising forward
    (NaN for rows of our algorithm, which carry no upstream counters)."""
    den = pd.to_numeric(g["upstream_denoise_forwards"], errors="coerce")
    if den.isna().any() or den.sum() <= 0:
        return math.nan
    return float(g["tokens"].sum() / den.sum())


def summarize(runs: pd.DataFrame, n_boot: int = 1000, ci: float = 0.95, seed: int = 0,
              by: Sequence[str] = tuple(SETTING_KEYS)) -> pd.DataFrame:  # fmt: skip
    """One row per setting: n, accuracy / accuracy_lo / accuracy_hi (%), valid_chain (%), tpf (tokens per
    denoising forward, pooled, per-row accounting), upstream_tpf (upstream rows: their per-batch accounting),
    backbone_forwards / denoise_forwards / mrp_forwards / rounds / revoked (per prompt), mean_accept,
    tokens_per_s, speedup (tokens/s over the static setting of the same model, benchmark, algorithm and batch
    size), lossless (static and speculative: every output identical to the same algorithm's static; None for the
    lossy modes, whose outputs may equal static's by chance), tpf_share_of_oracle
    (speculative: TPF over the oracle drafter's at the same K)."""
    require(runs, SUMMARY_NEEDS, "stats.summarize")
    by = list(by)
    rows = []
    for key, g in runs.groupby(by, sort=False, dropna=False):
        correct = g["correct"].to_numpy(float)
        acc, lo, hi = mean_ci(correct, n_boot, ci, seed)
        acc_len = [int(j) for a in g["accept_lengths"].fillna("") for j in str(a).split()]
        wall, den = g["wall_s"].sum(), g["denoise_forwards"].sum()
        vc = g["valid_chain"].astype(float)
        rows.append({
            **dict(zip(by, key, strict=True)), "n": len(g),
            "accuracy": acc, "accuracy_lo": lo, "accuracy_hi": hi,
            "valid_chain": 100 * vc.mean() if vc.notna().any() else math.nan,
            "tpf": g["tokens"].sum() / den if den > 0 else math.nan,
            "upstream_tpf": upstream_tpf(g),
            "backbone_forwards": (g["denoise_forwards"] + g["commit_forwards"]).mean(),
            "denoise_forwards": g["denoise_forwards"].mean(), "mrp_forwards": g["mrp_forwards"].mean(),
            "rounds": g["rounds"].mean(), "revoked": g["revoked"].mean(),
            "mean_accept": float(np.mean(acc_len)) if acc_len else math.nan,
            "wall_s": wall, "tokens_per_s": g["tokens"].sum() / wall if wall > 0 else math.nan,
            # the guarantee of static and speculative, checked; the lossy modes claim none (blank)
            "lossless": bool(g["identical_to_static"].astype(bool).all()) if _claims_lossless(key, by) else None,
        })  # fmt: skip
    s = pd.DataFrame(rows)
    if s.empty:
        return s
    ctx = [k for k in ("model", "benchmark", "algorithm", "batch_size") if k in by]
    static = s[s["mode"] == "static"]
    if static.duplicated(ctx).any():
        raise ValueError(f"summarize: more than one static setting per {ctx}; collect one static(1) per benchmark")
    base = static.set_index(ctx)["tokens_per_s"]
    s["speedup"] = [r.tokens_per_s / base.get(tuple(getattr(r, k) for k in ctx), math.nan)
                    if len(ctx) > 1 else r.tokens_per_s / base.get(getattr(r, ctx[0]), math.nan)
                    for r in s.itertuples()]  # fmt: skip
    if "drafter" in by and "K" in by:
        octx = ctx + ["K"]
        oracle = s[(s["mode"] == "speculative") & (s["drafter"] == "oracle")].set_index(octx)["tpf"]
        s["tpf_share_of_oracle"] = [
            r.tpf / oracle.get(tuple(getattr(r, k) for k in octx), math.nan) if r.mode == "speculative" else math.nan
            for r in s.itertuples()
        ]
    return s
