"""MRP drafts as a tree (issue 37, "beyond the peers"): the chain plus the head's second choice at its first draft.

    from mrp_repro.decoding import generate, Static
    from mrp_repro.decoding.mrp_tree import SpeculativeTree
    generate(model, prompts, SpeculativeTree(3, head=head), L, M, E, N, pad_id=P)   # token-identical to Static(1)

Speculative(K, "mrp") verifies K candidate states in one call: C(1) (the backbone's own pick on the seed logits,
exact), then C(2), ..., C(K), each one more head draft on the last. The tree spends one of those rows otherwise:
SpeculativeTree(D) verifies the chain's first D - 1 states and C(2b), C(1) with draft 2's slot holding the head's
second most likely token there, in the same call: D verify rows, the chain's at K = D, and one head step fewer.
Where the head's first draft is wrong but its runner-up right, the chain accepts 1 token that round and the tree 2;
where the chain's last draft would have been accepted, the tree stops one short.

The walk: on C(1)'s verified logits the backbone's static pick either is draft 2 (the chain goes on, exactly as
Speculative: draft k + 1 against the pick on C(k)), or is the runner-up at draft 2's slot (C(2b) is entered: a leaf,
whose verified logits seed the next round), or neither (the round ends on C(1)). Every committed token is the
backbone's own pick on a state whose logits are bitwise a block forward's (verify "exact"), so the output is
Static(1)'s token for token in every dtype (tests/test_mrp_tree.py, fp32 and bf16).

Accounting as Speculative: drafted counts the verified states (C(2b) included), extra_rows the verify's rows past
the first, mrp_forwards the head steps (D - 2 per round).
"""

from __future__ import annotations

import torch

from mrp_repro.decoding.engine import BlockState
from mrp_repro.decoding.mrp_modes import Speculative, _set, draft_pick, static_pick

__all__ = ["SpeculativeTree", "TREE_DRAFTER"]

#: the runs frame's drafter column of a tree's rows (K: its verify rows D)
TREE_DRAFTER = "mrp-tree"


class SpeculativeTree(Speculative):
    """D verify rows: the chain C(1), C(2a), ..., C(D - 1) and C(2b) (module docstring)."""

    def __init__(self, D: int, head=None, verify: str = "exact"):
        if D < 3:
            raise ValueError(f"D={D}: a draft tree needs at least 3 verify rows (C(1), C(2a), C(2b))")
        super().__init__(D - 1, "mrp", head, verify)
        self.depth = D - 1  # the chain's states
        self.K, self.drafter = D, TREE_DRAFTER  # the runs frame's K (verify rows) and drafter
        extra = "" if verify == "exact" else f",{verify}"
        self.name = f"speculative({D},{TREE_DRAFTER}{extra})"

    def _draft_logits(self, st: BlockState, h, cur: torch.Tensor, live: torch.Tensor):
        """(logits (B, L, V), hidden) of the head's next draft on state `cur` from hidden `h` (tests override it)."""
        h = self.head.step(h, cur, st.positions, st.model.embed_tokens, st.ctx["cache"], st.key_valid)
        st._count("mrp_forwards", live)
        return st.model.lm_head(h), h

    def _tree_drafts(self, st: BlockState, logits, hidden, n_drafts: torch.Tensor, Kmax: int):
        """The chain's drafts 1..Kmax: pos (B, Kmax) (-1 past a row's n_drafts), tok (B, Kmax), states
        [C(1), ..., C(Kmax)]; and alt (B,): the runner-up token at draft 2's slot (-1 where there is no draft 2)."""
        p1, t1, _, _ = static_pick(logits, st.masked, st.mask_id)
        pos, toks, cands = [p1], [t1], [_set(st.ids, p1, t1)]
        alt = torch.full_like(p1, -1)
        h = hidden
        for k in range(1, Kmax):  # draft k + 1 (1-based), drawn on C(k)
            live = n_drafts > k
            cur = cands[-1]
            m = (cur == st.mask_id) & st.active[:, None]
            z, h = self._draft_logits(st, h, cur, live)
            p, t = draft_pick(z, m, st.mask_id)  # [MASK] is -inf in z from here on
            if k == 1:
                at = z.gather(1, p.clamp(min=0)[:, None, None].expand(-1, 1, z.shape[-1])).squeeze(1)  # (B, V)
                alt = at.scatter(1, t[:, None], float("-inf")).argmax(1)
                alt = torch.where(live & (p >= 0), alt, -1)
            p = torch.where(live, p, -1)
            pos.append(p)
            toks.append(t)
            cands.append(_set(cur, p, t))
        return torch.stack(pos, 1), torch.stack(toks, 1), cands, alt

    def denoise(self, st: BlockState) -> None:
        if (seed := self._seed(st)) is None:
            return
        n_masked, mx, logits, hidden = seed
        ar = torch.arange(st.ids.shape[0], device=st.ids.device)
        while mx > 0:
            working = n_masked > 0
            n_drafts = torch.clamp(n_masked, max=self.depth)  # the chain's drafts; 0 for idle rows
            Kmax = min(self.depth, mx)
            pos, tok, cands, alt = self._tree_drafts(st, logits, hidden, n_drafts, Kmax)
            has_alt = alt >= 0  # a draft 2, so a C(2b)
            st._count("drafted", working, n_drafts + has_alt.long())
            st._count("rounds", working)
            # what the verify scores: C(1..n_drafts) less a state with no mask left (as Speculative), and C(2b)
            # where it still has a mask (with 2 masks left it completes the block: the pick on C(1) decides it)
            need = torch.where(n_drafts == n_masked, n_drafts - 1, n_drafts)
            alt_need = has_alt & (n_masked > 2)
            M = min(self.depth, mx - 1)  # = need.max()
            accepted, branch_b = working.long(), torch.zeros_like(working)
            if M > 0:
                stack = cands[:M]
                if bool(alt_need.any()):
                    stack = stack + [_set(cands[0], pos[:, 1], alt.clamp(min=0))]
                vout = st.backbone_candidates(torch.stack(stack, 1), self.verify, rows=(need > 0) | alt_need)
                for k in range(1, min(M, Kmax - 1) + 1):  # draft k + 1 vs the backbone's pick on C(k)
                    m = (cands[k - 1] == st.mask_id) & st.active[:, None]
                    p, t, _, _ = static_pick(vout.logits[:, k - 1], m, st.mask_id)
                    on = (accepted == k) & ~branch_b & (p == pos[:, k])
                    ok = on & (n_drafts > k) & (t == tok[:, k])
                    if k == 1:  # the runner-up at draft 2's slot: C(2b), a leaf
                        branch_b = on & has_alt & ~ok & (t == alt)
                        ok = ok | branch_b
                    accepted = accepted + ok.long()
                chain_sel = (accepted - 1).clamp(min=0, max=M - 1)
                sel = torch.where(branch_b & alt_need, len(stack) - 1, chain_sel)
                logits, hidden = vout.logits[ar, sel], vout.hidden[ar, sel]
            tok = torch.where(branch_b[:, None] & (torch.arange(tok.shape[1], device=tok.device) == 1)[None],
                              alt[:, None], tok)  # fmt: skip
            self._accept(st, working, pos, tok, accepted)
            st.step += 1
            n_masked = st.masked.sum(1)
            mx = int(n_masked.max())
