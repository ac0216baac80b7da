"""One rank of a sharded trajectory collection, for tests/test_ddp_trajectories.py.

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc-per-node 2 \
        tests/ddp_traj_worker.py OUT --sources gt,self \
        [--fail-rank 1 --fail-example 3 --fail-how raise|exit] [--model-seed-rank 1]

Collects each source into OUT/<source> with the tiny random backbone and examples of tests/test_trajectories.py
(the same arguments as its `run`, shard size 2), so a world-1 `run` in the test process is the reference.
Each rank writes the examples it collected to OUT/<source>.rank-<r>.json (which rank did which work).
--fail-*: the rank stops (raises, or exits without cleanup) on reaching that example.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

from mrp_repro import distributed

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the tests' helpers, however this is launched
from test_trajectories import examples, run, tiny_model  # noqa: E402

N_EXAMPLES, SHARD_SIZE = 10, 2


class Stop(Exception):
    pass


def items_for(source: str) -> list:
    return [p for p, _ in examples(N_EXAMPLES)] if source == "self" else examples(N_EXAMPLES)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--sources", default="gt")
    ap.add_argument("--fail-rank", type=int, default=None)
    ap.add_argument("--fail-example", type=int, default=None)
    ap.add_argument("--fail-how", choices=["raise", "exit"], default="raise")
    ap.add_argument("--model-seed-rank", type=int, default=None, help="this rank loads other weights (seed 1)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    d = distributed.init()
    assert d.world > 1, "launch this under torchrun with --nproc-per-node >= 2"

    seen: set[int] = set()

    def hook(example, block):
        seen.add(int(example))
        if d.rank == args.fail_rank and example == args.fail_example:
            if args.fail_how == "exit":
                os._exit(3)  # a rank that dies: no report, no cleanup
            raise Stop(f"rank {d.rank} stopped at example {example}")

    try:
        for source in args.sources.split(","):
            seen.clear()
            model = tiny_model(1 if d.rank == args.model_seed_rank else 0)
            run(model, items_for(source), source, os.path.join(args.out, source), hook=hook,
                shard_size=SHARD_SIZE)  # fmt: skip
            with open(os.path.join(args.out, f"{source}.rank-{d.rank}.json"), "w") as fh:
                json.dump(sorted(seen), fh)
    finally:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
