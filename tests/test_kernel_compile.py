"""The Triton kernels compile for real GPUs (sm_80, sm_90) with Triton's compiler, on a CPU machine (issue 30).

The kernel tests run under TRITON_INTERPRET=1, which skips the code generator; this one compiles every kernel the
wrappers launch, in every constexpr variant they pick (mrp_repro.kernels.compile_check, level "quick": bf16 at
the SDAR vocabulary for both archs, and a small unaligned vocabulary for sm_90; the batch-invariant kernels of issue
36 at SDAR-4B's decode shapes for both archs and at toy shapes for sm_90), through ptxas to a cubin. It runs in ONE
subprocess without TRITON_INTERPRET (test_kernels.py sets it for this whole pytest process, and triton reads it when
a kernel is decorated) and a fresh Triton cache, so every variant is really compiled: 53 compiles, ~15 s of CPU.
The same subprocess compiles a kernel that reads a plain module global, to show the check can fail the way the
confidence kernels failed before issue 30 ("Cannot access global variable _INT32_MAX").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import json
import torch
import triton
import triton.language as tl
from mrp_repro.kernels import compile_check as cc

_PLAIN = 7  # a plain module global: what triton_confidence read as _INT32_MAX


@triton.jit
def _reads_plain_global(x_ptr):
    tl.store(x_ptr, _PLAIN)


rows = cc.compile_all((80, 90), "quick")
try:
    cc.compile_launch(cc.Launch(_reads_plain_global, (1,), (torch.zeros(1),), {}), 90)
    negative = "compiled"
except Exception as exc:
    negative = f"{type(exc).__name__}: {exc}"
print("RESULT " + json.dumps(dict(rows=rows, negative=negative)))
"""


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    pytest.importorskip("triton")
    tmp = tmp_path_factory.mktemp("kernel_compile")
    script = tmp / "probe.py"  # a file, not -c: @triton.jit reads the kernel's source
    script.write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(PYTHONPATH=str(ROOT), TRITON_CACHE_DIR=str(tmp / "triton-cache"))
    res = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600,
                         cwd=tmp)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    line = [x for x in res.stdout.splitlines() if x.startswith("RESULT ")]
    assert line, res.stdout[-2000:] + res.stderr[-2000:]
    return json.loads(line[-1][len("RESULT ") :])


def test_every_kernel_variant_compiles_for_sm80_and_sm90(compiled):
    rows = compiled["rows"]
    bad = [f"{r['arch']} {r['kernel']} {r['variant']}: {r['error']}" for r in rows if not r["ok"]]
    assert not bad, "\n".join(bad)
    assert all(r["cubin_bytes"] > 0 and r["ptx_bytes"] > 0 for r in rows)
    # no register spills (cuobjdump's LOCAL): a spill in a bandwidth-bound kernel costs more than its reads
    spills = [f"{r['arch']} {r['kernel']} {r['variant']}: {r['local_bytes']} B" for r in rows if r["local_bytes"]]
    assert not spills, spills
    for arch in ("sm_80", "sm_90"):
        names = {r["kernel"] for r in rows if r["arch"] == arch}
        assert names == {"_confidence_partial_kernel", "_confidence_combine_kernel", "_residual_kl_fwd_kernel",
                         "_residual_kl_bwd_kernel", "_bi_matmul_kernel", "_bi_attention_kernel",
                         "_bi_row_sum_kernel", "_bi_softmax_kernel"}, (arch, names)  # fmt: skip


def test_the_batch_invariant_kernels_compile_without_the_interpreters_upcast(compiled):
    """The GPU path of triton_batch_invariant: bf16 operands straight into tl.dot (UPCAST only under the
    interpreter), fixed tiles (64 x 64 x 64 GEMM, 16 queries x 64 keys attention), one binary for every row count."""
    rows = [r for r in compiled["rows"] if r["kernel"].startswith("_bi_")]
    assert rows and all("'UPCAST': False" in r["variant"] for r in rows if r["kernel"] in ("_bi_matmul_kernel",
                                                                                         "_bi_attention_kernel"))
    mm = {r["variant"].split("}")[0] for r in rows if r["kernel"] == "_bi_matmul_kernel" and r["arch"] == "sm_80"}
    assert mm == {"{'HAS_BIAS': False, 'IEEE': False, 'UPCAST': False, 'BLOCK_M': 64, 'BLOCK_N': 64, 'BLOCK_K': 64"}
    att = {r["variant"].split("}")[0] for r in rows if r["kernel"] == "_bi_attention_kernel" and r["arch"] == "sm_80"}
    assert att == {"{'HAS_MASK': True, 'IEEE': False, 'UPCAST': False, 'BLOCK_M': 16, 'BLOCK_N': 64, 'BLOCK_D': 128"}


def _flags(variant: str) -> str:
    return variant.split("}")[0] + "}"


def test_every_constexpr_flag_combination_is_compiled(compiled):
    """The wrappers' flags: confidence (no C; entropy or not), residual (C; entropy x tokens): 6 partial and
    4 combine variants per arch at the SDAR vocabulary (tiles of 4 blocks), and the one-tile variants on sm_90."""
    rows = compiled["rows"]
    for arch in ("sm_80", "sm_90"):
        part = {_flags(r["variant"]) for r in rows if r["arch"] == arch and r["kernel"] == "_confidence_partial_kernel"}
        comb = {_flags(r["variant"]) for r in rows if r["arch"] == arch and r["kernel"] == "_confidence_combine_kernel"}
        big = {p for p in part if "'TILE_BLOCKS': 4" in p}
        assert len(big) == 6, (arch, sorted(part))
        for has_c, ent, base in [(False, False, False), (False, True, False), (True, False, False),
                                 (True, True, False), (True, False, True), (True, True, True)]:  # fmt: skip
            assert (f"{{'HAS_C': {has_c}, 'WITH_ENTROPY': {ent}, 'WITH_BASE_LSE': {base}, 'BLOCK': 1024, "
                    "'TILE_BLOCKS': 4}") in big  # fmt: skip
        assert len({c for c in comb if "'BLOCK_T': 64" in c}) == 4, (arch, sorted(comb))
    one_tile = {_flags(r["variant"]) for r in rows if r["arch"] == "sm_90" and "'TILE_BLOCKS': 1" in r["variant"]}
    assert len(one_tile) == 6 and all("'BLOCK': 512" in v for v in one_tile), sorted(one_tile)


def test_the_check_fails_on_a_plain_global_read(compiled):
    neg = compiled["negative"]
    assert neg.startswith("CompilationError") and "Cannot access global variable _PLAIN" in neg, neg
