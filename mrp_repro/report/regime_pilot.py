"""A cheap read of a chain-data design (issue 34): fine-tune a trained backbone on the changed data, then its regime.

    .venv/bin/python -m mrp_repro.report.regime_pilot --from runs/from-scratch/chain16/backbone-*/ckpt-2400 \\
        --set MATH_ORDER_MAJORITY=0.9,0.75,0.6,0.5 --steps 400 --n-prompts 60 --out runs/pilots/graded

A backbone from step 0 costs two hours on 2 cores; a design of the chain data is read here in about 20 minutes:
`--set NAME=VALUE` overrides a design constant of mrp_repro.tasks.chain (comma-separated numbers for a tuple, `none`
for None) for this process, the checkpoint is trained `--steps` more on the data that gives (a fresh AdamW, lr
warming up to `--lr` over 20 steps, cosine to a tenth; the profile's batch size and block sizes, batches keyed by
step past the profile's own), and report.regime's statistics and target checks are measured on `--n-prompts`
held-out prompts per task with no head. What it writes under `--out`: the weights (hub format), regime_rows.csv,
regime.md (the checks, beside the run's settings) and pilot.json (the command's settings and the loss curve).

A pilot is a design read, not a stand-in: it starts from weights trained on other data, runs a few hundred steps
and reads fewer prompts than the issue's 200, so its numbers say which way a change moves the regime, never that a
backbone meets it (report.preregister reads only report.regime's table of a published backbone).
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

__all__ = ["parse_setting", "apply_settings", "fine_tune", "main"]

#: the chain-data constants a pilot may set (tasks/chain.py's design knobs)
KNOBS = ("MATH_ORDER_MAJORITY", "NAME_MAJORITY", "SWAP_COMMUTATIVE", "MATH_N_TERMS", "CODE_N_STATEMENTS")


def parse_setting(text: str) -> tuple[str, object]:
    """`NAME=VALUE` -> (NAME, value): a float, a tuple of numbers (comma-separated) or None (`none`)."""
    name, sep, raw = text.partition("=")
    if not sep or name not in KNOBS:
        raise ValueError(f"--set {text!r}: expected NAME=VALUE with NAME one of {', '.join(KNOBS)}")
    raw = raw.strip()
    if raw.lower() == "none":
        return name, None
    try:
        nums = [float(x) if "." in x else int(x) for x in raw.split(",") if x.strip()]
    except ValueError:
        nums = []
    if not nums:
        raise ValueError(f"--set {text!r}: VALUE must be numbers separated by commas (a one-entry tuple: `0.9,`), "
                         "or none")  # fmt: skip
    return name, nums[0] if "," not in raw else tuple(nums)


def apply_settings(settings: list[tuple[str, object]]) -> dict:
    """Set the chain constants for this process; -> the values they had."""
    from mrp_repro.tasks import chain

    old = {}
    for name, value in settings:
        old[name] = getattr(chain, name)
        setattr(chain, name, value)
    return old


def fine_tune(profile, model, steps: int, lr: float, progress: bool = True) -> list[dict]:
    """`steps` more block-diffusion steps of `model` on the profile's (current) training data; -> the loss curve."""
    import torch

    from mrp_repro.backbone import special_ids
    from mrp_repro.training import backbone as tb

    tok = tb.make_tokenizer(profile)
    if len(tok) != model.config.vocab_size:
        raise ValueError(f"the checkpoint's vocabulary ({model.config.vocab_size}) is not the profile's tokenizer's "
                         f"({len(tok)}): a --set that adds characters needs a backbone from step 0")  # fmt: skip
    data = tb.TrainData(profile, tok)
    mask_id = special_ids(tok)[0]
    tc = profile.backbone_training
    first = tc.steps + tc.restart_steps  # batches past the profile's own run
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=tc.weight_decay, betas=(0.9, 0.95))
    model.train()
    curve, t0 = [], time.perf_counter()
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=steps, desc="pilot", dynamic_ncols=True)
    for i in range(steps):
        lr_i = lr * min(1.0, (i + 1) / 20) * (0.1 + 0.45 * (1 + math.cos(math.pi * i / max(steps, 1))))
        for g in opt.param_groups:
            g["lr"] = lr_i
        step = first + i
        clean, plens, valid = data.batch(step, tc.batch_size)
        g = torch.Generator().manual_seed(tb.hash_seed(profile.seed, step))
        batch = tb.build_block_diffusion_batch(clean, plens, tb.train_block_size(profile, step), mask_id, g, valid)
        loss = tb.block_diffusion_loss(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        curve.append({"step": i + 1, "loss": float(loss.detach()), "lr": lr_i,
                      "elapsed_s": round(time.perf_counter() - t0, 3)})  # fmt: skip
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{curve[-1]['loss']:.3f}")
    if bar is not None:
        bar.close()
    model.eval()
    return curve


def main(argv: list[str] | None = None) -> None:
    import torch

    from mrp_repro import checkpoint as ckpt_io
    from mrp_repro import stages
    from mrp_repro.config import load_profile
    from mrp_repro.measure.runs import collect_runs
    from mrp_repro.report import tables
    from mrp_repro.report.regime import regime_long, regime_settings, regime_table
    from mrp_repro.runtime import set_num_threads, write_json_atomic

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="chain16")
    ap.add_argument("--from", dest="source", required=True, help="a hub-format backbone directory (a ckpt-N/, model/)")
    ap.add_argument("--set", dest="settings", action="append", default=[], help="NAME=VALUE, a tasks.chain constant")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--n-prompts", type=int, default=60)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", required=True)
    ap.add_argument("--no-progress", action="store_true")
    a = ap.parse_args(argv)
    settings = [parse_setting(s) for s in a.settings]
    apply_settings(settings)
    p = load_profile(a.profile)
    set_num_threads(a.threads or p.backbone_training.num_threads)
    out = Path(a.out)
    model = ckpt_io.load_backbone(a.source, dtype=torch.float32)
    curve = fine_tune(p, model, a.steps, a.lr, progress=not a.no_progress)
    ckpt_io.save_backbone(model, out / "model")
    bb = stages.random_backbone(p)
    bb.model.load_state_dict(model.state_dict())
    for prm in bb.model.parameters():
        prm.requires_grad_(False)
    runs = collect_runs(p, bb, None, a.n_prompts, list(p.evaluation.benchmarks), regime_settings(p),
                        progress=not a.no_progress)  # fmt: skip
    tables.write_csv(runs, out / "regime_rows.csv", index=False)
    t = regime_long(regime_table(runs, p.evaluation.bootstrap_samples, p.evaluation.ci, p.seed))
    note = (f"A pilot (mrp_repro.report.regime_pilot), not a stand-in: {a.source} trained {a.steps} more steps with "
            f"{', '.join(a.settings) or 'no change'}; {a.n_prompts} prompts per task, no head.")
    tables.save_table(t, out, "regime", digits=2, note=note)
    write_json_atomic(out / "pilot.json", {"source": a.source, "settings": a.settings, "steps": a.steps, "lr": a.lr,
                                           "n_prompts": a.n_prompts, "profile": p.name, "curve": curve})
    print(t.to_string())


if __name__ == "__main__":
    from mrp_repro.cli import run_cli

    run_cli(main)
