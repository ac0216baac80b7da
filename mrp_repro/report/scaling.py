"""Wall time of the decoding grids on N torchrun ranks against 1, and whether the merged runs are the same.

    .venv/bin/python -m mrp_repro.report.scaling --profile smoke --nproc 1 2 --n-prompts 64   # CPU (say the cores)
    .venv/bin/python -m mrp_repro.report.scaling --profile sdar-4b --nproc 1 2 4 8 --grid modes_runs   # a GPU node
-> figures/<profile>/grid_scaling.{md,csv}: one row per N: wall_s (the whole launch: start-up, loading, decoding,
merge), decode_s (decoding and scoring on the busiest rank, from the shards' sidecars: what grows with the
grid), speedup = wall(1) / wall(N), decode_speedup = decode(1) / decode(N), efficiency = decode_speedup / N,
and identical_to_1 (every runs cell but the wall-clock columns equal to the 1-rank run's).

Each N starts from no stored grid (its result files and shards are removed first); the backbone and head are
built once before (stages backbone / head), so only the grid is timed. N = 1 runs `report.grids` in one process
(torchrun with one rank, so it takes the sharded path and its shards record their seconds); N > 1 through
`report.grids --nproc N`. On CPU every rank gets cores // N threads.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

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


def shard_seconds(profile, names) -> float:
    """The grid's decoding time on its busiest rank: max over ranks of the seconds its shards took (sidecars)."""
    per_rank: dict[int, float] = {}
    for name in names:
        for side in (paper.results_dir(profile) / f"{name}.shards").glob("*.json"):
            meta = json.loads(side.read_text())
            per_rank[meta["rank"]] = per_rank.get(meta["rank"], 0.0) + meta.get("seconds", float("nan"))
    return max(per_rank.values()) if per_rank else float("nan")


def time_grids(profile, param: str, names, nproc: int) -> float:
    """Seconds to collect `names` from scratch on `nproc` ranks (a subprocess, as a user runs it)."""
    clear_grids(profile, names)
    # one process goes through the sharded path too (world 1), so its shards record their seconds
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1"] if nproc == 1 else [
        sys.executable]  # fmt: skip
    cmd += ["-m", "mrp_repro.report.grids", "--profile", param, "--grid", *names, "--no-progress"]
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
    ap.add_argument("--n-prompts", type=int, default=None, help="override evaluation.n_prompts (prompts per benchmark)")
    ap.add_argument("--out", default=None, help="output directory (default figures/<profile>)")
    a = ap.parse_args(argv)
    from mrp_repro.config import load_profile

    over = {"evaluation.n_prompts": a.n_prompts} if a.n_prompts else {}
    profile = load_profile(a.profile, over)
    param = a.profile
    if over:  # the subprocesses read a profile file: this one, with the override
        import atexit
        import shutil
        import tempfile

        import yaml

        base = str(Path(a.profile).resolve()) if Path(a.profile).suffix in (".yaml", ".yml") else a.profile
        tmp = tempfile.mkdtemp(prefix="mrp_scaling_")
        atexit.register(shutil.rmtree, tmp, True)  # the subprocesses read it until this process ends
        f = Path(tmp) / "scaling-override.yaml"  # not <name>.yaml: `extends` would find itself
        f.write_text(yaml.safe_dump({"extends": base, "name": profile.name, "evaluation": {"n_prompts": a.n_prompts}}))
        param = str(f)
        profile = load_profile(param)
    if 1 not in a.nproc:
        a.nproc = [1, *a.nproc]  # the reference of speedup and identity
    for stage in ("backbone", "head"):  # built once, not timed
        cmd = [sys.executable, "-m", "mrp_repro.stages", stage, "--profile", param, "--no-progress"]
        if subprocess.run(cmd, stdout=subprocess.DEVNULL).returncode != 0:
            raise RuntimeError(f"`{' '.join(cmd[1:])}` failed (its error is above)")
    rows, ref = [], None
    for n in sorted(set(a.nproc)):
        wall = time_grids(profile, param, a.grid, n)
        cells = {g: _cells(profile, g) for g in a.grid}
        ref = cells if ref is None else ref
        same = all(cells[g].equals(ref[g]) for g in a.grid)
        dec = shard_seconds(profile, a.grid)
        rows.append(dict(nproc=n, wall_s=wall, decode_s=dec, identical_to_1=same,
                         rows=sum(len(c) for c in cells.values())))  # fmt: skip
        print(f"nproc {n}: {wall:.1f}s ({dec:.1f}s decoding on the busiest rank), identical to 1: {same}", flush=True)
    df = pd.DataFrame(rows)
    one = df[df["nproc"] == 1].iloc[0]
    df["nproc_speedup"] = one["wall_s"] / df["wall_s"]
    df["decode_nproc_speedup"] = one["decode_s"] / df["decode_s"]
    df["efficiency"] = df["decode_nproc_speedup"] / df["nproc"]
    import torch

    device = "cuda" if torch.cuda.is_available() else f"cpu ({os.cpu_count()} cores)"
    n_eval = profile.evaluation.n_prompts
    note = (f"grids {', '.join(a.grid)} of profile {profile.name} (evaluation.n_prompts {n_eval}) "
            f"on {device}, cores // N threads per rank; each N from no stored grid; wall_s includes torchrun's "
            "start-up and every rank's imports and loading, decode_s only the shards of the busiest rank")  # fmt: skip
    d = tables.out_dir(a.out if a.out else profile)
    tables.save_table(df, d, "grid_scaling", digits=2, note=note)
    print(tables.markdown(tables.format_table(df, 2)))


if __name__ == "__main__":
    from mrp_repro.cli import run_cli

    run_cli(main)
