"""adjacent_step_similarity on a small random model: sane numbers, tidy frame."""

from __future__ import annotations

import torch

from mrp_repro.measure.adjacent import (
    ADJACENT_COLUMNS,
    RANDOM_BASELINE,
    SUBSET,
    TRAINED,
    adjacent_step_similarity,
    step_pair_stats,
)
from mrp_repro.measure.runs import eval_problems
from mrp_repro.stages import random_backbone


def test_step_pair_stats_identity_and_range():
    a = torch.randn(2, 8, 30)
    a[..., 1] = float("-inf")
    sel = torch.ones(2, 8, dtype=torch.bool)
    kl, agree = step_pair_stats(a, a.clone(), sel)
    assert torch.allclose(kl, torch.zeros_like(kl), atol=1e-6) and (agree == 1).all()
    b = torch.randn(2, 8, 30)
    b[..., 1] = float("-inf")
    kl, agree = step_pair_stats(a, b, sel)
    assert (kl > 0).all() and torch.isfinite(kl).all()


def test_adjacent_step_similarity_sane(smoke_profile):
    bb = random_backbone(smoke_profile, std=0.5)
    probs = eval_problems(smoke_profile, "synth-code", 3) + eval_problems(smoke_profile, "synth-math", 3)
    df = adjacent_step_similarity(bb, probs, max_distance=3, n_problems=6, batch_size=4, max_new_tokens=16)
    assert list(df.columns) == ADJACENT_COLUMNS
    assert set(df["model"]) == {TRAINED, "random init", RANDOM_BASELINE}  # the labels figure and claim select
    assert set(df["subset"]) == {"all", SUBSET}
    assert not df.duplicated(["model", "subset", "distance"]).any()  # one row per series point
    assert set(df["distance"]) == {1, 2, 3}
    assert (df["kl_mean"] >= 0).all() and df["top1_agreement"].between(0, 1).all()
    assert (df["n_positions"] > 0).all()
    # fewer pairs at larger distance (a block has L - k pairs (t, t + k))
    t = df[(df["model"] == "trained") & (df["subset"] == "all")].sort_values("distance")
    assert t["n_positions"].is_monotonic_decreasing
