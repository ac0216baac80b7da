"""No-MRP controls of the MRP decoding modes (issues 27, 35): what the claims subtract from MRP to isolate the head.

    from mrp_repro.decoding.controls import RandomVeto, ConfidenceVeto, untrained_head
    RandomVeto(0.5, head=head, seed=0)      # remask(0.5, tau)'s revocations, per state and in total; random choice
    ConfidenceVeto(0.5, head=head)          # as many, the fresh reveals of lowest backbone confidence (head-free pick)
    untrained_head(head, seed=0)            # the same shape, structured init, never trained: direct(K)'s control

The remask controls (`MatchedVeto` and its two picks) decode dynamic(τ) exactly as `Remask(τ, "tau")` does, and on
every step the head judges the fresh reveals exactly as that rule does (the same call, the same charge in
`mrp_forwards`), which gives the number n of reveals the rule would revoke on this state. The control then revokes
as many of the same candidates (fresh reveals but the step's top one, which the rule never revokes), chosen without
the head: `pick="random"` uniformly at random (seeded: one torch.Generator per generate() call), `pick="confidence"`
the ones of lowest backbone confidence on this state (ties: the higher index first), `pick="head"` the head's own
choice (token for token Remask(τ, "tau"): tests/test_controls.py checks it, which shows the counts are MRP's).

How many, `match`:
- "state": n on every state (the head's count on the control's own state). Exact per state, but not in total: once
  the control's trajectory parts from MRP's, the rule finds fewer reveals to revoke on the control's states (tiny,
  τ = 0.5: 0.94 vs 1.11 per prompt on synth-math, 1.06 vs 1.35 on synth-code).
- "total" (the default): per state and in total. At the start of each block (the same state for both) remask(τ,
  tau) decodes the block in a dry run (its forwards and head calls neither counted nor traced, as the oracle
  drafter's), which gives its per-step cumulative revocations M(s) and its block total T. On each judged step s
  the control revokes k = max(n, M(s) + c − C) of its candidates (C: what it revoked in the block so far; c: the
  shortfall carried in from the row's earlier blocks; a deficit against MRP's own schedule is made up as soon as
  there are candidates), never more than T + c − C; so a block revokes T (plus what the earlier ones could not)
  wherever the control's states offer the candidates, a shortfall (a block whose last steps reveal one token at a
  time) passes to the next block, and per state it revokes at least MRP's count on that state until the total is
  reached (ctx["blocks"]: T, c and the count per block). Over a prompt: the sum of what MRP revokes on each of the
  control's blocks from the control's block start (the first block: the MRP run's own), less what its last block
  could not place. Measured on tiny (τ = 0.5, 200 prompts): MRP's own run 1.115 / 1.355 revocations per prompt
  (synth-math / synth-code); per-state match 0.940 / 1.065; docs/claims.md has the total match's.
  The dry run costs a second decode of every block: the control's wall clock is not a speed (no verdict reads it).

- `untrained_head(head, seed)`: a head of the same shape with upstream's structured init (eh_proj passes h_A
  through), never trained. The zero-out init (C = 0) needs no decode of its own: direct(K) with C = 0 picks from
  A alone, which is naive MTP at the same K (mode naive, already in the grid).
"""

from __future__ import annotations

import torch

from mrp_repro.decoding.engine import BlockState, Stats
from mrp_repro.decoding.mrp_modes import Direct, Remask, _rc

__all__ = ["MatchedVeto", "RandomVeto", "ConfidenceVeto", "UntrainedDirect", "untrained_head", "CONTROL_RULE",
           "CONFIDENCE_RULE", "CONTROL_RULES", "PICKS", "MATCHES", "UNTRAINED_INIT"]  # fmt: skip

#: the runs column `rule` of the random-veto rows (mode remask): never a rule of REMASK_RULES, so no table of the
#: MRP rules pools them
CONTROL_RULE = "random-veto"
#: the rule column of the head-free confidence veto's rows
CONFIDENCE_RULE = "confidence-veto"
#: every remask control's rule column
CONTROL_RULES = (CONTROL_RULE, CONFIDENCE_RULE)
PICKS = ("random", "confidence", "head")
MATCHES = ("state", "total")
#: the init of the untrained direct-mode control (mrp.MRPHead.init_weights)
UNTRAINED_INIT = "structured"


class _DryRun(Remask):
    """Remask(τ, tau) recording its revocations per step (the matched controls' reference schedule of one block)."""

    def __init__(self, threshold: float, head):
        super().__init__(threshold, "tau", head=head)
        self.steps: list[tuple[int, torch.Tensor]] = []

    def _revocations(self, st, fresh, top, keep, judge) -> torch.Tensor:
        sel = super()._revocations(st, fresh, top, keep, judge)
        self.steps.append((st.step, sel.sum(1)))
        return sel


class MatchedVeto(Remask):
    """Dynamic(τ) with remask(τ, tau)'s revocation counts and a head-free choice of which reveals (module docstring)."""

    def __init__(self, threshold: float, head=None, seed: int = 0, pick: str = "random", match: str = "total"):
        if pick not in PICKS:
            raise ValueError(f"pick: one of {PICKS} (head: the MRP rule itself, for tests)")
        if match not in MATCHES:
            raise ValueError(f"match: one of {MATCHES}")
        super().__init__(threshold, "tau", head=head)
        self.seed, self.pick, self.match = seed, pick, match
        self.rule = CONFIDENCE_RULE if pick == "confidence" else CONTROL_RULE  # never pooled with remask's rows
        base = {"random": "random_veto", "confidence": "confidence_veto", "head": "head_veto"}[pick]
        # match "state" keeps the historical name, whose rows tables before issue 35 hold
        self.name = f"{base}({threshold},tau)" if match == "state" else f"{base}({threshold},tau,total)"

    def begin(self, model, batch, capacity, device, static_cache=False):
        ctx = super().begin(model, batch, capacity, device, static_cache)
        ctx["gen"] = torch.Generator(device="cpu").manual_seed(self.seed)
        # (block, step, (B,) revoked, (B,) the head's count on this state) per judged step: what the tests compare
        ctx["counts"] = []
        # match total: (block, (B,) MRP's dry-run total, (B,) the shortfall carried in, (B,) revoked) per block
        ctx["blocks"] = []
        ctx["carry"] = torch.zeros(batch, dtype=torch.long, device=device)
        return ctx

    def denoise(self, st: BlockState) -> None:
        ctx = st.ctx
        ctx["block_start"], ctx["dry"] = st.ids.clone(), None
        ctx["revoked_block"] = torch.zeros(st.ids.shape[0], dtype=torch.long, device=st.ids.device)
        super().denoise(st)
        if self.match == "total" and ctx["dry"] is not None:
            T, carry, done = ctx["dry"][:, -1], ctx["carry"], ctx["revoked_block"]
            ctx["blocks"].append((st.block, T.cpu(), carry.cpu(), done.cpu()))
            ctx["carry"] = (T + carry - done).clamp(min=0)  # a block's shortfall is made up in the next one

    def _judge(self, st, out, fresh, top, tok, conf, judge) -> torch.Tensor:
        """Remask's rule tau, verbatim: one head pass, corrected confidence read at the fresh reveals."""
        st.ctx["conf"] = conf  # the backbone's confidence on this state: the confidence pick reads it
        h_C = self._head(st, out.hidden, st.ids, count=judge)
        A, C = self._split(st, out.logits, out.hidden, h_C)
        return fresh & ((_rc(A, C, st.ids).max_prob >= self.tau) | top)

    def _revocations(self, st, fresh, top, keep, judge) -> torch.Tensor:
        mrp = super()._revocations(st, fresh, top, keep, judge)  # what remask(τ, tau) revokes on this state
        n_state = mrp.sum(1)
        n = n_state
        if self.match == "total":
            M, T = self._schedule(st)
            done, carry = st.ctx["revoked_block"], st.ctx["carry"]
            behind = M[:, min(st.step, M.shape[1] - 1)] + carry - done
            n = torch.minimum(torch.maximum(n_state, behind), T + carry - done).clamp(min=0)
        cand = fresh & ~top & judge[:, None]
        if self.pick == "head":
            sel = mrp if self.match == "state" else self._lowest(cand, ~mrp, n)  # the head's, topped up if behind
        elif self.pick == "random":  # the n highest of uniform draws (the draws of the control before issue 35)
            score = torch.rand(cand.shape, generator=st.ctx["gen"]).to(cand.device)
            sel = self._lowest(cand, -score, n)
        else:  # the lowest backbone confidence first; ties: the higher index (the rule's top reveal is lowest-index)
            sel = self._lowest(cand, st.ctx["conf"], n)
        st.ctx["revoked_block"] = st.ctx["revoked_block"] + sel.sum(1)
        st.ctx["counts"].append((st.block, st.step, sel.sum(1).cpu(), n_state.cpu()))
        return sel

    @staticmethod
    def _lowest(cand: torch.Tensor, score: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        """n[r] of row r's candidate slots, those of lowest `score` (ties: the higher index first)."""
        B, L = cand.shape
        s = score.to(torch.float64).masked_fill(~cand, float("inf"))
        rev = torch.arange(L - 1, -1, -1, device=cand.device)  # the higher index first, then a stable sort by score
        order = rev[torch.argsort(s[:, rev], dim=1, stable=True)]
        rank = torch.empty_like(order).scatter_(1, order, torch.arange(L, device=cand.device).expand(B, L))
        return cand & (rank < n[:, None])

    def _schedule(self, st: BlockState) -> tuple[torch.Tensor, torch.Tensor]:
        """(M (B, S) remask(τ, tau)'s cumulative revocations after each step of its dry run of this block from the
        block's start state, T (B,) its total), computed once per block. The dry run reads the caches the block
        reads (a block forward never writes them; the previous block's commit has run: this is called after the
        block's first forward) and counts into a Stats of its own."""
        ctx = st.ctx
        if ctx["dry"] is None:
            dry = _DryRun(self.tau, self.head)
            B = st.ids.shape[0]
            ds = BlockState(st.model, st.cache, ctx["block_start"].clone(), st.positions, st.key_valid, st.active,
                            st.mask_id, st.block, Stats(B, st.ids.device), None, ctx)  # fmt: skip
            dry.denoise(ds)
            S = max([s for s, _ in dry.steps], default=0) + 1
            per = torch.zeros(B, S, dtype=torch.long, device=st.ids.device)
            for s, k in dry.steps:
                per[:, s] += k
            ctx["dry"] = per.cumsum(1)
        M = ctx["dry"]
        return M, M[:, -1]


class RandomVeto(MatchedVeto):
    """The random veto: remask(τ, tau)'s counts (match: "total", per state and in total; "state": per state only)."""

    def __init__(self, threshold: float, head=None, seed: int = 0, pick: str = "random", match: str = "total"):
        if pick not in ("random", "head"):
            raise ValueError("pick: random (the control) or head (the MRP rule itself, for tests)")
        super().__init__(threshold, head=head, seed=seed, pick=pick, match=match)


class ConfidenceVeto(MatchedVeto):
    """The head-free veto: as many as remask(τ, tau), the fresh reveals of lowest backbone confidence."""

    def __init__(self, threshold: float, head=None, match: str = "total"):
        super().__init__(threshold, head=head, pick="confidence", match=match)


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
