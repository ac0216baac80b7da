"""How often each speculative verify path disagrees with Static(1), per dtype (issue 10).

    python -m mrp_repro.decoding.mismatch                     # CPU, bf16 + fp32, every path: markdown table
    python -m mrp_repro.decoding.mismatch --device cuda       # the same on a GPU (batch invariance differs there)
    python -m mrp_repro.decoding.mismatch --cost              # + wall time of one verify / one block forward
    from mrp_repro.decoding.mismatch import mismatch_table    # -> DataFrame, one row per (dtype, path)

Lossless speculative decoding needs the verify's logits of a candidate state to be bitwise those
of `forward_block` on that state: a near-tie (equal top logits, or equal confidences of two
positions) resolved differently sends the two decodings apart. Random-weight models with
bf16's coarse rounding have many such ties, so they are the hard case: every (prompt, block size,
K, drafter) of Speculative(K, drafter, verify=path) is compared with Static(1) on the same batch.

Columns: dtype, path, rows (generations compared), rows_differing (token sequence != Static(1)),
max_logit_diff (max |verify - forward_block| on the same random cached states), bitwise (that max is 0).
"""

from __future__ import annotations

import argparse
import random
import time

import pandas as pd
import torch

from mrp_repro.decoding.engine import Static, generate
from mrp_repro.decoding.mrp_modes import DRAFTERS, Speculative
from mrp_repro.model import VERIFY_PATHS, ModelConfig, SDARModel, resolve_verify
from mrp_repro.mrp import MRPHead

MASK, PAD = 1, 0
# Small enough for one CPU core; vocab 64 in bf16 gives plenty of exactly tied logits.
CONFIG = ModelConfig(
    vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8
)
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64}


def random_backbone(seed: int, dtype: torch.dtype, device="cpu", cfg: ModelConfig = CONFIG, std: float = 0.3):
    g = torch.Generator().manual_seed(seed)
    return SDARModel(cfg).init_weights(std=std, generator=g).to(device=device, dtype=dtype).eval()


def random_head(seed: int, dtype: torch.dtype, device="cpu", cfg: ModelConfig = CONFIG, std: float = 0.3):
    g = torch.Generator().manual_seed(seed)
    return MRPHead(cfg, num_layers=1).init_weights("normal", std, generator=g).to(device=device, dtype=dtype).eval()


def random_prompts(n: int, seed: int, max_len: int, vocab: int = CONFIG.vocab_size) -> list[list[int]]:
    """Prompts of 1..max_len tokens: rows end inside blocks, so batches carry left padding."""
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(rng.randint(1, max_len))] for _ in range(n)]


def common_token(model, prompts, block: int) -> int:
    """The token the model writes most often: used as EOS so that rows finish at different blocks."""
    r = generate(model, prompts, Static(1), block, MASK, [MASK], 2 * block, pad_id=PAD)
    flat = [t for row in r.tokens for t in row]
    return max(set(flat), key=flat.count)


def _batched(model, prompts, policy, block, batch, max_new, eos):
    out = []
    for i in range(0, len(prompts), batch):
        out += generate(model, prompts[i : i + batch], policy, block, MASK, [eos], max_new, pad_id=PAD).tokens
    return out


def compare_with_static(model, head, prompts, block: int, Ks, drafters, verify: str, batch: int, max_new: int):
    """-> (rows compared, rows whose tokens differ from Static(1)) over every K x drafter."""
    eos = common_token(model, prompts, block)
    want = _batched(model, prompts, Static(1), block, batch, max_new, eos)
    rows = bad = 0
    for K in Ks:
        for dr in drafters:
            got = _batched(model, prompts, Speculative(K, dr, head=head, verify=verify), block, batch, max_new, eos)
            rows += len(got)
            bad += sum(g != w for g, w in zip(got, want, strict=True))
    return rows, bad


@torch.no_grad()
def cached_state(model, batch: int, block: int, context_blocks: int, seed: int, finished: bool = True,
                 static: bool = False):  # fmt: skip
    """A cache of `context_blocks` committed blocks and the current block's positions and key_valid, laid
    out as the engine does: row r left-padded by r % context_blocks whole blocks; with `finished`, every
    4th row (r % 4 == 3) sits the block out (all-padding key_valid). static: a model.KVCache(static=True) with
    two blocks of unused capacity. -> cache, pos, key_valid, generator."""
    dev = model.lm_head.weight.device
    V = model.config.vocab_size
    g = torch.Generator().manual_seed(seed)
    S = context_blocks * block
    ctx = torch.randint(3, V, (batch, S), generator=g)
    valid = torch.ones(batch, S + block, dtype=torch.bool)
    for r in range(batch):
        valid[r, : block * (r % context_blocks)] = False
    key_valid = valid[:, S:].clone()
    if finished:
        key_valid[3::4] = False
    pos = (torch.arange(S + block)[None] - (~valid).sum(1, keepdim=True)).clamp(min=0)
    cache = model.new_cache(batch, S + 2 * block if static else S, static=static)
    model.prefill(ctx.to(dev), pos[:, :S].to(dev), valid[:, :S].to(dev), cache, block)
    return cache, pos[:, S:].to(dev), key_valid.to(dev), g


@torch.no_grad()
def max_logit_diff(model, path: str, batch: int, block: int, M: int, seed: int = 0, context_blocks: int = 3) -> float:
    """max |forward_candidates(path) - forward_block| over M random candidate states of one cached block."""
    cache, pos, kv, g = cached_state(model, batch, block, context_blocks, seed)
    V = model.config.vocab_size
    cand = torch.randint(3, V, (batch, M, block), generator=g)
    cand[torch.rand(batch, M, block, generator=g) < 0.5] = MASK
    cand = cand.to(pos.device)
    got = model.forward_candidates(cand, pos, cache, kv, verify=path).logits
    want = torch.stack([model.forward_block(cand[:, j], pos, cache, kv).logits for j in range(M)], 1)
    return (got.double() - want.double()).abs().max().item()


def mismatch_table(
    dtypes=("bfloat16", "float32"),
    paths=("exact", "fold", "loop", "packed"),
    device: str = "cpu",
    seeds=(0, 1),
    blocks=(4, 8, 16),
    Ks=(2, 3, 4),
    drafters=DRAFTERS,
    n_prompts: int = 24,
    batch: int = 12,
) -> pd.DataFrame:
    """One row per (dtype, path): rows, rows_differing, max_logit_diff, bitwise; see the module docstring.

    The default grid is 2 seeds x 3 blocks x 3 K x 3 drafters x 24 prompts = 1296 rows per path."""
    out = []
    for name in dtypes:
        dtype = DTYPES[name]
        for path in paths:
            rows = bad = 0
            diff = 0.0
            for seed in seeds:
                m, h = random_backbone(seed, dtype, device), random_head(seed + 100, dtype, device)
                for block in blocks:
                    ps = random_prompts(n_prompts, seed * 31 + block, max_len=2 * block + 3)
                    r, b = compare_with_static(m, h, ps, block, Ks, drafters, path, batch, max_new=2 * block + 3)
                    rows, bad = rows + r, bad + b
                    for B in (1, batch):
                        diff = max(diff, max_logit_diff(m, path, B, block, max(Ks), seed=seed))
            out.append(
                dict(
                    dtype=name,
                    path=path if path != "exact" else f"exact (= {resolve_verify(path, device)})",
                    device=device,
                    rows=rows,
                    rows_differing=bad,
                    max_logit_diff=diff,
                    bitwise=diff == 0.0,
                )
            )
    return pd.DataFrame(out)


@torch.no_grad()
def verify_cost(model, batch: int, block: int, M: int, paths=("fold", "loop", "packed"), repeats: int = 20):
    """Wall time of one verify of M candidates / one forward_block, per path, on a 4-block cache."""
    cache, pos, kv, g = cached_state(model, batch, block, 4, seed=0, finished=False)
    V = model.config.vocab_size
    ids = torch.randint(3, V, (batch, block), generator=g).to(pos.device)
    cand = ids[:, None].expand(batch, M, block).contiguous()
    sync = torch.cuda.synchronize if pos.device.type == "cuda" else (lambda: None)

    def timed(fn):
        fn()
        ts = []
        for _ in range(repeats):
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            ts.append(time.perf_counter() - t0)
        return sorted(ts)[len(ts) // 2]

    t1 = timed(lambda: model.forward_block(ids, pos, cache, kv))
    return {p: timed(lambda p=p: model.forward_candidates(cand, pos, cache, kv, verify=p)) / t1 for p in paths}


def cost_table(device: str = "cpu", dtypes=("bfloat16", "float32"), batches=(1, 32), block: int = 8, M: int = 4):
    rows = []
    for name in dtypes:
        m = random_backbone(0, DTYPES[name], device)
        for B in batches:
            rows.append(dict(dtype=name, batch=B, block=block, candidates=M, **verify_cost(m, B, block, M)))
    return pd.DataFrame(rows)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", help="cpu or cuda (the GPU check)")
    ap.add_argument("--dtypes", default="bfloat16,float32", help="comma-separated: bfloat16,float32,float64")
    ap.add_argument("--paths", default=",".join(VERIFY_PATHS), help=f"comma-separated of {VERIFY_PATHS}")
    ap.add_argument("--prompts", type=int, default=24, help="prompts per (seed, block)")
    ap.add_argument("--cost", action="store_true", help="also time one verify of 4 candidates vs one block forward")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device here; run it on a GPU machine or use --device cpu")
    torch.set_num_threads(a.threads)
    dtypes = [d for d in a.dtypes.split(",") if d]
    unknown = [d for d in dtypes if d not in DTYPES]
    if unknown:
        raise SystemExit(f"--dtypes {unknown}: choose from {list(DTYPES)}")
    paths = [p for p in a.paths.split(",") if p]
    bad = [p for p in paths if p not in VERIFY_PATHS]
    if bad:
        raise SystemExit(f"--paths {bad}: choose from {VERIFY_PATHS}")
    df = mismatch_table(dtypes, paths, a.device, n_prompts=a.prompts)
    print(df.to_string(index=False))
    if a.cost:
        print()
        print(cost_table(a.device, dtypes).to_string(index=False))


if __name__ == "__main__":
    from mrp_repro.cli import run_cli

    run_cli(main)  # a user error, Ctrl-C or a full disk is one error: line
