"""Decoding: one block-diffusion engine, pluggable policies (static, dynamic, MRP modes)."""

from mrp_repro.decoding.engine import (
    BlockState,
    Dynamic,
    GenerationResult,
    Policy,
    RowStats,
    Static,
    generate,
    masked_confidence,
    top_masked,
)
from mrp_repro.decoding.mrp_modes import DRAFTERS, REMASK_RULES, Direct, NaiveLookahead, Remask, Speculative

__all__ = [
    "BlockState", "Dynamic", "GenerationResult", "Policy", "RowStats", "Static",
    "generate", "masked_confidence", "top_masked",
    "Speculative", "Direct", "NaiveLookahead", "Remask", "DRAFTERS", "REMASK_RULES",
]  # fmt: skip
