"""Both decoding families side by side on random weights: backbone forwards and TPF of static and speculative K.

    python -m mrp_repro.report.upstream_compare                       # fp32, CPU, 8 prompts, batch 1 and 4
    python -m mrp_repro.report.upstream_compare --Ks 1 2 3 --prompts 8 --batch 1 4 --vocab 4096

A random SDAR-architecture model (block 8) and a random 3-layer head, seeded; random prompts of 3..20 tokens;
one row per (batch size, family, setting): forwards and tokens summed over the prompts, identity with the
family's own static. Our counts: per row (engine.RowStats: backbone = denoise + commit, prefill included);
upstream's: their per-batch counters (decoding.upstream.UpstreamCounters: total = prefill + denoising +
store-KV; TPF = tokens summed over a batch's rows / batched denoising forwards). docs/upstream.md quotes it.
"""

from __future__ import annotations

import argparse
import random

import torch

from mrp_repro.decoding.engine import Static, generate
from mrp_repro.decoding.mrp_modes import Speculative
from mrp_repro.decoding.upstream import UpstreamSpeculative, UpstreamStatic, generate_upstream
from mrp_repro.model import ModelConfig, SDARModel
from mrp_repro.mrp import MRPHead

MASK, EOS = 1, 2


def _ours(model, prompts, policy, block, max_new, batch):
    toks, back, den, tokens = [], 0, 0, 0
    for i in range(0, len(prompts), batch):
        r = generate(model, prompts[i : i + batch], policy, block, MASK, [EOS], max_new, pad_id=0)
        toks += r.tokens
        back += sum(s.backbone_forwards for s in r.stats)
        den += sum(s.denoise_forwards for s in r.stats)
        tokens += sum(s.tokens for s in r.stats)
    return toks, back, den, tokens


def _upstream(model, prompts, policy, block, max_new, batch):
    toks, back, den, tokens = [], 0, 0, 0
    for i in range(0, len(prompts), batch):
        r = generate_upstream(model, prompts[i : i + batch], policy, block, MASK, [EOS], max_new)
        toks += r.tokens
        back += r.batch.total_forwards
        den += r.batch.denoise_forwards
        tokens += r.batch.tokens
    return toks, back, den, tokens


def compare(Ks=(1, 2, 3), n_prompts=8, batches=(1, 4), vocab=4096, block=8, max_new=24, seed=0,
            dtype=torch.float32) -> list[dict]:  # fmt: skip
    cfg = ModelConfig(vocab_size=vocab, hidden_size=64, intermediate_size=192, num_layers=4, num_heads=4,
                      num_kv_heads=2, head_dim=16)  # fmt: skip
    g = torch.Generator().manual_seed(seed)
    model = SDARModel(cfg).init_weights(std=0.3, generator=g).to(dtype).eval()
    head = MRPHead(cfg, num_layers=3).init_weights("normal", 0.3, generator=g).to(dtype).eval()
    rng = random.Random(seed)
    prompts = [[rng.randrange(3, vocab) for _ in range(rng.randint(3, 20))] for _ in range(n_prompts)]
    rows = []
    for batch in batches:
        settings = [("ours", Static(1), _ours)] + [("ours", Speculative(K, "mrp", head=head), _ours) for K in Ks]
        settings += [("upstream", UpstreamStatic(), _upstream)]
        settings += [("upstream", UpstreamSpeculative(K, head, mode), _upstream)
                     for K in Ks for mode in ("none", "sum")]  # fmt: skip
        ref = {}
        for algo, pol, fn in settings:
            toks, back, den, tokens = fn(model, prompts, pol, block, max_new, batch)
            ref.setdefault(algo, toks)
            rows.append(dict(batch=batch, algorithm=algo, setting=pol.name, backbone_forwards=back,
                             denoise_forwards=den, tokens=tokens, tpf=round(tokens / den, 3),
                             identical_to_static=toks == ref[algo]))  # fmt: skip
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--Ks", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    import pandas as pd

    torch.set_num_threads(1)
    df = pd.DataFrame(compare(a.Ks, a.prompts, a.batch, a.vocab, seed=a.seed))
    print(df.to_string(index=False))


if __name__ == "__main__":
    from mrp_repro.cli import run_cli

    run_cli(main)  # a user error, Ctrl-C or a full disk is one error: line
