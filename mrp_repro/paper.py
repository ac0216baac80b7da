"""The paper's reported numbers, and our results in the paper's table shapes.

    from mrp_repro import paper
    paper.load("remasking")                       # the paper's table (DataFrame), from package data
    paper.remasking_table(runs, bootstrap=1000)   # ours, same rows/columns, CI, paper beside
    paper.save_result(profile, "remasking_runs", runs); paper.load_result(profile, "remasking_runs")

The paper's numbers (arXiv 2605.18817 v2 abstract + the authors' blog) ship as
package data in ``mrp_repro/paper_data/*.csv`` (see SOURCE.md there).

Our results come as a tidy *runs* frame, one row per (prompt, decoding setting)::

    model, benchmark, mode, problem_id, correct            required
    threshold, rule, k, steps                              the setting (NaN when not used)
    tokens, wall_s, backbone_nfe, denoise_nfe, identical   optional (speed, losslessness)

``mode`` is one of MODES. On the tiny/smoke profiles the model is the profile
name and the benchmarks are the synthetic tasks, compared with the paper's
benchmarks through BENCHMARK_MAP; the paper column then quotes the table's
reference model (REFERENCE_MODEL), named in the ``paper_model`` column.

Every notebook stores its results under ``runs/<profile>/results-<profile hash>/``
with the file names in RESULTS, so 09_claims reads what 01-07 wrote and a
changed profile never reads stale numbers.
"""

from __future__ import annotations

import math
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from mrp_repro.config import Profile

__all__ = [
    "TABLES",
    "MODES",
    "BENCHMARK_MAP",
    "PROFILE_MODEL",
    "REFERENCE_MODEL",
    "RESULTS",
    "load",
    "model_for_profile",
    "paper_benchmark",
    "paper_model",
    "bootstrap_ci",
    "normalize_runs",
    "accuracy_summary",
    "remasking_table",
    "speculative_table",
    "direct_table",
    "lookahead_table",
    "results_dir",
    "result_path",
    "save_result",
    "load_result",
    "load_results",
]

TABLES = ("remasking", "speculative", "direct", "lookahead")

#: decoding modes, as the runs frame names them
MODES = ("static", "dynamic", "remask", "speculative", "direct", "naive")

#: our benchmark -> the paper benchmark it stands in for (defined once, here)
BENCHMARK_MAP = {
    "synth-math": "gsm8k",
    "synth-code": "humaneval",
    "gsm8k": "gsm8k",
    "math500": "math500",
    "humaneval": "humaneval",
    "mbpp": "mbpp",
}

#: profile name -> model name as the paper writes it (other profiles: the profile name, e.g. "tiny")
PROFILE_MODEL = {"sdar-1.7b": "SDAR-1.7B", "sdar-4b": "SDAR-4B", "sdar-8b": "SDAR-8B"}

#: the paper model each table is compared against when our model is not in the paper (tiny, smoke)
REFERENCE_MODEL = {"remasking": "SDAR-1.7B", "speculative": "SDAR-4B", "direct": "SDAR-8B", "lookahead": "SDAR-4B"}

#: result files written by the notebooks, read by 09_claims: name -> (notebook, what)
RESULTS = {
    "environment": ("00_environment", "versions, device, provenance (one row per key)"),
    "backbone": ("01_backbone", "backbone report: accuracy of static decoding per benchmark"),
    "backbone_curve": ("01_backbone", "backbone training loss curve"),
    "trajectories": ("02_trajectories", "trajectory collection summary"),
    "adjacent": ("03_adjacent_step_logits", "KL / top-1 agreement by step distance, trained vs random init"),
    "mrp_curve": ("04_train_mrp", "MRP training curve: train / held-out KL, uncorrected baseline"),
    "speculative_runs": ("05_speculative", "runs frame: static + speculative(K)"),
    "direct_runs": ("06_direct_lookahead", "runs frame: static + direct(steps)"),
    "lookahead_runs": ("06_direct_lookahead", "runs frame: naive(K) + direct(K) for the lookahead sweep"),
    "remasking_runs": ("07_remasking", "runs frame: dynamic(tau) + remask(tau, rule)"),
    "trace": ("07_remasking", "engine trace of one remasking generation"),
    "speculative_accept": ("05_speculative", "accepted draft length per speculative round"),
    "modes_runs": ("05_speculative", "runs frame of bench_modes.run_all_modes (every mode; 05-07 share it)"),
}

#: which modes each mode-specific runs frame holds (split_runs)
RUN_SPLITS = {
    "speculative_runs": ("static", "speculative"),
    "direct_runs": ("static", "direct"),
    "lookahead_runs": ("naive", "direct"),
    "remasking_runs": ("dynamic", "remask"),
}


# ----------------------------------------------------------------------------- the paper's numbers


def load(table: str) -> pd.DataFrame:
    """The paper's reported table (`remasking`, `speculative`, `direct`, `lookahead`)."""
    if table not in TABLES:
        raise ValueError(f"unknown paper table {table!r}; valid: {', '.join(TABLES)}")
    with resources.files("mrp_repro.paper_data").joinpath(f"{table}.csv").open() as fh:
        return pd.read_csv(fh)


def model_for_profile(profile: Profile | str) -> str:
    """The model name our runs carry: SDAR-8B for sdar-8b, else the profile name (tiny, smoke)."""
    name = profile if isinstance(profile, str) else profile.name
    return PROFILE_MODEL.get(name, name)


def paper_benchmark(benchmark: str) -> str | None:
    return BENCHMARK_MAP.get(benchmark)


def paper_model(model: str, table: str) -> str:
    """The paper model to quote beside ours: the same model if the paper reports it, else the reference."""
    models = set(load(table)["model"])
    return model if model in models else REFERENCE_MODEL[table]


# ----------------------------------------------------------------------------- statistics


def _boot_idx(n: int, n_boot: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, n, size=(n_boot, n))


def bootstrap_ci(values, n_boot: int = 1000, ci: float = 0.95, seed: int = 0, scale: float = 100.0):
    """(mean, lo, hi) of `values` times `scale`, percentile bootstrap over the items."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return (math.nan, math.nan, math.nan)
    mean = float(v.mean()) * scale
    if v.size == 1 or n_boot <= 0:
        return (mean, mean, mean)
    means = v[_boot_idx(v.size, n_boot, seed)].mean(axis=1) * scale
    a = (1 - ci) / 2
    return (mean, float(np.quantile(means, a)), float(np.quantile(means, 1 - a)))


def _ratio_ci(num_m, den_m, num_s, den_s, n_boot, ci, seed):
    """Paired bootstrap CI of (sum num_m / sum den_m) / (sum num_s / sum den_s)."""
    arrs = [np.asarray(x, dtype=float) for x in (num_m, den_m, num_s, den_s)]
    n = arrs[0].size
    if n == 0 or any(a.sum() == 0 for a in arrs):
        return (math.nan, math.nan, math.nan)

    def ratio(s):
        nm, dm, ns, ds = (a[s].sum(axis=-1) for a in arrs)
        return (nm / dm) / (ns / ds)

    point = float(ratio(np.arange(n)))
    if n == 1 or n_boot <= 0:
        return (point, point, point)
    r = ratio(_boot_idx(n, n_boot, seed))
    r = r[np.isfinite(r)]
    a = (1 - ci) / 2
    return (point, float(np.quantile(r, a)), float(np.quantile(r, 1 - a)))


# ----------------------------------------------------------------------------- our runs


_ALIASES = {"task": "benchmark", "policy": "mode", "tau": "threshold", "lookahead_k": "k", "K": "k",
            "problem": "problem_id", "key": "problem_id", "is_correct": "correct", "time_s": "wall_s",
            "n_tokens": "tokens", "backbone_forwards": "backbone_nfe", "denoise_forwards": "denoise_nfe",
            "identical_to_static": "identical", "lossless": "identical"}  # fmt: skip


_FAMILY = {"naive_lookahead": "naive"}


def normalize_runs(runs: pd.DataFrame, model: str | None = None) -> pd.DataFrame:
    """A copy with the canonical column names; missing setting columns added as NaN.

    A bench_modes runs frame (``mode`` = policy name, ``family`` = kind of mode) becomes ``policy`` and
    ``mode`` (naive_lookahead -> naive); speculative rows keep only the MRP drafter (oracle and naive
    drafters are bench_modes diagnostics, not the paper's method)."""
    if "family" in runs.columns:
        runs = runs.rename(columns={"mode": "policy", "task_id": "problem_id"})
        runs["mode"] = runs.pop("family").replace(_FAMILY)
        if "drafter" in runs.columns:
            runs = runs[(runs["mode"] != "speculative") | (runs["drafter"] == "mrp")]
        if {"denoise_forwards", "commit_forwards"} <= set(runs.columns) and "backbone_nfe" not in runs.columns:
            runs = runs.assign(backbone_nfe=runs["denoise_forwards"] + runs["commit_forwards"])
    df = runs.rename(columns={k: v for k, v in _ALIASES.items() if k in runs.columns and v not in runs.columns})
    df = df.copy()
    if "model" not in df.columns:
        df["model"] = model or "unknown"
    for c in ("threshold", "rule", "k", "steps"):
        if c not in df.columns:
            df[c] = np.nan
    if "problem_id" not in df.columns:
        df["problem_id"] = df.groupby(["model", "benchmark", "mode"], dropna=False).cumcount()
    df["correct"] = df["correct"].astype(float)
    return df


def _pick(df: pd.DataFrame, **where) -> pd.DataFrame:
    m = pd.Series(True, index=df.index)
    for col, val in where.items():
        if val is None:
            continue
        m &= df[col] == val
    return df[m]


def _paired(a: pd.DataFrame, b: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """Rows of a and b on the same problems (inner join on problem_id)."""
    a = a.drop_duplicates("problem_id").set_index("problem_id")[cols]
    b = b.drop_duplicates("problem_id").set_index("problem_id")[cols]
    return a.add_suffix("_m").join(b.add_suffix("_s"), how="inner")


def accuracy_summary(runs: pd.DataFrame, n_boot: int = 1000, ci: float = 0.95, seed: int = 0) -> pd.DataFrame:
    """Accuracy (%, CI), TPF and NFE per (model, benchmark, mode, threshold, rule, k, steps)."""
    df = normalize_runs(runs)
    keys = ["model", "benchmark", "mode", "threshold", "rule", "k", "steps"]
    rows = []
    for key, g in df.groupby(keys, dropna=False, sort=True):
        acc, lo, hi = bootstrap_ci(g["correct"], n_boot, ci, seed)
        row = dict(zip(keys, key, strict=True), accuracy=acc, accuracy_lo=lo, accuracy_hi=hi, n=len(g))
        if "tokens" in g and "denoise_nfe" in g and g["denoise_nfe"].sum() > 0:
            row["tpf"] = g["tokens"].sum() / g["denoise_nfe"].sum()
        if "backbone_nfe" in g:
            row["backbone_nfe"] = g["backbone_nfe"].mean()
        rows.append(row)
    return pd.DataFrame(rows)


def _with_paper(ours: pd.DataFrame, table: str, keys: list[str], metrics: list[str]) -> pd.DataFrame:
    """Join the paper's numbers beside ours; order columns: keys, then metric, lo, hi, paper_metric."""
    ref = load(table)
    ours = ours.copy()
    ours["paper_model"] = [paper_model(m, table) for m in ours["model"]]
    ours["paper_benchmark"] = ours["benchmark"].map(BENCHMARK_MAP)
    ref = ref.rename(columns={"model": "paper_model", "benchmark": "paper_benchmark"})
    ref = ref.rename(columns={m: f"paper_{m}" for m in metrics})
    on = ["paper_model", "paper_benchmark"] + [k for k in keys if k not in ("model", "benchmark")]
    for k in on:
        if k in ("threshold",):
            ours[k] = ours[k].astype(float).round(3)
            ref[k] = ref[k].astype(float).round(3)
    out = ours.merge(ref[on + [f"paper_{m}" for m in metrics]], on=on, how="left")
    cols = list(keys)
    for m in metrics:
        cols += [c for c in (m, f"{m}_lo", f"{m}_hi", f"paper_{m}") if c in out.columns]
    rest = [c for c in out.columns if c not in cols and c not in ("paper_model", "paper_benchmark")]
    return out[cols + rest + ["paper_model", "paper_benchmark"]]


def _empty(table: str, keys: list[str], metrics: list[str]) -> pd.DataFrame:
    cols = list(keys)
    for m in metrics:
        cols += [m, f"{m}_lo", f"{m}_hi", f"paper_{m}"]
    return pd.DataFrame(columns=cols + ["n", "paper_model", "paper_benchmark"])


def remasking_table(
    runs: pd.DataFrame, rule: str | None = "tau", n_boot: int = 1000, ci: float = 0.95, seed: int = 0
) -> pd.DataFrame:
    """τ sweep by model x benchmark: dynamic baseline vs MRP remasking (paired gain with CI).

    ``rule=None`` keeps every remasking rule (one row per rule, column ``rule``).
    """
    df = normalize_runs(runs)
    keys = ["model", "threshold", "benchmark"]
    metrics = ["baseline_accuracy", "mrp_remask_accuracy", "gain"]
    base = df[df["mode"] == "dynamic"]
    rem = df[df["mode"] == "remask"]
    if rule is not None:
        rem = rem[rem["rule"] == rule]
    rows = []
    for (model, tau, bench, r), g in rem.groupby(["model", "threshold", "benchmark", "rule"], dropna=False):
        b = _pick(base, model=model, benchmark=bench)
        b = b[np.isclose(b["threshold"].astype(float), float(tau))]
        p = _paired(g, b, ["correct"])
        row = {"model": model, "threshold": float(tau), "benchmark": bench, "rule": r, "n": len(p)}
        for name, vals in (
            ("baseline_accuracy", p["correct_s"]),
            ("mrp_remask_accuracy", p["correct_m"]),
            ("gain", p["correct_m"] - p["correct_s"]),
        ):
            row[name], row[f"{name}_lo"], row[f"{name}_hi"] = bootstrap_ci(vals, n_boot, ci, seed)
        rows.append(row)
    if not rows:
        return _empty("remasking", keys + ["rule"], metrics)
    ours = pd.DataFrame(rows).sort_values(["model", "rule", "benchmark", "threshold"])
    out = _with_paper(ours, "remasking", keys, ["baseline_accuracy", "mrp_remask_accuracy"])
    out["paper_gain"] = out["paper_mrp_remask_accuracy"] - out["paper_baseline_accuracy"]
    cols = [c for c in out.columns if c != "paper_gain"]
    i = cols.index("gain_hi") + 1
    out = out[cols[:i] + ["paper_gain"] + cols[i:]]
    if rule is not None:
        out = out.drop(columns="rule")
    return out.reset_index(drop=True)


def _speed(g: pd.DataFrame, s: pd.DataFrame, n_boot, ci, seed) -> dict:
    """Speedup of runs g over static runs s on the same problems: wall-clock and backbone-NFE based."""
    row: dict = {}
    have_wall = "wall_s" in g and "tokens" in g and g["wall_s"].notna().all()
    if have_wall:
        p = _paired(g, s, ["tokens", "wall_s"])
        row["throughput_speedup"], row["throughput_speedup_lo"], row["throughput_speedup_hi"] = _ratio_ci(
            p["tokens_m"], p["wall_s_m"], p["tokens_s"], p["wall_s_s"], n_boot, ci, seed
        )
    if "backbone_nfe" in g and "tokens" in g:
        p = _paired(g, s, ["tokens", "backbone_nfe"])
        row["nfe_speedup"], row["nfe_speedup_lo"], row["nfe_speedup_hi"] = _ratio_ci(
            p["tokens_m"], p["backbone_nfe_m"], p["tokens_s"], p["backbone_nfe_s"], n_boot, ci, seed
        )
    if "throughput_speedup" not in row:
        for suf in ("", "_lo", "_hi"):
            row[f"throughput_speedup{suf}"] = row.get(f"nfe_speedup{suf}", math.nan)
        row["speedup_basis"] = "backbone NFE"
    else:
        row["speedup_basis"] = "wall clock"
    return row


def speculative_table(
    runs: pd.DataFrame, k: int | None = None, n_boot: int = 1000, ci: float = 0.95, seed: int = 0
) -> pd.DataFrame:
    """Speculative accuracy and speedup over static, per model x benchmark (K: the given one, else the best).

    Extra columns: ``identical`` (fraction of outputs token-for-token equal to static: 1.0 = lossless),
    ``static_accuracy``, ``k``, ``nfe_speedup``.
    """
    df = normalize_runs(runs)
    keys = ["model", "benchmark"]
    spec, static = df[df["mode"] == "speculative"], df[df["mode"] == "static"]
    rows = []
    for (model, bench, kk), g in spec.groupby(["model", "benchmark", "k"], dropna=False):
        if k is not None and kk != k:
            continue
        s = _pick(static, model=model, benchmark=bench)
        row = {"model": model, "benchmark": bench, "k": kk, "n": len(g)}
        row["accuracy"], row["accuracy_lo"], row["accuracy_hi"] = bootstrap_ci(g["correct"], n_boot, ci, seed)
        row["static_accuracy"] = bootstrap_ci(s["correct"], 0)[0]
        row.update(_speed(g, s, n_boot, ci, seed))
        row["identical"] = float(g["identical"].astype(float).mean()) if "identical" in g else math.nan
        rows.append(row)
    if not rows:
        return _empty("speculative", keys, ["accuracy", "throughput_speedup"])
    ours = pd.DataFrame(rows)
    if k is None:  # the best K per model x benchmark, as "up to" in the paper
        ours = ours.sort_values("throughput_speedup").groupby(["model", "benchmark"], as_index=False).tail(1)
    ours = ours.sort_values(["model", "benchmark"])
    return _with_paper(ours, "speculative", keys, ["accuracy", "throughput_speedup"]).reset_index(drop=True)


def direct_table(runs: pd.DataFrame, steps=(1, 2), n_boot: int = 1000, ci: float = 0.95, seed: int = 0) -> pd.DataFrame:
    """Direct mode: baseline (static) vs MRP step 1/2 (``steps``), accuracy and speedup, per model x benchmark."""
    df = normalize_runs(runs)
    keys = ["model", "setting", "benchmark"]
    static = df[df["mode"] == "static"]
    rows = []
    for (model, bench), s in static.groupby(["model", "benchmark"]):
        row = {"model": model, "setting": "baseline", "benchmark": bench, "n": len(s)}
        row["accuracy"], row["accuracy_lo"], row["accuracy_hi"] = bootstrap_ci(s["correct"], n_boot, ci, seed)
        row.update(_speed(s, s, 0, ci, seed))
        rows.append(row)
    direct = df[(df["mode"] == "direct") & df["steps"].isin(list(steps))]
    for (model, bench, st), g in direct.groupby(["model", "benchmark", "steps"]):
        s = _pick(static, model=model, benchmark=bench)
        row = {"model": model, "setting": f"mrp_step{int(st)}", "benchmark": bench, "n": len(g)}
        row["accuracy"], row["accuracy_lo"], row["accuracy_hi"] = bootstrap_ci(g["correct"], n_boot, ci, seed)
        row.update(_speed(g, s, n_boot, ci, seed))
        rows.append(row)
    if not rows:
        return _empty("direct", keys, ["accuracy", "throughput_speedup"])
    ours = pd.DataFrame(rows).sort_values(["model", "setting", "benchmark"])
    return _with_paper(ours, "direct", keys, ["accuracy", "throughput_speedup"]).reset_index(drop=True)


def lookahead_table(runs: pd.DataFrame, n_boot: int = 1000, ci: float = 0.95, seed: int = 0) -> pd.DataFrame:
    """Naive MTP vs MRP by lookahead K: accuracy per model x benchmark x method x K.

    Lookahead K = tokens revealed per backbone forward beyond the backbone's own pick (the paper's naive K = 1
    row is below static and its MRP K = 1 row matches direct step 1): naive_mtp = mode "naive" revealing K + 1
    tokens from the same uncorrected logits; mrp = mode "direct" with steps = K.
    """
    df = normalize_runs(runs)
    keys = ["model", "benchmark", "method", "lookahead_k"]
    rows = []
    for method, mode, kcol, offset in (("naive_mtp", "naive", "k", 1), ("mrp", "direct", "steps", 0)):
        sub = df[df["mode"] == mode]
        for (model, bench, k), g in sub.groupby(["model", "benchmark", kcol]):
            k = k - offset
            if k < 1:
                continue
            row = {"model": model, "benchmark": bench, "method": method, "lookahead_k": int(k), "n": len(g)}
            row["accuracy"], row["accuracy_lo"], row["accuracy_hi"] = bootstrap_ci(g["correct"], n_boot, ci, seed)
            rows.append(row)
    if not rows:
        return _empty("lookahead", keys, ["accuracy"])
    ours = pd.DataFrame(rows).sort_values(
        ["model", "benchmark", "method", "lookahead_k"], ascending=[True, True, False, True]
    )
    return _with_paper(ours, "lookahead", keys, ["accuracy"]).reset_index(drop=True)


# ----------------------------------------------------------------------------- result files


def results_dir(profile: Profile) -> Path:
    """runs/<profile>/results-<profile hash>/, created."""
    from mrp_repro.runtime import runs_root

    d = runs_root() / profile.name / f"results-{profile.hash}"
    d.mkdir(parents=True, exist_ok=True)
    return d


def result_path(profile: Profile, name: str) -> Path:
    if name not in RESULTS:
        raise ValueError(f"unknown result {name!r}; valid: {', '.join(RESULTS)}")
    return results_dir(profile) / f"{name}.csv"


def save_result(profile: Profile, name: str, df: pd.DataFrame) -> Path:
    """Write a result frame atomically (CSV) under results_dir(profile)."""
    path = result_path(profile, name)
    tmp = path.with_name(f".{path.name}.tmp")
    df.to_csv(tmp, index=False)
    tmp.replace(path)
    return path


def load_result(profile: Profile, name: str) -> pd.DataFrame | None:
    """A result frame written by an earlier notebook on this profile, or None."""
    path = result_path(profile, name)
    return pd.read_csv(path) if path.exists() else None


def cached_result(profile: Profile, name: str, compute) -> pd.DataFrame:
    """The stored result `name`, else compute() (a DataFrame), stored, then returned."""
    df = load_result(profile, name)
    if df is None:
        df = compute()
        save_result(profile, name, df)
        df = load_result(profile, name)  # the same dtypes whether computed now or read back
    return df


def split_runs(runs: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """A runs frame of every mode split into the mode-specific frames of RUN_SPLITS."""
    df = normalize_runs(runs)
    return {name: df[df["mode"].isin(modes)].reset_index(drop=True) for name, modes in RUN_SPLITS.items()}


def load_results(profile: Profile) -> dict[str, pd.DataFrame]:
    """Every result frame present for this profile (name -> DataFrame); modes_runs is split by RUN_SPLITS."""
    out = {}
    for name in RESULTS:
        df = load_result(profile, name)
        if df is not None:
            out[name] = df
    if "modes_runs" in out:
        for name, df in split_runs(out["modes_runs"]).items():
            out.setdefault(name, df)
    return out


def mrp_curve_frame(loss_curve: pd.DataFrame | str | Path) -> pd.DataFrame:
    """train_mrp's loss_curve.csv (long: step, split, loss, heldout_kl, heldout_baseline_kl, ...) as one row per
    step: step, train_loss, heldout_kl, heldout_uncorrected_kl (the baseline KL(B || A))."""
    df = pd.read_csv(loss_curve) if not isinstance(loss_curve, pd.DataFrame) else loss_curve
    if "split" not in df.columns:
        return df
    train = df[df["split"] == "train"][["step", "loss"]].rename(columns={"loss": "train_loss"})
    held = df[df["split"] == "heldout"]
    keep = {"heldout_kl": "heldout_kl", "heldout_baseline_kl": "heldout_uncorrected_kl"}
    held = held[["step", *[c for c in keep if c in held.columns]]].rename(columns=keep)
    return train.merge(held, on="step", how="outer").sort_values("step").reset_index(drop=True)


def decode_events(backbone, policy, problems: list, max_new_tokens: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run one decoding policy on a few problems; returns (trace events, per-round accept lengths)."""
    from mrp_repro.backbone import encode_prompts

    bb = backbone
    res = bb.generate(encode_prompts(bb, problems), policy, max_new_tokens)
    trace = pd.DataFrame(res.trace, columns=["row", "block", "step", "kind", "pos", "token"])
    acc = [{"row": r, "round": i, "accept_length": a} for r, s in enumerate(res.stats)
           for i, a in enumerate(s.accept_lengths)]  # fmt: skip
    return trace, pd.DataFrame(acc, columns=["row", "round", "accept_length"])


# ----------------------------------------------------------------------------- synthetic runs (tests, docs)


def synthetic_runs(
    model: str = "tiny", benchmarks=("synth-math", "synth-code"), n: int = 40, good: bool = True, seed: int = 0
) -> pd.DataFrame:
    """A runs frame with every mode, shaped like the notebooks' (for tests and examples).

    ``good=True``: MRP behaves as the paper says (speculative lossless and faster, remasking helps at low tau,
    MRP degrades gracefully with K while naive collapses); ``good=False``: the opposite.
    """
    rng = np.random.default_rng(seed)
    u = {b: rng.random(n) for b in benchmarks}  # one difficulty per problem, shared by all modes (paired)
    rows = []

    def add(bench, mode, p_correct, nfe_per_tok, wall_per_tok, identical=None, **setting):
        for i in range(n):
            tokens = 32
            rows.append(
                {
                    "model": model,
                    "benchmark": bench,
                    "mode": mode,
                    "problem_id": f"{bench}/{i}",
                    "correct": bool(u[bench][i] < p_correct),
                    "tokens": tokens,
                    "backbone_nfe": tokens * nfe_per_tok,
                    "denoise_nfe": tokens * nfe_per_tok,
                    "wall_s": tokens * wall_per_tok * (1 + 0.05 * rng.random()),
                    "identical": identical,
                    **setting,
                }
            )

    for b in benchmarks:
        add(b, "static", 0.8, 1.0, 0.010, identical=True)
        for k in (3,):
            add(
                b,
                "speculative",
                0.8 if good else 0.6,
                0.6 if good else 1.2,
                0.007 if good else 0.013,
                identical=good,
                k=k,
            )
        for steps, (acc, sp) in {1: (0.78, 0.65), 2: (0.75, 0.55)}.items():
            add(b, "direct", acc if good else 0.2, sp, sp * 0.01, steps=steps)
        for k in (1, 2, 3, 4):
            add(b, "naive", 0.8 * (0.25 ** (k - 1)) if good else 0.8, 1.0 / k, 0.01 / k, k=k + 1)  # K + 1 tokens
            if k > 2:
                add(b, "direct", (0.8 - 0.05 * k) if good else 0.05, 1.0 / k, 0.01 / k, steps=k)
        for tau in (0.9, 0.7, 0.5, 0.3):
            base = 0.8 - 0.6 * (0.9 - tau)
            add(b, "dynamic", base, tau, tau * 0.01, threshold=tau)
            for rule in ("tau", "delta"):
                gain = (0.9 - tau) * 0.5 if good else -(0.9 - tau) * 0.3
                add(b, "remask", min(base + gain, 1.0), tau * 1.2, tau * 0.012, threshold=tau, rule=rule)
    df = pd.DataFrame(rows)
    return df
