"""Sharded evaluation under torchrun (gloo, 2 CPU ranks): merged == one process token for token, resume redoes
only missing or corrupt shards, a dead rank fails the launch naming itself and its log and nothing is merged."""

from __future__ import annotations

import io
import json
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from mrp_repro import distributed
from mrp_repro.measure.runs import collect_runs
from mrp_repro.measure.sharded import TIMING_COLUMNS

sys.path.insert(0, str(Path(__file__).parent))
from ddp_grid_worker import grid_inputs, peers_inputs  # noqa: E402

WORKER = str(Path(__file__).with_name("ddp_grid_worker.py"))


def _launch(tmp_path, nproc=2, *extra, env=None):
    distributed.launch(WORKER, [str(tmp_path / "shards"), str(tmp_path / "merged.csv"), *extra], nproc,
                       tmp_path / "logs", timeout_s=240, extra_env={"OMP_NUM_THREADS": "1", **(env or {})})  # fmt: skip


@pytest.mark.slow  # make test-slow (CI runs it once): make test stays within its 12 minutes
@pytest.mark.parametrize("modes_stored", [False, True])
def test_the_peers_grid_on_two_ranks_is_the_single_process_one(tmp_path, monkeypatch, modes_stored):
    """report.peers.peer_runs under torchrun (make reproduce NPROC=2): each rank decodes its shards, rank 0 stores
    the merged frame with its method column, equal to the one-process decode in every cell but the clock, and the
    shard directory is gone. With modes_runs stored first (as make reproduce's grids stage does), the settings it
    holds are read from it (resumed_from names it) and the frame is still the one-process decode."""
    from mrp_repro.report import grids, paper, peers

    monkeypatch.setenv("MRP_REPRO_RUNS", str(tmp_path / "runs"))
    p, bb, head = peers_inputs()
    if modes_stored:
        grids.runs(p, bb, head, "modes_runs")
    _launch(tmp_path, 2, "--peers", env={"MRP_REPRO_RUNS": str(tmp_path / "runs")})
    stored = paper.result_path(p, peers.GRID)
    buf = io.StringIO()
    peers.decode(p, bb, head).to_csv(buf, index=False)
    clock = [*TIMING_COLUMNS, "resumed_from"]
    two, one = (pd.read_csv(io.StringIO(t), dtype=str, keep_default_na=False).drop(columns=clock)
                for t in (stored.read_text(), buf.getvalue()))  # fmt: skip
    pd.testing.assert_frame_equal(two, one)
    assert set(pd.read_csv(stored)["wall_rank"]) == {0, 1} and set(two["method"]) >= {"static", "spiffy", "wino"}
    read = pd.read_csv(stored, dtype=str, keep_default_na=False)["resumed_from"].str.startswith("modes_runs: ")
    assert read.any() == modes_stored
    assert not (paper.results_dir(p) / f"{peers.GRID}.shards").exists()


@pytest.fixture(scope="module")
def reference_csv():
    """collect_runs in this process, written as report.paper.save_result writes it."""
    p, bb, head, settings, kw = grid_inputs()
    buf = io.StringIO()
    collect_runs(p, bb, head, settings=settings, **kw).to_csv(buf, index=False)
    return buf.getvalue()


def _cells(text: str) -> pd.DataFrame:
    df = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    return df.drop(columns=list(TIMING_COLUMNS))


def _shard_mtimes(d: Path) -> dict:
    return {f.name: f.stat().st_mtime_ns for f in sorted(d.glob("*.csv"))}


def test_two_ranks_merge_to_the_single_process_frame_and_resume_redoes_only_bad_shards(tmp_path, reference_csv):
    _launch(tmp_path)
    merged = (tmp_path / "merged.csv").read_text()
    pd.testing.assert_frame_equal(_cells(merged), _cells(reference_csv))  # every cell but the wall clock
    runs = pd.read_csv(tmp_path / "merged.csv")
    assert set(runs["mode"]) == {"static", "speculative", "remask"}
    assert runs.loc[runs["mode"] == "speculative", "identical_to_static"].all()  # lossless, on both ranks
    assert set(runs["wall_rank"]) == {0, 1}
    # every setting of a prompt on one rank: wall times compare within a rank
    assert (runs.groupby(["benchmark", "prompt_index"])["wall_rank"].nunique() == 1).all()
    # tables from the merged frame equal the single-process ones (accuracy, TPF, identity)
    from mrp_repro.measure.stats import summarize

    cols = ["accuracy", "tpf", "lossless"]
    ref = summarize(pd.read_csv(io.StringIO(reference_csv)))
    pd.testing.assert_frame_equal(summarize(runs)[cols], ref[cols])

    shards = tmp_path / "shards"
    files = sorted(shards.glob("*.csv"))
    assert len(files) == 6  # 2 benchmarks x 3 batches of <= 2 prompts
    files[0].unlink()
    files[3].write_text(files[3].read_text().replace("True", "False", 1))  # corrupt: the sha256 no longer matches
    (tmp_path / "merged.csv").unlink()
    stale = shards / f".{files[1].name}.k1ll3d.tmp"  # a killed rank's half-written shard: rank 0 clears it
    stale.write_text("half a shard")
    before = _shard_mtimes(shards)
    _launch(tmp_path)
    after = _shard_mtimes(shards)
    redone = {n for n in after if before.get(n) != after[n]}
    assert redone == {files[0].name, files[3].name}, redone
    assert not stale.exists()
    assert (tmp_path / "merged.csv").read_text() != "" and _cells((tmp_path / "merged.csv").read_text()).equals(
        _cells(reference_csv)
    )


@pytest.mark.slow  # make test-slow (CI runs it once): keeps make test within its 12 minutes on 2 cores
@pytest.mark.parametrize("hard", [False, True], ids=["error", "killed"])
def test_a_dead_rank_fails_the_launch_naming_it_and_nothing_is_merged(tmp_path, reference_csv, hard):
    extra = ["--die-rank", "1", "--die-after", "1"] + (["--hard"] if hard else [])
    with pytest.raises(distributed.RankFailed) as e:
        _launch(tmp_path, 2, *extra)
    msg = str(e.value)
    assert "rank 1 of 2 failed" in msg, msg
    assert ("injected failure on rank 1" in msg) if not hard else ("exit status" in msg), msg
    log = Path(msg.split("its log: ")[1].split(" ")[0])
    assert log.exists() and log.parent.name == "1", log
    assert not (tmp_path / "merged.csv").exists()
    # finished = a csv with its sidecar (a rank killed between the two leaves a csv that is not done, and redone)
    done = {n: t for n, t in _shard_mtimes(tmp_path / "shards").items()
            if (tmp_path / "shards" / n).with_suffix(".json").exists()}  # fmt: skip
    assert 1 <= len(done) < 6
    _launch(tmp_path)  # the advice: rerun the same command; it resumes
    after = _shard_mtimes(tmp_path / "shards")
    assert all(after[n] == t for n, t in done.items())  # no finished shard redone
    assert _cells((tmp_path / "merged.csv").read_text()).equals(_cells(reference_csv))


def test_without_nproc_drops_both_spellings():
    argv = ["head", "--profile", "smoke", "--nproc", "2", "--no-progress", "--nproc=3"]
    assert distributed.without_nproc(argv) == ["head", "--profile", "smoke", "--no-progress"]



def test_init_registers_leaving_the_process_group_at_exit(tmp_path, monkeypatch):
    """distributed.init registers _leave with atexit, and _leave destroys the group (a gloo rank left to
    interpreter shutdown sometimes died of SIGABRT after its work was written). One rank on a file store stands in
    for torchrun's group."""
    import atexit

    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    def one_rank_group(backend, timeout):
        distributed_c10d.init_process_group(backend, init_method=f"file://{tmp_path / 'store'}", rank=0,
                                            world_size=1, timeout=timeout)  # fmt: skip

    registered = []
    monkeypatch.setattr(atexit, "register", registered.append)
    monkeypatch.setenv("WORLD_SIZE", "2")  # init joins a group only for a world over 1
    monkeypatch.setattr(dist, "init_process_group", one_rank_group)
    try:
        distributed.init()
        assert registered == [distributed._leave] and dist.is_initialized()
        distributed._leave()
        assert not dist.is_initialized()
        distributed._leave()  # the group already gone: a no-op
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_a_rank_that_succeeds_leaves_the_group_after_every_other_rank_finished(tmp_path):
    """cli.run_cli ends a successful rank with distributed.finish: a barrier, then the group destroyed, so no rank
    tears its connections down while a peer still works (a gloo rank once died of SIGABRT that way after writing
    every result); a rank that fails does not wait, and the launch names it instead of hanging."""
    worker = str(Path(__file__).parent / "ddp_finish_worker.py")
    distributed.launch(worker, [str(tmp_path / "ok")], 2, tmp_path / "logs", timeout_s=120)
    r0, r1 = (json.loads((tmp_path / "ok" / f"rank-{r}.json").read_text()) for r in (0, 1))
    assert r1["work"] - r0["work"] > 1.5  # rank 1 worked 2 s longer
    assert r0["left"] >= r1["work"]  # and rank 0 left the group only after it
    t0 = time.monotonic()
    with pytest.raises(distributed.RankFailed, match="rank 1 of 2 failed.*fails on purpose"):
        distributed.launch(worker, [str(tmp_path / "bad"), "--fail-rank", "1"], 2, tmp_path / "logs", timeout_s=120)
    assert time.monotonic() - t0 < 60 and not (tmp_path / "bad" / "rank-1.json").exists()


@pytest.mark.slow  # make test-slow; the clearing alone is checked in make test (the resume test above)
def test_a_launch_clears_a_killed_runs_temporaries_and_refuses_a_held_directory(tmp_path, reference_csv):
    """distributed.stage_lock under torchrun: rank 0 holds the shard directory's lock for the launch and clears what
    a killed run left there before any rank writes (a temporary that no rank's own run would otherwise remove); a
    directory another process holds fails the launch naming StageLocked, with nothing written."""
    from mrp_repro import integrity

    shards = tmp_path / "shards"
    shards.mkdir()
    stale = shards / ".synth-code-00000.csv.k1ll3d.tmp"
    stale.write_text("half a shard")
    with integrity.stage_lock(shards, "another launch"):
        with pytest.raises(distributed.RankFailed, match="StageLocked|being written by another process"):
            _launch(tmp_path)
        assert stale.exists() and not list(shards.glob("*.csv"))
    _launch(tmp_path)
    assert not stale.exists() and _cells((tmp_path / "merged.csv").read_text()).equals(_cells(reference_csv))
