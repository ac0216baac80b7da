"""The runs schema: one record per (prompt, decoding setting), its columns named once, here.

    from mrp_repro.measure.schema import RUN_COLUMNS, require
    require(runs, ["benchmark", "mode", "correct"], "speculative_table")   # KeyError naming what is missing

Every runs frame comes from `mrp_repro.measure.runs.collect_runs` (the one producer) and every table,
figure and claim reads these columns by exact name; there is no alias map and no guessing. The names are
the paper's vocabulary (METHOD.md): a *mode* is a decoding family, a *setting* one parametrised policy.
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

__all__ = ["RUN_COLUMNS", "MODES", "ALGORITHMS", "UPSTREAM_COUNTERS", "SETTING_KEYS", "require", "empty_runs"]

#: column -> definition, in the order collect_runs writes them
RUN_COLUMNS: dict[str, str] = {
    "model": "the model: SDAR-1.7B/4B/8B where the profile's numbers compare with the paper's (paper.comparable), "
    "else the profile name (tiny, smoke, sdar-mini)",
    "paper_model": "the paper model this run is compared with (the profile's paper.model): every paper value "
    "beside a row is this model's, blank where the paper does not report it",
    "benchmark": "our benchmark: synth-math, synth-code, gsm8k, math500, humaneval, mbpp",
    "problem_id": "the problem's id within its benchmark (Problem.task_id)",
    "prompt_index": "the problem's position in the benchmark's evaluation list (0-based)",
    "algorithm": "whose algorithm decoded the row, one of ALGORITHMS: ours (mrp_repro.decoding.engine, mrp_modes) "
    "or upstream (mrp_repro.decoding.upstream: the released code's round, layout, length and counters; "
    "docs/upstream.md). Rows of the two are never pooled: every setting key includes it",
    "mode": "the decoding mode, one of MODES",
    "setting": "the policy's name, unique per decoding setting, e.g. static(1), speculative(3,mrp)",
    "K": "speculative: draft length; direct: MRP steps (= lookahead K); naive: lookahead K, i.e. tokens "
    "revealed per forward beyond the backbone's own pick (the policy reveals K + 1). NaN otherwise",
    "threshold": "confidence threshold tau of dynamic and remask; NaN otherwise",
    "rule": "remask rule (tau, delta, loo, sequential, logp-delta; upstream remasking: delta); '' otherwise",
    "delta": "remask: the threshold delta of the delta rules (ours: delta, logp-delta; upstream: the veto "
    "|C[p, token]| > delta, decoding.upstream_remask); NaN otherwise",
    "drafter": "speculative drafter (mrp, oracle, naive); '' otherwise",
    "verify": "speculative verify path (the policy's `verify` attribute); '' otherwise",
    "batch_size": "rows decoded together (1: latency regime, else the throughput regime)",
    "correct": "the output scores correct (bool)",
    "valid_chain": "synthetic tasks: the output's reasoning chain is valid (0/1); NaN for real benchmarks",
    "extracted": "the answer the scorer extracted from the output",
    "sandbox": "which sandbox scored a code row ('' for math and synthetic rows)",
    "text": "the decoded output",
    "tokens": "generated tokens (cut at EOS)",
    "denoise_forwards": "backbone forwards inside the denoising loop (TPF's denominator)",
    "commit_forwards": "backbone forwards that commit a finished block to the KV cache (upstream's accounting)",
    "fused_commits": "commits of commit_forwards written inside a forward the row needed anyway "
    "(decoding.fuse_commit; 0 otherwise): the forwards actually run are denoise + commit - fused",
    "mrp_forwards": "MRP head calls",
    "rounds": "speculative verify rounds",
    "drafted": "speculative draft tokens proposed",
    "accepted": "speculative draft tokens accepted",
    "revoked": "remasking: revealed tokens revoked (ours) or proposals vetoed before they were written (upstream: "
    "their num_residual_vetoed, summed over rows)",
    "accept_lengths": "speculative: drafts accepted per round, space-separated (a string: survives CSV)",
    "wall_s": "the batch's wall seconds split evenly over its rows",
    "wall_rank": "the torch.distributed rank whose clock measured wall_s (0 in one process); compare wall times "
    "within a rank only: every setting of one prompt is decoded on the same rank (measure.sharded)",
    "identical_to_static": "tokens identical to the static setting's output of the same algorithm on the same prompt "
    "(ours: static(1), upstream: upstream_static(1)) (bool)",
    # upstream's own counters (decoding.upstream.UpstreamCounters): per batch as the released code counts them,
    # split evenly over the batch's rows like wall_s (summed over rows: the batches' counts); NaN on ours rows
    "upstream_denoise_forwards": "upstream: their num_target_fwd_denoising (seed + verify forwards; static: block "
    "forwards) of the row's batch / its rows. Their TPF = sum(tokens) / sum(upstream_denoise_forwards)",
    "upstream_total_forwards": "upstream: their num_target_fwd_total (prefill + denoising + store-KV) / rows",
    "upstream_mrp_forwards": "upstream: their num_mrp_fwd_denoising (K - 1 head calls per round) / rows",
    "upstream_rounds": "upstream: their num_spec_rounds / rows",
    "upstream_drafted": "upstream: their num_drafts_proposed (valid drafts summed over rows) / rows",
    "upstream_accepted": "upstream: their num_drafts_accepted (the batch's accepted prefix, one scalar per round; "
    "the bonus excluded, the stale first draft included) / rows",
    "upstream_bonus": "upstream: their num_bonus_tokens (rows given the bonus pick, summed over rounds) / rows",
    "upstream_stalled_blocks": "upstream: blocks ended at a fixed point where their loop would never end "
    "(a [MASK] pick; decoding.upstream) / rows",
}

#: decoding algorithms (the `algorithm` column)
ALGORITHMS = ("ours", "upstream")

#: the upstream counter columns and the decoding.upstream.UpstreamCounters value each holds (per row)
UPSTREAM_COUNTERS = {
    "upstream_denoise_forwards": "denoise_forwards", "upstream_total_forwards": "total_forwards",
    "upstream_mrp_forwards": "mrp_forwards", "upstream_rounds": "spec_rounds", "upstream_drafted": "drafts_proposed",
    "upstream_accepted": "drafts_accepted", "upstream_bonus": "bonus_tokens",
    "upstream_stalled_blocks": "stalled_blocks",
}  # fmt: skip

#: decoding families (the `mode` column)
MODES = ("static", "dynamic", "speculative", "direct", "naive", "remask")

#: the columns that identify one decoding setting of one model on one benchmark
SETTING_KEYS = ["model", "benchmark", "algorithm", "mode", "setting", "K", "threshold", "rule", "delta", "drafter",
                "verify", "batch_size"]


def require(df: pd.DataFrame, columns: Iterable[str], what: str) -> pd.DataFrame:
    """`df` itself, or KeyError naming the columns `what` needs and `df` lacks (build it with collect_runs)."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise KeyError(
            f"{what} needs column(s) {', '.join(missing)}; the frame has {', '.join(map(str, df.columns)) or 'none'}"
            " (a runs frame comes from mrp_repro.measure.runs.collect_runs)"
        )
    return df


def empty_runs() -> pd.DataFrame:
    """A runs frame with every column and no rows."""
    return pd.DataFrame(columns=list(RUN_COLUMNS))
