"""The MRP head (METHOD.md §2): predicts the change of a block's logits after a reveal.

    head = MRPHead(backbone.config, num_layers=1, objective="residual")
    h_C = head(h_A, ids_after, positions, backbone.embed_tokens, cache)      # (B, L, H)
    h_B_hat = head.corrected(h_A, h_C)                                       # h_A + h_C
    logits_B_hat = backbone.lm_head(h_B_hat)                                 # = A + C

Layout (DeepSeek-MTP, names as in the released `mrp_modules.0.model.*`):
x = eh_proj([enorm(embed(ids_after)) ; hnorm(h_A)]), then N backbone decoder layers
(bidirectional inside the block, earlier blocks through the head's own KV cache,
written by `commit` from a finished block's clean tokens and backbone hidden states),
then a final RMSNorm. embed and lm_head belong to the frozen backbone and are passed
in, never copied. Because lm_head has no bias, A + C = lm_head(h_A + h_C).

K-step chaining feeds the accumulated state back: h_k = h_{k-1} + h_C(k) for the
residual objective (h_0 = h_A), so step k sees h_A + sum of the earlier residuals.
The `direct` ablation predicts h_B itself: h_k = h_C(k).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
import torch.nn as nn
from safetensors.torch import save_file

from mrp_repro.checkpoint import CheckpointError, read_safetensors
from mrp_repro.errors import UserError
from mrp_repro.integrity import atomic_file
from mrp_repro.model import (
    DecoderLayer,
    KVCache,
    ModelConfig,
    NumericsAware,
    RMSNorm,
    attention_mask,
    block_causal_mask,
    rope_cos_sin,
)

OBJECTIVES = ("residual", "direct")


class HeadNotFoundError(UserError, FileNotFoundError):
    """No trained MRP head at a path (a FileNotFoundError, as before; a UserError for the CLIs)."""


class BackboneMismatchError(CheckpointError):
    """A head trained on another backbone than the one it is loaded on (same shapes, other weights)."""


class MRPHead(NumericsAware, nn.Module):
    def __init__(self, cfg: ModelConfig, num_layers: int = 1, objective: str = "residual"):
        super().__init__()
        if objective not in OBJECTIVES:
            raise ValueError(f"objective {objective!r}: choose one of {OBJECTIVES}")
        self.config, self.num_layers, self.objective = cfg, num_layers, objective
        H = cfg.hidden_size
        self.enorm = RMSNorm(H, cfg.rms_norm_eps)
        self.hnorm = RMSNorm(H, cfg.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * H, H, bias=False)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(num_layers))
        self.norm = RMSNorm(H, cfg.rms_norm_eps)

    def init_weights(self, scheme: str = "normal", std: float = 0.02, generator: torch.Generator | None = None):
        """`normal`: every matrix N(0, std). `zero-out`: normal, with the final norm's gain at 0 (C = 0 at
        the start). `structured` (upstream): eh_proj passes h_A through
        (identity on the hidden half, zero on the embedding half) so training starts from C ≈ lm_head(norm(h_A))."""
        for name, p in self.named_parameters():
            if "norm" in name and name.endswith("weight") and p.dim() == 1:
                nn.init.ones_(p)
            else:
                nn.init.normal_(p, 0.0, std, generator=generator)
        if scheme == "zero-out":
            # The final norm's gain at zero makes h_C = 0, so training starts exactly at the
            # uncorrected baseline A (KL(B || A)) instead of a random C of unit scale.
            nn.init.zeros_(self.norm.weight)
        elif scheme == "structured":
            H = self.config.hidden_size
            with torch.no_grad():
                self.eh_proj.weight.zero_()
                self.eh_proj.weight[:, H:] = torch.eye(H)
        elif scheme != "normal":
            raise ValueError(f"init scheme {scheme!r}: choose normal, structured or zero-out")
        return self

    def new_cache(self, batch: int, capacity: int, static: bool = False) -> KVCache:
        p = self.eh_proj.weight
        return KVCache.for_model(self.config, batch, capacity, p.device, p.dtype, num_layers=self.num_layers,
                                 static=static)  # fmt: skip

    def _inputs(self, h_in, ids, embed):
        e = embed(ids)  # (B, T, H)
        return self.eh_proj(torch.cat([self.enorm(e), self.hnorm(h_in.to(e.dtype))], dim=-1))

    def _run(self, x, positions, mask, cache, write):
        mask = attention_mask(self, mask)
        cos, sin = rope_cos_sin(positions, self.config.head_dim, self.config.rope_theta, x.dtype)
        for i, layer in enumerate(self.layers):
            x, (k, v) = layer(x, cos, sin, mask, cache.past(i) if cache is not None else None)
            if write:
                cache.write(i, k, v)
        return x

    @staticmethod
    def _cache_mask(cache, B, T, device):
        if cache is None:
            return torch.zeros(B, 1, T, 0, dtype=torch.bool, device=device)
        valid = cache.key_slots()  # (B, S)
        return valid[:, None, None, :].expand(B, 1, T, valid.shape[1])

    def forward(
        self,
        h_in: torch.Tensor,  # (B, L, H) the state the reveal is applied to (h_A, or h_{k-1} when chaining)
        ids_after: torch.Tensor,  # (B, L) block tokens after the reveal
        positions: torch.Tensor,  # (B, L)
        embed: nn.Embedding,  # the backbone's (frozen, shared)
        cache: KVCache | None = None,  # the head's own cache of committed blocks (read only here)
        key_valid: torch.Tensor | None = None,  # (B, L)
    ) -> torch.Tensor:
        """-> h_C (B, L, H). Inputs may carry extra leading dims folded into B by the caller."""
        B, L = ids_after.shape
        kv = key_valid if key_valid is not None else torch.ones(B, L, dtype=torch.bool, device=ids_after.device)
        own = kv[:, None, None, :].expand(B, 1, L, L) | torch.eye(L, dtype=torch.bool, device=kv.device)
        mask = torch.cat([self._cache_mask(cache, B, L, kv.device), own], -1)
        return self.norm(self._run(self._inputs(h_in, ids_after, embed), positions, mask, cache, write=False))

    def corrected(self, h_in: torch.Tensor, h_C: torch.Tensor) -> torch.Tensor:
        """The predicted next-step hidden state: h_in + h_C (residual) or h_C (direct)."""
        return h_in + h_C if self.objective == "residual" else h_C

    def step(self, h_in, ids_after, positions, embed, cache=None, key_valid=None) -> torch.Tensor:
        """One chained step: the predicted hidden state after the reveal in `ids_after`."""
        return self.corrected(h_in, self(h_in, ids_after, positions, embed, cache, key_valid))

    def chain(self, h_A, ids_after_steps: list[torch.Tensor], positions, embed, cache=None, key_valid=None):
        """K chained steps; returns the K predicted states [h_1, ..., h_K]."""
        states, h = [], h_A
        for ids in ids_after_steps:
            h = self.step(h, ids, positions, embed, cache, key_valid)
            states.append(h)
        return states

    @torch.no_grad()
    def commit(self, h_clean, ids, positions, embed, cache: KVCache, key_valid=None, block_size: int | None = None):
        """Write finished block(s) into the head's cache: (B, T) ids with the backbone's hidden states
        of the clean block(s) (T = L for one block; T = n·L for a prefill, block-causal then)."""
        B, T = ids.shape
        kv = key_valid if key_valid is not None else torch.ones(B, T, dtype=torch.bool, device=ids.device)
        if block_size is None or T == block_size:
            own = kv[:, None, None, :].expand(B, 1, T, T) | torch.eye(T, dtype=torch.bool, device=kv.device)
        else:
            own = block_causal_mask(kv, block_size)
        mask = torch.cat([self._cache_mask(cache, B, T, kv.device), own], -1)
        self._run(self._inputs(h_clean, ids, embed), positions, mask, cache, write=True)
        cache.advance(kv)


# -- save / load in the released checkpoints' naming (mrp_modules.0.model.*) --------------------
PREFIX = "mrp_modules.0.model."


def save_head(head: MRPHead, out_dir: str | os.PathLike, extra: dict | None = None) -> Path:
    """mrp.safetensors + mrp_config.json in out_dir, each written to a temporary file and renamed.
    extra: recorded in mrp_config.json; `backbone_hash` (trajectories.model_fingerprint of the backbone
    it was trained on) is what load_head checks, `rerun` the command that rewrites the head."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {PREFIX + k: v.detach().to("cpu").contiguous() for k, v in head.state_dict().items()}
    with atomic_file(out / "mrp.safetensors") as tmp:  # a unique temporary name: concurrent writers never clash
        save_file(tensors, str(tmp), metadata={"format": "pt"})
    meta = {
        "num_mrp_layers": head.num_layers,
        "objective": head.objective,
        "backbone": head.config.to_dict(),
        **(extra or {}),
    }
    with atomic_file(out / "mrp_config.json") as tmp:
        tmp.write_text(json.dumps(meta, indent=2))
    return out


def load_head(
    path: str | os.PathLike,
    backbone_cfg: ModelConfig,
    device="cpu",
    dtype=torch.float32,
    *,
    backbone_hash: str | None = None,
    allow_backbone_mismatch: bool = False,
    rerun: str | None = None,
) -> MRPHead:
    """The head saved in `path` (save_head's layout), for a backbone of config `backbone_cfg`.

    backbone_hash: the fingerprint (trajectories.model_fingerprint) of the backbone the head is loaded
    on. Given, a head whose recorded backbone_hash differs -- or that records none -- is refused with a
    CheckpointError naming both, even when the shapes match: a head only predicts the residuals of the
    backbone it was trained on. allow_backbone_mismatch=True loads it anyway (e.g. a head deliberately
    moved to a fine-tuned backbone). Without backbone_hash only the shapes are checked, as before. rerun: the
    command that (re)trains this head, for the advice of an error (stages passes its profile's; default: the
    command recorded in mrp_config.json, else the stage's command with the profile left to fill in)."""
    path = Path(path)
    meta_path, weights = path / "mrp_config.json", path / "mrp.safetensors"
    fallback = rerun or "with python -m mrp_repro.stages head, given the profile that trained it"
    if not meta_path.exists() or not weights.exists():
        raise HeadNotFoundError(
            f"{path}: no MRP head here (expected mrp_config.json and mrp.safetensors); train one first ({fallback})"
        )
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{meta_path} is unreadable ({e}); delete {path} and rerun {fallback}") from e
    rerun = meta.get("rerun") or fallback
    saved_cfg = ModelConfig(**meta["backbone"])
    if saved_cfg != backbone_cfg:
        raise CheckpointError(f"{path}: this head was trained for backbone {saved_cfg}, not {backbone_cfg}")
    recorded = meta.get("backbone_hash")
    if backbone_hash is not None and recorded != backbone_hash and not allow_backbone_mismatch:
        raise BackboneMismatchError(
            f"{path}: this head was trained on backbone {recorded or '<not recorded>'}, but the backbone it "
            f"is loaded on is {backbone_hash} (same shapes, other weights); train a head for this backbone "
            f"({rerun}) or pass allow_backbone_mismatch=True to load it anyway"
        )
    head = MRPHead(backbone_cfg, meta["num_mrp_layers"], meta["objective"])
    raw = read_safetensors(weights, fix=f"delete it and rerun {rerun} (it rewrites the head)")
    state = {k.removeprefix(PREFIX): v for k, v in raw.items() if k.startswith(PREFIX)}
    missing, unexpected = head.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise CheckpointError(
            f"{path}: head weights do not match: missing {missing}, unexpected {unexpected}; "
            f"delete {weights} and rerun {rerun}"
        )
    return head.to(device=device, dtype=dtype).eval()


# -- the released checkpoints (heavyball/sdar-*-mrp-3lyr): one state dict, backbone + head ----------


def split_released_state(state: dict[str, torch.Tensor]) -> tuple[dict, dict]:
    """Split a released whole-model state dict into (head state with MRPHead names, backbone state).

    The head lives under `mrp_modules.0.model.*` (enorm, hnorm, eh_proj, layers.N.*, norm); every other
    tensor (`model.*`, `lm_head.weight`) is the frozen SDAR backbone's."""
    head = {k.removeprefix(PREFIX): v for k, v in state.items() if k.startswith(PREFIX)}
    other = {k: v for k, v in state.items() if not k.startswith("mrp_modules.")}
    if not head:
        raise ValueError(f"no MRP head in this state dict (no key starts with {PREFIX!r})")
    return head, other


def head_from_released(
    state: dict[str, torch.Tensor],
    backbone_cfg: ModelConfig,
    objective: str = "residual",
    device="cpu",
    dtype=torch.float32,
) -> MRPHead:
    """An MRPHead holding the released head weights (layer count read from the keys)."""
    head_state, _ = split_released_state(state)
    n = 1 + max(int(k.split(".")[1]) for k in head_state if k.startswith("layers."))
    head = MRPHead(backbone_cfg, n, objective)
    missing, unexpected = head.load_state_dict(head_state, strict=False)
    if missing or unexpected:
        raise ValueError(f"released head weights do not match: missing {missing}, unexpected {unexpected}")
    return head.to(device=device, dtype=dtype).eval()
