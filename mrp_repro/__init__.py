"""mrp-repro: reproducibility package for "Multi-Token Residual Prediction" (MRP)."""

import os

# Intel MKL (torch's CPU BLAS) in strict conditional-numerical-reproducibility mode: its gemm then gives the same
# bits at any thread count. Without it a weight gradient, a reduction over batch x tokens, rounds differently at 1
# and 2 threads (up to 6e-8 of 0.47 in one tiny-backbone step), and 3000 steps grow that into another model
# (docs/published.md). MKL reads this at its first call, so it is set on import, before any; a value already in
# the environment is kept. AUTO: the best code path of this CPU (another instruction set rounds differently).
os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")

__version__ = "0.1.0"
