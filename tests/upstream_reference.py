"""A reference of the released code's static and speculative decoding, written from reading it
(heavyball-research/multi-token-residual-prediction, modeling_sdar_mrp.py: `generate` with
low_confidence_static, `_generate_spec`; temperature 1, top_k 1), for tests/test_upstream.py.

Plain Python loops over rows, positions and candidates; tensors only for the model calls. By default the
model is called through its cached block forward (forward_block, commit_block, prefill) with a cache of its own,
and each verify candidate is its own forward_block, so the numerics are the backbone's; everything else (layout,
picks, acceptance, bonus, stopping, counters) is written here again, one row at a time, except the
acceptance, which their code computes for the whole batch (the batch's shortest accepted prefix).

released=True (issue 38): the forwards too are written here in the released code's order and attention forms
(`Released`: F.rms_norm; their masks as float [1, T, S] slices made bool; a call whose mask is all ones runs
flash_attn_func where flash-attn can run it, else SDPA without a mask; any other mask SDPA with it, is_causal
False, scale head_dim**-0.5, enable_gqa True), with a KV list of its own, the head on its own block, and the
verify of their `_generate_spec`: the K + 1 candidates packed side by side in ONE forward with their
block-diagonal mask (verify="packed"), or ("each") one block forward per candidate (our lossless "exact").

    from upstream_reference import reference_upstream
    tokens, counters, rows = reference_upstream(model, prompts, mask_id, eos_ids, block, max_new, K=3, head=h)
    tokens, counters, rows = reference_upstream(..., released=True, verify="packed")   # their numerics too
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.nn.functional as F

from mrp_repro.model import apply_rope, rope_cos_sin


# -- the released code's forwards (released=True) ----------------------------------------------------------
def _rms(module, x):
    return F.rms_norm(x, module.weight.shape, module.weight, module.eps)


def _attend(at, q, k, v, mask):
    """Their SDARAttention at inference. mask: float (1, T, S) (a slice of their block mask) or bool (their
    verify mask); made bool; all ones -> their decode call (flash_attn_func on (B, T, heads, hd); SDPA without a
    mask where flash-attn cannot run: CPU, fp32, not installed), else their prefill call (SDPA with the mask)."""
    scale = at.hd**-0.5
    mask = mask.bool()
    if bool(torch.all(mask)):
        try:
            from flash_attn import flash_attn_func
        except Exception:  # noqa: BLE001
            flash_attn_func = None
        if flash_attn_func is not None and q.is_cuda and q.dtype in (torch.float16, torch.bfloat16):
            y = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=False,
                                softmax_scale=scale)  # fmt: skip
            return y.transpose(1, 2)
        return F.scaled_dot_product_attention(q, k, v, is_causal=False, scale=scale, enable_gqa=True)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=False, scale=scale, enable_gqa=True)


def _layer(layer, x, cos, sin, past, mask):
    """One decoder layer, batched as theirs: x (B, T, H); past (k, v) (B, nkv, S, hd) or None. -> x, (k, v)."""
    at = layer.self_attn
    B, T, _ = x.shape
    h = _rms(layer.input_layernorm, x)
    q = _rms(at.q_norm, at.q_proj(h).view(B, T, -1, at.hd)).transpose(1, 2)
    k = _rms(at.k_norm, at.k_proj(h).view(B, T, -1, at.hd)).transpose(1, 2)
    v = at.v_proj(h).view(B, T, -1, at.hd).transpose(1, 2)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    ka = k if past is None else torch.cat([past[0], k], 2)
    va = v if past is None else torch.cat([past[1], v], 2)
    x = x + at.o_proj(_attend(at, q, ka, va, mask).transpose(1, 2).reshape(B, T, -1))
    h = _rms(layer.post_attention_layernorm, x)
    return x + layer.mlp.down_proj(F.silu(layer.mlp.gate_proj(h)) * layer.mlp.up_proj(h)), (k, v)


class Released:
    """The released code's backbone and head calls on `model` / `head`'s weights, with a KV list of its own
    (their DynamicCache: the prefill and each store-KV forward append; every other call reads it)."""

    def __init__(self, model, head, total: int, block: int):
        self.model, self.head, self.L = model, head, block
        n = total // block
        dev = model.lm_head.weight.device
        # their block_diffusion_attention_mask: float, [1, total, total]
        self.block_mask = torch.tril(torch.ones(n, n, device=dev)).repeat_interleave(block, 0).repeat_interleave(
            block, 1)[None]  # fmt: skip
        self.past = None

    def _run(self, layers, x, ids_pos, mask, past, store):
        cfg = self.model.config
        cos, sin = rope_cos_sin(ids_pos, cfg.head_dim, cfg.rope_theta, x.dtype)
        new = []
        for i, layer in enumerate(layers):
            x, kv = _layer(layer, x, cos, sin, None if past is None else past[i], mask)
            new.append(kv)
        if store:  # their DynamicCache.update: the new keys appended
            old = self.past or [(k[:, :, :0], v[:, :, :0]) for k, v in new]
            self.past = [
                (torch.cat([pk, k], 2), torch.cat([pv, v], 2)) for (pk, pv), (k, v) in zip(old, new, strict=True)
            ]
        return x

    def backbone(self, ids, pos, mask, store=False):
        """ids, pos (B, T) -> logits (B, T, V), post-norm hidden (B, T, H)."""
        x = F.embedding(ids, self.model.embed_tokens.weight)
        h = _rms(self.model.norm, self._run(self.model.layers, x, pos, mask, self.past, store))
        return SimpleNamespace(logits=self.model.lm_head(h), hidden=h)

    def prefill(self, ids, pos):
        P = ids.shape[1]
        self.backbone(ids, pos, self.block_mask[:, :P, :P], store=True)

    def block(self, state, pos, store=False):
        lo = int(pos[0, 0])
        return self.backbone(state, pos, self.block_mask[:, lo : lo + self.L, : lo + self.L], store)

    def draft(self, h_in, state, pos):
        """Their head: its layers' KV never written, so it sees its own block only. -> h_C (B, L, H)."""
        hd = self.head
        e = F.embedding(state, self.model.embed_tokens.weight)
        x = hd.eh_proj(torch.cat([_rms(hd.enorm, e), _rms(hd.hnorm, h_in)], -1))
        lo = int(pos[0, 0])
        return _rms(hd.norm, self._run(hd.layers, x, pos, self.block_mask[:, lo : lo + self.L, : lo + self.L],
                                       None, False))  # fmt: skip

    def verify_packed(self, cands, pos):
        """Their verify: C(0..K) side by side, positions repeated, [1, ML, prefix + ML] block-diagonal mask."""
        M, L = len(cands), self.L
        lo = int(pos[0, 0])
        mask = torch.zeros(1, M * L, lo + M * L, dtype=torch.bool, device=pos.device)
        mask[:, :, :lo] = True
        for k in range(M):
            mask[:, k * L : (k + 1) * L, lo + k * L : lo + (k + 1) * L] = True
        out = self.backbone(torch.cat(cands, 1), pos.repeat(1, M), mask)
        return [SimpleNamespace(logits=out.logits[:, k * L : (k + 1) * L], hidden=out.hidden[:, k * L : (k + 1) * L])
                for k in range(M)]  # fmt: skip


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
                       scale=1.0, released=False, verify="packed"):  # fmt: skip
    """K None: their static (one reveal per step, at most `block` steps); else their speculative with K drafts.
    released: the forwards in the released code's forms (Released), the verify `verify` ("packed": theirs; "each":
    one block forward per candidate); else the model's own calls, one forward_block per candidate.
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

    rel = Released(model, head, total, L) if released else None
    if verify not in ("packed", "each"):
        raise ValueError(f"verify={verify!r}: packed or each")
    if n_prefill:
        P = n_prefill * L
        ids = torch.tensor([row[:P] for row in x], device=dev)
        if rel is not None:
            rel.prefill(ids, positions[:, :P])
        else:
            model.prefill(ids, positions[:, :P], torch.ones(B, P, dtype=torch.bool, device=dev), cache, L,
                          with_logits=False)  # fmt: skip
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
            if rel is not None:
                return rel.block(torch.tensor(state, device=dev), pos)
            return model.forward_block(torch.tensor(state, device=dev), pos, cache)

        def draft(h_in, state, pos=pos):
            if rel is not None:
                return rel.draft(h_in, torch.tensor(state, device=dev), pos)
            return head(h_in, torch.tensor(state, device=dev), pos, model.embed_tokens)

        def verify_all(cands, pos=pos):
            if rel is not None and verify == "packed":
                return rel.verify_packed([torch.tensor(c, device=dev) for c in cands], pos)
            return [fwd(c) for c in cands]

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
            cur = _spec_block(model, fwd, draft, verify_all, cur, K, draft_logits, scale, mask_id, finished, c, rows,
                              reveal)  # fmt: skip
        if rel is not None:
            rel.block(torch.tensor(cur, device=dev), pos, store=True)  # their store-KV forward
        else:
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


def _spec_block(model, fwd, draft, verify_all, cur, K, draft_logits, scale, mask_id, finished, c, rows, reveal):
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
            hC = draft(h_in, new)
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
        # verify: every candidate C(0..K), each its own block forward, or (released, "packed") theirs: one call
        outs = verify_all(cands)
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


def compare_released(dtypes=(torch.bfloat16, torch.float32), seeds=(0, 1), block=8, max_new=16):
    """Backbone.generate (the upstream numerics) against reference_upstream(released=True) on mismatch's random
    model (vocabulary 64) and head: per dtype, batch (1, 3), prompt depth (1 prefilled block, 2-3) and setting
    (static; speculative K = 1-3, draft none / sum, verify "exact" and their "packed"), the tokens equal to the
    reference's and to upstream static's, and the runs whose every counter equals the reference's. -> DataFrame."""
    import random

    import pandas as pd

    from mrp_repro.backbone import Backbone
    from mrp_repro.decoding.mismatch import CONFIG, random_backbone, random_head
    from mrp_repro.decoding.upstream import UpstreamSpeculative, UpstreamStatic

    mask_id, eos, L = 1, 2, block
    keys = ("prefill", "denoise", "store_kv", "mrp", "blocks", "rounds", "proposed", "accepted", "bonus", "tokens",
            "stalled")  # fmt: skip

    def same(a, b):  # (positions equal, positions) over the rows; a shorter row's missing positions differ
        pairs = list(zip(a, b, strict=True))
        return (sum(x == y for r, s in pairs for x, y in zip(r, s, strict=False)),
                sum(max(len(r), len(s)) for r, s in pairs))  # fmt: skip

    settings = [(None, "none", "exact")] + [(K, d, v) for v in ("exact", "packed") for K in (1, 2, 3)
                                            for d in ("none", "sum")]  # fmt: skip
    out = {}
    for dtype in dtypes:
        m, h = random_backbone(0, dtype), random_head(10, dtype)
        bb = Backbone(m, None, mask_id, [eos], 0, L, None, None)
        for batch in (1, 3):
            for blocks in (1, 2, 3):
                for seed in seeds:
                    rng = random.Random(seed + 10 * blocks)
                    ps = [[rng.randrange(3, CONFIG.vocab_size) for _ in range(blocks * L + rng.randrange(1, L))]
                          for _ in range(3)]  # fmt: skip
                    for i in range(0, 3, batch):
                        group = ps[i : i + batch]
                        static = bb.generate(group, UpstreamStatic(), max_new).tokens
                        for K, d, v in settings:
                            pol = UpstreamStatic() if K is None else UpstreamSpeculative(K, h, d, verify=v)
                            res = bb.generate(group, pol, max_new)
                            ref, c, _ = reference_upstream(m, group, mask_id, [eos], L, max_new, K=K, head=h,
                                                           draft_logits=d, released=True,
                                                           verify="packed" if v == "packed" else "each")  # fmt: skip
                            b = res.batch
                            mine = (b.prefill_forwards, b.denoise_forwards, b.store_kv_forwards, b.mrp_forwards,
                                    b.blocks_decoded, b.spec_rounds, b.drafts_proposed, b.drafts_accepted,
                                    b.bonus_tokens, b.tokens, b.stalled_blocks)  # fmt: skip
                            key = (str(dtype).removeprefix("torch."), batch, "1" if blocks == 1 else "2-3",
                                   "static" if K is None else f"speculative {v}")  # fmt: skip
                            row = out.setdefault(key, [0, 0, 0, 0, 0, 0])
                            e, n = same(res.tokens, ref)
                            e2, n2 = same(res.tokens, static)
                            row[0] += e
                            row[1] += n
                            row[2] += e2
                            row[3] += n2
                            row[4] += mine == tuple(c[k] for k in keys)
                            row[5] += 1
    rows = [dict(dtype=k[0], batch=k[1], prefilled_blocks=k[2], setting=k[3], tokens_equal_released=f"{r[0]}/{r[1]}",
                 counters_equal_released=f"{r[4]}/{r[5]}", tokens_equal_static=f"{r[2]}/{r[3]}")
            for k, r in out.items()]  # fmt: skip
    return pd.DataFrame(rows)


if __name__ == "__main__":  # nice -n 10 .venv/bin/python -m tests.upstream_reference   (~2 min on one core)
    torch.set_num_threads(1)
    from mrp_repro.report.tables import markdown

    print(markdown(compare_released()))
