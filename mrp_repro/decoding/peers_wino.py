"""WINO-style revocable decoding (Hong et al., "Wide-In, Narrow-Out", arXiv 2507.18578) on our engine: a peer of MRP
remasking that needs no head.

    from mrp_repro.decoding import generate
    from mrp_repro.decoding.peers_wino import Wino
    generate(model, prompts, Wino(0.6, 0.9), block_size, mask_id, eos_ids, max_new_tokens)   # WINO's defaults
    Wino(0.5, 0.9, shadow="exact")     # the shadow pass as exact leave-one-out states (one verify, more rows)
    Wino(0.5, 0.9, max_accept=None)    # no cap on the reveals of a step

The method (the paper's and its public code's, in our words; no code of theirs): every step forwards the block
together with a *shadow block* in one backbone call. The shadow block is the block again, every slot [MASK], at the
same positions; shadow slot i attends to the cache, to the block's other slots (not to slot i) and to the shadow
block, so it scores what slot i would be with the block's other tokens present and its own hidden: a leave-one-out
(LOO) view of every token revealed so far. Then, on that one forward:
  - wide in: reveal every masked slot whose confidence (the main rows' max probability) is above τ1; if more than
    max_accept(n) (n: the slots masked; WINO's rule min(max(floor(0.7 n), 5), 20)) pass, the max_accept(n) most
    confident; if none, the most confident one;
  - narrow out: if the step revealed more than one token, re-mask the earlier reveals of this block (not the
    prompt's tokens) whose LOO probability of their own token is below τ2; never as many as the previous step
    revealed (if at least that many fall below τ2, the previous step's count less one, lowest LOO probability
    first). Each step then makes net progress over two steps, so a block ends within its masked count of steps.
[MASK] is never a candidate (its logit -inf, as everywhere in the engine).

shadow="block" (WINO's): main and shadow in one call of 2L query rows (model.forward with WINO's mask; the main rows
see exactly what a block forward sees, but the call's shape differs, so their logits round as that call does).
shadow="exact": the LOO states themselves (the block with slot i re-masked, one per earlier reveal) beside the
block, in one verify (BlockState.backbone_candidates, path `verify`): the main row is bitwise a block forward, so
with τ2 = 0 (nothing re-masked) and max_accept=None the output is Dynamic(τ1)'s token for token (a test checks it).

Accounting: one denoising forward per step per row that needs it (a fused commit pending is written first, on its
own); its extra rows in RowStats.extra_rows: shadow="block" one per step (the shadow block), shadow="exact" the
verify's candidates past the first; re-masked tokens in RowStats.revoked (tokens is net of them).
"""

from __future__ import annotations

import math

import torch

from mrp_repro.decoding.engine import BlockState, Policy, masked_confidence, top_masked
from mrp_repro.model import VERIFY_PATHS, ModelOutput

__all__ = ["Wino", "wino_max_accept", "shadow_mask", "SHADOWS", "WINO_TAU1", "WINO_TAU2"]

SHADOWS = ("block", "exact")
#: WINO's published defaults: reveal above 0.6, re-mask below 0.9
WINO_TAU1, WINO_TAU2 = 0.6, 0.9


def wino_max_accept(n_masked: torch.Tensor) -> torch.Tensor:
    """WINO's cap on one step's reveals: min(max(floor(0.7 n), 5), 20) for n (B,) masked slots."""
    return torch.floor(n_masked.double() * 0.7).long().clamp(min=5, max=20)


def shadow_mask(model, cache, key_valid: torch.Tensor) -> torch.Tensor:
    """(B, 1, 2L, S + 2L) bool attention of [block | shadow block] (True = attend): main rows as a block forward
    (the cache, the block's real slots and themselves; never the shadow); shadow row i the cache, the block's real
    slots but slot i, and the shadow block's real slots and itself."""
    B, L = key_valid.shape
    dev = key_valid.device
    eye = torch.eye(L, dtype=torch.bool, device=dev)
    past = model._cache_keys(cache, B, 2 * L, dev)  # (B, 1, 2L, S): the committed cache slots, as forward_block's
    real = key_valid[:, None, None, :].expand(B, 1, L, L)  # (B, 1, L, L) keys that exist
    main = torch.cat([real | eye, torch.zeros_like(real)], -1)  # (B, 1, L, 2L)
    shadow = torch.cat([real & ~eye, real | eye], -1)  # (B, 1, L, 2L)
    return torch.cat([past, torch.cat([main, shadow], 2)], -1)


class Wino(Policy):
    """Reveal above τ1, re-mask earlier reveals whose shadow (leave-one-out) probability is below τ2 (module
    docstring). tau (= τ1), rule ("wino") and delta (= τ2) name it in the runs frame as mode remask does."""

    algorithm = "peer"
    rule = "wino"

    def __init__(self, tau1: float = WINO_TAU1, tau2: float = WINO_TAU2, shadow: str = "block",
                 max_accept: str | None = "wino", verify: str = "exact"):  # fmt: skip
        if shadow not in SHADOWS:
            raise ValueError(f"shadow={shadow!r}: choose one of {SHADOWS}")
        if max_accept not in ("wino", None):
            raise ValueError("max_accept: 'wino' (WINO's cap) or None (no cap)")
        if verify not in VERIFY_PATHS:
            raise ValueError(f"verify={verify!r}: choose one of {VERIFY_PATHS}")
        if not (0 <= tau1 < 1 and 0 <= tau2 <= 1):
            raise ValueError("thresholds: 0 <= tau1 < 1, 0 <= tau2 <= 1")
        self.tau, self.delta = float(tau1), float(tau2)
        self.shadow, self.max_accept, self.verify = shadow, max_accept, verify
        extra = ("" if shadow == "block" else f",{shadow}") + ("" if max_accept else ",nocap")
        self.name = f"wino({tau1},{tau2}{extra})"

    # -- the one forward of a step ------------------------------------------------------------------
    def _forward(self, st: BlockState, earlier: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """-> main logits (B, L, V) of the block, LOO logits (B, L, V) of every slot (read at `earlier` ones)."""
        work = st.rows_needing_work()
        if st.pending is not None:  # a fused commit waiting: written on its own (the wide call cannot carry it)
            st.pending.write()
            st.pending = None
        if self.shadow == "block":
            st._count("denoise_forwards", work)
            st._count("extra_rows", work, 1)
            B, L = st.ids.shape
            ids = torch.cat([st.ids, torch.full_like(st.ids, st.mask_id)], 1)  # (B, 2L)
            pos = torch.cat([st.positions, st.positions], 1)  # (B, 2L) the shadow at the block's positions
            out: ModelOutput = st.model(ids, pos, shadow_mask(st.model, st.cache, st.key_valid), st.cache)
            return out.logits[:, :L], out.logits[:, L:]
        # exact: the block and, per earlier reveal i (in slot order), the block with slot i re-masked
        B, L = st.ids.shape
        n = earlier.sum(1)  # (B,)
        M = 1 + int(n.max())  # one host sync
        j = torch.arange(1, M, device=st.ids.device)  # candidate j >= 1 re-masks the j-th earlier reveal
        rank = earlier.long().cumsum(1)  # (B, L): 1-based index of each earlier reveal among its row's
        hit = earlier[:, None, :] & (rank[:, None, :] == j[None, :, None])  # (B, M - 1, L)
        cands = torch.cat([st.ids[:, None], torch.where(hit, st.mask_id, st.ids[:, None])], 1)  # (B, M, L)
        vout = st.backbone_candidates(cands, self.verify, rows=work)
        # slot i's LOO logits: candidate rank[i] at slot i
        sel = torch.where(earlier, rank, 0)  # (B, L)
        loo = vout.logits.gather(1, sel[:, None, :, None].expand(-1, 1, -1, vout.logits.shape[-1])).squeeze(1)
        return vout.logits[:, 0], loo

    # -- decoding -------------------------------------------------------------------------------------
    def denoise(self, st: BlockState) -> None:
        B, L = st.ids.shape
        ours = st.masked.clone()  # (B, L) the slots this policy reveals in this block (never the prompt's)
        last = torch.full((B,), L + 1, dtype=torch.long, device=st.ids.device)  # the previous step's reveals
        guard = 4 * L + 4  # net progress every step (module docstring): never reached
        while st.rows_needing_work().any():
            if st.step > guard:
                raise RuntimeError(f"{self.name} made no progress in block {st.block}")
            masked = st.masked  # (B, L)
            earlier = ours & ~masked & st.active[:, None]  # (B, L) revealed by earlier steps
            logits, loo = self._forward(st, earlier)
            tok, conf = masked_confidence(logits, masked, st.mask_id)  # (B, L), (B, L)
            reveal = self._wide_in(conf, masked)
            n_acc = reveal.sum(1)  # (B,)
            remask = self._narrow_out(st, loo, earlier, n_acc, last)
            st.reveal(reveal, tok)
            st.revoke(remask)
            last = torch.where(masked.any(1), n_acc, last)
            st.step += 1

    def _wide_in(self, conf: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
        """(B, L) the step's reveals: above τ1, at most max_accept(n) (the most confident), at least the top one."""
        high = (conf > self.tau) & masked
        top1 = top_masked(conf, masked, 1)
        if self.max_accept is None:
            return high | top1
        cap = wino_max_accept(masked.sum(1))  # (B,)
        over = high.sum(1) > cap
        return torch.where(over[:, None], top_masked(conf, masked, cap), high | top1)

    def _narrow_out(self, st, loo, earlier, n_acc, last) -> torch.Tensor:
        """(B, L) earlier reveals to re-mask: LOO probability of their token < τ2, on rows that revealed more than one
        token this step; fewer than the previous step's reveals (the lowest LOO probability first)."""
        lg = loo.float()
        lg[..., st.mask_id] = float("-inf")
        p = lg.softmax(-1).gather(-1, st.ids[..., None]).squeeze(-1)  # (B, L) LOO prob of each slot's token
        p = torch.where(earlier, p, torch.full_like(p, math.inf))
        low = (p < self.delta) & earlier & (n_acc > 1)[:, None]
        k = torch.minimum(low.sum(1), last - 1).clamp(min=0)  # (B,)
        return top_masked(-p, low, k)
