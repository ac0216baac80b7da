"""The released code's pick rule (mrp_repro.decoding.upstream_pick) against plain per-row loops."""

import math

import pytest
import torch

from mrp_repro.decoding.upstream_pick import upstream_confidence, upstream_pick, upstream_static_select


def _loop_confidence(row: list[float]) -> tuple[int, float]:
    """Lowest index of the maximum, and its softmax probability (float64)."""
    m = max(row)
    tok = row.index(m)
    return tok, 1.0 / sum(math.exp(x - m) for x in row)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_confidence_is_the_full_softmax_in_the_logits_dtype(dtype):
    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(3, 5, 40, generator=g) * 3).to(dtype)
    logits[0, 1, [4, 9, 30]] = 50.0  # an exact three-way tie of the top logit
    logits[1, 2, 0] = 60.0  # a would-be [MASK] (id 0) on top: it stays a candidate
    tok, conf = upstream_confidence(logits)
    assert tok.shape == conf.shape == (3, 5) and conf.dtype == dtype
    for b in range(3):
        for i in range(5):
            t, p = _loop_confidence(logits[b, i].double().tolist())
            assert tok[b, i].item() == t
            # the probability rounded to the logits' dtype (bf16: 8 bits of mantissa)
            tol = 1e-6 if dtype == torch.float32 else 2 ** -8
            assert conf[b, i].item() == pytest.approx(p, rel=tol)
    assert tok[0, 1].item() == 4  # the lowest of the tied indices
    assert tok[1, 2].item() == 0  # [MASK] is not excluded


def test_pick_takes_the_most_confident_masked_slot_lowest_on_ties():
    V, mask_id = 12, 11
    logits = torch.zeros(3, 6, V)
    # row 0: slots 1 and 4 tie on the highest confidence; slot 4 is masked, slot 1 too -> slot 1
    logits[0, 1, 3] = logits[0, 4, 7] = 5.0
    logits[0, 2, 2] = 9.0  # the most confident slot overall, but not masked
    # row 1: the best masked slot's top token is [MASK] itself
    logits[1, 5, mask_id] = 8.0
    state = torch.full((3, 6), 1)
    state[0, [1, 3, 4]] = mask_id
    state[1, [0, 5]] = mask_id
    state[2, 0] = mask_id  # row 2 has a masked slot but is not eligible (finished)
    eligible = torch.tensor([True, True, False])
    pos, tok, valid = upstream_pick(logits, state, mask_id, eligible)
    assert valid.tolist() == [True, True, False]
    assert (pos[0].item(), tok[0].item()) == (1, 3)
    assert (pos[1].item(), tok[1].item()) == (5, mask_id)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_static_select_equals_a_per_row_loop(dtype):
    g = torch.Generator().manual_seed(1)
    conf = torch.rand(4, 8, generator=g).to(dtype)
    conf[0, [2, 5, 6]] = 0.5  # exact ties
    masked = torch.rand(4, 8, generator=g) > 0.3
    masked[3] = False  # a row with nothing masked
    for n in (1, 2, 3):
        sel = upstream_static_select(conf, masked, n)
        for b in range(4):
            cands = [i for i in range(8) if masked[b, i]]
            cands.sort(key=lambda i: (-conf[b, i].item(), i))  # most confident first, then lowest slot
            assert sorted(sel[b].nonzero().flatten().tolist()) == sorted(cands[:n])
    sel = upstream_static_select(conf, masked, 2)
    m0 = [i for i in range(8) if masked[0, i]]
    assert sel[0].sum().item() == min(2, len(m0))
