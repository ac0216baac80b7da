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

The figure and the claim read one subset and one statistic, the README's: SUBSET (positions with
confidence < 0.99), median KL and top-1 agreement, TRAINED against RANDOM_BASELINE.
"""

from __future__ import annotations

import math

import pandas as pd
import torch
import torch.nn.functional as F

from mrp_repro.decoding import Static, masked_confidence, top_masked
from mrp_repro.model import SDARModel

__all__ = ["RecordingStatic", "adjacent_step_similarity", "step_pair_stats", "SUBSET", "TRAINED", "RANDOM_BASELINE",
           "ADJACENT_COLUMNS"]  # fmt: skip

#: the subset, model labels and columns the figure and the claim read
SUBSET = "conf<0.99"
TRAINED = "trained"
RANDOM_BASELINE = "random init (std 1/sqrt(H))"
ADJACENT_COLUMNS = ["model", "subset", "distance", "kl_mean", "kl_median", "top1_agreement", "n_positions"]


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
    """la, lb (N, V) log-probabilities -> KL(A||B) (N,), top-1 agreement (N,)."""
    pa = la.exp()
    diff = torch.where(pa > 0, la - lb, torch.zeros_like(la))
    kl = (pa * diff).sum(-1).clamp(min=0)
    return kl, (la.argmax(-1) == lb.argmax(-1)).float()


def step_pair_stats(a: torch.Tensor, b: torch.Tensor, select: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """a, b (B, L, V) logits (-inf allowed where both are -inf); select (B, L) -> KL(A||B), top-1 agreement."""
    return _pair_stats_logp(F.log_softmax(a[select], -1), F.log_softmax(b[select], -1))


def _step_terms(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per step, once: probabilities, log-probabilities with -inf (the mask column) as 0 (its probability is 0,
    so it adds nothing to a KL), top-1. Shapes (B, L, V), (B, L, V), (B, L)."""
    logp = F.log_softmax(logits, -1)
    p = logp.exp()
    return p, logp.nan_to_num_(neginf=0.0), logits.argmax(-1)


def _trajectory_stats(model, backbone, prompts, max_distance, conf_below, batch_size, max_new_tokens):
    acc: dict[tuple[str, int], list[torch.Tensor]] = {}
    low_name = f"conf<{conf_below}"
    for i in range(0, len(prompts), batch_size):
        rec = RecordingStatic()
        backbone.generate(prompts[i : i + batch_size], rec, max_new_tokens, model=model)
        for steps in rec.blocks:
            # the vocabulary-wide terms once per step, reused by every pair and subset: at vocabulary 151,936
            # they are the whole cost (step_pair_stats per pair and subset recomputed them 16 times per step)
            terms = [_step_terms(a) for a, _ in steps]
            for t in range(len(steps)):
                p_a, lp_a, top_a = terms[t]
                m_a = steps[t][1]
                low = p_a.amax(-1) < conf_below  # (B, L) confidence at step t
                for k in range(1, max_distance + 1):
                    if t + k >= len(steps):
                        break
                    _, lp_b, top_b = terms[t + k]
                    both = m_a & steps[t + k][1]
                    if not both.any():
                        continue
                    kl = (p_a[both] * (lp_a[both] - lp_b[both])).sum(-1).clamp(min=0)
                    pair = torch.stack([kl, (top_a[both] == top_b[both]).float()], 1)
                    acc.setdefault(("all", k), []).append(pair)
                    if low[both].any():
                        acc.setdefault((low_name, k), []).append(pair[low[both]])
            del terms
    return acc


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
) -> pd.DataFrame:
    """Tidy frame: model, subset ("all" / "conf<0.99"), distance k, kl_mean, kl_median,
    top1_agreement, n_positions. Rows for "random init" come from a freshly initialised
    model of the same shape (std 0.02, seeded)."""
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
        for label, std in (("random init", 0.02), (RANDOM_BASELINE, cfg.hidden_size**-0.5)):
            g = torch.Generator().manual_seed(seed)
            rnd = SDARModel(cfg).init_weights(std, g)
            models.append((label, rnd.to(device=p.device, dtype=p.dtype).eval()))
    rows = []
    for label, model in models:
        acc = _trajectory_stats(model, backbone, prompts, max_distance, conf_below, batch_size, mnt)
        for (subset, k), parts in sorted(acc.items()):
            x = torch.cat(parts)
            rows.append(
                dict(
                    model=label,
                    subset=subset,
                    distance=k,
                    kl_mean=float(x[:, 0].mean()),
                    kl_median=float(x[:, 0].median()),
                    top1_agreement=float(x[:, 1].mean()),
                    n_positions=int(x.shape[0]),
                )
            )
    df = pd.DataFrame(rows, columns=ADJACENT_COLUMNS)
    if df.empty:
        df.loc[0] = [TRAINED, "all", 1, math.nan, math.nan, math.nan, 0]
    return df
