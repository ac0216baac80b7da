"""Upstream vs ours residual remasking on one random whole model (issue 20's comparison), and which cause parts them.

    python -m mrp_repro.report.remask_compare               # fp32, CPU: two tables (16 s on one core)
    from mrp_repro.report.remask_compare import compare     # -> DataFrame, one row per (delta, variant)

The model: SDAR's vocabulary (151,936) at toy width (sdar_mini.MINI_CONFIG), block 8, a 3-layer head,
random weights with randomised norm gains. Three prompts of 13 tokens, 24 new tokens each (72 tokens), no
EOS; tau = 0.5; delta in {0.5, 1, 2}. Variants of ours (`Remask(tau, "delta")`), each changing the causes the
issue names: (a) the head judges the block BEFORE the fresh reveals (theirs) instead of after them; (b) the
head sees its own block only (no KV of earlier blocks, theirs) instead of its cache. Columns: tokens
revealed (27 per row: whole blocks), of the first 24 per row those equal to upstream's (of 72), backbone
denoising forwards (summed over rows), TPF, head forwards, vetoed (upstream) / revoked (ours).

`numerics_gap()`: the bf16 logits of one block under our numerics vs the upstream order on the same model
(max |diff|), the gap the upstream numerics switch (model.use_numerics) closes.
"""

from __future__ import annotations

import math
import random

import pandas as pd
import torch

from mrp_repro.decoding.engine import BlockState, generate, masked_confidence, top_masked
from mrp_repro.decoding.mrp_modes import Remask
from mrp_repro.decoding.upstream import generate_upstream
from mrp_repro.decoding.upstream_remask import UpstreamRemask, residual_veto
from mrp_repro.model import ModelConfig, SDARModel, use_numerics
from mrp_repro.mrp import MRPHead

__all__ = ["models", "compare", "numerics_gap", "main"]

MASK, EOS = 151_669, 151_645  # SDAR's <|MASK|> and <|im_end|>; EOS never chosen by these random weights


def _special(vocab: int) -> tuple[int, int]:
    """(mask, eos): SDAR's at its vocabulary, else the last two ids."""
    return (MASK, EOS) if vocab > MASK else (vocab - 1, vocab - 2)
BLOCK, HEAD_LAYERS, N_PROMPTS, PROMPT_LEN, MAX_NEW = 8, 3, 3, 13, 24
TAU, DELTAS = 0.5, (0.5, 1.0, 2.0)
HEAD_GAIN = 0.2  # the head's final norm gain scale


def models(seed: int = 0, dtype=torch.float32, vocab: int | None = None) -> tuple[SDARModel, MRPHead]:
    """A random backbone and 3-layer head at SDAR's vocabulary (or `vocab`: the test's smaller one), norm gains
    uniform in [0.25, 1.75] (the head's final one times HEAD_GAIN)."""
    from mrp_repro.sdar_mini import LM_HEAD_STD, MINI_CONFIG

    cfg = ModelConfig(**{**MINI_CONFIG, "vocab_size": vocab or MINI_CONFIG["vocab_size"]})
    g = torch.Generator().manual_seed(seed)
    std = 1 / math.sqrt(cfg.hidden_size)
    m = SDARModel(cfg).init_weights(std=std, generator=g)
    h = MRPHead(cfg, HEAD_LAYERS).init_weights("normal", std, generator=g)
    with torch.no_grad():
        m.lm_head.weight.normal_(0.0, LM_HEAD_STD, generator=g)  # confident picks: dynamic reveals in parallel
        for mod in (m, h):
            for name, p in mod.named_parameters():
                if "norm" in name:
                    p.copy_(torch.rand(p.shape, generator=g) * 1.5 + 0.25)
        h.norm.weight.mul_(HEAD_GAIN)  # |C| ~ 1-4, the range the delta sweep probes (their median |C| ~ 3.5)
    return m.to(dtype).eval(), h.to(dtype).eval()


class OursVariant(Remask):
    """Ours (`Remask(tau, "delta")`) with either cause changed to theirs: `pre_reveal` (a), `own_block` (b).
    A diagnostic: with both changed it should decode as upstream (fp32, no [MASK] pick, no tie)."""

    def __init__(self, tau: float, delta: float, head, pre_reveal: bool, own_block: bool):
        super().__init__(tau, "delta", delta, head)
        self.pre_reveal, self.own_block = pre_reveal, own_block
        self.name = f"ours{'+a' if pre_reveal else ''}{'+b' if own_block else ''}({tau},{delta:g})"

    def denoise(self, st: BlockState) -> None:
        self._flush(st)
        while st.rows_needing_work().any():
            masked = st.masked
            out = st.backbone()
            self._flush(st)
            tok, conf = masked_confidence(out.logits, masked, st.mask_id)
            fresh = ((conf > self.tau) & masked) | top_masked(conf, masked, 1)  # (B, L)
            ids = st.ids if self.pre_reveal else torch.where(fresh, tok, st.ids)
            cache = None if self.own_block else st.ctx["cache"]
            h_C = self.head(out.hidden, ids, st.positions, st.model.embed_tokens, cache, st.key_valid)
            st._count("mrp_forwards", fresh.any(1))
            keep = residual_veto(fresh, tok, st.model.lm_head(h_C), self.delta)
            st.reveal(fresh, tok)
            st.revoke(fresh & ~keep)
            st.step += 1


def _prompts(seed: int = 0, vocab: int = 151_000) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(0, min(vocab, 151_000)) for _ in range(PROMPT_LEN)] for _ in range(N_PROMPTS)]


def compare(seed: int = 0, dtype=torch.float32, deltas=DELTAS, tau: float = TAU, vocab: int | None = None
            ) -> pd.DataFrame:  # fmt: skip
    """One row per (delta, variant): agreement with upstream and the counters (module docstring)."""
    m, h = models(seed, dtype, vocab)
    ps = _prompts(seed, m.config.vocab_size - 2)
    mask, eos = _special(m.config.vocab_size)
    rows = []
    for delta in deltas:
        with use_numerics("upstream", m, h):
            up = generate_upstream(m, ps, UpstreamRemask(tau, delta, head=h), BLOCK, mask, [eos], MAX_NEW)
        runs = {"upstream": up}
        for a, b in ((False, False), (True, False), (False, True), (True, True)):
            pol = OursVariant(tau, delta, h, a, b) if (a or b) else Remask(tau, "delta", delta=delta, head=h)
            runs[pol.name.split("(")[0] if (a or b) else "ours"] = generate(m, ps, pol, BLOCK, mask, [eos], MAX_NEW)
        for name, r in runs.items():
            agree = sum(x == y for t, u in zip(r.tokens, up.tokens, strict=True)
                        for x, y in zip(t[:MAX_NEW], u[:MAX_NEW], strict=False))  # fmt: skip
            fw = sum(s.denoise_forwards for s in r.stats)
            tok = sum(s.tokens for s in r.stats)
            rows.append(dict(delta=delta, variant=name, tokens=tok, agree_with_upstream=agree, denoise_forwards=fw,
                             tpf=round(tok / max(fw, 1), 2), mrp_forwards=sum(s.mrp_forwards for s in r.stats),
                             vetoed=sum(s.revoked for s in r.stats)))  # fmt: skip
    return pd.DataFrame(rows)


def numerics_gap(seed: int = 0) -> pd.DataFrame:
    """bf16 logits (backbone A, head residual C) of one decoding block after a 2-block prefill: ours vs the
    upstream order, max |diff| and the logits' scale."""
    m, h = models(seed, torch.bfloat16)
    ids = torch.tensor(_prompts(seed)[0][:BLOCK] * 3)[None]  # (1, 3L)
    L = BLOCK
    out = {}
    for num in ("ours", "upstream"):
        with use_numerics(num, m, h), torch.no_grad():
            cache = m.new_cache(1, 3 * L)
            m.prefill(ids[:, : 2 * L], torch.arange(2 * L)[None], torch.ones(1, 2 * L, dtype=torch.bool), cache, L)
            pos = torch.arange(2 * L, 3 * L)[None]
            o = m.forward_block(ids[:, 2 * L :], pos, cache)
            out[num] = (o.logits.float(), m.lm_head(h(o.hidden, ids[:, 2 * L :], pos, m.embed_tokens)).float())
    (A0, C0), (A1, C1) = out["ours"], out["upstream"]
    return pd.DataFrame([dict(tensor="A (backbone logits)", max_abs_diff=(A0 - A1).abs().max().item(),
                              max_abs=A1.abs().max().item()),
                         dict(tensor="C (head residual)", max_abs_diff=(C0 - C1).abs().max().item(),
                              max_abs=C1.abs().max().item())])  # fmt: skip


def main(argv=None) -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    print(compare(args.seed).to_string(index=False))
    print()
    print(numerics_gap(args.seed).to_string(index=False))


if __name__ == "__main__":
    from mrp_repro.cli import run_cli

    run_cli(main)  # a user error, Ctrl-C or a full disk is one error: line
