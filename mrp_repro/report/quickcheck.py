"""The quick check: what "reproduced" looks like on a subset, and what the subset costs, before the run ends.

    .venv/bin/python -m mrp_repro.report.quickcheck --profile sdar-4b-released-quick
    .venv/bin/python -m mrp_repro.report.quickcheck --profile sdar-4b-released-quick --forward-ms 9.5  # gpu_check's
    # -> figures/<profile>/quickcheck_expected.{md,csv}, quickcheck_time.{md,csv}; printed too
    .venv/bin/python -m mrp_repro.report.quickcheck --profile sdar-4b-released-quick --write-docs docs/gpu.md

expected(profile): one row per cell the profile's subset measures that the paper reports for its paper model
(profile.paper.model): the paper's value, the tolerance the claims use for it (report/claims.py, by claim id), n
prompts, and this subset's own 95% CI width for an accuracy at the paper's value, 2 * 1.96 * sqrt(p (1 - p) / n)
(the normal approximation of the percentile bootstrap of a mean of n 0/1 outcomes). A gain (remask − dynamic) gets
the width of a difference of two independent such means: an upper bound, since the pairing narrows it.
A cell reads as reproduced when the paper's value lies inside our CI (about ours ± half the width).

wall_time(profile): every decoding grid the notebooks run (report.grids.GRIDS, then report.peers' grid: the settings
it decodes, not those it reads from modes_runs), their settings (measure.runs.settings_for), prompts and batches;
for each setting the backbone calls and head calls the code makes per block at the worst case of one token per
denoising forward (a batch runs until its longest row stops), and a cost per call: the per-call overhead (or gpu_check's
measured batch-1 forward, --forward-ms) + the larger of (weights + KV traffic) / bandwidth and the FLOPs. The KV traffic
is what model.Attention moves: its per-layer torch.cat reads the cache and writes it with the new keys, attention reads
the result (3 passes; a folded verify of M candidates writes and reads M copies). Each input is in ASSUMED with its
source; a (low, high) pair spans the printed range, low with a one-call verify (decoding.verify "exact" where gpu_check
shows fold bitwise), high with loop (one call per candidate: a GPU whose fold is not bitwise). docs/gpu.md's table is
docs_table() (a test).
"""

from __future__ import annotations

import argparse
import math

import pandas as pd

from mrp_repro.config import Profile
from mrp_repro.decoding.mrp_tree import TREE_DRAFTER
from mrp_repro.report import paper

__all__ = ["ASSUMED", "SCENARIOS", "ci_width", "expected", "wall_time", "block_calls", "docs_table", "main"]

Z95 = 1.96

#: every input of wall_time, with where it comes from (none measured on a GPU here); (low, high) pairs span the range
ASSUMED = {
    "weight_gb": (8.8, "SDAR-4B bf16 weights: 4.41B parameters x 2 bytes (README arithmetic from config.json)"),
    "params_b": (4.41, "SDAR-4B parameters incl. untied embed and lm_head (151,936 x 2560 each)"),
    "kv_bytes_per_token": (147456, "SDAR-4B K and V of one token: 2 x 36 layers x 8 KV heads x 128 x 2 bytes"),
    "hbm_tb_s": (4.8, "H200 HBM3e bandwidth, NVIDIA spec sheet (H100 SXM: 3.35)"),
    "bf16_tflops": (989.0, "H200 / H100 SXM dense bf16 peak, NVIDIA spec sheet"),
    "mfu": (0.5, "assumed fraction of the peak a block forward reaches when compute-bound"),
    "overhead_ms": ((6.0, 25.0), "eager PyTorch per backbone call: ~2,300 kernel launches (36 layers x ~65) at 2.6-11 "
                                 "us each; docs/sdar-gpu-reference.md: 10-25 ms"),
    "head_fraction": (0.2, "assumed cost of one MRP head call (3 layers + lm_head) as a fraction of a forward"),
    "prompt_tokens": (200, "assumed chat prompt length (GSM8K / HumanEval with the chat template)"),
    "longest_tokens": ((512, 1024), "assumed longest answer in a batch (GSM8K / HumanEval, SDAR-Chat; a batch runs "
                                    "until its longest row stops; max_new_tokens 4096 bounds the worst case)"),
    "mean_tokens": ((300, 600), "assumed mean answer length (a batch-1 row stops at its own EOS)"),
    "load_min": (3.0, "assumed: load backbone + head from local disk, 08_kernels and 03 adjacent-step logits"),
}  # fmt: skip
#: the two ends of the range: which verify (backbone calls per verify of M candidates) and which end of each pair
SCENARIOS = {"low": ("fold", 0), "high": ("loop", 1)}
#: block_calls' M of a call over the block and its shadow block (WINO's); any M < 0 is not a verify
WIDE = -2
# The tables' columns are defined in measure.schema.TABLE_COLUMNS (the quick check's section), as every table's.


def _a(key: str, end: int = 0) -> float:
    v = ASSUMED[key][0]
    return v[end] if isinstance(v, tuple) else v


def ci_width(p: float, n: int, paired_with: float | None = None) -> float:
    """95% CI width in points of an accuracy p (a fraction) over n prompts; with paired_with, of the difference of
    two independent accuracies (an upper bound for a paired difference)."""
    var = p * (1 - p) + (paired_with * (1 - paired_with) if paired_with is not None else 0.0)
    return 100 * 2 * Z95 * math.sqrt(var / max(n, 1))


def _n(profile: Profile, latency: bool = False) -> int:
    from mrp_repro.report.grids import LATENCY_PROMPTS

    n = profile.evaluation.n_prompts
    if latency:
        return min(LATENCY_PROMPTS, n or LATENCY_PROMPTS)
    return n if n is not None else 0


def expected(profile: Profile) -> pd.DataFrame:
    """The expected value of every cell of the subset the paper reports for profile.paper.model (module doc)."""
    model, benches = profile.paper.model, set(profile.evaluation.benchmarks)
    d, rows = profile.decoding, []
    n, n_lat = _n(profile), _n(profile, latency=True)

    def add(table, bench, setting, metric, value, tol, n_cell, width):
        rows.append(dict(table=table, benchmark=bench, setting=setting, metric=metric, paper=value, tolerance=tol,
                         n=n_cell, ci_width=round(width, 1) if width == width else width))  # fmt: skip

    spec = paper.load("speculative")
    for r in spec[(spec["model"] == model) & spec["benchmark"].isin(benches)].itertuples():
        for K in d.speculative_k:
            add("speculative", r.benchmark, f"speculative({K},mrp)", "accuracy", r.accuracy,
                "= static's accuracy on the same prompts (speculative-accuracy: lossless)", n_lat,
                ci_width(r.accuracy / 100, n_lat))  # fmt: skip
            add("speculative", r.benchmark, f"speculative({K},mrp)", "throughput_speedup", r.throughput_speedup,
                "CI above 1; holds at >= 1.26 = 0.9 x 1.4, the paper's best (speculative-speedup)", n_lat, math.nan)
    rem = paper.load("remasking")
    taus = set(d.thresholds)
    for r in rem[(rem["model"] == model) & rem["benchmark"].isin(benches)].itertuples():
        if not any(abs(r.threshold - t) < 1e-9 for t in taus):
            continue
        p0, p1 = r.baseline_accuracy / 100, r.mrp_remask_accuracy / 100
        add("remasking", r.benchmark, f"dynamic({r.threshold})", "accuracy", r.baseline_accuracy,
            "none (the CI)", n, ci_width(p0, n))  # fmt: skip
        add("remasking", r.benchmark, f"remask({r.threshold},tau)", "accuracy", r.mrp_remask_accuracy,
            "none (the CI)", n, ci_width(p1, n))  # fmt: skip
        tol = ("gain > 0 with a CI above 0 at tau <= 0.5 (remask-recovers); largest gain >= paper - 5 pts "
               "(remask-max-*)") if r.threshold <= 0.5 else "gain(lowest tau) > gain(highest tau) (remask-gain-shrinks)"
        add("remasking", r.benchmark, f"remask({r.threshold},tau) - dynamic", "gain",
            round(r.mrp_remask_accuracy - r.baseline_accuracy, 1), tol, n, ci_width(p0, n, paired_with=p1))
    dt = paper.load("direct")
    for r in dt[(dt["model"] == model) & dt["benchmark"].isin(benches)].itertuples():
        if r.setting == "baseline":
            continue
        add("direct", r.benchmark, r.setting, "accuracy", r.accuracy, "within 10 pts of static (direct-tradeoff)", n,
            ci_width(r.accuracy / 100, n))  # fmt: skip
        add("direct", r.benchmark, r.setting, "throughput_speedup", r.throughput_speedup,
            "> 1 and increasing with steps (direct-tradeoff)", n, math.nan)  # fmt: skip
    la = paper.load("lookahead")
    for r in la[(la["model"] == model) & la["benchmark"].isin(benches)].itertuples():
        if r.lookahead_k not in d.lookahead_k:
            continue
        tol = "MRP > naive at every K >= 2 (mrp-graceful)" if r.method == "mrp" else \
            "at the largest K <= half of K=1 (naive-mtp-collapses)"  # fmt: skip
        add("lookahead", r.benchmark, f"{r.method} K={r.lookahead_k}", "accuracy", r.accuracy, tol, n,
            ci_width(r.accuracy / 100, n))  # fmt: skip
    return pd.DataFrame(rows, columns=["table", "benchmark", "setting", "metric", "paper", "tolerance", "n",
                                       "ci_width"])  # fmt: skip


def _call_ms(q_tokens: int, kv_tokens: float, end: int, forward_ms: float | None) -> float:
    """One backbone call with q_tokens query tokens that moves kv_tokens tokens' K/V: measured batch-1 forward (or
    the overhead plus the weight read) + KV traffic, or the compute when that is larger (ASSUMED)."""
    bw = _a("hbm_tb_s") * 1e12
    weights = _a("weight_gb") * 1e9 / bw * 1e3
    kv = _a("kv_bytes_per_token") * kv_tokens / bw * 1e3
    compute = 2 * _a("params_b") * 1e9 * q_tokens / (_a("bf16_tflops") * 1e12 * _a("mfu")) * 1e3
    if forward_ms is not None:  # measured: overhead and weight read (and batch 1's small compute) included
        return forward_ms + kv + compute
    return _a("overhead_ms", end) + max(weights + kv, compute)


def block_calls(mode: str, pol, L: int, fused: bool) -> tuple[list[tuple[int, int]], int]:
    """What one block costs, as the code decodes it at one token per denoising forward: ([(candidates M, count)],
    head calls). M = 0 is a plain call over the block (a forward or a commit), M >= 1 a verify of M candidates,
    M = WIDE one call over the block and its shadow block (WINO), in either verify path.

    The peers (their policies' algorithm "peer", on our engine): a draft graph (Spiffy, and the SSD / FreeDave
    chain) verifies its K = D candidate states a round as the chain does, with no head call; the MRP draft tree one
    head step fewer a round than the chain at K = D (its runner-up row replaces the last draft); WINO a wide call
    per denoising forward and no head call; S2D2 (mode dynamic) a draft forward and, at its worst (c = 0: every step),
    a verify call of two blocks' rows (the drafted block and its [MASK] rows) per token."""
    algo, K = getattr(pol, "algorithm", "ours"), getattr(pol, "K", 0)
    commit = [] if fused and algo in ("ours", "peer") else [(0, 1)]  # fuse_commit: the next block's first forward
    if mode == "speculative" and algo == "upstream":  # seed, then per round K - 1 head calls and a verify of K + 1
        return [(0, 1), (K + 1, L)] + commit, L * (K - 1)
    if mode == "speculative":  # seed; round with m masked: min(K, m) - 1 head drafts, a verify of min(K, m - 1)
        verifies = [(min(K, m - 1), 1) for m in range(L, 0, -1) if min(K, m - 1) > 0]
        fewer = {"mrp": 1, TREE_DRAFTER: 2}.get(getattr(pol, "drafter", "mrp"))  # head drafts: K - fewer a round
        drafts = 0 if fewer is None else sum(max(min(K, m) - fewer, 0) for m in range(L, 0, -1))
        return [(0, 1)] + verifies + commit, drafts
    from mrp_repro.decoding.peers_s2d2 import S2D2
    from mrp_repro.decoding.peers_wino import Wino

    if isinstance(pol, Wino):  # every denoising forward carries the shadow block
        return [(WIDE, L)] + commit, 0
    if isinstance(pol, S2D2):  # each step's draft forward, then its AR-mode verify (2L rows)
        return [(0, L), (WIDE, L)] + commit, 0
    per = {"naive": getattr(pol, "k", 1), "direct": getattr(pol, "steps", 0) + 1, "static": getattr(pol, "k", 1)}
    n = math.ceil(L / per.get(mode, 1))
    return [(0, n)] + commit, {"direct": getattr(pol, "steps", 0) * n, "remask": n}.get(mode, 0)


def _block_cost(mode, pol, rows: int, L: int, fused: bool, context: float, verify: str, end: int,
                forward_ms: float | None) -> tuple[int, int, float]:  # fmt: skip
    """(backbone calls, head calls, ms) of one block of a batch of `rows` rows, `context` tokens cached."""
    parts, heads = block_calls(mode, pol, L, fused)
    calls, ms = 0, 0.0
    for M, n in parts:
        if M == WIDE:  # one call of 2 blocks' query rows (block and shadow), reading the cache as a forward does
            calls += n
            ms += n * _call_ms(rows * L * 2, 3 * rows * context, end, forward_ms)
        elif M == 0 or verify == "loop":  # a plain call, or loop's M forward_blocks: each moves the cache 3 times
            k = n * max(M, 1)
            calls += k
            ms += k * _call_ms(rows * L, 3 * rows * context, end, forward_ms)
        else:  # fold: one call over M x rows; its cat reads the cache once, writes and attention reads M copies
            calls += n
            ms += n * _call_ms(rows * L * M, (1 + 2 * M) * rows * context, end, forward_ms)
    ms += heads * _a("head_fraction") * _call_ms(rows * L, 3 * rows * context, end, forward_ms)
    return calls, heads, ms


def wall_time(profile: Profile, forward_ms: float | None = None) -> pd.DataFrame:
    """One row per decoding grid and setting: prompts, batches, backbone calls, head calls, minutes, each at both
    ends of the range (SCENARIOS; module doc); the last row is the total with the fixed costs (ASSUMED load_min)."""
    from mrp_repro.model import ModelConfig
    from mrp_repro.mrp import MRPHead
    from mrp_repro.report import peers
    from mrp_repro.report.grids import GRIDS, grid_spec

    # the MRP settings are listed only with a head; a toy one stands in (nothing is decoded)
    head = MRPHead(ModelConfig(8, 8, 8, 1, 1, 1, 8), 1)
    L, nb = profile.block_size, len(profile.evaluation.benchmarks)
    fused = profile.decoding.fuse_commit
    rows = []
    # the peers grid decodes what modes_runs does not hold (peers.reused_settings: read from its frame), its draft
    # graphs uncalibrated (a graph's verify rows are its D at most)
    spec = peers.grid_settings(profile, head, None, prepare=False)
    reused = set(peers.reused_settings(profile, head, spec))
    specs = {grid: grid_spec(profile, head, grid) for grid in GRIDS}
    specs[peers.GRID] = dict(n_prompts=None, batch_size=None,
                             settings=[(mode, pol) for _, mode, pol in spec if pol.name not in reused])  # fmt: skip
    for grid, spec in specs.items():
        bs = spec["batch_size"] or profile.decoding.batch_size
        n = spec["n_prompts"] or profile.evaluation.n_prompts
        if n is None:
            raise ValueError(f"{profile.name}: evaluation.n_prompts is null (every prompt): no quick-check estimate")
        batches = math.ceil(n / bs) * nb
        for mode, pol in spec["settings"]:
            row = dict(grid=grid, setting=pol.name, prompts=n * nb, batch_size=bs, batches=batches)
            for name, (verify, end) in SCENARIOS.items():
                tokens = _a("mean_tokens" if bs == 1 else "longest_tokens", end)
                blocks = math.ceil(tokens / L)
                context = _a("prompt_tokens") + tokens / 2  # the mean cache length over the generation
                c, h, ms = _block_cost(mode, pol, bs, L, fused, context, verify, end, forward_ms)
                row.update({f"forwards_{name}": c * blocks * batches, f"head_calls_{name}": h * blocks * batches,
                            f"minutes_{name}": ms * blocks * batches / 6e4})  # fmt: skip
            rows.append(row)
    df = pd.DataFrame(rows)
    total = dict(grid="total", setting=f"+ {_a('load_min'):.0f} min fixed", prompts=math.nan, batch_size=math.nan,
                 batches=df["batches"].sum())  # fmt: skip
    for c in df.columns[5:]:
        total[c] = df[c].sum() + (_a("load_min") if c.startswith("minutes") else 0)
    return pd.concat([df, pd.DataFrame([total])], ignore_index=True)


def _fmt_range(lo: float, hi: float, digits: int = 0) -> str:
    f = (lambda v: f"{v:,.{digits}f}")  # noqa: E731
    return f(lo) if f(lo) == f(hi) else f"{f(lo)} – {f(hi)}"


def docs_table(profile: Profile, forward_ms: float | None = None) -> str:
    """docs/gpu.md's table: wall_time summed per grid (tests/test_released_quickcheck.py keeps the page equal to it)."""
    from mrp_repro.report import tables

    wt = wall_time(profile, forward_ms)
    body, tot = wt[wt["grid"] != "total"], wt[wt["grid"] == "total"].iloc[0]
    out = []
    for grid, g in body.groupby("grid", sort=False):
        out.append(dict(grid=grid, settings=len(g), batch_size=int(g["batch_size"].iloc[0]),
                        batches=int(g["batches"].sum()),
                        backbone_calls=_fmt_range(g["forwards_low"].sum(), g["forwards_high"].sum()),
                        head_calls=_fmt_range(g["head_calls_low"].sum(), g["head_calls_high"].sum()),
                        minutes=_fmt_range(g["minutes_low"].sum(), g["minutes_high"].sum(), 1)))  # fmt: skip
    out.append(dict(grid="fixed", settings="", batch_size="", batches="", backbone_calls="", head_calls="",
                    minutes=f"{_a('load_min'):.1f}"))  # fmt: skip
    out.append(dict(grid="**total**", settings=len(body), batch_size="", batches=int(tot["batches"]),
                    backbone_calls=_fmt_range(tot["forwards_low"], tot["forwards_high"]),
                    head_calls=_fmt_range(tot["head_calls_low"], tot["head_calls_high"]),
                    minutes=f"**{_fmt_range(tot['minutes_low'], tot['minutes_high'], 1)}**"))  # fmt: skip
    return tables.markdown(pd.DataFrame(out))


DOCS_BEGIN, DOCS_END = "<!-- quickcheck.docs_table: begin -->", "<!-- quickcheck.docs_table: end -->"


def write_docs(profile: Profile, path) -> None:
    """Replace the table between DOCS_BEGIN and DOCS_END in `path` (docs/gpu.md) with docs_table(profile)."""
    from pathlib import Path

    text = Path(path).read_text()
    i, j = text.index(DOCS_BEGIN) + len(DOCS_BEGIN), text.index(DOCS_END)
    Path(path).write_text(text[:i] + "\n" + docs_table(profile) + "\n" + text[j:])


def assumptions_note(forward_ms: float | None = None) -> str:
    lines = [f"- {k} = {v}: {why}" for k, (v, why) in ASSUMED.items()]
    lines.append("- range: low = a one-call verify (fold bitwise on the GPU) and the low end of each pair; high = loop "
                 "(one call per candidate) and the high end")  # fmt: skip
    if forward_ms is not None:
        lines.append(f"- measured block forward (batch 1) = {forward_ms} ms: replaces overhead_ms and the weight read")
    return "Estimates, not measured on a GPU here. Inputs:\n" + "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    from mrp_repro.config import load_profile
    from mrp_repro.report import tables

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="sdar-4b-released-quick")
    ap.add_argument("--forward-ms", type=float, default=None, help="gpu_check's measured block forward (batch 1), ms")
    ap.add_argument("--write-docs", metavar="PATH", default=None, help="rewrite docs/gpu.md's table (PATH) and stop")
    args = ap.parse_args(argv)
    P = load_profile(args.profile)
    if args.write_docs:
        write_docs(P, args.write_docs)
        print(f"quickcheck: wrote the table of {args.write_docs}")
        return
    exp, wt = expected(P), wall_time(P, args.forward_ms)
    figs = tables.out_dir(P)
    tables.save_table(exp, figs, "quickcheck_expected", note=f"paper model {P.paper.model}; n prompts per benchmark")
    tables.save_table(wt, figs, "quickcheck_time", digits=1, note=assumptions_note(args.forward_ms))
    print(tables.markdown(exp))
    print()
    print(tables.markdown(wt.round(1)))
    lo, hi = wt["minutes_low"].iloc[-1], wt["minutes_high"].iloc[-1]
    print(f"\nexpected wall time: {lo:.0f} - {hi:.0f} min\n{assumptions_note(args.forward_ms)}")


if __name__ == "__main__":
    from mrp_repro.cli import run_cli

    run_cli(main)
