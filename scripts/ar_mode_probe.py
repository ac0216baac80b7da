"""Does a profile's backbone decode in SDAR's autoregressive mode (block size 1), the mode S2D2 verifies with?

    .venv/bin/python scripts/ar_mode_probe.py --profile chain16 --n-prompts 32

Static(1) decoding of the first n evaluation prompts per benchmark at the profile's block size and at block size 1
(one token a block: each token predicted from the clean tokens before it alone), scored as the grids score them.
An SDAR model trained with block-1 steps keeps its accuracy at block 1; a backbone trained only at larger blocks
(chain16: blocks 4 and 16) may not, and then an AR-mode verifier would be a poor critic of its drafts (issue 37,
S2D2). Prints one line per benchmark and block size: accuracy (%) and seconds (one thread).
"""

from __future__ import annotations

import argparse
import time

import torch


def main(argv: list[str] | None = None) -> None:
    from mrp_repro import stages
    from mrp_repro.backbone import decode, encode_prompts
    from mrp_repro.config import DEFAULT_PROFILE, load_profile
    from mrp_repro.decoding import Static, generate
    from mrp_repro.measure.runs import eval_problems, score_problem

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default=DEFAULT_PROFILE)
    ap.add_argument("--n-prompts", type=int, default=32)
    a = ap.parse_args(argv)
    profile = load_profile(a.profile)
    bb = stages.backbone(profile, progress=False)
    torch.set_num_threads(1)  # after the stage, which sets the profile's count
    print(f"{profile.name}: static(1) at block {profile.block_size} and at block 1, {a.n_prompts} prompts a task")
    for bench in profile.evaluation.benchmarks:
        problems = eval_problems(profile, bench, a.n_prompts)
        prompts = encode_prompts(bb, problems)
        for block in (profile.block_size, 1):
            t0 = time.perf_counter()
            res = generate(bb.model, prompts, Static(1), block, bb.mask_id, bb.eos_ids,
                           profile.decoding.max_new_tokens, pad_id=bb.pad_id, trace=False)  # fmt: skip
            texts = [decode(bb, ids) for ids in res.tokens]
            correct = [score_problem(p, text)["correct"] for p, text in zip(problems, texts, strict=True)]
            print(f"{bench} block {block}: accuracy {100 * sum(correct) / len(correct):.1f}% "
                  f"({sum(correct)}/{len(correct)}), {time.perf_counter() - t0:.0f} s", flush=True)  # fmt: skip


if __name__ == "__main__":
    from mrp_repro.cli import run_cli

    run_cli(main)
