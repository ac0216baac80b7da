"""The cached, batched engine against the plain full-recompute loop, token for token."""

import random

import pytest
import torch

from mrp_repro.decoding import Dynamic, Static, generate
from mrp_repro.decoding.reference import reference_generate
from mrp_repro.model import ModelConfig, SDARModel

MASK, EOS, PAD = 1, 2, 0
CFG = ModelConfig(
    vocab_size=40,
    hidden_size=48,
    intermediate_size=96,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=12,
)


def random_model(seed):
    g = torch.Generator().manual_seed(seed)
    return SDARModel(CFG).init_weights(std=0.3, generator=g).eval()


def prompts(n, seed):
    rng = random.Random(seed)
    return [[rng.randrange(3, CFG.vocab_size) for _ in range(rng.randint(1, 13))] for _ in range(n)]


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("block", [4, 8])
def test_static_engine_equals_reference_loop(batch, block):
    m = random_model(block)
    ps = prompts(20, seed=block)
    for i in range(0, len(ps), batch):
        chunk = ps[i : i + batch]
        got = generate(m, chunk, Static(), block, MASK, [EOS], max_new_tokens=11, pad_id=PAD).tokens
        want = [reference_generate(m, p, Static(), block, MASK, [EOS], 11) for p in chunk]
        assert got == want


def test_dynamic_and_multi_token_static_equal_reference():
    m = random_model(11)
    ps = prompts(8, seed=3)
    for policy in (Dynamic(0.05), Dynamic(0.9), Static(2)):
        got = generate(m, ps, policy, 4, MASK, [EOS], max_new_tokens=10, pad_id=PAD).tokens
        want = [reference_generate(m, p, policy, 4, MASK, [EOS], 10) for p in ps]
        assert got == want, policy.name


def test_eos_stops_and_stats_count_forwards():
    m = random_model(5)
    with torch.no_grad():  # all logits 0: the greedy pick is the lowest allowed id, 0, used as EOS here
        m.norm.weight.zero_()
    res = generate(m, [[5, 6, 7], [8] * 9], Static(), 4, MASK, [0], max_new_tokens=40, pad_id=39)
    assert res.tokens == [[], []]
    # Row 0: prompt 3 -> 1 masked slot in block 0, then EOS stops it: 1 denoise forward + 1 commit.
    assert res.stats[0].tokens == 1 and res.stats[0].denoise_forwards == 1 and res.stats[0].commit_forwards == 1
    # Row 1: prompt 9 -> prefill (2 blocks) + 3 slots of block 2: 3 denoise forwards.
    assert res.stats[1].tokens == 3 and res.stats[1].denoise_forwards == 3 and res.stats[1].commit_forwards == 2
    assert all(e["kind"] == "reveal" for e in res.trace)


def test_max_new_tokens_and_no_mask_in_output():
    m = random_model(7)
    with torch.no_grad():
        m.lm_head.weight[EOS].fill_(0)
    res = generate(m, prompts(5, 9), Dynamic(0.5), 8, MASK, [EOS], max_new_tokens=13, pad_id=PAD)
    for toks, s in zip(res.tokens, res.stats, strict=True):
        assert len(toks) == 13 and MASK not in toks
        assert s.tpf >= 1.0


def test_bad_prompts_rejected():
    with pytest.raises(ValueError, match="non-empty"):
        generate(random_model(0), [[]], Static(), 4, MASK, [EOS], 4)
