"""Profiles: configs/<name>.yaml loaded into one frozen dataclass tree.

    from mrp_repro.config import load_profile, list_profiles
    p = load_profile("tiny")                     # or a path: load_profile("my.yaml")
    p.mrp.num_layers, p.hash                     # 12-hex sha256 of the whole tree
    p.section_hash("model", "backbone_training") # cache key of one stage
    p2 = p.replace({"mrp_training.steps": 10})   # a validated copy

A YAML file may start with `extends: <profile>`; its sections are then merged
key by key over that profile's. The loaded tree is fully resolved, so the hash
never depends on how a profile was written. Every field is type-checked against
its annotation; unknown keys, missing keys and wrong types raise ConfigError
naming the field. Every number carries its allowed range (`_in`, field metadata) and is checked in one place,
`_check_ranges`: `backbone_training.steps: -5` is refused as `backbone_training.steps: -5 is out of range,
allowed >= 1`. Sizes, batches, steps and counts also carry an upper bound (what a value would need beyond it
exhausts any machine this package runs on: a hidden_size of 1e8 is OOM-killed with no message), and a scratch
backbone's parameter count is bounded (MAX_SCRATCH_PARAMS). This module does not import torch.

Reading a file is bounded too, since a profile may come from anywhere (`--profile some.yaml`): at most
MAX_PROFILE_BYTES, strict UTF-8, no YAML aliases (500 bytes of nested aliases expand to gigabytes), at most
MAX_DEPTH levels of nesting (a deep file overflowed the parser's recursion), and every error is one line that
shows a value only when it is short (`_got`, `_show`): never a line of a file that is not a profile (`--profile
/etc/shadow` names no field of it).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import os
import re
import shlex
import types
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, Union

import yaml

from mrp_repro.errors import UserError

__all__ = [
    "ConfigError",
    "Profile",
    "ModelConfig",
    "TokenizerConfig",
    "DataConfig",
    "BackboneTrainingConfig",
    "TrajectoriesConfig",
    "MRPConfig",
    "MRPTrainingConfig",
    "DecodingConfig",
    "EvaluationConfig",
    "PaperConfig",
    "PAPER_MODELS",
    "DEFAULT_PROFILE",
    "load_profile",
    "list_profiles",
    "configs_dir",
    "repo_root",
]


#: the profile of `make reproduce`, of the notebooks' parameters cell and of the CLIs when none is named: the stand-in
#: the README reports (issue 34). tests/test_notebooks.py holds the Makefile and the notebooks to it.
DEFAULT_PROFILE = "chain16"


class ConfigError(UserError, ValueError):
    """A profile that does not match the schema (a ValueError; a UserError, so CLIs print it as one line)."""


# ----------------------------------------------------------------------------- paths


def repo_root() -> Path:
    """The repository root: $MRP_REPRO_ROOT, else the directory above the package."""
    env = os.environ.get("MRP_REPRO_ROOT")
    if env:
        return Path(env).expanduser().resolve()
    return Path(__file__).resolve().parent.parent


def configs_dir() -> Path:
    return repo_root() / "configs"


# ----------------------------------------------------------------------------- ranges


@dataclass(frozen=True)
class Range:
    """The values a number may take: lo/hi bounds (None: unbounded), each closed unless *_open; always finite."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    def admits(self, v: float) -> bool:
        if not math.isfinite(v):  # nan and inf: a NaN lr or an infinite interval is never meant
            return False
        if self.lo is not None and (v <= self.lo if self.lo_open else v < self.lo):
            return False
        return not (self.hi is not None and (v >= self.hi if self.hi_open else v > self.hi))

    def __str__(self) -> str:
        lo, hi = (f"{x:g}" if isinstance(x, float) else x for x in (self.lo, self.hi))
        if self.lo is not None and self.hi is not None:
            return f"in {'(' if self.lo_open else '['}{lo}, {hi}{')' if self.hi_open else ']'}"
        if self.lo is not None:
            return f"{'>' if self.lo_open else '>='} {lo}"
        if self.hi is not None:
            return f"{'<' if self.hi_open else '<='} {hi}"
        return "finite"


def _in(lo=None, hi=None, *, lo_open=False, hi_open=False, default: Any = dataclasses.MISSING) -> Any:
    """A dataclass field whose value (each item of a list; null passes) must lie in the range; see _check_ranges."""
    return field(default=default, metadata={"range": Range(lo, hi, lo_open, hi_open)})


SEED_MAX = 2**32 - 1  # numpy's seed range
# Upper bounds of sizes, batches, steps and counts: each far above every shipped profile (SDAR-8B: hidden 4096, 36
# layers, vocabulary 151,936, sequences of 4096; tiny: 200,000 training examples, 62,250 head steps at most), and
# below what would exhaust a machine before the first step (an embedding of 1e8 rows, a batch of 1e8 sequences).
MAX_WIDTH = 1 << 15  # hidden_size (intermediate_size: 4x)
MAX_VOCAB = 1 << 21
MAX_LAYERS = 512
MAX_HEADS = 1024
MAX_HEAD_DIM = 1024
MAX_LENGTH = 1 << 20  # sequence lengths, positions, new tokens
MAX_BLOCK = 1024  # block sizes, lookaheads, chain steps
MAX_BATCH = 1 << 16
MAX_STEPS = 10**8
MAX_EPOCHS = 10**4
MAX_EXAMPLES = 10**8  # prompts, training examples, shard rows
MAX_BOOTSTRAP = 10**6
MAX_THREADS = 4096
MAX_SCRATCH_PARAMS = 2 * 10**10  # a scratch backbone trained here (SDAR-8B has 8e9)
# Reading a profile file.
MAX_PROFILE_BYTES = 1 << 20  # the shipped ones are under 4 kB
MAX_DEPTH = 32  # nesting levels of a profile's YAML (a profile has 3)
_SHOWN = 40  # characters of a value an error message shows at most


# ----------------------------------------------------------------------------- schema

TaskSource = Literal["gt", "gt-multi", "self"]
RemaskRule = Literal["tau", "delta", "loo", "sequential", "logp-delta"]
Algorithm = Literal["ours", "upstream"]
DraftLogits = Literal["none", "sum"]
VerifyPath = Literal["exact", "fold", "loop", "packed", "checked"]  # = model.VERIFY_PATHS (tests/test_verify.py)
KernelNumerics = Literal["default", "batch_invariant"]  # = kernels.batch_invariant.KERNEL_NUMERICS (tested)


@dataclass(frozen=True)
class ModelConfig:
    source: Literal["scratch", "hub", "local"]
    dtype: Literal["auto", "float32", "bfloat16"]
    hub_id: str | None = None  # e.g. JetLM/SDAR-1.7B-Chat
    revision: str | None = None  # hub revision; pin a commit sha when known
    local_dir: str | None = None  # a directory with config.json + *.safetensors
    # Architecture. For hub/local sources null means "read from config.json".
    vocab_size: int | None = _in(2, MAX_VOCAB, default=None)  # scratch: null = the tiny tokenizer's size
    hidden_size: int | None = _in(1, MAX_WIDTH, default=None)
    intermediate_size: int | None = _in(1, 4 * MAX_WIDTH, default=None)
    num_layers: int | None = _in(1, MAX_LAYERS, default=None)
    num_heads: int | None = _in(1, MAX_HEADS, default=None)
    num_kv_heads: int | None = _in(1, MAX_HEADS, default=None)
    head_dim: int | None = _in(2, MAX_HEAD_DIM, default=None)  # even: rotary embeddings rotate its two halves
    rope_theta: float | None = _in(0, lo_open=True, default=None)
    rms_norm_eps: float | None = _in(0, lo_open=True, default=None)
    max_position_embeddings: int | None = _in(1, MAX_LENGTH, default=None)


@dataclass(frozen=True)
class TokenizerConfig:
    kind: Literal["tiny", "hub"]
    hub_id: str | None = None  # null: the model's hub_id / local_dir


@dataclass(frozen=True)
class DataConfig:
    tasks: tuple[str, ...]
    n_train: int = _in(1, MAX_EXAMPLES)
    n_eval: int | None = _in(1, MAX_EXAMPLES)  # null: the whole split
    seed: int = _in(0, SEED_MAX)
    data_dir: str | None = None  # null -> $MRP_REPRO_DATA -> datasets / hub


@dataclass(frozen=True)
class BackboneTrainingConfig:
    """Only used (and range-checked) when model.source == "scratch"."""

    steps: int = _in(1, MAX_STEPS)
    batch_size: int = _in(1, MAX_BATCH)
    seq_len: int = _in(2, MAX_LENGTH)  # next-token targets need two positions
    lr: float = _in(0, lo_open=True)
    warmup_steps: int = _in(0, MAX_STEPS)
    min_lr_ratio: float = _in(0, 1)
    weight_decay: float = _in(0)
    ckpt_every: int = _in(1, MAX_STEPS)
    num_threads: int | None = _in(1, MAX_THREADS, default=None)  # null: torch's default
    # block sizes of the training steps, in turn (SDAR: trained with 4, evaluated with 16); empty: block_size
    block_sizes: tuple[int, ...] = _in(1, MAX_BLOCK, default=())
    # a second phase after `steps` (a warm restart): a fresh AdamW whose rate warms up over warmup_steps to
    # restart_lr (lr when null) and falls by cosine to min_lr_ratio of it at restart_steps more steps; 0: none
    restart_steps: int = _in(0, MAX_STEPS, default=0)
    restart_lr: float | None = _in(0, lo_open=True, default=None)


@dataclass(frozen=True)
class TrajectoriesConfig:
    sources: tuple[TaskSource, ...]
    n_prompts: int = _in(1, MAX_EXAMPLES)
    shard_size: int = _in(1, MAX_EXAMPLES)
    chain_steps: int = _in(1, MAX_BLOCK)  # reveals recorded per block state (K-step heads train on up to this many)


@dataclass(frozen=True)
class MRPConfig:
    num_layers: int = _in(1, MAX_LAYERS)
    objective: Literal["residual", "direct"]
    k_steps: int = _in(1, MAX_BLOCK)
    init: Literal["normal", "structured", "zero-out"]
    init_std: float = _in(0)
    train_source: TaskSource | tuple[TaskSource, ...]  # one source, or a mix of several
    pretrained: str | None = None  # hub id of a released head (heavyball/sdar-*-mrp-3lyr)


@dataclass(frozen=True)
class MRPTrainingConfig:
    steps: int = _in(1, MAX_STEPS)  # optimiser steps (online with `epochs` set: replaced by the epoch's step count)
    # the global batch: offline trajectory rows, online packed sequences per optimiser step
    batch_size: int = _in(1, MAX_BATCH)
    lr: float = _in(0, lo_open=True)
    warmup_frac: float = _in(0, 1, hi_open=True)
    min_lr_ratio: float = _in(0, 1)
    ckpt_every: int = _in(1, MAX_STEPS)
    heldout_frac: float = _in(0, 1, hi_open=True)
    # Which trainer: `offline` (training/mrp.py: collected trajectories) or `online` (training/online.py: the
    # paper's recipe, noising packed chat SFT sequences and running the frozen backbone inside each step).
    # The keys below have defaults (= the paper's sizes) and are read by the online recipe only.
    recipe: Literal["offline", "online"] = "offline"
    seq_len: int = _in(1, MAX_LENGTH, default=4096)  # packed sequence length (a multiple of block_size); paper 4096
    # sequences per forward; batch_size / micro_batch_size accumulation steps
    micro_batch_size: int = _in(1, MAX_BATCH, default=1)
    grad_checkpointing: bool = False  # recompute the head's layers in backward (pays at seq 4096, 3 layers)
    # set: steps = ceil(epochs * packed train sequences / batch_size)
    epochs: float | None = _in(0, MAX_EPOCHS, lo_open=True, default=None)
    # Chat SFT data: a hub dataset id (upstream JunxiongWang/sftdatasetv3), a local directory of
    # *.jsonl / *.parquet files, or `gsm8k` (the GSM8K train split); see tasks/sft.py for the fields.
    sft_source: str = "JunxiongWang/sftdatasetv3"
    sft_split: str = "train"
    max_samples: int | None = _in(1, default=None)  # null: every sample of the source
    # Ours (issue 14, offline recipe only): + weight * cross-entropy of the backbone's own next pick over the
    # block's masked slots, scored by their log-confidence under A + C (training/mrp.py mrp_loss):
    # what decides whether a speculative draft is accepted. 0: the paper's plain KL.
    pick_loss_weight: float = _in(0, default=0.0)
    # With mrp.pretrained set, nothing is trained: notebook 04 shows the released head and measures its held-out
    # KL (stages.released_heldout). True also trains a head of ours with this recipe beside it (stages.train_head;
    # on an SDAR profile that is the paper's full online run). Not part of the head's cache key (stages.head_dir).
    beside_pretrained: bool = False


@dataclass(frozen=True)
class DecodingConfig:
    max_new_tokens: int = _in(1, MAX_LENGTH)
    batch_size: int = _in(1, MAX_BATCH)
    thresholds: tuple[float, ...] = _in(0, 1, lo_open=True, hi_open=True)
    lookahead_k: tuple[int, ...] = _in(1, MAX_BLOCK)
    speculative_k: tuple[int, ...] = _in(1, MAX_BLOCK)
    remask_rules: tuple[RemaskRule, ...]
    remask_delta: float = _in(0)
    remask_logp_delta: float = _in(0)
    # The decoding families a run decodes (runs column `algorithm`), for the modes both have (static,
    # speculative): `ours` (decoding.engine / mrp_modes: the head sees the earlier blocks as it was trained, the
    # verify skipped when nothing is left to check, per-row accounting) and `upstream` (decoding.upstream: the
    # released code's round, layout, length and per-batch counters, which the paper's numbers come from; see
    # docs/upstream.md). Our static(1) always runs (the reference of our modes); modes only we have (direct,
    # naive) decode with ours; dynamic and remask run ours always and, with upstream here, theirs beside it
    # (decoding.upstream_remask, docs/upstream-remask.md). tiny: both, side by side; the SDAR profiles: upstream.
    algorithms: tuple[Algorithm, ...]
    # Upstream speculative's draft logits (their mrp_logit_mix_mode): `none` = lm_head(h_C) alone, the head chained
    # on its own h_C (their published speculative sweep); `sum` = A + s*C accumulated in logit space (their
    # logits_sum), s = upstream_sum_scale (1.0; their -k2 sweeps: 2.0, a scale that only `sum` reads).
    upstream_draft_logits: DraftLogits
    upstream_sum_scale: float = _in(0, lo_open=True)
    # Ours (issue 14): write a finished block into the KV cache inside the next block's first forward, one
    # forward less per block in every mode, static included (RowStats.fused_commits; upstream commits apart).
    fuse_commit: bool = False
    # torch.compile the backbone's and head's forwards (model.compile_model; CUDA graphs on CUDA); the first
    # generate compiles (~1 min on CPU). Tokens equal eager (tests/test_compiled.py).
    compile: bool = False
    # Attention reads the whole preallocated KV cache (unused slots masked: model.KVCache(static=True)), so each
    # call kind keeps one shape over a generation and CUDA graphs record it once; decodes as the growing cache
    # does, speculative token-identical to static (tests/test_static_cache.py). Costs attention over empty slots.
    static_cache: bool = False
    # The released code's residual remasking (decoding.upstream_remask.UpstreamRemask, the upstream family): its
    # veto thresholds delta (|C[p, token]| > delta), each at every remasking tau, beside UpstreamDynamic(tau), its
    # baseline. Their default delta is 1.0, their published sweep {0.5, 1, 2, 4} (SDAR-4B / 8B runs: 2.0).
    upstream_remask_deltas: tuple[float, ...] = _in(0, lo_open=True, default=(0.5, 1.0, 2.0, 4.0))
    # How a speculative verify scores its candidates (both families; model.VERIFY_PATHS). `exact`: `fold` on CPU (the
    # candidates folded into the batch: one backbone call, bitwise forward_block's), `checked` elsewhere (fold
    # wherever a first call per shape shows it bitwise, else `loop`: one forward_block per candidate); `packed`:
    # one call, other rounding (not lossless in bf16). measure.cost counts the calls (verify_passes).
    verify: VerifyPath = "exact"
    # The kernels every decode runs with (Backbone.generate, both families, static and speculative alike; issue 36,
    # docs/gpu.md). `default`: torch's (cuBLAS, flash / efficient attention), whose reductions may split by the
    # batch's rows, so off CPU verify `exact` checks fold against loop per kernel plan (`checked`: up to one call per
    # candidate). `batch_invariant` (kernels.batch_invariant): every reduction of the forward in an order independent
    # of the rows (Triton on CUDA; elsewhere the in-order PyTorch reference, slow by design: toy widths only), so
    # verify `exact` is one folded call on any device, lossless by construction; it rounds apart from `default`.
    kernel_numerics: KernelNumerics = "default"
    # The dynamic-τ frontier, the control of record of direct mode and remasking (report.pareto, issue 35): the τ at
    # which dynamic(τ) is decoded beside static(1) in the controls grid (report.grids.control_settings), on top of
    # `thresholds` (decoded in the modes grid already). The default samples every 0.05 in 0.05-0.95; then, where the
    # frontier still jumps by more than frontier_max_gap accuracy points between two sampled τ, the midpoint τ is
    # decoded (report.grids.refine_frontier: up to frontier_refine_rounds rounds, never closer than frontier_min_step
    # to a decoded τ), and a comparison whose segment still spans more is refused (pareto.frontier_gap). Kept out of
    # the modes grid, so adding it left that grid's cached spec valid.
    frontier_thresholds: tuple[float, ...] = _in(
        0, 1, lo_open=True, hi_open=True, default=tuple(round(0.05 * i, 2) for i in range(1, 20)))
    frontier_max_gap: float = _in(0, lo_open=True, default=10.0)
    frontier_min_step: float = _in(0, 1, lo_open=True, default=0.01)
    frontier_refine_rounds: int = _in(0, 16, default=4)
    # S2D2-style self-speculation, a peer (issue 37, decoding.peers_s2d2): the confidence thresholds τ it decodes at
    # (a step that does not verify reveals as dynamic(τ)), in the peers grid, where the backbone has an autoregressive
    # mode to verify with (trained with block-size-1 steps: the SDAR profiles; S2D2's SDAR runs: 0.85). Empty: not
    # decoded (chain16, tiny: never trained at block 1, a poor AR mode: scripts/ar_mode_probe.py).
    s2d2_thresholds: tuple[float, ...] = _in(0, 1, lo_open=True, hi_open=True, default=())


@dataclass(frozen=True)
class EvaluationConfig:
    n_prompts: int | None = _in(1, MAX_EXAMPLES)  # null: every prompt of each benchmark
    bootstrap_samples: int = _in(1, MAX_BOOTSTRAP)
    ci: float = _in(0, 1, lo_open=True, hi_open=True)
    benchmarks: tuple[str, ...]
    # Torch threads for decoding/evaluation on CPU (null: torch's default). Tiny models decode faster
    # on one thread: the ops are too small to split, and a second busy process makes OpenMP spin.
    num_threads: int | None = _in(1, MAX_THREADS, default=None)


#: the models the paper reports, as its tables write them
PAPER_MODELS = ("SDAR-1.7B", "SDAR-4B", "SDAR-8B")
PaperModel = Literal["SDAR-1.7B", "SDAR-4B", "SDAR-8B"]


@dataclass(frozen=True)
class PaperConfig:
    """Which paper model a run stands for: every table, figure and claim of the run compares with this model's
    rows of the paper (a table the paper does not report for it is left blank), never with another model's.
    Declared, not inferred from the profile's name: a profile that `extends: sdar-4b` inherits SDAR-4B."""

    model: PaperModel
    # True only where our numbers are the same experiment as the paper's (the real SDAR backbone, the paper's
    # benchmarks): the claims then compare values within a tolerance; else they check directions only.
    comparable: bool


SECTIONS: dict[str, type] = {
    "model": ModelConfig,
    "tokenizer": TokenizerConfig,
    "data": DataConfig,
    "backbone_training": BackboneTrainingConfig,
    "trajectories": TrajectoriesConfig,
    "mrp": MRPConfig,
    "mrp_training": MRPTrainingConfig,
    "decoding": DecodingConfig,
    "evaluation": EvaluationConfig,
    "paper": PaperConfig,
}


@dataclass(frozen=True)
class Profile:
    name: str
    seed: int = _in(0, SEED_MAX)
    block_size: int = _in(1, MAX_BLOCK)
    model: ModelConfig
    tokenizer: TokenizerConfig
    data: DataConfig
    backbone_training: BackboneTrainingConfig
    trajectories: TrajectoriesConfig
    mrp: MRPConfig
    mrp_training: MRPTrainingConfig
    decoding: DecodingConfig
    evaluation: EvaluationConfig
    paper: PaperConfig
    description: str = ""

    @property
    def cli_arg(self) -> str:
        """The profile as the user gave it to load_profile (a name or a path), shell-quoted: what printed advice
        passes to --profile (`--profile <name>` for a profile read from my.yaml fails as an unknown profile)."""
        return shlex.quote(self.__dict__.get("_given") or self.name)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (tuples become lists)."""
        return _to_plain(dataclasses.asdict(self))

    @property
    def hash(self) -> str:
        """First 12 hex chars of sha256 over the canonical JSON of the whole tree."""
        return _digest(self.to_dict())

    def section_hash(self, *sections: str, exclude: tuple[str, ...] = ()) -> str:
        """Hash of only `sections` (plus block_size and seed): a stage's cache key. `exclude`: dotted keys left
        out (settings that say whether a stage runs, not what it makes, so adding one keeps existing keys)."""
        d = self.to_dict()
        unknown = [s for s in sections if s not in SECTIONS]
        if unknown:
            raise ConfigError(f"unknown section(s) {unknown}; valid: {sorted(SECTIONS)}")
        sub = {"block_size": d["block_size"], "seed": d["seed"]}
        sub.update({s: d[s] for s in sorted(set(sections))})
        for key in exclude:
            section, _, name = key.partition(".")
            if section in sub:
                sub[section].pop(name)
        return _digest(sub)

    def replace(self, overrides: dict[str, Any]) -> Profile:
        """A validated copy with dotted-key overrides, e.g. {"mrp.num_layers": 2}."""
        raw = self.to_dict()
        _apply_overrides(raw, overrides)
        out = _build_profile(raw, source=f"{self.name} (with overrides)")
        return _given(out, self.__dict__.get("_given")) if out.name == self.name else out


# ----------------------------------------------------------------------------- helpers


def _to_plain(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_to_plain(v) for v in obj]
    return obj


def _digest(obj: Any) -> str:
    canon = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(canon.encode()).hexdigest()[:12]


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        inner = " | ".join(_type_name(a) for a in args)
        return f"{inner} | null" if len(args) < len(typing.get_args(tp)) else inner
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (tuple, list):
        return f"list[{_type_name(typing.get_args(tp)[0])}]"
    return getattr(tp, "__name__", str(tp))


def _got(value: Any) -> str:
    """`<type> <value>` for an error message: the value itself only when it is short (_SHOWN characters), else its
    size, so no message carries an unbounded value or a file's line."""
    kind = "null" if value is None else type(value).__name__
    if isinstance(value, (dict, list, tuple)):
        return f"{kind} of {len(value)} {'keys' if isinstance(value, dict) else 'items'}" + (
            f" {_show(value)}" if len(repr(value)) <= _SHOWN else "")
    return f"{kind} {_show(value)}"


def _show(value: Any) -> str:
    """repr(value) when it is at most _SHOWN characters on one line, else `<N characters>`: error messages never
    echo an unbounded value (a 1 GB string, a file's line)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**_SHOWN:
        return f"<an int of {value.bit_length()} bits>"  # str() of a 5000-digit int raises
    text = repr(value)
    if len(text) <= _SHOWN and "\n" not in text:
        return text
    n = len(value) if isinstance(value, (str, bytes, list, tuple, dict)) else len(text)
    return f"<{type(value).__name__} of {n} {'characters' if isinstance(value, str) else 'items'}>"


def _is_name(key: Any) -> bool:
    """A key an error may name: a short identifier (any other key is described, not shown)."""
    return isinstance(key, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]{0,39}", key) is not None


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Check `value` against annotation `tp`; return the canonical value (lists -> tuples)."""
    origin = typing.get_origin(tp)
    err = ConfigError(f"{where}: expected {_type_name(tp)}, got {_got(value)}")
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None:
            if type(None) in args:
                return None
            raise err
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a, where)
            except ConfigError:
                continue
        raise err
    if origin is Literal:
        if value in typing.get_args(tp) and isinstance(value, str):
            return value
        raise err
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise err
        (item_tp, *_rest) = typing.get_args(tp)
        return tuple(_coerce(v, item_tp, f"{where}[{i}]") for i, v in enumerate(value))
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise err
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise err
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise err
    if tp is str:
        if isinstance(value, str):
            return value
        raise err
    raise TypeError(f"{where}: unsupported annotation {tp!r}")  # a schema bug, not a user error


def _build_dataclass(cls: type, raw: Any, where: str) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping, got {_got(raw)}")
    hints = typing.get_type_hints(cls)
    valid = [f.name for f in fields(cls)]
    if cls is Profile and raw and not any(k in hints for k in raw):  # not a profile: name none of its keys
        raise ConfigError(f"not a profile: none of its {len(raw)} top-level keys is a profile key ({', '.join(valid)});"
                          " pass a shipped profile's name or a YAML file written like configs/tiny.yaml")  # fmt: skip
    for key in raw:
        if key not in hints:
            shown = repr(key) if _is_name(key) else (  # a line of a file that is no profile: never shown
                f"<a {type(key).__name__} of {len(str(key)) if isinstance(key, str) else 'some'} characters that is "
                "not a setting name>")  # fmt: skip
            raise ConfigError(f"unknown key {shown} in section {where!r}; valid keys: {', '.join(valid)}")
    kwargs = {}
    for f in fields(cls):
        path = f"{where}.{f.name}" if where != "<top>" else f.name
        if f.name not in raw:
            if f.default is dataclasses.MISSING:
                raise ConfigError(f"missing key {f.name!r} in section {where!r}")
            continue
        if f.name in SECTIONS and cls is Profile:
            kwargs[f.name] = _build_dataclass(SECTIONS[f.name], raw[f.name], f.name)
        else:
            kwargs[f.name] = _coerce(raw[f.name], hints[f.name], path)
    return cls(**kwargs)


#: a profile's name is one directory under the runs root: one path component, never `.`/`..`, no leading dot
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def _range_failures(obj: Any, where: str) -> list[str]:
    """`key: value is out of range, allowed <range>` for every field of `obj` outside its declared range."""
    out = []
    for f in fields(obj):
        rng, value = f.metadata.get("range"), getattr(obj, f.name)
        key = f"{where}.{f.name}" if where else f.name
        if rng is None or value is None:
            continue
        items = value if isinstance(value, tuple) else (value,)
        bad = [v for v in items if not rng.admits(v)]
        if bad:
            many = isinstance(value, tuple)
            shown = f"{_show(list(value))} (item {_show(bad[0])})" if many else _show(value)
            out.append(f"{key}: {shown} is out of range, allowed {'each ' if many else ''}{rng}")
    return out


def _check_ranges(p: Profile) -> None:
    """The one place numbers are range-checked (declared with `_in` on each field); the first failure is raised."""
    failures = _range_failures(p, "")
    for section in SECTIONS:
        if section == "backbone_training" and p.model.source != "scratch":
            continue  # unused for a loaded backbone (the SDAR profiles write steps: 0 there)
        failures += _range_failures(getattr(p, section), section)
    if failures:
        raise ConfigError(f"profile {_show(p.name)}: {failures[0]}")


def _check_values(p: Profile) -> None:
    """Range checks, then cross-field checks the annotations cannot express."""

    def need(cond: bool, msg: str) -> None:
        if not cond:
            raise ConfigError(f"profile {_show(p.name)}: {msg}")

    need(NAME_RE.fullmatch(p.name) is not None and p.name not in (".", ".."),
         f"name {_show(p.name)} must be one path component: a letter or digit, then up to 99 of "
         "[A-Za-z0-9._-]")  # fmt: skip
    _check_ranges(p)
    m = p.model
    if m.source == "hub":
        need(bool(m.hub_id), "model.source 'hub' needs model.hub_id")
    if m.source == "local":
        need(bool(m.local_dir), "model.source 'local' needs model.local_dir")
    if m.source == "scratch":
        for k in (
            "hidden_size",
            "intermediate_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "rope_theta",
            "rms_norm_eps",
        ):
            need(getattr(m, k) is not None, f"model.source 'scratch' needs model.{k}")
        need(m.num_heads % m.num_kv_heads == 0, "model.num_heads must be a multiple of model.num_kv_heads")
        need(m.head_dim % 2 == 0, f"model.head_dim ({m.head_dim}) must be even: rotary embeddings rotate its halves")
        need(p.tokenizer.kind == "tiny", "a scratch model uses tokenizer.kind 'tiny'")
        n = _scratch_params(m)
        need(n <= MAX_SCRATCH_PARAMS,
             f"a scratch backbone of these model sizes has about {n:.2g} parameters, above the bound "
             f"{MAX_SCRATCH_PARAMS:.0e} (SDAR-8B has 8e9): reduce model.hidden_size, intermediate_size, num_layers "
             "or vocab_size")  # fmt: skip
        bad = [b for b in p.backbone_training.block_sizes if p.block_size % b]
        need(not bad, f"backbone_training.block_sizes {_show(bad)} must divide block_size ({p.block_size}): training "
                      "sequences are laid out in whole blocks of block_size")  # fmt: skip
        bt = p.backbone_training
        need(bt.restart_lr is None or bt.restart_steps > 0,
             "backbone_training.restart_lr is set but restart_steps is 0: no restart reads it (set restart_steps, "
             "or remove restart_lr)")  # fmt: skip
    train = (p.mrp.train_source,) if isinstance(p.mrp.train_source, str) else p.mrp.train_source
    need(set(train) <= set(p.trajectories.sources), "mrp.train_source must be among trajectories.sources")
    need(  # the online recipe draws its own chains of any length
        p.mrp_training.recipe == "online" or 1 <= p.mrp.k_steps <= p.trajectories.chain_steps,
        f"mrp.k_steps ({p.mrp.k_steps}) needs trajectories.chain_steps >= k_steps ({p.trajectories.chain_steps})",
    )
    tc = p.mrp_training
    need(
        tc.batch_size % tc.micro_batch_size == 0,
        f"mrp_training.batch_size ({tc.batch_size}) must be a multiple of micro_batch_size ({tc.micro_batch_size})",
    )
    need(
        tc.seq_len % p.block_size == 0,
        f"mrp_training.seq_len ({tc.seq_len}) must be a positive multiple of block_size ({p.block_size})",
    )
    d = p.decoding
    need(len(d.algorithms) >= 1 and len(set(d.algorithms)) == len(d.algorithms),
         f"decoding.algorithms must list ours and/or upstream once each, got {_show(list(d.algorithms))}")  # fmt: skip
    need(d.upstream_draft_logits == "sum" or d.upstream_sum_scale == 1.0,
         f"decoding.upstream_sum_scale ({d.upstream_sum_scale}) scales only upstream_draft_logits: sum; "
         "set it to 1.0 or choose sum")  # fmt: skip
    need(
        p.decoding.max_new_tokens % p.block_size == 0,
        "decoding.max_new_tokens must be a multiple of block_size",
    )


def _scratch_params(m: ModelConfig) -> int:
    """The parameter count of a scratch backbone of these sizes (embeddings and lm_head, attention, SwiGLU MLP;
    norms left out): what _check_values bounds, before a model too big to build is allocated."""
    vocab = m.vocab_size or 0  # null: the tiny tokenizer's ~100 ids
    attn = 2 * m.hidden_size * m.num_heads * m.head_dim + 2 * m.hidden_size * m.num_kv_heads * m.head_dim
    return 2 * vocab * m.hidden_size + m.num_layers * (attn + 3 * m.hidden_size * m.intermediate_size)


def _build_profile(raw: Any, source: str) -> Profile:
    try:
        profile = _build_dataclass(Profile, raw, "<top>")
        _check_values(profile)
    except ConfigError as e:  # the file (or "<name> (with overrides)") first: which profile to fix
        raise ConfigError(f"{source}: {e}") from None
    return profile


def _apply_overrides(raw: dict, overrides: dict[str, Any]) -> None:
    for dotted, value in overrides.items():
        parts = dotted.split(".")
        if len(parts) == 1:
            section, leaf, cls, node = "<top>", parts[0], Profile, raw
        elif len(parts) == 2 and parts[0] in SECTIONS:
            section, leaf, cls = parts[0], parts[1], SECTIONS[parts[0]]
            node = raw.setdefault(section, {})
        else:
            raise ConfigError(f"override {dotted!r}: expected 'key' or 'section.key'; sections: {sorted(SECTIONS)}")
        valid = [f.name for f in fields(cls)]
        if leaf not in valid or (cls is Profile and leaf in SECTIONS):
            raise ConfigError(
                f"override {dotted!r}: unknown key {leaf!r} in section {section!r}; valid keys: {', '.join(valid)}"
            )
        node[leaf] = value


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


# YAML 1.1 (PyYAML) reads "2e-3" as a string; accept YAML 1.2 floats so lr: 2e-3 is a float.
class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 floats, no aliases and bounded nesting. An alias (`*a`) is refused where it is
    read: a profile never needs one (`extends:` shares settings), and nested aliases ("billion laughs") expand 500
    bytes into gigabytes. Nesting deeper than MAX_DEPTH is refused before the composer's recursion overflows."""

    _depth = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError(
                None, None, "a YAML alias (*name) is not accepted in a profile: write the value out, or share "
                "settings with `extends: <profile>`", self.peek_event().start_mark)  # fmt: skip
        if self._depth >= MAX_DEPTH:
            raise yaml.composer.ComposerError(
                None, None, f"nested deeper than {MAX_DEPTH} levels (a profile has 3: section, key, list)",
                self.peek_event().start_mark)  # fmt: skip
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


_Loader.yaml_implicit_resolvers = {k: list(v) for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def _read_text(path: Path) -> str:
    """The file's text: at most MAX_PROFILE_BYTES, strict UTF-8 (a BOM is dropped); else one ConfigError line
    naming the file, the bound or the first bad byte's offset, never the bytes around it."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_PROFILE_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"{path}: cannot be read ({e.strerror or type(e).__name__}); check the path and its "
                          "permissions") from None  # fmt: skip
    if len(data) > MAX_PROFILE_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_PROFILE_BYTES} bytes, the bound on a profile file (the shipped "
                          "ones are under 4 kB); is it a profile?")  # fmt: skip
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start} is 0x{data[e.start]:02x}); save the profile as "
                          "UTF-8") from None  # fmt: skip


def _read_yaml(path: Path, chain: tuple[Path, ...] = ()) -> dict:
    if path in chain:
        raise ConfigError(f"circular 'extends': {' -> '.join(str(p) for p in (*chain, path))}")
    text = _read_text(path)
    try:
        raw = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as e:  # one line: where, and what the parser expected (not its 50-line traceback)
        mark = getattr(e, "problem_mark", None)
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        what = " ".join(str(getattr(e, "problem", None) or e).split())
        what = what if len(what) <= 160 else what[:160] + "..."
        raise ConfigError(f"{path}: not valid YAML at {at}{what}; fix the file there") from None
    except (ValueError, OverflowError, RecursionError) as e:  # a 5000-digit int, a 13th month: the constructors'
        raise ConfigError(f"{path}: a value cannot be read ({type(e).__name__}: "
                          f"{' '.join(str(e).split(';')[0].split())[:120]}); fix the file") from None  # fmt: skip
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {_got(raw)}")
    parent = raw.pop("extends", None)
    if parent is None:
        return raw
    if not isinstance(parent, str):
        raise ConfigError(f"{path}: extends: expected a profile name, got {_got(parent)}")
    if "name" not in raw:
        raise ConfigError(f"{path}: a profile that extends {_show(parent)} must set its own 'name'")
    try:
        parent_path = _resolve(parent, relative_to=path.parent)
    except ConfigError as e:  # which file's `extends` to fix
        raise ConfigError(f"{path}: extends: {e}") from None
    return _merge(_read_yaml(parent_path, (*chain, path)), raw)


def _resolve(name_or_path: str, relative_to: Path | None = None) -> Path:
    try:
        return _resolve_path(name_or_path, relative_to)
    except OSError as e:  # a name too long for the file system, a loop of links: not a profile either way
        raise ConfigError(f"profile {_show(name_or_path)} cannot be opened ({e.strerror or type(e).__name__}); pass "
                          "a shipped profile's name or the path of a YAML file") from None  # fmt: skip


def _resolve_path(name_or_path: str, relative_to: Path | None = None) -> Path:
    p = Path(name_or_path).expanduser()
    if p.suffix in (".yaml", ".yml") or os.sep in name_or_path:
        if not p.is_absolute() and relative_to is not None and not p.exists():
            p = relative_to / p
        if not p.is_file():
            raise ConfigError(f"profile file not found: {_show(str(p)) if len(str(p)) > 200 else p}")
        return p.resolve()
    for d in ([relative_to] if relative_to is not None else []) + [configs_dir()]:
        cand = d / f"{name_or_path}.yaml"
        if cand.is_file():
            return cand.resolve()
    raise ConfigError(f"unknown profile {_show(name_or_path)}; valid profiles: {', '.join(list_profiles())}")


# ----------------------------------------------------------------------------- API


def list_profiles() -> list[str]:
    """Names of the shipped profiles (configs/*.yaml), sorted."""
    return sorted(p.stem for p in configs_dir().glob("*.yaml"))


def load_profile(name_or_path: str, overrides: dict[str, Any] | None = None) -> Profile:
    """Load configs/<name>.yaml, or a YAML file path, into a validated frozen Profile.

    `overrides` maps dotted keys to values ({"mrp_training.steps": 10}); they are
    checked like the file itself.
    """
    if isinstance(name_or_path, Profile):
        return name_or_path.replace(overrides) if overrides else name_or_path
    path = _resolve(str(name_or_path))
    raw = _read_yaml(path)
    if path.parent == configs_dir().resolve() and raw.get("name") != path.stem:
        raise ConfigError(f"{path}: name {_show(raw.get('name'))} must equal the file name {path.stem!r}")
    if overrides:
        _apply_overrides(raw, overrides)
    return _given(_build_profile(raw, source=str(path)), str(name_or_path))


def _given(profile: Profile, arg: str | None) -> Profile:
    """Remember the load_profile argument (Profile.cli_arg); not a field: the hash and equality ignore it."""
    if arg:
        object.__setattr__(profile, "_given", arg)
    return profile
