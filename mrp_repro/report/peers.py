"""MRP beside its peers on one engine (issue 37): the methods of mrp_repro.methods held by peers_runs, decoded through
measure.runs.collect_runs, in one table and one figure.

    from mrp_repro.report import peers
    python -m mrp_repro.report.peers --profile chain16 --nproc 2   # the grid alone, on 2 torchrun ranks

    out = peers.run(P, bb, head)            # figures/<profile>/peers.{md,tex,csv,png,pdf}; out["table"], out["runs"]
    runs = peers.peer_runs(P, bb, head)     # report.paper's result "peers_runs": the stored frame, else decoded
    t = peers.peers_table(runs, head_cost=0.3, row_cost=0.2)
    fig = peers.plot_peers(t)

The grid (GRID, grid_settings): every registered method whose `runs` names peers_runs, in registration order: static(1),
dynamic(τ), the SSD / FreeDave chain (the no-head drafter, speculative(K, naive)), MRP speculative(K), MRP remasking,
the Spiffy draft graph at D = K and 2K over static(1) and over dynamic(0.9), WINO at every remasking τ, the MRP
draft tree at the graphs' verify rows (decoding.mrp_tree: its chain and the head's runner-up at its first draft),
and any method registered later with runs=("peers_runs",) (a new peer is one declaration: nothing here names a method);
then each lossless method's reference where no method decodes it (dynamic(0.9) on a profile without τ = 0.9), and
methods.PeerStatic, the peer family's static(1) that collect_runs compares the peer rows with (identical_to_static;
its rows stay out of the table). One collect_runs call at the decoding batch size: every setting of a batch is
decoded back to back, so each wall-clock ratio over static(1) is paired. A setting that modes_runs (REUSE_FROM) holds
at the same prompts and batch size is read from its stored frame instead of decoded again (held_rows, with_held: its
clock scaled by the two grids' static(1), so its ratio is the one modes_runs paired); our static(1) is decoded here.
One runs column collect_runs does not write is written here: `method` (the declaration each setting comes from;
with_methods). Resumable and sharded as
report.grids' grids (peer_runs); `python -m mrp_repro.report.peers --profile P --nproc 2` decodes it on 2 torchrun
ranks (make reproduce NPROC=2 does, before the notebooks).

The table (peers_table), per benchmark, method and setting: accuracy with its CI; TPF; weighted_tpf (head calls
charged head_cost); charged_tpf (and every block-row beyond one in a forward charged row_cost: each method pays its
measured head calls and wide forwards; costs: the run's cost model, costs()); extra rows and head calls per prompt;
the reference it claims to reproduce and the share of prompts token-identical to it (a lossless method below 1
fails its claim: its speed columns are blank, so no speed of it is reported); the wall-clock speedup over static(1),
paired over prompts, with its CI. run() marks it with report.wallclock.mark_clock: ours' decodes carry the modes
grid's measurement of record and gate, the peers' read unchecked (no repeated passes time them). The figure
(plot_peers): accuracy vs charged_tpf, one panel per benchmark, one marker and colour per method (its series label;
per method and rule where a method holds several rules), its settings joined in TPF order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from mrp_repro import methods
from mrp_repro.measure import stats
from mrp_repro.measure.cost import weighted_denoise_forwards
from mrp_repro.measure.schema import require
from mrp_repro.report.plots_base import (
    LABELS,
    _colors,
    _legend_below,
    _need,
    _unique,
    _yerr,
    nest_coincident_markers,
    set_theme,
    shift,
    side_by_side_offsets,
)

__all__ = ["GRID", "REUSE_FROM", "TABLE", "FIGURE", "PEERS_COLUMNS", "grid_settings", "grid_methods", "decode",
           "reused_settings", "held_rows", "with_held", "peer_runs", "with_methods", "costs", "peers_table",
           "AUP_ALPHA", "aup", "aup_table", "plot_peers", "run"]  # fmt: skip

#: the grid frame (report.paper's result name, methods.RUNS) and the names of the table and figure
GRID = "peers_runs"
#: the grid (report.grids, decoded before this one) whose stored rows of the same settings are read, not decoded again
REUSE_FROM = "modes_runs"
TABLE = FIGURE = "peers"
AUP_TABLE = "peers_aup"
#: AUP's penalty on an accuracy below the task's best (d3LLM's default)
AUP_ALPHA = 3.0
#: the peers table's columns (run() adds clock_gate and clock_record)
PEERS_COLUMNS = ["model", "benchmark", "method", "family", "algorithm", "setting", "rule", "n", "accuracy",
                 "accuracy_lo", "accuracy_hi", "tpf", "weighted_tpf", "charged_tpf", "extra_rows", "mrp_forwards",
                 "reference", "reference_identical", "throughput_speedup", "throughput_speedup_lo",
                 "throughput_speedup_hi"]  # fmt: skip
#: the columns blanked on a lossless method that fails its reference
_SPEED = ["tpf", "weighted_tpf", "charged_tpf", "throughput_speedup", "throughput_speedup_lo", "throughput_speedup_hi"]
#: one marker per method, in registration order (a colour each too: plots_base's palette)
_MARKERS = ("s", "o", "D", "^", "v", "P", "X", "<", ">", "h", "*", "p")
#: how far apart (points) the top panels draw series that share a point: a marker's width (ms 7, edge 1.6)
SIDE_BY_SIDE_PT = 9.0
#: the top panel's title note where it draws series side by side
SIDE_BY_SIDE_NOTE = f"\n(series at one point drawn side by side, {SIDE_BY_SIDE_PT:g} pt apart)"


# ----------------------------------------------------------------------------- the grid


def grid_methods(profile, head=None) -> list[str]:
    """The methods peers_runs holds on `profile` (those of GRID with a setting here, and the references the lossless
    ones need), without building a policy (nothing is calibrated): what a stored frame must hold."""
    out = [m.name for m in methods.all_methods(runs=GRID) if m.grid(profile, head)]
    refs = [m.lossless.method for m in methods.all_methods(runs=GRID) if m.name in out and m.lossless is not None]
    return list(dict.fromkeys(out + refs))


def grid_settings(profile, head, backbone, prepare: bool = True) -> list[tuple[str, str, object]]:
    """(method, mode, policy) of every setting peers_runs decodes (module docstring), the reference policies and
    methods.PeerStatic included (its method ''). A setting two methods would decode (the same policy name) is the
    first one's; a draft graph whose calibration kept fewer than D nodes names the graph it is, so two D may give
    one setting, decoded once. prepare=False (backbone None): uncalibrated, for report.quickcheck's estimate."""
    out: dict[str, tuple[str, str, object]] = {}
    for m in methods.all_methods(runs=GRID):
        for pol in m.policies(profile, head, backbone, prepare=prepare):
            out.setdefault(pol.name, (m.name, m.mode, pol))
    for m in methods.all_methods(runs=GRID):
        ref = m.lossless
        if ref is not None and any(meth == m.name for meth, _, _ in out.values()):
            pol = ref.policy()
            out.setdefault(pol.name, (ref.method, ref.kind, pol))
    if any(getattr(p, "algorithm", "ours") == "peer" for _, _, p in out.values()):
        pol = methods.PeerStatic()
        out.setdefault(pol.name, ("", "static", pol))
    return list(out.values())


def with_methods(runs: pd.DataFrame, spec: list[tuple[str, str, object]]) -> pd.DataFrame:
    """`runs` with the column method: each setting's declaration in `spec` (grid_settings; '' for PeerStatic)."""
    runs = runs.copy()
    runs["method"] = runs["setting"].map({pol.name: meth for meth, _, pol in spec})
    if runs["extra_rows"].isna().any():
        raise RuntimeError("peers: a decoded row has no extra_rows (a grid stored before measure.runs recorded it); "
                           f"remove {GRID}'s stored file and decode it again")  # fmt: skip
    runs["extra_rows"] = runs["extra_rows"].astype(int)
    return runs


def decode(profile, backbone, head, n_prompts: int | None = None, benchmarks: Sequence[str] | None = None,
           batch_size: int | None = None, max_new_tokens: int | None = None, progress: bool = False,
           partial=None, spec: list | None = None) -> pd.DataFrame:  # fmt: skip
    """The peers grid (or `spec`, a part of grid_settings) decoded now in this process (measure.runs.collect_runs,
    resumable from `partial` as there), with the column method."""
    from mrp_repro.measure.runs import collect_runs

    spec = grid_settings(profile, head, backbone) if spec is None else spec
    runs = collect_runs(profile, backbone, head, n_prompts, benchmarks, [(mode, pol) for _, mode, pol in spec],
                        batch_size, max_new_tokens, progress, partial=partial)  # fmt: skip
    return with_methods(runs, spec)


def _fits(runs: pd.DataFrame, profile, head, n_prompts) -> bool:
    """Whether a stored peers_runs frame is the grid asked for: its methods, benchmarks, prompts and batch size."""
    from mrp_repro.measure.runs import eval_problems

    if "method" not in runs or "extra_rows" not in runs or runs["extra_rows"].isna().any():
        return False
    if set(runs["method"].fillna("").astype(str)) - {""} != set(grid_methods(profile, head)):
        return False
    benches = list(profile.evaluation.benchmarks)
    if set(runs["benchmark"]) != set(benches) or set(runs["batch_size"]) != {profile.decoding.batch_size}:
        return False
    return all(runs.loc[runs["benchmark"] == b, "prompt_index"].nunique() == len(eval_problems(profile, b, n_prompts))
               for b in benches)  # fmt: skip


def reused_settings(profile, head, spec: list, n_prompts: int | None = None) -> list[str]:
    """The settings of `spec` that REUSE_FROM decodes too (the same algorithm and name, at the decoding batch size),
    but static(1): what this grid reads from REUSE_FROM's stored frame rather than decodes (held_rows); report.
    quickcheck leaves them out of its estimate of this grid."""
    from mrp_repro.report import grids

    if head is None:
        return []
    g = grids.grid_spec(profile, head, REUSE_FROM, n_prompts)
    if (g["batch_size"] or profile.decoding.batch_size) != profile.decoding.batch_size:
        return []
    theirs = {(p.algorithm, p.name) for _, p in g["settings"]}
    return [p.name for _, _, p in spec if (p.algorithm, p.name) in theirs and p.name != "static(1)"]


def held_rows(profile, head, spec: list, n_prompts: int | None = None) -> pd.DataFrame | None:
    """REUSE_FROM's rows (stored, of its current spec at these n_prompts: report.grids.stored) of the settings of
    `spec` it decodes at the decoding batch size, and its static(1) (the clock they were paired with); None where it
    is not stored or holds no such setting. Our static(1) itself is decoded again beside the rest of the grid."""
    from mrp_repro.report import grids, paper

    if head is None:
        return None
    g = grids.grid_spec(profile, head, REUSE_FROM, n_prompts)
    if not grids.stored(profile, REUSE_FROM, g):
        return None
    names = reused_settings(profile, head, spec, n_prompts)
    frame = paper.load_result(profile, REUSE_FROM) if names else None
    if frame is None:
        return None
    return frame[frame["setting"].isin(["static(1)", *names])].reset_index(drop=True)


def with_held(decoded: pd.DataFrame, held: pd.DataFrame, spec: list) -> pd.DataFrame:
    """The peers frame from the rows decoded now (`decoded`: our static(1) and every setting REUSE_FROM lacks) and
    those read from it (`held`, held_rows), in collect_runs' order (benchmark, setting in spec order, prompt), with the
    column method. A held row's clock is put on this grid's scale: per benchmark, its wall_s times this grid's
    static(1) seconds over REUSE_FROM's (as report.grids.refine_frontier's added τ), so its ratio to static(1) is the
    one REUSE_FROM measured; resumed_from names the grid it was read from."""
    benches = list(dict.fromkeys(decoded["benchmark"]))
    is_static = held["setting"] == "static(1)"
    rows = held[~is_static & held["benchmark"].isin(benches)].copy()
    whose = rows["resumed_from"].astype(object).fillna("").astype(str)
    rows["resumed_from"] = f"{REUSE_FROM}: " + whose.where(whose != "", "decoded by its grid's process")
    for b in benches:
        ours = decoded.loc[(decoded["benchmark"] == b) & (decoded["setting"] == "static(1)"), "wall_s"].sum()
        theirs = held.loc[is_static & (held["benchmark"] == b), "wall_s"].sum()
        rows.loc[rows["benchmark"] == b, "wall_s"] *= ours / theirs if theirs > 0 else float("nan")
    from mrp_repro.measure.runs import in_grid_order, static_first

    out = pd.concat([decoded, rows.reindex(columns=decoded.columns)], ignore_index=True)
    return with_methods(in_grid_order(out, static_first(None, None, [(m, p) for _, m, p in spec], GRID)), spec)


def peer_runs(profile, backbone, head, n_prompts: int | None = None, progress: bool = False) -> pd.DataFrame:
    """report.paper's stored result peers_runs when it is this grid (its methods: grid_methods, every benchmark, the
    prompts n_prompts gives, the decoding batch size), else decoded now and stored. The settings REUSE_FROM holds
    (stored: report.grids runs it first) are read from it, not decoded twice (held_rows, with_held: the same engine,
    prompts and batch size give the same rows; chain16 at 9b9133f: 971 of its 1739 decode seconds). Resumable as
    report.grids' grids: in one process each finished batch is kept in <results>/peers_runs.partial/ (collect_runs),
    under torchrun
    (every rank calls it; `python -m mrp_repro.report.peers --nproc N`, make reproduce NPROC=N) each rank's batches in
    peers_runs.shards/ (measure.sharded); either is removed once the frame is stored. Every rank returns the frame."""
    import os

    from mrp_repro import distributed
    from mrp_repro.report import grids, paper

    stored = paper.load_result(profile, GRID)
    if stored is not None and _fits(stored, profile, head, n_prompts):
        return stored
    d = distributed.current()
    partial = grids.partial_dir(profile, GRID)
    shard_dir = paper.results_dir(profile) / f"{GRID}.shards"
    spec = grid_settings(profile, head, backbone)
    held = held_rows(profile, head, spec, n_prompts)
    reused = set() if held is None else set(held["setting"]) - {"static(1)"}
    todo = [s for s in spec if s[2].name not in reused]
    if d.active or "WORLD_SIZE" in os.environ:
        from mrp_repro.measure.sharded import collect_runs_sharded

        merged = shard_dir / "merged.csv"
        rerun = f"python -m mrp_repro.report.peers --profile {profile.cli_arg} --nproc {d.world}"
        collect_runs_sharded(profile, backbone, head, shard_dir, merged, n_prompts,
                             settings=[(mode, pol) for _, mode, pol in todo], progress=progress, rerun=rerun)
        decoded = with_methods(pd.read_csv(merged), todo) if d.is_main else None
    else:
        decoded = decode(profile, backbone, head, n_prompts, progress=progress, partial=partial, spec=todo)
    if d.is_main:
        paper.save_result(profile, GRID, decoded if held is None else with_held(decoded, held, spec))
        for p in (partial, shard_dir):  # stored in full: the kept batches are in it
            grids.remove_dir(p)
    d.barrier()
    return paper.load_result(profile, GRID)


def costs(profile, backbone, head, batch_size: int | None = None) -> dict:
    """{head_cost, row_cost, source} from the run's cost model at `batch_size` (default decoding.batch_size;
    measure.cost.run_cost_model, stored and reused): a head call and one extra block-row of a verify, each in
    backbone forwards; row_cost = (verify_cost[K] - 1) / (K - 1) at the largest speculative K >= 2 (1 where the cost
    model has none: every extra row a forward)."""
    from mrp_repro.measure.cost import row_cost, run_cost_model

    cm = run_cost_model(profile, backbone, head, batch=batch_size or profile.decoding.batch_size)
    row, K = row_cost(cm)
    return {"head_cost": cm["head_cost"], "row_cost": row, "source": cm.get("source", ""), "K": K}


# ----------------------------------------------------------------------------- the table


def peers_table(runs: pd.DataFrame, head_cost: float = math.nan, row_cost: float = 1.0, n_boot: int = 1000,
                ci: float = 0.95, seed: int = 0) -> pd.DataFrame:  # fmt: skip
    """One row per benchmark, method and setting of a peers_runs frame, in grid order (module docstring; columns
    PEERS_COLUMNS). head_cost: a head call in backbone forwards (NaN: uncharged, as weighted_tpf); row_cost: one
    block-row beyond one in a forward."""
    what = "peers_table"
    require(runs, ["model", "benchmark", "method", "algorithm", "setting", "problem_id", "correct", "text", "tokens",
                   "wall_s", "denoise_forwards", "mrp_forwards", "extra_rows"], what)  # fmt: skip
    r = runs[runs["method"].fillna("").astype(str) != ""]
    if r.empty:
        raise ValueError(f"{what}: no rows of a declared method (column method); decode them with peers.decode")
    r = r.assign(_den=weighted_denoise_forwards(r, head_cost),
                 _charged=weighted_denoise_forwards(r, head_cost) + row_cost * r["extra_rows"].astype(float))
    rows = []
    for (model, bench, meth, algo, setting), g in r.groupby(["model", "benchmark", "method", "algorithm", "setting"],
                                                            sort=False):  # fmt: skip
        if g["problem_id"].duplicated().any():
            raise ValueError(f"{what}: {setting} on {bench} holds a prompt twice (several batch sizes?)")
        m = methods.get(meth)
        g = g.set_index("problem_id")
        rule = str(g["rule"].fillna("").iloc[0]) if "rule" in g else ""
        row = {"model": model, "benchmark": bench, "method": meth, "family": m.family, "algorithm": algo,
               "setting": setting, "rule": rule, "n": len(g)}  # fmt: skip
        row["accuracy"], row["accuracy_lo"], row["accuracy_hi"] = stats.mean_ci(g["correct"].astype(float), n_boot,
                                                                                ci, seed)  # fmt: skip
        den = g["denoise_forwards"].sum()
        row["tpf"] = g["tokens"].sum() / den if den > 0 else math.nan
        row["weighted_tpf"] = g["tokens"].sum() / g["_den"].sum() if g["_den"].sum() > 0 else math.nan
        row["charged_tpf"] = g["tokens"].sum() / g["_charged"].sum() if g["_charged"].sum() > 0 else math.nan
        row["extra_rows"] = g["extra_rows"].astype(float).mean()
        row["mrp_forwards"] = g["mrp_forwards"].astype(float).mean()
        row["reference"], row["reference_identical"] = "", math.nan
        if m.lossless is not None:
            row["reference"] = m.lossless.name
            ref = _setting_rows(r, model, bench, m.lossless.policy().name)
            ids = g.index.intersection(ref.index)
            if len(ids):
                same = g.loc[ids, "text"].fillna("").astype(str) == ref.loc[ids, "text"].fillna("").astype(str)
                row["reference_identical"] = float(same.mean())
        static = _setting_rows(r, model, bench, "static(1)")
        ids = g.index.intersection(static.index)
        sp = (stats.ratio_ci(g.loc[ids, "tokens"], g.loc[ids, "wall_s"], static.loc[ids, "tokens"],
                             static.loc[ids, "wall_s"], n_boot, ci, seed) if len(ids) else (math.nan,) * 3)  # fmt: skip
        row["throughput_speedup"], row["throughput_speedup_lo"], row["throughput_speedup_hi"] = sp
        if m.lossless is not None and not row["reference_identical"] == 1.0:
            row.update({c: math.nan for c in _SPEED})  # fails (or was not checked against) what it claims
        rows.append(row)
    return pd.DataFrame(rows, columns=PEERS_COLUMNS)


def aup(tpf: Sequence[float], accuracy: Sequence[float], best: float, alpha: float = AUP_ALPHA) -> float:
    """Accuracy under parallelism (after d3LLM's AUP) of one method's settings on one task: the area under
    accuracy x W(accuracy) against parallelism, W(y) = min(exp(-alpha (1 - y / best)), 1), from 0 to the first
    setting's parallelism as a rectangle, then trapezoids in parallelism order. Accuracy in percent, best: the
    task's best accuracy over every method. Unlike d3LLM no setting is dropped for falling far below the best: W
    already makes its contribution small."""
    pts = sorted((float(r), float(y)) for r, y in zip(tpf, accuracy, strict=True) if r == r and y == y)
    if not pts or not best > 0:
        return math.nan
    if pts[0][0] <= 0:
        raise ValueError(f"aup: parallelism must be positive, got {pts[0][0]}")
    w = [y * min(math.exp(-alpha * (1 - y / best)), 1.0) for _, y in pts]
    area = pts[0][0] * w[0]
    for i in range(1, len(pts)):
        area += (pts[i][0] - pts[i - 1][0]) * (w[i] + w[i - 1]) / 2
    return area


def aup_table(table: pd.DataFrame, x: str = "charged_tpf", alpha: float = AUP_ALPHA) -> pd.DataFrame:
    """One row per benchmark, method and rule of a peers table (a method's settings of one rule are one curve: MRP
    remasking's five rules are five, never joined): its AUP (aup) over its settings with a reported `x` (a lossless
    method that fails its reference reports none and gets none), the settings counted, and the task's best accuracy
    that W is relative to."""
    require(table, ["model", "benchmark", "method", "family", "rule", "accuracy", x], "aup_table")
    rows = []
    for (model, bench), g in table.groupby(["model", "benchmark"], sort=False):
        best = float(g["accuracy"].max())
        for (meth, rule), h in g.groupby(["method", g["rule"].fillna("")], sort=False):
            family, h = h["family"].iloc[0], h[h[x].notna()]
            rows.append({"model": model, "benchmark": bench, "method": meth, "family": family, "rule": rule,
                         "aup": aup(h[x], h["accuracy"], best, alpha), "aup_settings": len(h),
                         "aup_best_accuracy": best})  # fmt: skip
    return pd.DataFrame(rows, columns=["model", "benchmark", "method", "family", "rule", "aup", "aup_settings",
                                       "aup_best_accuracy"])  # fmt: skip


def _setting_rows(runs: pd.DataFrame, model, bench, setting: str) -> pd.DataFrame:
    """Our rows of `setting` on (model, bench), indexed by problem_id (empty when the grid lacks it)."""
    g = runs[(runs["model"] == model) & (runs["benchmark"] == bench) & (runs["algorithm"] == "ours")
             & (runs["setting"] == setting)]  # fmt: skip
    return g.set_index("problem_id")


# ----------------------------------------------------------------------------- the figure


def plot_peers(table: pd.DataFrame, x: str = "charged_tpf"):
    """Two rows of panels, one column per benchmark.

    Top: accuracy (CI) vs `x` (default charged_tpf: every method charged its head calls and wide forwards) of the
    methods that trade accuracy for speed, and static(1) as the anchor; one marker and colour per series: a method
    (its declared series and family), or a method and rule where the method's settings hold several rules (MRP
    remasking's rules are separate curves, never one line through all of them), its settings joined in x order; a
    marker on an earlier method's point is drawn hollow and larger, at that point only
    (plots_base.nest_coincident_markers), except where series share a point: their markers and CIs there are drawn
    side by side, SIDE_BY_SIDE_PT apart around it (plots_base.side_by_side_offsets; the panel's title says so), so
    each shows; the lines run through the true points, and a point no other series shares is drawn where it is.
    Bottom: the lossless methods (a declared reference): their accuracy is their reference's by token identity, so
    on the top row they would sit in one cluster at their reference's accuracy, hiding each other (the chain and
    Spiffy's graph at D = K coincide by construction). Each setting is its own bar of `x` (log scale), in the
    method's colour, labelled with its value and its uncharged TPF, a black tick at its reference's `x` and a line
    at static's 1; a setting whose outputs differ from its reference's reports no speed: no bar, "not identical"."""
    what = "plot_peers"
    _need(table, ["benchmark", "method", "family", "setting", "rule", "accuracy", "accuracy_lo", "accuracy_hi", x,
                  "tpf", "reference"], what)  # fmt: skip
    _unique(table, ["benchmark", "method", "setting"], what)
    set_theme()
    table = table.assign(rule=table["rule"].fillna("").astype(str), reference=table["reference"].fillna(""))
    benches = list(dict.fromkeys(table["benchmark"]))
    names = list(dict.fromkeys(zip(table["method"], table["rule"], strict=True)))  # (method, rule) series
    ruled = {meth for meth, g in table.groupby("method") if g["rule"].nunique() > 1}
    colors = dict(zip(names, _colors(len(names)), strict=True))
    marker = {n: _MARKERS[i % len(_MARKERS)] for i, n in enumerate(names)}
    lossless = {meth for meth in table["method"].unique() if methods.get(meth).lossless is not None}
    n_bars = max((int(table[(table["benchmark"] == b) & table["method"].isin(lossless)].shape[0]) for b in benches),
                 default=0)  # fmt: skip
    rows = 2 if n_bars else 1
    heights = [4.0, 0.32 * n_bars + 0.6][:rows]
    fig, axes = plt.subplots(rows, len(benches), figsize=(6.4 * len(benches), sum(heights) + 0.4 * rows),
                             squeeze=False, height_ratios=heights)  # fmt: skip

    def label(n) -> str:
        m = methods.get(n[0])
        return f"{m.series}{f', rule {n[1]}' if n[0] in ruled else ''} [{m.family}]"

    xlabel = {"charged_tpf": "tokens per charged forward (head calls and extra block-rows charged)",
              "tpf": "tokens per denoising forward"}.get(x, x)  # fmt: skip
    for col, b in enumerate(benches):
        ax = axes[0][col]
        g = table[(table["benchmark"] == b) & table[x].notna()]
        drawn = {n: g[(g["method"] == n[0]) & (g["rule"] == n[1])].sort_values(x) for n in names
                 if n[0] not in lossless}  # fmt: skip
        drawn = {n: h for n, h in drawn.items() if not h.empty}
        # where series sit on one point (chain-math: rules delta, loo and logp-delta revoke nothing at τ 0.6-0.9)
        # their markers and CIs there are drawn side by side, a marker's width apart; each line runs through the true
        # points, and every point no other series shares is drawn where it is
        dx = side_by_side_offsets({n: list(zip(h[x], h["accuracy"], strict=True)) for n, h in drawn.items()},
                                  SIDE_BY_SIDE_PT)  # fmt: skip
        for n, h in drawn.items():
            peer = methods.get(n[0]).family == "peer"
            glyph = dict(color=colors[n], marker=marker[n], ms=7, mfc="white" if peer else colors[n], mew=1.6)
            off = np.asarray(dx[n], float)
            alone = off == 0
            ax.plot(h[x], h["accuracy"], ls="--" if peer else "-", lw=1.4, markevery=list(alone), label=label(n),
                    **glyph)  # fmt: skip
            for v in dict.fromkeys(off):  # the points at each offset, with their CIs (0: where they are)
                k = off == v
                bars = ax.errorbar(h[x][k], h["accuracy"][k], yerr=_yerr(h[k], "accuracy"), ls="none", capsize=2,
                                   elinewidth=1.4, label=f"_{label(n)} CI",
                                   **({**glyph, "marker": "none"} if v == 0 else glyph))  # fmt: skip
                shift(ax, bars, v)
        side_by_side = any(v != 0 for o in dx.values() for v in o)
        note = SIDE_BY_SIDE_NOTE if side_by_side else ""
        ax.set_title(f"{b}: methods that trade accuracy for speed{note}", fontsize=10)
        ax.set_xlabel(xlabel, fontsize=9)
        ax.set_ylabel(LABELS["accuracy"])
        if rows == 2:
            _lossless_bars(axes[1][col], table[table["benchmark"] == b], lossless, colors, label, x)
            axes[1][col].set_title(f"{b}: lossless methods (accuracy = their reference's)", fontsize=10)
            axes[1][col].set_xlabel(xlabel + ", log scale", fontsize=9)
    _legend_below(fig, list(axes.flat), ncol=3)
    for ax in axes[0]:  # after the legend: its keys keep each method's marker; a point on another's nests
        nest_coincident_markers(ax)
    return fig


def _lossless_bars(ax, g: pd.DataFrame, lossless: set, colors: dict, label, x: str) -> None:
    """plot_peers' bottom panel of one benchmark (its docstring): a bar per lossless setting, top to bottom in
    table order."""
    bars = g[g["method"].isin(lossless)].reset_index(drop=True)
    at = {s: float(v) for s, v in zip(g["setting"], g[x], strict=True)}  # a reference's x, by its setting name
    ys = list(range(len(bars)))[::-1]
    for y, r in zip(ys, bars.itertuples(index=False), strict=True):
        n = (r.method, r.rule)
        v = getattr(r, x)
        ref = at.get(r.reference, math.nan)
        right = max(v if pd.notna(v) else 1.0, ref if math.isfinite(ref) else 1.0, 1.0)  # past the bar and ticks
        if pd.notna(v):
            ax.barh(y, v, color=colors[n], height=0.7, label=label(n))
            ax.text(right * 1.06, y, f"{v:.2f} (uncharged TPF {r.tpf:.2f})", va="center", fontsize=7)
        else:
            ax.text(right * 1.06, y, "not identical to its reference: no speed", va="center", fontsize=7, color="C3")
        if math.isfinite(ref):
            # a marker, not a line: its legend key is the vertical tick it is (a line's key was horizontal)
            ax.plot([ref], [y], ls="none", marker="|", ms=15, mew=1.6, color="black",
                    label="black tick: its reference's tokens per charged forward")  # fmt: skip
    ax.axvline(1.0, color="grey", lw=0.8, ls=":")
    ax.set_xscale("log")
    finite = [v for v in [*bars[x].dropna(), *(at.get(r, math.nan) for r in bars["reference"])] if math.isfinite(v)]
    lo, hi = min(0.8, 0.8 * min(finite, default=1.0)), 9.0 * max(finite, default=1.0)  # room for the text
    ax.set_xlim(lo, hi)
    ax.xaxis.set_major_locator(FixedLocator([t for t in (0.25, 0.5, 1, 2, 4, 8, 16, 32, 64) if lo <= t <= hi]))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda t, _: f"{t:g}"))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_yticks(ys, [f"{s} vs {r}" for s, r in zip(bars["setting"], bars["reference"], strict=True)], fontsize=7)
    ax.grid(axis="y", visible=False)


# ----------------------------------------------------------------------------- the notebook's call


def run(profile, backbone, head, n_prompts: int | None = None, out=None, progress: bool = False) -> dict:
    """The peers grid (peer_runs), its table marked with the wall-clock gate and the figure, saved as TABLE and
    FIGURE under `out` (default figures/<profile>/). -> {"runs", "table", "costs", "paths"}."""
    from mrp_repro.report import paper, tables, wallclock
    from mrp_repro.report.plots_base import save_figure

    ev = profile.evaluation
    boot = dict(n_boot=ev.bootstrap_samples, ci=ev.ci)
    runs = peer_runs(profile, backbone, head, n_prompts, progress)
    c = costs(profile, backbone, head)
    t = peers_table(runs, c["head_cost"], c["row_cost"], **boot)
    t = wallclock.mark_clock(t, GRID, wallclock.record_of(paper.load_results(profile), **boot), runs=runs)
    figs = tables.out_dir(out if out is not None else profile)
    hc = "uncharged (no head)" if math.isnan(c["head_cost"]) else f"{c['head_cost']:.3f}"
    note = (f"Every method on the same engine, prompts and batch size ({GRID}: each batch's settings decoded back to "
            f"back; the settings {REUSE_FROM} also decodes are read from its stored rows, resumed_from naming it, "
            f"their clock put on this grid's scale by the two grids' static(1); clock_record names each decode's "
            f"measurement of record: {REUSE_FROM}'s for our settings, static(1) included). charged_tpf charges a "
            f"head call {hc} forwards and an extra block-row {c['row_cost']:.3f} forwards (the run's cost model at "
            f"batch {profile.decoding.batch_size}; row_cost from the K = {c['K']} verify). A lossless method's speed "
            "is reported only where every output equals its reference's (reference_identical 1); the peers' wall "
            "clock is unchecked (no repeated passes).")
    paths = tables.save_table(t, figs, TABLE, digits=2, note=note)
    a = aup_table(t)
    paths += tables.save_table(a, figs, AUP_TABLE, digits=2, note=(
        f"AUP (accuracy under parallelism, after d3LLM): per method and task, the area under accuracy x W(accuracy) "
        f"against charged_tpf, W(y) = min(exp(-{AUP_ALPHA:g} (1 - y / best)), 1), best the task's best accuracy in "
        "peers.md; from 0 to the first setting a rectangle, then trapezoids. One number per method: more settings "
        "reach further in charged_tpf, so compare methods with their aup_settings in view."))  # fmt: skip
    fig = plot_peers(t)
    paths += save_figure(fig, figs, FIGURE)
    plt.close(fig)
    return {"runs": runs, "table": t, "aup": a, "costs": c, "paths": paths}


def main(argv: list[str] | None = None) -> None:
    from mrp_repro.report import stage_cli

    stage_cli.run("mrp_repro.report.peers", __doc__, argv, lambda profile, bb, head, progress:
                  f"{GRID}: {len(peer_runs(profile, bb, head, progress=progress))} rows")  # fmt: skip


if __name__ == "__main__":
    from mrp_repro.cli import run_cli

    run_cli(main)
