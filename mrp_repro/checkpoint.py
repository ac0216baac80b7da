"""Backbone checkpoints in the hub's format: config.json + (sharded) safetensors, Qwen3 names.

    model = load_backbone("JetLM/SDAR-1.7B-Chat", revision="<sha>")   # hub (needs network)
    model = load_backbone("runs/tiny/backbone-<hash>/model")           # local directory
    save_backbone(model, "some/dir")                                   # the same format

SDAR checkpoints say `model_type: "sdar"`, Qwen3 ones `"qwen3"`; both hold the same
tensor names. The mapping from hub names to ours is explicit (`hub_weight_map`), and a
missing, unexpected or wrong-shaped tensor is an error that names it.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import re
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from mrp_repro import integrity
from mrp_repro.errors import UserError
from mrp_repro.model import ModelConfig, SDARModel

SUPPORTED_MODEL_TYPES = ("sdar", "qwen3")
# Tensors of a checkpoint that are not the backbone's (e.g. the released MRP heads sit
# beside the backbone in one state dict) and that the backbone loader leaves alone.
FOREIGN_PREFIXES = ("mrp_modules.",)


class CheckpointError(UserError, ValueError):
    """A checkpoint that cannot be used as it is (missing, truncated, foreign); the message names the fix."""


_HUB_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")


def recorded_hub_repo(ckpt_dir: Path) -> str | None:
    """The hub repository a local checkpoint directory names as its origin (config.json's `_name_or_path`, as
    transformers writes it), or None: unreadable, absent, a local path, or anything but a plain owner/name."""
    cfg = Path(ckpt_dir) / "config.json"
    try:
        if cfg.is_symlink() or cfg.stat().st_size > 1 << 20:  # never follow a link or read a big file for advice
            return None
        name = json.loads(cfg.read_text(encoding="utf-8")).get("_name_or_path")
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(name, str) and _HUB_REPO.match(name) and not Path(name).exists():
        return name
    return None


def default_fix(path: Path) -> str:
    """How to replace an unreadable weights file: a hub-cache file is fetched again once deleted (the
    cache entry is a symlink to a blob: delete both); a local directory is restored from its source: the
    download command when its config.json names its hub repository, else in words (no placeholder to fill)."""
    p = Path(path)
    if p.is_symlink() or "models--" in str(p):
        blob = f" and the blob it points to ({p.resolve()})" if p.is_symlink() else ""
        return f"delete {p}{blob} and rerun: the hub download fetches what is missing"
    repo = recorded_hub_repo(p.parent)
    if repo is not None:
        return (
            f"restore {p.name} from the hub repository its config.json names (huggingface-cli download {repo} "
            f"--local-dir {p.parent}) or re-save it with checkpoint.save_backbone"
        )
    return (
        f"restore {p.name} into {p.parent} from where this checkpoint came from (its config.json names no hub "
        "repository) or re-save it with checkpoint.save_backbone"
    )


def config_from_hub_json(cfg: dict) -> ModelConfig:
    model_type = cfg.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise CheckpointError(
            f"config.json has model_type={model_type!r}; this loader reads {SUPPORTED_MODEL_TYPES} "
            "(SDAR and Qwen3 share one architecture)"
        )
    # transformers 5 moved rope_theta into rope_parameters; read either.
    rope_theta = cfg.get("rope_theta") or (cfg.get("rope_parameters") or {}).get("rope_theta") or 1_000_000.0
    return ModelConfig(
        vocab_size=cfg["vocab_size"],
        hidden_size=cfg["hidden_size"],
        intermediate_size=cfg["intermediate_size"],
        num_layers=cfg["num_hidden_layers"],
        num_heads=cfg["num_attention_heads"],
        num_kv_heads=cfg.get("num_key_value_heads", cfg["num_attention_heads"]),
        head_dim=cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"],
        rope_theta=float(rope_theta),
        rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
        max_position_embeddings=cfg.get("max_position_embeddings", 40960),
    )


def config_to_hub_json(cfg: ModelConfig, extra: dict | None = None) -> dict:
    return {
        "architectures": ["SDARForCausalLM"],
        "model_type": "sdar",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
        "rope_theta": cfg.rope_theta,
        "rms_norm_eps": cfg.rms_norm_eps,
        "max_position_embeddings": cfg.max_position_embeddings,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "attention_bias": False,
        "torch_dtype": "float32",
        **(extra or {}),
    }


def hub_weight_map(cfg: ModelConfig) -> dict[str, str]:
    """Our parameter name -> the hub's tensor name."""
    m = {
        "embed_tokens.weight": "model.embed_tokens.weight",
        "norm.weight": "model.norm.weight",
        "lm_head.weight": "lm_head.weight",
    }
    per_layer = [
        "self_attn.q_proj.weight", "self_attn.k_proj.weight",
        "self_attn.v_proj.weight", "self_attn.o_proj.weight",
        "self_attn.q_norm.weight", "self_attn.k_norm.weight",
        "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
        "input_layernorm.weight", "post_attention_layernorm.weight",
    ]  # fmt: skip
    for i in range(cfg.num_layers):
        for name in per_layer:
            m[f"layers.{i}.{name}"] = f"model.layers.{i}.{name}"
    return m


def resolve_checkpoint_dir(name_or_path: str | os.PathLike, revision: str | None = None) -> Path:
    """A local directory as is; otherwise a hub repo id fetched (or found in the hub cache) at `revision`."""
    p = Path(name_or_path)
    if p.is_dir():
        return p
    if p.exists() or str(name_or_path).startswith((".", "/")):
        raise CheckpointError(f"{name_or_path} is not a checkpoint directory")
    from huggingface_hub import snapshot_download

    try:
        return Path(
            snapshot_download(
                str(name_or_path),
                revision=revision,
                allow_patterns=["*.json", "*.safetensors", "*.txt", "*.jinja", "*.model"],
            )
        )
    except Exception as e:  # offline, unknown repo, bad revision: say what to do
        local = f"models/{str(name_or_path).replace('/', '--')}"  # a concrete place, relative to the repository
        raise CheckpointError(
            f"could not fetch {name_or_path}@{revision or 'main'} from the hub ({type(e).__name__}: {e}). "
            f"Download it where the hub is reachable (huggingface-cli download {name_or_path}"
            f"{' --revision ' + revision if revision else ''} --local-dir {local}, in this repository's root or copied "
            f"there) and set model.source: local and model.local_dir: {local} in the profile, or set HF_HOME to a "
            "cache that holds it."
        ) from e


def snapshot_commit(path: str | os.PathLike) -> str | None:
    """The hub commit a resolved checkpoint directory came from: a hub-cache snapshot is
    <cache>/models--owner--name/snapshots/<commit>; None for any other directory (a local copy)."""
    p = Path(path)
    hex40 = len(p.name) == 40 and all(c in "0123456789abcdef" for c in p.name)
    return p.name if p.parent.name == "snapshots" and hex40 else None


def _hub_blob_check(f: Path) -> str | None:
    """Why a hub-cache snapshot file is not the hub's (None when it is): each is a link to a blob the hub names by
    its content, sha256 for LFS files (weights), the git sha1 for the rest."""
    if not f.is_symlink():  # a cache without symlinks (huggingface_hub copies files there): no name to check
        return None
    blob = Path(os.readlink(f)).name
    if len(blob) == 64:
        got = integrity.sha256(f)
    elif len(blob) == 40:
        got = integrity.git_blob_sha1(f)
    else:
        return None  # not a content-named blob (another hub layout): nothing to compare with
    kind = "sha256" if len(blob) == 64 else "git sha1"
    return None if got == blob else f"{f} has {kind} {got[:16]}..., not its hub blob's name {blob[:16]}... (corrupted)"


def checkpoint_files(ckpt: Path, fix: str | None = None) -> list[Path]:
    """The weight files of a checkpoint directory, read through its manifest, never a glob:

    - a directory with integrity.json (what this package writes: runs/ models and checkpoints, generated ones):
      exactly the files it lists, each with its sha256; a missing, changed or extra file is an error naming it;
    - a hub-cache snapshot: every file checked against the content name of its blob (a flipped byte is an error);
    - any other directory (a published artifact, verified by published.json; a user's local copy): the shards of
      model.safetensors.index.json, else model.safetensors; another *.safetensors beside them is an error.
    The weights are the index's shards, else model.safetensors."""
    ckpt = Path(ckpt)
    try:
        listed = integrity.verify_dir(ckpt, fix or f"delete {ckpt} and rerun what wrote it")
    except integrity.IntegrityError as e:
        raise CheckpointError(str(e)) from e
    index = ckpt / "model.safetensors.index.json"
    if index.exists():
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (OSError, ValueError, KeyError, AttributeError) as e:
            raise CheckpointError(f"{index} is unreadable ({type(e).__name__}); {fix or default_fix(index)}") from e
        missing = [s for s in shards if not (ckpt / s).exists()]
        if missing:
            raise CheckpointError(f"{ckpt}: index names shards that are not there: {missing}")
    else:
        shards = ["model.safetensors"]
        if not (ckpt / shards[0]).exists():
            raise CheckpointError(f"{ckpt}: no model.safetensors (nor model.safetensors.index.json); "
                                  f"{fix or default_fix(ckpt / shards[0])}")  # fmt: skip
    extra = sorted(f.name for f in ckpt.glob("*.safetensors") if f.name not in shards)
    if extra:
        raise CheckpointError(
            f"{ckpt / extra[0]} is not a file of this checkpoint (neither model.safetensors nor a shard its index "
            "names); remove it: a checkpoint loads only the files it lists"
        )
    if listed is None and snapshot_commit(ckpt) is not None:
        hub = [ckpt / s for s in shards] + [f for f in ckpt.iterdir() if f.suffix in (".json", ".txt", ".jinja",
                                                                                        ".model")]  # fmt: skip
        for f in hub:
            why = _hub_blob_check(f)
            if why is not None:
                raise CheckpointError(f"{why}; {fix or default_fix(f)}")
    return [ckpt / s for s in shards]


def read_safetensors(f: Path, fix: str | None = None) -> dict[str, torch.Tensor]:
    """Every tensor of one safetensors file; a truncated or corrupt file is a CheckpointError naming
    the file and `fix` (default: `default_fix`)."""
    try:
        out = {}
        with safe_open(str(f), framework="pt") as fh:
            for k in fh.keys():
                out[k] = fh.get_tensor(k)
        return out
    except Exception as e:  # SafetensorError (truncated header/data), OSError
        why = " ".join(str(e).split())
        raise CheckpointError(
            f"{f} is truncated or unreadable ({type(e).__name__}: {why}); {fix or default_fix(f)}"
        ) from e


def read_state_dict(ckpt: Path, fix: str | None = None) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    for f in checkpoint_files(ckpt, fix):
        tensors.update(read_safetensors(f, fix))
    return tensors


def load_state(path: Path, fix: str, map_location=None) -> dict:
    """A training checkpoint's state (torch.save of tensors and plain types) loaded with weights_only=True: a pickle
    that would build any other object (and so could run code) is refused, as is a truncated file; one line naming
    the file and `fix`."""
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        # torch's message advises weights_only=False, i.e. running the pickle: relay only what it refused
        refused = [ln.strip() for ln in str(e).splitlines() if "GLOBAL" in ln or "global" in ln.split(":")[0]]
        if refused:
            raise CheckpointError(
                f"{path} was refused: it holds an object other than tensors and plain types, which loading would "
                f"run ({refused[0][:160]}); a training checkpoint never does, so it was replaced or tampered with; "
                f"{fix}"
            ) from e
        raise CheckpointError(f"{path} is truncated or unreadable (not a torch checkpoint); {fix}") from e
    except Exception as e:  # truncated zip, bad header: torch names neither the file nor a fix
        raise CheckpointError(
            f"{path} is truncated or unreadable ({type(e).__name__}: {' '.join(str(e).split())[:200]}); {fix}"
        ) from e


@contextlib.contextmanager
def _no_parameter_init():
    """Skip nn.Linear / nn.Embedding's random init while a model is built on the meta device, to be overwritten by
    a checkpoint: on meta, normal_ runs torch._refs, whose first use imports torch._dynamo (2.5 s per process)."""
    saved = {cls: cls.reset_parameters for cls in (torch.nn.Linear, torch.nn.Embedding)}
    for cls in saved:
        cls.reset_parameters = lambda self: None
    try:
        yield
    finally:
        for cls, fn in saved.items():
            cls.reset_parameters = fn


def load_backbone(
    name_or_path: str | os.PathLike,
    revision: str | None = None,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    fix: str | None = None,
) -> SDARModel:
    """fix: what an error about an unreadable weights file tells the user to do (callers that know
    how the checkpoint was made say it, e.g. the backbone training command)."""
    ckpt = resolve_checkpoint_dir(name_or_path, revision)
    cfg_path = ckpt / "config.json"
    if not cfg_path.exists():
        raise CheckpointError(f"{ckpt}: no config.json; {fix or default_fix(cfg_path)}")
    checkpoint_files(ckpt, fix)  # every file against its record (manifest, hub blob names) before config.json is read
    try:
        hub_cfg = json.loads(cfg_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{cfg_path} is unreadable ({e}); {fix or default_fix(cfg_path)}") from e
    cfg = config_from_hub_json(hub_cfg)
    tensors = read_state_dict(ckpt, fix)
    wmap = hub_weight_map(cfg)
    if "lm_head.weight" not in tensors and hub_cfg.get("tie_word_embeddings"):
        tensors["lm_head.weight"] = tensors.get("model.embed_tokens.weight")
    with torch.device("meta"), _no_parameter_init():
        model = SDARModel(cfg)
    expected = dict(model.state_dict())
    missing = [hub for ours, hub in wmap.items() if hub not in tensors or tensors[hub] is None]
    unexpected = sorted(k for k in tensors if k not in set(wmap.values()) and not k.startswith(FOREIGN_PREFIXES))
    wrong = [
        f"{hub}: checkpoint {tuple(tensors[hub].shape)} vs model {tuple(expected[ours].shape)}"
        for ours, hub in wmap.items()
        if hub in tensors and tensors[hub] is not None and tuple(tensors[hub].shape) != tuple(expected[ours].shape)
    ]
    if missing or unexpected or wrong:
        parts = []
        if missing:
            parts.append(f"missing tensors {missing[:8]}{' ...' if len(missing) > 8 else ''}")
        if unexpected:
            parts.append(f"unexpected tensors {unexpected[:8]}{' ...' if len(unexpected) > 8 else ''}")
        if wrong:
            parts.append(f"wrong shapes {wrong[:8]}")
        raise CheckpointError(f"{ckpt} does not match its config.json: " + "; ".join(parts))
    state = {ours: tensors[hub].to(dtype) for ours, hub in wmap.items()}
    model.load_state_dict(state, assign=True)
    return model.to(device=device, dtype=dtype).eval()


def save_backbone(model: SDARModel, out_dir: str | os.PathLike, extra_config: dict | None = None) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    wmap = hub_weight_map(model.config)
    sd = model.state_dict()
    tensors = {hub: sd[ours].detach().to("cpu").contiguous() for ours, hub in wmap.items()}
    with integrity.atomic_file(out / "model.safetensors") as tmp:  # unique temporary names: two writers never clash
        save_file(tensors, str(tmp), metadata={"format": "pt"})
    with integrity.atomic_file(out / "config.json") as tmp:  # a killed save leaves no half file
        tmp.write_text(json.dumps(config_to_hub_json(model.config, extra_config), indent=2))
    return out
