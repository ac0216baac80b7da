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

__all__ = [
    "BlockState", "Dynamic", "GenerationResult", "Policy", "RowStats", "Static",
    "generate", "masked_confidence", "top_masked",
]  # fmt: skip
