"""Wall time of the decoding grids on N torchrun ranks against 1, and whether the merged runs are the same.

    .venv/bin/python -m mrp_repro.report.scaling --profile smoke --nproc 1 2            # CPU (say how many cores)
    .venv/bin/python -m mrp_repro.report.scaling --profile sdar-4b --nproc 1 2 4 8 --grid modes_runs   # a GPU node
-> figures/<profile>/grid_scaling.{md,csv}: one row per N: wall_s (the whole launch: start-up, loading, decoding,
merge), speedup = wall(1) / wall(N), efficiency = speedup / N, and identical_to_1 (every runs cell but the
wall-clock columns equal to the 1-rank run's).

Each N starts from no stored grid (its result files and shards are removed first); the backbone and head are
built once before (stages backbone / head), so only the grid is timed. N = 1 runs `report.grids` in one process
(no torchrun); N > 1 through `report.grids --nproc N`. On CPU every rank gets cores // N threads.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import time

import pandas as pd

from mrp_repro.measure.sharded import TIMING_COLUMNS
from mrp_repro.report import grids, paper, tables

__all__ = ["clear_grids", "time_grids", "main"]


def clear_grids(profile, names) -> None:
    """Remove the stored grids `names` (result file, spec, shards): the next run collects them from scratch."""
    for name in names:
        path = paper.result_path(profile, name)
        for p in (path, path.with_suffix(".json")):
            p.unlink(missing_ok=True)
        shutil.rmtree(paper.results_dir(profile) / f"{name}.shards", ignore_errors=True)


def time_grids(profile, param: str, names, nproc: int) -> float:
    """Seconds to collect `names` from scratch on `nproc` ranks (a subprocess, as a user runs it)."""
    clear_grids(profile, names)
    cmd = [sys.executable, "-m", "mrp_repro.report.grids", "--profile", param, "--grid", *names, "--no-progress"]
    cmd += ["--nproc", str(nproc)] if nproc > 1 else []
    env = {**os.environ, "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // nproc))}
    t0 = time.perf_counter()
    rc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL).returncode
    if rc != 0:
        raise RuntimeError(f"`{' '.join(cmd[1:])}` failed with exit status {rc} (its error is above)")
    return time.perf_counter() - t0


def _cells(profile, name) -> pd.DataFrame:
    text = paper.result_path(profile, name).read_text()
    return pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False).drop(columns=list(TIMING_COLUMNS))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="smoke")
    ap.add_argument("--nproc", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--grid", nargs="*", choices=grids.GRIDS, default=["modes_runs"])
    ap.add_argument("--out", default=None, help="output directory (default figures/<profile>)")
    a = ap.parse_args(argv)
    from mrp_repro.config import load_profile

    profile = load_profile(a.profile)
    if 1 not in a.nproc:
        a.nproc = [1, *a.nproc]  # the reference of speedup and identity
    for stage in ("backbone", "head"):  # built once, not timed
        cmd = [sys.executable, "-m", "mrp_repro.stages", stage, "--profile", a.profile, "--no-progress"]
        if subprocess.run(cmd, stdout=subprocess.DEVNULL).returncode != 0:
            raise RuntimeError(f"`{' '.join(cmd[1:])}` failed (its error is above)")
    rows, ref = [], None
    for n in sorted(set(a.nproc)):
        wall = time_grids(profile, a.profile, a.grid, n)
        cells = {g: _cells(profile, g) for g in a.grid}
        ref = cells if ref is None else ref
        same = all(cells[g].equals(ref[g]) for g in a.grid)
        rows.append(dict(nproc=n, wall_s=wall, identical_to_1=same, rows=sum(len(c) for c in cells.values())))
        print(f"nproc {n}: {wall:.1f}s, identical to 1 rank: {same}", flush=True)
    df = pd.DataFrame(rows)
    df["speedup"] = df.loc[df["nproc"] == 1, "wall_s"].iloc[0] / df["wall_s"]
    df["efficiency"] = df["speedup"] / df["nproc"]
    device = "cuda" if __import__("torch").cuda.is_available() else f"cpu ({os.cpu_count()} cores)"
    note = f"grids {', '.join(a.grid)} of profile {profile.name} on {device}; each N from no stored grid"
    d = tables.out_dir(a.out if a.out else profile)
    tables.save_table(df, d, "grid_scaling", digits=2, note=note)
    print(tables.markdown(tables.format_table(df, 2)))


if __name__ == "__main__":
    from mrp_repro.cli import run_cli

    run_cli(main)
