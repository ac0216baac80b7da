"""adjacent_step_similarity on a small random model: sane numbers, tidy frame."""

from __future__ import annotations

import torch

from mrp_repro.measure.adjacent import (
    ADJACENT_COLUMNS,
    RANDOM_BASELINE,
    RANDOM_INIT,
    RELATIVE_KL_MAX,
    SUBSET,
    TRAINED,
    adjacent_step_similarity,
    block_pair_stats,
    frame_from_stats,
    next_masked,
    relative_kl,
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
    assert set(df["model"]) == {TRAINED, RANDOM_INIT, RANDOM_BASELINE}  # the labels figure and claim select
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
                        # the null: the next other position masked at step t (cyclic), one pair at a time
                        null = []
                        for b, i in sel.nonzero().tolist():
                            js = [(i + s) % a.shape[1] for s in range(1, a.shape[1]) if m_a[b, (i + s) % a.shape[1]]]
                            one = torch.zeros_like(sel)
                            one[b, i] = True
                            other = a.clone()
                            other[b, i] = a[b, js[0]]
                            null.append(step_pair_stats(a, other, one)[0])
                        ref.setdefault((subset, k), []).append(torch.stack([kl, agree, torch.cat(null)], 1))
    assert sorted(got) == sorted(ref) and len(ref) >= 4
    for key in ref:
        torch.testing.assert_close(torch.cat(got[key]), torch.cat(ref[key]), rtol=1e-5, atol=1e-6)


def test_next_masked_is_the_next_other_masked_position_cyclically():
    m = torch.tensor([[True, False, True, True], [False, True, False, False], [True, True, False, False]])
    assert next_masked(m).tolist() == [[2, 2, 3, 0], [1, -1, 1, 1], [1, 0, 0, 0]]  # -1: no other masked


def test_relative_kl_ratio_of_medians_and_ci():
    kl, null = torch.tensor([1.0, 2.0, 3.0, float("nan")]), torch.tensor([10.0, 20.0, 30.0, float("nan")])
    point, lo, hi = relative_kl(kl, null, n_boot=200)
    assert point == 0.1 and lo <= point <= hi
    assert relative_kl(torch.ones(3), torch.zeros(3), n_boot=0)[0] == float("inf")  # a null of 0: never closer


def _synthetic_block(sharp: float, drift: float, B=4, L=8, V=40, seed=0):
    """Recorded steps of one block, one reveal per step: logits = sharp * onehot(the position's own token) plus
    fresh noise of size `drift` at every step. sharp=6, drift=0.1: the paper's property (each position predicts
    its own token and keeps it); sharp=0, drift=0.05: a near-uniform model whose logits are noise."""
    g = torch.Generator().manual_seed(seed)
    target = torch.randint(0, V, (B, L), generator=g)
    base = sharp * torch.nn.functional.one_hot(target, V).float()
    masked = torch.ones(B, L, dtype=torch.bool)
    steps = []
    for t in range(L):
        steps.append((base + drift * torch.randn(B, L, V, generator=g), masked.clone()))
        masked[:, t] = False
    return steps


def test_relative_kl_discriminates_the_property_from_noise():
    """The claim's statistic on recorded steps: a model with the property passes, a noise model fails."""
    for sharp, drift, passes in ((6.0, 0.1, True), (0.0, 0.05, False)):
        rows = frame_from_stats(block_pair_stats(_synthetic_block(sharp, drift), 1, 1.01), TRAINED, n_boot=200)
        r = next(x for x in rows if x["subset"] == "all" and x["distance"] == 1)
        assert (r["relative_kl_hi"] <= RELATIVE_KL_MAX) is passes, r


def test_untrained_backbone_fails_the_adjacent_claim(smoke_profile):
    """Both random inits (std 0.02: near-uniform logits, more 'similar' in absolute KL than a trained model; and
    std 1/sqrt(H)) are far above the threshold: adjacent steps are not closer than two positions of a state."""
    from mrp_repro.report import claims

    bb = random_backbone(smoke_profile, std=0.02)
    probs = eval_problems(smoke_profile, "synth-code", 4) + eval_problems(smoke_profile, "synth-math", 4)
    df = adjacent_step_similarity(bb, probs, max_distance=1, n_problems=8, batch_size=8, max_new_tokens=16,
                                  n_boot=200)  # fmt: skip
    d1 = df[(df["subset"] == SUBSET) & (df["distance"] == 1)].set_index("model")
    assert (d1["relative_kl_lo"] > RELATIVE_KL_MAX).all(), d1
    rows = claims.check_claims({"adjacent": df}).set_index("id")
    assert rows.loc["adjacent-similar", "verdict"] == claims.NOT, rows.loc["adjacent-similar"]


def test_relative_figure_draws_every_model_and_the_threshold():
    from runs_helpers import synthetic_adjacent

    from mrp_repro.report import plots

    fig = plots.plot_adjacent_relative(synthetic_adjacent(True))
    ax = fig.axes[0]
    labels = ax.get_legend_handles_labels()[1]
    assert {TRAINED, RANDOM_INIT, RANDOM_BASELINE} <= set(labels) and any("threshold" in x for x in labels)
    assert RELATIVE_KL_MAX in [line.get_ydata()[0] for line in ax.get_lines() if len(set(line.get_ydata())) == 1]
