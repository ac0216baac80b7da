"""Every decoding mode on the same prompts, in one process: accuracy, forwards, TPF, speed, losslessness.

    python -m mrp_repro.bench_modes --profile tiny [--n-prompts 100] [--tasks synth-math synth-code]
    -> figures/<profile>/modes.csv and modes.md

    from mrp_repro.bench_modes import collect_runs, run_all_modes
    runs = collect_runs(profile, backbone, head)    # one row per (prompt, mode): the notebooks' runs frame
    df = run_all_modes(profile, backbone, head)     # one row per (task, mode), with the cost model

Modes (METHOD.md §1, §3-5): static(1); dynamic(tau) for the profile thresholds; speculative K in
profile.decoding.speculative_k x drafter {mrp, oracle, naive}; direct steps 1/2; naive_lookahead K in
profile.decoding.lookahead_k; remask tau in {0.5, 0.3} + profile thresholds x the 5 rules.

Columns: accuracy and its bootstrap CI, backbone forwards (denoise + commit) and MRP forwards per
prompt, TPF (tokens per denoising forward, upstream's definition), tokens/s and speedup over static(1)
(wall clock of the same prompts), lossless (tokens identical to static(1) on every prompt), TPF as a
share of the oracle ceiling (speculative rows: the oracle drafter at the same K), mean accept length.

Cost model (speculative rows): verify_cost = packed K-candidate forward / one forward, head_cost =
one head step (+ lm_head) / one forward, both measured here at the decoding batch size; predicted
speedup = static forwards / (forwards - rounds + rounds·verify_cost + head calls·head_cost), per prompt,
counting block seeds and commits (head cost 0 for the naive and oracle drafters), next to the measured
speedup; the difference is per-round overhead outside the model (Python, sampling, bookkeeping).
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
)

__all__ = [
    "mode_list", "speculative_modes", "collect_runs", "summarize_modes", "run_all_modes", "cost_model",
    "with_cost_model", "to_markdown", "main",
]  # fmt: skip


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
        # direct steps 1/2 (the paper's direct table) and every lookahead K (its lookahead table)
        modes += [("direct", Direct(s, head=head)) for s in sorted({1, 2, *d.lookahead_k})]
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
def cost_model(model, head, batch: int, block: int, Ks, context_blocks: int = 4, repeats: int = 5) -> dict:
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
    t1 = _timed(lambda: model.forward_block(ids, pos, cache), dev, repeats)
    res = {"t_forward_s": t1, "verify_cost": {}}
    for K in Ks:
        cand = ids[:, None].expand(batch, K, block).contiguous()
        res["verify_cost"][K] = _timed(lambda c=cand: model.forward_candidates(c, pos, cache), dev, repeats) / t1
    res["head_cost"] = float("nan")
    if head is not None:
        hcache = head.new_cache(batch, C)
        head.commit(out.hidden, ctx, cpos, model.embed_tokens, hcache, key_valid=kv, block_size=block)
        h = model.forward_block(ids, pos, cache).hidden
        step = lambda: model.lm_head(head.step(h, ids, pos, model.embed_tokens, hcache))  # noqa: E731
        res["head_cost"] = _timed(step, dev, repeats) / t1
    return res


def collect_runs(profile, backbone, head, n_prompts: int | None = None, tasks=None, modes=None,
                 batch_size: int | None = None, max_new_tokens: int | None = None,
                 progress: bool = False) -> pd.DataFrame:  # fmt: skip
    """The runs frame: one row per (prompt, mode) of every mode in `modes` (default mode_list), through
    evaluate.run_mode on the same problems. Adds family, drafter, threshold, rule, k, steps and
    ``identical`` (output token-for-token equal to static(1)'s on that prompt)."""
    from mrp_repro import evaluate
    from mrp_repro.paper import model_for_profile

    d = profile.decoding
    bs, max_new = batch_size or d.batch_size, max_new_tokens or d.max_new_tokens
    modes = modes if modes is not None else mode_list(profile, head)
    frames = []
    for task in tasks or profile.evaluation.benchmarks:
        problems = evaluate.eval_problems(profile, task, n_prompts)
        ref = None
        for family, pol in modes:
            df = evaluate.run_mode(backbone, problems, pol, bs, max_new, progress=progress)
            if family == "static" and pol.name == evaluate.STATIC_MODE:
                ref = df["text"].to_numpy()
            df.insert(0, "model", model_for_profile(profile))
            df["family"] = family
            df["drafter"] = getattr(pol, "drafter", None) if family == "speculative" else None
            df["threshold"] = getattr(pol, "threshold", getattr(pol, "tau", np.nan))
            df["rule"] = getattr(pol, "rule", None) if family == "remask" else None
            df["k"] = getattr(pol, "K", getattr(pol, "k", np.nan)) if family in ("speculative", "naive_lookahead") \
                else np.nan  # fmt: skip
            df["steps"] = getattr(pol, "steps", np.nan) if family == "direct" else np.nan
            df["identical"] = (df["text"].to_numpy() == ref) if ref is not None else np.nan
            frames.append(df)
            if progress:
                print(f"[bench_modes] {task} {pol.name}: acc {100 * df['correct'].mean():.1f} "
                      f"tpf {df['tokens'].sum() / max(df['denoise_forwards'].sum(), 1):.2f}", flush=True)  # fmt: skip
    return pd.concat(frames, ignore_index=True)


def summarize_modes(runs: pd.DataFrame, n_boot: int = 1000, ci: float = 0.95) -> pd.DataFrame:
    """One row per (task, mode) of a runs frame; see the module docstring for the columns."""
    rows = []
    for (task, mode), g in runs.groupby(["task", "mode"], sort=False):
        correct = g["correct"].to_numpy(float)
        lo, hi = _bootstrap(correct, n_boot, ci)
        acc_len = [int(j) for a in g["accept_lengths"].fillna("") for j in str(a).split()]
        wall = g["wall_s"].sum()
        r0 = g.iloc[0]
        rows.append(dict(
            task=task, family=r0["family"], mode=mode, n=len(g),
            accuracy=100 * correct.mean(), ci_lo=100 * lo, ci_hi=100 * hi,
            backbone_forwards=(g["denoise_forwards"] + g["commit_forwards"]).mean(),
            denoise_forwards=g["denoise_forwards"].mean(), mrp_forwards=g["mrp_forwards"].mean(),
            rounds=g["rounds"].mean() if "rounds" in g else float("nan"),
            tpf=g["tokens"].sum() / max(g["denoise_forwards"].sum(), 1),
            revoked=g["revoked"].mean(), mean_accept=float(np.mean(acc_len)) if acc_len else float("nan"),
            wall_s=wall, tokens_per_s=g["tokens"].sum() / wall if wall > 0 else float("nan"),
            lossless=bool(g["identical"].astype(bool).all()) if g["identical"].notna().all() else None,
            K=r0["k"] if r0["family"] == "speculative" else None, drafter=r0["drafter"],
        ))  # fmt: skip
    df = pd.DataFrame(rows)
    static_tps = df[df["mode"] == "static(1)"].set_index("task")["tokens_per_s"]
    df["speedup"] = df["tokens_per_s"] / df["task"].map(static_tps)
    oracle = df[df["drafter"] == "oracle"].set_index(["task", "K"])["tpf"]
    df["tpf_share_of_oracle"] = [
        r.tpf / oracle.get((r.task, r.K), float("nan")) if r.family == "speculative" else float("nan")
        for r in df.itertuples()
    ]
    return df


def speculative_modes(profile, head) -> list[tuple[str, object]]:
    """static(1) and every speculative (K, drafter) of mode_list: the lossless family."""
    return [(f, p) for f, p in mode_list(profile, head) if f in ("static", "speculative")]


def with_cost_model(df: pd.DataFrame, cm: dict) -> pd.DataFrame:
    """Add verify_cost, head_cost and predicted_speedup (speculative rows) from cost_model()."""
    df = df.copy()
    df["verify_cost"] = [cm["verify_cost"].get(k, float("nan")) if k == k and k is not None else float("nan")
                         for k in df["K"]]  # fmt: skip
    df["head_cost"] = [cm["head_cost"] if dr == "mrp" else (0.0 if dr in ("naive", "oracle") else float("nan"))
                       for dr in df["drafter"]]  # fmt: skip
    # Predicted time per prompt, in forwards: every forward costs 1 except a verify (verify_cost) and a head
    # call (head_cost); block seeds and commits included. Static's time is its forward count.
    static_t = df[df["mode"] == "static(1)"].set_index("task")["backbone_forwards"]
    spec_t = (
        (df["backbone_forwards"] - df["rounds"])
        + df["rounds"] * df["verify_cost"]
        + df["mrp_forwards"] * df["head_cost"]
    )
    df["predicted_speedup"] = [
        static_t.get(r.task, float("nan")) / t if r.family == "speculative" else float("nan")
        for r, t in zip(df.itertuples(), spec_t, strict=True)
    ]
    df.attrs["cost_model"] = cm
    return df


def run_all_modes(profile, backbone, head, tasks=None, n_prompts: int | None = None, batch_size: int | None = None,
                  max_new_tokens: int | None = None, modes=None, progress: bool = True) -> pd.DataFrame:  # fmt: skip
    """Every mode on the same prompts, summarised per (task, mode), with the speculative cost model."""
    modes = modes if modes is not None else mode_list(profile, head)
    runs = collect_runs(profile, backbone, head, n_prompts, tasks, modes, batch_size, max_new_tokens, progress)
    ev = profile.evaluation
    df = summarize_modes(runs, ev.bootstrap_samples, ev.ci)
    Ks = sorted({p.K for _, p in modes if isinstance(p, Speculative)})
    if Ks:
        bs = min(batch_size or profile.decoding.batch_size, int(df["n"].max()))
        df = with_cost_model(df, cost_model(backbone.model, head, bs, backbone.block_size, Ks))
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
                "predicted_speedup = static forwards / "
                "(forwards - rounds + rounds·verify + head calls·head).\n")  # fmt: skip
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
    df = run_all_modes(profile, bb, head, a.tasks, a.n_prompts, batch_size=a.batch_size)
    out = Path(a.out) if a.out else figures_dir(profile)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "modes.csv", index=False)
    (out / "modes.md").write_text(to_markdown(df, df.attrs.get("cost_model")))
    print(f"wrote {out / 'modes.csv'} and {out / 'modes.md'}")


if __name__ == "__main__":
    main()
