"""The notebooks' decoding grids, defined once: what each runs frame holds, cached, resumable, and their torchrun stage.

    .venv/bin/python -m mrp_repro.report.grids --profile tiny                        # every grid, one process
    .venv/bin/python -m mrp_repro.report.grids --profile tiny --nproc 2              # through torchrun, 2 ranks
    torchrun --standalone --nproc-per-node 8 -m mrp_repro.report.grids --profile sdar-4b   # by hand (one node)

    from mrp_repro.report import grids
    runs = grids.runs(P, bb, head, "modes_runs")   # what 05-07 read: the cached file, else collected now

GRIDS: backbone_runs (01: static + dynamic(tau), no head), speculative_runs (05: static + speculative at batch 1,
LATENCY_PROMPTS per benchmark), modes_runs (05-07: every mode at the decoding batch size); the last two hold every
algorithm of decoding.algorithms (ours, upstream: measure.runs.settings_for), labelled in the column `algorithm`.
controls_runs (06-07, read by 09's claims): the no-MRP controls that modes_runs lacks (decoding.controls), at the
decoding batch size on modes_runs' prompts: static(1) (the reference every grid starts with), dynamic(τ) at every τ
of decoding.frontier_thresholds that modes_runs does not decode (the dense dynamic frontier, the control of record of
direct mode and remasking: report.pareto.frontier_runs joins the two grids' frontier rows), the random veto and the
head-free confidence veto (both matched to remask(τ, tau) per state and in total) at every remasking τ, and
direct(K, untrained) at the paper's direct steps; then refined (refine_frontier: dynamic(τ) at the midpoint τ
wherever the joint frontier still jumps by more than decoding.frontier_max_gap points, a few rounds, recorded in
controls_runs.refined.json). The other controls are modes_runs' own rows: speculative(K, naive)
and (oracle) beside speculative(K, mrp), naive_mtp(K) beside direct(K) (= direct(K) with a zero head), dynamic(τ)
beside remask(τ).
Each is stored as report.paper's result file of that name, beside a <name>.json with the grid's spec; a stored frame
of another spec (a notebook parameter changed) is recollected. A grid that another holds in full (COVERED_BY: the
same prompts and batch size, a subset of its settings) is that grid's rows, not decoded twice. In a plain process
the grid is measure.runs.collect_runs; under torchrun (any world size) it is measure.sharded.collect_runs_sharded,
whose merged file equals collect_runs' but for the wall-clock columns, so the single-process notebooks then read
what the ranks wrote.
Resumable: a grid is stored only when complete, but neither path loses more than a batch when killed (Ctrl-C,
kill -9, the end of a sitting). In a plain process collect_runs writes each finished batch to <name>.partial/ beside
the result file (measure.runs.write_partial: atomic, keyed on the grid's settings, sizes, weights, inputs, profile
hash and the batch's prompts), and the rerun reads the batches of the same key and decodes the rest: the stored frame
equals an uninterrupted run's but for wall_s and resumed_from (the earlier process that decoded a kept row). The
directory is removed once the full frame and its spec are stored. A damaged or foreign partial file is named on
stderr and its batch decoded again. Under torchrun the ranks' <name>.shards/ resume the same way (measure.sharded,
unchanged: no partial directory, resumed_from left blank).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pandas as pd

from mrp_repro import distributed
from mrp_repro.config import DEFAULT_PROFILE
from mrp_repro.measure.runs import collect_runs, in_grid_order, settings_for, static_first
from mrp_repro.measure.sharded import collect_runs_sharded
from mrp_repro.report import paper

__all__ = ["GRIDS", "LATENCY_PROMPTS", "CONTROL_TAUS", "CONTROL_STEPS", "control_settings", "refine_frontier",
           "grid_spec", "stored", "runs", "partial_dir", "remove_dir", "main"]

#: prompts per benchmark decoded one at a time for the lossless speedup (05's n_latency default)
LATENCY_PROMPTS = 64

GRIDS = ("backbone_runs", "speculative_runs", "modes_runs", "controls_runs")

#: controls_runs: the paper's remasking range (SDAR-8B: 0.5-0.9); the vetoes run at every remasking τ the profile
#: decodes (measure.runs' remask τ: the range and its extensions below it), and the untrained head at the paper's
#: direct steps (its direct table); the random veto's seed is the profile's
CONTROL_TAUS = (0.5, 0.9)
CONTROL_STEPS = (1, 2)

#: a grid another may hold in full: when the wider grid decodes the same prompts at the same batch size and
#: every one of its settings, its rows are read from the wider one instead of decoded twice (a profile with
#: decoding.batch_size 1 and one n_prompts for both, as CI's smallest sdar-mini). Not backbone_runs, though modes_runs
#: holds its settings: its clock is the second, independent timing of static and dynamic(τ) that report.wallclock's
#: agreement check compares with modes_runs' (a copy would pass it by construction)
COVERED_BY = {"speculative_runs": "modes_runs"}


def grid_spec(profile, head, name: str, n_prompts: int | None = None) -> dict:
    """collect_runs' arguments of grid `name` (settings as (mode, policy) pairs); n_prompts overrides the grid's."""
    ev = profile.evaluation
    if name == "backbone_runs":
        return dict(n_prompts=n_prompts, settings=settings_for(profile, None, ("static", "dynamic")), batch_size=None)
    if name == "speculative_runs":
        n = min(n_prompts or LATENCY_PROMPTS, ev.n_prompts or n_prompts or LATENCY_PROMPTS)
        return dict(n_prompts=n, settings=settings_for(profile, head, ("static", "speculative")), batch_size=1)
    if name == "modes_runs":
        return dict(n_prompts=n_prompts, settings=settings_for(profile, head), batch_size=None)
    if name == "controls_runs":
        return dict(n_prompts=n_prompts, settings=control_settings(profile, head), batch_size=None)
    raise ValueError(f"unknown grid {name!r}; valid: {', '.join(GRIDS)}")


def control_settings(profile, head) -> list:
    """controls_runs' settings (the module docstring): none without a head (every control is of an MRP mode)."""
    from mrp_repro.decoding import Dynamic, Static
    from mrp_repro.decoding.controls import ConfidenceVeto, RandomVeto, UntrainedDirect, untrained_head

    if head is None:
        return [("static", Static(1))]
    d = profile.decoding
    taus = sorted({0.5, 0.3, *d.thresholds}, reverse=True)  # measure.runs' remasking τ (and modes_runs' dynamic τ)
    out = [("static", Static(1))]
    have = {round(t, 6) for t in taus}
    out += [("dynamic", Dynamic(t)) for t in sorted(set(d.frontier_thresholds), reverse=True)
            if round(t, 6) not in have]  # fmt: skip
    out += [("remask", RandomVeto(t, head=head, seed=profile.seed)) for t in taus]
    out += [("remask", ConfidenceVeto(t, head=head)) for t in taus]
    u = untrained_head(head, seed=profile.seed)
    out += [("direct", UntrainedDirect(s, head=u)) for s in CONTROL_STEPS]
    return out


def refine_frontier(profile, backbone, head, frame: pd.DataFrame, reference: pd.DataFrame | None = None,
                    n_prompts: int | None = None, rounds: int | None = None,
                    inputs: str | None = None) -> tuple[pd.DataFrame, list[list[float]]]:
    """`frame` (a grid with static(1) and dynamic rows: controls_runs, or a seed run) with dynamic(τ) added where the
    frontier of `reference` + `frame` still jumps by more than decoding.frontier_max_gap points between two decoded τ
    (report.pareto.refine_taus: the midpoints, every benchmark of frame, on its prompts and batch size), for up to
    `rounds` rounds (default decoding.frontier_refine_rounds); returns the frame and the τ added per round."""
    from mrp_repro.decoding import Dynamic, Static
    from mrp_repro.report import pareto

    d = profile.decoding
    added: list[list[float]] = []
    for _ in range(d.frontier_refine_rounds if rounds is None else rounds):
        ours = frame[frame["algorithm"] == "ours"]
        both = ours if reference is None else pareto.frontier_runs(reference[reference["algorithm"] == "ours"], ours)
        taus = pareto.refine_taus(both, d.frontier_max_gap, d.frontier_min_step)
        if not taus:
            break
        settings = [("static", Static(1))] + [("dynamic", Dynamic(t)) for t in taus]
        benches = list(dict.fromkeys(frame["benchmark"]))
        bs = int(frame["batch_size"].iloc[0])
        new = collect_runs(profile, backbone, head, n_prompts=n_prompts, benchmarks=benches, settings=settings,
                           batch_size=bs, inputs=inputs)  # fmt: skip
        # their wall clock on frame's scale: this pass's static(1) against frame's, per benchmark
        for b in benches:
            s_old, s_new = (x[(x["benchmark"] == b) & (x["mode"] == "static") & (x["algorithm"] == "ours")]
                            for x in (frame, new))  # fmt: skip
            if len(s_old) and len(s_new):
                at = (new["benchmark"] == b) & (new["mode"] == "dynamic")
                new.loc[at, "wall_s"] *= s_old["wall_s"].sum() / s_new["wall_s"].sum()
        frame = pd.concat([frame, new[new["mode"] == "dynamic"]], ignore_index=True)
        added.append(taus)
    return frame, added


def _refined_path(profile, name: str) -> Path:
    return paper.result_path(profile, name).with_suffix(".refined.json")


def _covering_grid(profile, head, name: str, spec: dict) -> str | None:
    """COVERED_BY[name] when that grid holds every decode of `spec` (sizes resolved as collect_runs does)."""
    wider = COVERED_BY.get(name)
    if wider is None or head is None:
        return None
    w = grid_spec(profile, head, wider)
    n = lambda s: s["n_prompts"] or profile.evaluation.n_prompts  # noqa: E731
    bs = lambda s: s["batch_size"] or profile.decoding.batch_size  # noqa: E731
    names = lambda s: {p.name for _, p in s["settings"]}  # noqa: E731
    return wider if n(w) == n(spec) and bs(w) == bs(spec) and names(spec) <= names(w) else None


def _spec_record(spec: dict) -> dict:
    names = [p.name for _, p in spec["settings"]]
    # order: every setting of a batch decoded in turn (measure.runs.decode_batch); a grid stored before is recollected
    return dict(n_prompts=spec["n_prompts"], batch_size=spec["batch_size"], settings=names, order="per-batch")


def _spec_path(profile, name: str) -> Path:
    return paper.result_path(profile, name).with_suffix(".json")


def stored(profile, name: str, spec: dict) -> bool:
    """Whether grid `name` is stored whole (its sha256 record) with this spec (grid_spec's, as _spec_record)."""
    side = _spec_path(profile, name)
    return (
        paper.result_problem(profile, name) is None  # present and matching its sha256 record (not cut short)
        and side.exists()
        and json.loads(side.read_text()) == _spec_record(spec)
    )


def runs(profile, backbone, head, name: str, n_prompts: int | None = None, progress: bool = False) -> pd.DataFrame:
    """Grid `name`'s runs frame: the stored one when its spec matches, else collected (sharded under torchrun)
    and stored. Under torchrun every rank must call it; every rank returns the merged frame."""
    from mrp_repro import inputs as run_inputs
    from mrp_repro.runtime import write_json_atomic

    spec = grid_spec(profile, head, name, n_prompts)
    if not stored(profile, name, spec):
        d = distributed.current()
        resolved = run_inputs.summary_for(profile)  # the profile's inputs, once for this grid's every decode
        wider = _covering_grid(profile, head, name, spec)
        if wider is not None:
            held = runs(profile, backbone, head, wider, progress=progress)
            if d.is_main:
                sub = in_grid_order(held, static_first(profile, head, spec["settings"], name))
                paper.save_result(profile, name, sub)
        elif d.active or "WORLD_SIZE" in os.environ:  # under torchrun, even with one rank: shards, resumable
            shard_dir = paper.results_dir(profile) / f"{name}.shards"
            rerun = f"python -m mrp_repro.report.grids --profile {profile.cli_arg} --grid {name}"
            out = paper.result_path(profile, name)
            collect_runs_sharded(profile, backbone, head, shard_dir, out, progress=progress, rerun=rerun,
                                 inputs=resolved, **spec)  # fmt: skip
        else:  # one process: each finished batch kept in <name>.partial/, so a killed grid resumes (collect_runs)
            partial = partial_dir(profile, name)
            paper.save_result(profile, name, collect_runs(profile, backbone, head, progress=progress, partial=partial,
                                                          inputs=resolved, **spec))  # fmt: skip
        if d.is_main:
            write_json_atomic(_spec_path(profile, name), _spec_record(spec))
            _refined_path(profile, name).unlink(missing_ok=True)  # a new grid: refined afresh
            _remove_partial(profile, name)  # stored in full, with its spec: the kept batches are in it
        d.barrier()
    if name == "controls_runs" and head is not None:
        _refine(profile, backbone, head, name, n_prompts, progress)
    return _with_schema_columns(paper.load_result(profile, name))


def partial_dir(profile, name: str) -> Path:
    """<results>/<name>.partial/: the finished batches of grid `name` while it is collected in one process."""
    return paper.results_dir(profile) / f"{name}.partial"


def _remove_partial(profile, name: str) -> None:
    """Remove grid `name`'s partial directory (its frame is stored)."""
    remove_dir(partial_dir(profile, name))


def remove_dir(d: Path) -> None:
    """Remove a grid's working directory (partial batches, shards) once its frame is stored; a link there is removed,
    never followed."""
    import shutil

    if d.is_symlink():
        d.unlink()
    elif d.exists():
        shutil.rmtree(d)


def _with_schema_columns(df: pd.DataFrame | None) -> pd.DataFrame | None:
    """A stored grid written before resumed_from existed, with it (blank: one process decoded it all)."""
    if df is not None and "resumed_from" not in df.columns and "wall_rank" in df.columns:
        df.insert(df.columns.get_loc("wall_rank") + 1, "resumed_from", float("nan"))
    return df


def _refine(profile, backbone, head, name: str, n_prompts, progress: bool) -> None:
    """controls_runs refined where the joint frontier (modes_runs + controls_runs) is too coarse (refine_frontier),
    once per stored grid: the τ added are recorded beside it (<name>.refined.json), so a later call decodes nothing.
    On the main rank (the few added decodes run in one process); the other ranks wait."""
    from mrp_repro import inputs as run_inputs
    from mrp_repro.runtime import write_json_atomic

    d = distributed.current()
    side = _refined_path(profile, name)
    record = {"max_gap": profile.decoding.frontier_max_gap, "min_step": profile.decoding.frontier_min_step,
              "rounds": profile.decoding.frontier_refine_rounds}
    done = json.loads(side.read_text()) if side.exists() else None
    if done is not None and {k: done.get(k) for k in record} == record:
        return
    modes = runs(profile, backbone, head, "modes_runs", n_prompts=n_prompts, progress=progress)
    if d.is_main:
        frame = paper.load_result(profile, name)
        base = frame[~frame["setting"].isin(set((done or {}).get("settings", [])))]  # a new bound: from the grid
        frame, added = refine_frontier(profile, backbone, head, base, modes, n_prompts,
                                       inputs=run_inputs.summary_for(profile))  # once for every round
        paper.save_result(profile, name, frame)
        taus = [t for r in added for t in r]
        write_json_atomic(side, {**record, "taus_per_round": added,
                                 "settings": [f"dynamic({t})" for t in taus]})  # fmt: skip
        if progress and taus:
            print(f"[grids] {name}: frontier refined at τ {', '.join(f'{t:g}' for t in taus)}", flush=True)
    d.barrier()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default=DEFAULT_PROFILE)
    ap.add_argument("--grid", nargs="*", choices=GRIDS, default=None, help="default: every grid")
    ap.add_argument("--nproc", type=int, default=1, help="launch this many local ranks through torchrun")
    ap.add_argument("--no-progress", action="store_true")
    a = ap.parse_args(argv)
    from mrp_repro import stages
    from mrp_repro.config import load_profile
    from mrp_repro.runtime import runs_root, seed_everything

    profile = load_profile(a.profile)
    names = a.grid or list(GRIDS)
    if a.nproc > 1 and "WORLD_SIZE" not in os.environ:  # not yet under torchrun: launch it
        args = ["--profile", a.profile, "--grid", *names] + (["--no-progress"] if a.no_progress else [])
        distributed.launch("mrp_repro.report.grids", args, a.nproc, runs_root() / profile.name / "logs" / "grids")
        return
    d = distributed.init()
    seed_everything(profile.seed)
    bb = stages.shared_backbone(profile, progress=not a.no_progress)
    head = stages.head(profile, bb) if any(n != "backbone_runs" for n in names) else None
    for name in names:
        df = runs(profile, bb, head, name, progress=not a.no_progress)
        if d.is_main:
            print(f"{name}: {len(df)} rows -> {paper.result_path(profile, name)}", flush=True)


if __name__ == "__main__":
    from mrp_repro.cli import run_cli

    run_cli(main)
