"""Denoising trajectories: what the MRP head learns from (METHOD.md §2, training).

    from mrp_repro.trajectories import collect, load_trajectories
    manifest = collect(model, mask_id, examples, "gt", out_dir, shard_size=128, seed=0, block_size=8, chain_steps=3)
    ds = load_trajectories(out_dir)            # datasets.Dataset, one row per (example, block, step)
    # a profile's collection: mrp_repro.stages.trajectories(profile, bb, "gt-multi") -> runs/<p>/trajectories-...

One row = one block state and a short chain of reveals applied to it:

    state 0 (A) --reveal(s)--> state 1 (B) --1 reveal--> state 2 --> ... state n_steps

Columns (L = block size, H = hidden size, S = n_steps <= chain_steps):
  example, block, step        int   global example index, block index, step inside the block (self; 0 for gt)
  context_ids   list<int32>     clean tokens before the block: prompt + finished earlier blocks (positions 0..)
  block_start   int             = len(context_ids) = position of the block's first token (a multiple of L)
  ids           list<int32>     (S+1)*L: the block's tokens at states 0..S ([MASK] = mask_id)
  answer_mask   list<bool>      L: slots that belong to the answer (maskable); prompt slots never are
  reveal_step   list<int8>      L: the step (1..S) that revealed the slot, 0 = not revealed in the chain
  reveal_pos    list<int32>     positions revealed by step 1 (gt: one; gt-multi: k; self: the backbone's pick)
  reveal_tok    list<int32>     their tokens
  next_pos, next_tok  int       the backbone's own static pick on state 1 (most confident masked slot, greedy)
  hidden        list<float32>   (S+1)*L*H: the backbone's final post-norm hidden states at states 0..S
                                (h_A = state 0, h_B = state 1, ...). Logits are never stored: training
                                recomputes them with the frozen lm_head.
  n_steps       int             S: chain steps that leave at least one slot masked (only those supervise)
  t             float           the block's noise level (gt*: the drawn t; self: masked share of the answer slots)

Sources:
  gt        teacher-forced (the paper): the answer is a ground-truth sample; each answer block draws
            t ~ U(1e-3, 1) and masks each answer slot with probability t (at least 2 so a reveal leaves
            a supervised slot); step 1 reveals ONE random masked slot with its true token.
  gt-multi  as gt, step 1 reveals k slots, k ~ U{1..n_masked-1}, k = 1 half the time.
  self      the backbone's own static greedy decoding: every step is a row; the reveal is the
            backbone's pick.
  In every source, steps 2..S reveal one slot each (gt: a random masked slot with its true token,
  self: the backbone's next picks), which is what K-step training (mrp.k_steps) chains.

The head's KV cache: rows store the clean context ids only; training recomputes the backbone's
block-causal prefill of the context (cheap, no grad) and writes the head's cache with
`MRPHead.commit` from those hidden states and ids -- exactly what the head gets at inference,
where finished blocks are committed with their clean tokens and backbone hidden states
(METHOD.md §2). gt/gt-multi hidden states come from one packed [noisy ; clean] forward under the
block-diffusion mask (each noisy block sees itself and the clean blocks before it: the same
attention as `forward_block` against a cache); self states come from the decoding engine itself.

Storage -- parquet shards with their sha256, manifest.json, resume, the torchrun rank merge, loading and
verification -- lives in `mrp_repro.trajectory_store` (its docstring describes the layout and the multi-rank run);
its public names are importable from here as before.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from mrp_repro import distributed
from mrp_repro.runtime import sha256_file, write_json_atomic
from mrp_repro.trajectory_store import (
    FORMAT_VERSION,
    TrajectoriesNotFound,
    TrajectoryError,
    _collect_ranks,
    _finish,
    _prepare,
    _write_shard,
    load_trajectories,
    read_manifest,
    shard_problem,
)

__all__ = [
    "SOURCES",
    "FORMAT_VERSION",
    "TrajectoryError",
    "TrajectoriesNotFound",
    "model_fingerprint",
    "collect",
    "load_trajectories",
    "read_manifest",
    "shard_problem",
]

SOURCES = ("gt", "gt-multi", "self")
GT_T_MIN = 1e-3


# ----------------------------------------------------------------------------- fingerprints


@torch.no_grad()
def model_fingerprint(model: torch.nn.Module) -> str:
    """16-hex fingerprint of a model's weights: names, shapes, and the bytes of every tensor
    (tensors above 1M elements are sampled at a fixed stride, so a 8B model hashes in seconds)."""
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        t = p.detach().reshape(-1)
        if t.numel() > 1_000_000:
            t = t[:: t.numel() // 65_536 + 1]
        h.update(f"{name}:{tuple(p.shape)}:{p.dtype}".encode())
        h.update(t.float().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


# ----------------------------------------------------------------------------- examples


def _as_examples(items, source, tokenizer, block_size, eos_id, seed) -> list[tuple[list[int], list[int] | None]]:
    """(prompt_ids, answer_ids or None) per item. Items: Problem objects (with `tokenizer`; gt answers
    drawn with synthetic.sample_answer, seeded per example), (prompt_ids, answer_ids) pairs, or plain
    prompt id lists (self only). gt answers are completed with EOS to the end of their last block."""
    out = []
    for i, it in enumerate(items):
        if hasattr(it, "prompt_text"):
            if tokenizer is None:
                raise ValueError("Problem items need tokenizer=")
            p = tokenizer.encode(it.prompt_text, add_special_tokens=False)
            a = None
            if source != "self":
                from mrp_repro.tasks import synthetic

                if it.benchmark not in synthetic.TASKS:
                    raise ValueError(
                        f"source {source!r} needs ground-truth answers; {it.task_id} ({it.benchmark}) has none"
                        " that can be sampled: use source 'self' or pass (prompt_ids, answer_ids) pairs"
                    )
                rng = random.Random(f"traj-answer|{seed}|{i}")
                a = tokenizer.encode(synthetic.sample_answer(it, rng), add_special_tokens=False)
        elif isinstance(it, tuple) and len(it) == 2:
            p, a = list(it[0]), (list(it[1]) if it[1] is not None else None)
        else:
            p, a = list(it), None
        if a is not None:
            if eos_id is None:
                raise ValueError("gt sources need eos_ids to end the answer")
            total = -(-(len(p) + len(a) + 1) // block_size) * block_size
            a = a + [eos_id] * (total - len(p) - len(a))
        elif source != "self":
            raise ValueError(f"source {source!r} needs an answer for every example (item {i} has none)")
        if not p:
            raise ValueError(f"example {i} has an empty prompt")
        out.append((p, a))
    return out


# ----------------------------------------------------------------------------- gt / gt-multi


def _block_diffusion_mask(key_valid: torch.Tensor, block_size: int) -> torch.Tensor:
    """(B, 1, 2T, 2T) over [noisy ; clean]: noisy block b sees noisy b and clean < b; clean is block-causal."""
    B, T = key_valid.shape
    dev = key_valid.device
    blk = torch.arange(T, device=dev) // block_size
    same = blk[:, None] == blk[None, :]
    before = blk[None, :] < blk[:, None]
    upto = blk[None, :] <= blk[:, None]
    top = torch.cat([same, before], 1)
    bottom = torch.cat([torch.zeros(T, T, dtype=torch.bool, device=dev), upto], 1)
    allowed = torch.cat([top, bottom], 0)[None] & key_valid.repeat(1, 2)[:, None, :]
    return (allowed | torch.eye(2 * T, dtype=torch.bool, device=dev)[None])[:, None]


@torch.no_grad()
def _gt_rows(model, mask_id, examples, ex_offset, source, block_size, chain_steps, gen, hook) -> list[dict]:
    L = block_size
    dev = model.lm_head.weight.device
    rows: list[dict] = []
    for j, (p, a) in enumerate(examples):
        ex = ex_offset + j
        seq = torch.tensor(p + a, dtype=torch.long)
        T = len(seq)
        T_pad = -(-T // L) * L
        clean = torch.full((T_pad,), mask_id, dtype=torch.long)
        clean[:T] = seq
        valid = torch.zeros(T_pad, dtype=torch.bool)
        valid[:T] = True
        is_answer = (torch.arange(T_pad) >= len(p)) & valid
        nb = T_pad // L
        first = len(p) // L
        # States per step, all blocks at once: states[s] (T_pad,)
        states = [clean.clone() for _ in range(chain_steps + 1)]
        info = {}
        for b in range(first, nb):
            sl = slice(b * L, (b + 1) * L)
            ans = is_answer[sl]
            n_ans = int(ans.sum())
            if n_ans < 2:
                continue
            t = GT_T_MIN + (1 - GT_T_MIN) * float(torch.rand((), generator=gen))
            u = torch.rand(L, generator=gen)
            masked = (u < t) & ans
            if int(masked.sum()) < 2:  # a reveal must leave a supervised slot: mask the lowest-u answer slots
                order = torch.argsort(torch.where(ans, u, torch.full_like(u, 2.0)))
                masked = masked.clone()
                masked[order[:2]] = True
            m = int(masked.sum())
            if source == "gt-multi":
                k1 = (
                    1
                    if float(torch.rand((), generator=gen)) < 0.5
                    else 1 + int(torch.randint(m - 1, (), generator=gen))
                )
            else:
                k1 = 1
            perm = masked.nonzero().flatten()[torch.randperm(m, generator=gen)]
            n_steps = min(chain_steps, 1 + (m - k1 - 1))  # after step s>=2 one more slot is revealed
            reveal_step = torch.zeros(L, dtype=torch.int8)
            reveal_step[perm[:k1]] = 1
            for s in range(2, n_steps + 1):
                reveal_step[perm[k1 + s - 2]] = s
            blk = clean[sl]
            for s in range(chain_steps + 1):
                still = masked & ((reveal_step == 0) | (reveal_step > s))
                states[s][sl] = torch.where(still, torch.full_like(blk, mask_id), blk)
            info[b] = (t, n_steps, reveal_step, perm[:k1], ans)
            if hook is not None:
                hook(ex, b)
        if not info:
            continue
        noisy = torch.stack(states)  # (S+1, T_pad)
        S1 = noisy.shape[0]
        inp = torch.cat([noisy, clean[None].expand(S1, -1)], 1).to(dev)
        pos = torch.arange(T_pad, device=dev)[None].expand(S1, -1).repeat(1, 2)
        mask = _block_diffusion_mask(valid[None].expand(S1, -1).to(dev), L)
        out = model(inp, pos, mask)
        hid = out.hidden[:, :T_pad].float().cpu()  # (S+1, T_pad, H)
        logits1 = out.logits[1, :T_pad].float().cpu()  # state 1: the backbone's own next pick
        for b, (t, n_steps, reveal_step, rpos, ans) in info.items():
            sl = slice(b * L, (b + 1) * L)
            m1 = noisy[1, sl] == mask_id
            lg = logits1[sl].clone()
            lg[:, mask_id] = float("-inf")
            conf, tok = torch.softmax(lg, -1).max(-1)
            conf = torch.where(m1, conf, torch.full_like(conf, -1.0))
            npos = int(torch.argmax(conf))  # ties: lowest index, as top_masked
            rows.append(
                _row(
                    ex,
                    b,
                    0,
                    clean[: b * L],
                    b * L,
                    noisy[: n_steps + 1, sl],
                    ans,
                    reveal_step,
                    rpos,
                    clean[sl][rpos],
                    npos,
                    int(tok[npos]),
                    hid[: n_steps + 1, sl],
                    n_steps,
                    t,
                )
            )
    return rows


def _row(ex, block, step, context, block_start, ids, ans, reveal_step, rpos, rtok, npos, ntok, hidden, n_steps, t):
    return dict(
        example=int(ex),
        block=int(block),
        step=int(step),
        context_ids=np.asarray(context, dtype=np.int32),
        block_start=int(block_start),
        ids=np.asarray(ids, dtype=np.int32).reshape(-1),
        answer_mask=np.asarray(ans, dtype=bool),
        reveal_step=np.asarray(reveal_step, dtype=np.int8),
        reveal_pos=np.asarray(rpos, dtype=np.int32).reshape(-1),
        reveal_tok=np.asarray(rtok, dtype=np.int32).reshape(-1),
        next_pos=int(npos),
        next_tok=int(ntok),
        hidden=np.asarray(hidden, dtype=np.float32).reshape(-1),
        n_steps=int(n_steps),
        t=float(t),
    )


# ----------------------------------------------------------------------------- self


def _self_rows(
    model, mask_id, examples, ex_offset, block_size, chain_steps, eos_ids, pad_id, max_new_tokens, batch_size, hook
) -> list[dict]:
    from mrp_repro.decoding.engine import Policy, generate, masked_confidence, top_masked

    L = block_size
    rows: list[dict] = []

    class Recorder(Policy):
        name = "static(1)+record"

        def __init__(self, offset: int):
            self.offset = offset

        def begin(self, model, batch, capacity, device, static_cache=False):
            return {"ctx": [[] for _ in range(batch)], "offset": self.offset}

        def on_commit(self, c, out, ids, positions, key_valid):
            for r in range(ids.shape[0]):
                c["ctx"][r].extend(ids[r][key_valid[r]].tolist())

        def denoise(self, st):
            c = st.ctx
            steps = []  # per step: ids (B, L), hidden (B, L, H), pick pos (B,), tok (B,), working (B,)
            while st.rows_needing_work().any():
                work = st.rows_needing_work()
                before = st.ids.clone()
                out = st.backbone()
                hid = out.hidden.float().cpu()
                tok, conf = masked_confidence(out.logits, st.masked, st.mask_id)
                pick = top_masked(conf, st.masked, 1)
                ppos = pick.float().argmax(1)
                steps.append((before.cpu(), hid, ppos.cpu(), tok.gather(1, ppos[:, None])[:, 0].cpu(), work.cpu()))
                st.reveal(pick, tok)
                st.step += 1
            for r in range(st.ids.shape[0]):
                if not bool(st.active[r]):
                    continue
                real = st.key_valid[r].cpu()
                ctx = c["ctx"][r]
                # answer slots: the ones that were masked when the block started
                ans = steps[0][0][r] == mask_id if steps else torch.zeros(L, dtype=torch.bool)
                ans = ans & real
                n_work = sum(1 for s in steps if bool(s[4][r]))
                for s in range(n_work - 1):  # the last step leaves nothing masked: nothing to supervise
                    n_steps = min(chain_steps, n_work - 1 - s)
                    ids = torch.stack([steps[s + k][0][r] for k in range(n_steps + 1)])
                    hidden = torch.stack([steps[s + k][1][r] for k in range(n_steps + 1)])
                    reveal_step = torch.zeros(L, dtype=torch.int8)
                    for k in range(n_steps):
                        reveal_step[int(steps[s + k][2][r])] = k + 1
                    t = float((ids[0] == mask_id).sum()) / max(int(ans.sum()), 1)
                    rows.append(
                        _row(
                            c["offset"] + r,
                            st.block,
                            s,
                            ctx,
                            len(ctx),
                            ids,
                            ans,
                            reveal_step,
                            [int(steps[s][2][r])],
                            [int(steps[s][3][r])],
                            int(steps[s + 1][2][r]),
                            int(steps[s + 1][3][r]),
                            hidden,
                            n_steps,
                            t,
                        )
                    )
                if hook is not None:
                    hook(c["offset"] + r, st.block)

    for lo in range(0, len(examples), batch_size):
        prompts = [p for p, _ in examples[lo : lo + batch_size]]
        generate(model, prompts, Recorder(ex_offset + lo), L, mask_id, list(eos_ids), max_new_tokens, pad_id=pad_id)
    rows.sort(key=lambda r: (r["example"], r["block"], r["step"]))
    return rows


# ----------------------------------------------------------------------------- collect


def collect(
    backbone_model,
    mask_id: int,
    problems_or_token_lists: Sequence,
    source: str,
    out_dir: str | os.PathLike,
    shard_size: int,
    seed: int,
    progress: bool = True,
    *,
    block_size: int,
    eos_ids: Sequence[int] = (),
    pad_id: int | None = None,
    tokenizer=None,
    max_new_tokens: int = 64,
    chain_steps: int = 3,
    batch_size: int = 32,
    profile_hash: str | None = None,
    hook: Callable[[int, int], None] | None = None,
    rerun: str | None = None,
) -> Path:
    """Collect trajectories of `source` into `out_dir`; returns the manifest path.

    `hook(example, block)` is called inside the loop (tests use it to interrupt a run).
    Resumes a killed run, and repairs a damaged one: shards in the manifest are verified (size and
    sha256) and kept; missing, truncated or corrupted ones are collected again (same seeds, so the
    same rows). rerun: the command that reruns this collection, quoted by later error messages.
    Under torchrun (distributed.current().world > 1) every rank calls this with the same arguments and
    collects the shards i with i % world == rank (see the docstring of mrp_repro.trajectory_store)."""
    if source not in SOURCES:
        raise ValueError(f"source {source!r}: choose one of {SOURCES}")
    if chain_steps < 1:
        raise ValueError("chain_steps must be >= 1")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    eos_id = eos_ids[0] if len(eos_ids) else None
    examples = _as_examples(problems_or_token_lists, source, tokenizer, block_size, eos_id, seed)
    settings = dict(
        format_version=FORMAT_VERSION,
        source=source,
        profile_hash=profile_hash,
        backbone_hash=model_fingerprint(backbone_model),
        block_size=block_size,
        chain_steps=chain_steps,
        hidden_size=backbone_model.config.hidden_size,
        mask_id=int(mask_id),
        n_examples=len(examples),
        shard_size=shard_size,
        seed=seed,
        max_new_tokens=max_new_tokens if source == "self" else None,
        examples_sha256=hashlib.sha256(json.dumps(examples).encode()).hexdigest()[:16],
    )
    n_shards = -(-len(examples) // shard_size)

    def make_shard(i: int) -> dict:
        """Collect and write shard i; its manifest entry. Seeded by (seed, source, i) only, so a shard's
        bytes do not depend on the world size or on which rank makes it."""
        lo, hi = i * shard_size, min((i + 1) * shard_size, len(examples))
        gen = torch.Generator().manual_seed(
            int(hashlib.sha256(f"traj|{seed}|{source}|{i}".encode()).hexdigest()[:15], 16)
        )
        if source == "self":
            rows = _self_rows(
                backbone_model, mask_id, examples[lo:hi], lo, block_size, chain_steps, eos_ids, pad_id,
                max_new_tokens, batch_size, hook,
            )  # fmt: skip
        else:
            rows = _gt_rows(backbone_model, mask_id, examples[lo:hi], lo, source, block_size, chain_steps, gen, hook)
        name = f"shard-{i:05d}.parquet"
        _write_shard(rows, out / name)
        st = (out / name).stat()
        return dict(
            index=i, file=name, rows=len(rows), examples=[lo, hi], bytes=st.st_size, sha256=sha256_file(out / name)
        )

    def shard_len(i: int) -> int:
        return min(shard_size, len(examples) - i * shard_size)

    d = distributed.current()
    was_training = backbone_model.training
    backbone_model.eval()
    bar = None
    try:
        if d.active:
            return _collect_ranks(d, out, settings, rerun, n_shards, make_shard, shard_len, progress, source)
        manifest = _prepare(out, settings, rerun, n_shards)
        done = {e["index"] for e in manifest["shards"]}
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(examples), desc=f"trajectories {source}", unit="ex")
            bar.update(sum(shard_len(i) for i in done))
        for i in range(n_shards):
            if i in done:
                continue
            entry = make_shard(i)
            manifest["shards"] = sorted(
                [e for e in manifest["shards"] if e["index"] != i] + [entry], key=lambda e: e["index"]
            )
            write_json_atomic(out / "manifest.json", manifest)
            if bar is not None:
                bar.update(shard_len(i))
    finally:
        backbone_model.train(was_training)
        if bar is not None:
            bar.close()
    return _finish(out, manifest)
