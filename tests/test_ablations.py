"""mrp_repro.report.ablations: the statistics against plain loops, the declared tests' rules, the axes, the whole
pipeline on smoke (tiny step counts), and a list of released heads (mrp.pretrained) evaluated without training.
The generated sdar-mini released head goes through the same path in tests/test_notebooks.py (notebook 10 on the
sdar-mini CI profile)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from mrp_repro.report import ablations, ablations_metrics
from mrp_repro.report.verdicts import HOLDS, NA, NOT, NOT_SHOWN


def test_recovery_is_the_share_of_dynamics_loss_won_back():
    rng = np.random.default_rng(0)
    static, dyn, rem = (rng.random(40) < p for p in (0.9, 0.4, 0.6))
    point, lo, hi, loss = ablations_metrics.recovery_ci(static, dyn, rem, n_boot=200, seed=3)
    assert point == pytest.approx(100 * (rem.mean() - dyn.mean()) / (static.mean() - dyn.mean()))
    assert loss == pytest.approx(100 * (static.mean() - dyn.mean()))
    idx = np.random.default_rng(3).integers(0, 40, size=(200, 40))  # the same resamples, one at a time
    ref = []
    for i in idx:
        d = static[i].mean() - dyn[i].mean()
        if d > 0:
            ref.append(100 * (rem[i].mean() - dyn[i].mean()) / d)
    assert (lo, hi) == pytest.approx(tuple(np.quantile(ref, [0.025, 0.975])))
    # dynamic loses nothing: no recovery to speak of
    assert math.isnan(ablations_metrics.recovery_ci(static, static, rem, n_boot=50)[0])
    with pytest.raises(ValueError, match="paired"):
        ablations_metrics.recovery_ci(static, dyn[:-1], rem)


def test_share_difference_is_paired_and_equals_two_shares():
    rng = np.random.default_rng(1)
    tok = rng.integers(8, 25, 30).astype(float)
    fa, fb, fo = (tok / r for r in (rng.uniform(1.5, 1.8, 30), rng.uniform(1.7, 2.0, 30), np.full(30, 2.0)))
    sa = ablations_metrics.share_ci(tok, fa, tok, fo, n_boot=0)[0]
    sb = ablations_metrics.share_ci(tok, fb, tok, fo, n_boot=0)[0]
    d, lo, hi = ablations_metrics.share_diff_ci((tok, fa), (tok, fb), (tok, fo), n_boot=300, seed=5)
    assert d == pytest.approx(sb - sa) and sb == pytest.approx(tok.sum() / fb.sum() / (tok.sum() / fo.sum()))
    idx = np.random.default_rng(5).integers(0, 30, size=(300, 30))
    ref = [(tok[i].sum() / fb[i].sum() - tok[i].sum() / fa[i].sum()) / (tok[i].sum() / fo[i].sum()) for i in idx]
    assert (lo, hi) == pytest.approx(tuple(np.quantile(ref, [0.025, 0.975])))
    assert lo > 0  # b drafts longer on every prompt: the paired CI sees it


def _axis(variants: dict[str, float]) -> pd.DataFrame:
    return pd.DataFrame([{"label": v, "benchmark": t, "heldout_kl_ratio": r} for v, r in variants.items()
                         for t in ("a", "b")])  # fmt: skip


def test_declared_tests_follow_their_rules():
    v = lambda axis, t, d=None: ablations_metrics.check_claim(axis, t, d)["verdict"]  # noqa: E731
    assert v("depth", _axis({"1 layer": 0.6, "2 layers": 0.5, "3 layers": 0.52})) == HOLDS
    assert v("depth", _axis({"1 layer": 0.505, "2 layers": 0.5, "3 layers": 0.52})) == NOT_SHOWN  # a tie within 2%
    assert v("depth", _axis({"1 layer": 0.4, "2 layers": 0.5, "3 layers": 0.52})) == NOT
    assert v("depth", _axis({"2 layers": 0.5, "8 layers": 0.45})) == NOT  # 8 layers better: the claim fails
    assert v("depth", _axis({"1 layer": 0.4})) == NA
    assert v("objective", _axis({"residual": 0.5, "direct": 0.9})) == HOLDS
    assert v("objective", _axis({"residual": 0.5, "direct": 0.505})) == NOT  # a tie does not show "beats"
    assert v("objective", _axis({"residual": math.nan, "direct": math.nan})) == NA  # released: no training metrics
    ks = _axis({"k=1": 0.5, "k=2": 0.5})
    assert v("k_steps", ks, {"a": ("k=2", 0.05, 0.01, 0.09), "b": ("k=2", 0.04, 0.02, 0.06)}) == HOLDS
    assert v("k_steps", ks, {"a": ("k=2", 0.05, -0.01, 0.09), "b": ("k=2", -0.01, -0.03, 0.01)}) == NOT_SHOWN
    assert v("k_steps", ks, {"a": ("k=2", -0.05, -0.09, -0.01), "b": ("k=2", 0.01, -0.03, 0.05)}) == NOT
    assert v("k_steps", ks, {}) == NA


def test_axes_vary_one_setting_around_the_profiles_own_head(smoke_profile):
    P = smoke_profile
    ax = ablations.axes(P, depths=(1, 2, 3))
    assert set(ax) == {"depth", "objective", "k_steps", "train_source", "init"}
    for a in ax.values():
        hashes = [P.replace(ov).hash for _, ov in a.variants]
        assert len(set(hashes)) == len(hashes), a.name  # distinct heads
        assert P.hash in hashes, a.name  # the profile's own head is one of them (trained once, shared)
    assert [ov["mrp.k_steps"] for _, ov in ax["k_steps"].variants] == [1, 2, 3]  # chain_steps 3
    paper = dict(ax["train_source"].variants)["paper: gt"]
    assert P.replace(paper).mrp.train_source == "gt"
    init = {lab: P.replace(ov).mrp for lab, ov in ax["init"].variants}
    assert (init["paper: normal, std 0.2"].init, init["paper: normal, std 0.2"].init_std) == ("normal", 0.2)
    assert ablations.parse_released("k2=org/head@abc,mrp.k_steps=2") == (
        "k2", {"mrp.pretrained": "org/head@abc", "mrp.k_steps": 2})


@pytest.mark.slow  # make test-slow (CI runs it once): keeps make test within its 12 minutes on 2 cores
def test_ablations_on_smoke_train_each_head_once_and_measure_every_variant(smoke_profile, tmp_runs):
    """The whole pipeline: five axes at tiny step counts; every metric of a variant equals a plain computation
    over its cached runs; a second run trains and decodes nothing."""
    from mrp_repro import stages

    P = smoke_profile.replace({"mrp_training.steps": 4, "mrp_training.ckpt_every": 2})
    res = ablations.run(P, None, n_prompts=2, Ks=(3,), taus=(0.5,), depths=(1, 2))
    assert set(res["tables"]) == {"depth", "objective", "k_steps", "train_source", "init"}
    heads = sorted(p.name for p in (tmp_runs / "smoke").glob("mrp-*"))
    variants = {P.replace(ov).hash for a in ablations.axes(P, (1, 2)).values() for _, ov in a.variants}
    assert len(heads) == len(variants)  # the profile's own head is shared by the five axes
    figs = tmp_runs.parent / "figures" / "smoke"
    for name, t in res["tables"].items():
        assert len(t) == 2 * t["label"].nunique() and set(t["benchmark"]) == {"synth-math", "synth-code"}
        defined = set(ablations_metrics.columns((3,), (0.5,)))
        assert set(t.columns) - {c for c in t if c.endswith(("_lo", "_hi"))} <= defined
        assert {"tpf_share_k3", "upstream_tpf_share_k3"} <= set(t.columns) and (t["family"] == "ours upstream").all()
        for ext in ("md", "csv", "png"):
            assert (figs / f"ablation_{name}.{ext}").stat().st_size > 0
    assert list(res["claims"]["ablation"]) == ["depth", "objective", "k_steps"]
    assert "Verdict:" in (figs / "ablation_depth.md").read_text()
    # every number of one variant from its runs, by hand
    row = res["tables"]["objective"].query("label == 'direct' and benchmark == 'synth-math'").iloc[0]
    h = res["runs"]["objective", "direct"].query("benchmark == 'synth-math'")
    b = res["baseline"].query("benchmark == 'synth-math'")
    tpf = lambda g: g["tokens"].sum() / g["denoise_forwards"].sum()  # noqa: E731
    spec = "mode == 'speculative'"
    assert row["tpf_share_k3"] == pytest.approx(tpf(h.query(spec)) / tpf(b.query(spec)))
    u = res["family_runs"]["objective", "direct", "upstream"].query("benchmark == 'synth-math'")
    assert set(u["algorithm"]) == {"upstream"} and set(u["mode"]) == {"speculative"}  # the released code's rounds
    assert set(u["batch_size"]) == {1} and set(h["batch_size"]) == {P.decoding.batch_size}  # batch-min acceptance
    assert row["upstream_tpf_share_k3"] == pytest.approx(tpf(u) / tpf(b.query(spec)))  # over the same oracle
    assert row["direct_step1_accuracy"] == pytest.approx(100 * h.query("mode == 'direct' and K == 1")["correct"].mean())
    st, dy = b.query("mode == 'static'")["correct"].mean(), b.query("mode == 'dynamic'")["correct"].mean()
    re = h.query("mode == 'remask'")["correct"].mean()
    rec = 100 * (re - dy) / (st - dy) if st > dy else math.nan
    assert row["remask_recovery_tau50"] == pytest.approx(rec, nan_ok=True)
    Pd = P.replace({"mrp.objective": "direct"})
    m = json.loads((stages.head_dir(Pd, stages.backbone(Pd)) / "metrics.json").read_text())
    assert row["heldout_kl_ratio"] == pytest.approx(m["heldout_kl_step1"] / m["heldout_baseline_kl_step1"])
    # released heads (a list of mrp.pretrained): loaded, decoded, tabulated, never trained. The profile's head and
    # the 2-step head written in the released layout decode exactly as the trained ones
    from mrp_repro import released as rel

    bb = stages.backbone(P)
    d = tmp_runs / "released"
    for name, ov in (("base", {}), ("k2", {"mrp.k_steps": 2})):
        rel.save_released(bb.model, stages.head(P.replace(ov), bb), d / name, P.block_size)
    heads = set((tmp_runs / "smoke").glob("mrp-*"))
    out = ablations.run(P, None, n_prompts=2, Ks=(3,), taus=(0.5,), released=[
        ("base", {"mrp.pretrained": str(d / "base")}), ("k2", {"mrp.pretrained": str(d / "k2"), "mrp.k_steps": 2})])
    assert set(out["tables"]) == {"k_steps", "released"} and set((tmp_runs / "smoke").glob("mrp-*")) == heads
    r = out["tables"]["released"].set_index(["label", "benchmark"])
    k = res["tables"]["k_steps"].set_index(["label", "benchmark"])
    assert r["heldout_kl_ratio"].isna().all()  # released heads carry no training metrics
    for task in ("synth-math", "synth-code"):
        for lab, ref in (("base", "k=1"), ("k2", "k=2")):
            for c in ("tpf_share_k3", "direct_step1_accuracy", "direct_step2_accuracy"):
                assert r.loc[(lab, task), c] == pytest.approx(k.loc[(ref, task), c]), (lab, task, c)
    assert list(out["claims"]["ablation"]) == ["k_steps"] and out["claims"]["verdict"].iloc[0] != NA
    with pytest.raises(ValueError, match="mrp.pretrained"):
        ablations.released_axes(P, [("x", {"mrp.k_steps": 2})])
    # train=False tabulates what is trained and names the rest
    part = ablations.run(P, ["depth"], n_prompts=2, Ks=(3,), taus=(0.5,), depths=(1, 2, 3), train=False)
    assert list(part["tables"]["depth"]["label"].unique()) == ["1 layer", "2 layers"]
    assert "Not run (head not trained in the time this run had): 3 layers" in (figs / "ablation_depth.md").read_text()
    # resumable: nothing is trained or decoded again
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_runs / "smoke").rglob("*.csv") if "ablations" in str(p)}
    again = ablations.run(P, ["objective"], n_prompts=2, Ks=(3,), taus=(0.5,))
    pd.testing.assert_frame_equal(again["tables"]["objective"], res["tables"]["objective"])
    assert all(p.stat().st_mtime_ns == s for p, s in stamps.items())
