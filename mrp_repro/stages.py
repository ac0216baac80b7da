"""The pipeline's stages: a profile in, an artifact out, cached under runs/<profile>/<stage>-<hash>/.

    from mrp_repro import stages
    from mrp_repro.config import load_profile
    P = load_profile("tiny")
    bb = stages.backbone(P)                    # tiny: the published backbone (artifacts/tiny/, sha256-checked);
                                               # other scratch profiles train once (~18 CPU-min at tiny's size)
    d = stages.trajectories(P, bb, "self")     # collects (or resumes, or reuses) one trajectory source
    head = stages.head(P, bb)                  # trains the MRP head once; on bb's device and in bb's dtype
                                               # (or loads the released one of mrp.pretrained: mrp_repro.released)
    stages.released_heldout(P, bb, head)       # a loaded head's held-out KL(B || A + C) vs KL(B || A); no training

Every notebook and command line reaches artifacts through these functions only. Each one reuses what is
valid (checked against its integrity record: done.json's sha256 of every output, the shards' manifest) and redoes
what is missing or damaged (a deleted or truncated shard, a head file cut short or changed); a stage holds a lock
on its directory (a second process gets one line naming the holder's PID: mrp_repro.integrity); each
artifact directory is named by a hash of exactly the settings it depends on (`*_dir` functions), plus the
backbone's weight fingerprint for everything trained or collected on a backbone. Published artifacts
(mrp_repro.published) stand in for the backbone and head whenever they apply; MRP_REPRO_FROM_SCRATCH=1 retrains.

Command line (each stage also builds the ones it needs; `--debug` shows a user error's traceback):

    .venv/bin/python -m mrp_repro.stages backbone --profile tiny
    .venv/bin/python -m mrp_repro.stages trajectories --profile tiny [--source self]
    .venv/bin/python -m mrp_repro.stages head --profile tiny [--allow-backbone-mismatch]
    .venv/bin/python -m mrp_repro.stages head --profile tiny --nproc 2     # torchrun, 2 ranks (DDP head training)
    torchrun --standalone --nproc-per-node 8 -m mrp_repro.stages trajectories --profile sdar-4b   # sharded

Benchmark profiles collect trajectories from benchmark-train prompts (GSM8K train, MBPP task ids 601-974)
formatted with the chat template; a profile path starting with runs/ (model.local_dir, mrp.pretrained) is a
generated artifact under $MRP_REPRO_RUNS, written when missing (mrp_repro.sdar_mini, the sdar-mini profile).
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from mrp_repro import checkpoint as ckpt_io
from mrp_repro import distributed, published
from mrp_repro.backbone import Backbone, special_ids
from mrp_repro.config import Profile, repo_root
from mrp_repro.errors import UserError
from mrp_repro.model import SDARModel
from mrp_repro.mrp import BackboneMismatchError, HeadNotFoundError, MRPHead, load_head
from mrp_repro.runtime import FROM_SCRATCH_ENV, artifact_dir, pick_device, pick_dtype, require_device, set_num_threads
from mrp_repro.tokenizer import load_tokenizer
from mrp_repro.training.common import BACKBONE_COMMAND, HEAD_COMMAND
from mrp_repro.training.mrp import finished_problems, train_mrp, train_sources
from mrp_repro.training.online import train_online
from mrp_repro.trajectories import FORMAT_VERSION, collect, model_fingerprint, read_manifest, shard_problem

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "BACKBONE_SECTIONS",
    "BackboneNotTrained",
    "backbone_key",
    "backbone_dir",
    "backbone",
    "shared_backbone",
    "random_backbone",
    "training_problems",
    "training_examples",
    "trajectories_dir",
    "trajectories",
    "trajectories_summary",
    "head_key",
    "head_dir",
    "train_head",
    "head",
    "pretrained_head",
    "released_heldout",
    "released_about",
    "main",
]

BACKBONE_SECTIONS = ("model", "tokenizer", "data", "backbone_training")


class BackboneNotTrained(UserError, FileNotFoundError):
    """A scratch profile's backbone is not trained yet (and training was not asked for)."""


# ----------------------------------------------------------------------------- backbone


def backbone_key(profile: Profile) -> str:
    """The cache key of a scratch profile's backbone: its directory is runs/<profile>/backbone-<key>/."""
    from mrp_repro.tasks import chain
    from mrp_repro.tasks.synthetic import GENERATOR_VERSION

    # a setting at its empty default leaves the key it had before the setting existed (tiny's cached backbones)
    unset = published.unset_backbone_settings(profile)
    text = f"{profile.section_hash(*BACKBONE_SECTIONS, exclude=unset)}:synthetic-v{GENERATOR_VERSION}"
    if set(profile.data.tasks) & set(chain.TASKS):
        text += f":chain-v{chain.GENERATOR_VERSION}"
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def backbone_dir(profile: Profile) -> Path:
    """The artifact directory of a scratch profile's trained backbone (in the runs/ cache; the published one,
    when it applies, is published.backbone_dir)."""
    return artifact_dir(profile, "backbone", backbone_key(profile))


def backbone(
    profile: Profile,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = None,
    train_if_missing: bool = True,
    progress: bool = True,
) -> Backbone:
    """The profile's frozen backbone on `device` in `dtype` (default: runtime.pick_device / the profile's dtype).

    Scratch profiles load the published backbone when it applies (published.backbone_dir: artifacts/<profile>/,
    sha256-checked; not with $MRP_REPRO_FROM_SCRATCH=1), else train once into backbone_dir(profile) (a deleted
    model/ is rewritten from the last training checkpoint); hub and local profiles load a hub-format checkpoint
    and its tokenizer."""
    dev = pick_device(device)
    require_device(profile, dev)  # a GPU profile never falls back to CPU silently
    dt = pick_dtype(dev, dtype if dtype is not None else profile.model.dtype)
    src = profile.model.source
    pub = published.backbone_dir(profile) if src == "scratch" else None
    if pub is not None:  # the published backbone (sha256 verified); a runs/ cache never stands in for it
        path = pub / "model"
        fix = f"restore it with `git checkout -- {pub}`, or retrain ({FROM_SCRATCH_ENV}=1)"
        model = ckpt_io.load_backbone(path, device=dev, dtype=dt, fix=fix)
        tok = load_tokenizer(path)
    elif src == "scratch":
        out = backbone_dir(profile)
        path = out / "model"
        rerun = BACKBONE_COMMAND.format(name=profile.cli_arg)
        from mrp_repro.training.backbone import finished, train_backbone

        if finished(out) is None:  # every output against done.json's sha256 record (a mismatch is named)
            if not train_if_missing:
                raise BackboneNotTrained(f"no trained backbone at {out} (or it does not match its record); run {rerun}")
            train_backbone(profile, out, progress=progress)  # a finished run's damaged model: rewritten from ckpt
        fix = (
            f"delete {path} and rerun {rerun} (it rewrites the model from the last training checkpoint "
            f"in {out}, without retraining)"
        )
        model = ckpt_io.load_backbone(path, device=dev, dtype=dt, fix=fix)
        tok = load_tokenizer(path)
    else:
        name = profile.model.hub_id if src == "hub" else profile.model.local_dir
        if src == "local":
            from mrp_repro import sdar_mini

            if sdar_mini.is_generated(name):  # runs/...: generated here (sdar-mini), written when missing
                name = str(sdar_mini.ensure(name))
            elif not Path(name).expanduser().is_absolute():
                name = str(repo_root() / name)  # relative to the repository, as data.data_dir
        model = ckpt_io.load_backbone(name, revision=profile.model.revision, device=dev, dtype=dt)
        path = ckpt_io.resolve_checkpoint_dir(name, profile.model.revision)
        tok = load_tokenizer(profile.tokenizer.hub_id or str(path))
    mask_id, eos, pad = special_ids(tok)
    if dev.type == "cpu":
        n = profile.evaluation.num_threads  # training set its own count; decoding wants this one
        ranks_here = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))  # torchrun: ranks share this machine's cores
        if ranks_here > 1:
            n = min(n or os.cpu_count() or 1, max(1, (os.cpu_count() or 1) // ranks_here))
        set_num_threads(n)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    if profile.decoding.compile:
        from mrp_repro.model import compile_model

        compile_model(model)
    return Backbone(model, tok, mask_id, eos, pad, profile.block_size, Path(path), profile)


def shared_backbone(profile: Profile, progress: bool = True) -> Backbone:
    """backbone(profile) on every rank of a torchrun launch (distributed.init first): rank 0 loads it first (a
    generated sdar-mini checkpoint is written then, once), the others after a barrier. A scratch backbone is
    never trained under torchrun (one process trains it: ranks would wait at a barrier for minutes); the error
    names the command. Outside torchrun: backbone(profile)."""
    d = distributed.current()
    if not d.active:
        return backbone(profile, progress=progress)
    if (profile.model.source == "scratch" and published.backbone_dir(profile) is None
            and not (backbone_dir(profile) / "done.json").exists()):  # fmt: skip
        raise BackboneNotTrained(
            f"no trained backbone at {backbone_dir(profile)}, and torchrun ranks do not train one; run "
            f"{BACKBONE_COMMAND.format(name=profile.cli_arg)} first (make reproduce NPROC=N does)"
        )
    bb = backbone(profile, progress=progress) if d.is_main else None
    d.barrier()
    return bb if bb is not None else backbone(profile, progress=False)


def random_backbone(profile: Profile, std: float = 0.02, seed: int = 0, device=None) -> Backbone:
    """A randomly initialised scratch backbone of `profile`'s shape with the tiny tokenizer (no training)."""
    from mrp_repro.training.backbone import make_tokenizer, model_config_for

    tok = make_tokenizer(profile)
    model = SDARModel(model_config_for(profile, len(tok))).init_weights(std, torch.Generator().manual_seed(seed))
    model = model.to(pick_device(device) if device is not None else "cpu").eval()
    mask_id, eos, pad = special_ids(tok)
    return Backbone(model, tok, mask_id, eos, pad, profile.block_size, None, profile)


# ----------------------------------------------------------------------------- trajectories


def training_problems(profile: Profile) -> list:
    """profile.trajectories.n_prompts training problems, split evenly over the tasks that have training
    problems: the synthetic tasks (generated), and the benchmarks with a train split (GSM8K train.jsonl, MBPP
    task ids 601-974; MATH500 and HumanEval are test sets only and are left out)."""
    from mrp_repro.runtime import data_dir
    from mrp_repro.tasks import benchmarks, synthetic

    tasks = [t for t in profile.data.tasks if t in synthetic.TASKS or t in benchmarks.TRAIN_BENCHMARKS]
    if not tasks:
        raise ValueError(
            f"profile {profile.name}: no task in data.tasks={list(profile.data.tasks)} has training problems; "
            f"add a synthetic task ({', '.join(synthetic.TASKS)}) or a benchmark with a train split "
            f"({', '.join(benchmarks.TRAIN_BENCHMARKS)})"
        )
    n = profile.trajectories.n_prompts
    per = [n // len(tasks) + (i < n % len(tasks)) for i in range(len(tasks))]
    probs = []
    for t, k in zip(tasks, per, strict=True):
        if t in synthetic.TASKS:
            probs.extend(synthetic.generate(t, "train", k, profile.data.seed, profile.block_size))
        else:  # the first k of the train split: the same prompts on every run (no shuffling to seed)
            probs.extend(benchmarks.load_benchmark(t, data_dir(profile), limit=k, split="train"))
    return probs


def training_examples(bb: Backbone, problems: list, source: str) -> list:
    """What trajectories.collect takes: synthetic problems as they are (collect encodes them and samples gt
    answers); benchmark problems as (prompt ids, answer ids or None) pairs, the prompt formatted with the
    chat template as at evaluation (backbone.encode_prompts), the gt answer from benchmarks.gold_answer_text."""
    from mrp_repro.backbone import encode_prompts
    from mrp_repro.tasks import benchmarks, synthetic

    if all(p.benchmark in synthetic.TASKS for p in problems):
        return problems
    out = []
    for p, ids in zip(problems, encode_prompts(bb, problems), strict=True):
        if p.benchmark in synthetic.TASKS:
            raise ValueError("training problems mix synthetic tasks and benchmarks; use one kind per profile")
        answer = None
        if source != "self":
            answer = bb.tokenizer.encode(benchmarks.gold_answer_text(p), add_special_tokens=False)
        out.append((ids, answer))
    return out


def trajectories_dir(profile: Profile, bb: Backbone, source: str) -> Path:
    key = hashlib.sha256(
        f"{profile.section_hash('trajectories', 'data')}|{model_fingerprint(bb.model)}|{source}|"
        f"{FORMAT_VERSION}|{profile.decoding.max_new_tokens}".encode()
    ).hexdigest()[:12]
    return artifact_dir(profile, f"trajectories-{source}", key)


def trajectories(profile: Profile, bb: Backbone, source: str | None = None, progress: bool = True) -> Path:
    """Collect (or resume, or reuse) `source` trajectories of a profile; returns their directory.

    source: default profile.mrp.train_source (its first entry if a list). Reuse checks every listed
    shard with a stat (exists, recorded size), not its sha256: the consumer (trajectories.load_trajectories)
    hashes every shard on load anyway and names the file and the fix, so hashing here too would read GBs
    twice on an SDAR profile. A missing or truncated shard falls through to `collect`, which redoes only
    the bad shards."""
    if source is None:
        ts = profile.mrp.train_source
        source = ts if isinstance(ts, str) else ts[0]
    out = trajectories_dir(profile, bb, source)
    # a killed run's half-written shard or manifest is cleared under the lock (under torchrun: rank 0's, for the launch)
    with distributed.stage_lock(out, f"trajectory collection ({source}) of profile {profile.name}"):
        return _trajectories(profile, bb, source, out, progress)


def why_no_trajectories(profile: Profile) -> str | None:
    """Why this run collects no trajectories (it trains no head on them), or None when it does: a released head
    alone (mrp.pretrained) or the published head that applies (published.head_applies) reads none. The one rule
    that notebook 02 (trajectories_summary) and make reproduce's stages (reproduce.stage_launches) both read."""
    from mrp_repro.released import trains_head

    if not trains_head(profile):
        return "not collected: mrp.pretrained, nothing trained (mrp_training.beside_pretrained: false)"
    if published.head_applies(profile):
        return (f"not collected: the published head (artifacts/{profile.name}/head) applies and reads none; "
                f"{FROM_SCRATCH_ENV}=1 retrains it from a new collection")  # fmt: skip
    return None


def trajectories_summary(profile: Profile, bb: Backbone) -> pd.DataFrame:
    """Notebook 02's table, one row per trajectories.sources entry (source, rows, shards, artifact): collected (or
    reused) only when this run trains a head on them; a released head (mrp.pretrained) or the published head that
    applies (published.head_applies) reads none, and the row says why instead of collecting (5 min of chain16's
    `make reproduce`)."""
    import pandas as pd

    from mrp_repro.runtime import runs_root

    why = why_no_trajectories(profile)
    if why is None:
        rows = []
        for src in profile.trajectories.sources:
            out = trajectories(profile, bb, src)
            man = read_manifest(out)
            rows.append({"source": src, "rows": man["n_rows"], "shards": len(man["shards"]),
                         "artifact": str(out.relative_to(runs_root()))})  # fmt: skip
        return pd.DataFrame(rows)
    return pd.DataFrame([{"source": src, "rows": 0, "shards": 0, "artifact": why}
                         for src in profile.trajectories.sources])  # fmt: skip


def _trajectories(profile: Profile, bb: Backbone, source: str, out: Path, progress: bool) -> Path:
    rerun = f"{HEAD_COMMAND.format(name=profile.cli_arg)} (or notebook 02)"
    if (out / "manifest.json").exists():
        manifest = read_manifest(out, rerun)
        if manifest.get("complete") and all(shard_problem(out, e, full=False) is None for e in manifest["shards"]):
            return out
    collect(
        bb.model,
        bb.mask_id,
        training_examples(bb, training_problems(profile), source),
        source,
        out,
        profile.trajectories.shard_size,
        profile.seed,
        progress,
        block_size=profile.block_size,
        eos_ids=bb.eos_ids,
        pad_id=bb.pad_id,
        tokenizer=bb.tokenizer,
        max_new_tokens=profile.decoding.max_new_tokens,
        batch_size=profile.decoding.batch_size,
        chain_steps=profile.trajectories.chain_steps,
        profile_hash=profile.section_hash("trajectories", "data"),
        rerun=rerun,
    )
    return out


# ----------------------------------------------------------------------------- MRP head


def head_key(profile: Profile, backbone_fingerprint: str) -> str:
    """The cache key of a trained head: its directory is runs/<profile>/mrp-<key>/."""
    # the online recipe reads no trajectories, so their settings do not name its head
    sections = ("mrp", "mrp_training", "data") + (("trajectories",) if profile.mrp_training.recipe == "offline" else ())
    key = profile.section_hash(*sections, exclude=("mrp_training.beside_pretrained",))  # whether, not what
    return hashlib.sha256((key + "|" + backbone_fingerprint).encode()).hexdigest()[:12]


def head_dir(profile: Profile, bb: Backbone) -> Path:
    """runs/<profile>/mrp-<hash>/: head/ (weights, config), metrics.json, loss curves, ckpt.pt; or the published
    head's directory (artifacts/<profile>/head/, sha256-checked) when it applies (published.head_dir)."""
    fp = model_fingerprint(bb.model)
    pub = published.head_dir(profile, fp)
    return pub if pub is not None else artifact_dir(profile, "mrp", head_key(profile, fp))


def _load_head(bb: Backbone, out: Path, allow_backbone_mismatch: bool) -> MRPHead:
    m = bb.model
    return load_head(
        out / "head",
        m.config,
        device=m.lm_head.weight.device,
        dtype=m.lm_head.weight.dtype,
        backbone_hash=model_fingerprint(m),
        allow_backbone_mismatch=allow_backbone_mismatch,
        rerun=HEAD_COMMAND.format(name=bb.profile.cli_arg) if bb.profile is not None else None,
    )


def train_head(profile: Profile, bb: Backbone, progress: bool = True, allow_backbone_mismatch: bool = False) -> Path:
    """head_dir(profile, bb), trained only when missing: mrp_training.recipe "online" trains on packed chat SFT
    (training.online, the paper's recipe), "offline" on collected trajectories (collected first).

    On reuse the head is loaded once against the backbone's fingerprint: a missing or unreadable head is
    rewritten from ckpt.pt (a finished run's last checkpoint: no step is retrained); a head of another
    backbone is refused (BackboneMismatchError) unless allow_backbone_mismatch. The published head, when it
    applies (head_dir), is returned as it is: never trained into, never rewritten."""
    pub = published.head_dir(profile, model_fingerprint(bb.model))
    if pub is not None:
        return pub
    out = head_dir(profile, bb)
    # a second process: StageLocked; a killed run's half-written checkpoint or head is cleared under the lock
    with distributed.stage_lock(out, f"head training of profile {profile.name}"):
        return _train_head(profile, bb, out, progress, allow_backbone_mismatch)


def _train_head(profile: Profile, bb: Backbone, out: Path, progress: bool, allow_backbone_mismatch: bool) -> Path:
    if (out / "done.json").exists() and (bad := finished_problems(out)):  # verified before any reuse
        print(f"stages.head: not reusing {out}: {bad[0]}; rewriting its outputs from {out / 'ckpt.pt'}",
              file=sys.stderr)  # fmt: skip
        (out / "done.json").unlink()
    if (out / "done.json").exists():
        try:
            _load_head(bb, out, allow_backbone_mismatch)
            return out
        except BackboneMismatchError as e:  # load_head's "rerun the stage" would reuse this directory: say so
            raise BackboneMismatchError(
                f"{out} holds a finished head trained on another backbone than the one loaded "
                f"({model_fingerprint(bb.model)}); rerunning the stage reuses it. Delete {out} and rerun "
                f"{HEAD_COMMAND.format(name=profile.cli_arg)} to train one for this backbone, or pass "
                f"--allow-backbone-mismatch (allow_backbone_mismatch=True) to use it anyway. ({e})"
            ) from e
        except (HeadNotFoundError, ckpt_io.CheckpointError) as e:
            print(f"stages.head: {e}; rewriting the head from {out / 'ckpt.pt'}", file=sys.stderr)
            (out / "done.json").unlink()
    batch = min(profile.mrp_training.batch_size, 32)

    def head_cost(h: MRPHead) -> dict:
        from mrp_repro.measure.cost import head_cost_ratio

        return dict(head_cost_ratio=head_cost_ratio(bb.model, h, batch, bb.block_size), head_cost_ratio_batch=batch)

    if profile.mrp_training.recipe == "online":  # the paper's recipe: packed chat SFT, noised on the fly
        train_online(profile, bb, out, progress=progress, resume=True, extra_metrics=head_cost)
    else:  # ours: collected block states (trajectories.sources)
        dirs = [trajectories(profile, bb, s, progress=progress) for s in train_sources(profile)]
        train_mrp(profile, bb, dirs, out, progress=progress, resume=True, extra_metrics=head_cost)
    return out


def head(profile: Profile, bb: Backbone, progress: bool = True, allow_backbone_mismatch: bool = False) -> MRPHead:
    """The profile's MRP head on `bb`, on the backbone's device and in its dtype: the released head of
    mrp.pretrained when set (released.load_released_head: refused with a ReleasedHeadMismatch naming both
    fingerprints if it was released for another backbone), else the trained one (trained first if missing;
    refused if it was trained on another backbone unless allow_backbone_mismatch=True)."""
    if profile.mrp.pretrained:
        h = pretrained_head(profile, bb)[0]
    else:
        h = _load_head(bb, train_head(profile, bb, progress, allow_backbone_mismatch), allow_backbone_mismatch)
    if profile.decoding.compile:
        from mrp_repro.model import compile_model

        compile_model(bb.model, h)  # the backbone is compiled already (backbone()); this compiles the head
    return h


#: the released head's held-out check (notebook 04): GSM8K train in the chat template (benchmark-train prompts with
#: their gold answers; the SDAR SFT set is ~53 GB), RELEASED_HELDOUT_SAMPLES samples packed at mrp_training.seq_len,
#: the last RELEASED_HELDOUT_SEQS packed sequences, the online recipe's fixed held-out noise
RELEASED_HELDOUT_SOURCE = "gsm8k"
RELEASED_HELDOUT_SAMPLES = 256
RELEASED_HELDOUT_SEQS = 8


@torch.no_grad()
def released_heldout(profile: Profile, bb: Backbone, head: MRPHead, spec: str | None = None) -> dict:
    """Held-out KL(B || A + C) of a loaded head against the uncorrected KL(B || A) (the claim mrp-fits-residual),
    measured as the online recipe measures its held-out set (training.online), on RELEASED_HELDOUT_SEQS packed
    sequences of RELEASED_HELDOUT_SOURCE. Nothing is trained. The released heads were trained on chat SFT data
    that may include GSM8K train: the check is of the fit, not of generalisation."""
    from mrp_repro.runtime import data_dir
    from mrp_repro.tasks import benchmarks, sft
    from mrp_repro.training import online

    tc = profile.mrp_training
    # GSM8K train as tasks.benchmarks reads it (data.data_dir / $MRP_REPRO_DATA, else the hub through `datasets`;
    # unreachable: one error naming both), as chat SFT records (question -> answer), packed as the online recipe packs
    recs = benchmarks._read_records(RELEASED_HELDOUT_SOURCE, data_dir(profile), "train")[:RELEASED_HELDOUT_SAMPLES]
    data = sft.pack(sft.iter_samples(recs, bb.tokenizer, profile.block_size, bb.eos_ids[0]), tc.seq_len,
                    profile.block_size, pad_id=bb.pad_id)  # fmt: skip
    sha = hashlib.sha256(data.ids.numpy().tobytes() + data.answer.numpy().tobytes()).hexdigest()[:16]
    rows = torch.arange(max(0, len(data) - RELEASED_HELDOUT_SEQS), len(data))
    dev = bb.model.lm_head.weight.device
    m = online._heldout(head, bb.model, data, rows, profile, bb.mask_id, tc.micro_batch_size, dev,
                        online._amp_for(bb.model, dev))  # fmt: skip
    return {"head": spec or profile.mrp.pretrained, "source": f"{RELEASED_HELDOUT_SOURCE} train", "data_sha256": sha,
            "sequences": len(rows), "seq_len": tc.seq_len, "heldout_slots": m["heldout_slots"],
            "heldout_kl": m["heldout_kl"], "heldout_uncorrected_kl": m["heldout_baseline_kl"],
            "ratio": m["heldout_kl"] / max(m["heldout_baseline_kl"], 1e-12)}  # fmt: skip


def released_about(profile: Profile, bb: Backbone, head: MRPHead, info) -> list[tuple[str, str]]:
    """(key, value) rows of what notebook 04 loaded and checked: the spec, the resolved commit and each file's sha256
    (inputs.resolve), the head's shape, the backbone fingerprint compared, dtype and device."""
    from mrp_repro import inputs

    recs = inputs.recorded(profile) or inputs.record(profile, quiet=True)
    files = next((r["files"] for r in recs if r["input"] == "head"), {})
    rows = [("pretrained", info.spec), ("path", str(info.path)), ("requested revision", str(info.revision)),
            ("resolved commit", str(info.commit or "local directory")), ("head layers", info.num_layers),
            ("objective", head.objective), ("parameters", sum(p.numel() for p in head.parameters())),
            ("backbone fingerprint (checked)", str(info.fingerprint)),
            ("dtype", str(next(head.parameters()).dtype)), ("device", str(bb.device))]  # fmt: skip
    rows += [(f"sha256 {name}", sha) for name, sha in files.items()]
    return [(k, str(v)) for k, v in rows]


def pretrained_head(profile: Profile, bb: Backbone):
    """(head, released.ReleasedInfo) of mrp.pretrained: `owner/name[@revision]` from the hub (or its warm
    cache), or a local directory; a relative `runs/...` path is a generated artifact under $MRP_REPRO_RUNS,
    written by its generator when missing (sdar_mini.ensure)."""
    from mrp_repro import released, sdar_mini
    from mrp_repro.config import repo_root

    spec = profile.mrp.pretrained
    if sdar_mini.is_generated(spec):
        spec = str(sdar_mini.ensure(spec))
    return released.load_released_head(spec, bb, profile.mrp.objective, profile.mrp.num_layers, root=repo_root())


# ----------------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> None:
    import argparse
    import json

    from mrp_repro.config import DEFAULT_PROFILE, load_profile

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stage", choices=("backbone", "trajectories", "head"))
    ap.add_argument("--profile", default=DEFAULT_PROFILE)
    ap.add_argument("--source", default=None, help="trajectories: the source (default: mrp.train_source)")
    ap.add_argument("--threads", type=int, default=None, help="backbone: override backbone_training.num_threads")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--nproc", type=int, default=1, help="trajectories, head: launch this many local ranks (torchrun)")
    ap.add_argument(
        "--allow-backbone-mismatch",
        action="store_true",
        help="head: reuse a head recorded for another backbone fingerprint (normally refused)",
    )
    ap.add_argument(
        "--phase1-from-published",
        action="store_true",
        help="backbone with backbone_training.restart_steps: start the restart from the published backbone, "
        "checked to be this profile's first phase, instead of retraining it",
    )
    args = ap.parse_args(argv)
    profile = load_profile(args.profile)
    progress = not args.no_progress
    if args.nproc > 1 and "WORLD_SIZE" not in os.environ:  # not yet under torchrun: launch it
        if args.stage == "backbone":
            raise UserError("the backbone stage runs in one process (--nproc 1); trajectories and head scale out")
        from mrp_repro.runtime import runs_root

        rest = distributed.without_nproc(argv if argv is not None else sys.argv[1:])
        distributed.launch("mrp_repro.stages", rest, args.nproc, runs_root() / profile.name / "logs" / args.stage)
        return
    d = distributed.init()
    pub = published.backbone_dir(profile) if args.stage == "backbone" else None
    if pub is not None:  # verified; nothing to train
        print(json.dumps({"published": str(pub)}))
        return
    if args.stage == "backbone" and profile.model.source == "scratch":
        from mrp_repro.training.backbone import train_backbone

        out = backbone_dir(profile)  # train_backbone resumes, or returns a finished run's metrics at once
        phase1 = published.phase1_backbone_dir(profile) if args.phase1_from_published else None
        metrics = train_backbone(profile, out, progress, num_threads=args.threads, phase1=phase1)
        print(json.dumps({"out_dir": str(out), **metrics}))
        return
    set_num_threads(profile.backbone_training.num_threads)
    bb = shared_backbone(profile, progress=progress)
    if args.stage == "backbone":
        print(bb.path)
    elif args.stage == "trajectories":
        print(trajectories(profile, bb, args.source, progress=progress))
    elif profile.mrp.pretrained:
        _, info = pretrained_head(profile, bb)
        print(json.dumps({"pretrained": info.spec, "path": str(info.path), "revision": info.revision,
                          "commit": info.commit, "num_layers": info.num_layers,
                          "backbone_fingerprint": info.fingerprint}))  # fmt: skip
    else:
        out = train_head(profile, bb, progress, args.allow_backbone_mismatch)
        if d.is_main:
            print(json.dumps(json.loads((out / "metrics.json").read_text()), indent=2))
            print(out)


if __name__ == "__main__":
    from mrp_repro.cli import run_cli

    run_cli(main)
