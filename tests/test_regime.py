"""report.regime: issue 34's targets judged from a runs frame, and the pre-registration's table of them."""

import math

import pandas as pd
import pytest

from mrp_repro.decoding import Dynamic, NaiveLookahead
from mrp_repro.report import regime


def _runs(static, dyn, naive1, naive4, tokens=80, n=40, spec=((60, 30), (60, 20))):
    """A runs frame of n prompts: per setting the share correct given; speculative (tokens, forwards) per drafter."""
    rows = []

    def add(mode, setting, share, drafter="", tok=tokens, fwd=tokens):
        for i in range(n):
            rows.append({"model": "m", "benchmark": "b", "algorithm": "ours", "mode": mode, "setting": setting,
                         "K": math.nan, "threshold": math.nan, "rule": "", "delta": math.nan, "drafter": drafter,
                         "verify": "", "batch_size": 8, "correct": i < share * n, "valid_chain": math.nan,
                         "tokens": tok, "denoise_forwards": fwd, "commit_forwards": 5, "mrp_forwards": 0,
                         "rounds": 0, "revoked": 0, "accept_lengths": "", "wall_s": 1.0, "text": "x" * tok,
                         "prompt_index": i, "identical_to_static": True})
    add("static", "static(1)", static)
    for t, a in zip(regime.REGIME_TAUS, dyn, strict=True):
        add("dynamic", Dynamic(t).name, a)
    add("naive", NaiveLookahead(2).name, naive1)
    add("naive", NaiveLookahead(5).name, naive4)
    for dr, (tok, fwd) in zip(("naive", "oracle"), spec, strict=True):
        add("speculative", f"speculative(3,{dr})", static, dr, tok, fwd)
    return pd.DataFrame(rows)


def _table(**kw):
    runs = _runs(**kw)
    from mrp_repro.measure import stats

    for c in stats.SUMMARY_NEEDS:  # counters this frame does not exercise (upstream's): zero
        if c not in runs:
            runs[c] = 0
    return regime.regime_table(runs, n_boot=200).iloc[0]


def test_a_stand_in_in_the_papers_regime_meets_every_target():
    r = _table(static=0.8, dyn=(0.8, 0.75, 0.675, 0.6, 0.5), naive1=0.75, naive4=0.2)
    assert r["static_accuracy"] == pytest.approx(80.0)
    assert r["dynamic_0.5_drop"] == pytest.approx(30.0)
    assert r["drafter_share_of_oracle"] == pytest.approx(2.0 / 3.0)
    checks = [v for k, v in r.items() if k.startswith("target_")]
    assert checks and all(v == "met" for v in checks), r.to_dict()


def test_a_saturated_cliff_model_fails_its_targets():
    # tiny's kind of regime: static saturated, nothing lost until tau 0.5, then a cliff; naive MTP(1) far below
    r = _table(static=1.0, dyn=(1.0, 1.0, 1.0, 1.0, 0.2), naive1=0.35, naive4=0.15, spec=((60, 30), (60, 31)))
    assert r["target_static"].startswith("missed by 8.0")
    assert r["target_dynamic_0.5"].startswith("missed by")
    assert r["target_graded"].startswith("missed by")
    assert r["target_naive_1"].startswith("missed by")
    assert r["target_drafter_room"].startswith("missed by")
    assert r["target_naive_4"] == "met"


def test_the_written_regime_table_has_every_statistic_its_target_and_check():
    t = pd.DataFrame([_table(static=0.8, dyn=(0.8, 0.75, 0.675, 0.6, 0.5), naive1=0.75, naive4=0.2)])
    long = regime.regime_long(pd.concat([t, regime.paper_regime()], ignore_index=True))
    ours = long[long["model"] == "m"]
    assert len(ours) == len(regime.REGIME_STATISTICS)
    static = ours[ours["regime_statistic"] == "static(1) accuracy (%)"].iloc[0]
    assert static["regime_value"] == pytest.approx(80.0) and static["regime_check"] == "met"
    assert static["regime_value_lo"] < 80.0 < static["regime_value_hi"]
    paper = long[(long["model"] == "SDAR-4B") & (long["benchmark"] == "gsm8k")]
    assert paper.loc[paper["regime_statistic"] == "naive MTP(1) accuracy (%)", "regime_value"].iloc[0] == 84.8
    from mrp_repro.measure import schema

    assert not schema.undefined_columns(long.columns)


def _registration_root(tmp_path, fingerprint="abc123", checks=("met", "met")):
    """A root with chain16's published record and regime files, as report.regime and publish write them."""
    import json

    from mrp_repro.report import tables

    art, figs = tmp_path / "artifacts" / "chain16", tmp_path / "figures" / "chain16"
    art.mkdir(parents=True)
    rec = {"backbone": {"fingerprint": "abc123", "files": {"backbone/model/model.safetensors": "f" * 64},
                        "metrics": {"num_layers": 12, "hidden_size": 96, "params": 1339488, "steps_done": 2400,
                                    "final_loss": 0.1, "wall_s": 3600.0}}}  # fmt: skip
    (art / "published.json").write_text(json.dumps(rec))
    long = pd.DataFrame([{"model": "chain16", "benchmark": b, "regime_statistic": "static(1) accuracy (%)",
                          "regime_value": 70.0, "regime_value_lo": 60.0, "regime_value_hi": 80.0,
                          "regime_target": "55-92", "regime_check": c}
                         for b, c in zip(("chain-math", "chain-code"), checks, strict=True)])  # fmt: skip
    tables.save_table(long, figs, "regime", digits=2)
    (figs / regime.BACKBONES_FILE).write_text(json.dumps({"chain16": fingerprint}))
    return tmp_path, rec


def test_the_preregistration_names_the_backbone_the_regime_and_every_declared_test(tmp_path):
    from mrp_repro.report import preregister
    from mrp_repro.report.claims import CLAIMS
    from mrp_repro.tasks import chain

    root, rec = _registration_root(tmp_path)
    text = preregister.render("chain16", root=root)
    assert rec["backbone"]["files"]["backbone/model/model.safetensors"] in text
    assert "| chain16 | chain-code | static(1) accuracy (%) |" in text and "Every target is met." in text
    assert f"GENERATOR_VERSION {chain.GENERATOR_VERSION}" in text
    assert all(f"| {c.id} | {c.group} |" in text for c in CLAIMS)
    assert "naive-mtp-collapses: its test was changed in f3c05be" in text
    import dataclasses

    from mrp_repro.config import load_profile

    p = load_profile("chain16")  # one phase: no restart named; a profile with one names it with its settings
    assert not p.backbone_training.restart_steps and "warm restart" not in text
    assert f"{p.backbone_training.steps} steps with blocks of [4, 16]" in text
    two = dataclasses.replace(p, backbone_training=dataclasses.replace(p.backbone_training, restart_steps=2400,
                                                                        restart_lr=1e-3))  # fmt: skip
    assert preregister._restart_line(two, {}) == [
        "- two phases: 2400 steps at lr 0.002, then a warm restart of 2400 steps (a fresh AdamW warming up again to "
        "0.001, cosine to 0.1× of it)"]  # fmt: skip


def test_the_preregistration_refuses_another_backbones_regime_and_names_misses(tmp_path):
    from mrp_repro.errors import UserError
    from mrp_repro.report import preregister

    root, _ = _registration_root(tmp_path / "a", fingerprint="0ther")
    with pytest.raises(UserError, match="measured backbone 0ther, the published one is abc123"):
        preregister.render("chain16", root=root)
    root, _ = _registration_root(tmp_path / "b", checks=("missed by 3.0", "met"))
    with pytest.raises(UserError, match=r"misses 1 regime target.*chain-math: static\(1\) accuracy"):
        preregister.render("chain16", root=root)
    text = preregister.render("chain16", root=root, accept_misses=True)
    assert "Registered with these targets missed" in text
    assert "- chain-math: static(1) accuracy (%) 70.00 (missed by 3.0)" in text
