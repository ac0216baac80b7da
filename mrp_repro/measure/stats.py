"""The statistics of every table: bootstrap CIs, paired differences and ratios, one summary per setting.

    from mrp_repro.measure import stats
    stats.mean_ci(runs["correct"], n_boot=1000)             # (mean, lo, hi) in percent
    stats.paired_diff(a, b)                                 # mean(a - b), its CI, a two-sided p
    stats.ratio_ci(tok_m, wall_m, tok_s, wall_s)            # (tokens/s of m) / (tokens/s of s), paired
    stats.summarize(runs)                                   # one row per setting, percent, *_lo / *_hi

Percentile bootstrap over items (prompts), seeded. Accuracy-like numbers are in percent, every CI is a
pair of columns ``<metric>_lo`` / ``<metric>_hi``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from mrp_repro.measure.schema import SETTING_KEYS, require

__all__ = ["bootstrap_ci", "mean_ci", "paired_diff", "ratio_ci", "summarize", "upstream_tpf", "SUMMARY_NEEDS"]


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
    size), lossless (every output identical to static), tpf_share_of_oracle
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
            "lossless": bool(g["identical_to_static"].astype(bool).all()),
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
