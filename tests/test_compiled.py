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


# -- CUDA graphs, on CPU ---------------------------------------------------------------------------------------
# Under mode="reduce-overhead" each call of a compiled forward replays a CUDA graph whose outputs live in memory the
# next step reuses ("accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run"). CPU has
# no CUDA graphs, so a stand-in for torch.compile keeps those semantics: every call first overwrites (NaN) the
# outputs of every earlier call. An engine that reads an output after a later call decodes garbage under it.


def _cudagraph_standin(monkeypatch):
    def fake_compile(fn, dynamic=None, mode=None):
        assert mode == "reduce-overhead"
        live = []

        def replay(*args, **kwargs):
            for t in live:  # the previous step's graph memory is reused by this one
                t.fill_(float("nan"))
            live.clear()
            out = fn(*args, **kwargs)
            live.extend(t for t in (out if isinstance(out, tuple) else (out,)) if isinstance(t, torch.Tensor))
            return out

        return replay

    monkeypatch.setattr(torch, "compile", fake_compile)


def _decodes(m, h, ps):
    out = []
    for pol in (Static(1), Speculative(3, "mrp", head=h, verify="loop"),
                Speculative(3, "mrp", head=h, verify="checked")):  # fmt: skip
        for fuse, static in ((False, False), (True, False), (False, True)):
            r = generate(m, ps, pol, 4, MASK, [2], 8, pad_id=PAD, fuse_commit=fuse, static_cache=static)
            out.append((pol.name, fuse, static, r.tokens, r.stats))
    return out


def test_reduce_overhead_engine_is_cuda_graph_safe(monkeypatch):
    """compile_model(mode="reduce-overhead") (the mode CUDA gets): under the stand-in, every decode, fused and
    static-cache layouts and the loop and checked verifies included, equals eager token for token."""
    m, h = random_backbone(4, torch.float32), random_head(4, torch.float32)
    ps = random_prompts(3, 1, 9)
    want = _decodes(m, h, ps)
    _cudagraph_standin(monkeypatch)
    compile_model(m, h, mode="reduce-overhead")
    assert m.forward.mrp_compiled and h.forward.mrp_compiled
    assert _decodes(m, h, ps) == want


def test_the_standin_catches_an_engine_that_keeps_outputs(monkeypatch):
    """The same stand-in without graph_safe's clones: decoding reads overwritten outputs (the test above can
    fail)."""
    import mrp_repro.model as model_mod

    m, h = random_backbone(4, torch.float32), random_head(4, torch.float32)
    ps = random_prompts(3, 1, 9)
    want = _decodes(m, h, ps)
    _cudagraph_standin(monkeypatch)
    monkeypatch.setattr(model_mod, "_clone_outputs", lambda out: out)
    compile_model(m, h, mode="reduce-overhead")
    try:
        got = _decodes(m, h, ps)
    except (RuntimeError, IndexError):  # NaN logits can also make a policy fail outright
        return
    assert got != want


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("gcc") is None and shutil.which("cc") is None, reason="inductor on CPU needs gcc")
def test_reduce_overhead_compiles_on_cpu():
    """The real torch.compile in the mode CUDA gets (inductor skips the graphs on CPU; graph_safe still runs), on
    the fewest call kinds (prefill, block forward, commit): inductor on CPU takes minutes per kind."""
    m = random_backbone(4, torch.float32)
    ps = random_prompts(1, 1, 5)
    want = generate(m, ps, Static(1), 4, MASK, [2], 4, pad_id=PAD)
    compile_model(m, mode="reduce-overhead")
    assert m.forward.mrp_compiled and hasattr(m.forward, "compiled")  # graph_safe around torch.compile
    got = generate(m, ps, Static(1), 4, MASK, [2], 4, pad_id=PAD)
    assert (got.tokens, got.stats) == (want.tokens, want.stats)
