"""One GPU check (issue 14): kernels, verify mismatch per path, and the engine at SDAR-4B shapes, one table.

    make gpu-check                                               # = python -m mrp_repro.gpu_check (the default DIR)
    python -m mrp_repro.gpu_check --out DIR                      # on a CUDA machine: <= 8 min on one H100/H200
    python -m mrp_repro.gpu_check --out DIR --device cpu --small # the same code at tiny shapes, seconds (the test)

Writes DIR/gpu_check.md and DIR/gpu_check.csv, one row per measurement: section, item, value, unit, note. DIR
defaults to figures/gpu_check-<device>/ (the device's name in lower case, e.g. figures/gpu_check-nvidia-h200/;
$MRP_REPRO_FIGURES moves figures/). The engine section's "block forward (batch 1)" is the per-forward cost the quick
check's wall-time estimate takes: python -m mrp_repro.report.quickcheck --forward-ms <ms>.
  kernels   mrp_repro.kernels.bench.run_benchmark: ms and GB/s per op x N x implementation
  mismatch  mrp_repro.decoding.mismatch.mismatch_table in bf16 on the device: generations differing from Static(1)
            per verify path (exact, fold, loop, packed) and whether the verify logits are bitwise forward_block's
  engine    random weights at SDAR-4B shapes (hidden 2560, 36 layers, 32/8 heads, head_dim 128, FFN 9728, vocab
            151936, block 16), bf16, batch 1: block-forward latency against the HBM roofline (weight bytes /
            the device's bandwidth), a verify of K+1 = 4 candidates over one forward (each path), one head step
            (+ lm_head) over one forward, speculative(3, mrp) rounds per second, eager and (CUDA, or --compile)
            compiled (model.compile_model).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd
import torch

from mrp_repro.model import ModelConfig, SDARModel, compile_model, count_parameters

SDAR_4B = ModelConfig(151936, 2560, 9728, 36, 32, 8, 128)
SMALL = ModelConfig(512, 64, 128, 2, 4, 2, 16)


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


def kernel_rows(dev, small: bool) -> list[dict]:
    from mrp_repro.kernels.bench import run_benchmark

    df = run_benchmark(ns=(16,) if small else (16, 64, 256), vocab=2048 if small else 151936, device=dev,
                       repeats=2 if small else 5, compile=False if small else None)  # fmt: skip
    return [dict(section="kernels", item=f"{r.op} n={r.n} {r.impl}", value=r.time_ms, unit="ms",
                 note=f"{r.gbps:.0f} GB/s" if pd.notna(r.gbps) else str(r.note)) for r in df.itertuples()]  # fmt: skip


def mismatch_rows(dev, small: bool) -> list[dict]:
    from mrp_repro.decoding.mismatch import mismatch_table

    kw = dict(seeds=(0,), blocks=(4,), Ks=(3,), n_prompts=4, batch=4) if small else dict(seeds=(0,), Ks=(3,))
    df = mismatch_table(dtypes=("bfloat16",), device=str(dev), **kw)
    return [dict(section="mismatch", item=f"bf16 verify={r.path}", value=r.rows_differing,
                 unit=f"of {r.rows} rows", note=f"bitwise={r.bitwise} max_logit_diff={r.max_logit_diff:.3g}")
            for r in df.itertuples()]  # fmt: skip


@torch.no_grad()
def engine_rows(dev, small: bool, compiled: bool) -> list[dict]:
    from mrp_repro.decoding import Speculative, generate
    from mrp_repro.kernels.bench import _device_name, _peak_gbps
    from mrp_repro.model import VERIFY_PATHS
    from mrp_repro.mrp import MRPHead

    cfg, L, reps = (SMALL, 4, 3) if small else (SDAR_4B, 16, 10)
    dtype = torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(0)
    with torch.device(dev):
        model = SDARModel(cfg).to(dtype).init_weights(0.02, g).eval()
        head = MRPHead(cfg, 1).to(dtype).init_weights("normal", 0.02, g).eval()
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
    rows.append(dict(section="engine", item="block forward (batch 1)", value=t1, unit="ms",
                     note=f"HBM roofline {roof:.3f} ms ({wbytes / 1e9:.2f} GB / {peak} GB/s): {roof / t1:.0%}"
                     if peak else "no bandwidth figure for this device"))  # fmt: skip
    cand = ids[:, None].expand(1, 4, L).contiguous()
    for path in VERIFY_PATHS:
        t = _ms(lambda p=path: model.forward_candidates(cand, pos, cache, verify=p), dev, reps)
        rows.append(dict(section="engine", item=f"verify K+1=4 verify={path}", value=t / t1, unit="forwards",
                         note=f"{t:.3f} ms"))  # fmt: skip
    hcache = head.new_cache(1, C)
    head.commit(out.hidden, ctx, cpos, model.embed_tokens, hcache, key_valid=kv, block_size=L)
    h = model.forward_block(ids, pos, cache).hidden
    t = _ms(lambda: model.lm_head(head.step(h, ids, pos, model.embed_tokens, hcache)), dev, reps)
    rows.append(dict(section="engine", item="head step + lm_head", value=t / t1, unit="forwards", note=f"{t:.3f} ms"))
    prompt = [torch.randint(3, cfg.vocab_size, (C + 3,), generator=torch.Generator().manual_seed(1)).tolist()]
    pol = Speculative(3, "mrp", head=head)

    def rounds_per_s(tag, static_cache=False):
        run = lambda: generate(model, prompt, pol, L, 1, [2], 2 * L, pad_id=0, trace=False,  # noqa: E731
                               static_cache=static_cache)  # fmt: skip
        run()  # warm-up (and, compiled, the compilation)
        _sync(dev)
        t0 = time.perf_counter()
        r = run()
        _sync(dev)
        dt = time.perf_counter() - t0
        rows.append(dict(section="engine", item=f"speculative(3,mrp) {tag}", value=r.stats[0].rounds / dt,
                         unit="rounds/s", note=f"{dt * 1e3:.1f} ms for {r.stats[0].tokens} tokens"))  # fmt: skip
        return r.tokens

    eager = rounds_per_s("eager")
    eager_static = rounds_per_s("eager, static cache", static_cache=True)
    if compiled:
        compile_model(model, head)
        same = rounds_per_s("compiled") == eager
        rows[-1]["note"] += f"; tokens equal eager: {same}"
        # one shape per call: what lets CUDA graphs ("reduce-overhead") record once instead of per cache length
        same = rounds_per_s("compiled, static cache", static_cache=True) == eager_static
        rows[-1]["note"] += f"; tokens equal eager static cache: {same}"
    return rows


def default_out(dev: torch.device) -> Path:
    """figures/gpu_check-<device name, lower case, non-alphanumerics as '-'>/ (under $MRP_REPRO_FIGURES if set)."""
    import re

    from mrp_repro.kernels.bench import _device_name
    from mrp_repro.runtime import figures_root

    slug = re.sub(r"[^a-z0-9]+", "-", _device_name(dev).lower()).strip("-") or dev.type
    return figures_root() / f"gpu_check-{slug}"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="default: figures/gpu_check-<device name>/")
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    ap.add_argument("--small", action="store_true", help="tiny shapes: the same code in seconds")
    ap.add_argument("--compile", action="store_true", help="also time the compiled engine (default on CUDA only)")
    a = ap.parse_args(argv)
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("gpu_check: no CUDA device here; run it on a GPU machine, or pass --device cpu --small")
    dev = torch.device(a.device)
    if a.out is None:
        a.out = default_out(dev)
    rows = kernel_rows(dev, a.small) + mismatch_rows(dev, a.small)
    rows += engine_rows(dev, a.small, compiled=a.compile or dev.type == "cuda")
    df = pd.DataFrame(rows, columns=["section", "item", "value", "unit", "note"])
    a.out.mkdir(parents=True, exist_ok=True)
    df.to_csv(a.out / "gpu_check.csv", index=False)
    from mrp_repro.report.tables import markdown

    (a.out / "gpu_check.md").write_text(f"# gpu_check on {a.device}\n\n" + markdown(df) + "\n")
    print(markdown(df))
    print(f"gpu_check: wrote {a.out / 'gpu_check.md'} and gpu_check.csv")


if __name__ == "__main__":
    main()
