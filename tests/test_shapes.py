"""report.shapes: the oracle ceiling against the engine's own oracle runs, and the table on smoke shapes."""

import math

import pytest
import torch

from mrp_repro.decoding import Speculative
from mrp_repro.report.shapes import ceiling_speedup, oracle_block, shape_table


@pytest.mark.parametrize("block", [4, 8])
def test_oracle_block_counts_what_the_engine_runs(smoke_profile, block):
    from mrp_repro.stages import random_backbone

    bb = random_backbone(smoke_profile.replace({"block_size": block}), std=0.3)
    prompts = [[5 + (i * j) % 7 for j in range(block)] for i in range(3)]  # whole blocks: no partial first one
    for K in (1, 2, 3, 5, block):
        r = bb.generate(prompts, Speculative(K, "oracle"), 2 * block, trace=False)
        want = oracle_block(block, K)
        for s in r.stats:
            assert s.tokens > 0 and s.tokens % block == 0  # whole blocks (EOS may end a row after its first)
            n = s.tokens // block
            assert (s.denoise_forwards, s.rounds, s.accepted) == (n * want["forwards"], n * want["rounds"], s.tokens)


def test_oracle_block_by_hand():
    assert oracle_block(8, 3) == {"forwards": 4, "verifies": 3, "head_steps": 5, "rounds": 3}  # 3 + 3 + 2
    assert oracle_block(16, 5)["forwards"] == 4  # 5 + 5 + 5 + 1: the last single draft needs no verify
    assert oracle_block(8, 1) == {"forwards": 8, "verifies": 7, "head_steps": 0, "rounds": 8}
    # free verifies and heads: static's b + 1 forwards against a seed and a commit
    assert ceiling_speedup(8, 3, 0.0, 0.0) == 9 / 2
    assert ceiling_speedup(8, 1, 1.0, 0.0) == 1.0  # K=1 is static with a verify in place of each forward
    with pytest.raises(ValueError, match="block >= 1"):
        oracle_block(0, 3)


def test_head_flop_share_counts_linear_weights():
    from mrp_repro.model import ModelConfig, SDARModel
    from mrp_repro.mrp import MRPHead
    from mrp_repro.report.shapes import head_flop_share, linear_macs

    cfg = ModelConfig(vocab_size=40, hidden_size=16, intermediate_size=32, num_layers=4, num_heads=2, num_kv_heads=1,
                      head_dim=8)  # fmt: skip
    layer = 16 * (2 * 8 + 2 * 1 * 8) + 2 * 8 * 16 + 3 * 16 * 32  # q, k, v | o | gate, up, down
    model, head = SDARModel(cfg), MRPHead(cfg, 1)
    assert linear_macs(model) == 4 * layer + 16 * 40
    assert head_flop_share(model, head) == (2 * 16 * 16 + layer + 16 * 40) / (4 * layer + 16 * 40)


def test_shape_table_on_smoke(smoke_profile):
    threads = torch.get_num_threads()
    df = shape_table(smoke_profile, [{}, {"block_size": 4, "model.num_layers": 3}], Ks=[3], train_steps=2, repeats=2)
    assert torch.get_num_threads() == threads
    assert list(df["block_size"]) == [8, 4] and list(df["num_layers"]) == [2, 3]
    assert list(df["shape"]) == ["profile", "block_size=4,model.num_layers=3"]
    assert (df["train_step_s"] > 0).all() and (df["forward_ms"] > 0).all()
    assert df["oracle_tpf"].tolist() == [8 / 4, 4 / 2]  # block 4: 3 drafts + 1 that finishes it unverified
    for r in df.itertuples():
        assert math.isclose(r.ceiling_speedup, ceiling_speedup(r.block_size, r.K, r.verify_cost, r.head_cost))
        assert math.isclose(r.train_min, r.train_step_s * smoke_profile.backbone_training.steps / 60)
    assert df["head_flop_share"].iloc[1] < df["head_flop_share"].iloc[0]  # a 3-layer backbone next to a 1-layer head
