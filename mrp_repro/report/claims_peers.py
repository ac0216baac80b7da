"""MRP against the best training-free method at equal cost (issue 37): the claims that read the peers grid.

    from mrp_repro.report import claims_peers
    claims_peers.speculative(tables, ctx)   # Outcomes: MRP speculative(K) over each training-free lossless drafter
    claims_peers.remask(tables, ctx)        # Outcomes: MRP remask(0.5, tau) over the training-free frontier

Both read `peers_runs` (report.peers: every method on one engine, prompts and batch size, with its head calls and
extra block-rows) and charge each row what it costs (`charged`: denoising forwards, a head call at head_cost, a block
row beyond one at row_cost, the cost model's at the grid's batch size: cost_model's head_cost and row_cost, the
charges of peers.md's charged_tpf).

- speculative: per benchmark, at the paper's K (3): the charged-TPF ratio of MRP speculative(K) over each
  training-free drafter lossless against static(1) at the same verify rows (the SSD / FreeDave chain,
  speculative(K, naive); the Spiffy draft graph, spiffy(K)), paired percentile bootstrap over prompts. Holds: the
  ratio's CI above 1 against every one of them (so against the best; no correction needed for an all-of test); does
  not hold: below 1 against one; a drafter whose outputs are not static(1)'s is left out and named.
- remask: per benchmark, the accuracy margin (points) of remask(0.5, tau) (the paper's τ and rule) over the
  training-free frontier at its charged TPF: static(1), every dynamic(τ), every WINO(τ1, τ2) and every S2D2(τ) of the
  grid (S2D2 where the profile declares an AR mode: the SDAR profiles), the Pareto points joined
  (report.pareto.frontier); paired bootstrap (each replicate resamples prompts and recomputes every point and the
  frontier). Not measurable beyond the frontier's fastest point or on a segment wider than decoding.frontier_max_gap
  points (the frontier is a guess there).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from mrp_repro.measure.cost import weighted_denoise_forwards
from mrp_repro.measure.stats import ratio_ci
from mrp_repro.report import pareto
from mrp_repro.report.verdicts import HOLDS, NOT, NOT_SHOWN, Outcome, missing, na

__all__ = ["speculative", "remask", "charged", "costs_at", "SPEC_PEERS", "FREE_METHODS", "REMASK_TAU", "REMASK_RULE"]

#: the training-free drafters lossless against static(1), compared at MRP's verify rows (their K / D = MRP's K)
SPEC_PEERS = ("speculative-naive", "spiffy")
#: the training-free methods whose points make the remasking claim's frontier (and static(1) beside them)
FREE_METHODS = ("static", "dynamic", "wino", "s2d2")
#: the paper's remasking τ and rule
REMASK_TAU, REMASK_RULE = 0.5, "tau"


def costs_at(tables, batch_size: int) -> tuple[float, float] | None:
    """(head_cost, row_cost) of cost_model at `batch_size`, or None (not measured there)."""
    t = tables.get("cost_model")
    if t is None or t.empty or not {"batch_size", "head_cost", "row_cost"} <= set(t.columns):
        return None
    hit = t[t["batch_size"] == batch_size]
    return (float(hit["head_cost"].iloc[0]), float(hit["row_cost"].iloc[0])) if len(hit) else None


def charged(runs: pd.DataFrame, head_cost: float, row_cost: float) -> pd.Series:
    """Forwards charged per row: denoising forwards, head calls at head_cost, extra block-rows at row_cost."""
    return weighted_denoise_forwards(runs, head_cost) + row_cost * runs["extra_rows"].astype(float)


def _grid(tables, ctx):
    """(peers_runs, head_cost, row_cost) or a not-measured outcome list."""
    if (gone := missing(tables, "peers_runs")) is not None:
        return gone
    runs = tables["peers_runs"]
    c = costs_at(tables, int(runs["batch_size"].iloc[0]))
    if c is None:
        bs = int(runs["batch_size"].iloc[0])
        return na(f"no cost model (head_cost, row_cost) at the peers grid's batch size {bs}")
    return runs, *c


def _setting(runs, bench, setting) -> pd.DataFrame:
    return runs[(runs["benchmark"] == bench) & (runs["setting"] == setting)].set_index("problem_id")


def speculative(tables, ctx, K: int = 3) -> list[Outcome]:
    got = _grid(tables, ctx)
    if isinstance(got, list):
        return got
    runs, hc, rc = got
    out = []
    for bench in dict.fromkeys(runs["benchmark"]):
        b = runs[runs["benchmark"] == bench]
        mrp = b[(b["method"] == "speculative-mrp") & (b["K"] == K)]
        if mrp.empty:
            out += na(f"no MRP speculative({K}) rows in peers_runs", bench)
            continue
        mrp = mrp.set_index("problem_id")
        static = _setting(runs, bench, "static(1)")
        rows, failed = [], []
        for meth in SPEC_PEERS:
            for setting in dict.fromkeys(b.loc[(b["method"] == meth) & (b["K"] == K), "setting"]):
                p = _setting(runs, bench, setting)
                ids = p.index.intersection(static.index)
                if not len(ids) or not (p.loc[ids, "text"].astype(str) == static.loc[ids, "text"].astype(str)).all():
                    failed.append(setting)  # not lossless here: no speed of it is compared
                    continue
                ids = mrp.index.intersection(p.index)
                r = ratio_ci(mrp.loc[ids, "tokens"], charged(mrp.loc[ids], hc, rc), p.loc[ids, "tokens"],
                             charged(p.loc[ids], hc, rc), ctx.n_boot, ctx.ci)  # fmt: skip
                tpf = p.loc[ids, "tokens"].sum() / charged(p.loc[ids], hc, rc).sum()
                rows.append((setting, tpf, *r))
        if not rows:
            out += na(f"no training-free lossless drafter at K = {K} in peers_runs" +
                      (f" ({', '.join(failed)} differ from static(1))" if failed else ""), bench)  # fmt: skip
            continue
        best = max(rows, key=lambda x: x[1])  # the fastest training-free drafter, charged
        mrp_tpf = mrp["tokens"].sum() / charged(mrp, hc, rc).sum()
        if all(r[3] > 1 for r in rows):
            verdict, why = HOLDS, "MRP's charged TPF is above every training-free drafter's (CI above 1)"
        elif any(r[4] < 1 for r in rows):
            verdict, why = NOT, "a training-free drafter's charged TPF is above MRP's (CI below 1)"
        else:
            verdict, why = NOT_SHOWN, "the CI holds 1 against at least one training-free drafter"
        each = "; ".join(f"over {s}: ×{pt:.2f} [{lo:.2f}, {hi:.2f}]" for s, _, pt, lo, hi in rows)
        note = f"; left out, not identical to static(1): {', '.join(failed)}" if failed else ""
        out.append(Outcome(
            bench, f"speculative({K},mrp) charged TPF {mrp_tpf:.2f}, the best training-free {best[0]} {best[1]:.2f}; "
            f"{each}", "", verdict, why + note,
            stat="charged-TPF ratio of MRP speculative(K) over each training-free lossless drafter",
            null="1", control=f"the best training-free drafter at equal verify rows: {best[0]}",
            control_verdict=f"×{best[2]:.2f} [{best[3]:.2f}, {best[4]:.2f}]"))  # fmt: skip
    return out


def _stack(runs, bench, settings, ids, col) -> np.ndarray:
    """(S, n) values of `col` per setting (rows) on prompts `ids` (columns)."""
    return np.stack([_setting(runs, bench, s).loc[ids, col].astype(float).to_numpy() for s in settings])


def remask(tables, ctx, tau: float = REMASK_TAU, rule: str = REMASK_RULE) -> list[Outcome]:
    got = _grid(tables, ctx)
    if isinstance(got, list):
        return got
    runs, hc, rc = got
    runs = runs.assign(_charged=charged(runs, hc, rc))
    out = []
    for bench in dict.fromkeys(runs["benchmark"]):
        b = runs[runs["benchmark"] == bench]
        target = b[(b["method"] == "remask") & np.isclose(b["threshold"].astype(float), tau) & (b["rule"] == rule)]
        if target.empty:
            out += na(f"no remask({tau}, {rule}) rows in peers_runs", bench)
            continue
        name = str(target["setting"].iloc[0])
        free = list(dict.fromkeys(b.loc[b["method"].isin(FREE_METHODS), "setting"]))
        if "static(1)" not in free:
            out += na("no static(1) rows in peers_runs", bench)
            continue
        ids = target.set_index("problem_id").index
        for s in free:
            ids = ids.intersection(_setting(runs, bench, s).index)
        settings = [name, *free]
        acc = _stack(runs, bench, settings, ids, "correct")  # (S, n)
        tok, den = _stack(runs, bench, settings, ids, "tokens"), _stack(runs, bench, settings, ids, "_charged")

        def margin(sel, acc=acc, tok=tok, den=den):
            a, x = 100 * acc[:, sel].mean(1), tok[:, sel].sum(1) / den[:, sel].sum(1)
            return float(a[0] - pareto.frontier(x[0], x[1:], a[1:])[0]), x, a

        m, x, a = margin(np.arange(len(ids)))
        span, _ = pareto.frontier_gap(x[0], x[1:], a[1:])
        stat = "accuracy margin of remask(0.5, tau) over the training-free frontier at its charged TPF"
        where = f"{name} at charged TPF {x[0]:.2f}: {a[0]:.1f}%"
        if math.isnan(m):
            out += na(f"{where}, faster than every training-free setting (the frontier is not extrapolated)", bench)
            continue
        if span[0] > ctx.frontier_max_gap:
            out += na(f"{where}: the training-free frontier jumps {span[0]:.1f} points there (more τ needed)", bench)
            continue
        rng = np.random.default_rng(0)
        boot = np.array([margin(rng.integers(0, len(ids), len(ids)))[0] for _ in range(ctx.n_boot)])
        boot = boot[~np.isnan(boot)]
        lo, hi = np.percentile(boot, [50 * (1 - ctx.ci), 50 * (1 + ctx.ci)]) if len(boot) else (math.nan, math.nan)
        verdict = HOLDS if lo > 0 else NOT if hi < 0 else NOT_SHOWN
        why = {HOLDS: "above the best training-free method at its cost (CI above 0)",
               NOT: "below the best training-free method at its cost (CI below 0)",
               NOT_SHOWN: "the CI holds 0"}[verdict]  # fmt: skip
        out.append(Outcome(bench, f"{where}; margin {m:+.1f} [{lo:+.1f}, {hi:+.1f}] points", "", verdict, why,
                           stat=stat, null="0", control="the training-free frontier: static(1), dynamic(τ), "
                           "WINO(τ1, τ2), Pareto points joined", control_verdict=f"{m:+.1f} [{lo:+.1f}, {hi:+.1f}]"))
    return out
