"""Every figure and table writer produces non-empty files from small synthetic frames."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from mrp_repro import paper, plots  # noqa: E402


@pytest.fixture(scope="module")
def runs():
    return paper.synthetic_runs(n=12)


def _written(paths):
    assert paths and all(p.exists() and p.stat().st_size > 0 for p in paths), paths


def _fig(fig, tmp_path, name):
    paths = plots.save_figure(fig, tmp_path, name)
    assert [p.suffix for p in paths] == [".png", ".pdf"]
    _written(paths)
    matplotlib.pyplot.close(fig)


def test_save_table_writes_md_tex_csv(tmp_path, runs):
    t = paper.remasking_table(runs, n_boot=20)
    paths = plots.save_table(t, tmp_path, "remasking")
    _written(paths)
    md = paths[0].read_text()
    assert "[" in md and "paper_baseline_accuracy" in md  # ours with CI beside the paper's
    assert pd.read_csv(paths[2]).shape == t.shape


def test_out_dir_for_profile(tmp_runs, smoke_profile):
    d = plots.out_dir(smoke_profile)
    assert d.name == "smoke" and d.is_dir()


def test_figures(tmp_path, runs):
    adj = pd.DataFrame(
        [
            {"distance": d, "kl_mean": 0.1 * d * s, "top1_agreement": 1 - 0.05 * d * s, "n_positions": 9, "model": m}
            for m, s in (("trained", 1), ("random-init", 4))
            for d in (1, 2, 3)
        ]
    )
    _fig(plots.plot_adjacent(adj), tmp_path, "adjacent")
    _fig(plots.plot_remasking(paper.remasking_table(runs, rule=None, n_boot=10)), tmp_path, "remasking")
    _fig(plots.plot_lookahead(paper.lookahead_table(runs, n_boot=10)), tmp_path, "lookahead")
    acc = pd.DataFrame({"accept_length": np.arange(20) % 4, "k": 3})
    _fig(plots.plot_speculative(runs, acc), tmp_path, "speculative")
    _fig(plots.plot_speculative(runs, None), tmp_path, "speculative_noacc")
    sp = plots.plot_speedup(paper.speculative_table(runs, n_boot=10), paper.direct_table(runs, n_boot=10))
    _fig(sp, tmp_path, "speedup")
    curve = pd.DataFrame({"step": [0, 5, 10], "train_kl": [1.0, 0.5, 0.3], "heldout_kl": [1.0, 0.6, 0.4]})
    curve["baseline_kl"] = 1.0
    _fig(plots.plot_training_curve(curve), tmp_path, "curve")
    trace = [{"row": 0, "block": 1, "step": s, "kind": "reveal", "pos": 8 + s, "token": 5 + s} for s in range(8)]
    trace.append({"row": 0, "block": 1, "step": 2, "kind": "revoke", "pos": 9, "token": 6})
    _fig(plots.plot_trajectory(trace), tmp_path, "trajectory")
    _fig(plots.plot_trajectory([]), tmp_path, "trajectory_empty")
