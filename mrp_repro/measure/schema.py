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

__all__ = ["RUN_COLUMNS", "MODES", "SETTING_KEYS", "require", "empty_runs"]

#: column -> definition, in the order collect_runs writes them
RUN_COLUMNS: dict[str, str] = {
    "model": "the model: SDAR-1.7B/4B/8B where the profile's numbers compare with the paper's (paper.comparable), "
    "else the profile name (tiny, smoke, sdar-mini)",
    "paper_model": "the paper model this run is compared with (the profile's paper.model): every paper value "
    "beside a row is this model's, blank where the paper does not report it",
    "inputs": "the resolved hub inputs the row was decoded with (mrp_repro.inputs.summary): per model input "
    "`backbone|head=<source>@<commit, else the requested revision, else local>#<12 hex of the sha256 over its files' "
    "sha256s>`, `;`-joined; each file's sha256 in runs/<profile>/inputs-<profile hash>.json; empty for a scratch "
    "backbone without a released head",
    "benchmark": "our benchmark: synth-math, synth-code, gsm8k, math500, humaneval, mbpp",
    "problem_id": "the problem's id within its benchmark (Problem.task_id)",
    "prompt_index": "the problem's position in the benchmark's evaluation list (0-based)",
    "mode": "the decoding family, one of MODES",
    "setting": "the policy's name, unique per decoding setting, e.g. static(1), speculative(3,mrp)",
    "K": "speculative: draft length; direct: MRP steps (= lookahead K); naive: lookahead K, i.e. tokens "
    "revealed per forward beyond the backbone's own pick (the policy reveals K + 1). NaN otherwise",
    "threshold": "confidence threshold tau of dynamic and remask; NaN otherwise",
    "rule": "remask rule (tau, delta, loo, sequential, logp-delta); '' otherwise",
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
    "revoked": "remasking: revealed tokens revoked",
    "accept_lengths": "speculative: drafts accepted per round, space-separated (a string: survives CSV)",
    "wall_s": "the batch's wall seconds split evenly over its rows",
    "wall_rank": "the torch.distributed rank whose clock measured wall_s (0 in one process); compare wall times "
    "within a rank only: every setting of one prompt is decoded on the same rank (measure.sharded)",
    "identical_to_static": "tokens identical to static(1)'s output on the same prompt (bool)",
}

#: decoding families (the `mode` column)
MODES = ("static", "dynamic", "speculative", "direct", "naive", "remask")

#: the columns that identify one decoding setting of one model on one benchmark
SETTING_KEYS = ["model", "benchmark", "mode", "setting", "K", "threshold", "rule", "drafter", "verify", "batch_size"]


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
