"""Synthetic runs frames in the full runs schema (every column of measure.schema.RUN_COLUMNS), for tests.

from runs_helpers import synthetic_runs, synthetic_adjacent
runs = synthetic_runs(n=40, good=True)     # MRP behaves as the paper says; good=False: the opposite
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from mrp_repro.measure.adjacent import ADJACENT_COLUMNS, RANDOM_BASELINE, RANDOM_INIT, SUBSET, TRAINED
from mrp_repro.measure.schema import RUN_COLUMNS, UPSTREAM_COUNTERS

SPEC_K = (3, 5)
LOOKAHEAD_K = (1, 2, 3, 4)
THRESHOLDS = (0.9, 0.7, 0.5, 0.3)


def synthetic_runs(model: str = "tiny", benchmarks=("synth-math", "synth-code"), n: int = 40, good: bool = True,
                   seed: int = 0, batch_size: int = 32, paper_model: str = "SDAR-8B",
                   algorithms=("ours",)) -> pd.DataFrame:  # fmt: skip
    """Every mode, shaped like collect_runs' output. One difficulty per problem, shared by all settings (paired).

    good=True: speculative lossless and faster, remasking helps at low tau, MRP degrades gracefully with K
    while naive collapses; good=False: the opposite. algorithms with "upstream": also upstream static,
    speculative, dynamic and remasking (delta 1 and 2) rows (algorithm "upstream", their counters set: their TPF
    is 1.5x the per-row one)."""
    rng = np.random.default_rng(seed)
    u = {b: rng.random(n) for b in benchmarks}
    rows = []

    def add(bench, mode, setting, p_correct, nfe_per_tok, wall_per_tok, identical=False, K=math.nan,
            threshold=math.nan, rule="", drafter="", accept=0, algorithm="ours", delta=None):  # fmt: skip
        for i in range(n):
            tokens = 32
            den = int(round(tokens * nfe_per_tok))
            rounds = den if mode == "speculative" else 0
            rows.append({
                "model": model, "paper_model": paper_model, "benchmark": bench,
                "problem_id": f"{bench}/{i}", "prompt_index": i, "mode": mode,
                "setting": setting, "K": float(K), "threshold": float(threshold), "rule": rule,
                "delta": delta if delta is not None else {"delta": 2.0}.get(rule, math.nan), "drafter": drafter,
                "verify": "packed" if mode == "speculative" else "", "batch_size": batch_size,
                "correct": bool(u[bench][i] < p_correct), "valid_chain": 1.0, "extracted": "x", "sandbox": "",
                "text": f"out {i}", "tokens": tokens, "denoise_forwards": den, "commit_forwards": 4, "fused_commits": 0,
                "mrp_forwards": den if mode in ("direct", "remask") or drafter == "mrp" else 0, "rounds": rounds,
                "drafted": rounds * (0 if math.isnan(K) else int(K)), "accepted": rounds * accept,
                "revoked": 1 if mode == "remask" else 0,
                "accept_lengths": " ".join([str(accept)] * rounds) if mode == "speculative" else "",
                "wall_s": tokens * wall_per_tok * (1 + 0.05 * rng.random()), "wall_rank": 0,
                "identical_to_static": identical, "algorithm": algorithm,
                **{c: (den / 1.5 if c == "upstream_denoise_forwards" else 0.0) if algorithm == "upstream"
                   else math.nan for c in UPSTREAM_COUNTERS},
            })  # fmt: skip

    for b in benchmarks:
        add(b, "static", "static(1)", 0.8, 1.0, 0.010, identical=True)
        if "upstream" in algorithms:
            add(b, "static", "upstream_static(1)", 0.8, 1.0, 0.010, identical=True, algorithm="upstream")
            for K in SPEC_K:
                add(b, "speculative", f"upstream_speculative({K},sum)", 0.8 if good else 0.6, 0.5 if good else 1.2,
                    0.006 if good else 0.013, identical=good, K=K, drafter="mrp", accept=2 if good else 0,
                    algorithm="upstream")  # fmt: skip
        for K in SPEC_K:
            add(b, "speculative", f"speculative({K},mrp)", 0.8 if good else 0.6, 0.6 if good else 1.2,
                0.007 if good else 0.013, identical=good, K=K, drafter="mrp", accept=2 if good else 0)  # fmt: skip
            add(b, "speculative", f"speculative({K},oracle)", 0.8, 0.4, 0.005, identical=True, K=K, drafter="oracle",
                accept=K)  # fmt: skip
        for k in LOOKAHEAD_K:
            acc = {1: 0.78, 2: 0.75}.get(k, 0.8 - 0.05 * k) if good else (0.2 if k <= 2 else 0.05)
            add(b, "direct", f"direct({k})", acc, 1.0 / (k + 1), 0.01 / (k + 1), K=k)
            add(b, "naive", f"naive_mtp({k})", 0.8 * (0.25 ** (k - 1)) if good else 0.8, 1.0 / (k + 1),
                0.01 / (k + 1), K=k)  # fmt: skip
        for tau in THRESHOLDS:
            base = 0.8 - 0.6 * (0.9 - tau)
            add(b, "dynamic", f"dynamic({tau})", base, tau, tau * 0.01, threshold=tau)
            for rule in ("tau", "delta"):
                gain = (0.9 - tau) * 0.5 if good else -(0.9 - tau) * 0.3
                add(b, "remask", f"remask({tau},{rule})", min(base + gain, 1.0), tau * 1.2, tau * 0.012,
                    threshold=tau, rule=rule)  # fmt: skip
            if "upstream" in algorithms:  # their dynamic and remasking (delta sweep), a lower baseline
                add(b, "dynamic", f"upstream_dynamic({tau})", base - 0.1, tau, tau * 0.01, threshold=tau,
                    algorithm="upstream")  # fmt: skip
                for delta in (1.0, 2.0):
                    add(b, "remask", f"upstream_remask({tau},{delta:g})", base - 0.1 + 0.1 * delta, tau * 1.1,
                        tau * 0.011, threshold=tau, rule="delta", algorithm="upstream", delta=delta)  # fmt: skip
    df = pd.DataFrame(rows, columns=list(RUN_COLUMNS))
    assert list(df.columns) == list(RUN_COLUMNS)
    return df


def synthetic_adjacent(good: bool = True) -> pd.DataFrame:
    """An adjacent-steps frame as adjacent_step_similarity writes it: both subsets, trained and two random inits.

    The "all" subset is deliberately different from SUBSET (conf<0.99), so a reader that blends the two, or
    reads the mean instead of the median, gets other numbers. The random inits' relative KL is near 1 (as
    measured on random backbones); the trained model's is 0.02 when good, 0.6 when not."""
    rows = []
    for m, kl, ag in ((TRAINED, 0.002, 0.81 if good else 0.3), (RANDOM_INIT, 0.0001, 0.85), (RANDOM_BASELINE, 0.02,
                                                                                           0.7)):  # fmt: skip
        for subset, shift in ((SUBSET, 0.0), ("all", 0.1)):
            for d in (1, 2, 3, 4):
                med = kl * d if good or m != TRAINED else 0.5 / d
                # the mean is heavy-tailed: the trained model's is above the random ones' (as on tiny)
                mean = (0.2 if m == TRAINED else 0.03) * d + shift
                rel = (0.02 if good else 0.6) if m == TRAINED else 0.55
                rel = rel * d + shift  # the "all" subset differs, so reading it gives other verdicts
                rows.append({"model": m, "subset": subset, "distance": d, "kl_mean": mean,
                             "kl_median": med + shift / 100, "top1_agreement": min(ag + shift - 0.03 * d, 1.0),
                             "n_positions": 100, "kl_null_median": (med + shift / 100) / rel, "relative_kl": rel,
                             "relative_kl_lo": 0.8 * rel, "relative_kl_hi": 1.25 * rel})  # fmt: skip
    return pd.DataFrame(rows, columns=ADJACENT_COLUMNS)
