"""A frozen copy of the decoding loop before issue 14 (per-row Python loops, list RowStats, dict trace), kept
to check that the vectorised engine gives the same tokens, RowStats and trace events. Not used by the package.
Only the on_commit call lost its cache_len_before argument (the policies' new signature)."""

# ruff: noqa
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from mrp_repro.decoding.engine import Policy, masked_confidence, top_masked
from mrp_repro.decoding.mrp_modes import DRAFTERS, MRPPolicy, Remask, residual_confidence
from mrp_repro.model import ModelOutput, SDARModel, VERIFY_PATHS

@dataclass
class RowStats:
    """Per-row accounting. A forward counts for a row only while that row needs it,
    so the numbers do not depend on which prompts share the batch."""

    denoise_forwards: int = 0  # backbone forwards inside the denoising loop (packed verify = 1)
    commit_forwards: int = 0  # forwards writing a finished block into the cache (prefill included)
    mrp_forwards: int = 0  # MRP head calls (batched leave-one-out = 1)
    tokens: int = 0  # positions revealed by denoising (net of revocations)
    revoked: int = 0  # reveals put back to [MASK] by remasking
    drafted: int = 0  # speculative drafts proposed
    accepted: int = 0  # speculative drafts accepted
    rounds: int = 0  # speculative rounds
    accept_lengths: list[int] = field(default_factory=list)

    @property
    def backbone_forwards(self) -> int:
        return self.denoise_forwards + self.commit_forwards

    @property
    def tpf(self) -> float:
        """Tokens per forward, upstream's definition: per forward inside the denoising loop."""
        return self.tokens / max(self.denoise_forwards, 1)


class BlockState:
    """Everything a policy sees and changes while one block is being denoised."""

    def __init__(self, model, cache, ids, positions, key_valid, active, mask_id, block, stats, trace, ctx):
        self.model: SDARModel = model
        self.cache = cache
        self.ids = ids  # (B, L) current tokens of the block, mask_id where still masked
        self.positions = positions  # (B, L)
        self.key_valid = key_valid  # (B, L) False on padding slots of finished rows
        self.active = active  # (B,) rows that denoise this block
        self.mask_id = mask_id
        self.block = block
        self.stats: list[RowStats] = stats
        self.trace = trace
        self.ctx = ctx  # the policy's per-generation state (e.g. the MRP head's cache)
        self.step = 0

    @property
    def masked(self) -> torch.Tensor:  # (B, L)
        return (self.ids == self.mask_id) & self.active[:, None]

    def rows_needing_work(self) -> torch.Tensor:  # (B,)
        return self.masked.any(1)

    def _count(self, name: str, rows: torch.Tensor, n: int = 1):
        for r in rows.nonzero().flatten().tolist():
            setattr(self.stats[r], name, getattr(self.stats[r], name) + n)

    def backbone(self, ids: torch.Tensor | None = None) -> ModelOutput:
        """Forward the block (B, L) against the cache; counts one forward per working row."""
        self._count("denoise_forwards", self.rows_needing_work())
        return self.model.forward_block(self.ids if ids is None else ids, self.positions, self.cache, self.key_valid)

    def backbone_candidates(self, cand_ids: torch.Tensor, verify: str = "exact") -> ModelOutput:
        """One verify of (B, M, L) candidate states (`verify`: a path of model.VERIFY_PATHS); one
        forward per working row, whatever the path (the paper's accounting: a verify is one pass)."""
        self._count("denoise_forwards", self.rows_needing_work())
        return self.model.forward_candidates(cand_ids, self.positions, self.cache, self.key_valid, verify=verify)

    def reveal(self, select: torch.Tensor, tokens: torch.Tensor, kind: str = "reveal"):
        """select (B, L) bool over masked slots; tokens (B, L) ids to write there."""
        select = select & self.masked
        self.ids = torch.where(select, tokens, self.ids)
        for r, p in select.nonzero().tolist():
            self.stats[r].tokens += 1
            self.trace.append(dict(row=r, block=self.block, step=self.step, kind=kind, pos=p, token=int(tokens[r, p])))

    def revoke(self, select: torch.Tensor):
        """Put revealed slots back to [MASK]."""
        for r, p in select.nonzero().tolist():
            self.stats[r].tokens -= 1
            self.stats[r].revoked += 1
            self.trace.append(
                dict(row=r, block=self.block, step=self.step, kind="revoke", pos=p, token=int(self.ids[r, p]))
            )
        self.ids = torch.where(select, torch.full_like(self.ids, self.mask_id), self.ids)


def legacy_static_pick(logits: torch.Tensor, masked: torch.Tensor, mask_id: int):
    """The backbone's static pick per row, exactly as `Static(1)` chooses it.

    -> pos (B,) (-1 where nothing is masked), tok (B,), and the full (tok, conf) of the logits."""
    tok, conf = masked_confidence(logits, masked, mask_id)
    sel = top_masked(conf, masked, 1)
    has = sel.any(1)
    pos = torch.where(has, sel.to(torch.int8).argmax(1), torch.full_like(has, -1, dtype=torch.long))
    t = tok.gather(1, pos.clamp(min=0)[:, None]).squeeze(1)
    return pos, t, tok, conf


def _set(ids: torch.Tensor, pos: torch.Tensor, tok: torch.Tensor) -> torch.Tensor:
    """ids with ids[r, pos[r]] = tok[r] where pos[r] >= 0 (a copy)."""
    out = ids.clone()
    rows = (pos >= 0).nonzero().flatten()
    out[rows, pos[rows]] = tok[rows]
    return out


def _trace(st: BlockState, kind: str, rows, pos, tok):
    for r in rows:
        st.trace.append(dict(row=r, block=st.block, step=st.step, kind=kind, pos=int(pos[r]), token=int(tok[r])))


class LegacySpeculative(MRPPolicy):
    """verify: how the candidates are scored (model.VERIFY_PATHS). The default "exact" gives logits
    bitwise equal to Static(1)'s forward_block on the same state, so the output is token-identical to
    Static(1) in every dtype; "packed" (one block-diagonal call) rounds differently and can flip
    near-ties in bf16 (rates: `python -m mrp_repro.decoding.mismatch`)."""

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

    def _drafts(self, st: BlockState, logits, hidden, n_drafts: torch.Tensor):
        """Drafts 1..Kmax per row: pos (B, Kmax) (-1 past a row's own n_drafts), tok (B, Kmax), and the
        candidate states [C(1), ..., C(Kmax)]."""
        Kmax = int(n_drafts.max())
        masked0 = st.masked
        p1, t1, tok0, conf0 = legacy_static_pick(logits, masked0, st.mask_id)
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
                p, t, _, _ = legacy_static_pick(out.logits, m, st.mask_id)
            else:  # mrp: chain head steps from the seed hidden state
                h = self.head.step(h, cur, st.positions, st.model.embed_tokens, st.ctx["cache"], st.key_valid)
                st._count("mrp_forwards", live)
                p, t, _, _ = legacy_static_pick(st.model.lm_head(h), m, st.mask_id)
            p = torch.where(live, p, torch.full_like(p, -1))
            pos.append(p)
            toks.append(t)
            cands.append(_set(cur, p, t))
        return torch.stack(pos, 1), torch.stack(toks, 1), cands

    def denoise(self, st: BlockState) -> None:
        self._flush(st)
        if not st.rows_needing_work().any():
            return
        out = st.backbone()
        logits, hidden = out.logits, out.hidden
        B = st.ids.shape[0]
        ar = torch.arange(B, device=st.ids.device)
        while st.rows_needing_work().any():
            n_masked = st.masked.sum(1)
            working = n_masked > 0
            n_drafts = torch.clamp(n_masked, max=self.K)  # 0 for idle rows
            pos, tok, cands = self._drafts(st, logits, hidden, n_drafts)
            for r in working.nonzero().flatten().tolist():
                for k in range(int(n_drafts[r])):
                    _trace(st, "draft", [r], pos[:, k], tok[:, k])
                st.stats[r].drafted += int(n_drafts[r])
                st.stats[r].rounds += 1
            # Candidates the verify must score: C(1..n_drafts), less a final state with no mask left.
            need = torch.where(n_drafts == n_masked, n_drafts - 1, n_drafts)
            M = int(need.max())
            accepted = torch.ones_like(n_drafts) * working
            if M > 0:
                done_now = working & (need == 0)  # one masked slot left: the static pick finishes it
                if done_now.any():
                    self._reveal(st, done_now, pos, tok, accepted)
                vout = st.backbone_candidates(torch.stack(cands[:M], 1), self.verify)
                for k in range(1, M + 1):  # draft k+1 vs the backbone's pick on C(k)
                    m = (cands[k - 1] == st.mask_id) & st.active[:, None]
                    if k >= pos.shape[1]:
                        break
                    p, t, _, _ = legacy_static_pick(vout.logits[:, k - 1], m, st.mask_id)
                    ok = (accepted == k) & (n_drafts > k) & (p == pos[:, k]) & (t == tok[:, k])
                    accepted = accepted + ok.long()
                rest = working & ~done_now
                sel = (accepted - 1).clamp(min=0, max=M - 1)
                logits, hidden = vout.logits[ar, sel], vout.hidden[ar, sel]
                self._reveal(st, rest, pos, tok, accepted)
            else:
                self._reveal(st, working, pos, tok, accepted)
            st.step += 1

    def _reveal(self, st, rows_mask, pos, tok, accepted):
        sel = torch.zeros_like(st.masked)
        vals = st.ids.clone()
        for r in rows_mask.nonzero().flatten().tolist():
            j = int(accepted[r])
            for k in range(j):
                sel[r, pos[r, k]] = True
                vals[r, pos[r, k]] = tok[r, k]
                _trace(st, "accept", [r], pos[:, k], tok[:, k])
            st.stats[r].accepted += j
            st.stats[r].accept_lengths.append(j)
        st.reveal(sel, vals)


class LegacyDirect(MRPPolicy):
    """Per backbone forward: the static pick, then `steps` tokens from the head's chained corrected logits."""

    def __init__(self, steps: int, head=None):
        if head is None:
            raise ValueError("Direct needs an MRP head")
        self.steps, self.head = steps, head
        self.name = f"direct({steps})"

    def denoise(self, st: BlockState) -> None:
        self._flush(st)
        while st.rows_needing_work().any():
            out = st.backbone()
            p, t, _, _ = legacy_static_pick(out.logits, st.masked, st.mask_id)
            st.reveal(_set(torch.zeros_like(st.ids), p, torch.ones_like(t)).bool(), _set(st.ids, p, t))
            h = out.hidden
            for _ in range(self.steps):
                live = st.rows_needing_work()
                if not live.any():
                    break
                h = self.head.step(h, st.ids, st.positions, st.model.embed_tokens, st.ctx["cache"], st.key_valid)
                st._count("mrp_forwards", live)
                p, t, _, _ = legacy_static_pick(st.model.lm_head(h), st.masked, st.mask_id)
                st.reveal(_set(torch.zeros_like(st.ids), p, torch.ones_like(t)).bool(), _set(st.ids, p, t))
            st.step += 1


@torch.no_grad()
def legacy_generate(
    model: SDARModel,
    prompts: list[list[int]],
    policy: Policy,
    block_size: int,
    mask_id: int,
    eos_ids: list[int] | tuple[int, ...],
    max_new_tokens: int,
    pad_id: int | None = None,
) -> tuple:
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("generate needs at least one non-empty prompt")
    device = model.lm_head.weight.device
    L, B = block_size, len(prompts)
    pad_id = mask_id if pad_id is None else pad_id
    eos = torch.tensor(sorted(set(eos_ids)), device=device)
    lens = [len(p) for p in prompts]
    n_prompt_blocks = [-(-n // L) for n in lens]
    N = max(n_prompt_blocks)
    pad = [(N - n) * L for n in n_prompt_blocks]
    # The last block a row touches, in shared block indices.
    end_block = [pad[r] // L + -(-(lens[r] + max_new_tokens) // L) for r in range(B)]
    total_blocks = max(end_block)

    seq = torch.full((B, total_blocks * L), mask_id, dtype=torch.long, device=device)
    real = torch.zeros(B, total_blocks * L, dtype=torch.bool, device=device)
    for r, p in enumerate(prompts):
        seq[r, : pad[r]] = pad_id
        seq[r, pad[r] : pad[r] + lens[r]] = torch.tensor(p, device=device)
        real[r, pad[r] :] = True
    positions = (
        torch.arange(total_blocks * L, device=device)[None, :] - torch.tensor(pad, device=device)[:, None]
    ).clamp(min=0)

    cache = model.new_cache(B, total_blocks * L)
    stats = [RowStats() for _ in range(B)]
    trace: list[dict] = []
    ctx = policy.begin(model, B, total_blocks * L, device)
    finished = torch.zeros(B, dtype=torch.bool, device=device)

    def commit(lo: int, hi: int, block_rows: torch.Tensor):
        cache_len = cache.length
        ids, pos, kv = seq[:, lo:hi], positions[:, lo:hi], real[:, lo:hi]
        if hi - lo == L:
            out = model.commit_block(ids, pos, cache, kv)
        else:
            out = model.prefill(ids, pos, kv, cache, L)
        for r in (block_rows & kv.any(1)).nonzero().flatten().tolist():  # all-padding rows cost nothing
            stats[r].commit_forwards += 1
        policy.on_commit(ctx, out, ids, pos, kv)

    if N > 1:
        commit(0, (N - 1) * L, torch.ones(B, dtype=torch.bool, device=device))

    for b in range(N - 1, total_blocks):
        lo, hi = b * L, (b + 1) * L
        # Rows past their last block, or stopped at EOS, sit out with invisible padding.
        done_now = finished | torch.tensor([b >= end_block[r] for r in range(B)], device=device)
        seq[done_now, lo:hi] = pad_id
        real[done_now, lo:hi] = False
        active = ~done_now
        st = BlockState(
            model,
            cache,
            seq[:, lo:hi].clone(),
            positions[:, lo:hi],
            real[:, lo:hi],
            active,
            mask_id,
            b,
            stats,
            trace,
            ctx,
        )
        policy.denoise(st)
        if st.masked.any():
            raise RuntimeError(f"policy {policy.name} left masked slots in block {b}")
        seq[:, lo:hi] = st.ids
        commit(lo, hi, active)
        gen_part = positions[:, lo:hi] >= torch.tensor(lens, device=device)[:, None]
        finished |= active & (torch.isin(st.ids, eos) & gen_part & real[:, lo:hi]).any(1)
        if bool((finished | torch.tensor([b + 1 >= end_block[r] for r in range(B)], device=device)).all()):
            break

    tokens = []
    for r in range(B):
        gen = seq[r, pad[r] + lens[r] : pad[r] + lens[r] + max_new_tokens].tolist()
        cut = next((i for i, t in enumerate(gen) if t in set(eos_ids)), len(gen))
        tokens.append(gen[:cut])
    return tokens, stats, trace


class LegacyRemask(Remask):
    """Remask with the per-row, per-candidate loop of its `sequential` rule before issue 14."""

    def _sequential(self, st, out, fresh, top, tok, conf, judge):
        B, L = fresh.shape
        keep = top & fresh
        pending = {}
        for r in judge.nonzero().flatten().tolist():
            cand = [p for p in torch.sort(conf[r], descending=True, stable=True).indices.tolist()
                    if fresh[r, p] and not top[r, p]]  # fmt: skip
            pending[r] = cand
        base = torch.where(fresh & ~top, torch.full_like(st.ids, st.mask_id), st.ids)  # S + top1 reveal
        while pending:
            rows_mask = torch.zeros(B, dtype=torch.bool, device=fresh.device)
            rows_mask[list(pending)] = True
            h_C = self._head(st, out.hidden, base, count=rows_mask)
            A, C = self._split(st, out.logits, out.hidden, h_C)
            for r in list(pending):
                cand = pending[r]
                while cand:
                    p = cand.pop(0)
                    t = tok[r, p : p + 1]
                    rc = residual_confidence(A[r, p : p + 1], C[r, p : p + 1], 1.0, t)
                    if bool(self._ok(rc, t)[0]):
                        keep[r, p] = True
                        base[r, p] = tok[r, p]
                        break  # the kept set grew: the next candidates need a new head call
                if not cand:
                    del pending[r]
        return keep
