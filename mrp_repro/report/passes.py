"""Notebook 05's repeated interleaved passes (report.wallclock.repeated_passes) as a heavy stage: one unit per
(batch size, benchmark), the units dealt to torchrun ranks, each finished unit kept, and rank 0 storing the merged
frame as the result `wallclock_passes` that notebook 05 reads (paper.cached_result: it decodes nothing then).

    .venv/bin/python -m mrp_repro.report.passes --profile chain16 --nproc 2   # `make reproduce` runs it (NPROC > 1)
    .venv/bin/python -m mrp_repro.report.passes --profile chain16             # one process, every unit in turn

Why a stage: in the notebook the passes ran in one process while the other core idled (chain16: 7.4 of the 48 min
of `make reproduce`). Dealt to ranks they take about half that, and each unit is timed with one thread per rank,
every core busy: the load under which the grids it re-times were timed (report.grids on the same ranks), which is
what the repeatable check compares (report.wallclock). A pass's speedup is a ratio of two settings timed by the same
rank in the same pass, so which rank timed a unit does not enter it.

Resumable: each finished unit is written to <results>/wallclock_passes.units/<batch size>-<benchmark>.csv beside a
.json key (its settings, passes, prompts, new tokens); a rerun keeps the units whose key matches and times the rest
(a unit is a few minutes: at most that is lost to a kill). Rank 0 stores the frame in unit order (as
repeated_passes' own: batch size, then benchmark) once every unit is there, and removes the directory.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from mrp_repro import distributed
from mrp_repro.report import paper, wallclock

__all__ = ["RESULT", "units", "unit_key", "units_dir", "time_units", "merge_units", "collect", "main"]

RESULT = "wallclock_passes"


def units(profile) -> list[tuple[int, str]]:
    """(batch size, benchmark) of every unit, in repeated_passes' order (its default batch sizes)."""
    return [(bs, b) for bs in sorted({1, int(profile.decoding.batch_size)}) for b in profile.evaluation.benchmarks]


def unit_key(profile, head, batch_size: int, benchmark: str) -> dict:
    """What a kept unit must match to be reused: the settings it times and how."""
    return {"batch_size": batch_size, "benchmark": benchmark, "passes": wallclock.PASSES,
            "n_prompts": wallclock.pass_prompts(profile, batch_size),
            "max_new_tokens": profile.decoding.max_new_tokens,
            "settings": [p.name for _, p in wallclock.speed_settings(profile, head, batch_size)]}  # fmt: skip


def units_dir(profile) -> Path:
    return paper.results_dir(profile) / f"{RESULT}.units"


def _unit_paths(profile, batch_size: int, benchmark: str) -> tuple[Path, Path]:
    stem = units_dir(profile) / f"{batch_size}-{benchmark}"
    return stem.with_suffix(".csv"), stem.with_suffix(".json")


def _kept(profile, head, batch_size: int, benchmark: str) -> bool:
    csv, side = _unit_paths(profile, batch_size, benchmark)
    try:
        return csv.exists() and json.loads(side.read_text()) == unit_key(profile, head, batch_size, benchmark)
    except (OSError, ValueError):
        return False


def time_units(profile, backbone, head, rank: int = 0, world: int = 1, progress: bool = False) -> list[tuple]:
    """Time this rank's units (every `world`-th from `rank`) that are not kept already; returns those timed now."""
    from mrp_repro.runtime import write_json_atomic

    units_dir(profile).mkdir(parents=True, exist_ok=True)
    mine = distributed.Dist(rank, world).shard(units(profile))
    done = []
    for bs, bench in mine:
        if _kept(profile, head, bs, bench):
            continue
        if progress:
            print(f"[passes] rank {rank}: batch {bs}, {bench}", flush=True)
        df = wallclock.repeated_passes(profile, backbone, head, batch_sizes=[bs], benchmarks=[bench])
        csv, side = _unit_paths(profile, bs, bench)
        tmp = csv.with_suffix(f".tmp{os.getpid()}")
        df.to_csv(tmp, index=False)
        os.replace(tmp, csv)  # the csv first, then its key: a unit without its key is timed again
        write_json_atomic(side, unit_key(profile, head, bs, bench))
        done.append((bs, bench))
    return done


def merge_units(profile, head) -> pd.DataFrame:
    """Every unit's frame in unit order, stored as the result; the units directory removed."""
    from mrp_repro.report.grids import remove_dir

    missing = [u for u in units(profile) if not _kept(profile, head, *u)]
    if missing:
        raise RuntimeError(f"repeated passes: units {missing} were not timed; rerun "
                           f"`python -m mrp_repro.report.passes --profile {profile.cli_arg}`")  # fmt: skip
    frame = pd.concat([pd.read_csv(_unit_paths(profile, *u)[0]) for u in units(profile)], ignore_index=True)
    paper.save_result(profile, RESULT, frame)
    remove_dir(units_dir(profile))
    return paper.load_result(profile, RESULT)


def collect(profile, backbone, head, progress: bool = False) -> pd.DataFrame:
    """The stored passes, else timed on this process's ranks (every rank must call it) and stored by rank 0."""
    d = distributed.current()
    stored = paper.load_result(profile, RESULT)  # read (and its hash checked) once where it is there already
    if stored is not None:
        return stored
    time_units(profile, backbone, head, d.rank, d.world, progress)
    d.barrier()
    if d.is_main:
        merge_units(profile, head)
    d.barrier()
    return paper.load_result(profile, RESULT)


def main(argv: list[str] | None = None) -> None:
    from mrp_repro.report import stage_cli

    stage_cli.run("mrp_repro.report.passes", __doc__, argv, lambda profile, bb, head, progress:
                  f"{RESULT}: {len(collect(profile, bb, head, progress))} rows -> {paper.result_path(profile, RESULT)}")


if __name__ == "__main__":
    from mrp_repro.cli import run_cli

    run_cli(main)
