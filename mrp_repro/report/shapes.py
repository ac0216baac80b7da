"""What a profile's shape lets speculative decoding show, measured before choosing it (issue 14, part 3): the
block size and the backbone's depth set the oracle's ceiling, the head's share of a forward and the training cost.

    OMP_NUM_THREADS=1 .venv/bin/python -m mrp_repro.report.shapes --profile tiny       # SHAPES -> figures/tiny/shapes.*
    OMP_NUM_THREADS=1 .venv/bin/python -m mrp_repro.report.shapes --profile smoke --shapes "" block_size=16

    from mrp_repro.report.shapes import shape_table, oracle_block
    df = shape_table(profile, [{}, {"block_size": 16}])

A shape is a set of profile overrides ({} = the profile as it is). Per shape, on random weights (a wall time does
not depend on the values): the backbone's training step (the real train_backbone path at the profile's batch and
threads, over the shape's own synthetic sequences; median of the steps after the first) and the whole training
it implies (backbone_training.steps of them); and at batch 1, one thread, the cost model (measure/cost.py): one
forward_block, a packed verify of K candidates and one head step (lm_head included), as ratios to the forward,
beside the head's share of the linear FLOPs (head_flop_share: what the ratio tends to once per-call overhead is gone).
From those, the oracle's ceiling: every draft accepted, a block of b tokens takes one seed forward and a verify
for every round of min(K, masked) drafts that does not finish the block (oracle_block, the loop of
decoding.mrp_modes.Speculative), and the predicted speedup over static at that ceiling, per block in upstream's
accounting (static: b forwards + a commit; speculative: seed + commit + verifies x verify_cost + head steps x
head_cost). What a trained head reaches is a share of that ceiling (figures/<profile>/drafters.md).
"""

from __future__ import annotations

import argparse
import math
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from mrp_repro.config import DEFAULT_PROFILE

__all__ = ["BLOCK_16", "SHAPES", "COLUMNS", "oracle_block", "ceiling_speedup", "linear_macs", "head_flop_share",
           "train_step_seconds", "shape_table", "main"]  # fmt: skip

#: the tiny comparison: the profile, block 16 (the paper's), twice the depth, twice the depth at 2/3 the width
#: the paper's block size on tiny: the synthetic tasks grow with the block (tasks/synthetic.spec), so math
#: sequences grow from 40 to 80 tokens and answers from 3 blocks of 8 to 3 of 16
BLOCK_16 = {"block_size": 16, "backbone_training.seq_len": 80, "decoding.max_new_tokens": 48}
SHAPES = (
    {},
    BLOCK_16,
    {"model.num_layers": 16},
    {"model.num_layers": 16, "model.hidden_size": 64, "model.intermediate_size": 192, "model.head_dim": 16},
)

COLUMNS = ["shape", "block_size", "num_layers", "hidden_size", "params_m", "train_step_s", "train_min", "forward_ms",
           "K", "verify_cost", "head_cost", "head_flop_share", "oracle_tpf", "oracle_head_steps",
           "ceiling_speedup"]  # fmt: skip


def oracle_block(block: int, K: int) -> dict:
    """One block under speculative(K) when every draft is accepted: {forwards (the seed + the verifies),
    verifies, head_steps (drafts 2..d of every round of d drafts), rounds}. A round drafts min(K, masked); its
    verify scores the candidates still holding a mask, so a round that finishes the block with one draft has none."""
    if block < 1 or K < 1:
        raise ValueError(f"oracle_block needs block >= 1 and K >= 1, got {block}, {K}")
    masked, verifies, head_steps, rounds = block, 0, 0, 0
    while masked:
        d = min(K, masked)
        need = d - 1 if d == masked else d
        verifies += need > 0
        head_steps += d - 1
        rounds += 1
        masked -= d
    return {"forwards": 1 + verifies, "verifies": verifies, "head_steps": head_steps, "rounds": rounds}


def ceiling_speedup(block: int, K: int, verify_cost: float, head_cost: float) -> float:
    """Static's time over speculative's at the oracle ceiling, per block, in forwards (upstream's accounting)."""
    o = oracle_block(block, K)
    return (block + 1) / (2 + o["verifies"] * verify_cost + o["head_steps"] * head_cost)


def linear_macs(module: torch.nn.Module) -> int:
    """Multiply-adds per token of `module`'s linear layers (their weights' sizes): the FLOPs that scale with
    width and depth, attention scores left out (at a few blocks of context they are a small part)."""
    return sum(m.weight.numel() for m in module.modules() if isinstance(m, torch.nn.Linear))


def head_flop_share(model, head) -> float:
    """One head step's linear FLOPs (eh_proj, its layers, the shared lm_head) over one backbone forward's."""
    return (linear_macs(head) + model.lm_head.weight.numel()) / linear_macs(model)


def train_step_seconds(profile, steps: int = 6) -> float:
    """Median seconds of one backbone training step of `profile` (train_backbone itself, into a temporary
    directory, `steps` steps; the first, warm-up step is left out)."""
    import csv

    from mrp_repro.training.backbone import train_backbone

    if steps < 2:
        raise ValueError("train_step_seconds needs steps >= 2 (the first is a warm-up)")
    with tempfile.TemporaryDirectory() as tmp:
        train_backbone(profile, tmp, progress=False, resume=False, stop_after=steps)
        with open(Path(tmp) / "loss_curve.csv") as fh:
            elapsed = [float(r["elapsed_s"]) for r in csv.DictReader(fh)]
    return float(np.median(np.diff(elapsed)))


def _random_models(profile):
    from mrp_repro.model import SDARModel, count_parameters
    from mrp_repro.mrp import MRPHead
    from mrp_repro.training.backbone import INIT_STD, make_tokenizer, model_config_for

    cfg = model_config_for(profile, len(make_tokenizer()))
    g = torch.Generator().manual_seed(0)
    model = SDARModel(cfg).init_weights(INIT_STD, g).eval()
    head = MRPHead(cfg, profile.mrp.num_layers, profile.mrp.objective).init_weights("normal", 0.02, g).eval()
    return model, head, count_parameters(model)


def shape_table(profile, shapes: Sequence[dict] = SHAPES, Ks: Sequence[int] | None = None, train_steps: int = 6,
                repeats: int = 20, progress: bool = False) -> pd.DataFrame:  # fmt: skip
    """One row per (shape, K); columns COLUMNS (see the module docstring)."""
    from mrp_repro.measure.cost import cost_model
    from mrp_repro.report.drafters import variant_name
    from mrp_repro.runtime import set_num_threads

    if profile.model.source != "scratch":
        raise ValueError(f"shapes: profile {profile.name!r} is not a scratch model (model.source: scratch)")
    Ks = list(Ks or profile.decoding.speculative_k)
    rows = []
    threads = torch.get_num_threads()
    for overrides in shapes:
        P = profile.replace(dict(overrides)) if overrides else profile
        if progress:
            print(f"shape {variant_name(overrides)}", flush=True)
        step_s = train_step_seconds(P, train_steps)  # at the profile's backbone_training.num_threads
        set_num_threads(1)  # the decoding benchmarks' batch-1 setting (report/speed.py)
        try:
            model, head, params = _random_models(P)
            with torch.no_grad():
                cm = cost_model(model, head, batch=1, block=P.block_size, Ks=Ks, repeats=repeats)
        finally:
            set_num_threads(threads)
        flop_share = head_flop_share(model, head)
        for K in Ks:
            o = oracle_block(P.block_size, K)
            vc = cm["verify_cost"][K]
            rows.append(dict(shape=variant_name(overrides), block_size=P.block_size, num_layers=P.model.num_layers,
                             hidden_size=P.model.hidden_size, params_m=params / 1e6, train_step_s=step_s,
                             train_min=step_s * P.backbone_training.steps / 60, forward_ms=1e3 * cm["t_forward_s"],
                             K=K, verify_cost=vc, head_cost=cm["head_cost"], head_flop_share=flop_share,
                             oracle_tpf=P.block_size / o["forwards"], oracle_head_steps=o["head_steps"],
                             ceiling_speedup=ceiling_speedup(P.block_size, K, vc, cm["head_cost"])))  # fmt: skip
    df = pd.DataFrame(rows, columns=COLUMNS)
    bad = [c for c in ("train_step_s", "forward_ms", "verify_cost", "head_cost") if not np.isfinite(df[c]).all()]
    if bad:
        raise RuntimeError(f"shapes: non-finite timings in {bad}")
    return df


def main(argv: list[str] | None = None) -> None:
    from mrp_repro.config import load_profile
    from mrp_repro.report import tables
    from mrp_repro.report.drafters import parse_variant

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default=DEFAULT_PROFILE)
    ap.add_argument("--shapes", nargs="+", default=None, help="key=value,... per shape ('': the profile's)")
    ap.add_argument("--train-steps", type=int, default=6, help="timed training steps per shape (>= 2)")
    ap.add_argument("--out", type=Path, default=None, help="default: figures/<profile>/")
    a = ap.parse_args(argv)
    profile = load_profile(a.profile)
    shapes = [parse_variant(s) for s in a.shapes] if a.shapes is not None else SHAPES
    df = shape_table(profile, shapes, train_steps=a.train_steps, progress=True)
    out = a.out or tables.out_dir(profile)
    note = (
        f"Random weights; train_step_s at backbone_training.num_threads={profile.backbone_training.num_threads} "
        f"and batch {profile.backbone_training.batch_size}, train_min = backbone_training.steps of them; the "
        "cost model at batch 1, 1 thread. oracle_tpf and ceiling_speedup: every draft accepted (the oracle), "
        "per block, upstream's accounting: (b + 1) / (2 + verifies * verify_cost + head steps * head_cost)."
    )
    tables.save_table(df, out, "shapes", digits=3, note=note)
    print(tables.markdown(tables.format_table(df, 3)))
    if not math.isfinite(float(df["ceiling_speedup"].min())):
        raise SystemExit("shapes: the ceiling is not finite")


if __name__ == "__main__":
    from mrp_repro.cli import run_cli

    run_cli(main)
