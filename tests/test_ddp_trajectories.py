"""Sharded trajectory collection under torchrun (CPU, gloo, 2 ranks): the same shards as one process,
resume redoing only missing/corrupt shards, and no complete manifest from a partial set.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_ddp_trajectories.py

Each 2-rank run is one `python -m torch.distributed.run --standalone --nproc-per-node 2
tests/ddp_traj_worker.py` launch (about 11 s on 2 shared cores); the 1-process reference is the same
`run` called here, where no process group exists (world 1)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ddp_traj_worker import SHARD_SIZE, items_for
from test_trajectories import run, tiny_model

from mrp_repro.trajectories import TrajectoryError, load_trajectories, read_manifest

WORKER = Path(__file__).with_name("ddp_traj_worker.py")
N_SHARDS = 5  # 10 examples / 2: rank 0 owns shards 0, 2, 4 and rank 1 owns 1, 3


def launch(out: Path, *args: str, ok: bool = True, nproc: int = 2) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           "--max-restarts=0", str(WORKER), str(out), *args]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("MRP_REPRO_RANK_ERRORS", None)
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    if ok:
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p


def reference(root: Path, source: str) -> Path:
    out = root / f"ref-{source}"
    run(tiny_model(), items_for(source), source, out, shard_size=SHARD_SIZE)
    return out


def mtimes(d: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in sorted(d.glob("shard-*.parquet"))}


def same_collection(a: Path, b: Path) -> None:
    """Every row equal, the shards byte-identical (same sha256 per shard), both manifests complete."""
    ta, tb = load_trajectories(a).data.table, load_trajectories(b).data.table
    assert ta.num_rows > 0 and ta.equals(tb)
    ma, mb = read_manifest(a), read_manifest(b)
    assert ma["complete"] and mb["complete"] and ma["n_rows"] == mb["n_rows"] == ta.num_rows
    assert ma["shards"] == mb["shards"]
    assert {k: v for k, v in ma.items() if k != "shards"} == {k: v for k, v in mb.items() if k != "shards"}


@pytest.fixture(scope="module")
def two_rank(tmp_path_factory) -> Path:
    """One 2-rank collection of gt and self (shared by the tests below, which copy before they damage)."""
    root = tmp_path_factory.mktemp("ddp")
    launch(root, "--sources", "gt,self")
    return root


@pytest.mark.parametrize("source", ["gt", "self"])
def test_two_ranks_equal_one_process(two_rank, tmp_path, source):
    out = two_rank / source
    same_collection(out, reference(tmp_path, source))
    # the work was split, not repeated: rank r collected exactly the examples of the shards i % 2 == r
    did = {r: json.loads((two_rank / f"{source}.rank-{r}.json").read_text()) for r in (0, 1)}
    assert did == {r: [e for e in range(10) if (e // SHARD_SIZE) % 2 == r] for r in (0, 1)}, did
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", *[f"shard-{i:05d}.parquet" for i in range(5)]]


def test_resume_on_two_ranks_redoes_only_the_damaged_shards(two_rank, tmp_path):
    out = tmp_path / "gt"
    shutil.copytree(two_rank / "gt", out)  # copy2: the mtimes come along
    before = mtimes(out)
    (out / "shard-00001.parquet").unlink()  # rank 1's
    bad = out / "shard-00002.parquet"  # rank 0's; same size, so only the sha256 sees it
    data = bytearray(bad.read_bytes())
    data[len(data) // 2] ^= 0xFF
    bad.write_bytes(bytes(data))
    with pytest.raises(TrajectoryError):
        load_trajectories(out)

    launch(tmp_path, "--sources", "gt")
    did = {r: json.loads((tmp_path / f"gt.rank-{r}.json").read_text()) for r in (0, 1)}
    assert did == {0: [4, 5], 1: [2, 3]}, did  # shard 1 -> rank 1, shard 2 -> rank 0, by whoever owns it now
    after = mtimes(out)
    redone = {k for k in before if after[k] != before[k]}
    assert redone == {"shard-00001.parquet", "shard-00002.parquet"}, redone
    same_collection(out, reference(tmp_path, "gt"))


@pytest.mark.parametrize("how", ["raise", "exit"])
def test_partial_two_rank_run_is_never_complete_and_resumes_on_one_process(tmp_path, how):
    # rank 1 stops inside its second shard (shard 3 = examples 6, 7); rank 0 owns 0, 2, 4
    p = launch(tmp_path, "--sources", "gt", "--fail-rank", "1", "--fail-example", "6", "--fail-how", how, ok=False)
    assert p.returncode != 0
    out = tmp_path / "gt"
    man = read_manifest(out)
    assert not man["complete"] and man["shards"] == []  # rank 0 writes finished shards into it only when all verify
    with pytest.raises(TrajectoryError, match="unfinished"):
        load_trajectories(out)
    records = {json.loads(f.read_text())["index"] for f in (out / "finished").glob("*.json")}
    assert {1} <= records <= {0, 1, 2, 4} and 3 not in records
    if how == "raise":  # a rank that reports its failure waits: the other finishes all its shards
        assert records == {0, 1, 2, 4}
        assert "rank 1 failed" in p.stdout + p.stderr and "Stop: rank 1 stopped at example 6" in p.stdout + p.stderr
    kept = {k: v for k, v in mtimes(out).items() if int(k[6:11]) in records}

    run(tiny_model(), items_for("gt"), "gt", out, shard_size=SHARD_SIZE)  # world 1
    assert {k: v for k, v in mtimes(out).items() if k in kept} == kept  # no finished shard redone
    assert not (out / "finished").exists()
    same_collection(out, reference(tmp_path, "gt"))


def test_ranks_with_different_backbones_fail_together(tmp_path):
    """A rank that loaded other weights is named; nothing is collected into a mixed set."""
    p = launch(tmp_path, "--sources", "gt", "--model-seed-rank", "1", ok=False)
    assert p.returncode != 0
    assert "rank 1 collects with other settings than rank 0 (backbone_hash differ)" in p.stdout + p.stderr
    assert not read_manifest(tmp_path / "gt")["complete"]
