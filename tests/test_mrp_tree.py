"""The MRP draft tree (decoding.mrp_tree): token-identical to Static(1) in fp32 and bf16, whichever branch it walks.

A random head's drafts are almost never accepted, so two drafters built from the backbone itself force each walk:
the oracle (the head's draft = the backbone's own next pick: the chain is always accepted, C(2b) never) and the
swapped oracle (top-1 and runner-up exchanged at every slot: draft 2 is always wrong and its runner-up always the
backbone's pick, so every round with a draft 2 ends on C(2b)).

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_mrp_tree.py
"""

import pytest
import torch

from mrp_repro.decoding import Speculative, Static, generate
from mrp_repro.decoding.mismatch import MASK, PAD, common_token, random_backbone, random_head, random_prompts
from mrp_repro.decoding.mrp_tree import TREE_DRAFTER, SpeculativeTree

torch.set_num_threads(1)

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


class OracleTree(SpeculativeTree):
    """The head's draft on C(k) = the backbone's own logits there (swap: top-1 and runner-up exchanged)."""

    def __init__(self, D, head, swap=False):
        super().__init__(D, head=head)
        self.swap = swap

    def _draft_logits(self, st, h, cur, live):
        z = st.model.forward_block(cur, st.positions, st.cache, st.key_valid).logits.clone()
        z[..., MASK] = float("-inf")
        if self.swap:
            top = z.topk(2, dim=-1)
            z.scatter_(-1, top.indices, top.values.flip(-1))  # the same values, so the same slot confidences
        return z, h


def _decode(m, ps, policy, block, eos, batch=8):
    out, stats = [], []
    for i in range(0, len(ps), batch):
        r = generate(m, ps[i : i + batch], policy, block, MASK, eos, 2 * block + 3, pad_id=PAD)
        out += r.tokens
        stats += r.stats
    return out, stats


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_tree_equals_static_token_for_token_on_every_walk(dtype):
    m, h = random_backbone(0, DTYPES[dtype]), random_head(100, DTYPES[dtype])
    rows, branch_b_rounds, chain_deep_rounds = 0, 0, 0
    for block in (4, 8, 16):
        ps = random_prompts(12, block, max_len=2 * block + 3)
        eos = [common_token(m, ps, block)]
        want, _ = _decode(m, ps, Static(1), block, eos)
        assert any(len(t) < 2 * block + 3 for t in want), "no row stops at EOS: finished rows untested"
        policies = [SpeculativeTree(3, head=h), SpeculativeTree(5, head=h)]
        policies += [OracleTree(D, h, swap=s) for D in (3, 5) for s in (False, True)]
        for policy in policies:
            D = policy.K
            got, stats = _decode(m, ps, policy, block, eos)
            assert got == want, (dtype, block, D, policy.name, getattr(policy, "swap", None))
            rows += len(got)
            lengths = [a for s in stats for a in s.accept_lengths]
            if isinstance(policy, OracleTree) and policy.swap:
                branch_b_rounds += sum(a == 2 for a in lengths)
                assert max(lengths) <= 2  # C(2b) is a leaf: a round commits at most 2
            elif isinstance(policy, OracleTree):
                chain_deep_rounds += sum(a == D - 1 for a in lengths)
    assert rows == 3 * 6 * 12
    assert branch_b_rounds > 100 and chain_deep_rounds > 100  # both walks ran, many times


def test_accounting_rows_and_head_steps():
    m, h = random_backbone(1, torch.float32), random_head(101, torch.float32)
    ps = random_prompts(8, 3, max_len=20)
    eos = [common_token(m, ps, 16)]
    tree, chain = _decode(m, ps, SpeculativeTree(4, head=h), 16, eos)[1], _decode(m, ps, Speculative(4, head=h), 16,
                                                                                   eos)[1]  # fmt: skip
    for t, c in zip(tree, chain, strict=True):
        assert t.mrp_forwards <= 2 * t.rounds  # at most D - 2 head steps a round
        assert c.mrp_forwards <= 3 * c.rounds
        assert t.drafted <= 4 * t.rounds and t.extra_rows <= 3 * t.denoise_forwards
    assert sum(t.mrp_forwards for t in tree) > 0
    # one head step fewer per full round than the chain at the same verify rows
    assert sum(t.mrp_forwards for t in tree) / sum(t.rounds for t in tree) < sum(
        c.mrp_forwards for c in chain) / sum(c.rounds for c in chain)  # fmt: skip


def test_names_and_settings():
    h = random_head(0, torch.float32)
    t = SpeculativeTree(3, head=h)
    assert (t.name, t.K, t.drafter, t.depth) == (f"speculative(3,{TREE_DRAFTER})", 3, TREE_DRAFTER, 2)
    assert SpeculativeTree(6, head=h, verify="packed").name == f"speculative(6,{TREE_DRAFTER},packed)"
    with pytest.raises(ValueError, match="at least 3 verify rows"):
        SpeculativeTree(2, head=h)
    with pytest.raises(ValueError, match="needs a head"):
        SpeculativeTree(3)
