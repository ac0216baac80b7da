"""The backbone of a profile, ready to decode: model + tokenizer + special ids.

    from mrp_repro.backbone import load_for_profile, encode_prompts, decode
    bb = load_for_profile(load_profile("tiny"))      # trains once (~15 CPU-min), then cached
    prompts = encode_prompts(bb, problems)
    text = decode(bb, ids)

Scratch profiles train with :mod:`mrp_repro.train_backbone` into
``runs/<profile>/backbone-<hash>/`` (hash of model, tokenizer, data,
backbone_training, block_size, seed) and load from there afterwards; hub and
local profiles load a hub-format checkpoint and its tokenizer.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import torch

from mrp_repro import checkpoint as ckpt_io
from mrp_repro.config import Profile
from mrp_repro.errors import UserError
from mrp_repro.model import SDARModel
from mrp_repro.runtime import artifact_dir, pick_device, pick_dtype, set_num_threads
from mrp_repro.tokenizer import eos_token_ids, load_tokenizer, mask_token_id

__all__ = [
    "Backbone",
    "backbone_dir",
    "random_backbone",
    "load_for_profile",
    "encode_prompts",
    "decode",
    "BACKBONE_SECTIONS",
    "BackboneNotTrained",
]

BACKBONE_SECTIONS = ("model", "tokenizer", "data", "backbone_training")


class BackboneNotTrained(UserError, FileNotFoundError):
    """A scratch profile's backbone is not trained yet (and training was not asked for)."""


@dataclass
class Backbone:
    model: SDARModel
    tokenizer: object
    mask_id: int
    eos_ids: list[int]
    pad_id: int
    block_size: int
    path: Path | None
    profile: Profile

    @property
    def device(self) -> torch.device:
        return self.model.lm_head.weight.device

    def generate(
        self, prompts: list[list[int]], policy, max_new_tokens: int, model: SDARModel | None = None, **engine_options
    ):
        """decoding.generate with this backbone's block size and special ids (`model` swaps in another
        model of the same tokenizer, e.g. a random init; `engine_options` go to decoding.generate as they are)."""
        from mrp_repro.decoding import generate

        return generate(model or self.model, prompts, policy, self.block_size, self.mask_id, self.eos_ids,
                        max_new_tokens, pad_id=self.pad_id, **engine_options)  # fmt: skip


def backbone_dir(profile: Profile) -> Path:
    """The artifact directory of a scratch profile's trained backbone."""
    from mrp_repro.tasks.synthetic import GENERATOR_VERSION

    key = hashlib.sha256(f"{profile.section_hash(*BACKBONE_SECTIONS)}:synthetic-v{GENERATOR_VERSION}".encode())
    return artifact_dir(profile, "backbone", key.hexdigest()[:12])


def _special_ids(tok) -> tuple[int, list[int], int]:
    mask_id = mask_token_id(tok)
    eos = eos_token_ids(tok)
    pad = tok.pad_token_id if tok.pad_token_id is not None else eos[0]
    return mask_id, eos, int(pad)


def load_for_profile(
    profile: Profile,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = None,
    train_if_missing: bool = True,
    progress: bool = True,
) -> Backbone:
    dev = pick_device(device)
    dt = pick_dtype(dev, dtype if dtype is not None else profile.model.dtype)
    src = profile.model.source
    if src == "scratch":
        out = backbone_dir(profile)
        path = out / "model"
        rerun = f"python -m mrp_repro.train_backbone --profile {profile.name}"
        # A deleted model/ counts as missing: train_backbone rewrites it from its last checkpoint.
        if not (out / "done.json").exists() or not (path / "model.safetensors").exists():
            if not train_if_missing:
                raise BackboneNotTrained(f"no trained backbone at {out}; run {rerun}")
            from mrp_repro.train_backbone import train_backbone

            train_backbone(profile, out, progress=progress)
        fix = (
            f"delete {path} and rerun {rerun} (it rewrites the model from the last training checkpoint "
            f"in {out}, without retraining)"
        )
        model = ckpt_io.load_backbone(path, device=dev, dtype=dt, fix=fix)
        tok = load_tokenizer(path)
    else:
        name = profile.model.hub_id if src == "hub" else profile.model.local_dir
        model = ckpt_io.load_backbone(name, revision=profile.model.revision, device=dev, dtype=dt)
        path = ckpt_io.resolve_checkpoint_dir(name, profile.model.revision)
        tok_src = profile.tokenizer.hub_id or str(path)
        tok = load_tokenizer(tok_src)
    mask_id, eos, pad = _special_ids(tok)
    if dev.type == "cpu" and profile.evaluation.num_threads:
        set_num_threads(profile.evaluation.num_threads)  # training set its own count; decoding wants this one
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return Backbone(model, tok, mask_id, eos, pad, profile.block_size, Path(path), profile)


def encode_prompts(backbone: Backbone, problems) -> list[list[int]]:
    """Token ids of each problem's prompt: synthetic prompts as they are, benchmarks with the chat template."""
    from mrp_repro.tasks import benchmarks, synthetic

    out = []
    for p in problems:
        if p.benchmark in synthetic.TASKS:
            text = p.prompt_text
        else:
            text = benchmarks.format_prompt(p, backbone.tokenizer)
        out.append(backbone.tokenizer.encode(text, add_special_tokens=False))
    return out


def decode(backbone: Backbone, ids: list[int]) -> str:
    """Text of generated ids (special tokens kept, so scorers can stop at them)."""
    return backbone.tokenizer.decode(list(ids), skip_special_tokens=False)


def random_backbone(profile: Profile, std: float = 0.02, seed: int = 0, device=None) -> Backbone:
    """A randomly initialised scratch backbone of `profile`'s shape with the tiny tokenizer (no training)."""
    from mrp_repro.train_backbone import make_tokenizer, model_config_for

    tok = make_tokenizer()
    model = SDARModel(model_config_for(profile, len(tok))).init_weights(std, torch.Generator().manual_seed(seed))
    model = model.to(pick_device(device) if device is not None else "cpu").eval()
    mask_id, eos, pad = _special_ids(tok)
    return Backbone(model, tok, mask_id, eos, pad, profile.block_size, None, profile)
