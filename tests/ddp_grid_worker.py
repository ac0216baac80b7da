"""A torchrun worker for tests/test_ddp_grid.py: the sharded decoding grid on a seeded random backbone + head.

python -m torch.distributed.run --standalone --nproc-per-node 2 tests/ddp_grid_worker.py SHARD_DIR OUT_CSV
    [--die-rank R --die-after N [--hard]]   # rank R fails after writing N shards (--hard: os._exit, no error)
python -m torch.distributed.run --standalone --nproc-per-node 2 tests/ddp_grid_worker.py - - --peers
    # report.peers.peer_runs of peers_inputs() under $MRP_REPRO_RUNS (the peers grid, sharded)
python -m torch.distributed.run --standalone --nproc-per-node 2 tests/ddp_grid_worker.py - - --passes
    # report.passes.collect of peers_inputs() under $MRP_REPRO_RUNS (05's repeated passes, a unit per rank)
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))

from mrp_repro import distributed  # noqa: E402
from mrp_repro.cli import run_cli  # noqa: E402
from mrp_repro.measure import sharded  # noqa: E402


def grid_inputs():
    """(profile, backbone, head, settings, kwargs) shared by the worker and the in-process reference."""
    from mrp_repro.config import load_profile
    from mrp_repro.decoding import Remask, Speculative
    from mrp_repro.measure.runs import settings_for
    from mrp_repro.mrp import MRPHead
    from mrp_repro.stages import random_backbone

    torch.set_num_threads(1)
    p = load_profile("smoke")
    bb = random_backbone(p, std=0.5)
    head = MRPHead(bb.model.config, 1, "residual").init_weights("normal", 0.05, torch.Generator().manual_seed(3))
    head.eval()
    settings = settings_for(p, None, ("static",)) + [
        ("speculative", Speculative(3, "mrp", head=head)),
        ("speculative", Speculative(2, "oracle")),
        ("remask", Remask(0.5, "tau", head=head)),
    ]
    kw = dict(n_prompts=5, benchmarks=["synth-code", "synth-math"], batch_size=2, max_new_tokens=16)
    return p, bb, head, settings, kw


def peers_inputs():
    """(profile, backbone, head) of the sharded peers grid: smoke, 3 prompts a benchmark at batch 2, 8 new tokens."""
    from mrp_repro.config import load_profile
    from mrp_repro.mrp import MRPHead
    from mrp_repro.stages import random_backbone

    torch.set_num_threads(1)
    p = load_profile("smoke").replace({"evaluation.n_prompts": 3, "decoding.max_new_tokens": 8,
                                       "decoding.batch_size": 2})  # fmt: skip
    bb = random_backbone(p, std=0.5)
    head = MRPHead(bb.model.config, 1).init_weights("normal", 0.3, generator=torch.Generator().manual_seed(0))
    return p, bb, head.eval()


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("shard_dir")
    ap.add_argument("out_csv")
    ap.add_argument("--die-rank", type=int, default=None)
    ap.add_argument("--die-after", type=int, default=0)
    ap.add_argument("--hard", action="store_true")
    ap.add_argument("--peers", action="store_true")
    ap.add_argument("--passes", action="store_true")
    a = ap.parse_args(argv)
    d = distributed.init()
    if a.peers:
        from mrp_repro.report import peers

        peers.peer_runs(*peers_inputs())
        return
    if a.passes:
        from mrp_repro.report import passes

        passes.collect(*peers_inputs())
        return
    p, bb, head, settings, kw = grid_inputs()
    if a.die_rank == d.rank:  # fault injection: this rank dies after writing die_after shards
        real, n = sharded._write_shard, [0]

        def write_then_die(*args, **kwargs):
            if n[0] >= a.die_after:
                if a.hard:
                    os._exit(9)
                raise RuntimeError(f"injected failure on rank {d.rank}")
            real(*args, **kwargs)
            n[0] += 1

        sharded._write_shard = write_then_die
    sharded.collect_runs_sharded(p, bb, head, a.shard_dir, a.out_csv, settings=settings, **kw)


if __name__ == "__main__":
    run_cli(main)
