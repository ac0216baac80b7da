"""The paper's reported numbers, and our results in the paper's table shapes.

    from mrp_repro.report import paper
    paper.load("remasking")                          # the paper's table (DataFrame), from package data
    paper.remasking_table(runs, n_boot=1000)         # ours, same rows/columns, CI, paper beside
    paper.save_result(profile, "modes_runs", runs); paper.load_result(profile, "modes_runs")

The paper's numbers (arXiv 2605.18817 v2 abstract + the authors' blog) ship as package data in
``mrp_repro/paper_data/*.csv`` (see SOURCE.md there).

Our results are runs frames in the schema of mrp_repro.measure.schema (one record per prompt and decoding
setting, from mrp_repro.measure.runs.collect_runs), read here by exact column name. Every row carries
the paper model its run is compared with (``paper_model``, the profile's declared ``paper.model``): the
paper columns quote that model's numbers only, and stay blank where the paper has no row for it. On the
tiny/smoke profiles the model is the profile name and the synthetic tasks map to the paper's benchmarks
through BENCHMARK_MAP. Accuracies and gains are in percent, every CI a
``<metric>_lo`` / ``<metric>_hi`` pair.

Every notebook stores its results under ``runs/<profile>/results-<profile hash>-<schema>/`` with the file
names in RESULTS, so 09_claims reads what 01-07 wrote and a changed profile (or runs schema) never reads
stale numbers.
"""

from __future__ import annotations

import math
import sys
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from mrp_repro.measure import stats
from mrp_repro.measure.schema import require

if TYPE_CHECKING:
    from mrp_repro.config import Profile

__all__ = [
    "TABLES", "PAPER_SPECULATIVE_K", "BENCHMARK_MAP", "RESULTS", "RESULTS_SCHEMA", "load",
    "reports", "backbone_table", "modes_table", "remasking_table", "speculative_table", "direct_table",
    "lookahead_table", "results_dir", "result_path", "save_result", "load_result", "cached_result",
    "split_runs", "load_results", "mrp_curve_frame", "cached_adjacent",
]  # fmt: skip

TABLES = ("remasking", "speculative", "direct", "lookahead")

#: the draft length of the paper's speculative table (paper_data/SOURCE.md): its numbers stand beside K = 3 only
PAPER_SPECULATIVE_K = 3

#: our benchmark -> the paper benchmark it stands in for (defined once, here)
BENCHMARK_MAP = {
    "synth-math": "gsm8k",
    "synth-code": "humaneval",
    "chain-math": "gsm8k",  # chain16's tasks (tasks/chain.py): GSM8K's extraction, HumanEval's execution
    "chain-code": "humaneval",
    "gsm8k": "gsm8k",
    "math500": "math500",
    "humaneval": "humaneval",
    "mbpp": "mbpp",
}

#: result files written by the notebooks, read by 09_claims: name -> (notebook, what)
RESULTS = {
    "environment": ("00_environment", "versions, device, provenance (one row per key)"),
    "backbone": ("01_backbone", "backbone table: static and dynamic(tau) per benchmark (stats.summarize)"),
    "backbone_runs": ("01_backbone", "runs frame: static + dynamic(tau)"),
    "backbone_curve": ("01_backbone", "backbone training loss curve"),
    "trajectories": ("02_trajectories", "trajectory collection summary"),
    "adjacent": ("03_adjacent_step_logits", "KL / top-1 agreement by step distance and subset, trained vs random"),
    "mrp_curve": ("04_train_mrp", "MRP training curve: train / held-out KL, uncorrected baseline"),
    "mrp_heldout": ("04_train_mrp", "released head (mrp.pretrained), nothing trained: held-out KL(B‖A+C) vs the "
                    "uncorrected KL(B‖A) on packed GSM8K-train sequences (stages.released_heldout)"),
    "speculative_runs": ("05_speculative", "runs frame at batch 1: static + speculative(K, every drafter)"),
    "modes_runs": ("05_speculative", "runs frame of every mode at the decoding batch size (05-07 share it)"),
    "trace": ("07_remasking", "engine trace of one remasking generation"),
    "wallclock_passes": ("05_speculative", "wall seconds of the speed verdicts' settings in repeated interleaved "
                         "passes (report.wallclock.repeated_passes): the repeatable check"),
    "controls_runs": ("07_remasking", "runs frame of the no-MRP controls (report.grids: random veto, untrained head)"),
    "cost_model": ("07_remasking", "the run's cost model at batch 1 and the decoding batch size "
                   "(measure.cost.run_cost_model): head_cost, one head call in backbone forwards, the charge of the "
                   "equal-TPF control; row_cost, one verify block-row beyond the first (measure.cost.row_cost)"),
    "peers_runs": ("07_remasking", "runs frame of MRP beside its peers at the decoding batch size (report.peers: every "
                   "method of mrp_repro.methods held by peers_runs, with the columns method and extra_rows; decoded "
                   "in 07 so that 09's peer claims read it, drawn by 11; the settings modes_runs holds are its rows, "
                   "resumed_from naming it)"),
}

#: bumped when the runs schema changes, so cached results of an older schema are never read
# v6: naive settings named naive_mtp(K); v7: the algorithm column (ours / upstream); v8: the inputs column;
# v9: the machine column (CPU capability, BLAS, threads)
from mrp_repro.runtime import RESULTS_SCHEMA  # noqa: E402 - defined on the floor that stamps results

#: the (mode, algorithm) pairs of each table's slice of modes_runs (split_runs): direct and naive exist in our
#: algorithm only, so their slices hold our static alone; remasking keeps both algorithms (a key of its table)
RUN_SPLITS = {
    "direct_runs": (("static", "ours"), ("direct", "ours")),
    "lookahead_runs": (("naive", "ours"), ("direct", "ours")),
    "remasking_runs": (("dynamic", "ours"), ("remask", "ours"), ("dynamic", "upstream"), ("remask", "upstream")),
}


# ----------------------------------------------------------------------------- the paper's numbers


def load(table: str) -> pd.DataFrame:
    """The paper's reported table (`remasking`, `speculative`, `direct`, `lookahead`)."""
    if table not in TABLES:
        raise ValueError(f"unknown paper table {table!r}; valid: {', '.join(TABLES)}")
    with resources.files("mrp_repro.paper_data").joinpath(f"{table}.csv").open() as fh:
        return pd.read_csv(fh)


def reports(model: str, table: str) -> bool:
    """Whether the paper's `table` has rows for `model` (else its values stay blank beside ours)."""
    return model in set(load(table)["model"])


# ----------------------------------------------------------------------------- our tables

#: the runs columns every table reads
_BASE = ["model", "benchmark", "algorithm", "mode", "problem_id", "correct", "K", "threshold", "rule", "drafter",
         "batch_size"]  # fmt: skip
_SPEED = ["tokens", "wall_s", "denoise_forwards", "commit_forwards"]


def _one_setting(g: pd.DataFrame, what: str) -> pd.DataFrame:
    """g itself if it holds one row per problem (one setting); else a ValueError naming what blended."""
    dup = g["problem_id"].duplicated()
    if dup.any():
        raise ValueError(f"{what}: problem {g.loc[dup, 'problem_id'].iloc[0]!r} appears more than once; the rows "
                         "blend several settings or batch sizes (select one before building the table)")  # fmt: skip
    return g


def _paired(a: pd.DataFrame, b: pd.DataFrame, cols: list[str], what: str) -> pd.DataFrame:
    """Rows of a and b on the same problems (inner join on problem_id), suffixes _m (a) and _s (b)."""
    a = _one_setting(a, what).set_index("problem_id")[cols]
    b = _one_setting(b, what).set_index("problem_id")[cols]
    return a.add_suffix("_m").join(b.add_suffix("_s"), how="inner")


def _speed(g: pd.DataFrame, s: pd.DataFrame, n_boot, ci, seed, what: str) -> dict:
    """Speedup of runs g over static runs s on the same problems: wall clock (tokens/s) and backbone forwards."""
    g = g.assign(backbone_forwards=g["denoise_forwards"] + g["commit_forwards"])
    s = s.assign(backbone_forwards=s["denoise_forwards"] + s["commit_forwards"])
    p = _paired(g, s, ["tokens", "wall_s", "backbone_forwards"], what)
    row = {}
    row["throughput_speedup"], row["throughput_speedup_lo"], row["throughput_speedup_hi"] = stats.ratio_ci(
        p["tokens_m"], p["wall_s_m"], p["tokens_s"], p["wall_s_s"], n_boot, ci, seed
    )
    row["nfe_speedup"], row["nfe_speedup_lo"], row["nfe_speedup_hi"] = stats.ratio_ci(
        p["tokens_m"], p["backbone_forwards_m"], p["tokens_s"], p["backbone_forwards_s"], n_boot, ci, seed
    )
    return row


def _tpf(g: pd.DataFrame) -> float:
    den = g["denoise_forwards"].sum()
    return float(g["tokens"].sum() / den) if den > 0 else math.nan


def _acc(row: dict, name: str, values, n_boot, ci, seed) -> None:
    row[name], row[f"{name}_lo"], row[f"{name}_hi"] = stats.mean_ci(values, n_boot, ci, seed)


def _static_of(runs: pd.DataFrame, model, bench, what: str, algorithm: str = "ours") -> pd.DataFrame:
    """The static rows of one model, benchmark and algorithm (ours: static(1); upstream: upstream_static(1))."""
    s = runs[(runs["mode"] == "static") & (runs["model"] == model) & (runs["benchmark"] == bench)
             & (runs["algorithm"] == algorithm)]  # fmt: skip
    if s.empty:
        raise ValueError(f"{what}: no static rows of algorithm {algorithm} for {model} / {bench}; collect_runs "
                         "runs one static per algorithm")  # fmt: skip
    return s


def backbone_table(runs: pd.DataFrame, n_boot: int = 1000, ci: float = 0.95, seed: int = 0) -> pd.DataFrame:
    """Static and dynamic(tau) per benchmark: accuracy [CI] (%), valid chain (%), TPF, forwards, speedup."""
    require(runs, stats.SUMMARY_NEEDS, "backbone_table")
    s = stats.summarize(runs[runs["mode"].isin(["static", "dynamic"])], n_boot, ci, seed)
    cols = ["model", "benchmark", "setting", "n", "accuracy", "accuracy_lo", "accuracy_hi", "valid_chain", "tpf",
            "backbone_forwards", "tokens_per_s", "speedup"]  # fmt: skip
    return s[cols].reset_index(drop=True)


#: the columns of the every-mode table (modes.md)
MODES_COLUMNS = ["model", "benchmark", "algorithm", "mode", "setting", "n", "accuracy", "accuracy_lo", "accuracy_hi",
                 "backbone_forwards", "mrp_forwards", "tpf", "upstream_tpf", "tokens_per_s", "speedup", "lossless",
                 "tpf_share_of_oracle", "mean_accept", "revoked"]  # fmt: skip


def modes_table(runs: pd.DataFrame, cost: dict | None = None, n_boot: int = 1000, ci: float = 0.95,
                seed: int = 0) -> pd.DataFrame:  # fmt: skip
    """Every setting of a runs frame (stats.summarize), with the cost model's columns when `cost` is given.

    The oracle drafter's picks come from forwards that are not counted or timed (the backbone's own future
    picks): its wall-clock columns (tokens_per_s, speedup) are blank, its TPF is the ceiling, and its
    predicted_speedup is the cost model's ceiling, not a measured speed."""
    from mrp_repro.measure.cost import with_cost_model

    s = stats.summarize(runs, n_boot, ci, seed)
    s.loc[s["drafter"] == "oracle", ["tokens_per_s", "speedup"]] = math.nan
    cols = list(MODES_COLUMNS)
    if cost is not None:
        s = with_cost_model(s, cost)
        cols += ["verify_cost", "head_cost", "predicted_speedup"]
    out = s[cols].reset_index(drop=True)
    out.attrs = s.attrs
    return out


def _paper_models(runs: pd.DataFrame) -> dict[str, str]:
    """model -> the paper model its runs are compared with (each run's declared `paper_model`)."""
    require(runs, ["model", "paper_model"], "the paper's columns")
    pairs = runs[["model", "paper_model"]].drop_duplicates()
    two = pairs[pairs["model"].duplicated(keep=False)]
    if not two.empty:
        raise ValueError(f"runs of one model compared with two paper models: {two.to_dict('records')}")
    return dict(zip(pairs["model"], pairs["paper_model"], strict=True))


def _with_paper(ours: pd.DataFrame, table: str, keys: list[str], metrics: list[str], paper_models: dict[str, str],
                on_extra: list[str] | None = None) -> pd.DataFrame:  # fmt: skip
    """Join the paper's numbers beside ours on (paper model, paper benchmark, *on_extra: the keys other than
    model and benchmark by default); columns: keys, then metric, lo, hi, paper_metric, the rest. The paper
    model is the runs' own `paper_model` (the profile's declared one); no row of another model is joined."""
    ref = load(table)
    ours = ours.copy()
    ours["paper_model"] = ours["model"].map(paper_models)
    ours["paper_benchmark"] = ours["benchmark"].map(BENCHMARK_MAP)
    ref = ref.rename(columns={"model": "paper_model", "benchmark": "paper_benchmark"})
    ref = ref.rename(columns={m: f"paper_{m}" for m in metrics})
    extra = on_extra if on_extra is not None else [k for k in keys if k not in ("model", "benchmark")]
    on = ["paper_model", "paper_benchmark", *extra]
    if "threshold" in on:  # floats: join on rounded values
        ours["threshold"] = ours["threshold"].astype(float).round(3)
        ref["threshold"] = ref["threshold"].astype(float).round(3)
    out = ours.merge(ref[on + [f"paper_{m}" for m in metrics]], on=on, how="left")
    cols = list(keys)
    for m in metrics:
        cols += [c for c in (m, f"{m}_lo", f"{m}_hi", f"paper_{m}") if c in out.columns]
    rest = [c for c in out.columns if c not in cols and c not in ("paper_model", "paper_benchmark")]
    return out[cols + rest + ["paper_model", "paper_benchmark"]]


def _no_rows(what: str, need: str) -> ValueError:
    return ValueError(f"{what}: the runs frame has no {need} rows (collect them with measure.runs.collect_runs)")


def remasking_table(runs: pd.DataFrame, rule: str | None = "tau", n_boot: int = 1000, ci: float = 0.95,
                    seed: int = 0, algorithm: str | None = "ours") -> pd.DataFrame:  # fmt: skip
    """τ sweep by model x benchmark: dynamic(τ) baseline vs MRP remask(τ, rule), paired gain (points) with CI.

    ``rule=None`` keeps every remasking rule (one row per rule, column ``rule``). ``algorithm``: ours (default),
    upstream (the released code's remasking, decoding.upstream_remask: rule delta, one row per δ of
    decoding.upstream_remask_deltas) or None (both, column ``algorithm``); each remask row is paired with the
    dynamic(τ) of its own algorithm, never pooled. Column ``delta`` (kept where any row has one): the δ of the
    delta rules; every δ of a sweep is its own row."""
    what = "remasking_table"
    require(runs, _BASE + ["delta"], what)
    base, rem = runs[runs["mode"] == "dynamic"], runs[runs["mode"] == "remask"]
    if algorithm is not None:
        base, rem = base[base["algorithm"] == algorithm], rem[rem["algorithm"] == algorithm]
    if rule is not None:
        rem = rem[rem["rule"] == rule]
    if rem.empty:
        raise _no_rows(what, "remask" + (f" rule={rule}" if rule else "") + (f" algorithm={algorithm}" if algorithm
                                                                                 else ""))  # fmt: skip
    rows = []
    keys_by = ["model", "algorithm", "threshold", "benchmark", "rule", "delta"]
    for (model, algo, tau, bench, r, delta), g in rem.groupby(keys_by, dropna=False):
        b = base[(base["model"] == model) & (base["benchmark"] == bench) & np.isclose(base["threshold"], tau)
                 & (base["algorithm"] == algo)]  # fmt: skip
        if b.empty:
            raise ValueError(f"{what}: no {algo} dynamic({tau}) rows for {model} / {bench} to pair remask({tau}) with")
        p = _paired(g, b, ["correct"], what)
        row = {"model": model, "threshold": float(tau), "benchmark": bench, "algorithm": algo, "rule": r,
               "delta": float(delta), "n": len(p)}  # fmt: skip
        _acc(row, "baseline_accuracy", p["correct_s"], n_boot, ci, seed)
        _acc(row, "mrp_remask_accuracy", p["correct_m"], n_boot, ci, seed)
        d = stats.paired_diff(p["correct_m"], p["correct_s"], n_boot, ci, seed)
        row.update(gain=d["diff"], gain_lo=d["diff_lo"], gain_hi=d["diff_hi"], gain_p=d["p_value"])
        rows.append(row)
    keys = ["model", "threshold", "benchmark"]
    ours = pd.DataFrame(rows).sort_values(["model", "algorithm", "rule", "delta", "benchmark", "threshold"])
    out = _with_paper(ours, "remasking", keys, ["baseline_accuracy", "mrp_remask_accuracy"], _paper_models(runs))
    out["paper_gain"] = out["paper_mrp_remask_accuracy"] - out["paper_baseline_accuracy"]
    cols = [c for c in out.columns if c != "paper_gain"]
    i = cols.index("gain_hi") + 1
    out = out[cols[:i] + ["paper_gain"] + cols[i:]]
    # the paper ran its v2 τ rule (METHOD.md §5) and the released code's δ veto (upstream), not our other rules:
    # beside those its remasking number stays blank (its dynamic baseline is the same setting, kept)
    not_run = (out["algorithm"] == "ours") & (out["rule"] != "tau")
    out.loc[not_run, ["paper_mrp_remask_accuracy", "paper_gain"]] = np.nan
    # the both-families table (algorithm=None) keeps algorithm and delta always: plots.plot_remasking reads them
    drop = [c for c, gone in (("rule", rule is not None), ("algorithm", algorithm is not None),
                              ("delta", algorithm is not None and out["delta"].isna().all())) if gone]  # fmt: skip
    return out.drop(columns=drop).reset_index(drop=True)


def speculative_table(runs: pd.DataFrame, drafter: str = "mrp", n_boot: int = 1000, ci: float = 0.95,
                      seed: int = 0) -> pd.DataFrame:  # fmt: skip
    """Speculative(K, drafter) vs static per model x benchmark x algorithm x K (every K: one row each):
    accuracy, static accuracy, TPF, wall-clock and backbone-forward speedup with CI, identical_share (fraction of
    outputs token-for-token equal to the same algorithm's static: 1.0 = lossless). `algorithm` (ours / upstream,
    docs/upstream.md) is a key: each row compares with its own algorithm's static, never pooled. tpf counts per
    row (both algorithms); upstream_tpf is the released code's accounting (tokens summed over a batch's rows per
    batched forward; NaN on ours). The paper's speculative table is the released code's K = 3
    (PAPER_SPECULATIVE_K, algorithm upstream): its numbers stand beside our upstream K = 3 rows only, blank
    beside every other K and beside our own algorithm, whose K counts drafts otherwise."""
    what = "speculative_table"
    require(runs, _BASE + _SPEED + ["identical_to_static", "upstream_denoise_forwards"], what)
    spec = runs[(runs["mode"] == "speculative") & (runs["drafter"] == drafter)]
    if spec.empty:
        raise _no_rows(what, f"speculative drafter={drafter}")
    rows = []
    for (model, bench, algo, K), g in spec.groupby(["model", "benchmark", "algorithm", "K"]):
        s = _static_of(runs, model, bench, what, algo)
        row = {"model": model, "benchmark": bench, "algorithm": algo, "K": int(K), "n": len(g)}
        _acc(row, "accuracy", g["correct"], n_boot, ci, seed)
        row["static_accuracy"] = stats.mean_ci(s["correct"], 0)[0]
        row["tpf"], row["static_tpf"] = _tpf(g), _tpf(s)
        row["upstream_tpf"] = stats.upstream_tpf(g)
        row.update(_speed(g, s, n_boot, ci, seed, what))
        if drafter == "oracle":  # picks from uncounted, untimed forwards: a TPF ceiling, not a speed
            row.update({k: math.nan for k in row if k.startswith("throughput_speedup")})
        row["identical_share"] = float(g["identical_to_static"].astype(float).mean())
        rows.append(row)
    keys = ["model", "benchmark", "algorithm", "K"]
    ours = pd.DataFrame(rows).sort_values(keys)
    out = _with_paper(ours, "speculative", keys, ["accuracy", "throughput_speedup"], _paper_models(runs), [])
    paper_setting = (out["K"] == PAPER_SPECULATIVE_K) & (out["algorithm"] == "upstream")
    out.loc[~paper_setting, ["paper_accuracy", "paper_throughput_speedup"]] = np.nan
    return out.reset_index(drop=True)


def direct_table(runs: pd.DataFrame, steps=(1, 2), n_boot: int = 1000, ci: float = 0.95, seed: int = 0) -> pd.DataFrame:
    """Direct mode: baseline (static) vs MRP step 1/2 (``steps``: K of direct rows), accuracy, TPF and speedup,
    per model x benchmark."""
    what = "direct_table"
    require(runs, _BASE + _SPEED, what)
    static = runs[(runs["mode"] == "static") & (runs["algorithm"] == "ours")]  # direct is ours: our static
    direct = runs[(runs["mode"] == "direct") & runs["K"].isin(list(steps))]
    if static.empty or direct.empty:
        raise _no_rows(what, "static and direct(steps in " + str(tuple(steps)) + ")")
    rows = []
    for (model, bench), s in static.groupby(["model", "benchmark"]):
        row = {"model": model, "setting": "baseline", "benchmark": bench, "n": len(s)}
        _acc(row, "accuracy", s["correct"], n_boot, ci, seed)
        row["tpf"] = _tpf(s)
        row.update(_speed(s, s, 0, ci, seed, what))
        rows.append(row)
    for (model, bench, st), g in direct.groupby(["model", "benchmark", "K"]):
        s = _static_of(runs, model, bench, what)
        row = {"model": model, "setting": f"mrp_step{int(st)}", "benchmark": bench, "n": len(g)}
        _acc(row, "accuracy", g["correct"], n_boot, ci, seed)
        row["tpf"] = _tpf(g)
        row.update(_speed(g, s, n_boot, ci, seed, what))
        rows.append(row)
    ours = pd.DataFrame(rows).sort_values(["model", "setting", "benchmark"])
    keys = ["model", "setting", "benchmark"]
    out = _with_paper(ours, "direct", keys, ["accuracy", "throughput_speedup"], _paper_models(runs))
    return out.reset_index(drop=True)


def lookahead_table(runs: pd.DataFrame, n_boot: int = 1000, ci: float = 0.95, seed: int = 0) -> pd.DataFrame:
    """Naive MTP vs MRP by lookahead K: accuracy (CI) and the TPF it reaches, per model x benchmark x method x K.

    Lookahead K = tokens revealed per backbone forward beyond the backbone's own pick (the schema's K):
    naive_mtp = mode "naive" (K + 1 tokens from the same uncorrected logits), mrp = mode "direct" (K MRP
    steps). K = 0 would be static. TPF tells a reader why accuracy need not fall monotonically in K: at
    block 8, K = 3 and K = 4 both reach TPF 4.0 (two forwards per block either way)."""
    what = "lookahead_table"
    require(runs, _BASE + _SPEED, what)
    rows = []
    for method, mode in (("naive_mtp", "naive"), ("mrp", "direct")):
        for (model, bench, k), g in runs[runs["mode"] == mode].groupby(["model", "benchmark", "K"]):
            row = {"model": model, "benchmark": bench, "method": method, "lookahead_k": int(k), "n": len(g)}
            _acc(row, "accuracy", _one_setting(g, what)["correct"], n_boot, ci, seed)
            row["tpf"] = _tpf(g)
            rows.append(row)
    if not rows:
        raise _no_rows(what, "naive or direct")
    ours = pd.DataFrame(rows).sort_values(
        ["model", "benchmark", "method", "lookahead_k"], ascending=[True, True, False, True]
    )
    keys = ["model", "benchmark", "method", "lookahead_k"]
    return _with_paper(ours, "lookahead", keys, ["accuracy"], _paper_models(runs)).reset_index(drop=True)


# ----------------------------------------------------------------------------- result files


def results_dir(profile: Profile) -> Path:
    """runs/<profile>/results-<profile hash>-<RESULTS_SCHEMA>/, created."""
    from mrp_repro.runtime import runs_root

    d = runs_root() / profile.name / f"results-{profile.hash}-{RESULTS_SCHEMA}"
    d.mkdir(parents=True, exist_ok=True)
    return d


def result_path(profile: Profile, name: str) -> Path:
    if name not in RESULTS:
        raise ValueError(f"unknown result {name!r}; valid: {', '.join(RESULTS)}")
    return results_dir(profile) / f"{name}.csv"


def save_result(profile: Profile, name: str, df: pd.DataFrame) -> Path:
    """Write a result frame atomically (CSV) under results_dir(profile)."""
    from mrp_repro import integrity

    path = result_path(profile, name)
    with integrity.atomic_file(path) as tmp:  # a unique temporary name, renamed into place
        df.to_csv(tmp, index=False)
    integrity.write_sidecar(path, rows=len(df))  # <name>.csv.sha256.json: checked by load_result before reuse
    from mrp_repro.runtime import stamp_computed

    stamp_computed(path)  # <name>.csv.provenance.json: the commit that computed it (a table that reads it says so)
    return path


def result_problem(profile: Profile, name: str) -> str | None:
    """Why the stored result `name` must not be reused (None when it matches its recorded sha256 and size)."""
    from mrp_repro import integrity

    return integrity.sidecar_problem(result_path(profile, name))


def load_result(profile: Profile, name: str) -> pd.DataFrame | None:
    """A result frame written by an earlier notebook on this profile, or None: also when the file does not match its
    integrity record (size and sha256, which pin its rows too: a CSV cut short is never reused), with a note naming
    it on stderr."""
    path = result_path(profile, name)
    if not path.exists():
        return None
    if (why := result_problem(profile, name)) is not None:
        print(f"results: not reusing {why}; it is recomputed", file=sys.stderr)
        return None
    from mrp_repro.runtime import note_read

    df = pd.read_csv(path)
    note_read(path)  # the tables this process writes next record it, and the commit that computed it
    return df


def cached_result(profile: Profile, name: str, compute) -> pd.DataFrame:
    """The stored result `name`, else compute() (a DataFrame), stored, then returned."""
    df = load_result(profile, name)
    if df is None:
        df = compute()
        save_result(profile, name, df)
        df = load_result(profile, name)  # the same dtypes whether computed now or read back
    return df


def split_runs(runs: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """A runs frame of every mode split into the slices of RUN_SPLITS (direct_runs, lookahead_runs, ...)."""
    require(runs, ["mode", "algorithm"], "split_runs")
    pairs = pd.Series(list(zip(runs["mode"], runs["algorithm"], strict=True)), index=runs.index)
    return {name: runs[pairs.isin(keep)].reset_index(drop=True) for name, keep in RUN_SPLITS.items()}


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
    require(df, ["step", "split", "loss"], "mrp_curve_frame")
    train = df[df["split"] == "train"][["step", "loss"]].rename(columns={"loss": "train_loss"})
    held = df[df["split"] == "heldout"]
    keep = {"heldout_kl": "heldout_kl", "heldout_baseline_kl": "heldout_uncorrected_kl"}
    held = held[["step", *[c for c in keep if c in held.columns]]].rename(columns=keep)
    return train.merge(held, on="step", how="outer").sort_values("step").reset_index(drop=True)


def cached_adjacent(profile: Profile, backbone, problems, **kw) -> pd.DataFrame:
    """The profile's stored `adjacent` result when it has every measure.adjacent.ADJACENT_COLUMNS column, else
    measure.adjacent.adjacent_step_similarity(backbone, problems, **kw), stored (an older frame without the null
    is recomputed)."""
    from mrp_repro.measure.adjacent import ADJACENT_COLUMNS, adjacent_step_similarity

    df = load_result(profile, "adjacent")
    if df is None or list(df.columns) != ADJACENT_COLUMNS:
        save_result(profile, "adjacent", adjacent_step_similarity(backbone, problems, **kw))
        df = load_result(profile, "adjacent")
    return df
