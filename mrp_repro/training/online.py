"""Train the MRP head online, the paper's recipe (METHOD.md §2 "Training (paper)"), on packed chat SFT data.

    .venv/bin/python -m mrp_repro.stages head --profile sdar-1.7b     # mrp_training.recipe: online

    from mrp_repro.training.online import train_online
    metrics = train_online(profile, backbone, out_dir)                 # same artifacts as training.mrp.train_mrp

One step, per packed micro-batch of SFT sequences (tasks/sft.py: prompt + answer, block-aligned samples,
positions restarting at 0 per sample, attention never crossing samples):
  1. noise: each sample draws t ~ U(1e-3, 1); each answer slot is masked with probability t (prompts never);
  2. reveals: step k = 1..K reveals ONE still-masked slot per block with its ground-truth token;
  3. one frozen backbone forward, no grad, over [state_0 ; ... ; state_K ; clean] (the block-diffusion layout
     of training/backbone.py extended to K+1 noisy copies): noisy block b of every state sees its own block
     and the clean blocks < b of its sample, exactly the attention of the offline `gt` trajectories
     (trajectories._gt_rows) and of decoding against a cache. h_A = state 0, B_k = lm_head(state k);
  4. the head, with grad, over [state_k ; clean] under the same mask: its clean half writes the keys/values the
     head's cache holds at inference (MRPHead.commit of the clean earlier blocks), its noisy half is
     MRPHead.forward of every block at once; h_k = h_{k-1} + h_C(k) (residual) or h_C(k) (direct);
  5. loss = mean_k sum over slots still masked after step k of (1/t) KL(B_k || A + C_k) / (answer slots),
     `kernels.residual_kl`, identical to training.mrp.mrp_loss on the same draws (tests/test_online.py).
Micro-batches (mrp_training.micro_batch_size) accumulate to the global batch (batch_size sequences); the
reported loss is their mean. On CUDA the step runs under bf16 autocast; beside a bf16/fp16 backbone the head
keeps fp32 master weights and computes in the backbone's dtype (training.common.head_autocast).
grad_checkpointing recomputes each head layer in backward.

Batches: step i takes the global-batch indices i*bs .. i*bs+bs-1 of an endless sequence of epochs, each a
permutation of the training sequences seeded by (seed, epoch); noise by (seed, step, micro-batch). So a
resumed run equals an uninterrupted one. Held-out: a fixed set of packed sequences with fixed draws.
Artifacts, recovery and resume: as training.mrp.train_mrp (head/, metrics.json, loss_curve.csv/.json,
ckpt.pt, provenance.json, done.json).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import random
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import torch
from torch.utils.checkpoint import checkpoint

from mrp_repro import integrity
from mrp_repro.checkpoint import CheckpointError
from mrp_repro.config import ConfigError
from mrp_repro.distributed import Dist, current
from mrp_repro.kernels import residual_kl
from mrp_repro.model import rope_cos_sin
from mrp_repro.mrp import MRPHead
from mrp_repro.tasks.sft import (
    PackedSequences,
    iter_samples,
    open_packed,
    open_sft_source,
    pack,
    pack_to_disk,
    packed_problem,
)
from mrp_repro.training.common import HEAD_COMMAND, ddp_loss, head_autocast, lr_lambda_for
from mrp_repro.training.mrp import _save_ckpt, _write_curves, finish_on_main, heldout_summary, load_ckpt
from mrp_repro.trajectories import GT_T_MIN, model_fingerprint

__all__ = ["packed_state_mask", "draw_noise", "online_loss", "load_packed", "train_online"]

MAX_HELDOUT_SEQS = 64


def _seed(*parts) -> int:
    return int(hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()[:15], 16)


def packed_state_mask(doc: torch.Tensor, block_size: int, n_states: int) -> torch.Tensor:
    """(B, 1, (S+1)T, (S+1)T) bool over [state_0 ; ... ; state_{S-1} ; clean] for packed rows, doc (B, T)
    the sample of each slot (-1 = padding). A noisy slot of block b sees its own block in its own state and
    the clean blocks < b; a clean slot sees the clean blocks <= b (block-causal); never across samples.
    Every query sees itself, so padding rows stay finite."""
    B, T = doc.shape
    dev = doc.device
    blk = torch.arange(T, device=dev) // block_size
    same = (doc[:, :, None] == doc[:, None, :]) & (doc >= 0)[:, :, None]
    nn_ = same & (blk[:, None] == blk[None, :])
    nc = same & (blk[None, :] < blk[:, None])
    cc = same & (blk[None, :] <= blk[:, None])
    S = n_states
    m = torch.zeros(B, (S + 1) * T, (S + 1) * T, dtype=torch.bool, device=dev)
    for s in range(S):
        m[:, s * T : (s + 1) * T, s * T : (s + 1) * T] = nn_
        m[:, s * T : (s + 1) * T, S * T :] = nc
    m[:, S * T :, S * T :] = cc
    m |= torch.eye((S + 1) * T, dtype=torch.bool, device=dev)[None]
    return m[:, None]


def draw_noise(batch: dict, block_size: int, mask_id: int, k_steps: int, gen: torch.Generator) -> dict:
    """The paper's draws for packed rows: t ~ U(1e-3, 1) per sample, answer slots masked w.p. t, then K steps
    each revealing one random still-masked slot per block. Returns states (B, K+1, T) and weight (B, T) = 1/t."""
    ids, doc, ans = batch["ids"], batch["doc"], batch["answer"]
    B, T = ids.shape
    n_doc = int(doc.max()) + 1 if doc.numel() else 0
    t_doc = GT_T_MIN + (1 - GT_T_MIN) * torch.rand(B, max(n_doc, 1), generator=gen)
    t = torch.where(doc >= 0, t_doc.gather(1, doc.clamp(min=0)), torch.ones(B, T))
    masked = (torch.rand(B, T, generator=gen) < t) & ans
    states = [torch.where(masked, torch.full_like(ids, mask_id), ids)]
    still = masked
    nb = T // block_size
    for _ in range(k_steps):
        keys = torch.where(still, torch.rand(B, T, generator=gen), torch.full((B, T), 2.0)).view(B, nb, block_size)
        pick = torch.zeros(B, nb, block_size, dtype=torch.bool)
        pick.scatter_(2, keys.argmin(2, keepdim=True), True)
        pick &= still.view(B, nb, block_size)  # blocks with nothing masked reveal nothing
        still = still & ~pick.view(B, T)
        states.append(torch.where(still, torch.full_like(ids, mask_id), ids))
    return dict(states=torch.stack(states, 1), weight=1.0 / t)


def _head_packed(head: MRPHead, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, ckpt: bool):
    cos, sin = rope_cos_sin(positions, head.config.head_dim, head.config.rope_theta, x.dtype)
    for layer in head.layers:
        if ckpt and torch.is_grad_enabled():
            x, _ = checkpoint(layer, x, cos, sin, mask, None, use_reentrant=False)
        else:
            x, _ = layer(x, cos, sin, mask)
    return x


def online_loss(
    head: MRPHead,
    model,
    batch: dict,
    states: torch.Tensor,
    weight: torch.Tensor,
    mask_id: int,
    block_size: int,
    grad_checkpointing: bool = False,
    with_stats: bool = False,
    timings: dict | None = None,
):
    """The loss of one packed micro-batch (module docstring) on given draws: states (B, K+1, T), weight (B, T).
    batch: ids (clean), doc, pos, answer (B, T) on the model's device. with_stats adds per-slot KL sums of the
    head and of the uncorrected KL(B_k || A); timings (a dict) accumulates seconds of backbone / head forward."""
    ids, doc, pos, ans = batch["ids"], batch["doc"], batch["pos"], batch["answer"]
    B, T = ids.shape
    K = states.shape[1] - 1
    embed, lm_head = model.embed_tokens, model.lm_head
    sync = (lambda: torch.cuda.synchronize()) if ids.is_cuda else (lambda: None)  # noqa: E731
    t0 = time.perf_counter()
    with torch.no_grad():
        inp = torch.cat([states[:, s] for s in range(K + 1)] + [ids], 1)
        out = model(inp, pos.repeat(1, K + 2), packed_state_mask(doc, block_size, K + 1), with_logits=False)
        hid = out.hidden
        h_states = [hid[:, s * T : (s + 1) * T] for s in range(K + 1)]
        h_clean = hid[:, (K + 1) * T :]
        h_A = h_states[0]
    sync()
    t1 = time.perf_counter()
    head_mask = packed_state_mask(doc, block_size, 1)
    pos2 = pos.repeat(1, 2)
    x_clean = head._inputs(h_clean, ids, embed)  # with grad: the loss reaches the head through the cached K/V
    denom = ans.sum().clamp(min=1).float()
    total = 0.0
    stats = dict(kl_sum=0.0, base_sum=0.0, n=0, kl1_sum=0.0, base1_sum=0.0, n1=0)
    h = h_A
    for k in range(1, K + 1):
        x = torch.cat([head._inputs(h, states[:, k], embed), x_clean], 1)
        h_C = head.norm(_head_packed(head, x, pos2, head_mask, grad_checkpointing)[:, :T])
        h = head.corrected(h, h_C)
        still = (states[:, k] == mask_id) & (doc >= 0)
        if not still.any():
            continue
        with torch.no_grad():
            B_k = lm_head(h_states[k][still])
            A_all = lm_head(h_A[still])
        A = A_all if head.objective == "residual" else torch.zeros_like(B_k)
        C = lm_head((h - h_A)[still] if head.objective == "residual" else h[still])
        kl = residual_kl(A, C, B_k)
        total = total + (kl * weight[still]).sum() / denom
        if with_stats:
            with torch.no_grad():
                base = residual_kl(A_all, torch.zeros_like(B_k), B_k)
                stats["kl_sum"] += float(kl.sum())
                stats["base_sum"] += float(base.sum())
                stats["n"] += int(still.sum())
                if k == 1:
                    stats["kl1_sum"], stats["base1_sum"], stats["n1"] = (
                        float(kl.sum()),
                        float(base.sum()),
                        int(still.sum()),
                    )
    loss = total / K if torch.is_tensor(total) else torch.zeros((), device=ids.device, requires_grad=True)
    if timings is not None:
        sync()
        timings["backbone_s"] = timings.get("backbone_s", 0.0) + (t1 - t0)
        timings["head_fwd_s"] = timings.get("head_fwd_s", 0.0) + (time.perf_counter() - t1)
    return (loss, stats) if with_stats else loss


# ----------------------------------------------------------------------------- data


#: bumped when the packed layout changes, so an older cache is never read
PACK_VERSION = 1


def packed_key(profile, backbone, fingerprint: str) -> str:
    """What the packed data depends on: the source's content, the split and sizes, and the tokenizer."""
    tc, tok = profile.mrp_training, backbone.tokenizer
    spec = [
        PACK_VERSION,
        tc.sft_source,
        tc.sft_split,
        tc.max_samples,
        tc.seq_len,
        profile.block_size,
        fingerprint,
        type(tok).__name__,
        len(tok),
        getattr(tok, "chat_template", None),
        backbone.eos_ids[0],
        backbone.pad_id,
    ]
    return hashlib.sha256(json.dumps(spec, default=str).encode()).hexdigest()[:12]  # fmt: skip


def load_packed(profile, backbone, cache_parent: Path | None = None) -> tuple[PackedSequences, str]:
    """(packed rows, data sha) of the profile's SFT source, tokenised with the backbone's tokenizer and packed to
    mrp_training.seq_len.

    cache_parent None: packed in memory. Else the rows are streamed once into <cache_parent>/sft-packed-<key>/
    (tasks.sft.pack_to_disk; key: packed_key) and memory-mapped from there, so a million-sequence SFT set is
    tokenised once, never held in memory, and shared by every torchrun rank (rank 0 packs; the others wait)."""
    from mrp_repro import distributed
    from mrp_repro.runtime import data_dir

    tc = profile.mrp_training
    recs, fingerprint = open_sft_source(tc.sft_source, tc.sft_split, data_dir=data_dir(profile),
                                        max_samples=tc.max_samples)  # fmt: skip
    samples = iter_samples(recs, backbone.tokenizer, profile.block_size, backbone.eos_ids[0])
    if cache_parent is None:
        data = pack(samples, tc.seq_len, profile.block_size, pad_id=backbone.pad_id)
        sha = hashlib.sha256(data.ids.numpy().tobytes() + data.answer.numpy().tobytes()).hexdigest()[:16]
    else:
        d = distributed.current()
        cache = Path(cache_parent) / f"sft-packed-{packed_key(profile, backbone, fingerprint)}"
        if d.is_main and (why := packed_problem(cache)) is not None:  # every file against its recorded sha256
            if (cache / "meta.json").exists():  # damaged: the source is here, so it is rebuilt
                print(f"online: not reusing {cache}: {why}; packing it again from {tc.sft_source}", file=sys.stderr)
            with integrity.stage_lock(cache, f"SFT packing for profile {profile.name}"):
                integrity.remove_stale_temps_in(cache)  # a killed pack's half-written files (the lock is ours)
                pack_to_disk(samples, tc.seq_len, profile.block_size, cache, pad_id=backbone.pad_id, progress=True)
        d.barrier()
        data, meta = open_packed(cache)
        sha = hashlib.sha256((meta["sha256"]["ids"] + meta["sha256"]["answer"]).encode()).hexdigest()[:16]
    if len(data) == 0:
        raise ValueError(f"{tc.sft_source}: no usable (prompt, answer) sample")
    return data, sha


def _split(n: int, frac: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    idx = list(range(n))
    random.Random(f"online-heldout|{seed}").shuffle(idx)
    n_h = min(MAX_HELDOUT_SEQS, max(1, int(round(frac * n)))) if frac > 0 and n > 1 else 0
    return torch.tensor(sorted(idx[n_h:]), dtype=torch.long), torch.tensor(sorted(idx[:n_h]), dtype=torch.long)


def _step_rows(train_rows: torch.Tensor, step: int, bs: int, seed: int) -> torch.Tensor:
    """The global batch of `step`: consecutive slices of per-epoch permutations, keyed by (seed, epoch)."""
    N = len(train_rows)
    out = []
    for i in range(step * bs, step * bs + bs):
        ep, j = divmod(i, N)
        perm = torch.randperm(N, generator=torch.Generator().manual_seed(_seed("online-epoch", seed, ep)))
        out.append(int(perm[j]))
    return train_rows[torch.tensor(out, dtype=torch.long)]


def _to(batch: dict, dev) -> dict:
    return {k: v.to(dev) for k, v in batch.items()}


@torch.no_grad()
def _heldout(head, model, data, rows, profile, mask_id, mb, dev, amp, d: Dist | None = None) -> dict:
    """Held-out metrics; under d (a distributed.Dist) each rank takes its share of the micro-batches (their
    noise is keyed by position, not rank) and the sums are all-reduced."""
    was = head.training
    head.eval()
    agg = dict(kl_sum=0.0, base_sum=0.0, n=0, kl1_sum=0.0, base1_sum=0.0, n1=0)
    loss_sum, nb = 0.0, 0
    for lo in (d or Dist()).shard(range(0, len(rows), mb)):
        b = data.rows(rows[lo : lo + mb])
        dr = draw_noise(
            b,
            profile.block_size,
            mask_id,
            profile.mrp.k_steps,
            torch.Generator().manual_seed(_seed("online-heldout-noise", profile.seed, lo)),
        )
        with amp():
            loss, st = online_loss(
                head,
                model,
                _to(b, dev),
                dr["states"].to(dev),
                dr["weight"].to(dev),
                mask_id,
                profile.block_size,
                with_stats=True,
            )
        loss_sum += float(loss)
        nb += 1
        for key in agg:
            agg[key] += st[key]
    head.train(was)
    return heldout_summary(loss_sum, nb, agg, d)


def _micro_loss(head, batch, states, weight, *, model, mask_id, block_size, grad_checkpointing):
    return online_loss(head, model, batch, states, weight, mask_id, block_size, grad_checkpointing=grad_checkpointing)


def _amp_for(model, dev):
    dt = model.lm_head.weight.dtype
    if dt in (torch.bfloat16, torch.float16):
        return functools.partial(head_autocast, dt, dev)
    if dev.type == "cuda" and torch.cuda.is_bf16_supported():  # the paper trains in bf16
        return functools.partial(torch.autocast, device_type="cuda", dtype=torch.bfloat16)
    return nullcontext


def total_steps(tc, n_train: int) -> int:
    """mrp_training.steps, or with epochs set, ceil(epochs * training sequences / global batch)."""
    return tc.steps if tc.epochs is None else max(1, math.ceil(tc.epochs * n_train / tc.batch_size))


def train_online(
    profile,
    backbone,
    out_dir,
    progress: bool = True,
    resume: bool = True,
    stop_after: int | None = None,
    extra_metrics: Callable[[MRPHead], dict] | None = None,
) -> dict:
    """Train a head online on the profile's SFT data; the signature, artifacts, resume and recovery of
    training.mrp.train_mrp (without its trajectory directories). backbone: a `backbone.Backbone` (model,
    tokenizer, mask_id, eos_ids, pad_id). Returns the metrics dict ({"step", "finished": False} when stopped).

    Under torchrun (distributed.init() called first): the frozen backbone is on every rank and the head trains
    under DDP. Step s's n_micro = ceil(batch_size / micro_batch_size) micro-batches are numbered globally (rows
    and noise keyed by (seed, step, mi), never by rank); rank r runs those with mi % N == r, each scaled
    by N / n_micro, with DDP's all-reduce (an average) only after its last one: the single-process gradient.
    Held-out micro-batches are sharded the same way and their sums all-reduced. Rank 0 alone writes; a run
    resumes on any world size; every rank returns the same metrics."""
    dd = current()
    out = Path(out_dir)
    if dd.is_main:
        integrity.make_dir(out)  # a run directory that is a symbolic link is refused (LinkRefused)
    model, mask_id, L = backbone.model, backbone.mask_id, profile.block_size
    mc, tc = profile.mrp, profile.mrp_training
    if tc.pick_loss_weight:
        raise ConfigError(
            f"mrp_training.pick_loss_weight={tc.pick_loss_weight} needs the backbone's recorded next picks, which "
            "the online recipe does not have; set mrp_training.recipe: offline, or pick_loss_weight: 0"
        )
    dev = model.lm_head.weight.device
    for p in model.parameters():
        p.requires_grad_(False)
    model.eval()
    bb_hash = model_fingerprint(model)
    data, data_sha = load_packed(profile, backbone, cache_parent=out.parent)  # runs/<profile>/sft-packed-<key>/
    train_rows, held_rows = _split(len(data), tc.heldout_frac, profile.seed)
    if len(train_rows) == 0:
        raise ValueError(f"{tc.sft_source}: no training sequences")
    steps = total_steps(tc, len(train_rows))
    bs, mb = tc.batch_size, tc.micro_batch_size
    n_micro = -(-bs // mb)
    if n_micro < dd.world:
        raise ConfigError(
            f"mrp_training.batch_size={bs} / micro_batch_size={mb} gives {n_micro} micro-batches per step, fewer "
            f"than the {dd.world} ranks; set mrp_training.micro_batch_size <= {bs // dd.world} (or raise "
            "batch_size), or launch fewer ranks (--nproc)"
        )
    amp = _amp_for(model, dev)

    torch.manual_seed(profile.seed)
    head = MRPHead(model.config, mc.num_layers, mc.objective)
    head.init_weights(mc.init, mc.init_std, generator=torch.Generator().manual_seed(profile.seed))
    head.to(device=dev, dtype=torch.float32).train()
    opt = torch.optim.AdamW(head.parameters(), lr=tc.lr)
    warm = max(1, int(round(tc.warmup_frac * steps)))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda_for(steps, warm, tc.min_lr_ratio))
    curve, heldout, start = [], [], 0
    ck = out / "ckpt.pt"
    rerun = HEAD_COMMAND.format(name=profile.cli_arg)
    if resume and ck.exists():
        st = load_ckpt(ck, rerun, dev)
        if st.get("sft_data_sha256", data_sha) != data_sha:  # batches are indices into the packed data
            raise CheckpointError(
                f"{ck} was written while training on other SFT data (packed sha256 {st['sft_data_sha256']}, now "
                f"{data_sha}); delete it and rerun {rerun}, or restore the data it was trained on"
            )
        head.load_state_dict(st["head"])
        opt.load_state_dict(st["optimizer"])
        sched.load_state_dict(st["scheduler"])
        curve, heldout, start = st["curve"], st["heldout"], st["step"]
    micro_loss = functools.partial(
        _micro_loss, model=model, mask_id=mask_id, block_size=L, grad_checkpointing=tc.grad_checkpointing
    )
    loss_of, no_sync = ddp_loss(head, micro_loss, dd, dev)
    t0 = time.time() - (curve[-1]["elapsed_s"] if curve else 0.0)
    if not heldout and len(held_rows):
        heldout.append({"step": 0, **_heldout(head, model, data, held_rows, profile, mask_id, mb, dev, amp, dd)})
    bar = None
    if progress and dd.is_main:
        from tqdm.auto import tqdm

        bar = tqdm(total=steps, initial=start, desc="train MRP (online)", unit="step")
    step = start
    for step in range(start, steps):
        if stop_after is not None and step - start >= stop_after:
            break
        rows = _step_rows(train_rows, step, bs, profile.seed)
        opt.zero_grad(set_to_none=True)
        loss_sum = 0.0
        mine = dd.shard(range(n_micro))
        for j, mi in enumerate(mine):
            b = data.rows(rows[mi * mb : (mi + 1) * mb])
            dr = draw_noise(
                b, L, mask_id, mc.k_steps, torch.Generator().manual_seed(_seed("online-noise", profile.seed, step, mi))
            )
            # DDP's all-reduce only after this rank's last micro-batch: the others accumulate locally
            with no_sync() if j < len(mine) - 1 else nullcontext():
                with amp():
                    loss = loss_of(_to(b, dev), dr["states"].to(dev), dr["weight"].to(dev))
                # DDP averages the ranks' gradients, so * world: the sum over all n_micro of loss / n_micro
                (loss * dd.world / n_micro if dd.active else loss / n_micro).backward()
            loss_sum += float(loss.detach())
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        sched.step()
        if dd.active:
            loss_sum = dd.all_reduce_sum([loss_sum])[0]
        loss_val = loss_sum / n_micro
        curve.append(dict(step=step + 1, loss=loss_val, lr=sched.get_last_lr()[0], elapsed_s=time.time() - t0))
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{loss_val:.4f}")
        if (step + 1) % tc.ckpt_every == 0 or step + 1 == steps:
            if len(held_rows):
                hm = _heldout(head, model, data, held_rows, profile, mask_id, mb, dev, amp, dd)
                heldout.append({"step": step + 1, **hm})
            if dd.is_main:
                _save_ckpt(out, step + 1, head, opt, sched, curve, heldout, extra={"sft_data_sha256": data_sha})
                _write_curves(out, curve, heldout)
    else:
        step = steps
    if bar is not None:
        bar.close()
    if step < steps:  # interrupted on purpose (stop_after)
        dd.barrier()  # rank 0's last checkpoint is on disk before any rank returns (and, say, resumes)
        return {"step": step, "finished": False}
    return finish_on_main(
        dd,
        profile, out, head, model, curve, heldout, bb_hash, [tc.sft_source], extra_metrics, rerun, dev,
        head_extra={"recipe": "online"}, recipe="online", steps=steps, train_rows=len(train_rows),
        heldout_rows=len(held_rows), sft_data_sha256=data_sha, seq_len=tc.seq_len, tokens_per_step=bs * tc.seq_len,
        train_answer_tokens=int(data.answer[train_rows].sum()),
    )  # fmt: skip


def step_cost(profile, backbone, micro_batches: int = 3) -> dict:
    """Seconds per micro-batch of online training, split into the frozen backbone forward, the head forward
    and the head backward (+ optimiser step), averaged over `micro_batches` after one warm-up.

        .venv/bin/python -m mrp_repro.training.online --profile smoke --seq-len 256 --micro 2
    """
    model, L, tc = backbone.model, profile.block_size, profile.mrp_training
    dev = model.lm_head.weight.device
    data, _ = load_packed(profile, backbone)
    head = MRPHead(model.config, profile.mrp.num_layers, profile.mrp.objective).init_weights("normal", 0.02)
    head.to(dev).train()
    opt = torch.optim.AdamW(head.parameters(), lr=1e-3)
    amp = _amp_for(model, dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    tim: dict = {}
    n = min(tc.micro_batch_size, len(data))
    for i in range(micro_batches + 1):
        b = data.rows(torch.arange(n))
        dr = draw_noise(b, L, backbone.mask_id, profile.mrp.k_steps, torch.Generator().manual_seed(i))
        t_step = {} if i == 0 else tim
        with amp():
            loss = online_loss(
                head,
                model,
                _to(b, dev),
                dr["states"].to(dev),
                dr["weight"].to(dev),
                backbone.mask_id,
                L,
                grad_checkpointing=tc.grad_checkpointing,
                timings=t_step,
            )
        t0 = time.perf_counter()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        t_step["head_bwd_s"] = t_step.get("head_bwd_s", 0.0) + time.perf_counter() - t0
    out = {k: v / micro_batches for k, v in tim.items()}
    out["total_s"] = sum(out.values())
    out["tokens_per_micro_batch"] = n * tc.seq_len
    return out


def main(argv: list[str] | None = None) -> None:
    """Seconds per online micro-batch, by part, on a random scratch backbone of the profile's shape:

        .venv/bin/python -m mrp_repro.training.online --profile smoke [--seq-len N] [--micro N] [--k-steps K]
    """
    import argparse

    from mrp_repro.backbone import Backbone, special_ids
    from mrp_repro.config import load_profile
    from mrp_repro.errors import UserError
    from mrp_repro.model import SDARModel
    from mrp_repro.training.backbone import make_tokenizer, model_config_for

    ap = argparse.ArgumentParser(description="online MRP training: seconds per micro-batch, by part")
    ap.add_argument("--profile", default="smoke")
    ap.add_argument("--seq-len", type=int, default=None)
    ap.add_argument("--micro", type=int, default=None)
    ap.add_argument("--k-steps", type=int, default=None)
    a = ap.parse_args(argv)
    over = {"mrp_training.recipe": "online"}
    if a.seq_len:
        over["mrp_training.seq_len"] = a.seq_len
    if a.micro:
        over["mrp_training.micro_batch_size"] = a.micro
        over["mrp_training.batch_size"] = a.micro
    if a.k_steps:
        over["mrp.k_steps"] = a.k_steps
    P = load_profile(a.profile, over)
    if P.model.source != "scratch":  # training/ sits below stages, which loads hub backbones: no import here
        raise UserError(
            f"this command times a random scratch backbone; profile {P.name!r} loads a {P.model.source} one. From "
            "Python: from mrp_repro import stages; from mrp_repro.training.online import step_cost; "
            f"step_cost(P, stages.backbone(P)) with P = load_profile({P.name!r}, {over})"
        )
    # A random scratch backbone of the profile's shape (as stages.random_backbone; training/ sits below
    # stages): the cost does not depend on the weights.
    tok = make_tokenizer()
    model = SDARModel(model_config_for(P, len(tok))).init_weights(0.02, torch.Generator().manual_seed(0)).eval()
    bb = Backbone(model, tok, *special_ids(tok), P.block_size, None, P)
    c = step_cost(P, bb)
    print(f"{'part':<14}{'s / micro-batch':>16}{'share':>8}")
    for k in ("backbone_s", "head_fwd_s", "head_bwd_s", "total_s"):
        print(f"{k:<14}{c[k]:>16.4f}{c[k] / c['total_s']:>8.1%}")
    print(f"tokens per micro-batch: {c['tokens_per_micro_batch']}")


if __name__ == "__main__":
    from mrp_repro.cli import run_cli

    run_cli(main)  # a user error, Ctrl-C or a full disk is one error: line
