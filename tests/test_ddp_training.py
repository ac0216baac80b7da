"""DDP head training under torchrun (2 CPU ranks, gloo) against one process: the same head for the same global
batch, online and offline; stop on 2 ranks and resume on 2 or on 1 (and 1 -> 2); rank 0 alone writes.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_ddp_training.py

The 2-rank runs launch tests/ddp_train_worker.py through `python -m torch.distributed.run --standalone`; the
1-rank runs call the worker's `train` in this process (world 1: no process group), with the same profile.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mrp_repro.config import ConfigError
from mrp_repro.distributed import Dist
from tests.ddp_train_worker import train
from tests.test_online import _sft_dir
from tests.test_training_mrp import EOS, MASK, L, tiny_model

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "ddp_train_worker.py"
# 2 ranks vs 1 differ only in summation order (the all-reduce of 2 gradients vs one accumulation over 4
# micro-batches / over all rows). Observed max |head param difference| after 6 steps: 7.9e-8 online,
# 6.1e-8 offline (also after a resume across world sizes), on parameters of size ~1; the tolerance leaves
# over 100x room.
ATOL, RTOL = 1e-5, 1e-4


def _launch(recipe: str, data, jobs: list[str], results: Path, nproc: int = 2) -> list[dict]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", str(WORKER),
           "--recipe", recipe, "--data", str(data), "--results", str(results)]  # fmt: skip
    for j in jobs:
        cmd += ["--job", j]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return [json.loads((results / f"rank-{r}.json").read_text()) for r in range(nproc)]


def _head(out: Path) -> dict:
    return torch.load(out / "ckpt.pt", map_location="cpu", weights_only=False)["head"]


def _max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _files(out: Path) -> set[str]:
    return {str(p.relative_to(out)) for p in out.rglob("*")}


def _curve(out: Path) -> dict:
    return json.loads((out / "loss_curve.json").read_text())


@pytest.fixture(scope="module")
def online(tmp_path_factory):
    """1 rank in-process (full, and stopped after 3 steps) and 2 ranks in one launch (full, stopped after 3)."""
    torch.set_num_threads(1)
    t = tmp_path_factory.mktemp("ddp_online")
    src = _sft_dir(t)
    train("online", src, t / "full1")
    assert not train("online", src, t / "cut1", stop_after=3)["finished"]
    ranks = _launch("online", src, [str(t / "full2"), f"{t / 'cut2'}:3"], t / "res_a")
    return t, src, ranks


def test_online_two_ranks_train_the_one_rank_head(online):
    t, _, ranks = online
    d = _max_diff(_head(t / "full1"), _head(t / "full2"))
    print(f"online: max |head(2 ranks) - head(1 rank)| = {d:.3g}")  # observed 7.9e-8
    for k, v in _head(t / "full1").items():
        torch.testing.assert_close(_head(t / "full2")[k], v, atol=ATOL, rtol=RTOL)
    # the logged train loss is the global batch's (all-reduced), the held-out KL the whole held-out set's
    c1, c2 = _curve(t / "full1"), _curve(t / "full2")
    assert len(c1["train"]) == len(c2["train"]) == 6 and len(c2["heldout"]) == 4
    for a, b in zip(c1["train"], c2["train"], strict=True):
        assert a["step"] == b["step"] and b["loss"] == pytest.approx(a["loss"], rel=1e-5)
    for a, b in zip(c1["heldout"], c2["heldout"], strict=True):
        assert a["step"] == b["step"] and b["heldout_kl"] == pytest.approx(a["heldout_kl"], rel=1e-5)
    assert c2["heldout"][-1]["heldout_slots"] == c1["heldout"][-1]["heldout_slots"]
    # every rank returns rank 0's metrics
    r0, r1 = ranks
    assert r0["world"] == r1["world"] == 2 and r0["returned"] == r1["returned"]
    assert r0["returned"][0]["finished"] and r0["returned"][1] == {"step": 3, "finished": False}
    # the global batch is split, not repeated: each rank trained on half of 6 steps x 8 sequences
    assert r0["rows"] == r1["rows"] == [24, 12]


def test_only_rank_zero_writes(online):
    t, _, (r0, r1) = online
    assert _files(t / "full2") == _files(t / "full1")  # the same artifacts as one process
    assert _files(t / "cut2") == _files(t / "cut1")
    assert r1["writes"] == []
    # the audit sees rank 0's atomic writes, so an empty list for rank 1 means something
    renamed = {Path(p).name for ev, p in r0["writes"] if ev == "os.rename"}
    assert {"ckpt.pt", "done.json", "metrics.json", "mrp.safetensors", "loss_curve.csv"} <= renamed


def test_online_resume_on_two_ranks_and_across_world_sizes(online):
    t, src, _ = online
    shutil.copytree(t / "cut2", t / "cut2_on1")  # written by 2 ranks, resumed by 1
    shutil.copytree(t / "cut1", t / "cut1_on2")  # written by 1 rank, resumed by 2
    _launch("online", src, [str(t / "cut2"), str(t / "cut1_on2")], t / "res_b")
    train("online", src, t / "cut2_on1")
    full1, full2 = _head(t / "full1"), _head(t / "full2")
    # 2 -> 2: the same computation as the uninterrupted 2-rank run, bit for bit
    for k, v in full2.items():
        assert torch.equal(_head(t / "cut2")[k], v), k
    for name, ref in (("cut2_on1", full1), ("cut1_on2", full2)):
        d = _max_diff(_head(t / name), ref)
        print(f"online {name}: max |head - uninterrupted| = {d:.3g}")
        for k, v in ref.items():
            torch.testing.assert_close(_head(t / name)[k], v, atol=ATOL, rtol=RTOL)
    # the resumed curve continues the stopped one: steps 1..6 once each
    assert [r["step"] for r in _curve(t / "cut2_on1")["train"]] == list(range(1, 7))


def test_offline_two_ranks_train_the_one_rank_head_and_resume_on_one(tmp_path):
    import random

    from mrp_repro.trajectories import collect

    torch.set_num_threads(1)
    rng = random.Random(0)
    items = [
        ([rng.randrange(3, 20) for _ in range(rng.choice([4, 8]))], [rng.randrange(3, 20) for _ in range(8)])
        for _ in range(24)
    ]
    traj = tmp_path / "traj"
    collect(tiny_model(), MASK, items, "gt-multi", traj, 16, seed=0, progress=False, block_size=L, eos_ids=[EOS])
    r0, r1 = _launch("offline", traj, [str(tmp_path / "full2"), f"{tmp_path / 'cut2'}:3"], tmp_path / "res")
    train("offline", traj, tmp_path / "full1")
    shutil.copytree(tmp_path / "cut2", tmp_path / "cut2_on1")
    train("offline", traj, tmp_path / "cut2_on1")
    full1 = _head(tmp_path / "full1")
    for name in ("full2", "cut2_on1"):
        d = _max_diff(_head(tmp_path / name), full1)
        print(f"offline {name}: max |head - 1-rank head| = {d:.3g}")
        for k, v in full1.items():
            torch.testing.assert_close(_head(tmp_path / name)[k], v, atol=ATOL, rtol=RTOL)
    c1, c2 = _curve(tmp_path / "full1"), _curve(tmp_path / "full2")
    for a, b in zip(c1["train"], c2["train"], strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5)  # the global batch's loss, not rank 0's half
    assert c2["heldout"][-1]["heldout_kl"] == pytest.approx(c1["heldout"][-1]["heldout_kl"], rel=1e-5)
    assert r0["returned"] == r1["returned"] and r1["writes"] == []
    assert r0["rows"] == r1["rows"] == [24, 12]  # half of 6 steps x 8 rows each (and of 3 steps)
    assert _files(tmp_path / "full2") == _files(tmp_path / "full1")


def test_too_few_micro_batches_or_rows_for_the_ranks_is_an_error(tmp_path, monkeypatch):
    """The world-size checks run before any communication, so a fake world of 4 on one process reaches them."""
    import mrp_repro.training.mrp as mrp_mod
    import mrp_repro.training.online as online_mod

    src = _sft_dir(tmp_path, 32)
    monkeypatch.setattr(online_mod, "current", lambda: Dist(rank=0, world=4))
    with pytest.raises(ConfigError, match=r"2 micro-batches per step, fewer than the 4 ranks.*micro_batch_size <= 2"):
        train("online", src, tmp_path / "o", **{"mrp_training.batch_size": 8, "mrp_training.micro_batch_size": 4})
    monkeypatch.setattr(mrp_mod, "current", lambda: Dist(rank=0, world=4))
    from mrp_repro.trajectories import collect

    traj = tmp_path / "traj"
    collect(tiny_model(), MASK, [([3, 4, 5, 6], [7, 8, 9, 10])] * 4, "gt", traj, 16, seed=0, progress=False,
            block_size=L, eos_ids=[EOS])  # fmt: skip
    with pytest.raises(ConfigError, match="cannot be split over 4 ranks.*batch_size to at least 4"):
        train("offline", traj, tmp_path / "f", **{"mrp_training.batch_size": 3, "mrp_training.micro_batch_size": 1})
