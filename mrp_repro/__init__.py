"""mrp-repro: reproducibility package for "Multi-Token Residual Prediction" (MRP)."""

__version__ = "0.1.0"
