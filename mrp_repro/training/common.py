"""What the two trainers share: the LR schedule, the loss-curve writer, the stage commands in their errors."""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path

from mrp_repro.runtime import write_json_atomic

__all__ = ["lr_lambda_for", "write_curve", "BACKBONE_COMMAND", "HEAD_COMMAND"]

# The command that (re)builds each stage; error messages name it, so following their advice reruns the stage.
BACKBONE_COMMAND = "python -m mrp_repro.stages backbone --profile {name}"
HEAD_COMMAND = "python -m mrp_repro.stages head --profile {name}"


def lr_lambda_for(steps: int, warmup: int, min_ratio: float):
    """LambdaLR factor: linear warmup over `warmup` steps, then cosine from 1 to `min_ratio` at `steps`."""

    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / max(warmup, 1)
        prog = min(1.0, (step - warmup) / max(steps - warmup, 1))
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * prog))

    return f


def write_curve(out_dir: Path, rows: list[dict], fields: list[str], json_payload) -> None:
    """loss_curve.csv (the `fields` of each row) and loss_curve.json (`json_payload`), each written atomically."""
    tmp = out_dir / ".loss_curve.csv.tmp"
    with open(tmp, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, out_dir / "loss_curve.csv")
    write_json_atomic(out_dir / "loss_curve.json", json_payload)
