"""A torchrun worker for tests/test_ddp_training.py: every rank trains the same tiny head (online or offline).

    OMP_NUM_THREADS=1 .venv/bin/python -m torch.distributed.run --standalone --nproc-per-node 2 \\
        tests/ddp_train_worker.py --recipe online --data DIR --job OUT[:STOP_AFTER] [--job ...] --results DIR

--data: an SFT directory (online) or a trajectory directory (offline) that the test made; --job: train into
OUT (resuming what is there), returning after STOP_AFTER steps when given; jobs run in order in one launch.
--results DIR: each rank writes rank-<r>.json there, with what train_* returned for each job, how many training
rows its loss saw in each job (so the test sees the global batch split, not repeated, over the ranks), and every
write this rank made under the jobs' OUT directories (an audit hook on open-for-write, rename/replace, mkdir and
remove), which is how the test sees that rank 0 alone writes. --over KEY=VALUE (JSON values): profile
overrides, e.g. for timing a bigger run:

    OMP_NUM_THREADS=1 .venv/bin/python -m torch.distributed.run --standalone --nproc-per-node 2 \\
        tests/ddp_train_worker.py --recipe online --data /tmp/sft --job /tmp/o2 --over mrp_training.steps=20

`train` is also what the test calls in-process for the 1-rank runs, so both use the same profile and backbone.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script, sys.path[0] is tests/
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from tests.test_online import _bb, _profile  # noqa: E402
from tests.test_training_mrp import MASK, profile, tiny_model  # noqa: E402

# a few steps, checkpoints every 2, and 4 micro-batches per online step (2 per rank at world 2)
ONLINE = {
    "mrp_training.steps": 6,
    "mrp_training.ckpt_every": 2,
    "mrp_training.batch_size": 8,
    "mrp_training.micro_batch_size": 2,
    "mrp.init": "normal",
}
OFFLINE = {"mrp_training.steps": 6, "mrp_training.ckpt_every": 2, "mrp_training.batch_size": 8}


def make_profile(recipe: str, data, **over):
    if recipe == "online":
        return _profile(data, **{**ONLINE, **over})
    return profile(**{**OFFLINE, **over})


def train(recipe: str, data, out, stop_after: int | None = None, **over) -> dict:
    """One run of train_online / train_mrp on the tiny backbone (the same weights on every rank and call)."""
    from mrp_repro.training.mrp import train_mrp
    from mrp_repro.training.online import train_online

    p = make_profile(recipe, data, **over)
    if recipe == "online":
        return train_online(p, _bb(), out, progress=False, stop_after=stop_after)
    bb = SimpleNamespace(model=tiny_model(), mask_id=MASK)
    return train_mrp(p, bb, data, out, progress=False, stop_after=stop_after)


def _watch_writes(roots: list[Path]) -> list:
    """Record every write under `roots` this process makes (audit events; torch.save and safetensors write from
    C++/Rust, unseen, but always to a temporary name that is then renamed, which is seen)."""
    seen: list = []
    roots_s = [str(r.resolve()) for r in roots]
    wflags = os.O_WRONLY | os.O_RDWR | os.O_CREAT

    def under(p) -> str | None:
        if isinstance(p, int) or p is None:
            return None
        s = os.path.abspath(os.fsdecode(p))
        return s if any(s == r or s.startswith(r + os.sep) for r in roots_s) else None

    def hook(event, args):
        if event == "open":
            path, mode, flags = args
            writing = any(c in mode for c in "wax+") if isinstance(mode, str) else bool((flags or 0) & wflags)
            if writing and (s := under(path)):
                seen.append(["open", s])
        elif event in ("os.rename", "os.mkdir", "os.remove", "os.rmdir", "shutil.rmtree"):
            for p in args[:2] if event == "os.rename" else args[:1]:
                if s := under(p):
                    seen.append([event, s])

    sys.addaudithook(hook)
    return seen


def _count_rows(recipe: str) -> list[int]:
    """Wrap the trainer's loss so the rows of every training call (grad enabled; held-out runs without) add up."""
    import mrp_repro.training.mrp as mrp_mod
    import mrp_repro.training.online as online_mod

    mod, name = (online_mod, "online_loss") if recipe == "online" else (mrp_mod, "mrp_loss")
    orig, seen = getattr(mod, name), [0]

    def counted(head, model, batch, *args, **kwargs):
        if torch.is_grad_enabled():
            seen[0] += int(batch["ids"].shape[0])
        return orig(head, model, batch, *args, **kwargs)

    setattr(mod, name, counted)
    return seen


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", choices=["online", "offline"], required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--job", action="append", required=True, help="OUT or OUT:STOP_AFTER")
    ap.add_argument("--results", default=None)
    ap.add_argument("--over", action="append", default=[], help="KEY=VALUE, VALUE as JSON")
    a = ap.parse_args()
    from mrp_repro import distributed

    torch.set_num_threads(1)
    d = distributed.init()
    over = {k: json.loads(v) for k, v in (o.split("=", 1) for o in a.over)}
    jobs = [(Path(j.rsplit(":", 1)[0]), int(j.rsplit(":", 1)[1])) if ":" in j else (Path(j), None) for j in a.job]
    writes = _watch_writes([j for j, _ in jobs])
    seen, returned, rows = _count_rows(a.recipe), [], []
    for out, stop in jobs:
        seen[0] = 0
        returned.append(train(a.recipe, a.data, out, stop_after=stop, **over))
        rows.append(seen[0])
    if a.results:
        res = Path(a.results)
        res.mkdir(parents=True, exist_ok=True)
        report = {"world": d.world, "returned": returned, "rows": rows, "writes": writes}
        (res / f"rank-{d.rank}.json").write_text(json.dumps(report))
    distributed.finish()  # as cli.run_cli does after a rank's main returns


if __name__ == "__main__":
    main()
