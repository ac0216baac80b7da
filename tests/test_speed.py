"""report.speed on a random smoke-shaped backbone and head: the table's columns, lossless flags, accounting."""

import math

import pandas as pd
import pytest
import torch

from mrp_repro.mrp import MRPHead
from mrp_repro.report.speed import head_breakdown, speed_table

torch.set_num_threads(1)


def test_speed_table_and_head_breakdown(smoke_profile):
    from mrp_repro.stages import random_backbone

    bb = random_backbone(smoke_profile, std=0.3)
    head = MRPHead(bb.model.config, 1).init_weights("normal", 0.3, torch.Generator().manual_seed(0)).eval()
    ids = bb.tokenizer.encode("12+34=") if hasattr(bb.tokenizer, "encode") else [5, 6, 7]
    prompts = {"t": [list(ids), list(ids[:3]) or [5]]}
    df = speed_table(bb, head, prompts, Ks=(3,), batches=(1, 2), repeats=1, max_new=8)
    assert len(df) == 2 * 2 * 2  # batches x engines x policies
    assert df["lossless"].all()  # speculative == static, in each engine
    assert (df["wall_s"] > 0).all() and (df["speedup"] > 0).all()
    spec = df[df["setting"].str.startswith("speculative")]
    assert spec["predicted_speedup"].map(math.isfinite).all() and (spec["tpf_share_of_oracle"] <= 1.0 + 1e-9).all()
    # byte-weighted forwards: a head call costs head_cost forwards, so speculative's weighted TPF is below its TPF
    assert (spec["weighted_tpf"] < spec["tpf"]).all()
    stat = df[df["setting"] == "static(1)"]
    assert (stat["weighted_tpf"] == stat["tpf"]).all() and (stat["weighted_forwards"] == stat["forwards"] / 2).all()
    # no drafter beats the oracle at the same costs
    assert (spec["predicted_speedup"] <= spec["ceiling_speedup"] + 1e-9).all()
    up = df[df["engine"] == "upstream"].set_index(["batch_size", "setting"])["forwards"]
    fu = df[df["engine"] == "fused"].set_index(["batch_size", "setting"])["forwards"]
    assert (fu < up).all()  # every fused run saves at least one commit forward
    assert (df[df["engine"] == "fused"]["s_commit"] <= df[df["engine"] == "upstream"]["s_commit"].to_numpy()).all()
    hb = head_breakdown(bb.model, head, bb.block_size, repeats=3)
    assert hb["step_forwards"] > 0 and all(math.isfinite(v) and v >= 0 for v in hb.values())


def test_targets_table_judges_each_target_on_its_own_row():
    from mrp_repro.report.speed import TARGETS, targets_table

    def row(K, **kw):
        base = dict(benchmark="t", batch_size=1, engine="fused", setting=f"speculative({K},mrp)", speedup=1.5,
                    predicted_speedup=1.45, tpf_share_of_oracle=0.96, head_cost=0.1, lossless=True,
                    ceiling_speedup=1.7)  # fmt: skip
        return {**base, **kw}

    df = pd.DataFrame([row(3), row(5, tpf_share_of_oracle=0.85), dict(row(3), batch_size=32, speedup=0.5)])
    t = targets_table(df).set_index("target")
    assert len(t) == len(TARGETS) and t["met"].sum() == len(TARGETS) - 1
    assert not t.loc["TPF >= 90% of the oracle at K=5", "met"]  # read from the K=5 row, not K=3's 0.96
    assert t.loc["speculative K=3 >= 1.4x static", "value"] == 1.5  # the batch-32 row is not judged
    assert t.loc["measured within 10% of the cost model", "met"]
    slow = targets_table(pd.DataFrame([row(3, speedup=1.2), row(5)])).set_index("target")
    assert not slow.loc["measured within 10% of the cost model", "met"]  # 1.2 / 1.45 = 0.83
    with pytest.raises(KeyError, match="speculative\\(5,mrp\\)"):
        targets_table(pd.DataFrame([row(3)]))
    with pytest.raises(KeyError, match="ceiling_speedup"):
        targets_table(pd.DataFrame([row(3)]).drop(columns="ceiling_speedup"))


def test_main_writes_the_three_tables(smoke_profile, tmp_path, monkeypatch, tmp_runs):
    from mrp_repro.report import speed
    from mrp_repro.stages import random_backbone

    def load(profile):
        bb = random_backbone(profile, std=0.3)
        return bb, MRPHead(bb.model.config, 1).init_weights("normal", 0.3, torch.Generator().manual_seed(0)).eval()

    monkeypatch.setattr(speed, "_load", load)
    speed.main(["--profile", "smoke", "--n", "2", "--repeats", "1", "--Ks", "3", "5", "--batches", "1",
                "--out", str(tmp_path)])  # fmt: skip
    md = (tmp_path / "speed.md").read_text()
    assert [ln for ln in md.splitlines() if ln.startswith("## ")] == [
        "## speed", "## targets", "## head step at batch 1 (ms; step_forwards: step_total / forward)"]  # fmt: skip
    assert md.count("| synth-math | fused | lossless on every prompt | 1.000 | True |") == 1
    assert len(pd.read_csv(tmp_path / "speed.csv")) == 2 * 2 * 3  # tasks x engines x (static, K=3, K=5)
    # the cost columns are the run's stored cost model (one figure per quantity), reused by a second call
    from mrp_repro.config import load_profile
    from mrp_repro.measure.cost import run_cost_model

    bb, head = load(load_profile("smoke"))
    stored = run_cost_model(load_profile("smoke"), bb, head, 1, (3, 5))
    assert stored["source"].endswith("cost_model-b1.json")
    assert pd.read_csv(tmp_path / "speed.csv")["head_cost"].eq(stored["head_cost"]).all()
