"""The no-MRP controls (decoding.controls): the random veto revokes exactly as many tokens per step and block as
remask(τ, tau) would on the same state, is seeded and deterministic, and with the head's own pick *is* remask(τ, tau);
the untrained head is the trained one's shape, never its weights. Tiny float64 models (tests/test_mrp_modes.py)."""

import pytest
import torch

from mrp_repro.decoding import Remask, generate
from mrp_repro.decoding.controls import CONTROL_RULE, RandomVeto, UntrainedDirect, untrained_head
from tests.test_mrp_modes import CFG, EOS, MASK, PAD, backbone, head, prompts

BLOCK, MAX_NEW = 8, 16


def _run(m, ps, policy):
    return generate(m, ps, policy, BLOCK, MASK, [EOS], MAX_NEW, pad_id=PAD)


def _revokes(res) -> dict:
    """(row, block, step) -> tokens revoked, from the trace."""
    out = {}
    for e in res.trace:
        if e["kind"] == "revoke":
            k = (e["row"], e["block"], e["step"])
            out[k] = out.get(k, 0) + 1
    return out


@pytest.fixture(scope="module")
def setup():
    m, h = backbone(3), head(4, scale=3.0)  # large residuals: the tau rule revokes often
    return m, h, prompts(8, 5)


def test_head_pick_is_remask_tau(setup):
    """pick="head": the control's count comes from the very judgment remask(τ, tau) makes: token for token, revocation
    for revocation (trace) and head call for head call the same decode."""
    m, h, ps = setup
    for tau in (0.3, 0.5):
        a, b = _run(m, ps, Remask(tau, "tau", head=h)), _run(m, ps, RandomVeto(tau, head=h, pick="head"))
        assert a.tokens == b.tokens
        assert [(s.revoked, s.mrp_forwards, s.denoise_forwards) for s in a.stats] == [
            (s.revoked, s.mrp_forwards, s.denoise_forwards) for s in b.stats]
        assert _revokes(a) == _revokes(b)
        assert sum(s.revoked for s in a.stats) > 0  # the comparison is not vacuous


def test_random_veto_matches_mrp_count_per_step_and_block(setup):
    """On every step the random veto revokes as many tokens as the tau rule judges revocable on that state (per
    block: the same sums); in the first step of a block both decode the same state, so there it equals the MRP
    run's own count; and it revokes other tokens than the head would (else it would be no control)."""
    m, h, ps = setup
    tau = 0.3
    pol = RandomVeto(tau, head=h, seed=7)
    ctx = {}
    begin = pol.begin
    pol.begin = lambda *a, **k: ctx.setdefault("c", begin(*a, **k))  # keep the policy's per-generate record
    res = _run(m, ps, pol)
    rev = _revokes(res)
    counts = {}
    for block, step, n in ctx["c"]["counts"]:
        for r, k in enumerate(n.tolist()):
            if k:
                counts[r, block, step] = k
    assert rev == counts and sum(rev.values()) > 0
    mrp = _run(m, ps, Remask(tau, "tau", head=h))
    mrp_rev = _revokes(mrp)
    first_block = min(b for _, b, _ in mrp_rev)
    first = {k: v for k, v in rev.items() if k[1] == first_block and k[2] == 0}
    assert first and first == {k: v for k, v in mrp_rev.items() if k[1] == first_block and k[2] == 0}
    # per block, the counts sum to the judged counts (the trace's revokes are exactly those)
    per_block = {}
    for (r, b, _), k in rev.items():
        per_block[r, b] = per_block.get((r, b), 0) + k
    assert sum(per_block.values()) == sum(s.revoked for s in res.stats)
    assert res.tokens != mrp.tokens  # a different choice of which tokens


def test_random_veto_is_seeded(setup):
    m, h, ps = setup
    a = _run(m, ps, RandomVeto(0.3, head=h, seed=1))
    b = _run(m, ps, RandomVeto(0.3, head=h, seed=1))
    c = _run(m, ps, RandomVeto(0.3, head=h, seed=2))
    assert a.tokens == b.tokens and _revokes(a) == _revokes(b)
    assert a.tokens != c.tokens
    assert RandomVeto(0.5, head=h).name == "random_veto(0.5,tau)" and RandomVeto(0.5, head=h).rule == CONTROL_RULE


def test_untrained_head_same_shape_other_weights(setup):
    m, h, ps = setup
    u = untrained_head(h, seed=0)
    assert [p.shape for p in u.parameters()] == [p.shape for p in h.parameters()]
    assert u.eh_proj.weight.dtype == h.eh_proj.weight.dtype
    assert not torch.equal(u.layers[0].mlp.gate_proj.weight, h.layers[0].mlp.gate_proj.weight)
    assert torch.equal(untrained_head(h, seed=0).eh_proj.weight, u.eh_proj.weight)  # seeded
    H = CFG.hidden_size
    assert torch.equal(u.eh_proj.weight[:, H:], torch.eye(H, dtype=u.eh_proj.weight.dtype))  # structured init
    pol = UntrainedDirect(1, head=u)
    assert pol.name == "direct(1,untrained)"
    assert len(_run(m, ps, pol).tokens) == len(ps)
