"""Measurements of record: the batch-1 grid decodes every setting of a prompt in turn (paired wall clock), the
oracle drafter shows no speed, and a run's cost model is measured once and quoted everywhere."""

from __future__ import annotations

import math

import torch
from runs_helpers import synthetic_runs

from mrp_repro.decoding import Speculative, Static
from mrp_repro.measure.runs import collect_runs
from mrp_repro.mrp import MRPHead
from mrp_repro.report import paper
from mrp_repro.stages import random_backbone


def test_collect_runs_decodes_every_setting_of_a_batch_in_turn(smoke_profile, monkeypatch):
    bb = random_backbone(smoke_profile, std=0.5)
    calls = []
    gen = bb.generate

    def logged(prompts, policy, *a, **k):
        calls.append((policy.name, tuple(map(tuple, prompts))))
        return gen(prompts, policy, *a, **k)

    monkeypatch.setattr(bb, "generate", logged)
    settings = [("static", Static(1)), ("speculative", Speculative(3, "oracle"))]
    runs = collect_runs(smoke_profile, bb, None, 3, ["synth-code"], settings, batch_size=1, max_new_tokens=8)
    # static, speculative on prompt a; then static, speculative on prompt b; ... (not all static first)
    assert [c[0] for c in calls] == ["static(1)", "speculative(3,oracle)"] * 3
    assert all(calls[i][1] == calls[i + 1][1] for i in range(0, 6, 2))
    assert list(runs["setting"]) == ["static(1)"] * 3 + ["speculative(3,oracle)"] * 3  # rows still by setting
    assert list(runs["prompt_index"]) == [0, 1, 2] * 2 and runs["identical_to_static"].all()


def test_the_oracle_drafter_shows_no_speed():
    runs = synthetic_runs(n=20)
    modes = paper.modes_table(runs[runs["mode"].isin(["static", "speculative"])], n_boot=10)
    oracle = modes[modes["setting"].str.contains("oracle")]
    assert len(oracle) and oracle[["speedup", "tokens_per_s"]].isna().all().all()
    assert modes.loc[modes["setting"].str.contains(",mrp"), "speedup"].notna().all()
    spec = paper.speculative_table(runs, drafter="oracle", n_boot=10)
    assert spec["throughput_speedup"].isna().all() and spec["tpf"].gt(1).all()
    assert not math.isnan(paper.speculative_table(runs, n_boot=10)["throughput_speedup"].iloc[0])


def test_run_cost_model_is_measured_once_per_weights(smoke_profile, tmp_runs, monkeypatch):
    from mrp_repro.measure import cost

    bb = random_backbone(smoke_profile, std=0.3)
    head = MRPHead(bb.model.config, 1).init_weights("normal", 0.3, torch.Generator().manual_seed(0)).eval()
    first = cost.run_cost_model(smoke_profile, bb, head, 1, (3,))
    calls = []
    monkeypatch.setattr(cost, "cost_model", lambda *a, **k: calls.append(a) or first)
    again = cost.run_cost_model(smoke_profile, bb, head, 1, (3,))
    assert not calls and again["head_cost"] == first["head_cost"]
    assert again["verify_cost"] == {3: first["verify_cost"][3]}
    assert "cost_model-b1.json" in cost.cost_note(again) and "batch 1" in cost.cost_note(again)
    other = MRPHead(bb.model.config, 1).init_weights("normal", 0.3, torch.Generator().manual_seed(1)).eval()
    cost.run_cost_model(smoke_profile, bb, other, 1, (3,))
    assert len(calls) == 1  # other head weights: measured again
