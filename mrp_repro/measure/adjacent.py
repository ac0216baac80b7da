"""The motivating observation (METHOD.md §2): a block's logits at adjacent denoising steps are similar.

    from mrp_repro.measure.adjacent import adjacent_step_similarity
    df = adjacent_step_similarity(bb, problems, max_distance=4)

Static decoding (one reveal per step, greedy) is run with a recording policy that
keeps the block's logits at every step. For step t and t+k of the same block, on
positions still masked at step t+k whose confidence at step t is below
`conf_below` (not trivially certain), we measure KL(softmax A_t || softmax A_{t+k})
and top-1 agreement. The same is measured on a randomly initialised model of the
same shape (labels "random init": std 0.02, the training init, whose logits are
nearly uniform; "random init (std 1/sqrt(H))": sharper, input-dependent logits),
each decoding its own trajectories.

The figure reads SUBSET (positions with confidence < 0.99): median KL and top-1 agreement, TRAINED against
the random inits.

The claim reads one statistic, chosen before looking at the trained model's value: the *relative divergence*

    relative_kl(d) = median KL(A_t[i] || A_{t+d}[i]) / median KL(A_t[i] || A_t[j])

over the SUBSET positions i still masked at steps t and t + d, where j is the next other position masked at step t
in the same block (cyclically). The denominator is the null: how different two positions' logits of the same block
state are. Why: small adjacent-step KL alone does not discriminate: a near-uniform model (the std 0.02 training
init) has tiny KL between any two of its distributions, and so "passes" any absolute threshold (committed
figures/tiny/adjacent.md: the random init's median KL 0.0001 is below the trained model's 0.0015). An untrained
model's masked slots all see the same [MASK] input, so its logits barely differ between positions either: its
ratio is near or above 1. A model with the paper's property predicts a different token at each position (large
denominator) and keeps each position's prediction while the block is revealed (small numerator): a ratio far
below 1. The rule (report.claims): relative_kl at d = 1 at most RELATIVE_KL_MAX (an order of magnitude closer
than an unrelated position), judged on the upper end of a bootstrap CI over positions, and failing on the random
inits of the same shape. relative_kl_lo / relative_kl_hi: that CI.

Every reduction over the vocabulary (log-softmax, the KL sums) and over positions (the mean) runs in float64, and
the table holds the results rounded to float32 (issue 28): a float32 sum's order, and so its last bits, depends
on the CPU's SIMD width (AVX-512, AVX2, none), and the KL of two near-identical distributions is a small sum of
terms of both signs, so those bits moved kl_mean / kl_median / relative_kl by up to 0.4% between CPUs. In
float64 the order changes ~1e-16 of the value, far below float32's rounding, so the same logits give the same
table on every CPU (measured: docs/portability.md).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from mrp_repro.decoding import Static, masked_confidence, top_masked
from mrp_repro.model import SDARModel

__all__ = ["RecordingStatic", "adjacent_step_similarity", "step_pair_stats", "next_masked",
           "block_pair_stats", "frame_from_stats", "relative_kl", "SUBSET", "TRAINED", "RANDOM_INIT",
           "RANDOM_BASELINE", "RANDOM_MODELS", "RELATIVE_KL_MAX", "ADJACENT_COLUMNS"]  # fmt: skip

#: the subset, model labels and columns the figure and the claim read
SUBSET = "conf<0.99"
TRAINED = "trained"
RANDOM_INIT = "random init"  # std 0.02, the training init: near-uniform logits
RANDOM_BASELINE = "random init (std 1/sqrt(H))"  # a trained model's logit scale, input-dependent
RANDOM_MODELS = (RANDOM_INIT, RANDOM_BASELINE)
#: the claim's threshold on relative_kl at distance 1 (chosen before measuring the trained model: one order of
#: magnitude, adjacent steps ten times closer than two positions of the same state)
RELATIVE_KL_MAX = 0.1
ADJACENT_COLUMNS = ["model", "subset", "distance", "kl_mean", "kl_median", "top1_agreement", "n_positions",
                    "kl_null_median", "relative_kl", "relative_kl_lo", "relative_kl_hi"]  # fmt: skip


class RecordingStatic(Static):
    """Static(1) that records, per block, the logits (B, L, V) and masked set (B, L) before every reveal."""

    def __init__(self):
        super().__init__(1)
        self.blocks: list[list[tuple[torch.Tensor, torch.Tensor]]] = []

    def denoise(self, st) -> None:
        steps = []
        while st.rows_needing_work().any():
            out = st.backbone()
            masked = st.masked.clone()
            logits = out.logits.float().clone()
            logits[..., st.mask_id] = float("-inf")
            steps.append((logits, masked))
            tok, conf = masked_confidence(out.logits, st.masked, st.mask_id)
            st.reveal(top_masked(conf, st.masked, self.k), tok)
            st.step += 1
        self.blocks.append(steps)


def _pair_stats_logp(la: torch.Tensor, lb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """la, lb (N, V) log-probabilities -> KL(A||B) (N,), top-1 agreement (N,), in la's dtype."""
    pa = la.exp()
    diff = torch.where(pa > 0, la - lb, torch.zeros_like(la))
    kl = (pa * diff).sum(-1).clamp(min=0)
    return kl, (la.argmax(-1) == lb.argmax(-1)).float()


def step_pair_stats(a: torch.Tensor, b: torch.Tensor, select: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """a, b (B, L, V) logits (-inf allowed where both are -inf); select (B, L) -> KL(A||B), top-1 agreement
    (float64: the module docstring)."""
    return _pair_stats_logp(F.log_softmax(a[select].double(), -1), F.log_softmax(b[select].double(), -1))


def _step_terms(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per step, once: probabilities, log-probabilities with -inf (the mask column) as 0 (its probability is 0,
    so it adds nothing to a KL), top-1. Shapes (B, L, V), (B, L, V), (B, L); float64 (the module docstring)."""
    logp = F.log_softmax(logits.double(), -1)
    p = logp.exp()
    return p, logp.nan_to_num_(neginf=0.0), logits.argmax(-1)


def next_masked(masked: torch.Tensor) -> torch.Tensor:
    """masked (B, L) bool -> (B, L) long: for each position, the next other masked position of its row, cyclically
    (i + 1, i + 2, ... mod L); -1 where the row has no other masked position."""
    B, L = masked.shape
    nxt = torch.full((B, L), -1, dtype=torch.long, device=masked.device)
    i = torch.arange(L, device=masked.device)
    for s in range(1, L):
        j = (i + s) % L  # (L,)
        take = (nxt < 0) & masked[:, j]
        nxt = torch.where(take, j.expand(B, L), nxt)
    return nxt


def _null_kl(p: torch.Tensor, lp: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    """(B, L) KL(A[i] || A[next_masked(i)]) within one block state (p, lp (B, L, V)); NaN where there is none."""
    nxt = next_masked(masked)
    j = nxt.clamp(min=0)[..., None].expand_as(lp)  # (B, L, V)
    kl = (p * (lp - lp.gather(1, j))).sum(-1).clamp(min=0)
    return torch.where(masked & (nxt >= 0), kl, torch.full_like(kl, float("nan")))


def block_pair_stats(steps, max_distance: int, conf_below: float, acc: dict | None = None) -> dict:
    """One block's recorded steps [(logits (B, L, V), masked (B, L)), ...] -> acc {(subset, distance): [(n, 3)
    tensors of KL(A_t || A_t+d), top-1 agreement, null KL(A_t[i] || A_t[j])]} (appended to `acc` when given)."""
    acc = {} if acc is None else acc
    low_name = f"conf<{conf_below}"
    # the vocabulary-wide terms once per step, reused by every pair and subset: at vocabulary 151,936
    # they are the whole cost (step_pair_stats per pair and subset recomputed them 16 times per step). Only
    # steps t..t+max_distance are held (float64: twice float32's bytes, for max_distance + 1 steps, not all).
    terms: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
    for t in range(len(steps)):
        terms.pop(t - 1, None)
        for i in range(t, min(t + max_distance, len(steps) - 1) + 1):
            if i not in terms:
                terms[i] = _step_terms(steps[i][0])
        p_a, lp_a, top_a = terms[t]
        m_a = steps[t][1]
        null = _null_kl(p_a, lp_a, m_a)  # (B, L)
        low = p_a.amax(-1) < conf_below  # (B, L) confidence at step t
        for k in range(1, max_distance + 1):
            if t + k >= len(steps):
                break
            _, lp_b, top_b = terms[t + k]
            both = m_a & steps[t + k][1]
            if not both.any():
                continue
            kl = (p_a[both] * (lp_a[both] - lp_b[both])).sum(-1).clamp(min=0)
            pair = torch.stack([kl, (top_a[both] == top_b[both]).double(), null[both]], 1)
            acc.setdefault(("all", k), []).append(pair)
            if low[both].any():
                acc.setdefault((low_name, k), []).append(pair[low[both]])
    return acc


def _trajectory_stats(model, backbone, prompts, max_distance, conf_below, batch_size, max_new_tokens):
    """block_pair_stats over every block `model` decodes (static, one reveal per step) from `prompts`."""
    acc: dict[tuple[str, int], list[torch.Tensor]] = {}
    for i in range(0, len(prompts), batch_size):
        rec = RecordingStatic()
        backbone.generate(prompts[i : i + batch_size], rec, max_new_tokens, model=model)
        for steps in rec.blocks:
            block_pair_stats(steps, max_distance, conf_below, acc)
    return acc


def _f32(x) -> float:
    """A float64 statistic rounded to float32: its last bits (reduction order) never reach the table."""
    return float(np.float32(float(x)))


def frame_from_stats(acc: dict, label: str, n_boot: int = 1000, ci: float = 0.95, seed: int = 0) -> list[dict]:
    """block_pair_stats' accumulator -> one ADJACENT_COLUMNS row per (subset, distance) for model `label`;
    statistics in float64, rounded to float32 (the module docstring)."""
    rows = []
    for (subset, k), parts in sorted(acc.items()):
        x = torch.cat(parts).double()
        rel, lo, hi = relative_kl(x[:, 0], x[:, 2], n_boot, ci, seed)
        rows.append(dict(model=label, subset=subset, distance=k, kl_mean=_f32(x[:, 0].mean()),
                         kl_median=_f32(x[:, 0].median()), top1_agreement=_f32(x[:, 1].mean()),
                         n_positions=int(x.shape[0]), kl_null_median=_f32(x[:, 2].nanmedian()),
                         relative_kl=_f32(rel), relative_kl_lo=_f32(lo), relative_kl_hi=_f32(hi)))  # fmt: skip
    return rows


@torch.no_grad()
def adjacent_step_similarity(
    backbone,
    problems,
    max_distance: int = 4,
    conf_below: float = 0.99,
    n_problems: int | None = 64,
    batch_size: int = 32,
    max_new_tokens: int | None = None,
    random_baseline: bool = True,
    seed: int = 0,
    n_boot: int = 1000,
    ci: float = 0.95,
) -> pd.DataFrame:
    """Tidy frame (ADJACENT_COLUMNS): model, subset ("all" / "conf<0.99"), distance k, kl_mean, kl_median,
    top1_agreement, n_positions, kl_null_median, relative_kl [relative_kl_lo, relative_kl_hi] (the module
    docstring). Rows for the RANDOM_MODELS come from freshly initialised models of the same shape (seeded)."""
    from mrp_repro.backbone import encode_prompts

    probs = list(problems)[: n_problems or None]
    prompts = encode_prompts(backbone, probs)
    mnt = max_new_tokens or backbone.profile.decoding.max_new_tokens
    models = [(TRAINED, backbone.model)]
    if random_baseline:
        # std 0.02 (the training init) gives near-uniform, input-independent logits, a trivially
        # "similar" baseline; std 1/sqrt(H) gives input-dependent logits at a trained model's scale.
        cfg = backbone.model.config
        p = backbone.model.lm_head.weight
        for label, std in ((RANDOM_INIT, 0.02), (RANDOM_BASELINE, cfg.hidden_size**-0.5)):
            g = torch.Generator().manual_seed(seed)
            rnd = SDARModel(cfg).init_weights(std, g)
            models.append((label, rnd.to(device=p.device, dtype=p.dtype).eval()))
    rows = []
    for label, model in models:
        acc = _trajectory_stats(model, backbone, prompts, max_distance, conf_below, batch_size, mnt)
        rows += frame_from_stats(acc, label, n_boot, ci, seed)
    df = pd.DataFrame(rows, columns=ADJACENT_COLUMNS)
    if df.empty:
        df.loc[0] = [TRAINED, "all", 1, math.nan, math.nan, math.nan, 0, math.nan, math.nan, math.nan, math.nan]
    return df


def relative_kl(kl: torch.Tensor, null: torch.Tensor, n_boot: int = 1000, ci: float = 0.95,
                seed: int = 0) -> tuple[float, float, float]:  # fmt: skip
    """(median(kl) / median(null), lo, hi): the ratio of medians over the same positions (kl, null (n,)), and its
    percentile bootstrap interval resampling positions (seeded). NaN null values (no other masked position) are
    dropped with their pair."""
    keep = ~torch.isnan(null)
    kl, null = kl[keep].double(), null[keep].double()
    n = kl.numel()
    if n == 0:
        return (math.nan, math.nan, math.nan)
    point = float(kl.median() / null.median()) if float(null.median()) > 0 else math.inf
    if n == 1 or n_boot <= 0:
        return (point, point, point)
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, n, (n_boot, n), generator=g)
    r = kl[idx].median(1).values / null[idx].median(1).values  # (n_boot,); inf where a null median is 0
    a = (1 - ci) / 2
    r = torch.where(torch.isnan(r), torch.full_like(r, math.inf), r)  # 0 / 0: not closer than the null
    q = torch.quantile(r, torch.tensor([a, 1 - a], dtype=r.dtype))
    return (point, float(q[0]), float(q[1]))
