"""No-MRP controls of the MRP decoding modes (issue 27): what the claims subtract from MRP to isolate the head.

    from mrp_repro.decoding.controls import RandomVeto, untrained_head
    RandomVeto(0.5, head=head, seed=0)      # remask(0.5, tau)'s revocation count, random choice of which
    untrained_head(head, seed=0)            # the same shape, structured init, never trained: direct(K)'s control

- `RandomVeto(threshold, head, seed=0, pick="random")`: dynamic decoding at τ exactly as `Remask(τ, "tau")`, and
  on every step the head judges the fresh reveals exactly as that rule does (the same call, the same charge in
  `mrp_forwards`), which gives the number n of reveals the rule would revoke on this state; the control then
  revokes n reveals drawn uniformly at random from the same candidates (fresh reveals but the step's top one,
  which the rule never revokes), instead of the ones the head picked. So on every state it decodes, it revokes as
  many tokens as MRP would (per step, hence per block), at the same head cost; only *which* tokens differs.
  Seeded: one torch.Generator per generate() call, seeded with `seed`, so a batch decodes identically wherever
  it runs (measure.sharded hands out the same batches). pick="head" revokes the head's own choice: token for
  token Remask(τ, "tau") (tests/test_controls.py checks it, which is what shows the count is MRP's).
  Matching per state rather than replaying the MRP run's per-block totals keeps the count exact wherever the two
  trajectories part (a replayed quota can be infeasible: a block whose later steps reveal one token at a time
  has nothing left to revoke); in the first step of every block both decode the same state.
- `untrained_head(head, seed)`: a head of the same shape with upstream's structured init (eh_proj passes h_A
  through), never trained. The zero-out init (C = 0) needs no decode of its own: direct(K) with C = 0 picks from
  A alone, which is naive MTP at the same K (mode naive, already in the grid).
"""

from __future__ import annotations

import torch

from mrp_repro.decoding.engine import BlockState
from mrp_repro.decoding.mrp_modes import Direct, Remask, _rc

__all__ = ["RandomVeto", "UntrainedDirect", "untrained_head", "CONTROL_RULE", "UNTRAINED_INIT"]

#: the runs column `rule` of the random-veto rows (mode remask): never a rule of REMASK_RULES, so no table of the
#: MRP rules pools them
CONTROL_RULE = "random-veto"
#: the init of the untrained direct-mode control (mrp.MRPHead.init_weights)
UNTRAINED_INIT = "structured"


class RandomVeto(Remask):
    def __init__(self, threshold: float, head=None, seed: int = 0, pick: str = "random"):
        if pick not in ("random", "head"):
            raise ValueError("pick: random (the control) or head (the MRP rule itself, for tests)")
        super().__init__(threshold, "tau", head=head)
        self.seed, self.pick = seed, pick
        self.rule = CONTROL_RULE  # the runs column: never pooled with remask(τ, tau)'s rows
        self.name = f"random_veto({threshold},tau)" if pick == "random" else f"head_veto({threshold},tau)"

    def begin(self, model, batch, capacity, device, static_cache=False):
        ctx = super().begin(model, batch, capacity, device, static_cache)
        ctx["gen"] = torch.Generator(device="cpu").manual_seed(self.seed)
        ctx["counts"] = []  # (block, step, (B,) revoked) per judged step: what the tests compare
        return ctx

    def _revocations(self, st, fresh, top, keep, judge) -> torch.Tensor:
        mrp = super()._revocations(st, fresh, top, keep, judge)  # what remask(τ, tau) revokes on this state
        sel = mrp if self.pick == "head" else self._random(st, fresh & ~top & judge[:, None], mrp.sum(1))
        st.ctx["counts"].append((st.block, st.step, sel.sum(1).cpu()))
        return sel

    def _judge(self, st, out, fresh, top, tok, conf, judge) -> torch.Tensor:
        """Remask's rule tau, verbatim: one head pass, corrected confidence read at the fresh reveals."""
        h_C = self._head(st, out.hidden, st.ids, count=judge)
        A, C = self._split(st, out.logits, out.hidden, h_C)
        return fresh & ((_rc(A, C, st.ids).max_prob >= self.tau) | top)

    def _random(self, st: BlockState, cand: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        """n[r] of row r's candidate slots, uniformly at random (random scores, the n highest)."""
        B, L = cand.shape
        score = torch.rand(B, L, generator=st.ctx["gen"]).to(cand.device).masked_fill(~cand, -1.0)
        order = torch.sort(score, dim=1, descending=True, stable=True).indices
        rank = torch.empty_like(order).scatter_(1, order, torch.arange(L, device=cand.device).expand(B, L))
        return cand & (rank < n[:, None])


class UntrainedDirect(Direct):
    """Direct(steps) with an untrained head: named apart so its rows never pool with the trained head's."""

    def __init__(self, steps: int, head=None):
        super().__init__(steps, head=head)
        self.name = f"direct({steps},untrained)"


def untrained_head(head, seed: int = 0, scheme: str = UNTRAINED_INIT):
    """A head of `head`'s shape, objective, device and dtype, initialised with `scheme` (seeded), never trained."""
    from mrp_repro.mrp import MRPHead

    p = head.eh_proj.weight
    fresh = MRPHead(head.config, head.num_layers, head.objective)
    fresh.init_weights(scheme, generator=torch.Generator().manual_seed(seed))
    return fresh.to(device=p.device, dtype=p.dtype).eval()
