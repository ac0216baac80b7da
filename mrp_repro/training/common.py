"""What the trainers share: the LR schedule, the loss-curve writer, the stage commands in their errors, how
the head computes beside a low-precision backbone (`head_autocast`), and the head's loss under DDP (`ddp_loss`)."""

from __future__ import annotations

import contextlib
import csv
import math
from pathlib import Path

import torch
from torch import nn

from mrp_repro.integrity import atomic_file
from mrp_repro.runtime import write_json_atomic

__all__ = ["lr_lambda_for", "write_curve", "head_autocast", "ddp_loss", "HeadLoss", "BACKBONE_COMMAND", "HEAD_COMMAND"]

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
    with atomic_file(out_dir / "loss_curve.csv") as tmp, open(tmp, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    write_json_atomic(out_dir / "loss_curve.json", json_payload)


def head_autocast(backbone_dtype: torch.dtype, device: torch.device):
    """The context the head trains in beside a backbone of `backbone_dtype`.

    The head keeps fp32 master weights (AdamW updates of ~1e-3 relative size vanish in bf16's 8-bit mantissa)
    and computes under autocast in the backbone's dtype, as mixed-precision training upstream does (HF Trainer,
    bf16=True). Autocast casts the fp32 hidden states, the bf16 frozen lm_head/embeddings and the fp32 head
    weights to one dtype per matmul, which is what the plain fp32 head could not do ("expected m1 and m2 to
    have the same dtype"). The saved head is fp32 and loads in any dtype (mrp.load_head casts it).
    An fp32 backbone: no autocast, bit-for-bit the fp32 path."""
    if backbone_dtype in (torch.bfloat16, torch.float16):
        return torch.autocast(device_type=device.type, dtype=backbone_dtype)
    return contextlib.nullcontext()


class HeadLoss(nn.Module):
    """The head and a loss of it as one module, so DistributedDataParallel can wrap it.

    DDP reduces gradients only for a backward through its own forward, and it broadcasts every registered
    parameter and buffer: the loss function closes over the frozen backbone, which is therefore no submodule
    and never broadcast. `touch`: a loss with no graph (no slot to supervise on this rank) gets sum(p * 0)
    added, so every rank still produces a gradient for every head parameter; without it DDP's all-reduce
    (find_unused_parameters=False) would wait forever for the ranks that did have a graph."""

    def __init__(self, head: nn.Module, loss_fn, touch: bool):
        super().__init__()
        self.head = head
        self._loss_fn, self._touch = loss_fn, touch

    def forward(self, *args, **kwargs):
        loss = self._loss_fn(self.head, *args, **kwargs)
        if self._touch and loss.grad_fn is None:
            loss = loss + sum((p * 0).sum() for p in self.head.parameters())
        return loss


def ddp_loss(head: nn.Module, loss_fn, d, device: torch.device):
    """(loss module, no_sync) for training `head` on the ranks of `d` (a distributed.Dist).

    loss module(*args) = loss_fn(head, *args). At world 1 it is HeadLoss itself and no_sync a null context:
    the single-process computation, bit for bit. At world > 1 it is HeadLoss under DistributedDataParallel,
    whose backward averages the head's gradients over ranks; no_sync() skips that all-reduce for all but a
    step's last local micro-batch."""
    mod = HeadLoss(head, loss_fn, touch=d.active)
    if not d.active:
        return mod, contextlib.nullcontext
    ddp = nn.parallel.DistributedDataParallel(
        mod,
        device_ids=[device.index] if device.type == "cuda" else None,
        find_unused_parameters=False,  # every rank's loss reaches every head parameter (touch)
    )
    return ddp, ddp.no_sync
