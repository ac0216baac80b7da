"""Wall-clock speed of speculative decoding against static, on a profile's trained backbone and head (issue 14).

    OMP_NUM_THREADS=1 .venv/bin/python -m mrp_repro.report.speed --profile tiny --out figures/tiny   # 64 per task
    OMP_NUM_THREADS=1 .venv/bin/python -m mrp_repro.report.speed --profile smoke --n 16 --repeats 3 --compile
    OMP_NUM_THREADS=1 .venv/bin/python -m mrp_repro.report.speed --profile tiny --out figures/tiny \
        --name speed_block16 --set block_size=16,backbone_training.seq_len=80,decoding.max_new_tokens=48  # BLOCK_16
    from mrp_repro.report.speed import speed_table, head_breakdown

Per task: one prompt at a time (and --batch rows at a time), static(1) and speculative(K, mrp) for each K, each
with the upstream engine (every commit its own forward) and with fuse_commit=True, interleaved in one process,
median wall time of --repeats passes (trace off). Columns (defined in measure/schema.py TABLE_COLUMNS): benchmark,
batch_size, engine, setting, wall_s, speedup (static of the same engine / this), speedup_clock [lo, hi] (its CI with
the clock's noise in it: the batches resampled for the prompts, the passes for the clock, measure.stats.clock_ci) and
clock_gate (report.wallclock.repeatable on the passes: passed, failed: repeatable, unchecked with one pass, reference
for static), predicted_speedup (the cost
model, measure/cost.py, at the same batch: static forwards / (forwards - rounds + rounds * verify_cost + head calls
* head_cost)), ceiling_speedup (the same costs at the oracle's TPF: report.shapes), tpf and tpf_share_of_oracle
(speculative(K, oracle) is the ceiling), lossless (tokens identical to static on every prompt), and a breakdown
of one instrumented pass: seconds in block forwards, verifies, commits, head steps, head commits, and outside model
calls. targets_table checks the batch-1 rows against issue 14's TARGETS; speed.md holds the three
tables (speed, targets, the head step's parts).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import pandas as pd
import torch

from mrp_repro.config import DEFAULT_PROFILE
from mrp_repro.decoding import Speculative, Static

__all__ = ["TARGETS", "WALL_TARGETS", "speed_table", "clock_columns", "targets_table", "head_breakdown", "main"]

# Model entry points timed by the instrumented pass, by kind.
BACKBONE_CALLS = {"forward_block": "block", "forward_candidates": "verify", "commit_block": "commit",
                  "prefill": "commit", "commit_and_forward": "fused"}  # fmt: skip
HEAD_CALLS = {"step": "head_step", "commit": "head_commit"}


def _load(profile):
    """The profile's trained backbone and head (mrp_repro.stages; trains them if missing)."""
    from mrp_repro import stages

    bb = stages.backbone(profile)
    return bb, stages.head(profile, bb)


class _Timer:
    """Wraps model/head methods (instance attributes, undone by `close`) and sums their wall time by kind."""

    def __init__(self, model, head):
        self.t = {}
        self.undo = []
        for obj, calls in ((model, BACKBONE_CALLS), (head, HEAD_CALLS)):
            for name, kind in calls.items():
                self._wrap(obj, name, kind)

    def _wrap(self, obj, name, kind):
        fn = getattr(obj, name)

        def timed(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.t[kind] = self.t.get(kind, 0.0) + time.perf_counter() - t0

        setattr(obj, name, timed)
        self.undo.append((obj, name))

    def close(self):
        for obj, name in self.undo:
            delattr(obj, name)


def _run(bb, prompts, policy, max_new, batch, fuse, seconds: list | None = None):
    """Every batch of `prompts` decoded in turn; `seconds`, when given, gets each batch's wall seconds."""
    toks, stats = [], []
    for i in range(0, len(prompts), batch):
        t0 = time.perf_counter()
        r = bb.generate(prompts[i : i + batch], policy, max_new, fuse_commit=fuse, trace=False)
        if seconds is not None:
            seconds.append(time.perf_counter() - t0)
        toks += r.tokens
        stats += r.stats
    return toks, stats


def _batch_tokens(stats, batch: int) -> list[int]:
    return [sum(s.tokens for s in stats[i : i + batch]) for i in range(0, len(stats), batch)]


def clock_columns(static_batches: list, batches: list, static_tokens: list, tokens: list, n_boot: int = 1000,
                  ci: float = 0.95, seed: int = 0) -> dict:  # fmt: skip
    """speedup_clock [lo, hi] and clock_gate of one setting against static from interleaved passes:
    `static_batches` / `batches`, one list of per-batch wall seconds per pass (the same batches in each pass), the
    tokens of each batch. The point is the median pass's total time ratio (the table's speedup); the prompt CI
    resamples the batches (their median seconds over the passes), the clock the passes' speedups (stats.clock_ci);
    the gate is report.wallclock.repeatable on the passes (no gate with fewer than 2 passes)."""
    import numpy as np

    from mrp_repro.measure import stats
    from mrp_repro.report.wallclock import repeatable

    st, se = np.asarray(static_batches, float), np.asarray(batches, float)  # [passes, batches]
    point = float(np.median(st.sum(1)) / np.median(se.sum(1)))
    _, lo, hi = stats.ratio_ci(tokens, np.median(se, 0), static_tokens, np.median(st, 0), n_boot, ci, seed)
    tok = float(sum(tokens)) / max(float(sum(static_tokens)), 1.0)
    per_pass = st.sum(1) / se.sum(1)  # the table's speedup is a time ratio (the same tokens: lossless settings)
    scale = point / (tok * float(np.median(st, 0).sum() / np.median(se, 0).sum()))  # the CI about the point
    lo, hi = lo * scale, hi * scale
    c_lo, c_hi = stats.clock_ci(point, lo, hi, per_pass, n_boot, ci, seed)
    if st.shape[0] < 2:
        gate = "unchecked: one pass (--repeats 1)"
    else:
        rep = repeatable(point, lo, hi, per_pass, n_boot, ci, seed)
        gate = "passed" if rep["passed"] else "failed: repeatable"
    return {"speedup_clock": point, "speedup_clock_lo": c_lo, "speedup_clock_hi": c_hi, "clock_gate": gate}


def _sum(stats, name):
    return sum(getattr(s, name) for s in stats)


@torch.no_grad()
def speed_table(bb, head, prompts: dict, Ks=(3, 5), batches=(1, 32), repeats: int = 3, max_new: int | None = None,
                profile=None):  # fmt: skip
    """prompts: {benchmark: [token ids]} -> one row per (benchmark, batch_size, engine, setting). With `profile`,
    the cost columns are the run's stored cost model (measure.cost.run_cost_model, the numbers 05's drafters
    table quotes); without, measured here."""
    from mrp_repro.measure.cost import cost_model, run_cost_model
    from mrp_repro.report.shapes import ceiling_speedup

    max_new = max_new or 24
    verify = profile.decoding.verify if profile is not None else "exact"  # the profile's verify path (decoding.verify)
    rows = []
    for batch in batches:
        cm = (run_cost_model(profile, bb, head, batch, Ks) if profile is not None
              else cost_model(bb.model, head, batch=batch, block=bb.block_size, Ks=list(Ks)))  # fmt: skip
        for task, ps in prompts.items():
            settings = [("static", Static(1))] + [(f"spec{K}", Speculative(K, "mrp", head=head, verify=verify))
                                                   for K in Ks]  # fmt: skip
            engines = (("upstream", False), ("fused", True))
            times, batch_s = {}, {}
            for _ in range(repeats):  # interleaved: drift hits every setting alike
                for eng, fuse in engines:
                    for name, pol in settings:
                        per_batch: list = []
                        t0 = time.perf_counter()
                        _run(bb, ps, pol, max_new, batch, fuse, per_batch)
                        times.setdefault((eng, name), []).append(time.perf_counter() - t0)
                        batch_s.setdefault((eng, name), []).append(per_batch)
            for eng, fuse in engines:
                want, st0 = _run(bb, ps, Static(1), max_new, batch, fuse)
                fw = "fused_backbone_forwards" if fuse else "backbone_forwards"
                static_fw = _sum(st0, fw)
                t_static = float(pd.Series(times[(eng, "static")]).median())
                for name, pol in settings:
                    timer = _Timer(bb.model, head)
                    t0 = time.perf_counter()
                    try:
                        toks, st = _run(bb, ps, pol, max_new, batch, fuse)
                    finally:
                        timer.close()
                    total = time.perf_counter() - t0
                    wall = float(pd.Series(times[(eng, name)]).median())
                    row = dict(benchmark=task, batch_size=batch, engine=eng, setting=pol.name, wall_s=wall,
                               speedup=t_static / wall, lossless=toks == want, tokens=_sum(st, "tokens"),
                               denoise_forwards=_sum(st, "denoise_forwards"), forwards=_sum(st, fw),
                               tpf=_sum(st, "tokens") / max(_sum(st, "denoise_forwards"), 1),
                               rounds=_sum(st, "rounds"), mrp_forwards=_sum(st, "mrp_forwards"),
                               head_cost=cm["head_cost"], t_forward_ms=1e3 * cm["t_forward_s"])  # fmt: skip
                    if name == "static":
                        row.update(speedup_clock=1.0, speedup_clock_lo=1.0, speedup_clock_hi=1.0,
                                   clock_gate="reference")  # fmt: skip
                    else:
                        row.update(clock_columns(batch_s[(eng, "static")], batch_s[(eng, name)],
                                                 _batch_tokens(st0, batch), _batch_tokens(st, batch)))  # fmt: skip
                    # byte-weighted forwards (measure/schema.py): each head call charged its measured cost
                    head_fw = row["mrp_forwards"] * cm["head_cost"]
                    row["weighted_tpf"] = row["tokens"] / max(row["denoise_forwards"] + head_fw, 1e-9)
                    row["weighted_forwards"] = (row["forwards"] + head_fw) / len(ps)
                    if isinstance(pol, Speculative):
                        vc = cm["verify_cost"][pol.K]
                        pred_t = (
                            row["forwards"] - row["rounds"] + row["rounds"] * vc + row["mrp_forwards"] * cm["head_cost"]
                        )
                        row["predicted_speedup"] = static_fw / pred_t
                        row["ceiling_speedup"] = ceiling_speedup(bb.block_size, pol.K, vc, cm["head_cost"])
                        _, so = _run(bb, ps, Speculative(pol.K, "oracle", verify=verify), max_new, batch, fuse)
                        oracle_tpf = _sum(so, "tokens") / max(_sum(so, "denoise_forwards"), 1)
                        row["tpf_share_of_oracle"] = row["tpf"] / oracle_tpf
                        row["verify_cost"] = vc
                    else:
                        row["predicted_speedup"] = 1.0
                    for kind in ("block", "fused", "verify", "commit", "head_step", "head_commit"):
                        row[f"s_{kind}"] = timer.t.get(kind, 0.0)
                    row["s_outside"] = total - sum(timer.t.values())
                    rows.append(row)
    return pd.DataFrame(rows)


#: the targets whose value is a wall-clock number: their row carries the speed row's clock_gate
WALL_TARGETS = ("speculative K=3 >= 1.4x static", "measured within 10% of the cost model")
#: issue 14's targets, one prompt at a time: (target, K, the row's value, passes)
TARGETS = (
    ("speculative K=3 >= 1.4x static", 3, lambda r: r.speedup, lambda v: v >= 1.4),
    ("measured within 10% of the cost model", 3, lambda r: r.speedup / r.predicted_speedup,
     lambda v: abs(v - 1) <= 0.1),
    ("TPF >= 95% of the oracle at K=3", 3, lambda r: r.tpf_share_of_oracle, lambda v: v >= 0.95),
    ("TPF >= 90% of the oracle at K=5", 5, lambda r: r.tpf_share_of_oracle, lambda v: v >= 0.90),
    ("head step <= 0.12 forwards", 3, lambda r: r.head_cost, lambda v: v <= 0.12),
    ("lossless on every prompt", 3, lambda r: float(r.lossless), lambda v: v == 1.0),
)


def targets_table(df: pd.DataFrame) -> pd.DataFrame:
    """speed_table rows at batch 1 -> one row per (benchmark, engine, target): value, met, and `ceiling_speedup` (the
    speedup at the oracle's TPF with the same verify and head costs, report.shapes.ceiling_speedup)."""
    need = ["benchmark", "batch_size", "engine", "setting", "speedup", "predicted_speedup", "tpf_share_of_oracle",
            "head_cost", "lossless", "ceiling_speedup"]  # fmt: skip
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise KeyError(f"targets_table needs speed_table column(s) {', '.join(missing)}")
    one = df[df["batch_size"] == 1]
    if one.empty:
        raise ValueError("targets_table: no batch-1 rows (run speed_table with 1 in batches)")
    rows = []
    for (bench, engine), g in one.groupby(["benchmark", "engine"], sort=False):
        by_setting = {p: r for p, r in zip(g["setting"], g.itertuples(), strict=True)}
        for target, K, value, passes in TARGETS:
            r = by_setting.get(f"speculative({K},mrp)")
            if r is None:
                raise KeyError(f"targets_table: no speculative({K},mrp) row for {bench}/{engine}")
            v = float(value(r))
            gate = getattr(r, "clock_gate", "unchecked: no clock_gate column") if target in WALL_TARGETS else ""
            rows.append(dict(benchmark=bench, engine=engine, target=target, value=v, met=bool(passes(v)),
                             ceiling_speedup=float(r.ceiling_speedup), clock_gate=gate))  # fmt: skip
    return pd.DataFrame(rows)


@torch.no_grad()
def head_breakdown(model, head, block: int, batch: int = 1, context_blocks: int = 4, repeats: int = 50) -> dict:
    """Milliseconds of one drafting head step at `batch` rows, by part, and its share of one forward_block:
    embed, the input projection (enorm, hnorm, concat, eh_proj), rope + mask, the decoder layer(s), the final
    norm, lm_head over the block, and the pick (draft_pick: the backbone's own rule, static_pick)."""
    from mrp_repro.decoding.mrp_modes import draft_pick
    from mrp_repro.measure.cost import _interleaved

    dev = model.lm_head.weight.device
    V, C = model.config.vocab_size, context_blocks * block
    g = torch.Generator().manual_seed(0)
    ctx = torch.randint(3, V, (batch, C), generator=g).to(dev)
    ids = torch.randint(3, V, (batch, block), generator=g).to(dev)
    cpos = torch.arange(C, device=dev)[None].expand(batch, -1)
    pos = (C + torch.arange(block, device=dev))[None].expand(batch, -1)
    kv = torch.ones(batch, C, dtype=torch.bool, device=dev)
    bkv = torch.ones(batch, block, dtype=torch.bool, device=dev)
    cache = model.new_cache(batch, C)
    out = model.prefill(ctx, cpos, kv, cache, block)
    hcache = head.new_cache(batch, C)
    head.commit(out.hidden, ctx, cpos, model.embed_tokens, hcache, key_valid=kv, block_size=block)
    h = model.forward_block(ids, pos, cache).hidden
    masked = torch.rand(batch, block, generator=g).to(dev) < 0.5
    from mrp_repro.model import rope_cos_sin

    e = model.embed_tokens(ids)
    x = head._inputs(h, ids, model.embed_tokens)
    cos, sin = rope_cos_sin(pos, head.config.head_dim, head.config.rope_theta, x.dtype)
    own = bkv[:, None, None, :].expand(batch, 1, block, block)
    mask = torch.cat([head._cache_mask(hcache, batch, block, dev), own], -1)
    y = head._run(x, pos, mask, hcache, write=False)
    hc = head.norm(y)
    logits = model.lm_head(hc)
    parts = {
        "forward_block": lambda: model.forward_block(ids, pos, cache),
        "step_total": lambda: draft_pick(
            model.lm_head(head.step(h, ids, pos, model.embed_tokens, hcache, bkv)), masked, 1
        ),
        "embed": lambda: model.embed_tokens(ids),
        "eh_proj": lambda: head.eh_proj(torch.cat([head.enorm(e), head.hnorm(h)], -1)),
        "rope_mask": lambda: (
            rope_cos_sin(pos, head.config.head_dim, head.config.rope_theta, x.dtype),
            torch.cat([head._cache_mask(hcache, batch, block, dev), own | torch.eye(block, dtype=torch.bool)], -1),
        ),
        "layers": lambda: [layer(x, cos, sin, mask, hcache.past(i)) for i, layer in enumerate(head.layers)],
        "norm": lambda: head.norm(y),
        "lm_head": lambda: model.lm_head(hc),
        "pick": lambda: draft_pick(logits.clone(), masked, 1),
    }
    t = _interleaved(parts, dev, repeats)  # forward_block first: the ratios are to it
    return {"forward_ms": 1e3 * t.pop("forward_block")[0], **{f"{k}_ms": 1e3 * v[0] for k, v in t.items()},
            "step_forwards": t["step_total"][1]}  # fmt: skip


def main(argv=None) -> None:
    from mrp_repro.backbone import encode_prompts
    from mrp_repro.config import load_profile
    from mrp_repro.measure.runs import eval_problems

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default=DEFAULT_PROFILE)
    ap.add_argument("--set", default="", help="profile overrides key=value,... (trains that backbone if missing)")
    ap.add_argument("--name", default="speed", help="file stem under --out")
    ap.add_argument("--n", type=int, default=64, help="prompts per task")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--Ks", type=int, nargs="+", default=[3, 5])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None, help="write speed.csv and speed.md here")
    ap.add_argument("--compile", action="store_true", help="torch.compile backbone and head (model.compile_model)")
    a = ap.parse_args(argv)
    if a.repeats < 1 or a.n < 1:
        sys.exit("speed: --repeats and --n must be >= 1")
    torch.set_num_threads(a.threads)
    from mrp_repro.report.drafters import parse_variant

    P = load_profile(a.profile, parse_variant(a.set))
    bb, head = _load(P)
    if a.compile:
        from mrp_repro.model import compile_model

        compile_model(bb.model, head)  # the first pass of each setting compiles; medians take the later ones
    tasks = list(P.data.tasks)
    prompts = {t: encode_prompts(bb, eval_problems(P, t, a.n))[: a.n] for t in tasks}
    max_new = P.decoding.max_new_tokens
    # the run's stored cost model (one figure per quantity); a compiled engine is timed here instead
    df = speed_table(bb, head, prompts, a.Ks, a.batches, a.repeats, max_new, profile=None if a.compile else P)
    hb = head_breakdown(bb.model, head, bb.block_size)
    cols = ["benchmark", "batch_size", "engine", "setting", "wall_s", "speedup", "speedup_clock", "speedup_clock_lo",
            "speedup_clock_hi", "clock_gate", "predicted_speedup", "ceiling_speedup",
            "tpf", "weighted_tpf", "weighted_forwards", "tpf_share_of_oracle", "lossless", "forwards", "verify_cost",
            "head_cost", "s_block", "s_fused", "s_verify", "s_commit", "s_head_step", "s_head_commit",
            "s_outside"]  # fmt: skip
    table = df[[c for c in cols if c in df]]
    from mrp_repro.report.tables import format_table, markdown

    parts = {"speed": table}
    if 1 in a.batches:
        parts["targets"] = targets_table(df)
    parts["head step at batch 1 (ms; step_forwards: step_total / forward)"] = pd.DataFrame([hb])
    text = "\n\n".join(f"## {name}\n\n" + markdown(format_table(t, 3)) for name, t in parts.items())
    print(text)
    if a.out:
        from mrp_repro.measure.schema import require_defined
        from mrp_repro.report.tables import write_csv, write_glossary, write_text

        for name, t in {"csv": df, **parts}.items():  # every column defined, as tables.save_table requires
            require_defined(t.columns, f"{a.name} ({name})")
        a.out.mkdir(parents=True, exist_ok=True)
        write_csv(df, a.out / f"{a.name}.csv")
        note = (
            f"{a.n} prompts per task, median of {a.repeats} interleaved passes, {a.threads} thread(s)"
            f"{'' if a.repeats > 1 else ' (one pass: no clock measured, every clock_gate unchecked)'}"
            f"{', compiled' if a.compile else ''}{'; profile overrides ' + a.set if a.set else ''}. "
            "predicted_speedup: the cost model on this run's counts ("
            + ("measured in this process, compiled" if a.compile else "the run's stored cost model, "
               "measure.cost.run_cost_model, as in speculative_drafters.md")
            + "); ceiling_speedup: the same costs at the oracle's TPF. step_forwards: the head step with lm_head "
            "and the draft pick (draft_pick) over one forward, so above head_cost, which excludes the pick. "
            "speedup_clock [lo, hi]: the speedup's CI with the passes' spread in it (measure.stats.clock_ci); "
            "clock_gate: report.wallclock.repeatable on the passes (COLUMNS.md)."
        )
        write_text(a.out / f"{a.name}.md", text + f"\n{note}\n")
        write_glossary(a.out)
    if not math.isfinite(hb["step_forwards"]):
        sys.exit("speed: head timing failed")


if __name__ == "__main__":
    from mrp_repro.cli import run_cli

    run_cli(main)  # a user error, Ctrl-C or a full disk is one error: line
