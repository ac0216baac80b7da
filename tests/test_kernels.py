"""Tests for mrp_repro.kernels: Triton kernels (CPU interpreter) vs PyTorch references.

The Triton kernels run on CPU through the Triton interpreter. Triton reads
TRITON_INTERPRET when a ``@triton.jit`` function is *decorated*, so this module
sets it before anything imports the kernel modules, and ``_kernel_module``
reloads a kernel module that was imported earlier without it (for instance by
another test module). If the interpreter cannot be enabled the Triton tests
are skipped; the reference and dispatch tests always run.

Tolerances (all comparisons in float64 after the fact; both sides compute in fp32):
- argmax: exactly equal (ties -> lowest index);
- max_prob: atol 1e-5, rtol 1e-5;  entropy: atol 1e-4 (1e-3 for |logits| ~ 1e4,
  checked against the float64 reference on the same inputs);
- log-probs at a token / c_at_token: atol 1e-4, rtol 1e-5;
- KL: atol 1e-4, rtol 1e-4;  dKL/dC: atol 1e-6, rtol 1e-4;
- gradcheck of the float64 reference: torch defaults (eps 1e-6, atol 1e-5, rtol 1e-3).
"""

from __future__ import annotations

import importlib
import logging
import math
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import mrp_repro.kernels as kernels  # noqa: E402
from mrp_repro.kernels import dispatch, fallback  # noqa: E402
from mrp_repro.kernels import reference as R  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")

TOL_P = dict(atol=1e-5, rtol=1e-5)
TOL_H = dict(atol=1e-4, rtol=0)
TOL_LP = dict(atol=1e-4, rtol=1e-5)
TOL_KL = dict(atol=1e-4, rtol=1e-4)
TOL_G = dict(atol=1e-6, rtol=1e-4)
BLOCK = 256  # V=1000 is not a multiple of it


def _interp_ok() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "yes", "on")


def _kernel_module(name: str):
    """Import mrp_repro.kernels.<name> with interpreted kernels, or skip."""
    if not _interp_ok():
        pytest.skip("TRITON_INTERPRET is not enabled in this process")
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except Exception as exc:  # pragma: no cover - triton missing
        pytest.skip(f"triton not importable: {exc}")
    mod = importlib.import_module(f"mrp_repro.kernels.{name}")
    probe = "_confidence_partial_kernel" if name == "triton_confidence" else "_residual_kl_fwd_kernel"
    if not isinstance(getattr(mod, probe), InterpretedFunction):
        mod = importlib.reload(mod)
    return mod


@pytest.fixture(scope="module")
def K():
    return _kernel_module("triton_confidence")


@pytest.fixture(scope="module")
def KL():
    _kernel_module("triton_confidence")
    return _kernel_module("triton_residual_kl")


def _close(a, b, **tol):
    torch.testing.assert_close(a.double(), b.double(), **tol)


def _rand(n, v, dtype=torch.float32, scale=3.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, v, generator=g) * scale).to(dtype)


# ------------------------------------------------------------------ references


def test_reference_tie_rule_and_values():
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0], [0.0, 0.0, 0.0, 5.0]])
    out = R.confidence_ref(x, return_entropy=True)
    assert out.argmax.tolist() == [1, 0, 3]
    assert out.argmax.dtype == torch.int64
    _close(out.max_prob, torch.softmax(x, -1).max(-1).values, **TOL_P)
    _close(out.entropy[1:2], torch.tensor([math.log(4)]), **TOL_P)


def test_reference_gradcheck_float64():
    g = torch.Generator().manual_seed(1)
    A = torch.randn(3, 11, generator=g, dtype=torch.float64)
    B = torch.randn(3, 11, generator=g, dtype=torch.float64)
    C = torch.randn(3, 11, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda c: R.residual_kl_ref(A, c, B, 0.7), (C,))


# ------------------------------------------------------------------ confidence


@pytest.mark.parametrize("n", [1, 7])
@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_confidence_random(K, n, splits, dtype):
    x = _rand(n, 1000, dtype, seed=n)
    out = K.confidence(x, return_entropy=True, block=BLOCK, num_splits=splits)
    ref = R.confidence_ref(x, return_entropy=True)
    assert out.argmax.dtype == torch.int64 and out.max_prob.dtype == torch.float32
    assert torch.equal(out.argmax, ref.argmax)
    _close(out.max_prob, ref.max_prob, **TOL_P)
    _close(out.entropy, ref.entropy, **TOL_H)
    assert K.confidence(x, block=BLOCK).entropy is None


@pytest.mark.parametrize("splits", [1, 4])
def test_confidence_ties(K, splits):
    v = 1000
    x = torch.zeros(5, v)
    x[1] = 7.5  # all equal, nonzero
    x[2, [5, 6]] = 2.0  # tie inside one block
    x[3, [300, 700, 999]] = 4.0  # tie across blocks and splits
    x[4, [999]] = 1.0  # max in the ragged last block
    out = K.confidence(x, return_entropy=True, block=BLOCK, num_splits=splits)
    assert out.argmax.tolist() == [0, 0, 5, 300, 999]
    ref = R.confidence_ref(x, return_entropy=True)
    assert torch.equal(out.argmax, ref.argmax)
    _close(out.max_prob[:2], torch.full((2,), 1.0 / v), **TOL_P)
    _close(out.entropy[:2], torch.full((2,), math.log(v)), **TOL_H)
    _close(out.max_prob, ref.max_prob, **TOL_P)


def test_confidence_extreme_logits(K):
    x = _rand(4, 1000, seed=3, scale=1.0)
    x[0] *= 1e4
    x[1] = x[1] * 1e4 - 1e4
    x[2, ::2] = 1e4
    x[2, 1::2] = -1e4
    x[3] += 1e4
    out = K.confidence(x, return_entropy=True, block=BLOCK, num_splits=2)
    # float64 ground truth from the same fp32 inputs: with |logits| ~ 1e4 the fp32
    # reference itself loses ~1e-3 in (x - lse); the kernel works with x - max (exact).
    ref = R.confidence_ref(x.double(), return_entropy=True)
    assert torch.equal(out.argmax, ref.argmax)
    assert out.argmax[2].item() == 0
    _close(out.max_prob, ref.max_prob, **TOL_P)
    _close(out.entropy, ref.entropy, atol=1e-3, rtol=0)
    assert torch.isfinite(out.entropy).all()


def test_confidence_input_checks(K):
    with pytest.raises(ValueError):
        K.confidence(torch.randn(10))
    with pytest.raises(TypeError):
        K.confidence(torch.randn(2, 10, dtype=torch.float64))
    with pytest.raises(ValueError):
        K.confidence(torch.randn(10, 4).t())


# ------------------------------------------------------------------ split invariance (issue 30, finding 6)


SPLIT_V, SPLIT_BLOCK = 1536, 64  # tiles of 4 x 64 = 256 columns: 6 tiles


def _split_rows(v=SPLIT_V):
    """Random rows, exact ties straddling tile and split boundaries, an all-equal row, extreme logits."""
    x = _rand(6, v, seed=7)
    x[1:4] = 0.0
    x[1, [511, 512, 1024]] = 5.0  # 511 | 512 is a tile edge and, at 3 splits (2 tiles each), a split edge
    x[2, [767, 768]] = 9.0  # 767 | 768: the split edge at 2 splits
    x[3] = 1.25  # all equal
    x[4] *= 1e4
    x[4, [255, 256]] = 1e6  # a tie across the first tile edge, at |logits| ~ 1e4
    x[5, v - 1] = 50.0  # the max in the ragged last block
    return x


def test_confidence_bitwise_equal_at_every_split_count(K):
    """Outputs do not depend on the split count: bitwise equal at 1, 2, 3 and 6 splits (6 tiles).

    The old kernel wrote one partial per SPLIT (each split's lanes summed its own run of blocks), so the rounding
    of max_prob and entropy moved with the split count, which on CUDA came from the rows and the SM count."""
    x = _split_rows()
    assert K._tiling(SPLIT_V, SPLIT_BLOCK) == (4, 6)
    outs = [K.confidence(x, return_entropy=True, block=SPLIT_BLOCK, num_splits=s) for s in (1, 2, 3, 6)]
    for o in outs[1:]:
        for f in ("argmax", "max_prob", "entropy"):
            assert torch.equal(getattr(o, f), getattr(outs[0], f)), f
    assert outs[0].argmax[1:6].tolist() == [511, 767, 0, 255, SPLIT_V - 1]
    ref = R.confidence_ref(x.double(), return_entropy=True)
    assert torch.equal(outs[0].argmax, ref.argmax)
    _close(outs[0].max_prob, ref.max_prob, **TOL_P)
    _close(outs[0].entropy, ref.entropy, atol=1e-3, rtol=0)


def test_residual_confidence_bitwise_equal_at_every_split_count(K):
    A = _split_rows()
    C = _rand(6, SPLIT_V, scale=0.5, seed=8)
    C[1:5] = 0.0  # keep the ties of rows 1-4 exact in Z = A + 0.7*C
    tok = torch.tensor([0, 512, 768, 7, 256, SPLIT_V - 1])
    outs = [K.residual_confidence(A, C, 0.7, tok, True, block=SPLIT_BLOCK, num_splits=s) for s in (1, 3, 6)]
    for o in outs[1:]:
        for f in o._fields:
            assert torch.equal(getattr(o, f), getattr(outs[0], f)), f
    assert outs[0].argmax[1:5].tolist() == [511, 767, 0, 255]
    ref = R.residual_confidence_ref(A.double(), C.double(), 0.7, tok, True)
    assert torch.equal(outs[0].argmax, ref.argmax)
    _close(outs[0].logp_at_token, ref.logp_at_token, **TOL_LP)
    _close(outs[0].logp_base_at_token, ref.logp_base_at_token, **TOL_LP)


def test_confidence_same_bits_at_batch_16_and_256_on_an_h200_split_rule(K, monkeypatch):
    """With the CUDA split rule of an H200 (132 SMs): 16 rows -> 33 splits at the SDAR vocabulary, 256 -> 3; the
    rows of a small batch (6 tiles: 6 splits) get the bits they get in a batch of 256 (3 splits, 2 tiles each)."""
    assert K._pick_splits(16, 38, 132, None) == 33 and K._pick_splits(256, 38, 132, None) == 3
    monkeypatch.setattr(K, "_sm_count", lambda dev: 132)
    x = _split_rows()
    assert K._pick_splits(6, 6, 132, None) == 6 and K._pick_splits(256, 6, 132, None) == 3
    small = K.confidence(x, return_entropy=True, block=SPLIT_BLOCK)
    monkeypatch.setattr(K, "_pick_splits", lambda n, t, sms, ns: 3)  # what 256 rows would get, without 256 rows
    big = K.confidence(x, return_entropy=True, block=SPLIT_BLOCK)
    for f in ("argmax", "max_prob", "entropy"):
        assert torch.equal(getattr(small, f), getattr(big, f)), f


# ------------------------------------------------------------------ residual_confidence


@pytest.mark.parametrize("n", [1, 7])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_residual_confidence_random(K, n, dtype):
    A = _rand(n, 1000, dtype, seed=10 + n)
    C = _rand(n, 1000, dtype, scale=1.0, seed=20 + n)
    tok = torch.randint(0, 1000, (n,), generator=torch.Generator().manual_seed(n))
    tok[0] = 999
    for splits in (1, 3):
        out = K.residual_confidence(A, C, 0.7, tok, return_entropy=True, block=BLOCK, num_splits=splits)
        ref = R.residual_confidence_ref(A, C, 0.7, tok, return_entropy=True)
        assert torch.equal(out.argmax, ref.argmax)
        _close(out.max_prob, ref.max_prob, **TOL_P)
        _close(out.entropy, ref.entropy, **TOL_H)
        _close(out.c_at_token, ref.c_at_token, **TOL_LP)
        _close(out.logp_at_token, ref.logp_at_token, **TOL_LP)
        _close(out.logp_base_at_token, ref.logp_base_at_token, **TOL_LP)
    plain = K.residual_confidence(A, C, 0.7, block=BLOCK)
    assert plain.c_at_token is None and plain.logp_at_token is None and plain.entropy is None
    assert torch.equal(plain.argmax, ref.argmax)


def test_residual_confidence_ties_and_extremes(K):
    A = torch.zeros(3, 1000)
    C = torch.zeros(3, 1000)
    A[1] = 1e4
    C[1, 500] = -1.0
    C[1, 0] = -1e4  # A + C ties at 1e4 everywhere except 0 and 500 -> index 1
    A[2, 10] = 3.0
    C[2, 900] = 3.0  # A + C ties at 10 and 900 -> 10
    tok = torch.tensor([0, 500, 900])
    out = K.residual_confidence(A, C, 1.0, tok, return_entropy=True, block=BLOCK, num_splits=2)
    ref = R.residual_confidence_ref(A.double(), C.double(), 1.0, tok, return_entropy=True)
    assert out.argmax.tolist() == [0, 1, 10] == ref.argmax.tolist()
    _close(out.max_prob, ref.max_prob, **TOL_P)
    _close(out.entropy, ref.entropy, atol=1e-3, rtol=0)
    _close(out.logp_at_token, ref.logp_at_token, **TOL_LP)
    _close(out.logp_base_at_token, ref.logp_base_at_token, **TOL_LP)


# ------------------------------------------------------------------ residual_kl


@pytest.mark.parametrize("n", [1, 7])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_residual_kl_forward_backward(KL, n, dtype):
    A = _rand(n, 1000, dtype, seed=30 + n)
    B = _rand(n, 1000, dtype, seed=40 + n)
    C0 = _rand(n, 1000, dtype, scale=1.0, seed=50 + n)
    c1 = C0.clone().requires_grad_()
    c2 = C0.clone().requires_grad_()
    k1 = KL.residual_kl(A, c1, B, 0.5, block=BLOCK, bwd_block=128)
    k2 = R.residual_kl_ref(A, c2, B, 0.5)
    assert k1.dtype == torch.float32 and k1.shape == (n,)
    _close(k1, k2, **TOL_KL)
    g = torch.randn(n, generator=torch.Generator().manual_seed(n))
    (k1 * g).sum().backward()
    (k2 * g).sum().backward()
    assert c1.grad.dtype == dtype
    if dtype == torch.float32:
        _close(c1.grad, c2.grad, **TOL_G)
    else:  # both gradients rounded to bf16: compare at bf16 resolution
        _close(c1.grad, c2.grad, atol=1e-4, rtol=1e-2)


def test_residual_kl_extremes_and_zero(KL):
    A = _rand(3, 1000, seed=5, scale=1.0) * 1e4
    C = torch.zeros(3, 1000, requires_grad=True)
    k = KL.residual_kl(A, C, A.clone(), 1.0, block=BLOCK)  # B == A + 0*C: KL == 0
    _close(k, torch.zeros(3), atol=1e-3, rtol=0)
    B = A + _rand(3, 1000, seed=6)
    k1 = KL.residual_kl(A, C, B, 1.0, block=BLOCK)
    _close(k1, R.residual_kl_ref(A.double(), C.double(), B.double(), 1.0), atol=1e-3, rtol=1e-4)


def test_residual_kl_rejects_grad_on_constants(KL):
    A = torch.randn(2, 10, requires_grad=True)
    with pytest.raises(ValueError):
        KL.residual_kl(A, torch.randn(2, 10), torch.randn(2, 10))


# ------------------------------------------------------------------ dispatch


def test_dispatch_cpu_picks_torch_and_logs(monkeypatch, caplog):
    monkeypatch.delenv(dispatch.ENV_VAR, raising=False)
    monkeypatch.setattr(dispatch, "_logged", set())
    x = _rand(3, 50)
    assert dispatch.select_backend(x)[0] == "torch"
    with caplog.at_level(logging.INFO, logger="mrp_repro.kernels"):
        out1 = kernels.confidence(x)
        kernels.confidence(x)
    msgs = [r.getMessage() for r in caplog.records if r.name == "mrp_repro.kernels"]
    assert len(msgs) == 1 and "torch" in msgs[0] and "cpu" in msgs[0]
    assert torch.equal(out1.argmax, R.confidence_ref(x).argmax)


def test_dispatch_env_override(K, monkeypatch):
    # K: the kernel modules are imported (interpreted) before TRITON_INTERPRET=0 below, which would otherwise
    # import them compiled-mode and break the interpreted tests after this one (seen with -k)
    x = _rand(3, 50)
    monkeypatch.setenv(dispatch.ENV_VAR, "torch")
    assert dispatch.select_backend(x)[0] == "torch"
    monkeypatch.setenv(dispatch.ENV_VAR, "bogus")
    with pytest.raises(ValueError):
        dispatch.select_backend(x)
    monkeypatch.setenv(dispatch.ENV_VAR, "triton")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        kernels.confidence(x)


def test_dispatch_forced_triton_on_cpu(K, KL, monkeypatch):
    monkeypatch.setenv(dispatch.ENV_VAR, "triton")
    assert dispatch.select_backend(torch.zeros(1, 4))[0] == "triton"
    A, C, B = _rand(2, 300, seed=1), _rand(2, 300, seed=2), _rand(2, 300, seed=3)
    tok = torch.tensor([3, 299])
    assert torch.equal(kernels.confidence(A).argmax, R.confidence_ref(A).argmax)
    out = kernels.residual_confidence(A, C, 1.0, tok)
    _close(out.logp_at_token, R.residual_confidence_ref(A, C, 1.0, tok).logp_at_token, **TOL_LP)
    _close(kernels.residual_kl(A, C, B), R.residual_kl_ref(A, C, B), **TOL_KL)
    # importing the submodules must not shadow the public functions
    assert callable(kernels.confidence) and callable(kernels.residual_kl)


def test_dispatch_all_functions_on_cpu(monkeypatch):
    monkeypatch.setenv(dispatch.ENV_VAR, "auto")
    A, C, B = _rand(2, 30, seed=1), _rand(2, 30, seed=2), _rand(2, 30, seed=3)
    out = kernels.residual_confidence(A, C, 0.5, torch.tensor([0, 29]), return_entropy=True)
    assert out.entropy is not None and out.logp_base_at_token is not None
    Cg = C.clone().requires_grad_()
    kernels.residual_kl(A, Cg, B, 0.5).sum().backward()
    assert Cg.grad is not None and Cg.grad.shape == C.shape


def _fake_compile_error():
    import ast

    from triton.compiler.errors import CompilationError

    msg = 'NameError("Cannot access global variable _INT32_MAX from within @jit\'ed function")'
    return CompilationError(None, ast.parse("_INT32_MAX").body[0], msg)


@pytest.fixture
def fake_cuda(monkeypatch):
    """The dispatch rule's CUDA branch with CPU tensors (the kernels run in the interpreter); a clean slate."""
    monkeypatch.setenv(dispatch.ENV_VAR, "auto")
    monkeypatch.setattr(dispatch, "_is_cuda", lambda x: True)
    monkeypatch.setattr(fallback, "failed", {})
    monkeypatch.setattr(dispatch, "_logged", set())


def test_dispatch_falls_back_loudly_once_when_a_kernel_fails_to_compile(K, KL, fake_cuda, monkeypatch):
    import warnings

    calls = []

    def broken(*args, **kwargs):  # what Triton 3.7.1 raised for the confidence kernels on sm_90 (issue 30)
        calls.append(1)
        raise _fake_compile_error()

    monkeypatch.setattr(K, "_launch", broken)
    A, C, B = _rand(3, 300, seed=1), _rand(3, 300, seed=2), _rand(3, 300, seed=3)
    assert dispatch.select_backend(A, "confidence")[0] == "triton"
    with pytest.warns(RuntimeWarning, match=r"Triton kernel for confidence failed \(CompilationError: .*_INT32_MAX"):
        out = kernels.confidence(A, return_entropy=True)
    ref = R.confidence_ref(A, return_entropy=True)
    assert all(torch.equal(getattr(out, f), getattr(ref, f)) for f in out._fields)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once: no second warning, and no second compile attempt
        assert torch.equal(kernels.confidence(A).max_prob, ref.max_prob)
    assert len(calls) == 1
    assert dispatch.select_backend(A, "confidence")[0] == "torch"
    # residual_confidence shares _launch: its own warning, then the reference too
    with pytest.warns(RuntimeWarning, match="residual_confidence failed"):
        r = kernels.residual_confidence(A, C, 0.5, torch.tensor([0, 1, 299]))
    assert torch.equal(r.logp_at_token, R.residual_confidence_ref(A, C, 0.5, torch.tensor([0, 1, 299])).logp_at_token)
    # a kernel that works keeps running Triton (the interpreter here): its result is the kernel's, not the reference's
    assert dispatch.select_backend(C, "residual_kl")[0] == "triton"
    _close(kernels.residual_kl(A, C, B), R.residual_kl_ref(A, C, B), **TOL_KL)
    # bad input is the caller's error, not a kernel failure
    with pytest.raises(TypeError):
        kernels.residual_kl(A.double(), C, B)
    assert "residual_kl" not in fallback.failed
    # MRP_REPRO_KERNELS=triton: the error, not the fallback
    monkeypatch.setenv(dispatch.ENV_VAR, "triton")
    fallback.failed.clear()
    from triton.compiler.errors import CompilationError

    with pytest.raises(CompilationError):
        kernels.confidence(A)


def test_dispatch_falls_back_when_the_backward_kernel_fails(KL, fake_cuda, monkeypatch):
    class Broken:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                raise _fake_compile_error()

            return launch

    monkeypatch.setattr(KL, "_residual_kl_bwd_kernel", Broken())
    A, B, C0 = _rand(3, 300, seed=1), _rand(3, 300, seed=3), _rand(3, 300, seed=2)
    c1, c2 = C0.clone().requires_grad_(), C0.clone().requires_grad_()
    k1 = kernels.residual_kl(A, c1, B, 0.5)
    g = torch.tensor([1.0, -2.0, 0.5])
    with pytest.warns(RuntimeWarning, match=r"residual_kl \(backward\) failed \(CompilationError"):
        (k1 * g).sum().backward()
    (R.residual_kl_ref(A, c2, B, 0.5) * g).sum().backward()
    _close(c1.grad, c2.grad, **TOL_G)
    assert dispatch.select_backend(A, "residual_kl")[0] == "torch"  # the next step runs the reference


def test_import_without_triton():
    code = (
        "import sys; sys.modules['triton'] = None\n"
        "import torch, mrp_repro.kernels as k\n"
        "ok, why = k.triton_available(); assert not ok, why\n"
        "print(k.confidence(torch.randn(2, 9)).argmax.tolist())\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT), MRP_REPRO_KERNELS="auto")
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr


# ------------------------------------------------------------------ benchmark script


def test_bench_cpu_reference_only(tmp_path):
    from mrp_repro.kernels import bench

    df = bench.run_benchmark(ns=(2, 5), vocab=600, device="cpu", repeats=2, compile=False)
    assert set(df["impl"]) == {"triton", "torch", "torch.compile"}
    assert df[df["impl"] == "triton"]["time_ms"].isna().all()
    assert (df[df["impl"] == "triton"]["note"] == bench.CPU_NOTE).all()
    assert (df[df["impl"] == "torch"]["gbps"] > 0).all()
    png = bench.plot_roofline(df, tmp_path / "k.png")
    assert png.exists() and png.stat().st_size > 0


def test_bench_gpu_check_path_under_interpreter(K, KL):
    from mrp_repro.kernels import bench

    df = bench.check_against_reference("cpu", vocab=1000)
    assert df["ok"].all() and len(df) > 20
    assert set(df["dtype"]) == {"float32", "bfloat16"}
    assert df["check"].str.startswith("split invariance").sum() == 2 * 2 * 6  # 2 dtypes x splits {1, 3} x 6 fields
    assert df["check"].str.startswith("batch invariance").sum() == 2 * 3


def test_check_against_reference_reports_a_broken_kernel_as_rows(K, KL, monkeypatch):
    """gpu_check's use: strict=False turns a kernel that does not compile into a failed row, not a crash."""

    def broken(*args, **kwargs):
        raise _fake_compile_error()

    monkeypatch.setattr(K, "_launch", broken)
    df = kernels.check_against_reference("cpu", vocab=300, dtypes=(torch.bfloat16,), strict=False)
    assert list(df.columns) == ["check", "dtype", "max_abs_err", "atol", "ok"]
    assert (~df["ok"]).sum() == 2 and df["check"].str.contains("CompilationError").all()
    from triton.compiler.errors import CompilationError

    with pytest.raises(CompilationError):
        kernels.check_against_reference("cpu", vocab=300, dtypes=(torch.bfloat16,))
