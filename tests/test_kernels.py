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
from mrp_repro.kernels import dispatch  # noqa: E402
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


def test_dispatch_env_override(monkeypatch):
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
