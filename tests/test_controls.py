"""The no-MRP controls (decoding.controls): the random veto revokes exactly as many tokens per step and block as
remask(τ, tau) would on the same state (match "state"), and with match "total" also MRP's total of every block from
the same block start; the confidence veto revokes as many, the fresh reveals of lowest backbone confidence; both are
deterministic (the random one seeded), and with the head's own pick each *is* remask(τ, tau); the untrained head is
the trained one's shape, never its weights. Tiny float64 models (tests/test_mrp_modes.py)."""

import pytest
import torch

from mrp_repro.decoding import Remask, generate
from mrp_repro.decoding.controls import (
    CONFIDENCE_RULE,
    CONTROL_RULE,
    ConfidenceVeto,
    MatchedVeto,
    RandomVeto,
    UntrainedDirect,
    untrained_head,
)
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


@pytest.fixture(scope="module")
def busy():
    """A head whose rule revokes tens of reveals on 16 prompts at τ = 0.7 (matching in total is then not vacuous)."""
    return backbone(5, peaky=2.0), head(4, scale=2.0), prompts(16, 5)


def test_head_pick_is_remask_tau(setup):
    """pick="head": the control's count comes from the very judgment remask(τ, tau) makes: token for token, revocation
    for revocation (trace) and head call for head call the same decode."""
    m, h, ps = setup
    for tau, match in ((0.3, "state"), (0.5, "state"), (0.3, "total"), (0.5, "total")):
        a, b = _run(m, ps, Remask(tau, "tau", head=h)), _run(m, ps, RandomVeto(tau, head=h, pick="head", match=match))
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
    pol = RandomVeto(tau, head=h, seed=7, match="state")
    ctx = _keep_ctx(pol)
    res = _run(m, ps, pol)
    rev = _revokes(res)
    counts = {}
    for block, step, n, n_state in ctx["c"]["counts"]:
        assert torch.equal(n, n_state)  # per state: the head's count on this state, exactly
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


def _keep_ctx(pol) -> dict:
    """{"c": the policy's per-generate context} once it has run (its counts records)."""
    ctx = {}
    begin = pol.begin
    pol.begin = lambda *a, **k: ctx.setdefault("c", begin(*a, **k))
    return ctx


@pytest.mark.parametrize("make", [lambda t, h: RandomVeto(t, head=h, seed=3), lambda t, h: ConfidenceVeto(t, head=h)],
                         ids=["random", "confidence"])
def test_total_match_revokes_mrps_block_totals(busy, make):
    """match "total": every block revokes what remask(τ, tau) revokes on that block from the same start state (its
    dry run: neither counted nor traced), per state at least the head's own count until that total is reached, and
    never more; the first block starts where the MRP run does, so there the totals are the MRP run's own; and over
    the prompts the control revokes at least as many as the per-state match (which falls short of MRP)."""
    m, h, ps = busy
    tau = 0.7
    pol = make(tau, h)
    assert pol.match == "total" and pol.name.endswith(",tau,total)")
    ctx = _keep_ctx(pol)
    res = _run(m, ps, pol)
    c = ctx["c"]
    rev = _revokes(res)
    got = {}
    for (r, b, _), k in rev.items():
        got[r, b] = got.get((r, b), 0) + k
    assert c["blocks"] and sum(rev.values()) > 0
    exact = short = 0
    carried = {}
    for block, target, carry, done in c["blocks"]:
        for r, (t, cin, d) in enumerate(zip(target.tolist(), carry.tolist(), done.tolist(), strict=True)):
            assert d == got.get((r, block), 0) and d <= t + cin  # never more than MRP's total (and what is owed)
            assert cin == carried.get(r, 0)  # a shortfall passes to the row's next block
            carried[r] = t + cin - d
            exact += d == t + cin
            short += d < t + cin
    assert exact > short  # the totals are met wherever candidates allow
    first = min(b for b, *_ in c["blocks"])
    mrp = _run(m, ps, Remask(tau, "tau", head=h))
    mrp_first = {}
    for (r, b, _), k in _revokes(mrp).items():
        if b == first:
            mrp_first[r] = mrp_first.get(r, 0) + k
    target_first = next(t for b, t, *_ in c["blocks"] if b == first)
    assert {r: t for r, t in enumerate(target_first.tolist()) if t} == mrp_first  # the MRP run's own first block
    for _, _, n, n_state in c["counts"]:  # per state: at least the head's count, unless the block total is reached
        assert (n >= n_state).sum() >= 0.9 * len(n)
    # the dry run is never charged: one head call per judged state, as the per-state control's
    assert all(s.mrp_forwards <= s.denoise_forwards for s in res.stats)
    assert res.tokens != mrp.tokens  # another choice of which tokens


def test_confidence_veto_revokes_the_least_confident(setup):
    """The head-free pick: on every judged state the revoked fresh reveals are those of lowest backbone confidence
    (MatchedVeto._lowest), with ties to the higher index; with the head's pick it is remask(τ, tau) again."""
    cand = torch.tensor([[True, True, True, False, True]])
    conf = torch.tensor([[0.9, 0.2, 0.5, 0.0, 0.2]], dtype=torch.float64)
    sel = MatchedVeto._lowest(cand, conf, torch.tensor([2]))
    assert sel.tolist() == [[False, True, False, False, True]]
    assert MatchedVeto._lowest(cand, conf, torch.tensor([1])).tolist() == [[False, False, False, False, True]]
    assert MatchedVeto._lowest(cand, conf, torch.tensor([9])).tolist() == cand.tolist()  # capped at the candidates
    m, h, ps = setup
    pol = ConfidenceVeto(0.3, head=h)
    assert pol.rule == CONFIDENCE_RULE and pol.name == "confidence_veto(0.3,tau,total)"
    a, b = _run(m, ps, pol), _run(m, ps, ConfidenceVeto(0.3, head=h))
    assert a.tokens == b.tokens and _revokes(a) == _revokes(b)  # deterministic, no seed


def test_random_veto_is_seeded(setup):
    m, h, ps = setup
    a = _run(m, ps, RandomVeto(0.3, head=h, seed=1))
    b = _run(m, ps, RandomVeto(0.3, head=h, seed=1))
    c = _run(m, ps, RandomVeto(0.3, head=h, seed=2))
    assert a.tokens == b.tokens and _revokes(a) == _revokes(b)
    assert a.tokens != c.tokens
    assert RandomVeto(0.5, head=h, match="state").name == "random_veto(0.5,tau)"
    assert RandomVeto(0.5, head=h).name == "random_veto(0.5,tau,total)" and RandomVeto(0.5, head=h).rule == CONTROL_RULE
    with pytest.raises(ValueError, match="pick"):
        RandomVeto(0.5, head=h, pick="confidence")


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
