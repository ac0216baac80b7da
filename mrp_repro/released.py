"""The authors' released MRP heads (METHOD.md §7), loaded in place of training one.

    from mrp_repro import released, stages
    head = released.load_released_head("heavyball/sdar-8b-mrp-3lyr@<commit sha>", bb, objective="residual")
    # or, through a profile: mrp.pretrained: heavyball/sdar-8b-mrp-3lyr@<sha>  ->  stages.head(P, bb)

`mrp.pretrained` is a hub id with an optional pinned revision after `@` (`owner/name@revision`; without
one the hub's `main`), or a local directory in the released layout. The released checkpoints hold the whole
model in one state dict: the frozen SDAR backbone under `model.*` + `lm_head.weight`, the head under
`mrp_modules.0.model.*`; config.json is the backbone's plus `num_nextn_predict_layers`, `num_mrp_heads` and
`block_size`. Hub fetching goes through checkpoint.resolve_checkpoint_dir (a warm cache works offline).

A head only predicts the residuals of the backbone it was trained on, so the released backbone is checked
against the profile's: every shape (config.json), then a fingerprint of a few tensors (embeddings, lm_head,
the first layer's input norm, the last layer's post-attention norm, the final norm), compared in the lower
precision of the stored dtype and the loaded backbone's dtype (a cast down is exact, so equal weights give
equal fingerprints). A mismatch is a ReleasedHeadMismatch naming both fingerprints. Before any of that the files
are read through the directory's manifest (checkpoint.checkpoint_files): a hub-cache snapshot's files are hashed
and compared with their blob's content name (a flipped byte in the cached head is a CheckpointError), a generated
one is checked against its integrity.json.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from mrp_repro import checkpoint as ckpt_io
from mrp_repro import integrity
from mrp_repro.errors import UserError
from mrp_repro.mrp import PREFIX, MRPHead, head_from_released

__all__ = ["RELEASED_HEADS", "ReleasedHeadMismatch", "trains_head", "parse_pretrained", "released_dir",
           "fingerprint_tensors", "released_fingerprint", "backbone_fingerprint", "load_released_head",
           "ReleasedInfo"]  # fmt: skip

#: the authors' heads, spelled as in their scripts: 3-layer residual (k = 1), two-step (-k2), direct ablation
RELEASED_HEADS = tuple(
    f"heavyball/sdar-{size}-mrp-3lyr{variant}" for size in ("1.7b", "4b", "8b") for variant in ("", "-k2", "-direct")
)

#: backbone tensors whose bytes fingerprint it (cheap: two matrices and three norm vectors)
_LAST = "{last}"
FINGERPRINT_TENSORS = (
    "model.embed_tokens.weight",
    "lm_head.weight",
    "model.layers.0.input_layernorm.weight",
    f"model.layers.{_LAST}.post_attention_layernorm.weight",
    "model.norm.weight",
)
_PRECISION = {torch.float32: 3, torch.float64: 4, torch.bfloat16: 1, torch.float16: 2}


class ReleasedHeadMismatch(UserError, ValueError):
    """A released head whose backbone is not the profile's backbone (other shapes or other weights)."""


@dataclass(frozen=True)
class ReleasedInfo:
    """What was loaded: the spec as written, the directory read, the revision, the fingerprint checked."""

    spec: str
    path: Path
    revision: str | None
    num_layers: int
    fingerprint: str | None
    commit: str | None = None  # the hub commit `path` resolved to (checkpoint.snapshot_commit); None: local


def trains_head(profile) -> bool:
    """Whether a run of `profile` trains a head of ours (and, offline, collects its trajectories): always without
    mrp.pretrained; with it, only when mrp_training.beside_pretrained asks (notebooks 02 and 04, mrp_repro.inputs)."""
    return not profile.mrp.pretrained or profile.mrp_training.beside_pretrained


def parse_pretrained(spec: str) -> tuple[str, str | None]:
    """`owner/name@revision` -> (owner/name, revision); a local directory (or `owner/name`) -> (spec, None)."""
    if Path(spec).expanduser().is_dir() or "@" not in spec:
        return spec, None
    name, _, rev = spec.rpartition("@")
    if not name or not rev:
        raise UserError(f"mrp.pretrained {spec!r}: write a hub id as owner/name or owner/name@revision")
    return name, rev


def released_dir(spec: str, root: Path | None = None) -> Path:
    """The directory holding a released checkpoint: a local directory (relative to `root`, the repository
    root, if not absolute), else the hub snapshot at the pinned revision (checkpoint.resolve_checkpoint_dir)."""
    name, rev = parse_pretrained(spec)
    p = Path(name).expanduser()
    if not p.is_absolute() and root is not None and (root / p).is_dir():
        return root / p
    if p.is_dir():
        return p
    if p.is_absolute() or spec.startswith((".", "~")) or name.count("/") != 1:
        raise ckpt_io.CheckpointError(
            f"mrp.pretrained {spec!r}: no such directory; set mrp.pretrained to a directory holding a released head "
            "(config.json + *.safetensors) or to a hub id owner/name[@revision]"
        )
    try:
        return ckpt_io.resolve_checkpoint_dir(name, rev)
    except ckpt_io.CheckpointError as e:  # its advice names model.local_dir, the backbone's setting: not this one
        cause = e.__cause__ or e
        pin = f" --revision {rev}" if rev else ""
        local = f"released/{name.replace('/', '--')}"  # a directory of the user's, as printed: a command that runs
        raise ckpt_io.CheckpointError(
            f"mrp.pretrained {spec!r}: could not fetch {name}@{rev or 'main'} from the hub ({type(cause).__name__}: "
            f"{' '.join(str(cause).split())[:200]}). Download the head where the hub is reachable "
            f"(huggingface-cli download {name}{pin} --local-dir {local}), copy that directory into this repository "
            f"and set mrp.pretrained: {local} (a local directory in the released layout: config.json + "
            "*.safetensors), or set HF_HOME to a cache that holds it"
        ) from e


def _names(num_layers: int) -> list[str]:
    return [n.replace(_LAST, str(num_layers - 1)) for n in FINGERPRINT_TENSORS]


def fingerprint_tensors(tensors: dict[str, torch.Tensor], names: list[str], dtype: torch.dtype) -> str:
    """16-hex sha256 over names, shapes and the bytes of `tensors[names]` cast to `dtype`."""
    h = hashlib.sha256()
    for n in names:
        t = tensors[n].detach().to("cpu", dtype).contiguous()
        h.update(f"{n}:{tuple(t.shape)}:{dtype}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())  # bf16 has no numpy dtype: hash raw bytes
    return h.hexdigest()[:16]


def backbone_tensors(model) -> dict[str, torch.Tensor]:
    """Our backbone's tensors under the hub's names (checkpoint.hub_weight_map)."""
    sd = model.state_dict()
    return {hub: sd[ours] for ours, hub in ckpt_io.hub_weight_map(model.config).items()}


def _compare_dtype(stored: torch.dtype, loaded: torch.dtype) -> torch.dtype:
    return stored if _PRECISION.get(stored, 0) <= _PRECISION.get(loaded, 0) else loaded


def released_fingerprint(state: dict, model) -> tuple[str, str, torch.dtype]:
    """(fingerprint of the released backbone tensors, of `model`'s, the dtype both were computed in)."""
    names = _names(model.config.num_layers)
    dt = _compare_dtype(state[names[0]].dtype, model.lm_head.weight.dtype)
    return fingerprint_tensors(state, names, dt), fingerprint_tensors(backbone_tensors(model), names, dt), dt


def backbone_fingerprint(model, dtype: torch.dtype | None = None) -> str:
    """The fingerprint of `model` alone (as the released checkpoint's would read in `dtype`)."""
    return fingerprint_tensors(backbone_tensors(model), _names(model.config.num_layers),
                               dtype or model.lm_head.weight.dtype)  # fmt: skip


def _check_shapes(spec: str, path: Path, hub_cfg: dict, model, block_size: int | None) -> None:
    rel = ckpt_io.config_from_hub_json(hub_cfg)
    ours = model.config
    diff = [f"{k}: released {getattr(rel, k)} vs profile {getattr(ours, k)}"
            for k in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads",
                      "head_dim") if getattr(rel, k) != getattr(ours, k)]  # fmt: skip
    if diff:
        raise ReleasedHeadMismatch(
            f"mrp.pretrained {spec!r} ({path}) was released for another backbone ({'; '.join(diff)}); use the head "
            f"released for this profile's model ({', '.join(RELEASED_HEADS)}) or set mrp.pretrained: null to train one"
        )
    rel_block = hub_cfg.get("block_size")
    if block_size is not None and rel_block is not None and int(rel_block) != block_size:
        raise ReleasedHeadMismatch(
            f"mrp.pretrained {spec!r}: released for block_size {rel_block}, the profile decodes with block_size "
            f"{block_size}; set block_size: {rel_block} in the profile or set mrp.pretrained: null to train a head"
        )


def load_released_head(spec: str, bb, objective: str = "residual", num_layers: int | None = None,
                       root: Path | None = None) -> tuple[MRPHead, ReleasedInfo]:  # fmt: skip
    """The released head of `spec` on backbone `bb` (a backbone.Backbone), on bb's device in bb's dtype.

    Refused (ReleasedHeadMismatch) when the released backbone differs from bb's in a shape, the block size or
    the fingerprint, when its layer count differs from `num_layers` (the profile's mrp.num_layers), or when a
    `-direct` head is asked for with the residual objective; a damaged file is a checkpoint.CheckpointError."""
    path = released_dir(spec, root)
    _, rev = parse_pretrained(spec)
    cfg_path = path / "config.json"
    name = parse_pretrained(spec)[0]
    if Path(name).expanduser().is_dir() or (root is not None and (root / name).is_dir()):  # not from the hub
        fix = (f"{path} is a local directory: restore it from where it came from, or set mrp.pretrained to an "
               "intact copy (config.json + *.safetensors) or to the released head's hub id")  # fmt: skip
    else:
        fix = f"delete {path} and fetch it again (huggingface-cli download {name}{f' --revision {rev}' if rev else ''})"
    if not cfg_path.is_file():
        raise ckpt_io.CheckpointError(f"mrp.pretrained {spec!r}: {path} has no config.json; {fix}")
    ckpt_io.checkpoint_files(path, fix)  # every file against its record (hub blob names) before config.json is read:
    try:  # a corrupted value would otherwise be quoted as the setting to adopt (block_size)
        hub_cfg = json.loads(cfg_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ckpt_io.CheckpointError(f"{cfg_path} is unreadable ({e}); {fix}") from e
    model = bb.model
    _check_shapes(spec, path, hub_cfg, model, getattr(bb, "block_size", None))
    state = ckpt_io.read_state_dict(path, fix=fix)
    if not any(k.startswith(PREFIX) for k in state):
        raise ReleasedHeadMismatch(
            f"mrp.pretrained {spec!r}: {path} holds no MRP head (no tensor under {PREFIX}*); point it at a "
            f"released head ({', '.join(RELEASED_HEADS[:3])}, ...) or set mrp.pretrained: null"
        )
    fp = None
    if all(n in state for n in _names(model.config.num_layers)):
        fp, ours, dt = released_fingerprint(state, model)
        if fp != ours:
            raise ReleasedHeadMismatch(
                f"mrp.pretrained {spec!r}: the released head's backbone has fingerprint {fp}, the profile's "
                f"backbone ({bb.path}) has {ours} (in {dt}): same shapes, other weights; load the backbone the head "
                "was released with (model.hub_id / model.revision) or set mrp.pretrained: null to train a head"
            )
    else:  # a head saved without its backbone: only the shapes could be checked
        print(f"released: {path} holds no backbone tensors; only the shapes were checked", file=sys.stderr)
    if "-direct" in spec and objective != "direct":
        raise ReleasedHeadMismatch(
            f"mrp.pretrained {spec!r} is a direct-objective head; set mrp.objective: direct in the profile"
        )
    dev, dtype = model.lm_head.weight.device, model.lm_head.weight.dtype
    head = head_from_released(state, model.config, objective, device=dev, dtype=dtype)
    if num_layers is not None and head.num_layers != num_layers:
        raise ReleasedHeadMismatch(
            f"mrp.pretrained {spec!r} has {head.num_layers} head layers, the profile says mrp.num_layers "
            f"{num_layers}; set mrp.num_layers: {head.num_layers}"
        )
    declared = hub_cfg.get("num_nextn_predict_layers")
    if declared is not None and int(declared) != head.num_layers:
        raise ckpt_io.CheckpointError(
            f"{path}: config.json says num_nextn_predict_layers {declared}, the weights hold {head.num_layers} "
            f"layers; {fix}"
        )
    for p in head.parameters():
        p.requires_grad_(False)
    return head, ReleasedInfo(spec, path, rev, head.num_layers, fp, ckpt_io.snapshot_commit(path))


def save_released(model, head: MRPHead, out_dir, block_size: int, extra: dict | None = None) -> Path:
    """Write backbone + head as one state dict in the released layout (what sdar_mini and the tests build)."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in backbone_tensors(model).items()}
    tensors.update({PREFIX + k: v.detach().to("cpu").contiguous() for k, v in head.state_dict().items()})
    with integrity.atomic_file(out / "model.safetensors") as tmp:  # a unique temporary name, renamed into place
        save_file(tensors, str(tmp), metadata={"format": "pt"})
    cfg = ckpt_io.config_to_hub_json(
        model.config,
        {"num_nextn_predict_layers": head.num_layers, "num_mrp_heads": 1, "block_size": block_size, **(extra or {})},
    )
    with integrity.atomic_file(out / "config.json") as tmp:
        tmp.write_text(json.dumps(cfg, indent=2))
    return out
