"""evaluate: run_mode columns and order, summarize, bootstrap; backbone loading and caching."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from mrp_repro.backbone import Backbone, decode, encode_prompts, load_for_profile
from mrp_repro.backbone import random_backbone as _random_backbone
from mrp_repro.decoding import Dynamic, Static
from mrp_repro.evaluate import (
    COLUMNS,
    bootstrap_ci,
    eval_problems,
    paired_bootstrap_diff,
    run_mode,
    score_problem,
    summarize,
)
from mrp_repro.tasks import synthetic


def random_backbone(profile) -> Backbone:
    return _random_backbone(profile, std=0.5)


@pytest.fixture(scope="module")
def rb():
    from mrp_repro.config import load_profile

    return random_backbone(load_profile("smoke"))


def test_run_mode_columns_and_order(rb):
    probs = eval_problems(rb.profile, "synth-code", 5) + eval_problems(rb.profile, "synth-math", 4)
    probs = probs[::-1]  # mixed prompt lengths, out of length order
    df = run_mode(rb, probs, Static(1), batch_size=3, max_new_tokens=16, progress=False)
    assert list(df.columns) == COLUMNS
    assert list(df["task_id"]) == [p.task_id for p in probs]
    assert (df["mode"] == "static(1)").all()
    assert (df["tpf"] <= 1.0 + 1e-9).all() and (df["wall_s"] > 0).all()
    assert df["correct"].dtype == bool
    for p, (_, r) in zip(probs, df.iterrows(), strict=True):
        assert score_problem(p, r["text"])["correct"] == r["correct"]
    dyn = run_mode(rb, probs, Dynamic(0.5), batch_size=4, max_new_tokens=16, progress=False)
    assert (dyn["denoise_forwards"] >= 1).all()


def test_score_problem_synthetic_and_benchmark():
    p = synthetic.generate("synth-math", "test", 1, 0, 8)[0]
    assert score_problem(p, synthetic.canonical_answer(p))["correct"]
    from mrp_repro.tasks.benchmarks import Problem

    g = Problem("gsm8k/0", "gsm8k", "q", "42")
    r = score_problem(g, "so #### 42")
    assert r["correct"] and math.isnan(r["valid_chain"])


def test_summarize_ci_and_speedup():
    rng = np.random.default_rng(0)
    rows = []
    for mode, acc, wall in (("static(1)", 0.9, 0.02), ("dynamic(0.5)", 0.5, 0.005)):
        for _i in range(200):
            rows.append(
                dict(
                    task="synth-math",
                    mode=mode,
                    correct=bool(rng.random() < acc),
                    valid_chain=1.0,
                    tokens=20,
                    denoise_forwards=20 if mode == "static(1)" else 5,
                    commit_forwards=4,
                    mrp_forwards=0,
                    tpf=1.0 if mode == "static(1)" else 4.0,
                    wall_s=wall,
                )
            )
    s = summarize(pd.DataFrame(rows), n_boot=300)
    assert set(s["mode"]) == {"static(1)", "dynamic(0.5)"}
    for _, r in s.iterrows():
        assert r["ci_low"] <= r["accuracy"] <= r["ci_high"]
    st = s[s["mode"] == "static(1)"].iloc[0]
    dy = s[s["mode"] == "dynamic(0.5)"].iloc[0]
    assert st["speedup"] == pytest.approx(1.0)
    assert dy["speedup"] == pytest.approx(4.0)


def test_bootstrap_helpers():
    lo, hi = bootstrap_ci([1, 0, 1, 1, 0, 1, 1, 1], n_boot=500)
    assert 0 <= lo <= 0.75 <= hi <= 1
    d = paired_bootstrap_diff([1, 1, 1, 0], [0, 0, 1, 0], n_boot=500)
    assert d["diff"] == pytest.approx(0.5) and d["ci_low"] <= 0.5 <= d["ci_high"]
    with pytest.raises(ValueError):
        paired_bootstrap_diff([1, 0], [1])


def test_load_for_profile_trains_once_and_caches(smoke_profile, tmp_runs):
    p = smoke_profile.replace({"backbone_training.steps": 4})
    bb = load_for_profile(p, device="cpu", progress=False)
    assert bb.path is not None and (bb.path.parent / "done.json").exists()
    assert bb.mask_id == 1 and bb.eos_ids == [2] and bb.block_size == p.block_size
    probs = eval_problems(p, "synth-code", 2)
    ids = encode_prompts(bb, probs)
    assert decode(bb, ids[0]) == probs[0].prompt_text
    bb2 = load_for_profile(p, device="cpu", train_if_missing=False)
    for (k, a), (_, b) in zip(bb.model.state_dict().items(), bb2.model.state_dict().items(), strict=True):
        assert torch.equal(a, b), k


def test_backbone_report_writes_tables(smoke_profile, tmp_runs):
    from mrp_repro.evaluate import backbone_report
    from mrp_repro.runtime import figures_dir

    p = smoke_profile.replace({"backbone_training.steps": 2, "evaluation.n_prompts": 4})
    s = backbone_report(p, progress=False, num_threads=1)
    assert set(s["mode"]) == {"static(1)"} | {f"dynamic({t})" for t in p.decoding.thresholds}
    assert (s.loc[s["mode"] == "static(1)", "speedup"] == 1.0).all()
    out = figures_dir(p)
    for f in ("backbone_modes.csv", "backbone_modes.md", "adjacent_steps.csv"):
        assert (out / f).exists(), f
    adj = pd.read_csv(out / "adjacent_steps.csv")
    assert (adj["kl_mean"] >= 0).all()


def test_load_for_profile_local_checkpoint(smoke_profile, tmp_path):
    """A hub-format directory (config.json + safetensors + tokenizer) loads through model.source 'local'."""
    from mrp_repro.checkpoint import save_backbone
    from mrp_repro.tokenizer import save_tokenizer

    rb = _random_backbone(smoke_profile, std=0.5)
    d = tmp_path / "ckpt"
    save_backbone(rb.model, d)
    save_tokenizer(rb.tokenizer, d)
    p = smoke_profile.replace({"model.source": "local", "model.local_dir": str(d)})
    bb = load_for_profile(p, device="cpu")
    assert bb.mask_id == rb.mask_id and bb.eos_ids == rb.eos_ids
    for (k, a), (_, b) in zip(rb.model.state_dict().items(), bb.model.state_dict().items(), strict=True):
        assert torch.equal(a, b), k
