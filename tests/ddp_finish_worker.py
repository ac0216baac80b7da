"""A torchrun worker for tests/test_ddp_grid.py's leaving test: each rank joins the group, rank 1 works 2 s longer,
and every rank records when its work ended (main returned) and when run_cli returned (after distributed.finish).

python -m torch.distributed.run --standalone --nproc-per-node 2 tests/ddp_finish_worker.py OUT_DIR [--fail-rank R]
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mrp_repro import distributed  # noqa: E402
from mrp_repro.cli import run_cli  # noqa: E402
from mrp_repro.errors import UserError  # noqa: E402

ended: dict[str, float] = {}


def main(argv=None):
    out, fail = Path(argv[0]), int(argv[2]) if len(argv) > 2 else None
    d = distributed.init()
    if d.rank == 1:
        time.sleep(2.0)
    if d.rank == fail:
        raise UserError(f"rank {d.rank} fails on purpose")
    ended["work"] = time.time()
    out.mkdir(parents=True, exist_ok=True)
    return 0


if __name__ == "__main__":
    run_cli(main)
    rank = os.environ["RANK"]
    Path(sys.argv[1], f"rank-{rank}.json").write_text(json.dumps({**ended, "left": time.time()}))
