"""MRP decoding modes (METHOD.md §3-5) as policies of the block-diffusion engine.

    from mrp_repro.decoding import generate, Static
    from mrp_repro.decoding.mrp_modes import Speculative, Direct, NaiveLookahead, Remask
    generate(model, prompts, Speculative(3, "mrp", head=head), block_size, mask_id, eos_ids, max_new_tokens)

- `Speculative(K, drafter, head=None, verify="exact")` (§3, lossless): per round, draft 1 = the backbone's static
  pick on the current state S; drafts 2..K from a drafter (`mrp`: chained MRP head steps,
  `oracle`: the backbone's own future picks from uncounted plain forwards, the ceiling,
  `naive`: the next most confident positions of the same logits); one verify forward of
  the candidate states C(1..K) (C(k) = S with drafts 1..k revealed); draft k+1 is accepted iff the
  backbone's static pick on C(k) is exactly it; with j accepted the state becomes C(j) and the
  verify logits of C(j) seed the next round. A candidate with no mask left is not forwarded (its
  logits are never needed), so K = 1 costs exactly Static(1)'s forwards. The default verify
  ("exact", decoding.verify: the candidates folded into the batch of one backbone call on CPU; off CPU
  "checked", the same fold wherever a first call per shape is bitwise the block forwards, else one
  block forward each) gives logits bitwise equal to forward_block on the same state, so the output is
  token-identical to Static(1) in bf16 too; verify="packed" (block-diagonal packing along the sequence) does not.
- `Direct(steps, head)` (§4, lossy): per backbone forward, reveal the static pick, then `steps`
  more tokens from the head's chained corrected logits, unverified.
- `NaiveLookahead(K)`: K reveals per forward from one set of uncorrected logits (= Static(K)).
- `Remask(threshold, rule, delta=None, head=...)` (§5): dynamic decoding (reveal every masked slot
  with confidence > tau, or the top one) whose fresh reveals are judged by the head; revoked ones
  go back to [MASK]. Rules:
    `tau`        paper v2: ONE head pass conditioned on all fresh reveals; the corrected confidence
                 (max softmax of the corrected logits A + C) is read AT each fresh reveal position;
                 reveals whose corrected confidence < tau are revoked.
    `delta`      released code: the same single pass; raw residual C = lm_head(h_C); a reveal with
                 |C[pos, token]| > delta is vetoed; if every fresh reveal of a row is vetoed, the
                 one with the smallest |C| is kept.
    `loo`        leave-one-out: each fresh reveal p is judged at a MASKED p with the other fresh
                 reveals present (all variants of all rows folded into one batched head call);
                 keep p iff the corrected argmax at p equals its token ("the backbone would still
                 write this token here after the other reveals"; parameter-free; criterion="prob"
                 instead keeps p iff the corrected probability of its token is >= tau).
    `sequential` reveals in confidence order; p is judged (same criterion as loo) with only the
                 already-kept reveals present; a new head call whenever the kept set grew.
    `logp-delta` leave-one-out context; revoke p if log softmax(A+C)[p, tok] - log softmax(A)[p, tok]
                 < -delta (the change of the token's log-probability the head predicts).
  Every step keeps its most confident reveal (or, for `delta`, the smallest-|C| one), so each
  forward makes progress and decoding always terminates.

Accounting: backbone forwards through BlockState (a packed verify counts 1 per working row);
`mrp_forwards` counts one per row involved in a head call (a batched leave-one-out call = 1).
Trace events: reveal, revoke (BlockState), draft and accept (speculative rounds).

The head's own KV cache is filled in `on_commit` with the commit forward's hidden states (a prefill
holds several blocks: it is written block-causally once the block size is known, at the first
`denoise`).
"""

from __future__ import annotations

import torch

from mrp_repro.decoding.engine import BlockState, Policy, Static, masked_confidence, top_masked
from mrp_repro.kernels import residual_confidence
from mrp_repro.model import VERIFY_PATHS

__all__ = ["Speculative", "Direct", "NaiveLookahead", "Remask", "DRAFTERS", "REMASK_RULES", "MRPPolicy"]

DRAFTERS = ("mrp", "oracle", "naive")
REMASK_RULES = ("tau", "delta", "loo", "sequential", "logp-delta")
DEFAULT_DELTA = {"delta": 2.0, "logp-delta": 1.0}


# -- helpers ---------------------------------------------------------------------------------------
def static_pick(logits: torch.Tensor, masked: torch.Tensor, mask_id: int):
    """The backbone's static pick per row, exactly as `Static(1)` chooses it (the most confident masked
    slot, ties to the lowest index: torch's argmax returns the first maximum).

    -> pos (B,) (-1 where nothing is masked), tok (B,), and the full (tok, conf) of the logits."""
    tok, conf = masked_confidence(logits, masked, mask_id)
    pos = torch.where(masked.any(1), conf.argmax(1), -1)
    t = tok.gather(1, pos.clamp(min=0)[:, None]).squeeze(1)
    return pos, t, tok, conf


def draft_pick(logits: torch.Tensor, masked: torch.Tensor, mask_id: int):
    """A head draft's pick: static_pick on the head's logits, the same confidence computation and tie rule as
    the backbone's pick. Among near-tied slots (every list slot of the synthetic tasks) the verify accepts a
    draft only at the slot the backbone picks, so the draft must round as that pick does: ranking by
    zmax - logsumexp instead, which rounds otherwise than the confidence kernel, cost the tiny head 4% of its
    TPF (1.79 -> 1.72, synth-math K=3). -> pos (B,), tok (B,)."""
    pos, tok, _, _ = static_pick(logits, masked, mask_id)
    return pos, tok


def _set(ids: torch.Tensor, pos: torch.Tensor, tok: torch.Tensor) -> torch.Tensor:
    """ids with ids[r, pos[r]] = tok[r] where pos[r] >= 0 (a copy; no host sync)."""
    idx = pos.clamp(min=0)[:, None]
    vals = torch.where(pos[:, None] >= 0, tok[:, None], ids.gather(1, idx))
    return ids.clone().scatter_(1, idx, vals)


def _onehot(ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """(B, L) bool with [r, pos[r]] set where pos[r] >= 0."""
    return torch.zeros_like(ids, dtype=torch.bool).scatter_(1, pos.clamp(min=0)[:, None], (pos >= 0)[:, None])


class MRPPolicy(Policy):
    """Base of the policies that use an MRP head: keeps the head's KV cache in step with the backbone's."""

    head = None

    def begin(self, model, batch, capacity, device, static_cache=False):
        if self.head is None:
            return None
        return dict(model=model, cache=self.head.new_cache(batch, capacity, static=static_cache), pending=[])

    def on_commit(self, ctx, out, ids, positions, key_valid):
        if ctx is not None:
            ctx["pending"].append((out.hidden, ids.clone(), positions, key_valid))

    def _flush(self, st: BlockState):
        """Write pending commits into the head's cache: before the head's first use in a block, i.e. after the
        block's first backbone() (which, with fuse_commit, is what commits the previous block)."""
        ctx = st.ctx
        if ctx is None or not ctx["pending"]:
            return
        L = st.ids.shape[1]
        for hidden, ids, pos, kv in ctx["pending"]:
            self.head.commit(hidden, ids, pos, st.model.embed_tokens, ctx["cache"], kv, block_size=L)
        ctx["pending"].clear()

    def _head(self, st: BlockState, h_in, ids_after, rows: torch.Tensor | None = None, count=None):
        """h_C of the head on (h_in, ids_after); rows selects batch rows (a folded batch), count (B,)
        bool marks the rows charged one MRP forward."""
        cache = st.ctx["cache"]
        positions, kv = st.positions, st.key_valid
        if rows is not None:
            cache = cache.select_rows(rows)
            positions, kv = positions[rows], kv[rows]
        if count is not None:
            st._count("mrp_forwards", count)
        return self.head(h_in, ids_after, positions, st.model.embed_tokens, cache, kv)

    def _split(self, st: BlockState, A: torch.Tensor, h_in: torch.Tensor, h_C: torch.Tensor):
        """(A, C_eff) with A + C_eff = the head's corrected logits; [MASK] never a candidate.

        Residual heads: C_eff = lm_head(h_C) = C. Direct heads predict B itself: C_eff = lm_head(h_C) - A."""
        mask_id = st.mask_id
        A = A.clone()
        A[..., mask_id] = float("-inf")
        C = st.model.lm_head(h_C)
        if self.head.objective != "residual":
            C = st.model.lm_head(self.head.corrected(h_in, h_C)) - A
        C = C.clone()
        C[..., mask_id] = 0.0
        return A, C


def _rc(A, C, tokens=None):
    """residual_confidence over (..., L, V) tensors, reshaped back to (..., L)."""
    lead = A.shape[:-1]
    V = A.shape[-1]
    out = residual_confidence(A.reshape(-1, V), C.reshape(-1, V), 1.0, None if tokens is None else tokens.reshape(-1))
    return type(out)(*(None if x is None else x.view(lead) for x in out))


# -- speculative -----------------------------------------------------------------------------------
class Speculative(MRPPolicy):
    """verify: how the candidates are scored (model.VERIFY_PATHS). The default "exact" gives logits
    bitwise equal to Static(1)'s forward_block on the same state, so the output is token-identical to
    Static(1) in every dtype; "packed" (one block-diagonal call) rounds differently and can flip
    near-ties in bf16 (rates: `python -m mrp_repro.decoding.mismatch`).

    A round is batched tensor work with one host sync (the largest masked count, which sizes the round)."""

    def __init__(self, K: int, drafter: str = "mrp", head=None, verify: str = "exact"):
        if K < 1:
            raise ValueError("K must be >= 1")
        if drafter not in DRAFTERS:
            raise ValueError(f"drafter {drafter!r}: choose one of {DRAFTERS}")
        if drafter == "mrp" and head is None:
            raise ValueError("the mrp drafter needs a head")
        if verify not in VERIFY_PATHS:
            raise ValueError(f"verify={verify!r}: choose one of {VERIFY_PATHS}")
        self.K, self.drafter, self.verify = K, drafter, verify
        self.head = head if drafter == "mrp" else None
        # The default keeps the historical name, which the result tables key on.
        self.name = f"speculative({K},{drafter})" if verify == "exact" else f"speculative({K},{drafter},{verify})"

    def _drafts(self, st: BlockState, logits, hidden, n_drafts: torch.Tensor, Kmax: int):
        """Drafts 1..Kmax per row: pos (B, Kmax) (-1 past a row's own n_drafts), tok (B, Kmax), and the
        candidate states [C(1), ..., C(Kmax)]."""
        masked0 = st.masked
        p1, t1, tok0, conf0 = static_pick(logits, masked0, st.mask_id)
        pos, toks = [p1], [t1]
        cands = [_set(st.ids, p1, t1)]
        if self.drafter == "naive" and Kmax > 1:
            order = torch.sort(conf0, dim=1, descending=True, stable=True).indices
        h = hidden
        for k in range(1, Kmax):  # draft k+1 (1-based), drawn on C(k)
            live = n_drafts > k  # rows that still draft
            cur = cands[-1]
            m = (cur == st.mask_id) & st.active[:, None]
            if self.drafter == "naive":
                p = order[:, k]
                t = tok0.gather(1, p[:, None]).squeeze(1)
            elif self.drafter == "oracle":  # the backbone's own next pick: NOT counted as a forward
                out = st.model.forward_block(cur, st.positions, st.cache, st.key_valid)
                p, t, _, _ = static_pick(out.logits, m, st.mask_id)
            else:  # mrp: chain head steps from the seed hidden state
                h = self.head.step(h, cur, st.positions, st.model.embed_tokens, st.ctx["cache"], st.key_valid)
                st._count("mrp_forwards", live)
                p, t = draft_pick(st.model.lm_head(h), m, st.mask_id)
            p = torch.where(live, p, -1)
            pos.append(p)
            toks.append(t)
            cands.append(_set(cur, p, t))
        return torch.stack(pos, 1), torch.stack(toks, 1), cands

    def _seed(self, st: BlockState):
        """The block's first backbone forward: (n_masked (B,), mx, logits, hidden), or None when nothing is masked."""
        self._flush(st)
        n_masked = st.masked.sum(1)
        mx = int(n_masked.max())  # the round's one host sync
        if mx == 0:
            return None
        out = st.backbone()
        self._flush(st)  # a fused commit wrote the previous block just now
        return n_masked, mx, out.logits, out.hidden

    def denoise(self, st: BlockState) -> None:
        if (seed := self._seed(st)) is None:
            return
        n_masked, mx, logits, hidden = seed
        ar = torch.arange(st.ids.shape[0], device=st.ids.device)
        while mx > 0:
            working = n_masked > 0
            n_drafts = torch.clamp(n_masked, max=self.K)  # 0 for idle rows
            Kmax = min(self.K, mx)
            pos, tok, cands = self._drafts(st, logits, hidden, n_drafts, Kmax)
            if st.trace is not None:
                st.trace.add_list("draft", st.block, st.step, pos.masked_fill(~working[:, None], -1), tok)
            st._count("drafted", working, n_drafts)
            st._count("rounds", working)
            # Candidates the verify must score: C(1..n_drafts), less a final state with no mask left: a row
            # with one masked slot left (need 0) is finished by its static pick and takes no verify.
            need = torch.where(n_drafts == n_masked, n_drafts - 1, n_drafts)
            M = min(self.K, mx - 1)  # = need.max()
            accepted = working.long()
            if M > 0:
                vout = st.backbone_candidates(torch.stack(cands[:M], 1), self.verify, rows=need > 0)
                for k in range(1, min(M, Kmax - 1) + 1):  # draft k+1 vs the backbone's pick on C(k)
                    m = (cands[k - 1] == st.mask_id) & st.active[:, None]
                    p, t, _, _ = static_pick(vout.logits[:, k - 1], m, st.mask_id)
                    ok = (accepted == k) & (n_drafts > k) & (p == pos[:, k]) & (t == tok[:, k])
                    accepted = accepted + ok.long()
                sel = (accepted - 1).clamp(min=0, max=M - 1)
                logits, hidden = vout.logits[ar, sel], vout.hidden[ar, sel]
            self._accept(st, working, pos, tok, accepted)
            st.step += 1
            n_masked = st.masked.sum(1)
            mx = int(n_masked.max())

    def _accept(self, st, working, pos, tok, accepted):
        """Reveal drafts 1..accepted[r] of every working row, in one scatter."""
        K = pos.shape[1]
        take = (torch.arange(K, device=pos.device)[None, :] < accepted[:, None]) & (pos >= 0) & working[:, None]
        B, L = st.ids.shape
        # Drafts not taken scatter into a spare column L, so they never collide with a taken one.
        idx = torch.where(take, pos, L)
        sel = torch.zeros(B, L + 1, dtype=torch.bool, device=pos.device).scatter_(1, idx, True)[:, :L]
        vals = torch.cat([st.ids, st.ids[:, :1]], 1).scatter_(1, idx, tok)[:, :L]
        if st.trace is not None:
            st.trace.add_list("accept", st.block, st.step, pos.masked_fill(~take, -1), tok)
        st._count("accepted", working, accepted)
        st.stats.accept.append(torch.where(working, accepted, -1))
        st.reveal(sel, vals)


# -- direct and naive lookahead ----------------------------------------------------------------------
class Direct(MRPPolicy):
    """Per backbone forward: the static pick, then `steps` tokens from the head's chained corrected logits."""

    def __init__(self, steps: int, head=None):
        if head is None:
            raise ValueError("Direct needs an MRP head")
        self.steps, self.head = steps, head
        self.name = f"direct({steps})"

    def denoise(self, st: BlockState) -> None:
        self._flush(st)
        n_masked = st.masked.sum(1)
        mx = int(n_masked.max())  # one host sync per backbone forward
        while mx > 0:
            out = st.backbone()
            self._flush(st)
            p, t, _, _ = static_pick(out.logits, st.masked, st.mask_id)
            st.reveal(_onehot(st.ids, p), _set(st.ids, p, t))
            h = out.hidden
            for i in range(min(self.steps, mx - 1)):  # rows with more than i masks left after the pick
                live = n_masked - 1 > i
                h = self.head.step(h, st.ids, st.positions, st.model.embed_tokens, st.ctx["cache"], st.key_valid)
                st._count("mrp_forwards", live)
                p, t, _, _ = static_pick(st.model.lm_head(h), st.masked, st.mask_id)
                st.reveal(_onehot(st.ids, p), _set(st.ids, p, t))
            st.step += 1
            n_masked = st.masked.sum(1)
            mx = int(n_masked.max())


class NaiveLookahead(Static):
    """K reveals from one set of uncorrected logits per forward: Static(K), named for the tables by the paper's
    lookahead K = K - 1 (tokens beyond the backbone's own pick): naive_mtp(1) reveals 2 per forward, as direct(1)."""

    def __init__(self, K: int):
        super().__init__(K)
        self.name = f"naive_mtp({K - 1})"


# -- remasking ---------------------------------------------------------------------------------------
class Remask(MRPPolicy):
    def __init__(self, threshold: float, rule: str = "loo", delta: float | None = None, head=None,
                 criterion: str = "argmax"):  # fmt: skip
        if rule not in REMASK_RULES:
            raise ValueError(f"rule {rule!r}: choose one of {REMASK_RULES}")
        if head is None:
            raise ValueError("Remask needs an MRP head")
        if criterion not in ("argmax", "prob"):
            raise ValueError("criterion: argmax or prob")
        self.tau, self.rule, self.head, self.criterion = threshold, rule, head, criterion
        self.delta = delta if delta is not None else DEFAULT_DELTA.get(rule)
        extra = f",{self.delta}" if rule in DEFAULT_DELTA else ""
        self.name = f"remask({threshold},{rule}{extra})"

    def denoise(self, st: BlockState) -> None:
        self._flush(st)
        while st.rows_needing_work().any():
            masked = st.masked
            out = st.backbone()
            self._flush(st)
            tok, conf = masked_confidence(out.logits, masked, st.mask_id)
            top = top_masked(conf, masked, 1)
            fresh = ((conf > self.tau) & masked) | top
            st.reveal(fresh, tok)
            judge = fresh.sum(1) > 1  # a lone reveal is kept by every rule
            if judge.any():
                keep = self._judge(st, out, fresh, top, tok, conf, judge)
                st.revoke(self._revocations(st, fresh, top, keep, judge))
            st.step += 1

    def _revocations(self, st, fresh, top, keep, judge) -> torch.Tensor:
        """(B, L) the fresh reveals to revoke on this state: those the rule did not keep (decoding.controls swaps
        in a random choice of as many)."""
        return fresh & ~keep & judge[:, None]

    def _judge(self, st, out, fresh, top, tok, conf, judge) -> torch.Tensor:
        """(B, L) bool: which fresh reveals stay (rows not in `judge` are ignored)."""
        if self.rule in ("tau", "delta"):
            h_C = self._head(st, out.hidden, st.ids, count=judge)
            A, C = self._split(st, out.logits, out.hidden, h_C)
            rc = _rc(A, C, st.ids)
            if self.rule == "tau":  # corrected confidence read at the (already revealed) positions
                return fresh & ((rc.max_prob >= self.tau) | top)
            absC = rc.c_at_token.abs().masked_fill(~fresh, float("inf"))
            keep = fresh & (absC <= self.delta)
            smallest = torch.zeros_like(fresh)
            smallest.scatter_(1, absC.argmin(1, keepdim=True), True)
            return torch.where(keep.any(1, keepdim=True), keep, smallest & fresh)
        if self.rule == "sequential":
            return self._sequential(st, out, fresh, top, tok, conf, judge)
        # loo / logp-delta: every fresh reveal of every judged row, masked, the others present: one call
        rows, cols = (fresh & judge[:, None]).nonzero(as_tuple=True)
        ids = st.ids[rows].clone()
        ids[torch.arange(len(rows)), cols] = st.mask_id
        h_C = self._head(st, out.hidden[rows], ids, rows=rows, count=judge)
        ar = torch.arange(len(rows), device=rows.device)
        # only position p of each variant is read: gather before lm_head ((N, V), never (N, L, V))
        A, C = self._split(st, out.logits[rows, cols], out.hidden[rows, cols], h_C[ar, cols])
        t = tok[rows, cols]
        rc = residual_confidence(A, C, 1.0, t)
        if self.rule == "logp-delta":
            ok = (rc.logp_at_token - rc.logp_base_at_token) >= -self.delta
        else:
            ok = self._ok(rc, t)
        keep = top.clone()
        keep[rows[ok], cols[ok]] = True
        return keep & fresh

    def _ok(self, rc, t):
        if self.criterion == "argmax":
            return rc.argmax == t
        return rc.logp_at_token.exp() >= self.tau

    def _sequential(self, st, out, fresh, top, tok, conf, judge):
        """Each judged row's fresh reveals but the top one, in descending confidence (ties: lowest index): the
        first the head accepts (self._ok), given the reveals kept so far, is kept; the ones scanned before it are
        dropped; one head call per kept reveal, for every row at once, until no row has candidates left."""
        B, L = fresh.shape
        keep = top & fresh
        cand = fresh & ~top & judge[:, None]  # (B, L) not yet scanned
        order = torch.sort(conf, dim=1, descending=True, stable=True).indices  # (B, L)
        rank = torch.empty_like(order).scatter_(1, order, torch.arange(L, device=order.device).expand(B, L))
        base = torch.where(fresh & ~top, torch.full_like(st.ids, st.mask_id), st.ids)  # S + top1 reveal
        while True:
            rows = cand.any(1)  # (B,)
            if not rows.any():  # the round's one host sync
                return keep
            h_C = self._head(st, out.hidden, base, count=rows)
            A, C = self._split(st, out.logits, out.hidden, h_C)
            ok = self._ok(_rc(A, C, tok), tok) & cand  # (B, L)
            first = torch.where(ok, rank, L).amin(1, keepdim=True)  # (B, 1) rank of the kept one; L: none
            kept = ok & (rank == first)
            keep |= kept
            base = torch.where(kept, tok, base)
            cand &= rank > first  # scanned: rejected, or kept; a row with none accepted is done
