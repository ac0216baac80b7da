"""The speculative cost model: measured wall-time ratios of a verify and a head step to one backbone forward.

    from mrp_repro.measure.cost import run_cost_model, cost_model, with_cost_model
    cm = run_cost_model(profile, backbone, head, batch=1)   # the run's measurement of record (stored, reused)
    cm = cost_model(backbone.model, head, batch=32, block=8, Ks=[3, 5])   # {t_forward_s, verify_cost, head_cost}
    summary = with_cost_model(stats.summarize(runs), cm)                  # + verify_cost, head_cost, predicted_speedup

One cost figure per quantity and run: run_cost_model measures verify_cost and head_cost once per (profile,
backbone and head weights, batch size), stores them under the run's results directory (cost_model-b<batch>.json)
and returns the stored values on every later call, so 05's drafters table, report.speed and report.bench quote the
same numbers; cost_note says under each table which measurement it is. Other numbers that look alike are other
quantities, named so: report.shapes times random weights of candidate shapes (before training), report.speed's
head breakdown times the head step *with* the draft pick (step_forwards), and stages.train_head records a
training-time head_cost_ratio in the head's metrics.json (a provenance record, quoted by no table).

verify_cost[K] = one verify of K candidates by the run's verify path (decoding.verify, model.VERIFY_PATHS: "exact"
is "fold" on CPU, "checked" elsewhere, i.e. the K candidates folded into the batch of ONE backbone call wherever
that call is bitwise K block forwards, else K calls) / one forward; verify_passes[K] = the backbone calls that
verify makes, counted (1 for fold, checked-and-bitwise and packed; K for loop); head_cost = one head step (+
lm_head) / one forward; all measured at the decoding batch size. predicted speedup = static forwards / (forwards -
rounds + rounds * verify_cost + head calls * head_cost), per prompt, counting block seeds and commits (head cost 0
for the naive and oracle drafters); beside the measured speedup, the difference is per-round overhead outside the
model (Python, sampling, bookkeeping). stages.train_head records head_cost_ratio in the head's metrics.json.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd
import torch

from mrp_repro.model import resolve_verify

__all__ = ["weighted_denoise_forwards", "row_cost", "cost_model", "run_cost_model", "head_cost_ratio",
           "with_cost_model", "cost_note", "COST_REPEATS", "COST_CONTEXT_BLOCKS", "verify_passes"]  # fmt: skip


def weighted_denoise_forwards(runs: pd.DataFrame, cost: float) -> pd.Series:
    """Denoising forwards plus head calls charged at `cost` forwards each (0 where the run has no cost model)."""
    c = 0.0 if math.isnan(cost) else cost
    return runs["denoise_forwards"].astype(float) + c * runs["mrp_forwards"].astype(float)


def row_cost(cm: dict) -> tuple[float, int | None]:
    """(row_cost, K): one verify block-row beyond the first, in backbone forwards, from a cost model's verify_cost at
    its largest K >= 2: (verify_cost[K] - 1) / (K - 1), at least 0; (1.0, None) where it has none (every extra row a
    forward). What report.peers charges a wide forward and the peer claims read (cost_model's row_cost)."""
    Ks = [int(k) for k in cm.get("verify_cost", {}) if int(k) >= 2]
    if not Ks:
        return 1.0, None
    K = max(Ks)
    v = cm["verify_cost"].get(K, cm["verify_cost"].get(str(K)))
    return max(0.0, (float(v) - 1) / (K - 1)), K


#: the run's cost model: interleaved repeats (medians) and context blocks in the caches (run_cost_model)
COST_REPEATS = 10
COST_CONTEXT_BLOCKS = 4


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


def verify_passes(model, fn) -> int:
    """The backbone calls (SDARModel.forward, counted by a hook) that fn() makes."""
    n = [0]
    hook = model.register_forward_pre_hook(lambda *_: n.__setitem__(0, n[0] + 1))
    try:
        fn()
    finally:
        hook.remove()
    return n[0]


@torch.no_grad()
def cost_model(model, head, batch: int, block: int, Ks, context_blocks: int = 4, repeats: int = 5,
               verify: str = "exact") -> dict:  # fmt: skip
    """Measured wall-time ratios to one forward_block at `batch` rows: verify_cost[K] (by the `verify` path),
    head_cost (each the median over `repeats` rounds that time the forward, every verify and the head step in
    turn), and verify_passes[K], the backbone calls one verify makes (counted after the warm-up, which runs
    "checked"'s one-time check)."""
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
        fns[K] = lambda c=cand: model.forward_candidates(c, pos, cache, verify=verify)
    if head is not None:
        hcache = head.new_cache(batch, C)
        head.commit(out.hidden, ctx, cpos, model.embed_tokens, hcache, key_valid=kv, block_size=block)
        h = model.forward_block(ids, pos, cache).hidden
        fns["head"] = lambda: model.lm_head(head.step(h, ids, pos, model.embed_tokens, hcache))
    t = _interleaved(fns, dev, repeats)
    passes = {K: verify_passes(model, fns[K]) for K in Ks}
    return {"t_forward_s": t["forward"][0], "verify_cost": {K: t[K][1] for K in Ks}, "verify_passes": passes,
            "verify": resolve_verify(verify, dev),
            "head_cost": t["head"][1] if head is not None else math.nan, "batch": batch, "repeats": repeats,
            "context_blocks": context_blocks}  # fmt: skip


def run_cost_model(profile, backbone, head, batch: int = 1, Ks=None) -> dict:
    """The run's cost model at `batch` rows (Ks default decoding.speculative_k): measured once with cost_model
    (COST_REPEATS, COST_CONTEXT_BLOCKS) and stored as runs/<profile>/cost-<weights key>/cost_model-b<batch>.json
    with the backbone's and head's weight fingerprints; later calls on the same weights return the stored numbers.
    A K missing from the stored file, or other weights, measures again. The file carries the commit that measured it
    (runtime.stamp_computed) and every call notes it as read (runtime.note_read), so a table charged at its head_cost
    names that measurement in its provenance, as it names a reused grid."""
    import hashlib
    import json

    from mrp_repro.runtime import artifact_dir, note_read, stamp_computed, write_json_atomic
    from mrp_repro.trajectories import model_fingerprint

    Ks = sorted({int(k) for k in (Ks if Ks is not None else profile.decoding.speculative_k)})
    verify = getattr(profile.decoding, "verify", "exact")
    key = {"backbone": model_fingerprint(backbone.model), "head": model_fingerprint(head) if head is not None else None}
    if verify != "exact":  # the default keeps the stored files of runs before decoding.verify existed
        key["verify"] = verify
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    path = artifact_dir(profile, "cost", digest) / f"cost_model-b{batch}.json"
    if path.exists():
        rec = json.loads(path.read_text())
        if rec.get("key") == key and set(Ks) <= {int(k) for k in rec["verify_cost"]}:
            rec["verify_cost"] = {int(k): v for k, v in rec["verify_cost"].items() if int(k) in Ks}
            if "verify_passes" in rec:
                rec["verify_passes"] = {int(k): v for k, v in rec["verify_passes"].items() if int(k) in Ks}
            rec["source"] = str(path)
            note_read(path)
            return rec
    cm = cost_model(backbone.model, head, batch, backbone.block_size, Ks, COST_CONTEXT_BLOCKS, COST_REPEATS, verify)
    write_json_atomic(path, {**cm, "verify_cost": {str(k): v for k, v in cm["verify_cost"].items()},
                             "verify_passes": {str(k): v for k, v in cm["verify_passes"].items()}, "key": key})
    stamp_computed(path)
    note_read(path)
    return {**cm, "key": key, "source": str(path)}


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
    """One line under a table: which measurement (batch, repeats, the stored file), the measured ratios and the
    predicted-speedup formula."""
    vp = cm.get("verify_passes", {})
    vc = ", ".join(f"K={k}: {v:.2f}" + (f" ({vp[k]} backbone call{'s' * (vp[k] != 1)})" if k in vp else "")
                   for k, v in cm["verify_cost"].items())  # fmt: skip
    where = f"the run's cost model ({cm['source'].rsplit('/', 1)[-1]})" if cm.get("source") else "Cost model"
    how = (f"batch {cm['batch']}, {cm['context_blocks']} context blocks of random token ids (no prompts), median of "
           f"{cm['repeats']} interleaved repeats; " if "batch" in cm else "")  # fmt: skip
    return (f"{where[0].upper() + where[1:]}: {how}ratios to one forward of {cm['t_forward_s'] * 1e3:.2f} ms: verify "
            f"{vc}; head step {cm['head_cost']:.2f} (lm_head included, draft pick excluded). predicted_speedup = "
            "static forwards / (forwards - rounds + rounds·verify + head calls·head).")  # fmt: skip


def head_cost_ratio(model, head, batch: int, block: int, context_blocks: int = 4, repeats: int = 10) -> float:
    """Measured wall time of one head call (lm_head included) / one backbone forward_block (medians of
    `repeats`), both on `batch` rows of one block with `context_blocks` blocks in their caches."""
    return cost_model(model, head, batch, block, Ks=(), context_blocks=context_blocks, repeats=repeats)["head_cost"]
