"""Benchmark (and, on CUDA, correctness check) of the hot-path kernels.

Measures, for every N in ``ns`` and the SDAR vocabulary (151,936), the time and
the achieved read bandwidth (bytes of the [N, V] inputs read / time) of

- ``triton``: the Triton kernel (CUDA only),
- ``torch``: the PyTorch eager reference (``reference.py``),
- ``torch.compile``: ``torch.compile`` of the reference ("n/a" if it fails),

for ``confidence``, ``residual_confidence`` (with tokens and entropy) and
``residual_kl`` forward and forward+backward. GPU timing: median of
``triton.testing.do_bench``; CPU timing: median of ``time.perf_counter``
over at least CPU_MIN_REPEATS calls. On CPU only the references run and the table says
"cpu: reference only".

Full GPU run (correctness vs the reference on CUDA first, then the benchmark,
writing ``checks.csv``, ``kernels.csv`` and ``kernels.png`` into ``--out``)::

    python -m mrp_repro.kernels.bench --device cuda --out figures/<profile>/

Quick CPU run (references only, small sizes)::

    python -m mrp_repro.kernels.bench --device cpu --ns 4 16 --vocab 8192 --out figures/tiny/
"""

from __future__ import annotations

import argparse
import importlib
import math
import statistics
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import torch

from . import reference as R

__all__ = ["run_benchmark", "plot_roofline", "check_against_reference", "HBM_PEAK_GBPS", "main"]

# Peak HBM bandwidth in GB/s by device-name substring (vendor figures).
HBM_PEAK_GBPS = {"H200": 4800.0, "H100": 3350.0, "A100": 2039.0}

OPS = ("confidence", "residual_confidence", "residual_kl_fwd", "residual_kl_fwd_bwd")
CPU_NOTE = "cpu: reference only"


def _triton_modules():
    conf = importlib.import_module("mrp_repro.kernels.triton_confidence")
    kl = importlib.import_module("mrp_repro.kernels.triton_residual_kl")
    return conf, kl


def _inputs(n: int, v: int, dtype: torch.dtype, device, seed: int = 0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    A = (torch.randn(n, v, generator=g) * 3).to(dtype).to(device)
    C = torch.randn(n, v, generator=g).to(dtype).to(device)
    B = (A.float() + torch.randn(n, v, generator=g)).to(dtype).to(device)
    tok = torch.randint(0, v, (n,), generator=g).to(device)
    return A, C, B, tok


def _bytes(op: str, n: int, v: int, elt: int) -> int:
    """Bytes of [N, V] traffic the op cannot avoid (O(N) outputs ignored)."""
    nv = n * v * elt
    return {
        "confidence": nv,
        "residual_confidence": 2 * nv,
        "residual_kl_fwd": 3 * nv,
        # fwd reads A,C,B; bwd reads A,C,B again and writes dC
        "residual_kl_fwd_bwd": 7 * nv,
    }[op]


def _make_fns(op: str, A, C, B, tok, impl: str) -> Callable[[], object]:
    if impl == "triton":
        conf, kl = _triton_modules()
        f_conf = lambda x: conf.confidence(x)  # noqa: E731
        f_res = lambda a, c, t: conf.residual_confidence(a, c, 1.0, t, return_entropy=True)  # noqa: E731
        f_kl = lambda a, c, b: kl.residual_kl(a, c, b, 1.0)  # noqa: E731
    else:
        f_conf = lambda x: R.confidence_ref(x)  # noqa: E731
        f_res = lambda a, c, t: R.residual_confidence_ref(a, c, 1.0, t, return_entropy=True)  # noqa: E731
        f_kl = lambda a, c, b: R.residual_kl_ref(a, c, b, 1.0)  # noqa: E731
        if impl == "torch.compile":
            f_conf, f_res, f_kl = (torch.compile(f, dynamic=False) for f in (f_conf, f_res, f_kl))
    if op == "confidence":
        return lambda: f_conf(A)
    if op == "residual_confidence":
        return lambda: f_res(A, C, tok)
    if op == "residual_kl_fwd":
        return lambda: f_kl(A, C, B)
    Cg = C.detach().clone().requires_grad_()

    def fwd_bwd():
        Cg.grad = None
        f_kl(A, Cg, B).sum().backward()

    return fwd_bwd


#: the fewest timed calls per CPU measurement, whatever `repeats` asks
CPU_MIN_REPEATS = 25


def _time_ms(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    if device.type == "cuda":
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=10, rep=max(25, 5 * repeats), return_mode="median"))
    fn()  # warm-up (and compilation)
    ts = []
    # at least CPU_MIN_REPEATS calls: a median of 5 read 30 and 94 ms for calls of 0.1-0.6 ms when a few stalls of
    # this shared 2-core machine fell inside them (figures/chain16/kernels.csv rendered at 8dd3051, discarded)
    for _ in range(max(repeats, CPU_MIN_REPEATS)):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(ts)


def run_benchmark(
    ns: Iterable[int] = (16, 64, 256, 1024),
    vocab: int = 151936,
    dtype: torch.dtype = torch.bfloat16,
    device: str | torch.device | None = None,
    *,
    ops: Iterable[str] = OPS,
    repeats: int = 5,
    compile: bool | None = None,
):
    """Time every op x N x implementation; return a pandas DataFrame.

    Columns: op, n, vocab, dtype, device, impl, time_ms, bytes_read, gbps, note.
    ``device=None`` picks CUDA when available. ``compile=None`` tries
    torch.compile on CUDA only (on CPU it needs a C++ toolchain and minutes).
    Failed or skipped measurements have NaN time and the reason in ``note``.
    """
    import pandas as pd

    dev = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    on_gpu = dev.type == "cuda"
    if compile is None:
        compile = on_gpu
    impls = ["triton", "torch", "torch.compile"]
    elt = torch.empty((), dtype=dtype).element_size()
    rows = []
    for n in ns:
        A, C, B, tok = _inputs(int(n), int(vocab), dtype, dev)
        for op in ops:
            nbytes = _bytes(op, int(n), int(vocab), elt)
            for impl in impls:
                note = ""
                t = math.nan
                if impl == "triton" and not on_gpu:
                    note = CPU_NOTE
                elif impl == "torch.compile" and not compile:
                    note = "n/a (compile not requested)"
                else:
                    try:
                        t = _time_ms(_make_fns(op, A, C, B, tok, impl), dev, repeats)
                    except Exception as exc:  # torch.compile failures, OOM, ...
                        note = (
                            f"n/a ({type(exc).__name__}: {str(exc).splitlines()[0][:80] if str(exc) else ''})"
                        )
                        if on_gpu:
                            torch.cuda.empty_cache()
                if not on_gpu and not note:
                    note = CPU_NOTE
                rows.append(
                    dict(
                        op=op,
                        n=int(n),
                        vocab=int(vocab),
                        dtype=str(dtype).replace("torch.", ""),
                        device=_device_name(dev),
                        impl=impl,
                        time_ms=t,
                        bytes_read=nbytes,
                        gbps=(nbytes / (t * 1e-3) / 1e9) if t == t else math.nan,
                        note=note,
                    )
                )
        del A, C, B, tok
    return pd.DataFrame(rows)


def _device_name(dev: torch.device) -> str:
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    return "cpu"


def _peak_gbps(device_name: str) -> float | None:
    for key, val in HBM_PEAK_GBPS.items():
        if key in device_name:
            return val
    return None


def plot_roofline(df, path_png: str | Path) -> Path:
    """Achieved read bandwidth vs N, one panel per op, one line per implementation (PNG + PDF).

    Draws the HBM peak (H200: 4.8 TB/s) as a horizontal line when the rows come
    from a known GPU. Writes ``path_png`` and returns it.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    path_png = Path(path_png)
    path_png.parent.mkdir(parents=True, exist_ok=True)
    ops = list(dict.fromkeys(df["op"]))
    fig, axes = plt.subplots(1, len(ops), figsize=(4.2 * len(ops), 3.6), squeeze=False)
    dev = str(df["device"].iloc[0]) if len(df) else "cpu"
    peak = _peak_gbps(dev)
    for ax, op in zip(axes[0], ops, strict=True):
        sub = df[df["op"] == op]
        for impl, g in sub.groupby("impl", sort=False):
            g = g.dropna(subset=["gbps"])
            if len(g):
                ax.plot(g["n"], g["gbps"], marker="o", label=impl)
        if peak:
            ax.axhline(peak, color="k", ls="--", lw=1, label=f"HBM peak {peak / 1000:.1f} TB/s")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("rows N")
        ax.set_title(op, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("achieved read bandwidth (GB/s)")
    axes[0][-1].legend(fontsize=8)
    v = int(df["vocab"].iloc[0]) if len(df) else 0
    note = "" if peak or dev != "cpu" else f" ({CPU_NOTE})"
    fig.suptitle(f"kernels, V={v}, {df['dtype'].iloc[0] if len(df) else ''}, {dev}{note}", fontsize=10)
    fig.tight_layout()
    from mrp_repro.integrity import atomic_file

    with atomic_file(path_png) as tmp:  # renamed into place: a link at the path is replaced, never written through
        fig.savefig(tmp, dpi=120, format="png")
    with atomic_file(path_png.with_suffix(".pdf")) as tmp:
        fig.savefig(tmp, format="pdf")
    plt.close(fig)
    return path_png


def check_against_reference(
    device: str | torch.device = "cuda",
    vocab: int = 151936,
    dtypes: Iterable[torch.dtype] = (torch.float32, torch.bfloat16),
    *,
    strict: bool = True,
):
    """Compare the Triton kernels with the references on ``device``; raise on mismatch unless ``strict=False``.

    Cases: N in (1, 7), each dtype of ``dtypes``, random logits, all-equal rows, a
    cross-split tie, |logits| ~ 1e4, and split invariance (the confidence outputs of
    16 rows (3 on CPU) bitwise equal at 1, 3 and the most splits, and to each row alone).
    Tolerances as in tests/test_kernels.py (entropy/log-prob tolerances 1e-3 for
    the 1e4 case, float64 reference). Returns a DataFrame, one row per check:
    check, dtype, max_abs_err (exact checks: elements differing), atol, ok.
    A kernel that fails to compile or run raises (``strict``) or gives one row with
    ok False and the error in ``check``.
    """
    import pandas as pd

    dev = torch.device(device)
    conf, kl = _triton_modules()
    rows = []
    dt = [""]  # the dtype of the checks being recorded

    def rec(name, got, ref, atol, rtol=1e-5):
        err = (got.detach().double() - ref.detach().double()).abs()
        bound = atol + rtol * ref.detach().double().abs()
        ok = bool((err <= bound).all())
        rows.append(dict(check=name, dtype=dt[0], max_abs_err=float(err.max()) if err.numel() else 0.0, atol=atol,
                         ok=ok))  # fmt: skip

    def rec_exact(name, got, ref):
        rows.append(dict(check=name, dtype=dt[0], max_abs_err=float((got != ref).sum()), atol=0.0,
                         ok=bool(torch.equal(got, ref))))  # fmt: skip

    def cases(dtype):
        for n in (1, 7):
            A, C, B, tok = _inputs(n, vocab, dtype, dev, seed=n)
            tag = f"{str(dtype)[6:]} n={n}"
            o, r = conf.confidence(A, True), R.confidence_ref(A, True)
            rec_exact(f"confidence argmax {tag}", o.argmax, r.argmax)
            rec(f"confidence max_prob {tag}", o.max_prob, r.max_prob, 1e-5)
            rec(f"confidence entropy {tag}", o.entropy, r.entropy, 1e-4)
            o = conf.residual_confidence(A, C, 0.7, tok, True)
            r = R.residual_confidence_ref(A, C, 0.7, tok, True)
            rec_exact(f"residual argmax {tag}", o.argmax, r.argmax)
            for f in ("max_prob", "entropy", "c_at_token", "logp_at_token", "logp_base_at_token"):
                rec(f"residual {f} {tag}", getattr(o, f), getattr(r, f), 1e-5 if f == "max_prob" else 1e-4)
            c1 = C.clone().requires_grad_()
            c2 = C.clone().requires_grad_()
            k1, k2 = kl.residual_kl(A, c1, B, 0.5), R.residual_kl_ref(A, c2, B, 0.5)
            rec(f"residual_kl {tag}", k1, k2, 1e-4, 1e-4)
            k1.sum().backward()
            k2.sum().backward()
            rec(
                f"residual_kl grad {tag}",
                c1.grad,
                c2.grad,
                1e-6 if dtype == torch.float32 else 1e-4,
                1e-4 if dtype == torch.float32 else 1e-2,
            )
        # split invariance: the split count (from rows and SMs on CUDA) must not move a bit of any output
        ni = 16 if dev.type == "cuda" else 3  # the interpreter (CPU) pays per launch
        A, C, _, tok = _inputs(ni, vocab, dtype, dev, seed=16)
        tiles = conf._tiling(vocab, conf._default_block(vocab))[1]
        auto = conf.residual_confidence(A, C, 0.7, tok, True)
        for s in sorted({1, 3, tiles}):
            o = conf.residual_confidence(A, C, 0.7, tok, True, num_splits=s)
            for f in o._fields:
                rec_exact(f"split invariance residual {f} {str(dtype)[6:]} n={ni} splits={s} vs auto",
                          getattr(o, f), getattr(auto, f))  # fmt: skip
        alone = [conf.confidence(A[i : i + 1], True) for i in range(ni)]
        batch = conf.confidence(A, True)
        for f in ("argmax", "max_prob", "entropy"):
            rec_exact(f"batch invariance confidence {f} {str(dtype)[6:]} n={ni} vs each row alone",
                      getattr(batch, f), torch.cat([getattr(a, f) for a in alone]))  # fmt: skip

    for dtype in dtypes:
        dt[0] = str(dtype).replace("torch.", "")
        try:
            cases(dtype)
        except Exception as exc:  # a kernel that does not compile or run
            if strict:
                raise
            rows.append(dict(check=f"kernels on {dev} ({type(exc).__name__}: {str(exc).strip()[-200:]})",
                             dtype=dt[0], max_abs_err=math.nan, atol=math.nan, ok=False))  # fmt: skip
    dt[0] = "float32"
    try:
        x = torch.zeros(4, vocab, device=dev)
        x[1] = 7.5
        x[2, [vocab // 3, vocab - 1]] = 2.0
        x[3] = torch.randn(vocab, device=dev) * 1e4
        o, r = conf.confidence(x, True), R.confidence_ref(x.double(), True)
        rec_exact("ties/extreme argmax", o.argmax, r.argmax)
        rec_exact("ties argmax == [0, 0, V/3]", o.argmax[:3].cpu(), torch.tensor([0, 0, vocab // 3]))
        rec("ties/extreme max_prob", o.max_prob, r.max_prob, 1e-5)
        rec("ties/extreme entropy", o.entropy, r.entropy, 1e-3)
    except Exception as exc:
        if strict:
            raise
        rows.append(dict(check=f"ties/extreme ({type(exc).__name__}: {str(exc).strip()[-200:]})", dtype=dt[0],
                         max_abs_err=math.nan, atol=math.nan, ok=False))  # fmt: skip
    df = pd.DataFrame(rows, columns=["check", "dtype", "max_abs_err", "atol", "ok"])
    bad = df[~df["ok"]]
    if strict and len(bad):
        raise AssertionError(f"Triton kernels disagree with the reference on {dev}:\n{bad.to_string()}")
    return df


def write_csv(df, path: Path) -> None:
    """df.to_csv through a temporary name renamed into place (integrity.atomic_file): a link at path is replaced."""
    from mrp_repro.integrity import atomic_file

    with atomic_file(path) as tmp:
        df.to_csv(tmp, index=False)


def main(argv: list | None = None) -> dict[str, Path]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="figures/tiny", help="output directory (or a .csv path)")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda if available)")
    p.add_argument(
        "--ns", type=int, nargs="+", default=None, help="row counts (default 16 64 256 1024; cpu: 4 16)"
    )
    p.add_argument("--vocab", type=int, default=None, help="vocabulary size (default 151936; cpu: 8192)")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32", "float16"])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile of the reference")
    p.add_argument("--skip-checks", action="store_true", help="skip the CUDA correctness checks")
    a = p.parse_args(argv)
    dev = torch.device(a.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    out = Path(a.out)
    csv = out if out.suffix == ".csv" else out / "kernels.csv"
    csv.parent.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    gpu = dev.type == "cuda"
    if gpu and not a.skip_checks:
        checks = check_against_reference(dev)
        paths["checks"] = csv.with_name("checks.csv")
        write_csv(checks, paths["checks"])
        print(f"correctness on {dev}: {len(checks)} checks passed")
    ns = a.ns or ([16, 64, 256, 1024] if gpu else [4, 16])
    vocab = a.vocab or (151936 if gpu else 8192)
    df = run_benchmark(
        ns, vocab, getattr(torch, a.dtype), dev, repeats=a.repeats, compile=False if a.no_compile else None
    )
    write_csv(df, csv)  # renamed into place: a link at figures/<profile>/kernels.csv is replaced
    paths["csv"] = csv
    paths["png"] = plot_roofline(df, csv.with_suffix(".png"))
    import pandas as pd

    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(df.to_string(index=False))
    print("wrote", ", ".join(str(v) for v in paths.values()))
    return paths


if __name__ == "__main__":
    from mrp_repro.cli import run_cli

    run_cli(main)
