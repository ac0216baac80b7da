"""One GPU check (issues 14, 30, 36): the environment, the kernels against their reference, the batch-invariant mode,
the verify paths at SDAR-4B shapes, the engine eager and compiled; one CSV per section, written as its rows come.

    make gpu-check                                                # no network: the machine's CUDA torch (Makefile)
    python -m mrp_repro.gpu_check --out DIR                       # on a CUDA machine: ~6-8 min on one H100/H200
    python -m mrp_repro.gpu_check --out DIR --device cpu --small  # the same code, tiny shapes (tests/)
    sh scripts/gpu_probe.sh                                       # a lent GPU, end to end, under $OUT

--out DIR is the only place it writes: DIR/<section>.csv per section (columns: section, item, value, unit, ok,
note) and DIR/gpu_check.{csv,md}, all rows so far, rewritten at every row, so a crash or a time limit inside a
section keeps every row before it. ok is True/False for a check, blank for a measurement; only what our code
promises is a check (a row of ours that is wrong), never what the device's kernels may do (a fold that rounds
apart, inductor's bf16 fusions): those are measured. The exit status is 1 when any check failed, after everything
ran. Sections, in order (--sections picks some; docs/gpu.md: what a first GPU run shows and what is a failure):
  environment      a record: torch / CUDA / cuDNN / cuBLAS / triton / flash-attn versions, the device, its clock
                   state (nvidia-smi), the numerics flags, and the attention backend SDPA picks for each call form
                   (torch._fused_sdp_choice: block forward and fold with the 4-D mask, upstream unmasked and 3-D mask)
  kernel_check     each Triton kernel (the module itself, and the dispatch the engine calls) against the PyTorch
                   reference on the device, fp32 and bf16, rows 1..256, vocabulary 151,936: argmax exact, the
                   rest within tests/test_kernels.py's tolerances
  batch_invariance the confidence kernel's outputs of one row computed alone and inside batches of 16 and 256
                   rows: rows whose bits differ (0: its tiles depend on V alone)
  invariant_mode   kernels.batch_invariant: each Triton kernel (linear, attention, mean, rms_norm, log_softmax) and
                   the reference within tolerance of float64, each kernel's rows alone bitwise its rows in a batch,
                   Speculative(3) token-identical to Static(1) in the mode (toy model, bf16), one call per verify
  verify_bitwise   random weights at SDAR-4B widths (hidden 2560, 32/8 heads, head_dim 128, FFN 9728, vocabulary
                   151,936; 2 layers), bf16 and fp32, batch 1/4/16, K = 3 candidates of a block of 16: each verify
                   path's logits against loop's: checks for exact, checked and exact in the batch-invariant mode;
                   fold and packed measured (whether the device plans the fold like the block forward)
  mismatch         mismatch.mismatch_table in bf16 on the device (toy model): speculative decodes differing from
                   Static(1) per verify path (checks: 0 for exact, loop, checked; fold, packed measured)
  kernels          kernels.bench.run_benchmark: ms and GB/s per op x rows x implementation (no torch.compile)
  engine           SDAR-4B shapes, all 36 layers, bf16, batch 1: block forward against the HBM roofline (the
                   quick check's --forward-ms), each verify path of 3 candidates and a head step in forwards,
                   speculative(3, mrp) rounds per second and static(1) tokens per second, eager, growing and static
                   cache; the batch-invariant mode's block forward, verify and both decodings (its cost)
  engine_compiled  model.compile_model at SDAR-4B widths with 4 layers, growing and static cache: CUDA graphs
                   ("reduce-overhead", graph_safe) against the same compile without graphs (check: equal tokens);
                   compiled-vs-eager token agreement (a measured share); rounds per second; graphs compiled, under
                   a recompile limit of 64 with a hit made an error (dynamo's default 8 let part of it run eagerly);
                   the bytes a replay copies into graph inputs per call kind (model.replay_copy_bytes, static cache:
                   a check that no KV cache tensor is among them) and the CUDA graphs inductor skipped

Time on one H100/H200, estimated (not yet run on one), from what each section launches and moves: environment
seconds, kernel_check ~1 min (about a dozen Triton compiles of 1-2 s, the 151,936-wide inputs drawn on the CPU),
batch_invariance seconds, invariant_mode ~0.5 min (10 kernel compiles, the reference's ~20k small launches),
verify_bitwise seconds (~1e9 parameters initialised twice, 15 verifies; the mode's kernels compile once), mismatch
~1 min (~75 toy generations of ~50 forwards at ~100 launches each, Python-bound), kernels seconds, engine ~1 min
(8.8 GB of weights initialised, 8 generations of ~32 rounds of ~15-50 ms), engine_compiled 3-5 min (two inductor
compiles of each call kind at 4 layers; the replay-copy trace ~10-30 s): ~7-9 min. It runs last, so
scripts/gpu_probe.sh's 480 s limit cuts only it (its rows so far are kept).
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
SECTIONS = ("environment", "kernel_check", "batch_invariance", "invariant_mode", "verify_bitwise", "mismatch",
            "kernels", "engine", "engine_compiled")  # fmt: skip


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


class _Sink(list):
    """The running section's rows: every append / extend writes the section's CSV and the running gpu_check.{csv,md}
    at once (main sets it), so a crash or scripts/gpu_probe.sh's time limit inside a section keeps its rows so far."""

    def __init__(self, flush=None):
        super().__init__()
        self.flush = flush

    def append(self, row):
        super().append(row)
        if self.flush is not None:
            self.flush(self)

    def extend(self, rows):
        super().extend(rows)
        if self.flush is not None:
            self.flush(self)

    def __iadd__(self, rows):
        self.extend(rows)
        return self


_SINK: list = [None]  # the running section's _Sink (main); None: a section called directly collects in a plain list


def _rows() -> list:
    """Where a section appends its rows: main's live sink, else a new list."""
    return _SINK[0] if _SINK[0] is not None else []


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
        rows = _rows()
        rows.append(_row(S, "import the Triton kernels", float("nan"), "", False, _err(exc)))
    else:
        rows = _rows()
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
    rows = _rows()
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
    """Every verify path against loop. Checks: the paths that promise loop's bits ("exact", "checked", "loop" itself
    trivially; "exact" inside batch_invariant()); measured only: "fold" (bitwise where the device's kernels plan
    the fold like the block forward, which a GPU need not: the reason "checked" exists) and "packed"."""
    from mrp_repro.kernels.batch_invariant import batch_invariant
    from mrp_repro.model import VERIFY_PATHS

    S = "verify_bitwise"
    cfg, L, batches = (SMALL, 4, (1, 4)) if small else (dataclasses.replace(SDAR_4B, num_layers=2), 16, (1, 4, 16))
    rows, M = _rows(), 3
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
            for path in [p for p in VERIFY_PATHS if p != "loop"] + ["exact (batch-invariant mode)"]:
                try:
                    if path.endswith("mode)"):
                        with batch_invariant():
                            ref = model.forward_candidates(cand, pos, cache, verify="loop")
                            out = model.forward_candidates(cand, pos, cache, verify="exact")
                    else:
                        ref, out = loop, model.forward_candidates(cand, pos, cache, verify=path)
                    diff = float((out.logits.float() - ref.logits.float()).abs().max())
                    same = bool(torch.equal(out.logits, ref.logits) and torch.equal(out.hidden, ref.hidden))
                    ok = same if path in ("exact", "checked", "exact (batch-invariant mode)") else None
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


def _rounds_per_s(rows, section, tag, model, head, prompt, L, dev, static_cache=False, policy=None):
    """Speculative(3, mrp) (or `policy`) on `prompt`, timed after a warm-up: rounds/s (tokens/s for a policy that
    makes no rounds); returns the tokens."""
    from mrp_repro.decoding import Speculative, generate

    pol = policy if policy is not None else Speculative(3, "mrp", head=head)
    run = lambda: generate(model, prompt, pol, L, 1, [2], 2 * L, pad_id=0, trace=False,  # noqa: E731
                           static_cache=static_cache)  # fmt: skip
    run()  # warm-up (compiled: the compilation; checked verify: its one check per shape)
    _sync(dev)
    t0 = time.perf_counter()
    r = run()
    _sync(dev)
    dt = time.perf_counter() - t0
    st = r.stats[0]
    if st.rounds:
        rows.append(_row(section, f"{pol.name} {tag}", st.rounds / dt, "rounds/s", None,
                         f"{dt * 1e3:.1f} ms for {st.tokens} tokens"))  # fmt: skip
    else:
        rows.append(_row(section, f"{pol.name} {tag}", st.tokens / dt, "tokens/s", None,
                         f"{dt * 1e3:.1f} ms for {st.tokens} tokens, {st.denoise_forwards} forwards"))  # fmt: skip
    return r.tokens


@torch.no_grad()
def engine_rows(dev, small: bool) -> list[dict]:
    """Eager SDAR-4B, batch 1: the block forward against the roofline, each verify path and a head step in forwards,
    speculative rounds/s; the same in the batch-invariant mode (its cost against the default kernels: the block
    forward's ratio, and Static(1) and Speculative(3) in both modes)."""
    from mrp_repro.decoding import Static
    from mrp_repro.kernels.batch_invariant import batch_invariant
    from mrp_repro.kernels.bench import _device_name, _peak_gbps
    from mrp_repro.model import VERIFY_PATHS

    S = "engine"
    cfg, L, reps = (SMALL, 4, 3) if small else (SDAR_4B, 16, 10)
    model, head, prompt = _engine_setup(cfg, dev, L)
    rows = _rows()
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
    _rounds_per_s(rows, S, "eager", model, head, prompt, L, dev, policy=Static(1))
    try:
        with batch_invariant() as mode:
            tb = _ms(lambda: model.forward_block(ids, pos, cache), dev, reps)
            rows.append(_row(S, "block forward (batch 1), batch-invariant mode", tb, "ms", None,
                             f"{tb / t1:.2f}x the default kernels' {t1:.3f} ms"))  # fmt: skip
            t = _ms(lambda: model.forward_candidates(cand, pos, cache, verify="exact"), dev, reps)
            rows.append(_row(S, "verify K=3 verify=exact, batch-invariant mode", t / tb, "forwards", None,
                             f"{t:.3f} ms (one folded call)"))  # fmt: skip
            _rounds_per_s(rows, S, "eager, batch-invariant mode", model, head, prompt, L, dev)
            _rounds_per_s(rows, S, "eager, batch-invariant mode", model, head, prompt, L, dev, policy=Static(1))
        impl = sorted({i for _, i in mode.calls})
        rows.append(_row(S, "batch-invariant mode: implementation", float(len(mode.calls)), "ops", None,
                         f"{'/'.join(impl)}: " + ", ".join(f"{op} {n}" for (op, _), n in sorted(mode.calls.items()))))
    except Exception as exc:  # the mode's kernels failing on this device: a real failure, reported as one
        rows.append(_row(S, "batch-invariant mode", float("nan"), "", False, _err(exc)))
    return rows


def _compile_limits():
    """dynamo's recompile limit raised to cover the shapes decoding makes (per call kind: block forward, commit, fused
    commit, prefill, verify of 1..K candidates, the head's step and commit, growing and static cache: beyond the
    default 8, past which dynamo runs the frame eagerly), and a hit made an error (so it is a failed row, not a
    silently eager timing). Both spellings (torch >= 2.6: recompile_limit; before: cache_size_limit), whichever this
    torch has. Returns the settings to restore."""
    import torch._dynamo as dynamo

    want = {"recompile_limit": 64, "cache_size_limit": 64, "accumulated_recompile_limit": 1024,
            "accumulated_cache_size_limit": 1024, "fail_on_recompile_limit_hit": True,
            "fail_on_cache_limit_hit": True}  # fmt: skip
    saved = {k: getattr(dynamo.config, k) for k in want if hasattr(dynamo.config, k)}
    for k in saved:
        setattr(dynamo.config, k, max(want[k], saved[k]) if isinstance(want[k], int) and want[k] is not True
                else want[k])  # fmt: skip
    return saved


def _recompile_limit() -> int | None:
    import torch._dynamo as dynamo

    return getattr(dynamo.config, "recompile_limit", getattr(dynamo.config, "cache_size_limit", None))


def _uncompile(*modules):
    for m in modules:
        m.__dict__.pop("forward", None)  # compile_model's instance attribute: back to the class's forward


def _token_share(got: list[list[int]], want: list[list[int]]) -> float:
    """Positions with the same token, over the longer row's length, pooled over rows."""
    same = sum(sum(a == b for a, b in zip(g, w, strict=False)) for g, w in zip(got, want, strict=True))
    return same / max(sum(max(len(g), len(w)) for g, w in zip(got, want, strict=True)), 1)


@torch.no_grad()
def engine_compiled_rows(dev, small: bool) -> list[dict]:
    """The compiled engine (model.compile_model) at SDAR-4B widths, 4 layers (CPU --small: toy widths), growing and
    static cache. The check: CUDA graphs ("reduce-overhead", graph_safe) decode exactly as the same inductor compile
    without graphs (mode "default": the same fusions) -- what graphs could break (a replay overwriting an output the
    engine still reads). Measured, not checked: the compiled tokens' agreement with eager (inductor fuses bf16
    rounding steps away, so near-ties can go the other way), rounds per second, the graphs dynamo compiled. On CPU
    inductor records no graphs: there the "graphs" run is the same compile behind graph_safe (one compile, minutes)."""
    import torch._dynamo as dynamo
    from torch._dynamo.utils import counters

    S = "engine_compiled"
    cfg, L = (SMALL, 4) if small else (dataclasses.replace(SDAR_4B, num_layers=4), 16)
    model, head, prompt = _engine_setup(cfg, dev, L)
    rows = _rows()
    tag = f"{cfg.num_layers} layers"
    eager = {st: _rounds_per_s(rows, S, f"eager ({tag}{', static cache' if st else ''})", model, head, prompt, L, dev,
                               static_cache=st) for st in (False, True)}  # fmt: skip
    rows.extend(replay_copy_rows(S, model, head, prompt, L, dev))
    saved = _compile_limits()
    t0 = time.perf_counter()
    try:
        got = {}
        modes = [("no graphs", None), ("CUDA graphs", "reduce-overhead")]
        for name, mode in modes:
            g0, skips0 = counters["stats"]["unique_graphs"], counters["inductor"]["cudagraph_skips"]
            if name == "CUDA graphs" and dev.type != "cuda":  # the same compile, behind graph_safe
                from mrp_repro.model import graph_safe

                for m in (model, head):
                    fn = graph_safe(m.forward)
                    fn.mrp_compiled = True
                    m.forward = fn
            else:
                _uncompile(model, head)
                dynamo.reset()
                compile_model(model, head, mode=mode)
            for st in (False, True):
                what = f"compiled, {name}{', static cache' if st else ''}"
                try:
                    got[(name, st)] = _rounds_per_s(rows, S, what, model, head, prompt, L, dev, static_cache=st)
                except Exception as exc:  # a CUDA-graph error or a recompile-limit hit: what this section is for
                    rows.append(_row(S, what, float("nan"), "", False, _err(exc)))
            rows.append(_row(S, f"graphs dynamo compiled, {name}", counters["stats"]["unique_graphs"] - g0, "graphs",
                             None, f"recompile limit {_recompile_limit()} per frame; a hit is a failed row"))
            if mode == "reduce-overhead" and dev.type == "cuda":  # a skip runs that graph without CUDA graphs
                rows.append(_row(S, "CUDA graphs inductor skipped", counters["inductor"]["cudagraph_skips"] - skips0,
                                 "graphs", None, "measured: each runs as inductor without graphs (the reasons are "
                                 "logged as 'skipping cudagraphs'); 0 expected with the cache at static addresses"))
        for st in (False, True):
            cache = "static cache" if st else "growing cache"
            if ("no graphs", st) in got and ("CUDA graphs", st) in got:
                same = got[("CUDA graphs", st)] == got[("no graphs", st)]
                rows.append(_row(S, f"{cache}: CUDA graphs' tokens equal the same compile's without graphs",
                                 float(same), "", same, "on CPU: no graphs recorded (the same compile, graph_safe)"
                                 if dev.type != "cuda" else "the same inductor fusions; graphs alone differ"))
            if ("no graphs", st) in got:
                share = _token_share(got[("no graphs", st)], eager[st])
                rows.append(_row(S, f"{cache}: compiled tokens equal to eager", share, "share of tokens", None,
                                 "measured: inductor fuses bf16 rounding steps (not a failure; "
                                 "TORCHINDUCTOR_EMULATE_PRECISION_CASTS=1 keeps them)"))  # fmt: skip
    finally:
        for k, v in saved.items():
            setattr(dynamo.config, k, v)
        _uncompile(model, head)
    rows.append(_row(S, "compiles + compiled runs", time.perf_counter() - t0, "s"))
    return rows


def replay_copy_rows(section, model, head, prompt, L, dev) -> list[dict]:
    """model.replay_copy_bytes over one Speculative(3, mrp) generate with the static cache (the CUDA-graph layout),
    backbone and head: the largest bytes a replay copies into graph-owned inputs over the call kinds (measured) and
    the check that no KV cache tensor is among them (the cache read and written in place, at static addresses;
    before issue 36 the whole cache was copied per replay). Traced only (dynamo, a few seconds per call kind)."""
    from mrp_repro.decoding import Speculative, generate
    from mrp_repro.model import replay_copy_bytes

    pol = Speculative(3, "mrp", head=head)
    t0 = time.perf_counter()
    try:
        kinds = replay_copy_bytes((model, head), lambda: generate(model, prompt, pol, L, 1, [2], L, pad_id=0,
                                                                  trace=False, static_cache=True))  # fmt: skip
    except Exception as exc:  # a graph break in a forward, or dynamo failing to trace it here
        return [_row(section, "bytes copied into graph inputs per replay, static cache", float("nan"), "", False,
                     _err(exc))]  # fmt: skip
    worst = max(kinds, key=lambda r: r["bytes"])
    cache = [f"{r['module']}: {s}" for r in kinds for s in r["copied"] if "cache" in s]
    top = sorted(worst["copied"].items(), key=lambda kv: -kv[1])[:3]
    return [
        _row(section, "bytes copied into graph inputs per replay, static cache (largest call kind)", worst["bytes"],
             "bytes", None, f"{len(kinds)} call kinds of backbone and head, {worst['module']} largest: "
             + ", ".join(f"{k} {v}" for k, v in top) + f"; read in place: {worst['static_bytes'] / 1e9:.2f} GB; "
             f"traced in {time.perf_counter() - t0:.1f} s"),
        _row(section, "no KV cache tensor copied per replay", float(not cache), "", not cache,
             "the cache at static addresses (model._static_addresses)" if not cache else "copied: " + "; ".join(cache)),
    ]


# -- the run's environment -----------------------------------------------------------------------------------------
def _nvidia_smi() -> str:
    """The GPU's clock state, one line per GPU (nvidia-smi; the field name of the clock event reasons changed)."""
    import subprocess

    base = "clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,clocks.applications.graphics,pstate,persistence_mode," \
           "power.draw,power.limit,temperature.gpu"  # fmt: skip
    for reasons in ("clocks_event_reasons.active", "clocks_throttle_reasons.active", None):
        fields = base + (f",{reasons}" if reasons else "")
        try:
            r = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"], capture_output=True,
                               text=True, timeout=20)  # fmt: skip
        except (OSError, subprocess.SubprocessError) as exc:
            return f"nvidia-smi: {_err(exc)}"
        if r.returncode == 0:
            return f"{fields}: " + " | ".join(r.stdout.strip().splitlines())
    return f"nvidia-smi failed: {(r.stderr or r.stdout).strip()[:200]}"


def _cublas_version(dev) -> str:
    """cuBLASLt's version as the loaded library reports it (cublasLtGetVersion), else the wheel's."""
    import ctypes
    from importlib import metadata

    if dev.type != "cuda":
        return "no CUDA device"
    try:
        a = torch.ones(8, 8, device=dev)
        (a @ a).sum().item()  # loads cuBLAS
        libs = sorted({ln.split()[-1] for ln in open("/proc/self/maps") if "libcublasLt" in ln})
        if libs:
            fn = ctypes.CDLL(libs[0]).cublasLtGetVersion
            fn.restype = ctypes.c_size_t
            n = int(fn())
            return f"{n // 10000}.{n // 100 % 100}.{n % 100} ({libs[0].rsplit('/', 1)[-1]})"
    except Exception as exc:  # noqa: BLE001 - a record, never a failure
        why = _err(exc)
    else:
        why = "libcublasLt not mapped"
    for pkg in ("nvidia-cublas-cu12", "nvidia-cublas-cu13", "nvidia-cublas"):
        try:
            return f"{metadata.version(pkg)} ({pkg} wheel; {why})"
        except metadata.PackageNotFoundError:
            pass
    return why


def _sdp_backend(q, k, v, mask, gqa) -> str:
    from torch.nn.attention import SDPBackend

    try:
        n = torch._fused_sdp_choice(q, k, v, mask, 0.0, False, enable_gqa=gqa)
        return SDPBackend(n).name
    except Exception as exc:  # noqa: BLE001
        return _err(exc)


def environment_rows(dev, small: bool) -> list[dict]:
    """What the numbers depend on, recorded before any is measured: versions (torch, CUDA, cuDNN, cuBLAS, triton,
    flash-attn), the device and its clock state, the numerics flags, and the attention backend SDPA picks
    (torch._fused_sdp_choice) for each call form at the model's shapes: our block forward and verify (a 4-D bool
    mask), the upstream numerics' unmasked and 3-D-mask calls, bf16 and fp32. Measurements only (no ok)."""
    import platform

    from mrp_repro.model import flash_attn_package

    S = "environment"
    rows = _rows()
    info = lambda item, value, note="": rows.append(_row(S, item, value, "", None, note))  # noqa: E731
    info("torch", float("nan"), f"{torch.__version__}; CUDA build {torch.version.cuda}; python "
         f"{platform.python_version()}")
    try:
        import triton

        info("triton", float("nan"), triton.__version__)
    except Exception as exc:  # noqa: BLE001
        info("triton", float("nan"), _err(exc))
    fa = flash_attn_package()
    info("flash-attn", float(fa[0] is not None), f"installed {fa[1]}" if fa[0] is not None else "not installed")
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    info("cuDNN", float(cudnn or "nan"), f"{cudnn}" if cudnn else "not available")
    info("cuBLAS", float("nan"), _cublas_version(dev))
    if dev.type == "cuda":
        p = torch.cuda.get_device_properties(dev)
        info("device", float(p.multi_processor_count), f"{p.name}, {p.total_memory / 2**30:.0f} GiB, "
             f"sm_{p.major}{p.minor}, {p.multi_processor_count} SMs")  # fmt: skip
        clocks = _nvidia_smi()
        info("GPU clock state", float("nan"), clocks)
        m = torch.backends.cuda.matmul
        info("numerics flags", float("nan"), f"matmul.allow_tf32={m.allow_tf32} allow_bf16_reduced_precision_reduction="
             f"{m.allow_bf16_reduced_precision_reduction} cudnn.allow_tf32={torch.backends.cudnn.allow_tf32} "
             f"deterministic={torch.are_deterministic_algorithms_enabled()}")  # fmt: skip
    else:
        info("device", float(torch.get_num_threads()), f"cpu ({torch.backends.cpu.get_cpu_capability()}), "
             f"{torch.get_num_threads()} threads")  # fmt: skip
        info("GPU clock state", float("nan"), "no GPU")
    info("TORCHINDUCTOR_EMULATE_PRECISION_CASTS", float("nan"), os.environ.get("TORCHINDUCTOR_EMULATE_PRECISION_CASTS",
                                                                               "unset"))  # fmt: skip
    cfg, L = (SMALL, 4) if small else (SDAR_4B, 16)
    S_keys = 4 * L + L
    for dtype in (torch.bfloat16, torch.float32):
        for name, B, form in (("block forward, batch 1", 1, "4d"), ("verify fold, batch 1 x K=3", 3, "4d"),
                              ("upstream unmasked", 1, "none"), ("upstream 3-D mask", 1, "3d")):  # fmt: skip
            q = torch.zeros(B, cfg.num_heads, L, cfg.head_dim, dtype=dtype, device=dev)
            k = torch.zeros(B, cfg.num_kv_heads, S_keys, cfg.head_dim, dtype=dtype, device=dev)
            mask = {"4d": torch.ones(B, 1, L, S_keys, dtype=torch.bool, device=dev), "none": None,
                    "3d": torch.ones(1, L, S_keys, dtype=torch.bool, device=dev)}[form]  # fmt: skip
            rows.append(_row(S, f"attention backend: {name}, {str(dtype)[6:]}", float("nan"), "", None,
                             _sdp_backend(q, k, k, mask, cfg.num_heads != cfg.num_kv_heads)))  # fmt: skip
    return rows


# -- the batch-invariant mode ----------------------------------------------------------------------------------------
def _truth(op, *args):
    """The op in float64 on the inputs (what both implementations are compared against)."""
    import torch.nn.functional as F

    d = [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
    if op == "linear":
        return F.linear(*d)
    if op == "attention":
        q, k, v, mask = d
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    if op == "mean":
        return d[0].mean(-1)
    if op == "rms_norm":
        x, w = d
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    return torch.log_softmax(d[0], -1)


@torch.no_grad()
def invariant_mode_rows(dev, small: bool) -> list[dict]:
    """kernels.batch_invariant on the device. Checks: each Triton kernel (linear, attention, mean, rms_norm,
    log_softmax) and the PyTorch reference within tolerance of float64, fp32 and bf16; each Triton kernel's rows
    computed alone bitwise equal to the same rows inside the batch; Speculative(3, mrp) in the mode token-identical
    to Static(1) in the mode on the toy model (bf16, near-ties everywhere), its verify one backbone call."""
    from mrp_repro.decoding import Speculative, Static, generate
    from mrp_repro.decoding.mismatch import MASK, PAD, random_backbone, random_head, random_prompts
    from mrp_repro.kernels import batch_invariant as BI
    from mrp_repro.measure.cost import verify_passes

    S = "invariant_mode"
    rows = _rows()
    try:
        T = importlib.import_module("mrp_repro.kernels.triton_batch_invariant")
    except Exception as exc:
        T = None
        rows.append(_row(S, "import the Triton kernels", float("nan"), "", False, _err(exc)))
    g = torch.Generator().manual_seed(0)
    if small:
        lin, att, rw, sm = (23, 48, 40), (3, 4, 2, 6, 40, 16), (9, 64), (5, 512)
    else:
        lin, att, rw, sm = (48, 2560, 1024), (4, 32, 8, 16, 300, 128), (64, 2560), (16, 8192)
    for dtype in (torch.float32, torch.bfloat16):
        rnd = lambda *shape, dt=dtype: torch.randn(*shape, generator=g).to(dt).to(dev)  # noqa: E731
        M, K, N = lin
        B, H, Hk, Tq, Sk, D = att
        mask = (torch.rand(B, 1, Tq, Sk, generator=g) < 0.8).to(dev)
        mask[..., 0] = True
        cases = {"linear": (rnd(M, K), rnd(N, K) * K**-0.5), "attention": (rnd(B, H, Tq, D), rnd(B, Hk, Sk, D),
                 rnd(B, Hk, Sk, D), mask), "mean": (rnd(*rw),), "rms_norm": (rnd(*rw), rnd(rw[1])),
                 "log_softmax": (rnd(*sm) * 3,)}  # fmt: skip
        impls = {
            "linear": (lambda x, w: T.linear(x, w), BI.linear_ref),
            "attention": (lambda q, k, v, m: T.attention(q, k, v, m, enable_gqa=True),
                          lambda q, k, v, m: BI.attention_ref(q, k, v, m, enable_gqa=True)),
            "mean": (lambda x: T.mean(x), lambda x: BI.mean_ref(x)),
            "rms_norm": (lambda x, w: T.rms_norm(x, (x.shape[-1],), w, 1e-6),
                         lambda x, w: BI.rms_norm_ref(x, (x.shape[-1],), w, 1e-6)),
            "log_softmax": (lambda x: T.softmax(x, log=True), lambda x: BI.softmax_ref(x, log=True)),
        }  # fmt: skip
        f32 = dtype == torch.float32
        for op, args in cases.items():
            truth = _truth(op, *args)
            scale = float(truth.abs().max())
            atol, rtol = (1e-4 * max(scale, 1.0), 1e-4) if f32 else (2e-2 * max(scale, 1.0), 1e-2)
            for impl, fn in zip(("triton", "reference"), impls[op], strict=True):
                if impl == "triton" and T is None:
                    continue
                tag = f"{impl} {op} {str(dtype)[6:]}"
                try:
                    out = fn(*args)
                    rows.append(_compare(S, f"{tag} vs float64", out, truth, atol, rtol))
                    if impl == "triton":  # the bits of each row alone vs in the batch
                        n = args[0].shape[0]
                        alone = torch.cat([fn(*[a[i : i + 1] if j == 0 or (op == "attention" and j < 4) else a
                                                for j, a in enumerate(args)]) for i in range(n)])  # fmt: skip
                        bad = int((alone != out).sum())
                        rows.append(_row(S, f"{tag}: rows alone vs in a batch of {n}", bad, "elements differ",
                                         bad == 0, "bitwise"))  # fmt: skip
                except Exception as exc:
                    rows.append(_row(S, tag, float("nan"), "", False, _err(exc)))
    m, h = random_backbone(0, torch.bfloat16, dev), random_head(100, torch.bfloat16, dev)
    ps = random_prompts(4, 0, 9)
    args = (4, MASK, [2], 12)
    calls = []
    real = m.forward_candidates

    def counted(*a, **k):
        out = []
        calls.append(verify_passes(m, lambda: out.append(real(*a, **k))))
        return out[0]

    try:
        with BI.batch_invariant() as mode:
            want = generate(m, ps, Static(1), *args, pad_id=PAD).tokens
            m.forward_candidates = counted
            got = generate(m, ps, Speculative(3, "mrp", head=h), *args, pad_id=PAD).tokens
        bad = sum(a != b for a, b in zip(got, want, strict=True))
        impl = "/".join(sorted({i for _, i in mode.calls}))
        rows.append(_row(S, "bf16 speculative(3,mrp) vs static(1), both in the mode", bad, f"of {len(ps)} rows",
                         bad == 0, f"toy model; {impl}"))  # fmt: skip
        rows.append(_row(S, "backbone calls per verify in the mode", max(calls) if calls else float("nan"), "calls",
                         bool(calls) and set(calls) == {1}, f"{len(calls)} verifies"))  # fmt: skip
    except Exception as exc:
        rows.append(_row(S, "speculative vs static in the mode", float("nan"), "", False, _err(exc)))
    finally:
        m.__dict__.pop("forward_candidates", None)
    return rows


SECTION_FNS = {"environment": environment_rows, "kernel_check": kernel_check_rows,
               "batch_invariance": batch_invariance_rows, "invariant_mode": invariant_mode_rows,
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
    ap.add_argument("--sections", default=None, help=f"comma-separated, of {','.join(SECTIONS)} (default: all; "
                    "engine_compiled compiles for minutes on CPU)")  # fmt: skip
    a = ap.parse_args(argv)
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit(f"gpu_check: no CUDA device here (torch {torch.__version__}, CUDA build {torch.version.cuda}); run it "
                 "on a GPU machine, or pass --device cpu --small")  # fmt: skip
    if a.sections is None:
        a.sections = ",".join(SECTIONS)
    sections = [s for s in a.sections.split(",") if s]
    bad = [s for s in sections if s not in SECTION_FNS]
    if bad:
        sys.exit(f"gpu_check: unknown section(s) {bad}; choose from {','.join(SECTIONS)}")
    dev = torch.device(a.device)
    kernels = {"mrp_repro.kernels.triton_confidence", "mrp_repro.kernels.triton_batch_invariant"}
    if dev.type == "cpu" and not kernels & set(sys.modules):
        os.environ.setdefault("TRITON_INTERPRET", "1")  # Triton runs on CPU only interpreted, set before its import
    a.out.mkdir(parents=True, exist_ok=True)
    done: list[dict] = []
    for s in sections:
        t0 = time.perf_counter()
        sink = _Sink(lambda rows, s=s, before=list(done): _write(a.out, a.device, s, list(rows), before + list(rows)))
        _SINK[0] = sink
        try:
            got = SECTION_FNS[s](dev, a.small)
            if got is not sink:  # a section that built its own list
                sink.extend([r for r in got if r not in sink])
        except Exception as exc:  # the section's failure is its row; the next sections still run
            sink.append(_row(s, "section failed", float("nan"), "", False, _err(exc)))
        finally:
            _SINK[0] = None
        sink.append(_row(s, "section time", time.perf_counter() - t0, "s"))
        done += list(sink)
        failed = sum(r["ok"] is False for r in sink)
        print(f"gpu_check: {s}: {len(sink)} rows, {failed} failed checks, {sink[-1]['value']:.1f} s -> "
              f"{a.out / (s + '.csv')}", flush=True)  # fmt: skip
    failed = [r for r in done if r["ok"] is False]
    print(f"gpu_check: wrote {a.out / 'gpu_check.md'}; {len(failed)} failed check(s)"
          + "".join(f"\n  {r['section']}: {r['item']} ({r['note']})" for r in failed[:20]))  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    from mrp_repro.cli import run_cli

    run_cli(main)  # a user error, Ctrl-C or a full disk is one error: line
