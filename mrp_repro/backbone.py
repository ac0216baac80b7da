"""A backbone ready to decode: model + tokenizer + special ids, and the prompt encoding around it.

    from mrp_repro import stages
    from mrp_repro.backbone import encode_prompts, decode
    bb = stages.backbone(load_profile("tiny"))      # trains once (~14 CPU-min), then cached
    prompts = encode_prompts(bb, problems)
    text = decode(bb, ids)

`mrp_repro.stages.backbone` builds one for a profile (trains or loads it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from mrp_repro.config import Profile
from mrp_repro.model import SDARModel
from mrp_repro.tokenizer import eos_token_ids, mask_token_id

__all__ = ["Backbone", "special_ids", "encode_prompts", "decode"]


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
        model of the same tokenizer, e.g. a random init; `engine_options` go to decoding.generate as they are;
        fuse_commit and static_cache default to the profile's decoding settings of those names). A policy of the
        upstream family (`policy.algorithm == "upstream"`) runs decoding.upstream.generate_upstream instead: the
        released code's layout, commits and counters, which take no engine options, with its bf16 numerics
        (model.use_numerics("upstream")). Both run with the kernels of the profile's decoding.kernel_numerics
        (kernels.batch_invariant.kernel_numerics; an option `kernel_numerics` chooses instead)."""
        from mrp_repro.kernels.batch_invariant import kernel_numerics

        default = self.profile.decoding.kernel_numerics if self.profile is not None else "default"
        with kernel_numerics(engine_options.pop("kernel_numerics", default)):
            return self._generate(prompts, policy, max_new_tokens, model, **engine_options)

    def _generate(self, prompts, policy, max_new_tokens: int, model: SDARModel | None = None, **engine_options):
        from mrp_repro.decoding import generate

        if getattr(policy, "algorithm", "ours") == "upstream":  # the released code's loop (decoding.upstream)
            from mrp_repro.decoding.upstream import generate_upstream
            from mrp_repro.model import use_numerics

            m = model or self.model
            with use_numerics("upstream", m, policy.head):  # their RMSNorm and unmasked attention (model.NUMERICS)
                return generate_upstream(m, prompts, policy, self.block_size, self.mask_id, self.eos_ids,
                                         max_new_tokens)  # fmt: skip
        if self.profile is not None:  # the profile's engine setting, unless the caller chose
            engine_options.setdefault("fuse_commit", self.profile.decoding.fuse_commit)
            engine_options.setdefault("static_cache", self.profile.decoding.static_cache)
        return generate(model or self.model, prompts, policy, self.block_size, self.mask_id, self.eos_ids,
                        max_new_tokens, pad_id=self.pad_id, **engine_options)  # fmt: skip


def special_ids(tok) -> tuple[int, list[int], int]:
    mask_id = mask_token_id(tok)
    eos = eos_token_ids(tok)
    pad = tok.pad_token_id if tok.pad_token_id is not None else eos[0]
    return mask_id, eos, int(pad)


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
