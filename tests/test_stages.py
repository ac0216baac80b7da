"""stages: the head comes on the backbone's device and in its dtype, its cost is recorded in metrics.json,
a second call reuses every artifact, and the stage CLI prints a user error as one line."""

import json

from mrp_repro import stages
from mrp_repro.config import load_profile


def test_head_stage_records_cost_reuses_and_follows_the_backbone(tmp_runs):
    p = load_profile("smoke").replace({"mrp_training.steps": 3, "mrp_training.ckpt_every": 3})
    bb = stages.random_backbone(p, std=0.2, seed=0)
    out = stages.train_head(p, bb, progress=False)
    assert out == stages.head_dir(p, bb)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["head_cost_ratio"] > 0 and metrics["head_cost_ratio_batch"] >= 1
    stamp = (out / "done.json").stat().st_mtime_ns
    head = stages.head(p, bb, progress=False)
    assert (out / "done.json").stat().st_mtime_ns == stamp  # reused, not retrained
    w, hw = bb.model.lm_head.weight, next(head.parameters())
    assert (hw.device, hw.dtype) == (w.device, w.dtype)
    dirs = {stages.trajectories_dir(p, bb, s) for s in stages.train_sources(p)}
    assert all((d / "manifest.json").exists() for d in dirs)
