"""One GPU check (issues 14, 30): the kernels against their reference, the verify paths at SDAR-4B shapes, the
engine, one CSV per section, each written as soon as its section finishes.

    make gpu-check                                                # no network: the machine's CUDA torch (Makefile)
    python -m mrp_repro.gpu_check --out DIR                       # on a CUDA machine: ~6 min on one H100/H200 (below)
    python -m mrp_repro.gpu_check --out DIR --device cpu --small  # the same code, tiny shapes (tests/)
    sh scripts/gpu_probe.sh                                       # a lent GPU, end to end, under $OUT

--out DIR is the only place it writes: DIR/<section>.csv per section (columns: section, item, value, unit, ok,
note; ok is True/False for a check, blank for a measurement), and DIR/gpu_check.{csv,md}, all rows so far,
rewritten after every section, so a crash in one section keeps every earlier one. The exit status is 1 when any
check failed (ok False), after everything ran. Sections, in order (--sections picks some):
  kernel_check     each Triton kernel (the module itself, and the dispatch the engine calls) against the PyTorch
                   reference on the device, fp32 and bf16, rows 1..256, vocabulary 151,936: argmax exact, the
                   rest within tests/test_kernels.py's tolerances
  batch_invariance the confidence kernel's outputs of one row computed alone and inside batches of 16 and 256
                   rows (the kernel's split count depends on the row count): rows whose bits differ
  verify_bitwise   random weights at SDAR-4B widths (hidden 2560, 32/8 heads, head_dim 128, FFN 9728, vocabulary
                   151,936; 2 layers), bf16 and fp32, batch 1/4/16, K = 3 candidates of a block of 16: each verify
                   path's logits against loop's (one forward_block per candidate): bitwise, max |diff|. Where
                   fold is bitwise, decoding.verify "exact" ("checked" on CUDA) verifies in one call.
  mismatch         mismatch.mismatch_table in bf16 on the device (toy model): speculative decodes differing from
                   Static(1) per verify path (0 expected for exact, fold where bitwise, loop, checked)
  kernels          kernels.bench.run_benchmark: ms and GB/s per op x rows x implementation (no torch.compile)
  engine           SDAR-4B shapes, all 36 layers, bf16, batch 1: block forward against the HBM roofline (the
                   quick check's --forward-ms), each verify path of 4 candidates and a head step in forwards,
                   speculative(3, mrp) rounds per second, eager, growing and static cache
  engine_compiled  model.compile_model in the mode CUDA gets ("reduce-overhead": CUDA graphs, graph_safe) at
                   SDAR-4B widths with 4 layers (compile time bounded): tokens equal eager, rounds per second

Time on one H100/H200, estimated (not yet run on one), from what each section launches and moves: kernel_check
~1 min (about a dozen Triton compiles of 1-2 s, the 151,936-wide inputs drawn on the CPU), batch_invariance and
verify_bitwise seconds (~1e9 parameters initialised twice, 15 verifies), mismatch ~1 min (~75 toy generations of
~50 forwards at ~100 launches each, Python-bound), kernels seconds, engine ~0.5 min (8.8 GB of weights initialised,
4 generations of ~32 rounds of ~15 ms), engine_compiled 2-4 min (inductor compiles of each call kind at 4 layers):
~5-7 min. It runs last, so scripts/gpu_probe.sh's 480 s limit cuts only it.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import sys
import time
from pathlib import Path

import pandas as pd
import torch

from mrp_repro.model import ModelConfig, SDARModel, compile_model, count_parameters

SDAR_4B = ModelConfig(151936, 2560, 9728, 36, 32, 8, 128)
SMALL = ModelConfig(512, 64, 128, 2, 4, 2, 16)
COLUMNS = ["section", "item", "value", "unit", "ok", "note"]
SECTIONS = ("kernel_check", "batch_invariance", "verify_bitwise", "mismatch", "kernels", "engine", "engine_compiled")


def _sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _ms(fn, dev, repeats: int) -> float:
    fn()
    _sync(dev)
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        _sync(dev)
        ts.append(time.perf_counter() - t0)
    return 1e3 * sorted(ts)[len(ts) // 2]


def _row(section, item, value, unit, ok=None, note=""):
    return dict(section=section, item=item, value=value, unit=unit, ok=ok, note=note)


def _err(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]


# -- kernels against the reference -------------------------------------------------------------------------------
def _compare(section, item, got, ref, atol, rtol=1e-5):
    got, ref = got.detach().double().cpu(), ref.detach().double().cpu()
    if atol is None:
        bad = int((got != ref).sum())
        return _row(section, item, bad, "elements differing", bad == 0, "exact")
    err = (got - ref).abs()
    ok = bool((err <= atol + rtol * ref.abs()).all())
    return _row(section, item, float(err.max()) if err.numel() else 0.0, "max abs error", ok, f"atol {atol:g}")


def kernel_check_rows(dev, small: bool) -> list[dict]:
    from mrp_repro.kernels import dispatch, select_backend
    from mrp_repro.kernels import reference as R
    from mrp_repro.kernels.bench import _inputs

    S, V = "kernel_check", 512 if small else 151936
    try:
        conf = importlib.import_module("mrp_repro.kernels.triton_confidence")
        kl = importlib.import_module("mrp_repro.kernels.triton_residual_kl")
    except Exception as exc:  # no triton: the dispatch rows below still run (the reference)
        conf = kl = None
        rows = [_row(S, "import the Triton kernels", float("nan"), "", False, _err(exc))]
    else:
        rows = []
    for dtype in (torch.float32, torch.bfloat16):
        for n in (1, 7, 16) if small else (1, 7, 16, 256):
            A, C, B, tok = _inputs(n, V, dtype, dev, seed=n)
            tag = f"{str(dtype)[6:]} n={n}"
            impls = ([("triton", conf, kl)] if conf is not None else []) + [("dispatch", dispatch, dispatch)]
            for impl, cm, km in impls:
                who = f"{impl}" if impl == "triton" else f"dispatch ({select_backend(A)[0]})"
                try:
                    o, r = cm.confidence(A, True), R.confidence_ref(A, True)
                    rows += [_compare(S, f"{who} confidence argmax {tag}", o.argmax, r.argmax, None),
                             _compare(S, f"{who} confidence max_prob {tag}", o.max_prob, r.max_prob, 1e-5),
                             _compare(S, f"{who} confidence entropy {tag}", o.entropy, r.entropy, 1e-4)]  # fmt: skip
                    o, r = cm.residual_confidence(A, C, 0.7, tok, True), R.residual_confidence_ref(A, C, 0.7, tok, True)
                    rows.append(_compare(S, f"{who} residual argmax {tag}", o.argmax, r.argmax, None))
                    for f in ("max_prob", "entropy", "c_at_token", "logp_at_token", "logp_base_at_token"):
                        rows.append(_compare(S, f"{who} residual {f} {tag}", getattr(o, f), getattr(r, f),
                                             1e-5 if f == "max_prob" else 1e-4))  # fmt: skip
                    c1, c2 = C.clone().requires_grad_(), C.clone().requires_grad_()
                    k1, k2 = km.residual_kl(A, c1, B, 0.5), R.residual_kl_ref(A, c2, B, 0.5)
                    rows.append(_compare(S, f"{who} residual_kl {tag}", k1, k2, 1e-4, 1e-4))
                    k1.sum().backward()
                    k2.sum().backward()
                    f32 = dtype == torch.float32
                    rows.append(_compare(S, f"{who} residual_kl grad {tag}", c1.grad, c2.grad, 1e-6 if f32 else 1e-4,
                                         1e-4 if f32 else 1e-2))  # fmt: skip
                except Exception as exc:  # a kernel that does not compile or run: a failed check, not a crash
                    rows.append(_row(S, f"{who} {tag}", float("nan"), "", False, _err(exc)))
    return rows


def batch_invariance_rows(dev, small: bool) -> list[dict]:
    """Each row's confidence computed alone vs inside the first n rows of a batch: rows whose bits differ, for the
    Triton kernel itself and for the dispatch the engine calls (on CPU: the reference)."""
    from mrp_repro.kernels import dispatch, select_backend

    S, V, ns = "batch_invariance", 512 if small else 151936, (4, 16) if small else (16, 256)
    rows = []
    g = torch.Generator().manual_seed(0)
    impls = [("dispatch", dispatch)]
    try:
        impls.insert(0, ("triton", importlib.import_module("mrp_repro.kernels.triton_confidence")))
    except Exception as exc:
        rows.append(_row(S, "import the Triton kernels", float("nan"), "", False, _err(exc)))
    for dtype in (torch.float32, torch.bfloat16):
        x = (torch.randn(max(ns), V, generator=g) * 3).to(dtype).to(dev)
        for impl, mod in impls:
            who = impl if impl == "triton" else f"dispatch ({select_backend(x)[0]})"
            try:
                alone = [mod.confidence(x[i : i + 1], True) for i in range(max(ns))]
                for n in ns:
                    o = mod.confidence(x[:n], True)
                    for f in ("argmax", "max_prob", "entropy"):
                        one = torch.cat([getattr(a, f) for a in alone[:n]])
                        bad = int((getattr(o, f) != one).sum())
                        rows.append(_row(S, f"{who} confidence {f} {str(dtype)[6:]} batch {n} vs 1", bad,
                                         f"of {n} rows differ", bad == 0, "bitwise"))  # fmt: skip
            except Exception as exc:
                rows.append(_row(S, f"{who} confidence {str(dtype)[6:]}", float("nan"), "", False, _err(exc)))
    return rows


# -- verify paths at SDAR-4B shapes --------------------------------------------------------------------------------
def _random_model(cfg, dtype, dev, seed=0):
    g = torch.Generator(device=dev).manual_seed(seed)
    with torch.device(dev):
        return SDARModel(cfg).to(dtype).init_weights(0.02, g).eval()


@torch.no_grad()
def verify_bitwise_rows(dev, small: bool) -> list[dict]:
    from mrp_repro.model import VERIFY_PATHS

    S = "verify_bitwise"
    cfg, L, batches = (SMALL, 4, (1, 4)) if small else (dataclasses.replace(SDAR_4B, num_layers=2), 16, (1, 4, 16))
    rows, M = [], 3
    for dtype in (torch.bfloat16, torch.float32):
        model = _random_model(cfg, dtype, dev)
        for B in batches:
            g = torch.Generator().manual_seed(B)
            C = 4 * L
            ctx = torch.randint(3, cfg.vocab_size, (B, C), generator=g).to(dev)
            cand = torch.randint(3, cfg.vocab_size, (B, M, L), generator=g).to(dev)
            cache = model.new_cache(B, C)
            model.prefill(ctx, torch.arange(C, device=dev)[None].expand(B, -1), torch.ones(B, C, dtype=torch.bool,
                          device=dev), cache, L)  # fmt: skip
            pos = (C + torch.arange(L, device=dev))[None].expand(B, -1)
            loop = model.forward_candidates(cand, pos, cache, verify="loop")
            for path in [p for p in VERIFY_PATHS if p != "loop"]:
                try:
                    out = model.forward_candidates(cand, pos, cache, verify=path)
                    diff = float((out.logits.float() - loop.logits.float()).abs().max())
                    same = bool(torch.equal(out.logits, loop.logits) and torch.equal(out.hidden, loop.hidden))
                    # packed rounds differently by design (a different attention length): a measurement, not a check
                    ok = same if path != "packed" else None
                    rows.append(_row(S, f"{str(dtype)[6:]} batch {B} K={M} verify={path}", diff,
                                     "max |logit - loop's|", ok, f"bitwise={same}"))  # fmt: skip
                except Exception as exc:
                    rows.append(_row(S, f"{str(dtype)[6:]} batch {B} verify={path}", float("nan"), "", False,
                                     _err(exc)))  # fmt: skip
        del model
    return rows


def mismatch_rows(dev, small: bool) -> list[dict]:
    from mrp_repro.decoding.mismatch import mismatch_table

    kw = dict(seeds=(0,), blocks=(4,), Ks=(3,), drafters=("mrp",), n_prompts=4, batch=4) if small else \
        dict(seeds=(0,), blocks=(4, 16), Ks=(3,))  # fmt: skip
    paths = ("exact", "fold", "loop", "packed", "checked")
    df = mismatch_table(dtypes=("bfloat16",), paths=paths, device=str(dev), **kw)
    return [_row("mismatch", f"bf16 verify={r.path}", r.rows_differing, f"of {r.rows} rows",
                 None if r.path in ("packed", "fold") else r.rows_differing == 0,
                 f"bitwise={r.bitwise} max_logit_diff={r.max_logit_diff:.3g}") for r in df.itertuples()]  # fmt: skip


def kernel_rows(dev, small: bool) -> list[dict]:
    from mrp_repro.kernels.bench import run_benchmark

    df = run_benchmark(ns=(16,) if small else (16, 64, 256), vocab=2048 if small else 151936, device=dev,
                       repeats=2 if small else 5, compile=False)  # fmt: skip
    return [_row("kernels", f"{r.op} n={r.n} {r.impl}", r.time_ms, "ms", None,
                 f"{r.gbps:.0f} GB/s" if pd.notna(r.gbps) else str(r.note)) for r in df.itertuples()]  # fmt: skip


# -- the engine ----------------------------------------------------------------------------------------------------
def _engine_setup(cfg, dev, L, dtype=torch.bfloat16):
    from mrp_repro.mrp import MRPHead

    model = _random_model(cfg, dtype, dev)
    g = torch.Generator(device=dev).manual_seed(1)
    with torch.device(dev):
        head = MRPHead(cfg, 1).to(dtype).init_weights("normal", 0.02, g).eval()
    prompt = [torch.randint(3, cfg.vocab_size, (4 * L + 3,), generator=torch.Generator().manual_seed(1)).tolist()]
    return model, head, prompt


def _rounds_per_s(rows, section, tag, model, head, prompt, L, dev, static_cache=False):
    from mrp_repro.decoding import Speculative, generate

    pol = Speculative(3, "mrp", head=head)
    run = lambda: generate(model, prompt, pol, L, 1, [2], 2 * L, pad_id=0, trace=False,  # noqa: E731
                           static_cache=static_cache)  # fmt: skip
    run()  # warm-up (compiled: the compilation; checked verify: its one check per shape)
    _sync(dev)
    t0 = time.perf_counter()
    r = run()
    _sync(dev)
    dt = time.perf_counter() - t0
    rows.append(_row(section, f"speculative(3,mrp) {tag}", r.stats[0].rounds / dt, "rounds/s", None,
                     f"{dt * 1e3:.1f} ms for {r.stats[0].tokens} tokens"))  # fmt: skip
    return r.tokens


@torch.no_grad()
def engine_rows(dev, small: bool) -> list[dict]:
    from mrp_repro.kernels.bench import _device_name, _peak_gbps
    from mrp_repro.model import VERIFY_PATHS

    S = "engine"
    cfg, L, reps = (SMALL, 4, 3) if small else (SDAR_4B, 16, 10)
    model, head, prompt = _engine_setup(cfg, dev, L)
    rows = []
    C = 4 * L
    ctx = torch.randint(3, cfg.vocab_size, (1, C), device=dev)
    ids = torch.randint(3, cfg.vocab_size, (1, L), device=dev)
    cpos, pos = torch.arange(C, device=dev)[None], (C + torch.arange(L, device=dev))[None]
    kv = torch.ones(1, C, dtype=torch.bool, device=dev)
    cache = model.new_cache(1, C)
    out = model.prefill(ctx, cpos, kv, cache, L)
    t1 = _ms(lambda: model.forward_block(ids, pos, cache), dev, reps)
    wbytes = count_parameters(model) * 2
    peak = _peak_gbps(_device_name(dev))
    roof = wbytes / (peak * 1e9) * 1e3 if peak else float("nan")
    rows.append(_row(S, "block forward (batch 1)", t1, "ms", None,
                     f"HBM roofline {roof:.3f} ms ({wbytes / 1e9:.2f} GB / {peak} GB/s): {roof / t1:.0%}"
                     if peak else "no bandwidth figure for this device"))  # fmt: skip
    cand = ids[:, None].expand(1, 3, L).contiguous()
    for path in VERIFY_PATHS:
        t = _ms(lambda p=path: model.forward_candidates(cand, pos, cache, verify=p), dev, reps)
        rows.append(_row(S, f"verify K=3 verify={path}", t / t1, "forwards", None, f"{t:.3f} ms"))
    hcache = head.new_cache(1, C)
    head.commit(out.hidden, ctx, cpos, model.embed_tokens, hcache, key_valid=kv, block_size=L)
    h = model.forward_block(ids, pos, cache).hidden
    t = _ms(lambda: model.lm_head(head.step(h, ids, pos, model.embed_tokens, hcache)), dev, reps)
    rows.append(_row(S, "head step + lm_head", t / t1, "forwards", None, f"{t:.3f} ms"))
    _rounds_per_s(rows, S, "eager", model, head, prompt, L, dev)
    _rounds_per_s(rows, S, "eager, static cache", model, head, prompt, L, dev, static_cache=True)
    return rows


@torch.no_grad()
def engine_compiled_rows(dev, small: bool) -> list[dict]:
    """compile_model in CUDA's mode ("reduce-overhead"); on CPU inductor skips the graphs (and needs gcc, minutes)."""
    S = "engine_compiled"
    cfg, L = (SMALL, 4) if small else (dataclasses.replace(SDAR_4B, num_layers=4), 16)
    model, head, prompt = _engine_setup(cfg, dev, L)
    rows = []
    eager = _rounds_per_s(rows, S, "eager (4 layers)", model, head, prompt, L, dev)
    eager_static = _rounds_per_s(rows, S, "eager, static cache", model, head, prompt, L, dev, static_cache=True)
    t0 = time.perf_counter()
    compile_model(model, head, mode="reduce-overhead")
    for tag, static, want in (("compiled", False, eager), ("compiled, static cache", True, eager_static)):
        try:
            got = _rounds_per_s(rows, S, tag, model, head, prompt, L, dev, static_cache=static)
            rows.append(_row(S, f"{tag}: tokens equal eager", float(got == want), "", got == want))
        except Exception as exc:  # a CUDA-graph error here is what this section exists to find
            rows.append(_row(S, tag, float("nan"), "", False, _err(exc)))
    rows.append(_row(S, "compile + both compiled runs", time.perf_counter() - t0, "s"))
    return rows


SECTION_FNS = {"kernel_check": kernel_check_rows, "batch_invariance": batch_invariance_rows,
               "verify_bitwise": verify_bitwise_rows, "mismatch": mismatch_rows, "kernels": kernel_rows,
               "engine": engine_rows, "engine_compiled": engine_compiled_rows}  # fmt: skip


def _write(out: Path, device: str, section: str, rows: list[dict], done: list[dict]) -> None:
    from mrp_repro.report.tables import markdown

    pd.DataFrame(rows, columns=COLUMNS).to_csv(out / f"{section}.csv", index=False)
    df = pd.DataFrame(done, columns=COLUMNS)
    df.to_csv(out / "gpu_check.csv", index=False)
    (out / "gpu_check.md").write_text(f"# gpu_check on {device}\n\n" + markdown(df) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="the directory it writes (and nothing else)")
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    ap.add_argument("--small", action="store_true", help="tiny shapes: the same code in seconds")
    ap.add_argument("--sections", default=None, help=f"comma-separated, of {','.join(SECTIONS)} (default: all; on "
                    "CPU all but engine_compiled, which inductor takes many minutes to compile there)")  # fmt: skip
    a = ap.parse_args(argv)
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit(f"gpu_check: no CUDA device here (torch {torch.__version__}, CUDA build {torch.version.cuda}); run it "
                 "on a GPU machine, or pass --device cpu --small")  # fmt: skip
    if a.sections is None:
        a.sections = ",".join(s for s in SECTIONS if s != "engine_compiled" or a.device.startswith("cuda"))
    sections = [s for s in a.sections.split(",") if s]
    bad = [s for s in sections if s not in SECTION_FNS]
    if bad:
        sys.exit(f"gpu_check: unknown section(s) {bad}; choose from {','.join(SECTIONS)}")
    dev = torch.device(a.device)
    if dev.type == "cpu" and "mrp_repro.kernels.triton_confidence" not in sys.modules:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # Triton runs on CPU only interpreted, set before its import
    a.out.mkdir(parents=True, exist_ok=True)
    done: list[dict] = []
    for s in sections:
        t0 = time.perf_counter()
        try:
            rows = SECTION_FNS[s](dev, a.small)
        except Exception as exc:  # the section's failure is its row; the next sections still run
            rows = [_row(s, "section failed", float("nan"), "", False, _err(exc))]
        rows.append(_row(s, "section time", time.perf_counter() - t0, "s"))
        done += rows
        _write(a.out, a.device, s, rows, done)
        failed = sum(r["ok"] is False for r in rows)
        print(f"gpu_check: {s}: {len(rows)} rows, {failed} failed checks, {rows[-1]['value']:.1f} s -> "
              f"{a.out / (s + '.csv')}", flush=True)  # fmt: skip
    failed = [r for r in done if r["ok"] is False]
    print(f"gpu_check: wrote {a.out / 'gpu_check.md'}; {len(failed)} failed check(s)"
          + "".join(f"\n  {r['section']}: {r['item']} ({r['note']})" for r in failed[:20]))  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
