"""The batch-invariant numerics (issue 36): kernels.triton_batch_invariant under the Triton interpreter and the PyTorch
reference (kernels.batch_invariant) against float64, each row's bits the same alone and inside any batch, and the mode
on a model: a folded verify's rows are the block forwards' bits (the reference and the Triton kernels), verify
"exact" is "fold" on every device inside the mode. compile_check compiles the kernels for sm_80 / sm_90
(tests/test_kernel_compile.py). Shapes are tiny: the interpreter runs each program in Python.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_kernels_batch_invariant.py
"""

from __future__ import annotations

import importlib
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from mrp_repro.kernels import batch_invariant as BI  # noqa: E402
from mrp_repro.model import resolve_verify  # noqa: E402

torch.set_num_threads(1)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@pytest.fixture(scope="module")
def T():
    if os.environ.get("TRITON_INTERPRET", "0").lower() not in ("1", "true", "yes", "on"):
        pytest.skip("TRITON_INTERPRET is not enabled in this process")
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except Exception as exc:  # pragma: no cover - triton missing
        pytest.skip(f"triton not importable: {exc}")
    mod = importlib.import_module("mrp_repro.kernels.triton_batch_invariant")
    if not isinstance(mod._bi_matmul_kernel, InterpretedFunction):
        mod = importlib.reload(mod)
    return mod


def _rand(*shape, dtype, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


def _tol(dtype, truth):
    s = max(float(truth.abs().max()), 1.0)
    return dict(atol=1e-5 * s, rtol=1e-5) if dtype == torch.float32 else dict(atol=2e-2 * s, rtol=1e-2)


def _cases(dtype):
    """(op, args, float64 truth, triton fn name, reference fn) per op, at sizes no tile divides."""
    x, w = _rand(37, 50, dtype=dtype, seed=1), _rand(40, 50, dtype=dtype, seed=2, scale=50**-0.5)
    q, k, v = _rand(3, 4, 5, 8, dtype=dtype, seed=3), _rand(3, 2, 70, 8, dtype=dtype, seed=4), \
        _rand(3, 2, 70, 8, dtype=dtype, seed=5)  # fmt: skip
    mask = torch.rand(3, 1, 5, 70, generator=torch.Generator().manual_seed(6)) < 0.7
    mask[..., 0] = True
    r, g = _rand(9, 3, 40, dtype=dtype, seed=7), _rand(40, dtype=dtype, seed=8)
    z = _rand(6, 300, dtype=dtype, seed=9, scale=3.0)
    d = lambda t: t.double()  # noqa: E731
    return [
        ("linear", (x, w), F.linear(d(x), d(w)), lambda T, a, b: T.linear(a, b), BI.linear_ref),
        ("attention", (q, k, v, mask), F.scaled_dot_product_attention(d(q), d(k), d(v), attn_mask=mask,
                                                                      enable_gqa=True),
         lambda T, *a: T.attention(*a, enable_gqa=True), lambda *a: BI.attention_ref(*a, enable_gqa=True)),
        ("mean", (r,), d(r).mean(-1), lambda T, a: T.mean(a), lambda a: BI.mean_ref(a)),
        ("rms_norm", (r, g), d(r) * torch.rsqrt(d(r).pow(2).mean(-1, keepdim=True) + 1e-6) * d(g),
         lambda T, a, b: T.rms_norm(a, (40,), b, 1e-6), lambda a, b: BI.rms_norm_ref(a, (40,), b, 1e-6)),
        ("log_softmax", (z,), torch.log_softmax(d(z), -1), lambda T, a: T.softmax(a, log=True),
         lambda a: BI.softmax_ref(a, log=True)),
        ("softmax", (z,), torch.softmax(d(z), -1), lambda T, a: T.softmax(a), lambda a: BI.softmax_ref(a)),
    ]  # fmt: skip


def _alone(op, fn, args):
    """fn on each leading row (batch element) alone, concatenated."""
    n = args[0].shape[0]
    per = [[a[i : i + 1] if (j == 0 or (op == "attention" and j < 4)) else a for j, a in enumerate(args)]
           for i in range(n)]  # fmt: skip
    return torch.cat([fn(*a) for a in per])


@pytest.mark.parametrize("dtype", DTYPES)
def test_triton_kernels_and_reference_match_float64(T, dtype):
    for op, args, truth, tri, ref in _cases(DTYPES[dtype]):
        tol = _tol(DTYPES[dtype], truth)
        got = tri(T, *args)
        assert got.dtype == args[0].dtype and got.shape == truth.shape, op
        torch.testing.assert_close(got.double(), truth, **tol, msg=lambda m, op=op: f"triton {op}: {m}")
        torch.testing.assert_close(ref(*args).double(), truth, **tol, msg=lambda m, op=op: f"reference {op}: {m}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_each_row_has_the_same_bits_alone_and_in_a_batch(T, dtype):
    """The property the mode rests on, for the Triton kernels and the reference: a row computed alone equals the
    same row inside a batch of 37 / 3 / 9 / 6, bit for bit."""
    for op, args, _, tri, ref in _cases(DTYPES[dtype]):
        for name, fn in (("triton", lambda *a, tri=tri: tri(T, *a)), ("reference", ref)):
            assert torch.equal(_alone(op, fn, args), fn(*args)), (name, op)


def test_the_mode_answers_the_forwards_ops_and_restores(T):
    x, w = _rand(5, 16, dtype=torch.float32), _rand(8, 16, dtype=torch.float32)
    assert not BI.active()
    assert resolve_verify("exact", "cuda") == "checked"
    with BI.batch_invariant("torch") as mode:
        assert BI.active() and resolve_verify("exact", "cuda") == "fold"
        assert resolve_verify("checked", "cpu") == "checked"  # asked for by name: still the check
        torch.testing.assert_close(F.linear(x, w), x @ w.T, atol=1e-5, rtol=1e-5)
        x.pow(2).mean(-1, keepdim=True)
        x.mean(0)  # not a last-dim mean: torch's own
        torch.log_softmax(x, -1)
    assert mode.calls == {("linear", "torch"): 1, ("mean", "torch"): 1, ("log_softmax", "torch"): 1}
    assert not BI.active() and resolve_verify("exact", "cuda") == "checked"
    with pytest.raises(ValueError, match="impl"):
        BI.batch_invariant("cublas").__enter__()


@pytest.mark.parametrize("impl", ["torch", "triton"])
@torch.no_grad()
def test_a_folded_verify_is_the_block_forwards_bits_in_the_mode(T, impl):
    """A toy backbone, a padded batch of 2 with a cache of 3 blocks, 2 candidates: in the mode, verify "exact"
    (fold) gives every candidate forward_block's logits and hidden states bit for bit (bf16)."""
    from mrp_repro.decoding.mismatch import MASK, cached_state, random_backbone

    m = random_backbone(5, torch.bfloat16)
    cache, pos, kv, g = cached_state(m, 2, 4, context_blocks=3, seed=1)
    cand = torch.randint(3, 64, (2, 2, 4), generator=g)
    cand[:, 1, :2] = MASK
    with BI.batch_invariant(impl) as mode:
        want = [m.forward_block(cand[:, j], pos, cache, kv) for j in range(2)]
        got = m.forward_candidates(cand, pos, cache, kv, verify="exact")
    assert {i for _, i in mode.calls} == {impl} and {op for op, _ in mode.calls} == {"linear", "attention", "mean"}
    for j in range(2):
        assert torch.equal(got.logits[:, j], want[j].logits) and torch.equal(got.hidden[:, j], want[j].hidden), j
    plain = m.forward_block(cand[:, 0], pos, cache, kv).logits
    assert (got.logits[:, 0].float() - plain.float()).abs().max() < 0.25  # the mode's own rounding, close to torch's
