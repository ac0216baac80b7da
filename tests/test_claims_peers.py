"""The peer claims (report.claims_peers): MRP against the best training-free method at equal cost, on frames built
here with known answers (each verdict and each refusal)."""

import math

import numpy as np
import pandas as pd
import pytest

from mrp_repro.report import claims, claims_peers
from mrp_repro.report.verdicts import HOLDS, NA, NOT, NOT_SHOWN, Context

N = 60
CTX = Context(numeric=False, paper_model="SDAR-4B", n_boot=300, ci=0.95, frontier_max_gap=10.0)


def _rows(setting, method, *, tokens=16, forwards=16, mrp=0, extra=0, correct=1.0, K=math.nan, tau=math.nan,
          rule="", text=None, bench="synth-math", seed=0):  # fmt: skip
    """N prompts of one setting; forwards/correct: scalars or per-prompt arrays."""
    rng = np.random.default_rng(seed)
    corr = correct if np.ndim(correct) else (rng.random(N) < correct).astype(float)
    return pd.DataFrame({
        "benchmark": bench, "setting": setting, "method": method, "problem_id": [f"p{i}" for i in range(N)],
        "K": K, "threshold": tau, "rule": rule, "tokens": tokens, "denoise_forwards": forwards,
        "mrp_forwards": mrp, "extra_rows": extra, "correct": corr, "batch_size": 8,
        "text": [text or f"out{i}" for i in range(N)]})  # fmt: skip


def _costs(head=0.25, row=0.5):
    return pd.DataFrame([{"batch_size": 8, "head_cost": head, "row_cost": row}])


def _spec(mrp_forwards: int, naive_forwards: int, graph_text=None):
    f = [_rows("static(1)", "static"),
         _rows("speculative(3,mrp)", "speculative-mrp", forwards=mrp_forwards, mrp=4, extra=4, K=3),
         _rows("speculative(3,naive)", "speculative-naive", forwards=naive_forwards, extra=4, K=3),
         _rows("spiffy(3)", "spiffy", forwards=10, extra=4, K=3, text=graph_text)]  # fmt: skip
    return {"peers_runs": pd.concat(f, ignore_index=True), "cost_model": _costs()}


def test_speculative_holds_only_above_every_training_free_drafter():
    # MRP: 16 tokens / (6 + 0.25*4 + 0.5*4) = 16/9; the chain 16/(10 + 2) = 16/12; the graph 16/12
    (o,) = claims_peers.speculative(_spec(6, 10), CTX)
    assert o.verdict == HOLDS and "the best training-free" in o.ours and o.null == "1"
    assert o.control_verdict.startswith("×1.33")  # (16/9) / (16/12)
    (o,) = claims_peers.speculative(_spec(6, 5), CTX)  # the chain: 16/7, above MRP
    assert o.verdict == NOT and "speculative(3,naive)" in o.control
    # a graph not identical to static(1) is left out and named; the chain alone decides
    (o,) = claims_peers.speculative(_spec(6, 10, graph_text="other"), CTX)
    assert o.verdict == HOLDS and "left out, not identical to static(1): spiffy(3)" in o.reason


def test_speculative_not_shown_when_the_ci_holds_one():
    t = _spec(6, 10)
    r = t["peers_runs"]
    rng = np.random.default_rng(1)
    # per prompt, MRP and the chain cost the same on average, with noise: the ratio's CI holds 1
    r.loc[r["setting"] == "speculative(3,mrp)", "denoise_forwards"] = rng.integers(4, 17, N)
    r.loc[r["setting"] == "speculative(3,naive)", "denoise_forwards"] = rng.integers(4, 17, N) + 1
    r.loc[r["setting"] == "spiffy(3)", "denoise_forwards"] = 40
    (o,) = claims_peers.speculative(t, CTX)
    assert o.verdict == NOT_SHOWN, o


def test_missing_grid_or_costs_is_not_measured():
    assert claims_peers.speculative({}, CTX)[0].verdict == NA
    t = _spec(6, 10)
    t["cost_model"] = _costs().drop(columns="row_cost")
    assert claims_peers.remask(t, CTX)[0].verdict == NA and "row_cost" in claims_peers.remask(t, CTX)[0].reason


def _remask(acc_remask: float, remask_forwards: int = 8):
    rng = np.random.default_rng(0)
    f = [_rows("static(1)", "static", forwards=16, correct=np.ones(N)),
         _rows("dynamic(0.9)", "dynamic", forwards=8, tau=0.9, correct=(rng.random(N) < 0.9).astype(float)),
         _rows("dynamic(0.5)", "dynamic", forwards=4, tau=0.5, correct=(rng.random(N) < 0.6).astype(float)),
         _rows("wino(0.5,0.9)", "wino", forwards=5, extra=5, tau=0.5, correct=(rng.random(N) < 0.7).astype(float)),
         _rows("remask(0.5,tau)", "remask", forwards=remask_forwards, mrp=remask_forwards, tau=0.5, rule="tau",
               correct=(rng.random(N) < acc_remask).astype(float))]  # fmt: skip
    return {"peers_runs": pd.concat(f, ignore_index=True), "cost_model": _costs(head=0.25, row=0.5)}


def test_remask_is_judged_against_the_training_free_frontier_at_its_cost():
    # remask(0.5): 16 tokens / (8 + 0.25*8) = 1.6 TPF; the frontier there lies between static(1) (1.0, 100%) and
    # dynamic(0.9) (2.0, ~90%): about 94%
    (o,) = claims_peers.remask(_remask(1.0), CTX)
    assert o.verdict == HOLDS and o.null == "0", o
    (o,) = claims_peers.remask(_remask(0.5), CTX)
    assert o.verdict == NOT, o
    # faster than every training-free point: the frontier is not extrapolated
    (o,) = claims_peers.remask(_remask(0.9, remask_forwards=2), CTX)
    assert o.verdict == NA and "faster than every training-free setting" in o.reason


def test_the_peer_claims_are_declared_and_run_in_check_claims():
    ids = [c.id for c in claims.CLAIMS]
    assert {"mrp-vs-peers-speculative", "mrp-vs-peers-remask"} <= set(ids)
    rem = _remask(1.0)["peers_runs"]
    grid = pd.concat([_spec(6, 10)["peers_runs"], rem[rem["setting"] != "static(1)"]], ignore_index=True)
    rep = claims.check_claims({"peers_runs": grid, "cost_model": _costs()}, n_boot=300)
    got = rep.set_index("id")
    assert got.loc["mrp-vs-peers-speculative", "verdict"] == HOLDS
    assert got.loc["mrp-vs-peers-remask", "verdict"] in (HOLDS, NOT_SHOWN, NOT)
    for cid in ("mrp-vs-peers-speculative", "mrp-vs-peers-remask"):
        r = got.loc[cid]
        assert r["stat"] in r["declared"] and r["stat_null"] in r["declared"], cid


@pytest.mark.parametrize("rule", ["tau"])
def test_constants_are_the_papers(rule):
    assert claims_peers.REMASK_TAU == 0.5 and claims_peers.REMASK_RULE == rule
