"""A reference of the released code's static and speculative decoding, written from reading it
(heavyball-research/multi-token-residual-prediction, modeling_sdar_mrp.py: `generate` with
low_confidence_static, `_generate_spec`; temperature 1, top_k 1), for tests/test_upstream.py.

Plain Python loops over rows, positions and candidates; tensors only for the model calls. The model is
called through its cached block forward (forward_block, commit_block, prefill) with a cache of its own, and
each verify candidate is its own forward_block, so the numerics are the backbone's; everything else (layout,
picks, acceptance, bonus, stopping, counters) is written here again, one row at a time, except the
acceptance, which their code computes for the whole batch (the batch's shortest accepted prefix).

    from upstream_reference import reference_upstream
    tokens, counters, rows = reference_upstream(model, prompts, mask_id, eos_ids, block, max_new, K=3, head=h)
"""

from __future__ import annotations

import torch


def _pick_row(logits, state: list[int], mask_id: int, eligible: bool):
    """(pos, tok) of the most confident [MASK] slot of one row, or None. logits (L, V) in the model's dtype;
    confidence = softmax in that dtype at the token; the token = the lowest index of the top logit; among
    equal confidences the lowest slot."""
    if not eligible:
        return None
    probs = torch.softmax(logits, dim=-1)
    best = None
    for i, t in enumerate(state):
        if t != mask_id:
            continue
        vals = logits[i].tolist()
        tok = vals.index(max(vals))
        c = probs[i, tok].item()
        if best is None or c > best[0]:
            best = (c, i, tok)
    return None if best is None else (best[1], best[2])


def _has_mask(row: list[int], mask_id: int, eligible: bool) -> bool:
    return eligible and mask_id in row


@torch.no_grad()
def reference_upstream(model, prompts, mask_id, eos_ids, block, max_new, K=None, head=None, draft_logits="none",
                       scale=1.0):  # fmt: skip
    """K None: their static (one reveal per step, at most `block` steps); else their speculative with K drafts.
    -> (tokens per row, their counters (dict), per-row counters (list of dicts))."""
    B, L = len(prompts), block
    lens = [len(p) for p in prompts]
    total = -(-max(max(lens), min(lens) + max_new) // L) * L
    n_prefill = min(lens) // L
    x = [list(p) + [mask_id] * (total - len(p)) for p in prompts]
    dev = model.lm_head.weight.device
    positions = torch.arange(total, device=dev)[None].expand(B, total)
    cache = model.new_cache(B, total)
    c = dict(prefill=0, denoise=0, store_kv=0, mrp=0, blocks=0, rounds=0, proposed=0, accepted=0, bonus=0,
             tokens=0, stalled=0)  # fmt: skip
    rows = [dict(tokens=0, denoise=0, commit=0, mrp=0, rounds=0, drafted=0, accepted=0, accept_lengths=[])
            for _ in range(B)]  # fmt: skip
    finished = [False] * B

    def reveal(r, state_row, i, t):
        state_row[i] = t
        if t != mask_id:
            rows[r]["tokens"] += 1
            c["tokens"] += 1

    if n_prefill:
        P = n_prefill * L
        model.prefill(torch.tensor([row[:P] for row in x], device=dev), positions[:, :P],
                      torch.ones(B, P, dtype=torch.bool, device=dev), cache, L, with_logits=False)  # fmt: skip
        c["prefill"] += 1
        for r in range(B):
            rows[r]["commit"] += 1
    for b in range(n_prefill, total // L):
        if all(finished):
            break
        c["blocks"] += 1
        lo, hi = b * L, (b + 1) * L
        pos = positions[:, lo:hi]
        cur = [row[lo:hi] for row in x]

        def fwd(state, pos=pos):
            return model.forward_block(torch.tensor(state, device=dev), pos, cache)

        if K is None:  # their low_confidence_static, denoising_steps = L
            for _ in range(L):
                need = [_has_mask(cur[r], mask_id, not finished[r]) for r in range(B)]
                if not any(need):
                    break
                out = fwd(cur)
                c["denoise"] += 1
                for r in range(B):
                    rows[r]["denoise"] += need[r]
                    p = _pick_row(out.logits[r], cur[r], mask_id, not finished[r])
                    if p is not None:
                        reveal(r, cur[r], *p)
        else:
            cur = _spec_block(model, head, fwd, cur, pos, K, draft_logits, scale, mask_id, finished, c, rows, reveal)
        model.commit_block(torch.tensor(cur, device=dev), pos, cache, with_logits=False)
        c["store_kv"] += 1
        for r in range(B):
            rows[r]["commit"] += not finished[r]
            x[r][lo:hi] = cur[r]
        for r in range(B):
            finished[r] = finished[r] or any(t in eos_ids for t in x[r][lens[r] :])
    tokens = []
    for r in range(B):
        gen = [t for t in x[r][lens[r] :] if t != mask_id]
        cut = next((i for i, t in enumerate(gen) if t in eos_ids), len(gen))
        tokens.append(gen[:cut])
    return tokens, c, rows


def _spec_block(model, head, fwd, cur, pos, K, draft_logits, scale, mask_id, finished, c, rows, reveal):
    B = len(cur)
    seed = fwd(cur)
    c["denoise"] += 1
    need = [_has_mask(cur[r], mask_id, not finished[r]) for r in range(B)]
    for r in range(B):
        rows[r]["denoise"] += need[r]
    logits, hidden = seed.logits, seed.hidden
    unchanged = 0
    while any(need):
        c["rounds"] += 1
        for r in range(B):
            rows[r]["rounds"] += need[r]
        # drafts: the pick on the logits held, then K - 1 head drafts
        cands, drafts = [[list(row) for row in cur]], []
        lg, h_acc, h_cur = logits, hidden, hidden
        for j in range(K):
            new = [list(row) for row in cands[-1]]
            d = []
            for r in range(B):
                p = _pick_row(lg[r], cands[-1][r], mask_id, not finished[r])
                if p is not None:
                    new[r][p[0]] = p[1]
                    rows[r]["drafted"] += 1
                    c["proposed"] += 1
                d.append(p)
            cands.append(new)
            drafts.append(d)
            if j == K - 1:
                break
            h_in = h_acc if draft_logits == "sum" else h_cur
            hC = head(h_in, torch.tensor(new, device=pos.device), pos, model.embed_tokens)
            c["mrp"] += 1
            for r in range(B):
                rows[r]["mrp"] += _has_mask(new[r], mask_id, not finished[r])
            C = model.lm_head(hC)
            if draft_logits == "sum":
                h_acc = h_acc + scale * hC
                lg = lg + scale * C
            else:
                lg = C
            h_cur = hC
        # verify: every candidate C(0..K), each its own block forward
        outs = [fwd(cand) for cand in cands]
        c["denoise"] += 1
        for r in range(B):
            rows[r]["denoise"] += need[r]
        target = [[_pick_row(outs[k].logits[r], cands[k][r], mask_id, not finished[r]) for r in range(B)]
                  for k in range(K + 1)]  # fmt: skip
        acc = 0
        for k in range(K):
            if all(drafts[k][r] == target[k][r] for r in range(B)):  # None == None: no pick on either side
                acc += 1
            else:
                break
        c["accepted"] += acc
        new = [list(row) for row in cands[acc]]
        for r in range(B):
            mine = [drafts[k][r] for k in range(acc) if drafts[k][r] is not None]
            rows[r]["accepted"] += len(mine)
            if need[r]:
                rows[r]["accept_lengths"].append(len(mine))
            for _, t in mine:
                if t != mask_id:
                    rows[r]["tokens"] += 1
                    c["tokens"] += 1
            bonus = target[acc][r]
            if bonus is not None and not finished[r] and new[r][bonus[0]] == mask_id:
                c["bonus"] += 1
                reveal(r, new[r], *bonus)
        logits, hidden = outs[acc].logits, outs[acc].hidden
        unchanged = unchanged + 1 if new == cur else 0
        cur = new
        need = [_has_mask(cur[r], mask_id, not finished[r]) for r in range(B)]
        if unchanged == 2 and any(need):
            c["stalled"] += 1
            break
    return cur
