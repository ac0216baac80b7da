"""model.compile_model: the compiled backbone and head decode token for token like eager, with the same RowStats,
with the growing cache, the fused commit and the static cache (decoding.static_cache, what CUDA graphs need).

OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q -m slow tests/test_compiled.py   # ~1-2 min: inductor on CPU
"""

import shutil

import pytest
import torch

from mrp_repro.decoding import Speculative, Static, generate
from mrp_repro.decoding.mismatch import MASK, PAD, random_backbone, random_head, random_prompts
from mrp_repro.model import compile_model

torch.set_num_threads(1)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("gcc") is None and shutil.which("cc") is None, reason="inductor on CPU needs gcc")
def test_compiled_equals_eager():
    m, h = random_backbone(4, torch.float32), random_head(4, torch.float32)
    ps = random_prompts(3, 1, 9)
    pols = [Static(1), Speculative(3, "mrp", head=h)]

    def run():
        out = []
        for pol in pols:
            for fuse, static in ((False, False), (True, False), (False, True)):  # static: the CUDA-graph layout
                r = generate(m, ps, pol, 4, MASK, [2], 8, pad_id=PAD, fuse_commit=fuse, static_cache=static)
                out.append((r.tokens, r.stats))
        return out

    want = run()
    compile_model(m, h)
    assert hasattr(m.forward, "_torchdynamo_orig_callable") or "compile" in repr(m.forward).lower()
    assert run() == want
