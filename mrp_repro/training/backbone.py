"""Train the tiny SDAR-style backbone from scratch with the block-diffusion objective.

    .venv/bin/python -m mrp_repro.stages backbone --profile tiny      # ~14 CPU-minutes, cached
    .venv/bin/python -m mrp_repro.stages backbone --profile smoke     # seconds

    from mrp_repro.training.backbone import train_backbone
    metrics = train_backbone(profile, out_dir)        # stages.backbone(profile) picks out_dir and reuses it

Objective (METHOD.md §1, SDAR / BD3-LM): each training sequence is
``prompt (padded to whole blocks) + a random valid answer + EOS up to the end of
its last block``. The model sees ``[noisy ; clean]`` (2T tokens, shared position
ids) under the block-diffusion mask:

- noisy block b attends bidirectionally to the noisy tokens of block b and to the
  clean tokens of blocks < b (what inference has in its KV cache);
- clean block b attends to clean blocks <= b (block-causal: how the cache is written).

Every answer block draws a noise level t ~ U(t_min, 1); each of its tokens is
replaced by [MASK] with probability t; the loss is cross-entropy on masked
positions weighted 1/t, normalised by the number of answer tokens in the batch.
Prompt tokens are never masked. No shift: position i predicts token i.

Data order and noise are keyed by (seed, step), so a resumed run sees exactly the batches an uninterrupted one
would (and a backbone_training.seq_len too short for one of them is a one-line ConfigError naming the minimum
before the first step); checkpoints hold the model (hub format), optimizer, scheduler and RNG states (tensors
and plain types: state.pt loads with weights_only=True) and an integrity.json, written atomically (a temporary
directory renamed into place). One process trains a directory at a time (integrity.stage_lock); done.json
records the sha256 of every output (`finished` checks it before reuse).

A warm restart (backbone_training.restart_steps, restart_lr): after `steps`, a fresh AdamW warms up again and
falls by cosine over restart_steps more steps; the batches go on by step. It can start from the published first
phase (checked to be this profile's with no restart) instead of retraining it, the same computation:

    MRP_REPRO_FROM_SCRATCH=1 .venv/bin/python -m mrp_repro.stages backbone --profile chain16 --phase1-from-published

Recovery: a finished run whose model/ was deleted or no longer matches done.json's record rewrites it from the
last checkpoint (no step is retrained); an unreadable, changed or code-carrying checkpoint is an error naming it
and the fix (delete it: training restarts from step 0 and, batches being keyed by step, ends at the same weights).
"""

from __future__ import annotations

import csv
import json
import os
import random
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from mrp_repro import checkpoint as ckpt_io
from mrp_repro import integrity
from mrp_repro.config import ConfigError, Profile, repo_root
from mrp_repro.model import ModelConfig, SDARModel, count_parameters
from mrp_repro.runtime import provenance, set_num_threads, write_json_atomic
from mrp_repro.tasks import synthetic
from mrp_repro.tokenizer import build_tiny_tokenizer, eos_token_ids, mask_token_id, save_tokenizer
from mrp_repro.training.common import BACKBONE_COMMAND, lr_lambda_for, write_curve

__all__ = [
    "NOISE_T_MIN",
    "build_block_diffusion_batch",
    "block_diffusion_mask",
    "model_config_for",
    "make_tokenizer",
    "encode_training_example",
    "train_backbone",
]

NOISE_T_MIN = 0.02  # per-block noise level t ~ U(NOISE_T_MIN, 1)
INIT_STD = 0.02


# ----------------------------------------------------------------------------- batch builder


def block_diffusion_mask(
    noisy_block: torch.Tensor, noisy_valid: torch.Tensor, clean_valid: torch.Tensor, block_size: int
) -> torch.Tensor:
    """(B, 1, A + C, A + C) bool mask over [noisy ; clean], True = attend.

    noisy_block (B, A): absolute block index of each noisy token; noisy_valid (B, A),
    clean_valid (B, C): False on padding. Clean token j sits at absolute position j.
    noisy i (block b): noisy j of the same block b, clean j in blocks < b.
    clean i (block b): clean j in blocks <= b (block-causal).
    Pad keys are never attended to; every query sees itself so its softmax stays finite."""
    B, A = noisy_block.shape
    C = clean_valid.shape[1]
    dev = noisy_block.device
    cblk = (torch.arange(C, device=dev) // block_size)[None].expand(B, C)
    nn_ = noisy_block[:, :, None] == noisy_block[:, None, :]  # (B, A, A)
    nc = cblk[:, None, :] < noisy_block[:, :, None]  # (B, A, C)
    cn = torch.zeros(B, C, A, dtype=torch.bool, device=dev)
    cc = cblk[:, None, :] <= cblk[:, :, None]  # (B, C, C)
    allowed = torch.cat([torch.cat([nn_, nc], 2), torch.cat([cn, cc], 2)], 1)
    allowed = allowed & torch.cat([noisy_valid, clean_valid], 1)[:, None, :]
    allowed = allowed | torch.eye(A + C, dtype=torch.bool, device=dev)[None]
    return allowed[:, None]


def build_block_diffusion_batch(
    clean: torch.Tensor,
    prompt_lens: torch.Tensor | list[int],
    block_size: int,
    mask_id: int,
    generator: torch.Generator,
    key_valid: torch.Tensor | None = None,
    t_min: float = NOISE_T_MIN,
    compact: bool = True,
) -> dict[str, torch.Tensor]:
    """One block-diffusion training batch: the model input is ``[noisy ; clean]``.

    clean (B, T) token ids (T a multiple of block_size; prompts padded to whole
    blocks), prompt_lens (B,) (prompt tokens are never masked), key_valid (B, T)
    False on right padding. Every answer block draws t ~ U(t_min, 1); its tokens
    are masked with probability t and weighted 1/t.

    compact=False: the textbook layout, noisy = the whole sequence (2T x 2T mask).
    compact=True (default; ~1/3 less compute, same attention for every loss-bearing
    query): the noisy copy holds only each row's answer blocks (A = the longest
    answer in the batch), and the clean copy drops the last block, which no noisy
    block may see. Returns input_ids (B, N), position_ids (B, N), mask
    (B, 1, N, N), targets (B, A), weights (B, A) (1/t on masked positions else 0),
    noisy_mask, answer_mask (B, A), and `n_noisy` = A (the first A outputs are the
    noisy copy, whose logits predict `targets`, no shift)."""
    B, T = clean.shape
    if T % block_size:
        raise ValueError(f"sequence length {T} is not a multiple of block size {block_size}")
    dev = clean.device
    if key_valid is None:
        key_valid = torch.ones_like(clean, dtype=torch.bool)
    plens = torch.as_tensor(prompt_lens, device=dev).long()
    if bool((plens % block_size != 0).any()):
        raise ValueError("prompts must be padded to whole blocks")
    lens = key_valid.sum(1)
    if compact:
        A = int((lens - plens).max())
        start = plens
        C = T - block_size
    else:
        A = T
        start = torch.zeros_like(plens)
        C = T
    j = torch.arange(A, device=dev)[None, :]
    abs_pos = start[:, None] + j  # (B, A)
    in_seq = abs_pos < lens[:, None]
    gather_pos = abs_pos.clamp(max=T - 1)
    targets = torch.gather(clean, 1, gather_pos)
    answer = in_seq & (abs_pos >= plens[:, None])
    nb = T // block_size
    t = t_min + (1 - t_min) * torch.rand(B, nb, generator=generator, device=dev)
    t_tok = torch.gather(t, 1, gather_pos // block_size)  # (B, A)
    u = torch.rand(B, A, generator=generator, device=dev)
    noisy_mask = (u < t_tok) & answer
    noisy = torch.where(noisy_mask, torch.full_like(targets, mask_id), targets)
    weights = torch.where(noisy_mask, 1.0 / t_tok, torch.zeros_like(t_tok))
    clean_part = clean[:, :C]
    cpos = torch.arange(C, device=dev)[None, :].expand(B, C)
    mask = block_diffusion_mask(gather_pos // block_size, in_seq, key_valid[:, :C], block_size)
    return dict(
        input_ids=torch.cat([noisy, clean_part], 1),
        position_ids=torch.cat([gather_pos, cpos], 1),
        mask=mask,
        targets=targets,
        weights=weights,
        noisy_mask=noisy_mask,
        answer_mask=answer,
        noisy_block=gather_pos // block_size,
        n_noisy=A,
        t=t,
    )


def block_diffusion_loss(model: SDARModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    A = batch["n_noisy"]
    out = model(batch["input_ids"], batch["position_ids"], batch["mask"])
    logits = out.logits[:, :A]  # the noisy copy predicts the clean tokens (no shift)
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["targets"].reshape(-1), reduction="none")
    denom = batch["answer_mask"].sum().clamp(min=1)
    return (ce * batch["weights"].reshape(-1)).sum() / denom


# ----------------------------------------------------------------------------- data


def make_tokenizer(profile: Profile | None = None):
    """The char-level tokenizer over the characters of the profile's generated tasks (tiny's by default)."""
    if profile is None:
        return build_tiny_tokenizer(synthetic.alphabet())
    return build_tiny_tokenizer(synthetic.alphabet([t for t in profile.data.tasks if t in synthetic.TASKS]))


def model_config_for(profile: Profile, vocab_size: int) -> ModelConfig:
    m = profile.model
    return ModelConfig(
        vocab_size=m.vocab_size or vocab_size,
        hidden_size=m.hidden_size,
        intermediate_size=m.intermediate_size,
        num_layers=m.num_layers,
        num_heads=m.num_heads,
        num_kv_heads=m.num_kv_heads,
        head_dim=m.head_dim,
        rope_theta=m.rope_theta,
        rms_norm_eps=m.rms_norm_eps,
        max_position_embeddings=m.max_position_embeddings or 512,
    )


def _round_up(x: int, b: int) -> int:
    return -(-x // b) * b


def encode_training_example(tok, problem, answer: str, block_size: int, eos_id: int) -> tuple[list[int], int]:
    """prompt ids + answer ids + EOS up to the end of the answer's last block (at least one EOS)."""
    p = tok.encode(problem.prompt_text, add_special_tokens=False)
    a = tok.encode(answer, add_special_tokens=False)
    n = _round_up(len(p), block_size)
    if n != len(p):
        raise ValueError(f"prompt of {problem.task_id} is not padded to a block multiple")
    total = _round_up(len(p) + len(a) + 1, block_size)
    return p + a + [eos_id] * (total - len(p) - len(a)), len(p)


class TrainData:
    """Training problems of every task; batches keyed by (seed, step)."""

    def __init__(self, profile: Profile, tok):
        self.profile = profile
        self.tok = tok
        self.block = profile.block_size
        self.eos = eos_token_ids(tok)[0]
        self.pad = tok.pad_token_id
        tasks = [t for t in profile.data.tasks if t in synthetic.TASKS]
        if not tasks:
            raise ValueError(f"no synthetic task in data.tasks={profile.data.tasks}")
        self.problems = []
        for t in tasks:
            self.problems.extend(synthetic.generate(t, "train", profile.data.n_train, profile.data.seed, self.block))
        self.seq_len = profile.backbone_training.seq_len

    def _draws(self, step: int, batch_size: int):
        """The (problem, answer) pairs of step `step`'s batch, keyed by (seed, step): the same in every process."""
        rng = random.Random(f"backbone-data|{self.profile.data.seed}|{step}")
        for _ in range(batch_size):
            prob = self.problems[rng.randrange(len(self.problems))]
            yield prob, synthetic.sample_answer(prob, rng)

    def longest(self, steps: int, batch_size: int) -> tuple[int, int]:
        """(tokens, step): the longest training sequence of steps 0..steps-1 (prompt + answer + EOS, padded to whole
        blocks) and the first step that draws it; the batches are keyed by step, so this is exactly what the run
        will see. Counted in characters: the tiny tokenizer has one token per character (a few seconds for the
        ~10^5 sequences of tiny / chain16; batch() checks each encoded batch again)."""
        best, at = 0, 0
        for step in range(steps):
            for prob, answer in self._draws(step, batch_size):
                n = _round_up(len(prob.prompt_text) + len(answer) + 1, self.block)
                if n > best:
                    best, at = n, step
        return best, at

    def check_seq_len(self, steps: int, batch_size: int) -> None:
        """ConfigError, one line naming backbone_training.seq_len and the minimum value, when a training sequence of
        the run would not fit: raised before training starts (it was a ValueError traceback at the first batch
        holding one, possibly hours into the run)."""
        need, step = self.longest(steps, batch_size)
        if need > self.seq_len:
            raise ConfigError(self._too_short(need, f"the longest, first drawn at step {step}"))

    def _too_short(self, need: int, which: str) -> str:
        return (f"backbone_training.seq_len: {self.seq_len} is too short for the training sequences of profile "
                f"{self.profile.cli_arg}: {which} (prompt + answer + EOS, padded to whole blocks of {self.block}) "
                f"has {need} tokens; set backbone_training.seq_len to at least {need}")  # fmt: skip

    def batch(self, step: int, batch_size: int):
        rows, plens = [], []
        for prob, answer in self._draws(step, batch_size):
            ids, plen = encode_training_example(self.tok, prob, answer, self.block, self.eos)
            rows.append(ids)
            plens.append(plen)
        T = max(len(r) for r in rows)
        if T > self.seq_len:
            raise ConfigError(self._too_short(T, f"a sequence of step {step}"))
        clean = torch.full((batch_size, T), self.pad, dtype=torch.long)
        valid = torch.zeros(batch_size, T, dtype=torch.bool)
        for i, r in enumerate(rows):
            clean[i, : len(r)] = torch.tensor(r)
            valid[i, : len(r)] = True
        return clean, torch.tensor(plens), valid


# ----------------------------------------------------------------------------- schedule / state


def _checkpoint_dirs(out_dir: Path) -> list[Path]:
    """ckpt-<step>/ directories by step; any other name (a user's ckpt-200.bak) is neither resumed from nor deleted."""
    cks = [p for p in out_dir.glob("ckpt-*") if p.name[5:].isdigit() and p.name[5:].isascii() and p.is_dir()]
    return sorted(cks, key=lambda p: int(p.name[5:]))


def _latest_checkpoint(out_dir: Path) -> Path | None:
    cks = _checkpoint_dirs(out_dir)
    cks = [c for c in cks if (c / "state.pt").exists() and (c / "model.safetensors").exists()]
    return cks[-1] if cks else None


def _save_checkpoint(out_dir: Path, step: int, model, opt, sched, curve, phase=0, phase1_record=None) -> Path:
    """ckpt-<step>/: the model (hub format), state.pt (optimizer, scheduler, RNG, curve: tensors and plain types
    only, so it loads with weights_only=True) and integrity.json; written in a temporary directory renamed into
    place when complete."""
    final = out_dir / f"ckpt-{step}"
    with integrity.atomic_dir(final) as tmp:
        ckpt_io.save_backbone(model, tmp)
        state = {"step": step, "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                 "torch_rng": torch.get_rng_state(), "curve": curve, "phase": phase}  # fmt: skip
        if phase1_record is not None:
            state["phase1"] = phase1_record
        torch.save(state, tmp / "state.pt")
        integrity.seal(tmp)
    for old in _checkpoint_dirs(out_dir):  # keep only the newest checkpoint
        if old != final:
            shutil.rmtree(old, ignore_errors=True)
    return final


#: what done.json's record covers: the stage's outputs (the checkpoint is its resume state, under its own manifest)
_OUTPUTS = ("model", "loss_curve.csv", "loss_curve.json")
#: loss_curve.csv's columns (written each checkpoint; read back from a published first phase)
_CURVE_FIELDS = ["step", "loss", "lr", "elapsed_s"]


def _outputs(out_dir: Path) -> list[Path]:
    files = [out_dir / n for n in _OUTPUTS[1:] if (out_dir / n).is_file()]
    return files + integrity.listed_files(out_dir / "model") + [out_dir / "model" / integrity.MANIFEST]


def finished(out_dir: str | os.PathLike, quiet: bool = False) -> dict | None:
    """done.json's metrics when a finished run's outputs match its record (every file's sha256, the curve's rows),
    else None (printing which file, unless quiet): train_backbone then rewrites them from the last checkpoint."""
    out_dir = Path(out_dir)
    try:
        done = json.loads((out_dir / "done.json").read_text())
    except (OSError, ValueError):
        return None
    files = done.get("files")
    bad = integrity.problems(out_dir, files) if isinstance(files, dict) else [
        f"{out_dir / 'done.json'} has no integrity record (written by an older version)"]  # fmt: skip
    if not bad and isinstance(files, dict):
        model = {k[len("model/") :]: v for k, v in files.items() if k.startswith("model/")}
        bad = integrity.problems(out_dir / "model", model, exact=True, recursive=False)
    if bad:
        if not quiet:
            print(f"backbone: not reusing {out_dir}: {bad[0]}; rewriting its model from the last training checkpoint",
                  file=sys.stderr)  # fmt: skip
        return None
    return done["metrics"]


# ----------------------------------------------------------------------------- training


def train_backbone(
    profile: Profile,
    out_dir: str | os.PathLike,
    progress: bool = True,
    resume: bool = True,
    stop_after: int | None = None,
    num_threads: int | None = None,
    phase1: str | os.PathLike | None = None,
) -> dict:
    """Train (or resume) the scratch backbone of `profile` into `out_dir`.

    Writes out_dir/model (hub-format checkpoint + tokenizer), loss_curve.csv/.json,
    ckpt-<step>/ (latest), and done.json (provenance + metrics) when finished.
    `stop_after`: stop (with a checkpoint) after that many steps of this call, as if
    killed; a later call resumes. `num_threads` overrides backbone_training.num_threads
    (e.g. 1 on a machine shared with other jobs, where 2 spinning threads thrash).
    `phase1`: with backbone_training.restart_steps, a finished backbone directory of this profile's first phase
    (the caller checks its settings: stages' --phase1-from-published); a run with no checkpoint starts its restart
    from those weights instead of retraining the first `steps` (the restart's fresh optimizer makes that the same
    computation). Returns the metrics dict (done.json's "metrics")."""
    out_dir = integrity.make_dir(out_dir)  # a run directory that is a symbolic link is refused (LinkRefused)
    # one process trains a directory: a second one gets StageLocked naming the first's PID, and does nothing
    with integrity.stage_lock(out_dir, f"backbone training of profile {profile.name}"):
        integrity.remove_stale_temps_in(out_dir)  # a killed run's half-written checkpoint or model (the lock is ours)
        return _train_backbone(profile, out_dir, progress, resume, stop_after, num_threads, phase1)


def _optimizer(model: SDARModel, tc, phase: int):
    """(AdamW, LambdaLR) of training phase `phase`: 0 the first `steps`, 1 the warm restart (fresh moments, its own
    warmup and cosine over restart_steps, at restart_lr)."""
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    lr = tc.lr if phase == 0 else (tc.restart_lr or tc.lr)
    steps = tc.steps if phase == 0 else tc.restart_steps
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": tc.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=lr,
        betas=(0.9, 0.95),
    )
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda_for(steps, tc.warmup_steps, tc.min_lr_ratio))


def _load_phase1(profile: Profile, phase1: Path, model: SDARModel) -> tuple[list[dict], dict]:
    """Load a finished first phase's weights into `model`; (its loss curve rows, what done.json records of it)."""
    from mrp_repro.trajectories import model_fingerprint  # the fingerprint published.json records

    tc = profile.backbone_training
    fix = f"pass a finished backbone directory of the first {tc.steps} steps of profile {profile.name}"
    # done.json itself, not finished(): a published directory keeps only model/, loss_curve.csv and done.json
    # (their sha256 already checked by published.phase1_backbone_dir), and finished() would try to repair it
    try:
        metrics = json.loads((phase1 / "done.json").read_text())["metrics"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise ConfigError(f"{phase1}: not a finished backbone run (done.json: {e}); {fix}") from e
    if metrics.get("steps_done") != tc.steps:
        raise ConfigError(f"{phase1}: trained {metrics.get('steps_done')} steps, the first phase is {tc.steps}; {fix}")
    sd = ckpt_io.load_backbone(phase1 / "model", dtype=torch.float32, fix=fix).state_dict()
    model.load_state_dict(sd)
    curve = []
    with open(phase1 / "loss_curve.csv") as fh:
        for row in csv.DictReader(fh):
            curve.append({k: int(row[k]) if k == "step" else float(row[k]) for k in _CURVE_FIELDS})
    if len(curve) != tc.steps:
        raise ConfigError(f"{phase1}/loss_curve.csv has {len(curve)} rows, not {tc.steps}; {fix}")
    where = phase1.resolve()
    if where.is_relative_to(repo_root()):  # a published record names no machine's checkout
        where = where.relative_to(repo_root())
    return curve, {"dir": str(where), "fingerprint": model_fingerprint(model), "wall_s": metrics.get("wall_s")}


def _train_backbone(profile, out_dir: Path, progress, resume, stop_after, num_threads, phase1) -> dict:
    done_path = out_dir / "done.json"
    metrics = finished(out_dir, quiet=not done_path.exists())
    if metrics is not None:
        return metrics
    done_path.unlink(missing_ok=True)
    if profile.model.source != "scratch":
        raise ValueError(f"profile {profile.name!r} has model.source={profile.model.source!r}, not 'scratch'")
    tc = profile.backbone_training
    set_num_threads(num_threads or tc.num_threads)
    torch.use_deterministic_algorithms(False)

    tok = make_tokenizer(profile)
    mask_id = mask_token_id(tok)
    data = TrainData(profile, tok)
    total = tc.steps + tc.restart_steps  # both phases
    data.check_seq_len(total, tc.batch_size)  # before any step: a sequence that does not fit is a setting to fix
    cfg = model_config_for(profile, len(tok))
    gen = torch.Generator().manual_seed(profile.seed)
    model = SDARModel(cfg).init_weights(INIT_STD, gen)
    if phase1 is not None and not tc.restart_steps:
        raise ConfigError(f"phase1={phase1} needs backbone_training.restart_steps > 0 (profile {profile.name} has "
                          "none)")  # fmt: skip

    start, curve, prev_elapsed, phase1_record, opt_phase, st = 0, [], 0.0, None, 0, None
    latest = _latest_checkpoint(out_dir) if resume else None
    if latest is not None:
        fix = (
            f"delete {latest} and rerun {BACKBONE_COMMAND.format(name=profile.cli_arg)} "
            "(training restarts from step 0 and, with batches keyed by step, ends at the same weights)"
        )
        sd = ckpt_io.load_backbone(latest, dtype=torch.float32, fix=fix).state_dict()
        model.load_state_dict(sd)
        st = ckpt_io.load_state(latest / "state.pt", fix)
        opt_phase = st.get("phase", 0)  # a checkpoint at the boundary holds the first phase's optimizer
        start, curve, phase1_record = st["step"], st["curve"], st.get("phase1")
        prev_elapsed = curve[-1]["elapsed_s"] if curve else 0.0
    elif phase1 is not None:
        curve, phase1_record = _load_phase1(profile, Path(phase1), model)
        start, prev_elapsed, opt_phase = tc.steps, curve[-1]["elapsed_s"], 1
    opt, sched = _optimizer(model, tc, opt_phase)
    if st is not None:  # the checkpoint's optimizer, scheduler and RNG
        opt.load_state_dict(st["optimizer"])
        sched.load_state_dict(st["scheduler"])
        torch.set_rng_state(st["torch_rng"])
    model.train()

    n_params = count_parameters(model)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, initial=start, desc=f"backbone[{profile.name}]", dynamic_ncols=True)
    t0 = time.perf_counter()
    step = start
    ran = 0
    smooth = None
    while step < total:
        if tc.restart_steps and step >= tc.steps and opt_phase == 0:
            opt_phase = 1
            opt, sched = _optimizer(model, tc, opt_phase)  # the warm restart: fresh moments, own warmup and cosine
        clean, plens, valid = data.batch(step, tc.batch_size)
        g = torch.Generator().manual_seed(hash_seed(profile.seed, step))
        batch = build_block_diffusion_batch(clean, plens, train_block_size(profile, step), mask_id, g, valid)
        loss = block_diffusion_loss(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        lr = opt.param_groups[0]["lr"]
        opt.step()
        sched.step()
        step += 1
        ran += 1
        lv = float(loss.detach())
        smooth = lv if smooth is None else 0.95 * smooth + 0.05 * lv
        curve.append(
            {"step": step, "loss": lv, "lr": lr, "elapsed_s": round(prev_elapsed + time.perf_counter() - t0, 3)}
        )
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{smooth:.3f}")
        stopping = stop_after is not None and ran >= stop_after and step < total
        if step % tc.ckpt_every == 0 or step == total or stopping:
            _save_checkpoint(out_dir, step, model, opt, sched, curve, opt_phase, phase1_record)
            write_curve(out_dir, curve, _CURVE_FIELDS, curve)
        if stopping:
            break
    if bar is not None:
        bar.close()
    if step < total:
        return {"steps_done": step, "finished": False}

    model.eval()
    with integrity.atomic_dir(out_dir / "model") as tmp:  # complete (weights, tokenizer, manifest) or absent
        ckpt_io.save_backbone(model, tmp, extra_config={"mask_token_id": mask_id, "eos_token_id": eos_token_ids(tok)})
        save_tokenizer(tok, tmp)
        integrity.seal(tmp)
    write_curve(out_dir, curve, _CURVE_FIELDS, curve)
    tail = [c["loss"] for c in curve[-max(1, len(curve) // 20) :]]
    metrics = {
        "finished": True,
        "steps_done": step,
        "params": n_params,
        "num_layers": cfg.num_layers,
        "hidden_size": cfg.hidden_size,
        "wall_s": curve[-1]["elapsed_s"] if curve else 0.0,
        "first_loss": curve[0]["loss"] if curve else None,
        "final_loss": float(np.mean(tail)) if tail else None,
        "threads": torch.get_num_threads(),
        "tokens_per_step": 2 * tc.seq_len * tc.batch_size,
    }
    if phase1_record is not None:  # the first phase's weights came from a finished run, not from this one
        metrics["phase1_from"] = phase1_record
    # the integrity record: every output's sha256 and the curve's rows; finished() checks it before any reuse
    record = integrity.record(out_dir, _outputs(out_dir))
    write_json_atomic(done_path, {"metrics": metrics, "provenance": provenance(profile, "cpu"), "files": record,
                                  "rows": {"loss_curve.csv": len(curve)}})  # fmt: skip
    return metrics


def train_block_size(profile: Profile, step: int) -> int:
    """The block size of training step `step`: backbone_training.block_sizes in turn (SDAR trains with 4 and is
    evaluated with 16), or the profile's block_size where none is set. Sequences are laid out at the profile's
    block_size either way (prompts and EOS padding), so every training block size divides it."""
    sizes = profile.backbone_training.block_sizes or (profile.block_size,)
    return sizes[step % len(sizes)]


def hash_seed(seed: int, step: int) -> int:
    """A 63-bit seed for step `step` of a run seeded `seed` (stable across processes)."""
    import hashlib

    return int.from_bytes(hashlib.sha256(f"bd-noise|{seed}|{step}".encode()).digest()[:8], "big") >> 1
