"""report.speed on a random smoke-shaped backbone and head: the table's columns, lossless flags, accounting."""

import math

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
    spec = df[df["policy"].str.startswith("speculative")]
    assert spec["predicted"].map(math.isfinite).all() and (spec["tpf_vs_oracle"] <= 1.0 + 1e-9).all()
    up = df[df["engine"] == "upstream"].set_index(["batch", "policy"])["forwards"]
    fu = df[df["engine"] == "fused"].set_index(["batch", "policy"])["forwards"]
    assert (fu < up).all()  # every fused run saves at least one commit forward
    assert (df[df["engine"] == "fused"]["s_commit"] <= df[df["engine"] == "upstream"]["s_commit"].to_numpy()).all()
    hb = head_breakdown(bb.model, head, bb.block_size, repeats=3)
    assert hb["step_forwards"] > 0 and all(math.isfinite(v) and v >= 0 for v in hb.values())
