"""measure.stats: CIs bracket the estimate, paired and ratio CIs, the one summary (percent, *_lo / *_hi)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from runs_helpers import synthetic_runs

from mrp_repro.measure import stats


def test_bootstrap_and_mean_ci():
    lo, hi = stats.bootstrap_ci([1, 0, 1, 1, 0, 1, 1, 1], n_boot=500)
    assert 0 <= lo <= 0.75 <= hi <= 1
    m, lo, hi = stats.mean_ci(np.r_[np.ones(30), np.zeros(10)], n_boot=500)
    assert m == pytest.approx(75.0) and lo < m < hi  # percent
    assert all(math.isnan(x) for x in stats.mean_ci([], 10))
    assert stats.mean_ci([1.0], 10) == (100.0, 100.0, 100.0)


def test_paired_diff_and_ratio():
    d = stats.paired_diff([1, 1, 1, 0], [0, 0, 1, 0], n_boot=500)
    assert d["diff"] == pytest.approx(50.0) and d["diff_lo"] <= 50.0 <= d["diff_hi"] and d["n"] == 4
    with pytest.raises(ValueError, match="problem_id"):
        stats.paired_diff([1, 0], [1])
    r, lo, hi = stats.ratio_ci([10, 10], [1, 1], [10, 10], [2, 2], n_boot=50)
    assert r == pytest.approx(2.0) and lo == pytest.approx(2.0) and hi == pytest.approx(2.0)


def test_summarize_one_row_per_setting_in_percent():
    runs = synthetic_runs(n=20)
    s = stats.summarize(runs, n_boot=50)
    assert len(s) == runs.groupby(["benchmark", "setting"]).ngroups
    assert ((s["accuracy_lo"] <= s["accuracy"]) & (s["accuracy"] <= s["accuracy_hi"])).all()
    st = s[s["mode"] == "static"]
    assert (st["speedup"] == 1.0).all() and (st["tpf"] == 1.0).all() and st["lossless"].all()
    oracle = s[(s["drafter"] == "oracle")]
    assert (oracle["tpf_share_of_oracle"] == 1.0).all()
    spec = s[(s["mode"] == "speculative") & (s["drafter"] == "mrp")]
    assert (spec["mean_accept"] == 2.0).all() and (spec["speedup"] > 1).all()
    with pytest.raises(KeyError, match="identical_to_static"):
        stats.summarize(runs.drop(columns="identical_to_static"))
    with pytest.raises(ValueError, match="more than one static"):
        two = pd.concat([runs, runs.assign(setting=runs["setting"] + "'")])
        stats.summarize(two[two["mode"] == "static"], by=["model", "benchmark", "mode", "setting", "batch_size"])
