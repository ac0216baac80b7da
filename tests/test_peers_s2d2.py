"""decoding.peers_s2d2: S2D2's verify rows are the AR mode's predictions (an explicit block-size-1 forward per slot);
every step verifying decodes each block as the AR mode does (a plain loop over slots); a routing that never verifies
is dynamic(τ) token for token; the verify is charged a forward and an extra block-row; a batch decodes as its rows
alone; the span, E[K] and greedy acceptance on hand-made tensors.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_peers_s2d2.py
"""

import math

import pytest
import torch

from mrp_repro.decoding import Dynamic, generate
from mrp_repro.decoding.mismatch import CONFIG, MASK, PAD, cached_state, common_token, random_backbone, random_prompts
from mrp_repro.decoding.peers_s2d2 import S2D2, ar_verify_mask, expected_accepted, first_masked_span, greedy_accept

torch.set_num_threads(1)

NEVER = 1e9  # a routing cost no E[K] reaches: no step verifies


def _run(m, ps, policy, block, eos, max_new, batch=8):
    toks, stats = [], []
    for i in range(0, len(ps), batch):
        r = generate(m, ps[i : i + batch], policy, block, MASK, eos, max_new, pad_id=PAD)
        toks += r.tokens
        stats += r.stats
    return toks, stats


def test_span_expected_accepted_and_greedy_acceptance_on_hand_made_tensors():
    m = torch.tensor([[0, 1, 1, 0, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]], dtype=torch.bool)
    assert first_masked_span(m).int().tolist() == [[0, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]]
    span = torch.tensor([[0, 1, 1, 1, 0]], dtype=torch.bool)
    draft, ar = torch.tensor([[5, 6, 7, 8, 9]]), torch.tensor([[1, 6, 3, 8, 2]])
    assert greedy_accept(draft, ar, span).int().tolist() == [[0, 1, 1, 0, 0]]  # 6 kept, 7 -> AR's 3, then stop
    assert greedy_accept(draft, draft, span).int().tolist() == [[0, 1, 1, 1, 0]]  # all agree: the whole span
    V = 7
    flat = torch.zeros(1, 5, V)  # entropy log V: a = exp(-1) at every slot
    e = math.exp(-1)
    assert expected_accepted(flat, span).item() == pytest.approx(e + e**2 + e**3)
    sharp = torch.full((1, 5, V), -1e4)
    sharp[..., 2] = 0.0  # one-hot: a = 1, E[K] = the span's length
    sharp[..., 0] = float("-inf")  # a token that can never be drawn ([MASK]'s) carries no probability, no NaN
    assert expected_accepted(sharp, span).item() == pytest.approx(3.0)
    assert expected_accepted(sharp, torch.zeros_like(span)).item() == 0.0


@torch.no_grad()
def test_the_verify_rows_are_the_ar_modes_prediction_of_each_slot():
    """[MASK] row i of the verify call = an explicit forward of the block's slots before i and [MASK] at i, read
    token-causally against the same cache (SDAR at block size 1); float64, to rounding."""
    block = 8
    m = random_backbone(3, torch.float64)
    cache, pos, kv, g = cached_state(m, 3, block, context_blocks=2, seed=4, finished=False)
    draft = torch.randint(3, CONFIG.vocab_size, (3, block), generator=g)
    ids = torch.cat([draft, torch.full_like(draft, MASK)], 1)
    got = m(ids, torch.cat([pos, pos], 1), ar_verify_mask(m, cache, kv), cache, logits_from=block).logits
    for i in range(block):
        x = torch.cat([draft[:, :i], torch.full_like(draft[:, :1], MASK)], 1)  # (B, i + 1)
        causal = torch.ones(i + 1, i + 1, dtype=torch.bool).tril()[None, None] & kv[:, None, None, : i + 1]
        mask = torch.cat([m._cache_keys(cache, 3, i + 1, x.device), causal.expand(3, 1, i + 1, i + 1)], -1)
        want = m(x, pos[:, : i + 1], mask, cache).logits[:, -1]
        assert torch.allclose(got[:, i], want, atol=1e-9), i


@torch.no_grad()
def _ar_blocks(m, prompt: list[int], block: int, max_new: int) -> list[int]:
    """The reference: the engine's cache (the prompt's blocks prefilled, its last block committed), then every new
    block slot by slot, each the AR mode's greedy token (an explicit forward of the slots before it and [MASK]),
    the finished block committed as the engine commits it."""
    n = len(prompt) // block
    cache = m.new_cache(1, (n + max_new // block) * block)
    ids, pos = torch.tensor([prompt]), torch.arange(len(prompt))[None]
    if n > 1:
        m.prefill(ids[:, : (n - 1) * block], pos[:, : (n - 1) * block],
                  torch.ones(1, (n - 1) * block, dtype=torch.bool), cache, block, with_logits=False)  # fmt: skip
    m.commit_block(ids[:, -block:], pos[:, -block:], cache, torch.ones(1, block, dtype=torch.bool), with_logits=False)
    out = []
    for b in range(max_new // block):
        p = torch.arange(len(prompt) + b * block, len(prompt) + (b + 1) * block)[None]
        toks: list[int] = []
        for i in range(block):
            x = torch.tensor([toks + [MASK]])
            causal = torch.ones(i + 1, i + 1, dtype=torch.bool).tril()[None, None]
            logits = m(x, p[:, : i + 1], torch.cat([m._cache_keys(cache, 1, i + 1, x.device), causal], -1),
                       cache).logits[0, -1]  # fmt: skip
            logits[MASK] = float("-inf")
            toks.append(int(logits.argmax()))
        m.commit_block(torch.tensor([toks]), p, cache, torch.ones(1, block, dtype=torch.bool), with_logits=False)
        out += toks
    return out


def test_verifying_every_step_decodes_each_block_as_the_ar_mode_does():
    """score_cost 0 (S2D2's block-16 setting): every step verifies, each verified token is an accepted draft equal to
    the AR mode's or its correction, so each block is the AR mode's, slot by slot (a plain loop; float64). Each step
    is charged its draft and verify forwards and one extra block-row, and drafts are sometimes accepted (the verify
    is not a one-token-a-step AR decode in disguise)."""
    block, max_new = 4, 12
    m = random_backbone(1, torch.float64, std=1.0)
    ps = [p[: 2 * block] for p in random_prompts(6, 11, max_len=3 * block) if len(p) >= 2 * block][:4]
    assert len(ps) >= 3
    got, stats = _run(m, ps, S2D2(0.9, score_cost=0.0), block, [], max_new, batch=1)
    assert got == [_ar_blocks(m, p, block, max_new) for p in ps]
    for s in stats:
        assert s.rounds > 0 and s.denoise_forwards == 2 * s.rounds and s.extra_rows == s.rounds
    assert sum(s.accepted for s in stats) > 0 and sum(s.tokens for s in stats) < sum(s.rounds for s in stats) * 2


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("tau", [0.9, 0.5])
def test_a_routing_that_never_verifies_is_dynamic(dtype, tau):
    m = random_backbone(0, dtype, std=1.0)
    ps = random_prompts(12, 8, max_len=19)
    eos = [common_token(m, ps, 8)]
    want, ws = _run(m, ps, Dynamic(tau), 8, eos, 19)
    got, gs = _run(m, ps, S2D2(tau, score_cost=NEVER), 8, eos, 19)
    assert got == want
    assert [s.denoise_forwards for s in gs] == [s.denoise_forwards for s in ws]
    assert all(s.extra_rows == 0 and s.rounds == 0 for s in gs)


def test_a_batch_decodes_as_its_rows_alone_with_the_routing_deciding_per_row():
    """S2D2's block-4 routing (c = 1): rows of one batch verify at different steps; float64, so the batch's rounding
    cannot flip a token; the batch equals each prompt decoded alone, counters included."""
    m = random_backbone(2, torch.float64, std=1.0)
    ps = random_prompts(8, 5, max_len=13)
    eos = [common_token(m, ps, 4)]
    alone, sa = _run(m, ps, S2D2(0.7, score_cost=1.0), 4, eos, 16, batch=1)
    together, st = _run(m, ps, S2D2(0.7, score_cost=1.0), 4, eos, 16, batch=8)
    assert together == alone
    assert [(s.denoise_forwards, s.rounds, s.extra_rows) for s in st] == [(s.denoise_forwards, s.rounds, s.extra_rows)
                                                                          for s in sa]  # fmt: skip
    rounds = [s.rounds for s in sa]
    assert 0 < sum(rounds) and min(s.denoise_forwards - s.rounds for s in sa) > 0  # some steps route past the verify


def test_bad_settings_name_the_fix():
    with pytest.raises(ValueError, match=r"tau=1.5: a confidence threshold in \(0, 1\)"):
        S2D2(1.5)
    with pytest.raises(ValueError, match="score_cost=-1: c >= 0"):
        S2D2(0.5, score_cost=-1)
    assert S2D2(0.85, 0.0).name == "s2d2(0.85,0)"
