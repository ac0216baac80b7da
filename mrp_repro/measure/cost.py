"""The speculative cost model: measured wall-time ratios of a verify and a head step to one backbone forward.

    from mrp_repro.measure.cost import cost_model, with_cost_model
    cm = cost_model(backbone.model, head, batch=32, block=8, Ks=[3, 5])   # {t_forward_s, verify_cost, head_cost}
    summary = with_cost_model(stats.summarize(runs), cm)                  # + verify_cost, head_cost, predicted_speedup

verify_cost[K] = packed K-candidate forward / one forward, head_cost = one head step (+ lm_head) / one
forward, both measured at the decoding batch size. predicted speedup = static forwards / (forwards - rounds +
rounds * verify_cost + head calls * head_cost), per prompt, counting block seeds and commits (head cost 0
for the naive and oracle drafters); beside the measured speedup, the difference is per-round overhead
outside the model (Python, sampling, bookkeeping). stages.train_head records head_cost_ratio in the head's metrics.json.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd
import torch

__all__ = ["cost_model", "head_cost_ratio", "with_cost_model", "cost_note"]


def _sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _interleaved(fns: dict, dev, repeats: int) -> dict:
    """Median seconds of each of `fns`, timed in turn inside every repeat (after one warm-up call each), and the
    median per-repeat ratio of each to the first: a slow stretch of the machine then hits both sides of a ratio."""
    for f in fns.values():
        f()
    ts = {k: [] for k in fns}
    for _ in range(repeats):
        for k, f in fns.items():
            _sync(dev)
            t0 = time.perf_counter()
            f()
            _sync(dev)
            ts[k].append(time.perf_counter() - t0)
    base = np.asarray(ts[next(iter(fns))])
    return {k: (float(np.median(v)), float(np.median(np.asarray(v) / base))) for k, v in ts.items()}


@torch.no_grad()
def cost_model(model, head, batch: int, block: int, Ks, context_blocks: int = 4, repeats: int = 5) -> dict:
    """Measured wall-time ratios to one forward_block at `batch` rows: verify_cost[K], head_cost (each the
    median over `repeats` rounds that time the forward, every verify and the head step in turn)."""
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
    fns = {"forward": lambda: model.forward_block(ids, pos, cache)}
    for K in Ks:
        cand = ids[:, None].expand(batch, K, block).contiguous()
        fns[K] = lambda c=cand: model.forward_candidates(c, pos, cache)
    if head is not None:
        hcache = head.new_cache(batch, C)
        head.commit(out.hidden, ctx, cpos, model.embed_tokens, hcache, key_valid=kv, block_size=block)
        h = model.forward_block(ids, pos, cache).hidden
        fns["head"] = lambda: model.lm_head(head.step(h, ids, pos, model.embed_tokens, hcache))
    t = _interleaved(fns, dev, repeats)
    return {"t_forward_s": t["forward"][0], "verify_cost": {K: t[K][1] for K in Ks},
            "head_cost": t["head"][1] if head is not None else math.nan}  # fmt: skip


def with_cost_model(df: pd.DataFrame, cm: dict) -> pd.DataFrame:
    """A summary (stats.summarize) plus verify_cost, head_cost and predicted_speedup (speculative rows)."""
    need = ["model", "benchmark", "mode", "K", "drafter", "backbone_forwards", "rounds", "mrp_forwards"]
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise KeyError(f"with_cost_model needs summary column(s) {', '.join(missing)} (from stats.summarize)")
    df = df.copy()
    df["verify_cost"] = [cm["verify_cost"].get(int(k), math.nan) if m == "speculative" else math.nan
                         for m, k in zip(df["mode"], df["K"], strict=True)]  # fmt: skip
    df["head_cost"] = [cm["head_cost"] if dr == "mrp" else (0.0 if dr in ("naive", "oracle") else math.nan)
                       for dr in df["drafter"]]  # fmt: skip
    # Predicted time per prompt, in forwards: every forward costs 1 except a verify (verify_cost) and a head
    # call (head_cost); block seeds and commits included. Static's time is its forward count.
    # Our static and speculative only: the verify cost is measured for our verify of K candidates (upstream
    # verifies K + 1 and seeds every block; its rows get NaN).
    ours = df["algorithm"] == "ours" if "algorithm" in df.columns else pd.Series(True, index=df.index)
    static_t = df[(df["mode"] == "static") & ours].set_index(["model", "benchmark"])["backbone_forwards"]
    spec_t = (
        (df["backbone_forwards"] - df["rounds"])
        + df["rounds"] * df["verify_cost"]
        + df["mrp_forwards"] * df["head_cost"]
    )
    df["predicted_speedup"] = [
        static_t.get((r.model, r.benchmark), math.nan) / t if r.mode == "speculative" and o else math.nan
        for r, t, o in zip(df.itertuples(), spec_t, ours, strict=True)
    ]
    df.attrs["cost_model"] = cm
    return df


def cost_note(cm: dict) -> str:
    """One line under a table: the measured ratios and the predicted-speedup formula."""
    vc = ", ".join(f"K={k}: {v:.2f}" for k, v in cm["verify_cost"].items())
    return (f"Cost model (ratios to one forward of {cm['t_forward_s'] * 1e3:.2f} ms): verify {vc}; "
            f"head step {cm['head_cost']:.2f}. predicted_speedup = static forwards / "
            "(forwards - rounds + rounds·verify + head calls·head).")  # fmt: skip


def head_cost_ratio(model, head, batch: int, block: int, context_blocks: int = 4, repeats: int = 10) -> float:
    """Measured wall time of one head call (lm_head included) / one backbone forward_block (medians of
    `repeats`), both on `batch` rows of one block with `context_blocks` blocks in their caches."""
    return cost_model(model, head, batch, block, Ks=(), context_blocks=context_blocks, repeats=repeats)["head_cost"]
