"""report.passes: notebook 05's repeated passes as a stage. Dealt to ranks they are the one-process passes in every
cell but the clock; a finished unit is kept and a rerun times only the rest; merging refuses missing units."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from mrp_repro import distributed
from mrp_repro.report import paper, passes, wallclock

sys.path.insert(0, str(Path(__file__).parent))
from ddp_grid_worker import peers_inputs  # noqa: E402

CLOCK = ["wall_s"]


def _cells(df: pd.DataFrame) -> pd.DataFrame:
    return df.drop(columns=CLOCK).reset_index(drop=True)


@pytest.fixture(scope="module")
def inputs():
    return peers_inputs()


@pytest.fixture(scope="module")
def one_process(inputs):
    """repeated_passes in one call, as notebook 05 ran it before the stage."""
    return wallclock.repeated_passes(*inputs)


def test_units_dealt_to_two_ranks_merge_to_the_one_process_passes(inputs, one_process, tmp_runs):
    p, bb, head = inputs
    assert passes.units(p) == [(1, b) for b in p.evaluation.benchmarks] + [(2, b) for b in p.evaluation.benchmarks]
    timed = [passes.time_units(p, bb, head, rank=r, world=2) for r in (1, 0)]
    assert sorted(timed[0] + timed[1]) == sorted(passes.units(p)) and timed[0] and timed[1]
    merged = passes.merge_units(p, head)
    pd.testing.assert_frame_equal(_cells(merged), _cells(one_process))
    assert not passes.units_dir(p).exists()
    assert paper.load_result(p, passes.RESULT) is not None



def test_stored_passes_are_read_not_timed_again(inputs, tmp_runs, monkeypatch):
    p, bb, head = inputs
    paper.save_result(p, passes.RESULT, pd.DataFrame({"benchmark": ["x"], "wall_s": [1.0]}))
    monkeypatch.setattr(wallclock, "repeated_passes", lambda *a, **k: pytest.fail("stored passes were timed again"))
    assert list(passes.collect(p, bb, head)["benchmark"]) == ["x"]


def test_a_rerun_keeps_finished_units_and_times_a_damaged_one_again(inputs, tmp_runs):
    p, bb, head = inputs
    first = passes.time_units(p, bb, head, rank=0, world=2)
    stems = [passes.units_dir(p) / f"{bs}-{b}" for bs, b in first]
    mtimes = {s: s.with_suffix(".csv").stat().st_mtime_ns for s in stems}
    side = stems[0].with_suffix(".json")
    side.write_text(json.dumps({**json.loads(side.read_text()), "passes": wallclock.PASSES + 1}))  # another scheme
    with pytest.raises(RuntimeError, match=r"were not timed; rerun `python -m mrp_repro.report.passes --profile"):
        passes.merge_units(p, head)  # rank 1's units are missing
    assert passes.time_units(p, bb, head, rank=0, world=2) == [first[0]]  # only the unit whose key no longer matched
    assert stems[1].with_suffix(".csv").stat().st_mtime_ns == mtimes[stems[1]]
    assert passes.time_units(p, bb, head, rank=1, world=2)
    assert len(passes.merge_units(p, head)) > 0


@pytest.mark.slow  # make test-slow (CI runs it once)
def test_the_passes_on_two_torchrun_ranks_are_the_one_process_passes(inputs, one_process, tmp_path, monkeypatch):
    monkeypatch.setenv("MRP_REPRO_RUNS", str(tmp_path / "runs"))
    worker = str(Path(__file__).with_name("ddp_grid_worker.py"))
    distributed.launch(worker, ["-", "-", "--passes"], 2, tmp_path / "logs", timeout_s=240,
                       extra_env={"MRP_REPRO_RUNS": str(tmp_path / "runs"), "OMP_NUM_THREADS": "1"})  # fmt: skip
    pd.testing.assert_frame_equal(_cells(paper.load_result(inputs[0], passes.RESULT)), _cells(one_process))
    assert not passes.units_dir(inputs[0]).exists()
