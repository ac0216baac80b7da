"""Compile every Triton kernel for real GPUs (sm_80, sm_90) on a machine without one.

    python -m mrp_repro.kernels.compile_check                   # sm_80 + sm_90, the variants decoding/training pick
    python -m mrp_repro.kernels.compile_check --level all --arch 90   # every dtype x shape (minutes)
    python -m mrp_repro.kernels.compile_check --json            # one JSON object per compile (the test reads it)

Why: the kernel tests run under ``TRITON_INTERPRET=1``, which never runs Triton's code generator, so a kernel that
the interpreter runs can still be rejected on a GPU (issue 30: a plain module global read inside ``@triton.jit``).
This module runs the real wrappers (``triton_confidence.confidence`` / ``residual_confidence``,
``triton_residual_kl.residual_kl`` forward and backward) on CPU tensors with every kernel launch *recorded* instead
of run, turns each recorded launch into the signature, constexprs and alignment attributes the JIT itself would
build for it (Triton's own binder, ``create_function_from_signature`` and ``JITFunction._pack_args``, pinned
triton 3.7.1), and compiles it with ``triton.compile(ASTSource, GPUTarget("cuda", arch, 32))`` through ttir, ttgir,
llir, ptx and ptxas to a cubin (ptxas ships in the triton wheel). A compile also fails when the kernel needs more
shared memory than the architecture has. What only a GPU can check: loading the cubin and running it.

Run it in a process where ``TRITON_INTERPRET`` is unset before triton is imported (the interpreter replaces the
kernels by Python functions that cannot be compiled); ``main`` refuses otherwise.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

__all__ = ["Launch", "record_launches", "compile_launch", "compile_all", "main", "ARCHS", "SHARED_MEM_LIMIT"]

ARCHS = (80, 90)
# Max dynamic shared memory per block (bytes): A100 (sm_80) 163 KB, H100/H200 (sm_90) 227 KB (CUDA guide, table 21).
SHARED_MEM_LIMIT = {80: 163 * 1024, 90: 227 * 1024}
SDAR_VOCAB = 151936
KERNELS = ("_confidence_partial_kernel", "_confidence_combine_kernel", "_residual_kl_fwd_kernel",
           "_residual_kl_bwd_kernel")  # fmt: skip
#: the batch-invariant numerics' kernels (triton_batch_invariant, issue 36)
BI_KERNELS = ("_bi_matmul_kernel", "_bi_attention_kernel", "_bi_row_sum_kernel", "_bi_softmax_kernel")


@dataclass
class Launch:
    """One recorded kernel launch: the JIT function, its arguments and launch options."""

    fn: object  # triton.runtime.jit.JITFunction
    grid: tuple
    args: tuple
    kwargs: dict
    scenario: str = ""
    archs: tuple = ()  # the archs to compile it for; () = every arch asked for
    key: tuple = field(default=(), repr=False)  # filled by compile_launch: what makes two launches one binary

    @property
    def name(self) -> str:
        return self.fn.__name__


class _Recorder:
    """Stands in for a JITFunction: ``kernel[grid](*args, **kw)`` records the launch instead of running it."""

    def __init__(self, fn, sink: list, scenario: list):
        self.fn, self.sink, self.scenario = fn, sink, scenario

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            label, archs = self.scenario[0]
            self.sink.append(Launch(self.fn, tuple(grid), args, dict(kwargs), label, archs))

        return launch


def _modules():
    conf = importlib.import_module("mrp_repro.kernels.triton_confidence")
    kl = importlib.import_module("mrp_repro.kernels.triton_residual_kl")
    bi = importlib.import_module("mrp_repro.kernels.triton_batch_invariant")
    from triton.runtime.jit import JITFunction

    fn = conf._confidence_partial_kernel
    if not isinstance(fn, JITFunction):
        raise RuntimeError(
            f"the kernels are {type(fn).__name__} objects, not JITFunctions: TRITON_INTERPRET was set when triton "
            "decorated them; run the compile check in a fresh process without TRITON_INTERPRET"
        )
    return conf, kl, bi


@contextmanager
def _recording(sink: list, scenario: list):
    conf, kl, bi = _modules()
    saved = [(m, n, getattr(m, n)) for m in (conf, kl) for n in KERNELS if hasattr(m, n)]
    saved += [(bi, n, getattr(bi, n)) for n in BI_KERNELS]
    flags = [(conf, "interpreter_enabled", conf.interpreter_enabled), (bi, "_check", bi._check)]
    try:
        for m, n, fn in saved:
            setattr(m, n, _Recorder(fn, sink, scenario))
        conf.interpreter_enabled = lambda: True  # the wrappers' device check: CPU tensors stand in for CUDA ones
        bi._check = lambda name, t: None  # the same for the batch-invariant wrappers (their GPU path: no UPCAST)
        yield conf, kl, bi
    finally:
        for m, n, obj in saved + flags:
            setattr(m, n, obj)


LEVELS = ("quick", "default", "all")


def _scenarios(level: str) -> Iterator[tuple[str, tuple, dict]]:
    """(label, archs or () for all, call) for the ways decoding and training call the wrappers.

    quick (the test): bf16 (the decode dtype) at the SDAR vocabulary with every flag the wrappers turn into a
    constexpr, for every arch; and a small unaligned vocabulary (V=500: BLOCK 512, no 16-divisibility, one tile, int
    arguments equal to 1, which Triton specialises into constexprs) for sm_90; the batch-invariant kernels the same
    way (SDAR-4B's decode shapes for every arch, unaligned toy shapes for sm_90). default adds fp32 and fp16 and
    V=500 for every arch; all adds every dtype for every call.
    """
    big, small = (16, SDAR_VOCAB, 8), (3, 500, 2)
    ops = ("confidence", "residual", "kl")
    if level == "quick":
        plan = [(torch.bfloat16, big, ops, ()), (torch.bfloat16, small, ops, (90,))]
    elif level == "default":
        plan = [
            (torch.bfloat16, big, ops, ()),
            (torch.bfloat16, small, ops, ()),
            (torch.bfloat16, (1, SDAR_VOCAB, 1), ops, ()),
        ]
        plan += [(dt, big, ("confidence", "kl"), ()) for dt in (torch.float32, torch.float16)]
    elif level == "all":
        plan = [(dt, shape, ops, ()) for dt in (torch.bfloat16, torch.float32, torch.float16)
                for shape in (big, small, (1, SDAR_VOCAB, 1))]  # fmt: skip
    else:
        raise ValueError(f"level {level!r}: expected one of {', '.join(LEVELS)}")
    for dt, (n, v, splits), op_set, archs in plan:
        for op in op_set:
            yield f"{op} {str(dt)[6:]} n={n} V={v}", archs, dict(op=op, dtype=dt, n=n, v=v, splits=splits)
    if level != "quick":  # A in bf16 (backbone) with C in fp32 (a head kept in fp32): the wrappers accept it
        yield "residual bf16/fp32", (), dict(op="residual", dtype=torch.bfloat16, c_dtype=torch.float32, n=16,
                                             v=SDAR_VOCAB, splits=8)  # fmt: skip
    # the batch-invariant kernels (issue 36) at SDAR-4B's decode shapes and at unaligned toy shapes
    bi_plan = {"quick": [(torch.bfloat16, "sdar", ()), (torch.bfloat16, "toy", (90,))],
               "default": [(torch.bfloat16, "sdar", ()), (torch.float32, "sdar", ()), (torch.bfloat16, "toy", ())],
               "all": [(dt, sh, ()) for dt in (torch.bfloat16, torch.float32, torch.float16) for sh in ("sdar", "toy")]}
    for dt, shapes, archs in bi_plan[level]:
        yield f"batch-invariant {str(dt)[6:]} {shapes}", archs, dict(op="bi", dtype=dt, shapes=shapes)


def record_launches(level: str = "default") -> list[Launch]:
    """Run the wrappers on CPU tensors with every kernel launch recorded (nothing runs); one Launch per launch."""
    sink: list[Launch] = []
    scenario = [("", ())]
    with _recording(sink, scenario) as (conf, kl, bi):
        for label, archs, s in _scenarios(level):
            scenario[0] = (label, archs)
            if s["op"] == "bi":
                _record_batch_invariant(bi, s["dtype"], s["shapes"])
                continue
            n, v, dt = s["n"], s["v"], s["dtype"]
            A = torch.zeros(n, v, dtype=dt)
            C = torch.zeros(n, v, dtype=s.get("c_dtype", dt))
            if s["op"] == "confidence":
                for ent in (False, True):
                    conf.confidence(A, ent, num_splits=s["splits"])
            elif s["op"] == "residual":
                tok = torch.zeros(n, dtype=torch.int64)
                for ent in (False, True):
                    for t in (None, tok):
                        conf.residual_confidence(A, C, 0.7, t, ent, num_splits=s["splits"])
            else:
                Cg = C.clone().requires_grad_()
                kl.residual_kl(A, Cg, torch.zeros(n, v, dtype=dt), 0.5).sum().backward()
    return sink


def _record_batch_invariant(bi, dt: torch.dtype, shapes: str) -> None:
    """The batch-invariant wrappers as a forward calls them: the GEMMs of a decode step (16 rows; K and N of
    SDAR-4B's projections and lm_head), attention over a cache (4-D bool mask broadcast over heads), RMSNorm's mean
    over the hidden size and head_dim, log_softmax / softmax over the vocabulary; "toy": unaligned sizes."""
    z = lambda *shape, d=dt: torch.zeros(*shape, dtype=d)  # noqa: E731
    if shapes == "sdar":
        gemms, (H, Hk, T, S, D), rows, V = [(16, 2560, 1024), (48, 9728, 2560), (16, 2560, SDAR_VOCAB)], \
            (32, 8, 16, 80, 128), [(16, 2560), (16, 32, 128)], SDAR_VOCAB  # fmt: skip
    else:
        gemms, (H, Hk, T, S, D), rows, V = [(3, 40, 24)], (4, 2, 4, 13, 8), [(5, 40)], 500
    for M, K, N in gemms:
        bi.linear(z(M, K), z(N, K))
    bi.attention(z(1, H, T, D), z(1, Hk, S, D), z(1, Hk, S, D), torch.ones(1, 1, T, S, dtype=torch.bool),
                 enable_gqa=True)  # fmt: skip
    for shape in rows:
        bi.mean(z(*shape), keepdim=True)
    for log in (False, True):
        bi.softmax(z(4, V), log=log)


def _jit_spec(launch: Launch, arch: int):
    """(target, signature, constexprs, attrs, options) as JITFunction.run builds them for this launch (3.7.1)."""
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    fn = launch.fn
    target = GPUTarget("cuda", arch, 32)
    backend = make_backend(target)
    kwargs = dict(launch.kwargs)
    # what JITFunction.run adds before binding
    kwargs["debug"] = kwargs.get("debug", fn.debug) or knobs.runtime.debug
    kwargs["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, specialization, options = binder(*launch.args, **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, specialization, options)
    launch.key = (arch, fn.__name__, repr(sorted(signature.items())), repr(sorted(constexprs.items())),
                  repr(sorted(attrs.items())), options.num_warps)  # fmt: skip
    return target, signature, constexprs, attrs, options


def compile_launch(launch: Launch, arch: int):
    """Compile one recorded launch for ``sm_<arch>`` exactly as the JIT would specialise it; return the kernel."""
    import triton
    from triton.compiler import ASTSource

    target, signature, constexprs, attrs, options = _jit_spec(launch, arch)
    kernel = triton.compile(ASTSource(launch.fn, signature, constexprs, attrs), target=target,
                            options=options.__dict__)  # fmt: skip
    shared = int(kernel.metadata.shared)
    if shared > SHARED_MEM_LIMIT[arch]:
        raise RuntimeError(f"needs {shared} bytes of shared memory; sm_{arch} has {SHARED_MEM_LIMIT[arch]}")
    if "cubin" not in kernel.asm:
        raise RuntimeError(f"no cubin produced (stages: {sorted(kernel.asm)})")
    return kernel


def resource_usage(cubin: bytes) -> dict:
    """Registers per thread and local-memory (spill) bytes of a cubin, from cuobjdump (ships in the triton wheel)."""
    import re
    import subprocess
    import tempfile
    from pathlib import Path

    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([str(tool), "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    m = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", out)
    if not m:
        raise RuntimeError(f"cuobjdump printed no resource usage: {out[-300:]!r}")
    return dict(regs=int(m[1]), stack_bytes=int(m[2]), local_bytes=int(m[4]))


def _variant(launch: Launch) -> str:
    flags = {k: v for k, v in launch.kwargs.items() if k.isupper()}
    dts = sorted({str(a.dtype).replace("torch.", "") for a in launch.args if isinstance(a, torch.Tensor)})
    ints = [a for a in launch.args if isinstance(a, int) and not isinstance(a, bool)]
    ones = sum(1 for a in ints if a == 1)
    return f"{flags} dtypes={'/'.join(dts)} num_warps={launch.kwargs.get('num_warps')} int_args_eq_1={ones}"


def compile_all(archs: Iterable[int] = ARCHS, level: str = "default") -> list[dict]:
    """Compile every distinct recorded launch for every arch; one result dict per (variant, arch).

    Keys: kernel, arch, variant, scenario, ok, error, shared, ptx_bytes, cubin_bytes, regs (per thread),
    stack_bytes, local_bytes (register spills). Never raises for a kernel that does not compile: the error (type
    and last line) is the row's ``error``.
    """
    rows, seen = [], set()
    launches = record_launches(level)
    for arch in archs:
        for launch in launches:
            if launch.archs and arch not in launch.archs:
                continue
            row = dict(kernel=launch.name, arch=f"sm_{arch}", variant=_variant(launch), scenario=launch.scenario,
                       ok=False, error="", shared=None, ptx_bytes=None, cubin_bytes=None, regs=None,
                       stack_bytes=None, local_bytes=None)  # fmt: skip
            try:
                _jit_spec(launch, arch)
                if launch.key in seen:
                    continue  # the same binary as an earlier launch
                seen.add(launch.key)
                kernel = compile_launch(launch, arch)
                row.update(ok=True, shared=int(kernel.metadata.shared), ptx_bytes=len(kernel.asm["ptx"]),
                           cubin_bytes=len(kernel.asm["cubin"]), **resource_usage(kernel.asm["cubin"]))  # fmt: skip
            except Exception as exc:  # CompilationError, PTXASError, ...: reported per variant, all variants tried
                msg = str(exc).strip().splitlines()
                row["error"] = f"{type(exc).__name__}: {msg[-1][:300] if msg else ''}"
            rows.append(row)
    return rows


def main(argv: list | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", type=int, nargs="+", default=list(ARCHS), help="CUDA compute capabilities (80 90)")
    p.add_argument(
        "--level",
        choices=LEVELS,
        default="default",
        help="quick: bf16 (the test); default: + fp32, fp16; all: every dtype x shape (minutes)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object per compile")
    a = p.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "yes", "on"):
        sys.exit("compile_check: unset TRITON_INTERPRET (the interpreter skips the compiler this checks)")
    rows = compile_all(a.arch, a.level)
    for r in rows:
        if a.json:
            print(json.dumps(r))
        else:
            status = "ok " if r["ok"] else "FAIL"
            use = f"regs {r['regs']} spill {r['local_bytes']} B" if r["ok"] else r["error"]
            print(f"{status} {r['arch']} {r['kernel']:<28} {use:<20} {r['variant']}")
    bad = [r for r in rows if not r["ok"]]
    if not a.json:
        print(
            f"compile_check: {len(rows) - len(bad)} of {len(rows)} compiles ok for sm_{', sm_'.join(map(str, a.arch))}"
        )
    return 1 if bad else 0


if __name__ == "__main__":
    from mrp_repro.cli import run_cli

    run_cli(main)  # a user error, Ctrl-C or a full disk is one error: line
