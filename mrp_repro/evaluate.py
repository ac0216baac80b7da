"""Evaluation shared by every stage: decode problems with a policy, score, summarise.

    from mrp_repro.evaluate import run_mode, summarize, backbone_report
    df = run_mode(bb, problems, Dynamic(0.5), batch_size=32, max_new_tokens=24)
    summarize(df)                  # accuracy, 95% bootstrap CI, TPF, tokens/s, speedup vs static(1)

Benchmark table of the backbone (static and dynamic tau on both synthetic tasks,
plus the adjacent-step logit similarity):

    .venv/bin/python -m mrp_repro.evaluate --profile tiny --table backbone

writes figures/<profile>/backbone_modes.csv/.md and adjacent_steps.csv.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Sequence

import numpy as np
import pandas as pd

from mrp_repro.decoding import Dynamic, Policy, Static
from mrp_repro.tasks import synthetic

__all__ = [
    "score",
    "score_problem",
    "run_mode",
    "summarize",
    "bootstrap_ci",
    "paired_bootstrap_diff",
    "eval_problems",
    "backbone_report",
    "STATIC_MODE",
]

STATIC_MODE = "static(1)"

COLUMNS = [
    "task",
    "task_id",
    "mode",
    "correct",
    "valid_chain",
    "extracted",
    "text",
    "tokens",
    "denoise_forwards",
    "commit_forwards",
    "mrp_forwards",
    "tpf",
    "revoked",
    "accepted",
    "drafted",
    "rounds",
    "accept_lengths",
    "wall_s",
]


def score_problem(problem, text: str) -> dict:
    """{"correct", "valid_chain" (NaN for real benchmarks), "extracted"} for one output."""
    b = problem.benchmark
    if b in synthetic.TASKS:
        return synthetic.score(problem, text)
    from mrp_repro.tasks import extract

    if b in ("gsm8k", "math500"):
        r = extract.score_math(text, problem.reference)
    elif b in ("humaneval", "mbpp"):
        r = extract.score_code(text, problem)
    else:
        raise ValueError(f"no scorer for benchmark {b!r}")
    return {"correct": bool(r["correct"]), "valid_chain": math.nan, "extracted": r.get("extracted")}


score = score_problem  # alias used by bench_modes


def run_mode(
    backbone,
    problems: Sequence,
    policy: Policy,
    batch_size: int,
    max_new_tokens: int,
    progress: bool = True,
) -> pd.DataFrame:
    """Decode every problem with `policy`; one row per problem, in the input order.

    Batches are formed after sorting by prompt length (less padding); wall_s is the
    batch's wall time split evenly over its rows."""
    from mrp_repro.backbone import decode, encode_prompts

    prompts = encode_prompts(backbone, problems)
    order = sorted(range(len(problems)), key=lambda i: (len(prompts[i]), i))
    rows: dict[int, dict] = {}
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    it = batches
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(batches, desc=policy.name, leave=False, dynamic_ncols=True)
    for idx in it:
        t0 = time.perf_counter()
        res = backbone.generate([prompts[i] for i in idx], policy, max_new_tokens)
        wall = (time.perf_counter() - t0) / len(idx)
        for j, i in enumerate(idx):
            p = problems[i]
            text = decode(backbone, res.tokens[j])
            sc = score_problem(p, text)
            s = res.stats[j]
            rows[i] = dict(
                task=p.benchmark,
                task_id=p.task_id,
                mode=policy.name,
                correct=bool(sc["correct"]),
                valid_chain=sc["valid_chain"],
                extracted=sc["extracted"],
                text=text,
                tokens=s.tokens,
                denoise_forwards=s.denoise_forwards,
                commit_forwards=s.commit_forwards,
                mrp_forwards=s.mrp_forwards,
                tpf=s.tpf,
                revoked=s.revoked,
                accepted=s.accepted,
                drafted=s.drafted,
                rounds=s.rounds,
                accept_lengths=" ".join(map(str, s.accept_lengths)),  # a string: survives the CSV cache
                wall_s=wall,
            )
    df = pd.DataFrame([rows[i] for i in range(len(problems))], columns=COLUMNS)
    df["valid_chain"] = df["valid_chain"].astype(float)
    return df


def bootstrap_ci(values, n_boot: int = 1000, ci: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, v.size, size=(n_boot, v.size))].mean(1)
    a = (1 - ci) / 2
    return float(np.quantile(means, a)), float(np.quantile(means, 1 - a))


def paired_bootstrap_diff(a, b, n_boot: int = 1000, ci: float = 0.95, seed: int = 0) -> dict:
    """mean(a - b) over paired items, its percentile bootstrap CI, and a two-sided p (sign flips of the CI)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"paired samples of different sizes: {a.shape} vs {b.shape}")
    d = a - b
    if d.size == 0:
        return {"diff": math.nan, "ci_low": math.nan, "ci_high": math.nan, "p_value": math.nan, "n": 0}
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, d.size, size=(n_boot, d.size))].mean(1)
    lo, hi = np.quantile(means, [(1 - ci) / 2, 1 - (1 - ci) / 2])
    p = 2 * min((means <= 0).mean(), (means >= 0).mean())
    return {
        "diff": float(d.mean()),
        "ci_low": float(lo),
        "ci_high": float(hi),
        "p_value": float(min(p, 1.0)),
        "n": int(d.size),
    }


def summarize(
    df: pd.DataFrame,
    by: Sequence[str] = ("task", "mode"),
    n_boot: int = 1000,
    ci: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """One row per group: n, accuracy (+ bootstrap CI), valid_chain, mean TPF, forwards,
    tokens/s and speedup vs the "static(1)" mode of the same task (tokens/s ratio)."""
    by = list(by)
    out = []
    for key, g in df.groupby(by, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        lo, hi = bootstrap_ci(g["correct"].astype(float), n_boot, ci, seed)
        wall = g["wall_s"].sum()
        row = dict(zip(by, key, strict=True))
        row.update(
            n=len(g),
            accuracy=float(g["correct"].mean()),
            ci_low=lo,
            ci_high=hi,
            valid_chain=float(g["valid_chain"].mean()) if g["valid_chain"].notna().any() else math.nan,
            tpf=float(g["tpf"].mean()),
            tokens=float(g["tokens"].mean()),
            denoise_forwards=float(g["denoise_forwards"].mean()),
            commit_forwards=float(g["commit_forwards"].mean()),
            mrp_forwards=float(g["mrp_forwards"].mean()),
            tokens_per_s=float(g["tokens"].sum() / wall) if wall > 0 else math.nan,
        )
        out.append(row)
    s = pd.DataFrame(out)
    if s.empty:
        return s
    s["speedup"] = math.nan
    if "mode" in by:
        group_keys = [k for k in by if k != "mode"]
        for idx, r in s.iterrows():
            m = s["mode"] == STATIC_MODE
            for k in group_keys:
                m &= s[k] == r[k]
            if m.any():
                base = s.loc[m, "tokens_per_s"].iloc[0]
                s.loc[idx, "speedup"] = r["tokens_per_s"] / base if base and base > 0 else math.nan
    return s


# ----------------------------------------------------------------------------- backbone table


def eval_problems(profile, task: str | None = None, n: int | None = None) -> list:
    """Held-out problems of one task (or of every evaluation.benchmarks entry): the test split of a
    synthetic task, or the first n of a real benchmark (n defaults to evaluation.n_prompts)."""
    from mrp_repro.runtime import data_dir
    from mrp_repro.tasks import benchmarks

    if task is None:
        return [p for t in profile.evaluation.benchmarks for p in eval_problems(profile, t, n)]
    n = n if n is not None else profile.evaluation.n_prompts
    if task in synthetic.TASKS:
        return synthetic.generate(task, "test", n or profile.data.n_eval or 200, profile.data.seed, profile.block_size)
    return benchmarks.load_benchmark(task, data_dir(profile), limit=n)


def _markdown(s: pd.DataFrame) -> str:
    lines = [
        "| task | mode | n | accuracy % [95% CI] | valid chain % | TPF | backbone forwards |",
        "|---|---|---|---|---|---|---|",
    ]
    for _, r in s.iterrows():
        lines.append(
            f"| {r['task']} | {r['mode']} | {r['n']} | {100 * r['accuracy']:.1f} "
            f"[{100 * r['ci_low']:.1f}, {100 * r['ci_high']:.1f}] | {100 * r['valid_chain']:.1f} | "
            f"{r['tpf']:.2f} | {r['denoise_forwards'] + r['commit_forwards']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def backbone_report(
    profile, backbone=None, progress: bool = True, adjacent: bool = True, num_threads: int | None = None
) -> pd.DataFrame:
    """Static and dynamic(tau in decoding.thresholds) on every synthetic task of the profile.

    Writes figures/<profile>/backbone_modes.csv/.md (and adjacent_steps.csv) and
    returns the summary frame."""
    from mrp_repro.backbone import load_for_profile
    from mrp_repro.runtime import figures_dir, set_num_threads

    set_num_threads(num_threads or profile.backbone_training.num_threads)
    bb = backbone if backbone is not None else load_for_profile(profile, progress=progress)
    tasks = [t for t in profile.evaluation.benchmarks if t in synthetic.TASKS] or list(synthetic.TASKS)
    policies: list[Policy] = [Static(1)] + [Dynamic(t) for t in profile.decoding.thresholds]
    frames = []
    for task in tasks:
        probs = eval_problems(profile, task)
        for pol in policies:
            frames.append(
                run_mode(bb, probs, pol, profile.decoding.batch_size, profile.decoding.max_new_tokens, progress)
            )
    df = pd.concat(frames, ignore_index=True)
    ev = profile.evaluation
    s = summarize(df, n_boot=ev.bootstrap_samples, ci=ev.ci, seed=profile.seed)
    out = figures_dir(profile)
    s.to_csv(out / "backbone_modes.csv", index=False)
    (out / "backbone_modes.md").write_text(_markdown(s))
    df.to_csv(out / "backbone_modes_rows.csv", index=False)
    if adjacent:
        from mrp_repro.adjacent import adjacent_step_similarity

        probs = [p for t in tasks for p in eval_problems(profile, t, 32)]
        adj = adjacent_step_similarity(bb, probs, max_distance=4, n_problems=len(probs), seed=profile.seed)
        adj.to_csv(out / "adjacent_steps.csv", index=False)
    return s


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="tiny")
    ap.add_argument("--table", default="backbone", choices=["backbone"])
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (1 is faster on a shared machine)")
    args = ap.parse_args(argv)
    from mrp_repro.config import load_profile
    from mrp_repro.runtime import figures_dir

    profile = load_profile(args.profile)
    s = backbone_report(profile, progress=not args.no_progress, num_threads=args.threads)
    print(_markdown(s))
    adj = figures_dir(profile) / "adjacent_steps.csv"
    if adj.exists():
        print(pd.read_csv(adj).to_string(index=False))


if __name__ == "__main__":
    main()
