"""Every decoding mode on the same prompts, in one process: accuracy, forwards, TPF, speed, losslessness.

    python -m mrp_repro.bench_modes --profile tiny [--n-prompts 100] [--tasks synth-math synth-code]
    -> figures/<profile>/modes.csv and modes.md

    from mrp_repro.bench_modes import run_all_modes
    df = run_all_modes(profile, backbone, head, ["synth-math", "synth-code"], n_prompts=100)

Modes (METHOD.md §1, §3-5): static(1); dynamic(tau) for the profile thresholds; speculative K in
profile.decoding.speculative_k x drafter {mrp, oracle, naive}; direct steps 1/2; naive_lookahead K in
profile.decoding.lookahead_k; remask tau in {0.5, 0.3} + profile thresholds x the 5 rules.

Columns: accuracy and its bootstrap CI, backbone forwards (denoise + commit) and MRP forwards per
prompt, TPF (tokens per denoising forward, upstream's definition), tokens/s and speedup over static(1)
(wall clock of the same prompts), lossless (tokens identical to static(1) on every prompt), TPF as a
share of the oracle ceiling (speculative rows: the oracle drafter at the same K), mean accept length.

Cost model (speculative rows): verify_cost = packed K-candidate forward / one forward, head_cost =
one head step (+ lm_head) / one forward, both measured here at the decoding batch size; predicted
speedup = static time per token / ((verify + (K-1)·head) / accepted tokens per round)
= mean_accept / (verify_cost + (K-1)·head_cost) (head cost 0 for the naive and oracle drafters),
next to the measured speedup.
"""

from __future__ import annotations

import argparse
import math
import random
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from mrp_repro.decoding import (
    DRAFTERS,
    REMASK_RULES,
    Direct,
    Dynamic,
    NaiveLookahead,
    Remask,
    Speculative,
    Static,
    generate,
)

__all__ = ["mode_list", "run_all_modes", "cost_model", "to_markdown", "main"]


def mode_list(profile, head) -> list[tuple[str, object]]:
    """(family, policy) of every benchmarked mode; the MRP modes only when a head is given."""
    d = profile.decoding
    modes: list[tuple[str, object]] = [("static", Static(1))]
    modes += [("dynamic", Dynamic(t)) for t in d.thresholds]
    for K in d.speculative_k:
        for dr in DRAFTERS:
            if dr != "mrp" or head is not None:
                modes.append(("speculative", Speculative(K, dr, head=head)))
    if head is not None:
        modes += [("direct", Direct(s, head=head)) for s in (1, 2)]
    # The paper's lookahead K counts tokens revealed beyond the backbone's own pick (its K = 1 naive
    # row is below static, its K = 1 MRP row equals direct step 1), so naive lookahead K reveals K + 1.
    modes += [("naive_lookahead", NaiveLookahead(k + 1)) for k in d.lookahead_k]
    if head is not None:
        taus = sorted({0.5, 0.3, *d.thresholds}, reverse=True)
        for t in taus:
            for rule in REMASK_RULES:
                if rule not in d.remask_rules:
                    continue
                delta = {"delta": d.remask_delta, "logp-delta": d.remask_logp_delta}.get(rule)
                modes.append(("remask", Remask(t, rule, delta=delta, head=head)))
    return modes


def _bootstrap(x: np.ndarray, samples: int, ci: float, seed: int = 0) -> tuple[float, float]:
    if len(x) == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(samples, len(x)))].mean(1)
    a = (1 - ci) / 2
    return float(np.quantile(means, a)), float(np.quantile(means, 1 - a))


def _sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _timed(fn, dev, repeats=5) -> float:
    fn()
    ts = []
    for _ in range(repeats):
        _sync(dev)
        t0 = time.perf_counter()
        fn()
        _sync(dev)
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


@torch.no_grad()
def cost_model(model, head, batch: int, block: int, Ks, context_blocks: int = 4) -> dict:
    """Measured wall-time ratios to one forward_block at `batch` rows: verify_cost[K], head_cost."""
    dev = model.lm_head.weight.device
    V = model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    C = context_blocks * block
    ctx = torch.randint(3, V, (batch, C), generator=g).to(dev)
    ids = torch.randint(3, V, (batch, block), generator=g).to(dev)
    cpos = torch.arange(C, device=dev)[None].expand(batch, -1)
    pos = (C + torch.arange(block, device=dev))[None].expand(batch, -1)
    kv = torch.ones(batch, C, dtype=torch.bool, device=dev)
    cache = model.new_cache(batch, C)
    out = model.prefill(ctx, cpos, kv, cache, block)
    t1 = _timed(lambda: model.forward_block(ids, pos, cache), dev)
    res = {"t_forward_s": t1, "verify_cost": {}}
    for K in Ks:
        cand = ids[:, None].expand(batch, K, block).contiguous()
        res["verify_cost"][K] = _timed(lambda c=cand: model.forward_candidates(c, pos, cache), dev) / t1
    res["head_cost"] = float("nan")
    if head is not None:
        hcache = head.new_cache(batch, C)
        head.commit(out.hidden, ctx, cpos, model.embed_tokens, hcache, key_valid=kv, block_size=block)
        h = model.forward_block(ids, pos, cache).hidden
        res["head_cost"] = _timed(lambda: model.lm_head(head.step(h, ids, pos, model.embed_tokens, hcache)), dev) / t1
    return res


def _problems(task: str, n: int, profile):
    from mrp_repro.tasks import synthetic

    if task in synthetic.TASKS:
        return synthetic.generate(task, "test", n, seed=profile.data.seed, block_size=profile.block_size)
    from mrp_repro.tasks import benchmarks  # pragma: no cover - real benchmarks need their data

    return benchmarks.load(task, n=n)  # type: ignore[attr-defined]


def _score(problem, text: str) -> bool:
    from mrp_repro.tasks import synthetic

    if problem.benchmark in synthetic.TASKS:
        return bool(synthetic.score(problem, text)["correct"])
    from mrp_repro import evaluate  # pragma: no cover

    return bool(evaluate.score(problem, text)["correct"])  # type: ignore[attr-defined]


def _run(backbone, prompts, policy, batch_size: int, max_new: int):
    toks, stats, wall = [], [], 0.0
    dev = backbone.model.lm_head.weight.device
    for i in range(0, len(prompts), batch_size):
        _sync(dev)
        t0 = time.perf_counter()
        r = generate(backbone.model, prompts[i : i + batch_size], policy, backbone.block_size, backbone.mask_id,
                     backbone.eos_ids, max_new, pad_id=backbone.pad_id)  # fmt: skip
        _sync(dev)
        wall += time.perf_counter() - t0
        toks += r.tokens
        stats += r.stats
    return toks, stats, wall


def run_all_modes(profile, backbone, head, tasks, n_prompts: int, batch_size: int | None = None,
                  max_new_tokens: int | None = None, modes=None, progress: bool = True) -> pd.DataFrame:  # fmt: skip
    """One row per (task, mode); see the module docstring for the columns."""
    from mrp_repro.backbone import decode, encode_prompts

    d, ev = profile.decoding, profile.evaluation
    bs = batch_size or d.batch_size
    max_new = max_new_tokens or d.max_new_tokens
    modes = modes if modes is not None else mode_list(profile, head)
    Ks = sorted({p.K for _, p in modes if isinstance(p, Speculative)})
    cm = cost_model(backbone.model, head, min(bs, n_prompts), backbone.block_size, Ks) if Ks else None
    rows = []
    for task in tasks:
        problems = _problems(task, n_prompts, profile)
        prompts = encode_prompts(backbone, problems)
        ref_tokens = None
        for family, policy in modes:
            toks, stats, wall = _run(backbone, prompts, policy, bs, max_new)
            correct = np.array([_score(p, decode(backbone, t)) for p, t in zip(problems, toks, strict=True)], float)
            if policy.name == "static(1)":
                ref_tokens = toks
            lo, hi = _bootstrap(correct, ev.bootstrap_samples, ev.ci)
            n_tok = sum(len(t) for t in toks)
            acc_len = [j for s in stats for j in s.accept_lengths]
            row = dict(
                task=task, family=family, mode=policy.name, n=len(problems),
                accuracy=100 * correct.mean(), ci_lo=100 * lo, ci_hi=100 * hi,
                backbone_forwards=np.mean([s.backbone_forwards for s in stats]),
                denoise_forwards=np.mean([s.denoise_forwards for s in stats]),
                mrp_forwards=np.mean([s.mrp_forwards for s in stats]),
                tpf=sum(s.tokens for s in stats) / max(sum(s.denoise_forwards for s in stats), 1),
                revoked=np.mean([s.revoked for s in stats]),
                mean_accept=float(np.mean(acc_len)) if acc_len else float("nan"),
                wall_s=wall, tokens_per_s=n_tok / wall if wall > 0 else float("nan"),
                lossless=None if ref_tokens is None else bool(toks == ref_tokens),
                K=getattr(policy, "K", None) if family == "speculative" else None,
                drafter=getattr(policy, "drafter", None),
            )  # fmt: skip
            rows.append(row)
            if progress:
                print(f"[bench_modes] {task} {policy.name}: acc {row['accuracy']:.1f} tpf {row['tpf']:.2f} "
                      f"{row['tokens_per_s']:.0f} tok/s lossless={row['lossless']}", flush=True)  # fmt: skip
    df = pd.DataFrame(rows)
    # speedup over static(1) of the same task: time per generated token
    static_tps = df[df["mode"] == "static(1)"].set_index("task")["tokens_per_s"]
    df["speedup"] = df["tokens_per_s"] / df["task"].map(static_tps)
    oracle = df[df["drafter"] == "oracle"].set_index(["task", "K"])["tpf"]
    df["tpf_share_of_oracle"] = [
        r.tpf / oracle.get((r.task, r.K), float("nan")) if r.family == "speculative" else float("nan")
        for r in df.itertuples()
    ]
    if cm is not None:
        df["verify_cost"] = [cm["verify_cost"].get(k, float("nan")) if k == k and k is not None else float("nan")
                             for k in df["K"]]  # fmt: skip
        df["head_cost"] = [cm["head_cost"] if dr == "mrp" else (0.0 if dr in ("naive", "oracle") else float("nan"))
                           for dr in df["drafter"]]  # fmt: skip
        df["predicted_speedup"] = [
            r.mean_accept / (r.verify_cost + (r.K - 1) * r.head_cost) if r.family == "speculative" else float("nan")
            for r in df.itertuples()
        ]
        df.attrs["cost_model"] = cm
    return df


def to_markdown(df: pd.DataFrame, cost: dict | None = None) -> str:
    cols = ["task", "mode", "accuracy", "ci_lo", "ci_hi", "backbone_forwards", "mrp_forwards", "tpf",
            "tokens_per_s", "speedup", "lossless", "tpf_share_of_oracle", "mean_accept", "revoked",
            "predicted_speedup"]  # fmt: skip
    cols = [c for c in cols if c in df.columns]

    def fmt(v):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "-"
        if isinstance(v, (bool, np.bool_)):
            return str(bool(v))
        if isinstance(v, (float, np.floating)):
            return f"{v:.2f}"
        return str(v)

    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r[c]) for c in cols) + " |" for _, r in df.iterrows()]
    out = "\n".join(lines) + "\n"
    if cost:
        vc = ", ".join(f"K={k}: {v:.2f}" for k, v in cost["verify_cost"].items())
        out += (f"\nCost model (ratios to one forward of {cost['t_forward_s'] * 1e3:.2f} ms): verify {vc}; "
                f"head step {cost['head_cost']:.2f}. "
                "predicted_speedup = mean_accept / (verify + (K-1)·head).\n")  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> None:
    from mrp_repro.backbone import load_for_profile
    from mrp_repro.config import load_profile
    from mrp_repro.runtime import figures_dir, seed_everything, set_num_threads

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default="tiny")
    ap.add_argument("--tasks", nargs="*", default=None)
    ap.add_argument("--n-prompts", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--no-head", action="store_true", help="skip the MRP modes (no head training)")
    ap.add_argument("--out", default=None, help="output directory (default figures/<profile>)")
    a = ap.parse_args(argv)
    profile = load_profile(a.profile)
    set_num_threads(a.threads)
    seed_everything(profile.seed)
    random.seed(profile.seed)
    bb = load_for_profile(profile)
    head = None
    if not a.no_head:
        from mrp_repro.mrp import load_head
        from mrp_repro.train_mrp import train_for_profile

        hdir = train_for_profile(profile, bb)
        head = load_head(Path(hdir) / "head", bb.model.config, device=bb.device, dtype=bb.model.lm_head.weight.dtype)
    tasks = a.tasks or list(profile.evaluation.benchmarks)
    n = a.n_prompts or profile.evaluation.n_prompts or 100
    df = run_all_modes(profile, bb, head, tasks, n, batch_size=a.batch_size)
    out = Path(a.out) if a.out else figures_dir(profile)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "modes.csv", index=False)
    (out / "modes.md").write_text(to_markdown(df, df.attrs.get("cost_model")))
    print(f"wrote {out / 'modes.csv'} and {out / 'modes.md'}")


if __name__ == "__main__":
    main()
