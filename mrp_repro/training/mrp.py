"""Train the MRP head on collected trajectories (METHOD.md §2, training).

    .venv/bin/python -m mrp_repro.stages head --profile tiny     # collects trajectories if missing; cached
    .venv/bin/python -m mrp_repro.stages head --profile smoke    # seconds

    from mrp_repro.training.mrp import train_mrp
    metrics = train_mrp(profile, backbone, trajectory_dirs, out_dir)   # stages.head(P, bb) picks the dirs

Loss (per batch): for k = 1..K (K = mrp.k_steps), the head chains k reveals from h_A,
h_k = h_{k-1} + h_C(k) (residual) or h_C(k) (direct), and is fitted to the backbone's true
state after k reveals, B_k = lm_head(h_k^true):

    loss_k = sum over slots still masked after step k of (1/t) KL(softmax B_k || softmax(A + C_k))
             / (answer slots of the batch's blocks)
    loss   = mean_k loss_k

with A = lm_head(h_A) (frozen) and C_k = lm_head(h_k - h_A) (residual; A + C_k = lm_head(h_k)),
or A = 0 and C_k = lm_head(h_k) (direct). The KL is `kernels.residual_kl` (Triton on CUDA). K-step
targets come from the trajectories' stored chains (steps 2..K reveal one slot each; rows whose
chain is shorter contribute the steps they have). The head's KV cache of earlier blocks is
rebuilt per batch from the clean context exactly as at inference (backbone block-causal
prefill, then `MRPHead.commit`), here with gradients flowing through the cached keys/values.

Optimiser: AdamW (lr mrp_training.lr), linear warmup over warmup_frac of the steps, cosine to
min_lr_ratio. Batches are keyed by (seed, step), so a resumed run equals an uninterrupted one.
Artifacts: head/ (mrp.safetensors in the released naming + mrp_config.json), metrics.json,
loss_curve.csv / .json (train loss per step; held-out MRP KL and uncorrected KL(B || A) at every
checkpoint), ckpt.pt (resume state; tensors and plain types, loaded with weights_only=True) and its
ckpt.pt.sha256.json, provenance.json, done.json (the sha256 of every output: the integrity record). Every file
is written to a unique temporary name and renamed, so a killed run leaves the previous checkpoint intact.

Recovery: a finished run whose head is missing, unreadable or not matching done.json's record is rewritten from
ckpt.pt on the next call (stages.train_head; no retraining); an unreadable, changed or code-carrying ckpt.pt is an
error naming it (delete it: training restarts from step 0, with the same batches, so the same head). A head is
checked against the backbone's fingerprint.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
import random
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from mrp_repro import integrity
from mrp_repro.checkpoint import CheckpointError, load_state
from mrp_repro.config import ConfigError
from mrp_repro.distributed import Dist, current
from mrp_repro.kernels import residual_kl
from mrp_repro.model import SDARModel
from mrp_repro.mrp import MRPHead, save_head
from mrp_repro.runtime import provenance, write_json_atomic
from mrp_repro.training.common import HEAD_COMMAND, ddp_loss, head_autocast, lr_lambda_for, write_curve
from mrp_repro.trajectories import load_trajectories, model_fingerprint
from mrp_repro.trajectory_store import TrajectoryError

__all__ = [
    "TrajectoryData",
    "mrp_loss",
    "heldout_metrics",
    "train_mrp",
    "train_sources",
]

MAX_HELDOUT_ROWS = 512


# ----------------------------------------------------------------------------- data


class TrajectoryData:
    """Trajectory rows as padded tensors: ids (N, S+1, L), hidden (N, S+1, L, H), ...; contexts as lists."""

    def __init__(self, datasets_list, mask_id: int, block_size: int):
        metas = [self._meta(json.loads(ds.info.description or "{}"), block_size) for ds in datasets_list]
        sizes = [len(ds) for ds in datasets_list]
        hidden_size = next((len(ds[0]["hidden"]) // (len(ds[0]["ids"])) for ds in datasets_list if len(ds)), 0)
        self._allocate(sizes, max([1] + [m["chain_steps"] for m in metas]), hidden_size, mask_id, block_size)
        for si, ds in enumerate(datasets_list):
            self._fill(ds, si)
        self._finish()

    @classmethod
    def from_dirs(
        cls, dirs, mask_id: int, block_size: int, expect: dict | None = None, rerun: str | None = None
    ) -> TrajectoryData:
        """The rows of finished collections, loaded one at a time into tensors allocated once from their manifests'
        row counts: at most one collection's Arrow table lives beside the tensors (chain16's two collections
        together came to a 21 GB peak when all were loaded first). rerun: the command their errors name."""
        from mrp_repro.trajectory_store import read_manifest

        manifests = [read_manifest(d, rerun) for d in dirs]
        metas = [cls._meta(m, block_size) for m in manifests]
        self = cls.__new__(cls)
        sizes = [int(m["n_rows"]) for m in manifests]
        S = max([1] + [m["chain_steps"] for m in metas])
        self._allocate(sizes, S, int(manifests[0]["hidden_size"]) if manifests else 0, mask_id, block_size)
        for si, d in enumerate(dirs):
            ds = load_trajectories(d, expect=expect, rerun=rerun)
            if len(ds) != sizes[si]:
                raise TrajectoryError(f"{d}: {len(ds)} rows, its manifest says {sizes[si]}; delete it and collect "
                                      "it again")  # fmt: skip
            self._fill(ds, si)
            del ds  # before the next load: two collections' tables never live together
        self._finish()
        return self

    @staticmethod
    def _meta(meta: dict, block_size: int) -> dict:
        """A collection's settings (its manifest, or a loaded dataset's description: the manifest less its shards)."""
        if meta.get("block_size", block_size) != block_size:
            raise ValueError(f"trajectories of block {meta.get('block_size')} cannot train block {block_size}")
        return {"chain_steps": int(meta.get("chain_steps", 1))}

    def _allocate(self, sizes: list[int], S: int, H: int, mask_id: int, block_size: int) -> None:
        self.mask_id, self.L, self.S = mask_id, block_size, S
        N = sum(sizes)
        self._next = 0
        self.ids = torch.full((N, S + 1, block_size), mask_id, dtype=torch.long)
        self.hidden = torch.zeros(N, S + 1, block_size, H)
        self.context, self.example = [], []
        self._cols = {c: [] for c in ("answer_mask", "n_steps", "t", "block_start", "source", "next_pos")}

    def _fill(self, ds, si: int) -> None:
        """Copy one collection's rows in after the rows already filled; a chain of n < S + 1 states repeats its last."""
        L = self.L
        tbl = ds.data.table if hasattr(ds.data, "table") else ds.data
        cols = {c: tbl.column(c).to_pylist() for c in ("ids", "answer_mask", "n_steps", "t", "block_start", "example",
                                                       "next_pos")}  # fmt: skip
        self.context += tbl.column("context_ids").to_pylist()
        r0 = self._next
        row = r0
        for chunk in tbl.column("hidden").chunks:  # chunk by chunk: no combined copy of the whole column
            flat = np.asarray(chunk.values.to_numpy(zero_copy_only=False), dtype=np.float32)
            offs = chunk.offsets.to_numpy()  # into chunk.values, which a sliced chunk does not slice
            for k in range(len(chunk)):
                ids = np.asarray(cols["ids"][row - r0], dtype=np.int64).reshape(-1, L)
                n = ids.shape[0]
                self.ids[row, :n] = torch.from_numpy(ids)
                self.hidden[row, :n] = torch.from_numpy(flat[offs[k] : offs[k + 1]].reshape(n, L, -1))
                self.ids[row, n:] = self.ids[row, n - 1]
                self.hidden[row, n:] = self.hidden[row, n - 1]
                row += 1
        self.example += [(si, e) for e in cols["example"]]
        self._cols["source"] += [si] * (row - r0)
        for c in ("answer_mask", "n_steps", "t", "block_start", "next_pos"):
            self._cols[c] += cols[c]
        self._next = row

    def _finish(self) -> None:
        N, c = self.ids.shape[0], self._cols
        if self._next != N:
            raise TrajectoryError(f"{self._next} trajectory rows filled of the {N} allocated")
        self.answer_mask = torch.tensor(c["answer_mask"], dtype=torch.bool).reshape(N, self.L)
        self.n_steps = torch.tensor(c["n_steps"], dtype=torch.long)
        self.t = torch.tensor(c["t"], dtype=torch.float32).clamp(min=1e-3)
        self.block_start = torch.tensor(c["block_start"], dtype=torch.long)
        self.source = torch.tensor(c["source"], dtype=torch.long)
        self.next_pos = torch.tensor(c["next_pos"], dtype=torch.long)  # the backbone's own pick on state 1
        del self._cols, self._next

    def __len__(self):
        return self.ids.shape[0]

    def split(self, heldout_frac: float, seed: int):
        """(train row indices, held-out row indices), split by example so no prompt is in both."""
        exs = sorted(set(self.example))
        random.Random(f"mrp-heldout|{seed}").shuffle(exs)
        n_h = max(1, int(round(heldout_frac * len(exs)))) if heldout_frac > 0 else 0
        held = set(exs[:n_h])
        is_h = torch.tensor([e in held for e in self.example], dtype=torch.bool)
        return (~is_h).nonzero().flatten(), is_h.nonzero().flatten()

    def batch(self, rows: torch.Tensor, device) -> dict:
        L = self.L
        ctx = [self.context[int(r)] for r in rows]
        C = max((len(c) for c in ctx), default=0)
        B = len(rows)
        ctx_ids = torch.full((B, C), self.mask_id, dtype=torch.long)
        kv = torch.zeros(B, C, dtype=torch.bool)
        pos = torch.zeros(B, C, dtype=torch.long)
        for i, c in enumerate(ctx):
            pad = C - len(c)  # contexts are whole blocks, so left padding keeps block alignment
            ctx_ids[i, pad:] = torch.tensor(c, dtype=torch.long)
            kv[i, pad:] = True
            pos[i, pad:] = torch.arange(len(c))
        return dict(
            ctx_ids=ctx_ids.to(device),
            ctx_valid=kv.to(device),
            ctx_pos=pos.to(device),
            positions=(self.block_start[rows][:, None] + torch.arange(L)[None]).to(device),
            ids=self.ids[rows].to(device),
            hidden=self.hidden[rows].to(device),
            n_steps=self.n_steps[rows].to(device),
            t=self.t[rows].to(device),
            answer_mask=self.answer_mask[rows].to(device),
            next_pos=self.next_pos[rows].to(device),
        )


class _GradCache:
    """A one-shot KV cache for training: holds the tensors (with their autograd graph) instead of
    copying them into a preallocated buffer, so the loss reaches the head's weights through the
    cached keys/values of the context as well. Same interface as model.KVCache for MRPHead."""

    def __init__(self, B: int, nkv: int, hd: int, device, dtype, num_layers: int):
        self._empty = torch.zeros(B, nkv, 0, hd, device=device, dtype=dtype)
        self.k: list = [None] * num_layers
        self.v: list = [None] * num_layers
        self.valid = torch.zeros(B, 0, dtype=torch.bool, device=device)
        self.length = 0

    def past(self, layer: int):
        if self.length == 0:
            return self._empty, self._empty
        return self.k[layer], self.v[layer]

    def key_slots(self) -> torch.Tensor:
        return self.valid

    def write(self, layer: int, k, v):
        if self.length:
            raise RuntimeError("_GradCache is written once")
        self.k[layer], self.v[layer] = k, v

    def advance(self, key_valid):
        self.valid, self.length = key_valid, key_valid.shape[1]


def build_head_cache(head: MRPHead, model: SDARModel, batch: dict, block_size: int, grad: bool = True):
    """The head's cache of the clean context: backbone block-causal prefill, then MRPHead.commit."""
    ids, kv, pos = batch["ctx_ids"], batch["ctx_valid"], batch["ctx_pos"]
    B, C = ids.shape
    cfg = head.config
    p = head.eh_proj.weight
    cache = _GradCache(B, cfg.num_kv_heads, cfg.head_dim, p.device, p.dtype, head.num_layers)
    if C == 0:
        return cache
    with torch.no_grad():
        bcache = model.new_cache(B, C)
        h_clean = model.prefill(ids, pos, kv, bcache, block_size).hidden
    commit = getattr(MRPHead.commit, "__wrapped__", None) if grad else None
    if commit is not None:
        commit(head, h_clean, ids, pos, model.embed_tokens, cache, key_valid=kv, block_size=block_size)
    else:
        head.commit(h_clean, ids, pos, model.embed_tokens, cache, key_valid=kv, block_size=block_size)
    return cache


def mrp_loss(
    head: MRPHead,
    model: SDARModel,
    batch: dict,
    k_steps: int,
    mask_id: int,
    block_size: int,
    grad_cache: bool = True,
    with_stats: bool = False,
    denom: torch.Tensor | None = None,
    pick_weight: float = 0.0,
):
    """The training loss (see the module docstring); with_stats adds unweighted per-slot KL sums of the
    head and of the uncorrected baseline KL(B_k || A), and how often the most confident still-masked slot of
    A + C_1 (and of A alone) is the backbone's own next pick: the draft position a verify accepts. denom: the
    loss normaliser (answer slots of the batch's blocks); a rank holding part of a global batch passes the
    global batch's count, so the ranks' losses sum to the global batch's loss. pick_weight (ours,
    mrp_training.pick_loss_weight): adds pick_weight * cross-entropy of that next pick over the block's
    still-masked slots, scored by their log-confidence under A + C_1 (zmax - logsumexp: the draft pick's
    ranking, decoding.mrp_modes.draft_pick, in a differentiable form that can round otherwise on near-ties)."""
    cache = build_head_cache(head, model, batch, block_size, grad=grad_cache)
    lm_head, embed = model.lm_head, model.embed_tokens
    h_A = batch["hidden"][:, 0]
    with torch.no_grad():
        A_full = lm_head(h_A)
    if denom is None:
        denom = batch["answer_mask"].sum().clamp(min=1).float()
    h = h_A
    total = 0.0
    stats = _zero_stats()
    K = min(k_steps, batch["ids"].shape[1] - 1)
    for k in range(1, K + 1):
        ids_k = batch["ids"][:, k]
        h = head.step(h, ids_k, batch["positions"], embed, cache)
        still = (ids_k == mask_id) & (batch["n_steps"] >= k)[:, None]
        if not still.any():
            continue
        with torch.no_grad():
            B_k = lm_head(batch["hidden"][:, k][still])
        A = A_full[still] if head.objective == "residual" else torch.zeros_like(B_k)
        C = lm_head((h - h_A)[still] if head.objective == "residual" else h[still])
        kl = residual_kl(A, C, B_k)
        w = (1.0 / batch["t"])[:, None].expand_as(still)[still]
        total = total + (kl * w).sum() / denom
        if k == 1 and (pick_weight or with_stats):
            lc, rows_ok = _pick_log_confidence(A + C, still, mask_id), _picked_rows(still, batch["next_pos"])
            target = batch["next_pos"][:, None]
            if pick_weight:
                ce = -lc.log_softmax(-1).gather(1, target).squeeze(1)[rows_ok]  # (rows,)
                total = total + pick_weight * ce.sum() / denom
            if with_stats:
                with torch.no_grad():
                    base = _pick_log_confidence(A_full[still], still, mask_id)
                    stats["pick_hits"] = int((lc.argmax(1) == target[:, 0])[rows_ok].sum())
                    stats["pick_hits_base"] = int((base.argmax(1) == target[:, 0])[rows_ok].sum())
                    stats["pick_rows"] = int(rows_ok.sum())
        if with_stats:
            with torch.no_grad():
                base = residual_kl(A_full[still], torch.zeros_like(B_k), B_k)
                stats["kl_sum"] += float(kl.sum())
                stats["base_sum"] += float(base.sum())
                stats["n"] += int(still.sum())
                if k == 1:
                    stats["kl1_sum"], stats["base1_sum"], stats["n1"] = (
                        float(kl.sum()),
                        float(base.sum()),
                        int(still.sum()),
                    )
    loss = total / K if torch.is_tensor(total) else torch.zeros((), requires_grad=True)
    return (loss, stats) if with_stats else loss


#: mrp_loss's slot statistics: counts (all-reduced back to ints) and sums
_STAT_COUNTS = ("n", "n1", "pick_hits", "pick_hits_base", "pick_rows")
_STAT_SUMS = ("kl_sum", "base_sum", "kl1_sum", "base1_sum")


def _zero_stats() -> dict:
    return {**dict.fromkeys(_STAT_SUMS, 0.0), **dict.fromkeys(_STAT_COUNTS, 0)}


def _pick_log_confidence(Z: torch.Tensor, still: torch.Tensor, mask_id: int) -> torch.Tensor:
    """Z (N_still, V) logits of the still-masked slots -> (B, L) their log-confidence (max log-softmax, [MASK]
    never a candidate), -inf elsewhere: the draft pick's ranking (decoding.mrp_modes.draft_pick, which ranks by
    the confidence kernel's own rounding; the two can part on near-ties)."""
    Z = Z.float().index_fill(1, torch.tensor([mask_id], device=Z.device), float("-inf"))
    logconf = Z.amax(-1) - torch.logsumexp(Z, -1)
    return torch.full(still.shape, float("-inf"), device=Z.device).masked_scatter(still, logconf)


def _picked_rows(still: torch.Tensor, next_pos: torch.Tensor) -> torch.Tensor:
    """(B,) rows whose recorded next pick is a still-masked slot: every supervised row (n_steps >= 1)."""
    return still.gather(1, next_pos[:, None]).squeeze(1)


@torch.no_grad()
def heldout_metrics(
    head, model, data: TrajectoryData, rows: torch.Tensor, k_steps: int, mask_id: int, batch_size: int, device,
    d: Dist | None = None,
) -> dict:  # fmt: skip
    """Held-out: the weighted loss and the mean KL per still-masked slot of the head vs the uncorrected A.
    d (a distributed.Dist): each rank evaluates its share of the batches and the sums are all-reduced, so
    every rank returns the single-process numbers (up to summation order)."""
    was = head.training
    head.eval()
    agg = _zero_stats()
    loss_sum, nb = 0.0, 0
    for lo in (d or Dist()).shard(range(0, len(rows), batch_size)):
        b = data.batch(rows[lo : lo + batch_size], device)
        loss, st = mrp_loss(head, model, b, k_steps, mask_id, data.L, grad_cache=False, with_stats=True)
        loss_sum += float(loss)
        nb += 1
        for key in agg:
            agg[key] += st[key]
    head.train(was)
    return heldout_summary(loss_sum, nb, agg, d)


def heldout_summary(loss_sum: float, n_batches: int, agg: dict, d: Dist | None = None) -> dict:
    """Held-out metrics from summed batch losses and mrp_loss's slot statistics (both trainers report these);
    with d (a distributed.Dist) the sums are first all-reduced over its ranks."""
    if d is not None and d.active:
        keys = sorted(agg)
        tot = d.all_reduce_sum([loss_sum, n_batches, *(agg[k] for k in keys)])
        loss_sum, n_batches = tot[0], int(tot[1])
        agg = {k: (int(v) if k in _STAT_COUNTS else v) for k, v in zip(keys, tot[2:], strict=True)}
    return dict(
        heldout_loss=loss_sum / max(n_batches, 1),
        heldout_kl=agg["kl_sum"] / max(agg["n"], 1),
        heldout_baseline_kl=agg["base_sum"] / max(agg["n"], 1),
        heldout_kl_step1=agg["kl1_sum"] / max(agg["n1"], 1),
        heldout_baseline_kl_step1=agg["base1_sum"] / max(agg["n1"], 1),
        heldout_slots=agg["n"],
        # offline only (the online recipe records no next pick): the draft position a verify accepts
        **(
            dict(heldout_pick_acc=agg["pick_hits"] / max(agg["pick_rows"], 1),
                 heldout_pick_acc_baseline=agg["pick_hits_base"] / max(agg["pick_rows"], 1))
            if "pick_rows" in agg else {}
        ),
    )


# ----------------------------------------------------------------------------- training


def train_sources(profile) -> list[str]:
    ts = profile.mrp.train_source
    return [ts] if isinstance(ts, str) else list(ts)


def _save_ckpt(out_dir: Path, step, head, opt, sched, curve, heldout, extra: dict | None = None):
    """ckpt.pt (tensors and plain types only: it loads with weights_only=True) under a unique temporary name renamed
    into place, and its sha256 beside it (ckpt.pt.sha256.json, checked before a resume)."""
    state = dict(step=step, head=head.state_dict(), optimizer=opt.state_dict(), scheduler=sched.state_dict(),
                 curve=curve, heldout=heldout, **(extra or {}))  # fmt: skip
    with integrity.atomic_file(out_dir / "ckpt.pt") as tmp:
        torch.save(state, tmp)
    integrity.write_sidecar(out_dir / "ckpt.pt", rows=step)


def load_ckpt(ck: Path, rerun: str, dev) -> dict:
    """A head's training checkpoint, checked against its recorded sha256 (when recorded) and loaded with
    weights_only=True; a changed, truncated or code-carrying one is a CheckpointError naming it and the fix."""
    fix = (f"delete it and rerun {rerun} (training restarts from step 0 and, with batches keyed by step, ends at "
           "the same head)")  # fmt: skip
    if ck.with_name(ck.name + ".sha256.json").exists():
        why = integrity.sidecar_problem(ck)
        if why is not None:
            raise CheckpointError(f"{why}; {fix}")
    return load_state(ck, fix, map_location=dev)


def _write_curves(out_dir: Path, curve: list[dict], heldout: list[dict]) -> None:
    fields = [
        "step",
        "split",
        "loss",
        "lr",
        "elapsed_s",
        "heldout_loss",
        "heldout_kl",
        "heldout_baseline_kl",
        "heldout_kl_step1",
        "heldout_baseline_kl_step1",
        "heldout_pick_acc",
        "heldout_pick_acc_baseline",
    ]
    rows = [{"split": "train", **r} for r in curve] + [{"split": "heldout", **r} for r in heldout]
    rows.sort(key=lambda r: (r["step"], r["split"]))
    write_curve(out_dir, rows, fields, {"train": curve, "heldout": heldout})


def train_mrp(
    profile,
    backbone,
    trajectories_dir,
    out_dir,
    progress: bool = True,
    resume: bool = True,
    stop_after: int | None = None,
    extra_metrics: Callable[[MRPHead], dict] | None = None,
) -> dict:
    """Train a head on the trajectories in `trajectories_dir` (a directory or a list: a mix of sources).

    backbone: a `backbone.Backbone` (or anything with .model and .mask_id). stop_after: return after that
    many steps of this call (tests use it to simulate a killed run). extra_metrics(head) adds entries to
    metrics.json once training has finished (stages.train_head measures the head's cost there).
    Returns the metrics dict.

    Under torchrun (distributed.init() called first; `torchrun --nproc-per-node N -m mrp_repro.stages head
    --profile P`): every rank holds the frozen backbone, the head trains under DDP, and step s's global
    batch (the same rows at any world size) is split over the ranks, rank r taking rows r, r + N, ...; each
    rank's loss is normalised by the answer slots of the whole global batch, so the ranks' losses sum to the
    single-process loss and DDP's averaged gradient (of loss * N) is its gradient. Rank 0 alone writes; the
    checkpoint holds no world-dependent state, so a run resumes on any world size. Every rank returns the
    same metrics."""
    dd = current()
    out = Path(out_dir)
    if dd.is_main:
        integrity.make_dir(out)  # a run directory that is a symbolic link is refused (LinkRefused)
    model, mask_id, L = backbone.model, backbone.mask_id, profile.block_size
    mc, tc = profile.mrp, profile.mrp_training
    dev = model.lm_head.weight.device
    for p in model.parameters():
        p.requires_grad_(False)
    model.eval()
    dirs = [trajectories_dir] if isinstance(trajectories_dir, (str, os.PathLike)) else list(trajectories_dir)
    bb_hash = model_fingerprint(model)
    rerun = HEAD_COMMAND.format(name=profile.cli_arg)
    data = TrajectoryData.from_dirs(dirs, mask_id, L, expect={"backbone_hash": bb_hash}, rerun=rerun)
    if mc.k_steps > data.S:
        raise ConfigError(  # a ValueError too, as before
            f"mrp.k_steps={mc.k_steps} but the trajectories hold chains of {data.S} steps; recollect "
            f"with chain_steps >= {mc.k_steps}"
        )
    train_rows, held_rows = data.split(tc.heldout_frac, profile.seed)
    held_rows = held_rows[:MAX_HELDOUT_ROWS]
    if len(train_rows) == 0:
        raise ValueError("no training rows")
    if min(tc.batch_size, len(train_rows)) < dd.world:
        raise ConfigError(
            f"a global batch of {min(tc.batch_size, len(train_rows))} rows (mrp_training.batch_size="
            f"{tc.batch_size}, {len(train_rows)} training rows) cannot be split over {dd.world} ranks; raise "
            f"mrp_training.batch_size to at least {dd.world} or launch fewer ranks (--nproc)"
        )

    torch.manual_seed(profile.seed)
    head = MRPHead(model.config, mc.num_layers, mc.objective)
    head.init_weights(mc.init, mc.init_std, generator=torch.Generator().manual_seed(profile.seed))
    # fp32 master weights whatever the backbone's dtype; the forward runs under head_autocast (see there).
    head.to(device=dev, dtype=torch.float32).train()
    amp = functools.partial(head_autocast, model.lm_head.weight.dtype, dev)
    opt = torch.optim.AdamW(head.parameters(), lr=tc.lr)
    warm = max(1, int(round(tc.warmup_frac * tc.steps)))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda_for(tc.steps, warm, tc.min_lr_ratio))
    curve, heldout, start = [], [], 0
    ck = out / "ckpt.pt"
    if resume and ck.exists():
        st = load_ckpt(ck, rerun, dev)
        head.load_state_dict(st["head"])
        opt.load_state_dict(st["optimizer"])
        sched.load_state_dict(st["scheduler"])
        curve, heldout, start = st["curve"], st["heldout"], st["step"]
    bs = tc.batch_size
    rows_loss = functools.partial(_rows_loss, model=model, k_steps=mc.k_steps, mask_id=mask_id, block_size=L,
                                  pick_weight=tc.pick_loss_weight)  # fmt: skip
    loss_of, _ = ddp_loss(head, rows_loss, dd, dev)
    t0 = time.time() - (curve[-1]["elapsed_s"] if curve else 0.0)
    if not heldout and len(held_rows):
        with amp():
            hm = heldout_metrics(head, model, data, held_rows, mc.k_steps, mask_id, bs, dev, dd)
        heldout.append({"step": 0, **hm})
    bar = None
    if progress and dd.is_main:
        from tqdm.auto import tqdm

        bar = tqdm(total=tc.steps, initial=start, desc="train MRP", unit="step")
    step = start
    for step in range(start, tc.steps):
        if stop_after is not None and step - start >= stop_after:
            break
        g = torch.Generator().manual_seed(
            int(hashlib.sha256(f"mrp-batch|{profile.seed}|{step}".encode()).hexdigest()[:15], 16)
        )
        rows = train_rows[torch.randint(len(train_rows), (min(bs, len(train_rows)),), generator=g)]
        # the whole global batch's answer slots: the same normaliser on every rank and at every world size
        denom = data.answer_mask[rows].sum().clamp(min=1).float().to(dev)
        with amp():
            loss = loss_of(data.batch(rows[dd.rank :: dd.world], dev), denom)
        opt.zero_grad(set_to_none=True)
        (loss * dd.world if dd.active else loss).backward()  # DDP averages over ranks: * world makes it the sum
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        sched.step()
        loss_val = float(loss.detach())
        if dd.active:
            loss_val = dd.all_reduce_sum([loss_val])[0]
        curve.append(dict(step=step + 1, loss=loss_val, lr=sched.get_last_lr()[0], elapsed_s=time.time() - t0))
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{loss_val:.4f}")
        if (step + 1) % tc.ckpt_every == 0 or step + 1 == tc.steps:
            if len(held_rows):
                with amp():
                    hm = heldout_metrics(head, model, data, held_rows, mc.k_steps, mask_id, bs, dev, dd)
                heldout.append({"step": step + 1, **hm})
            if dd.is_main:
                _save_ckpt(out, step + 1, head, opt, sched, curve, heldout)
                _write_curves(out, curve, heldout)
    else:
        step = tc.steps
    if bar is not None:
        bar.close()
    if step < tc.steps:  # interrupted on purpose (stop_after)
        dd.barrier()  # rank 0's last checkpoint is on disk before any rank returns (and, say, resumes)
        return {"step": step, "finished": False}
    return finish_on_main(
        dd, profile, out, head, model, curve, heldout, bb_hash, train_sources(profile), extra_metrics, rerun, dev,
        steps=tc.steps, train_rows=len(train_rows), heldout_rows=len(held_rows),
    )  # fmt: skip


def _rows_loss(head, batch, denom, *, model, k_steps, mask_id, block_size, pick_weight):
    return mrp_loss(head, model, batch, k_steps, mask_id, block_size, denom=denom, pick_weight=pick_weight)


def finish_on_main(d: Dist, *args, **kwargs) -> dict:
    """finish_training on rank 0 alone; the other ranks wait for it and return its metrics."""
    metrics = finish_training(*args, **kwargs) if d.is_main else None
    return d.broadcast_object(metrics)


def finish_training(profile, out: Path, head, model, curve, heldout, bb_hash, sources, extra_metrics, rerun, dev,
                    head_extra: dict | None = None, **run_metrics) -> dict:  # fmt: skip
    """What both trainers write when a run has finished: metrics.json (`run_metrics`, the curves' summary, sizes,
    and extra_metrics(head) measured in the backbone's dtype), the head (released naming), curves, provenance and
    done.json last, each atomically. Returns the metrics."""
    mc = profile.mrp
    first, last = (heldout[0], heldout[-1]) if heldout else ({}, {})
    metrics = dict(
        finished=True,
        **run_metrics,
        train_sources=list(sources),
        train_time_s=curve[-1]["elapsed_s"] if curve else 0.0,
        final_train_loss=float(np.mean([c["loss"] for c in curve[-20:]])) if curve else None,
        initial_heldout_kl=first.get("heldout_kl"),
        heldout_kl=last.get("heldout_kl"),
        heldout_baseline_kl=last.get("heldout_baseline_kl"),
        heldout_kl_step1=last.get("heldout_kl_step1"),
        heldout_baseline_kl_step1=last.get("heldout_baseline_kl_step1"),
        heldout_loss=last.get("heldout_loss"),
        heldout_pick_acc=last.get("heldout_pick_acc"),  # offline recipe only: see mrp_loss
        heldout_pick_acc_baseline=last.get("heldout_pick_acc_baseline"),
        head_parameters=sum(p.numel() for p in head.parameters()),
        backbone_parameters=sum(p.numel() for p in model.parameters()),
        backbone_hash=bb_hash,
        k_steps=mc.k_steps,
        objective=mc.objective,
    )
    if extra_metrics is not None:  # measured as it will run: in the backbone's dtype
        metrics.update(extra_metrics(copy.deepcopy(head).eval().to(model.lm_head.weight.dtype)))
    _write_curves(out, curve, heldout)
    extra = dict(backbone_hash=bb_hash, train_sources=list(sources), k_steps=mc.k_steps, rerun=rerun)
    save_head(head, out / "head", extra={**extra, **(head_extra or {})})
    write_json_atomic(out / "metrics.json", metrics)
    write_json_atomic(out / "provenance.json", provenance(profile, dev))
    # the integrity record: every output's sha256 and the curve's rows (stages.train_head checks it before reuse)
    files = [out / n for n in OUTPUTS if (out / n).is_file()] + integrity.listed_files(out / "head")
    write_json_atomic(out / "done.json", {"metrics": "metrics.json", "head": "head",
                                          "files": integrity.record(out, files),
                                          "rows": {"loss_curve.csv": len(curve) + len(heldout)}})  # fmt: skip
    return metrics


#: a finished head run's outputs besides head/ (the checkpoint ckpt.pt is its resume state, with its own sha256)
OUTPUTS = ("metrics.json", "provenance.json", "loss_curve.csv", "loss_curve.json")


def finished_problems(out: Path) -> list[str]:
    """[] when out/done.json's record matches every output (each sha256; head/ holds exactly the recorded files),
    else what does not ("<file> is missing" / "... has sha256 ..."), the first naming the file."""
    try:
        files = json.loads((out / "done.json").read_text()).get("files")
    except (OSError, ValueError, AttributeError):
        return [f"{out / 'done.json'} is unreadable"]
    if not isinstance(files, dict):
        return [f"{out / 'done.json'} has no integrity record (written by an older version)"]
    bad = integrity.problems(out, files)
    head = {k[len("head/") :]: v for k, v in files.items() if k.startswith("head/")}
    return bad or integrity.problems(out / "head", head, exact=True, recursive=False)
