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


def test_trajectory_stats_equals_the_per_pair_reference(smoke_profile):
    """The shared-log-softmax loop gives what step_pair_stats per pair and subset gives (the old, 16x slower loop)."""
    from mrp_repro.measure.adjacent import RecordingStatic, _trajectory_stats

    bb = random_backbone(smoke_profile, std=0.5)
    probs = eval_problems(smoke_profile, "synth-code", 3)
    prompts = __import__("mrp_repro.backbone", fromlist=["encode_prompts"]).encode_prompts(bb, probs)
    got = _trajectory_stats(bb.model, bb, prompts, 3, 0.99, 4, 16)
    rec = RecordingStatic()
    bb.generate(prompts, rec, 16)
    ref: dict = {}
    for steps in rec.blocks:
        for t in range(len(steps)):
            a, m_a = steps[t]
            conf = torch.softmax(a, -1).amax(-1)
            for k in range(1, 4):
                if t + k >= len(steps):
                    break
                both = m_a & steps[t + k][1]
                for subset, sel in (("all", both), ("conf<0.99", both & (conf < 0.99))):
                    if sel.any():
                        kl, agree = step_pair_stats(a, steps[t + k][0], sel)
                        ref.setdefault((subset, k), []).append(torch.stack([kl, agree], 1))
    assert sorted(got) == sorted(ref) and len(ref) >= 4
    for key in ref:
        torch.testing.assert_close(torch.cat(got[key]), torch.cat(ref[key]), rtol=1e-5, atol=1e-6)
