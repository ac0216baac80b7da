"""The quick check: what "reproduced" looks like on a subset, and what the subset costs, before the run ends.

    .venv/bin/python -m mrp_repro.report.quickcheck --profile sdar-4b-released-quick
    .venv/bin/python -m mrp_repro.report.quickcheck --profile sdar-4b-released-quick --forward-ms 9.5  # gpu_check's
    # -> figures/<profile>/quickcheck_expected.{md,csv}, quickcheck_time.{md,csv}; printed too

expected(profile): one row per cell the profile's subset measures that the paper reports for its paper model
(profile.paper.model): the paper's value, the tolerance the claims use for it (report/claims.py, by claim id), n
prompts, and this subset's own 95% CI width for an accuracy at the paper's value, 2 * 1.96 * sqrt(p (1 - p) / n)
(the normal approximation of the percentile bootstrap of a mean of n 0/1 outcomes). A gain (remask − dynamic) gets
the width of a difference of two independent such means: an upper bound, since the pairing narrows it.
A cell reads as reproduced when the paper's value lies inside our CI (about ours ± half the width).

wall_time(profile): the decoding grids the notebooks run (report.grids: backbone_runs, speculative_runs at batch 1,
modes_runs), their settings (measure.runs.settings_for), prompts and batches, times the forwards each setting
needs and a cost per forward from spec-sheet numbers. Every number is an assumption stated beside it (ASSUMED);
none was measured on a GPU: run `make gpu-check` first and pass its "block forward (batch 1)" ms as --forward-ms.
"""

from __future__ import annotations

import argparse
import math

import pandas as pd

from mrp_repro.config import Profile
from mrp_repro.report import paper

__all__ = ["ASSUMED", "ci_width", "expected", "wall_time", "main"]

Z95 = 1.96

#: every input of wall_time, with where it comes from (none measured on a GPU here)
ASSUMED = {
    "weight_gb": (8.8, "SDAR-4B bf16 weights: 4.41B parameters x 2 bytes (README arithmetic from config.json)"),
    "params_b": (4.41, "SDAR-4B parameters incl. untied embed and lm_head (151,936 x 2560 each)"),
    "hbm_tb_s": (4.8, "H200 HBM3e bandwidth, NVIDIA spec sheet (H100 SXM: 3.35)"),
    "bf16_tflops": (989.0, "H200 / H100 SXM dense bf16 peak, NVIDIA spec sheet"),
    "mfu": (0.5, "assumed fraction of the peak a block forward reaches when compute-bound"),
    "overhead_ms": (6.0, "assumed eager PyTorch cost per backbone forward: 36 layers x ~20 kernels x ~8 us launches"),
    "head_fraction": (0.2, "assumed cost of one MRP head call (3 layers + lm_head) as a fraction of a forward"),
    "longest_tokens": (512, "assumed longest answer in a batch (GSM8K / HumanEval, SDAR-Chat; a batch runs until "
                            "its longest row stops; max_new_tokens 4096 bounds the worst case)"),
    "mean_tokens": (300, "assumed mean answer length (a batch-1 row stops at its own EOS)"),
    "load_min": (3.0, "assumed: load backbone + head from local disk, 08_kernels and 03 adjacent-step logits"),
}  # fmt: skip


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


def _forward_ms(row_tokens: int, forward_ms: float | None) -> float:
    """One backbone forward over row_tokens tokens: measured (forward_ms, gpu_check's batch-1 block forward) plus
    the compute term, else the overhead plus the larger of the weight read and the compute (ASSUMED)."""
    a = {k: v for k, (v, _) in ASSUMED.items()}
    compute = 2 * a["params_b"] * 1e9 * row_tokens / (a["bf16_tflops"] * 1e12 * a["mfu"]) * 1e3
    if forward_ms is not None:
        return forward_ms + compute
    return a["overhead_ms"] + max(a["weight_gb"] / a["hbm_tb_s"], compute)


def _setting_cost(mode: str, pol, rows: int, tokens: int, block: int, forward_ms: float | None) -> tuple[float, float]:
    """(forwards, ms) one batch of `rows` rows costs for `tokens` tokens, at the worst case of one token per
    denoising forward (static, dynamic, remask, speculative: its verify accepts at least one), K + 1 per forward for
    naive K, steps + 1 for direct; plus one commit forward per block, and head calls (ASSUMED head_fraction)."""
    hf = ASSUMED["head_fraction"][0]
    per_fwd = {"naive": getattr(pol, "k", 1), "direct": getattr(pol, "steps", 0) + 1}.get(mode, 1)
    denoise = math.ceil(tokens / per_fwd)
    commits = math.ceil(tokens / block)
    cand = getattr(pol, "K", 0) + 1 if mode == "speculative" else 1
    ms = denoise * _forward_ms(rows * block * cand, forward_ms) + commits * _forward_ms(rows * block, forward_ms)
    heads = {"speculative": getattr(pol, "K", 0), "direct": getattr(pol, "steps", 0), "remask": 1}.get(mode, 0)
    if getattr(pol, "drafter", "mrp") != "mrp":
        heads = 0
    ms += denoise * heads * hf * _forward_ms(rows * block, forward_ms)
    return denoise + commits, ms


def wall_time(profile: Profile, forward_ms: float | None = None) -> pd.DataFrame:
    """One row per decoding grid and setting: prompts, batches, forwards, estimated minutes (module doc); the last
    row is the total with the fixed costs (ASSUMED load_min)."""
    from mrp_repro.measure.runs import settings_for
    from mrp_repro.report.grids import grid_spec

    head = object()  # the MRP settings are listed only with a head; any object stands in (nothing is decoded)
    block, nb = profile.block_size, len(profile.evaluation.benchmarks)
    longest, mean = ASSUMED["longest_tokens"][0], ASSUMED["mean_tokens"][0]
    rows = []
    for grid in ("backbone_runs", "speculative_runs", "modes_runs"):
        spec = grid_spec(profile, head, grid)
        bs = spec["batch_size"] or profile.decoding.batch_size
        n = spec["n_prompts"] or profile.evaluation.n_prompts
        if n is None:
            raise ValueError(f"{profile.name}: evaluation.n_prompts is null (every prompt): no quick-check estimate")
        batches = math.ceil(n / bs) * nb
        tokens = mean if bs == 1 else longest
        for mode, pol in settings_for(profile, head) if grid == "modes_runs" else spec["settings"]:
            f, ms = _setting_cost(mode, pol, bs, tokens, block, forward_ms)
            rows.append(dict(grid=grid, setting=pol.name, prompts=n * nb, batch_size=bs, batches=batches,
                             forwards=f * batches, minutes=ms * batches / 6e4))  # fmt: skip
    df = pd.DataFrame(rows)
    total = dict(grid="total", setting=f"+ {ASSUMED['load_min'][0]:.0f} min fixed", prompts=math.nan,
                 batch_size=math.nan, batches=df["batches"].sum(), forwards=df["forwards"].sum(),
                 minutes=df["minutes"].sum() + ASSUMED["load_min"][0])  # fmt: skip
    return pd.concat([df, pd.DataFrame([total])], ignore_index=True)


def assumptions_note(forward_ms: float | None = None) -> str:
    lines = [f"- {k} = {v}: {why}" for k, (v, why) in ASSUMED.items()]
    if forward_ms is not None:
        lines.append(f"- measured block forward (batch 1) = {forward_ms} ms: replaces overhead_ms and the weight read")
    return "Estimates, not measured on a GPU here. Inputs:\n" + "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    from mrp_repro.config import load_profile
    from mrp_repro.report import tables

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="sdar-4b-released-quick")
    ap.add_argument("--forward-ms", type=float, default=None, help="gpu_check's measured block forward (batch 1), ms")
    args = ap.parse_args(argv)
    P = load_profile(args.profile)
    exp, wt = expected(P), wall_time(P, args.forward_ms)
    figs = tables.out_dir(P)
    tables.save_table(exp, figs, "quickcheck_expected", note=f"paper model {P.paper.model}; n prompts per benchmark")
    tables.save_table(wt, figs, "quickcheck_time", digits=1, note=assumptions_note(args.forward_ms))
    print(tables.markdown(exp))
    print()
    print(tables.markdown(wt.round(1)))
    print(f"\nexpected wall time: {wt['minutes'].iloc[-1]:.0f} min\n{assumptions_note(args.forward_ms)}")


if __name__ == "__main__":
    from mrp_repro.cli import run_cli

    run_cli(main)
