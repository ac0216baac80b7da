"""Every figure draws every series of its table: counted series, points per series, legend labels, no empty
axis; a table that would blend rows into one point is refused. Small frames in the full runs schema."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.collections import PathCollection  # noqa: E402
from matplotlib.text import Annotation  # noqa: E402
from runs_helpers import LOOKAHEAD_K, SPEC_K, synthetic_adjacent, synthetic_runs  # noqa: E402

from mrp_repro.measure.adjacent import RANDOM_BASELINE, SUBSET, TRAINED  # noqa: E402
from mrp_repro.report import paper, plots, plots_base, plots_labels, plots_remask, tables  # noqa: E402

N = 12
BENCHES = ["synth-math", "synth-code"]


@pytest.fixture(scope="module")
def runs():
    return synthetic_runs(n=N)


def _written(paths):
    assert paths and all(p.exists() and p.stat().st_size > 0 for p in paths), paths


def _save(fig, tmp_path, name):
    paths = plots.save_figure(fig, tmp_path, name)
    assert [p.suffix for p in paths] == [".png", ".pdf"]
    _written(paths)
    matplotlib.pyplot.close(fig)


class _Series:
    def __init__(self, label, line):
        self.label, self.line = label, line

    def get_label(self):
        return self.label

    def get_xdata(self):
        return self.line.get_xdata()

    def get_ydata(self):
        return self.line.get_ydata()


def _lines(ax):
    """Labelled data series in drawing order: plot lines, and errorbars (their label sits on the container)."""
    from matplotlib.container import ErrorbarContainer

    bars = {c.lines[0]: c.get_label() for c in ax.containers if isinstance(c, ErrorbarContainer)}
    out = []
    for ln in ax.get_lines():
        label = bars.get(ln, ln.get_label())
        if not label.startswith("_"):
            out.append(_Series(label, ln))
    return out


def _scatters(ax):
    return [c for c in ax.collections if isinstance(c, PathCollection) and not c.get_label().startswith("_")]


def _legend(ax):
    leg = ax.get_legend()
    assert leg is not None, "axis has no legend"
    return [t.get_text() for t in leg.get_texts()]


def _not_empty(fig):
    for ax in fig.axes:
        assert ax.has_data(), f"empty axis: {ax.get_title()!r}"


def test_save_table_shows_value_and_ci(tmp_path, runs):
    t = paper.remasking_table(runs, n_boot=20)
    paths = tables.save_table(t, tmp_path, "remasking")
    _written(paths)
    md = paths[0].read_text()
    assert "paper_baseline_accuracy" in md and "accuracy_lo" not in md  # CIs merged into `value [lo, hi]`
    row = t.iloc[0]
    assert f"{row['gain']:.1f} [{row['gain_lo']:.1f}, {row['gain_hi']:.1f}]" in md
    assert pd.read_csv(paths[2]).shape == t.shape


def test_out_dir_for_profile(tmp_runs, smoke_profile):
    d = tables.out_dir(smoke_profile)
    assert d.name == "smoke" and d.is_dir()


def test_speculative_figures_draw_the_upstream_family_as_its_own_series(tmp_path):
    both = synthetic_runs(n=N, algorithms=("ours", "upstream"))
    fig = plots.plot_speculative(both)
    left, right = fig.axes[0], fig.axes[1:]
    assert [t.get_text() for t in left.get_xticklabels()] == (
        ["static"] + [f"K={k}" for k in SPEC_K] + ["upstream static"] + [f"upstream K={k}" for k in SPEC_K])
    assert [ax.get_title() for ax in right] == [f"{b}: acceptance length" for b in BENCHES]
    for ax in right:  # one panel per benchmark: each holds its own benchmark's series only
        assert [ln.get_label() for ln in _lines(ax)] == [f"{p}K={k}" for p in ("", "upstream ") for k in SPEC_K]
    one = synthetic_runs(n=N, algorithms=("ours", "upstream"), batch_size=1)  # the latency grid: the paper's speed
    fig = plots.plot_speedup(plots.at_batch(paper.speculative_table(one, n_boot=10), one))
    up = ", released code (upstream)"
    assert set(_fig_legend(fig)) == {"paper (SDAR-8B)"} | {f"MRP speculative K={k}{p}" for p in ("", up)
                                                           for k in SPEC_K}  # fmt: skip


def test_speculative_figure_every_k_and_the_oracle_ceiling(tmp_path, runs):
    fig = plots.plot_speculative(runs)
    _not_empty(fig)
    left, right = fig.axes[0], fig.axes[-1]
    pts = {c.get_label(): len(c.get_offsets()) for c in _scatters(left)}
    # per benchmark: one point per prompt for static and for each K; one ceiling mark per K
    assert pts == {**{b: N * (1 + len(SPEC_K)) for b in BENCHES},
                   **{f"{b} oracle ceiling (mean TPF, over its K column)": len(SPEC_K) for b in BENCHES}}  # fmt: skip
    assert [t.get_text() for t in left.get_xticklabels()] == ["static"] + [f"K={k}" for k in SPEC_K]
    assert set(_legend(left)) == set(pts)
    # the ceiling is drawn above the per-prompt points at every K (at K = 3 they share its level), beside them
    points = max(c.get_zorder() for c in _scatters(left) if "ceiling" not in c.get_label())
    for c in _scatters(left):
        if "ceiling" in c.get_label():
            assert c.get_zorder() > points and len(c.get_offsets()) == len(SPEC_K)
    assert len(left.collections[-1].get_offsets()) == len(SPEC_K)  # the last drawn: a ceiling, not points
    # each ceiling marker over its own benchmark's K column: inside the x span of that benchmark's points there
    for b in BENCHES:
        (pts_b,) = [c.get_offsets() for c in _scatters(left) if c.get_label() == b]
        (ceil,) = [c.get_offsets() for c in _scatters(left) if c.get_label().startswith(f"{b} oracle ceiling")]
        for k, (cx, _) in zip(SPEC_K, np.asarray(ceil), strict=True):
            col = np.asarray(pts_b)[np.abs(np.asarray(pts_b)[:, 0] - cx) < 0.5][:, 0]
            assert len(col) and col.min() <= cx <= col.max(), (b, k, cx)
    want = {f"K={k}" for k in SPEC_K}
    assert {ln.get_label() for ln in _lines(right)} == want and set(_legend(right)) == want
    assert len(fig.axes) == 1 + len(BENCHES)
    for ln in (ln for ax in fig.axes[1:] for ln in _lines(ax)):  # accept lengths 0..K
        K = int(ln.get_label().split("K=")[1])
        assert len(ln.get_xdata()) == K + 1 and np.isclose(np.sum(ln.get_ydata()), 1.0)
    _save(fig, tmp_path, "speculative")


def _fig_legend(fig):
    (leg,) = fig.legends
    return [t.get_text() for t in leg.get_texts()]


def test_speedup_figure_every_k_and_step_paper_at_k3_only(tmp_path, runs):
    both = synthetic_runs(n=N, algorithms=("ours", "upstream"), batch_size=1)  # the latency grid
    spec = plots.at_batch(paper.speculative_table(both, n_boot=10), both)
    spec_all_k = spec.assign(paper_throughput_speedup=1.4)  # even a table with a paper value beside every row
    fig = plots.plot_speedup(spec_all_k, plots.at_batch(paper.direct_table(both, n_boot=10), both))
    (ax,) = fig.axes  # one batch size: one panel
    bars = {c.get_label(): c for c in ax.containers if hasattr(c, "patches")}
    want = [f"MRP speculative K={k}{p}" for p in ("", ", released code (upstream)") for k in SPEC_K] + [
        "MRP direct step 1", "MRP direct step 2"]
    assert {k: len(v.patches) for k, v in bars.items()} == dict.fromkeys(want, len(BENCHES))
    assert sorted(_fig_legend(fig)) == sorted(want + ["paper (SDAR-8B)"])
    assert sorted(t.get_text() for t in ax.get_xticklabels()) == sorted(BENCHES)
    # the paper's number is the released code's K = 3: a black line across each upstream K = 3 bar, exactly its
    # width (a ◆ at a bar's edge was claimed by the bar beside it), and across no other speculative bar
    segs = [seg for c in ax.collections if c.get_label() == "paper (SDAR-8B)" for seg in c.get_segments()]
    assert segs and all(seg[0][1] == seg[1][1] for seg in segs)  # horizontal

    def over(p) -> bool:
        return any(np.allclose([seg[0][0], seg[1][0]], [p.get_x(), p.get_x() + p.get_width()]) for seg in segs)

    up3 = "MRP speculative K=3, released code (upstream)"
    assert all(over(p) for p in bars[up3].patches)
    assert not any(over(p) for k, v in bars.items() if "speculative" in k and k != up3 for p in v.patches)
    assert all(over(p) for k in ("MRP direct step 1", "MRP direct step 2") for p in bars[k].patches)  # the paper's
    assert len(segs) == sum(len(bars[k].patches) for k in (up3, "MRP direct step 1", "MRP direct step 2"))
    # the title names the paper's benchmark each line stands for (its numbers are SDAR's on them, not ours)
    title = fig._suptitle.get_text()
    pairs = set(zip(spec_all_k["benchmark"], spec_all_k["paper_benchmark"], strict=True))
    assert pairs and all(f"{p} beside {b}" in title for b, p in pairs) and "the paper's values: SDAR-8B on" in title
    _not_empty(fig)
    _save(fig, tmp_path, "speedup")
    with pytest.raises(ValueError, match="one paper model"):
        d = paper.direct_table(runs, n_boot=0).assign(paper_model="SDAR-4B", batch_size=32)
        plots.plot_speedup(spec, d)
    with pytest.raises(KeyError, match="at_batch"):  # a table that does not say its batch size
        plots.plot_speedup(spec.drop(columns="batch_size"))


def test_speedup_figure_marks_each_bar_whose_clock_gate_did_not_pass():
    one = synthetic_runs(n=N, batch_size=1)
    spec = plots.at_batch(paper.speculative_table(one, n_boot=10), one)
    gates = ["passed"] * len(spec)
    gates[0] = "unchecked: not re-timed by the passes"
    gates[-1] = "failed: repeatable"
    fig = plots.plot_speedup(spec.assign(clock_gate=gates))
    (ax,) = fig.axes
    for label in (plots.GATE_FAILED_LABEL, plots.GATE_UNCHECKED_LABEL):  # each kind its own mark, one bar each
        marks = [c for c in ax.collections if c.get_label() == label]
        assert sum(len(c.get_offsets()) for c in marks) == 1 and label in _fig_legend(fig)
    clean = plots.plot_speedup(spec.assign(clock_gate="passed"))  # every gate passed: no mark, no legend entry
    for label in (plots.GATE_FAILED_LABEL, plots.GATE_UNCHECKED_LABEL):
        assert label not in _fig_legend(clean)
        assert not any(c.get_label() == label for c in clean.axes[0].collections)


def test_speedup_figure_one_batch_size_per_panel(tmp_path):
    """Speculative at batch 1 and at batch 32 and direct at batch 32: two panels, no panel mixes batch sizes."""
    one = synthetic_runs(n=N, batch_size=1)
    many = synthetic_runs(n=N, batch_size=32)
    spec = pd.concat([plots.at_batch(paper.speculative_table(r, n_boot=10), r) for r in (one, many)])
    fig = plots.plot_speedup(spec, plots.at_batch(paper.direct_table(many, n_boot=10), many))
    assert [ax.get_title().split(" (")[0] for ax in fig.axes] == ["batch 1", "batch 32"]
    series = [{c.get_label() for c in ax.containers if hasattr(c, "patches")} for ax in fig.axes]
    assert series[0] == {f"MRP speculative K={k}" for k in SPEC_K}
    assert series[1] == {f"MRP speculative K={k}" for k in SPEC_K} | {"MRP direct step 1", "MRP direct step 2"}
    for ax, r in zip(fig.axes, (one, many), strict=True):  # each bar is its own batch size's speedup
        t = paper.speculative_table(r, n_boot=0)
        k3 = next(c for c in ax.containers if c.get_label() == "MRP speculative K=3")
        ticks = [x.get_text() for x in ax.get_xticklabels()]
        want = t[t["K"] == 3].set_index("benchmark").reindex(ticks)["throughput_speedup"]
        assert np.allclose([p.get_height() for p in k3.patches], want)
    assert all(n > 0 for n in plots.legend_points(fig).values())
    # the paper's speculative speedup (one prompt at a time) stands in the batch-1 panel only
    both = pd.concat([plots.at_batch(paper.speculative_table(r, n_boot=0), r) for r in
                      (synthetic_runs(n=N, batch_size=1, algorithms=("ours", "upstream")),
                       synthetic_runs(n=N, batch_size=32, algorithms=("ours", "upstream")))])  # fmt: skip
    fig2 = plots.plot_speedup(both.assign(paper_throughput_speedup=1.4))
    per_panel = [sum(len(c.get_segments()) for c in ax.collections if c.get_label().startswith("paper"))
                 for ax in fig2.axes]  # fmt: skip
    assert per_panel == [len(BENCHES), 0]
    matplotlib.pyplot.close(fig2)
    with pytest.raises(ValueError, match="batch sizes"):
        plots.at_batch(paper.speculative_table(one, n_boot=0), pd.concat([one, many]))
    _save(fig, tmp_path, "speedup_panels")


def test_adjacent_figure_one_subset_median(tmp_path):
    adj = synthetic_adjacent()
    fig = plots.plot_adjacent(adj)
    _not_empty(fig)
    kl_ax, ag_ax = fig.axes[:2]
    models = [TRAINED, "random init", RANDOM_BASELINE]
    sub = adj[adj["subset"] == SUBSET]
    for ax, col in ((kl_ax, "kl_median"), (ag_ax, "top1_agreement")):
        lines = _lines(ax)
        assert [ln.get_label() for ln in lines] == models
        for ln in lines:  # one point per distance, the conf<0.99 value (not a zig-zag over two subsets)
            want = sub[sub["model"] == ln.get_label()].sort_values("distance")
            assert list(ln.get_xdata()) == list(want["distance"])
            assert np.allclose(ln.get_ydata(), want[col])
    assert _legend(ag_ax) == models
    with pytest.raises(ValueError, match="more than one row"):
        plots.plot_adjacent(pd.concat([adj, adj]))
    with pytest.raises(KeyError, match="kl_median"):
        plots.plot_adjacent(adj.drop(columns="kl_median"))
    _save(fig, tmp_path, "adjacent")


def test_lookahead_figure_labels_tpf(tmp_path, runs):
    look = paper.lookahead_table(runs.assign(paper_model="SDAR-4B"), n_boot=10)  # the paper's lookahead model
    fig = plots.plot_lookahead(look)
    _not_empty(fig)
    assert sorted(ax.get_title() for ax in fig.axes) == sorted(BENCHES)
    for ax in fig.axes:
        b = ax.get_title()
        labels = [ln.get_label() for ln in _lines(ax)]
        ours = ["naive MTP (ours)", "MRP (ours)"]
        paper_lines = ["naive MTP (SDAR-4B, paper)", "MRP (SDAR-4B, paper)"] if b == "synth-math" else []
        assert sorted(labels) == sorted(ours + paper_lines)
        for ln in _lines(ax):
            assert len(ln.get_xdata()) == len(LOOKAHEAD_K)
        notes = [t.get_text() for t in ax.texts]
        g = look[look["benchmark"] == b]
        assert sorted(notes) == sorted(f"TPF {t:.1f}" for t in g["tpf"]) and len(notes) == 2 * len(LOOKAHEAD_K)
        assert ax.get_legend() is None  # no legend over a panel's labels: one below the panels
    (leg,) = fig.legends
    assert sorted(t.get_text() for t in leg.get_texts()) == sorted(
        ["naive MTP (ours)", "MRP (ours)", "naive MTP (SDAR-4B, paper)", "MRP (SDAR-4B, paper)"])  # fmt: skip
    _save(fig, tmp_path, "lookahead")


def test_remasking_figure_every_rule_baseline_visible_paper_and_tpf(tmp_path, runs):
    """Rows: our accuracy, our TPF over the family's dynamic(τ) (its own TPF on the top axis), the paper's series on
    their own y axis (on ours, a backbone near its ceiling was a sliver above the paper's curves)."""
    t = paper.remasking_table(runs, rule=None, algorithm=None, n_boot=10)
    fig = plots.plot_remasking(t, runs)
    _not_empty(fig)
    benches = list(dict.fromkeys(t["benchmark"]))
    grid = [ax for ax in fig.axes if ax.get_subplotspec() is not None]  # not the secondary (top) axes
    assert len(grid) == 3 * len(benches)
    acc_axes, tpf_axes, paper_axes = (grid[i * len(benches) : (i + 1) * len(benches)] for i in range(3))
    ours = ["dynamic, no remasking (ours)", "MRP remask, rule delta (ours)", "MRP remask, rule tau (ours)"]
    paper_series = ["dynamic, no remasking (SDAR-8B, paper)",
                    "MRP remask (SDAR-8B, paper: its τ rule or the released δ veto)"]
    for ax, pax, b in zip(acc_axes, paper_axes, benches, strict=True):
        lines = {ln.get_label(): ln for ln in _lines(ax)}
        assert sorted(lines) == sorted(ours)
        assert all(len(lines[k].get_xdata()) == 4 for k in ours)
        base, rules = lines[ours[0]].line, [lines[k].line for k in ours[1:]]
        # the baseline is thick and under the rules: a rule equal to it leaves it visible around a thin line
        assert all(base.get_linewidth() > 1.5 * r.get_linewidth() and base.get_zorder() < r.get_zorder() for r in rules)
        colors = [matplotlib.colors.to_hex(ln.get_color()) for ln in [base, *rules]]
        assert len(set(colors)) == len(colors)
        has_paper = t.loc[t["benchmark"] == b, "paper_baseline_accuracy"].notna().any()
        plines = {ln.get_label(): ln for ln in pax.get_lines() if not ln.get_label().startswith("_")}
        if has_paper:  # the paper's numbers at every τ the paper ran (0.6 and 0.8 too, which we do not run)
            assert sorted(plines) == sorted(paper_series) and pax.get_ylabel().startswith("SDAR-8B, paper")
            ref = paper.load("remasking")
            ref = ref[(ref["model"] == "SDAR-8B") & (ref["benchmark"] == paper.BENCHMARK_MAP[b])]
            for name, col in zip(paper_series, ("baseline_accuracy", "mrp_remask_accuracy"), strict=True):
                ln = plines[name]
                assert sorted(ln.get_xdata()) == sorted(ref["threshold"]) and {0.6, 0.8} <= set(ln.get_xdata())
                got = dict(zip(ln.get_xdata(), ln.get_ydata(), strict=True))
                assert all(np.isclose(got[x], y) for x, y in zip(ref["threshold"], ref[col], strict=True))
        else:
            assert not plines and "no remasking" in " ".join(x.get_text() for x in pax.texts)
        assert ax.get_legend() is None
    for ax, b in zip(tpf_axes, benches, strict=True):  # TPF per series from the runs, over dynamic(τ)'s
        lines = ax.get_lines()
        assert len(lines) == 3 and ax.get_ylabel().startswith("TPF ÷")
        d = runs[(runs["benchmark"] == b) & (runs["mode"] == "dynamic")].groupby("threshold")
        dyn = (d["tokens"].sum() / d["denoise_forwards"].sum()).to_numpy()
        assert np.allclose(lines[0].get_ydata(), 1.0)
        r = runs[(runs["benchmark"] == b) & (runs["mode"] == "remask") & (runs["rule"] == "tau")].groupby("threshold")
        assert np.allclose(lines[2].get_ydata(), (r["tokens"].sum() / r["denoise_forwards"].sum()).to_numpy() / dyn)
        top = [c for c in ax.child_axes]  # the top axis: dynamic(τ)'s own TPF at each τ
        assert len(top) == 1
        assert [float(x.get_text()) for x in top[0].get_xticklabels()] == [float(f"{v:.3g}") for v in dyn]
    assert len(fig.legends) == 1
    with pytest.raises(ValueError, match="more than one row"):
        plots.plot_remasking(pd.concat([t, t]))
    _save(fig, tmp_path, "remasking")
    fig = plots.plot_remasking(t)  # without runs: the accuracy row and the paper's
    assert len(fig.axes) == 2 * len(benches)
    _save(fig, tmp_path, "remasking_acc")


def test_remasking_glyph_of_a_series_is_one_in_every_panel_and_the_legend(runs):
    """A series keeps its marker, line style and fill in every panel, as its legend key shows (the delta series was
    hollow and dashed in one row, filled in the other, and its key matched one of them)."""
    t = paper.remasking_table(runs, rule=None, algorithm=None, n_boot=0).copy()
    at = (t["rule"] == "delta") & (t["benchmark"] == "synth-code")
    t.loc[at, "mrp_remask_accuracy"] = t.loc[at, "baseline_accuracy"]  # equal to dynamic on one benchmark
    fig = plots.plot_remasking(t, runs)
    # the legend key is drawn from the first panel's series (its errorbar's data line)
    labels = [x.get_text() for x in fig.legends[0].get_texts()]
    (lab,) = [x for x in labels if x.startswith("MRP remask, rule delta (ours) (") and "synth-code" in x]
    glyph = lambda ln: (ln.get_marker(), str(ln.get_markerfacecolor()), ln.get_linestyle())  # noqa: E731
    drawn = [w.line for ax in fig.axes for w in _lines(ax) if w.get_label() == lab]  # the accuracy row
    drawn += [ln for ax in fig.axes for ln in ax.get_lines() if ln.get_label().startswith("_tpf ours delta ")]
    assert len(drawn) == 2 * len(BENCHES)
    assert len({glyph(ln) for ln in drawn}) == 1, {glyph(ln) for ln in drawn}
    matplotlib.pyplot.close(fig)


def test_kernels_figure_says_what_it_compares(tmp_path):
    rows = []
    for n in (4, 16):
        for op in ("confidence", "residual_kl_fwd"):
            for impl, t, note in (("triton", np.nan, "cpu: reference only"), ("torch", 0.1 * n, ""),
                                  ("torch.compile", np.nan, "n/a (compile not requested)")):  # fmt: skip
                rows.append(dict(op=op, n=n, vocab=64, dtype="bfloat16", device="cpu", impl=impl, time_ms=t,
                                 bytes_read=1000 * n, gbps=1000 * n / t / 1e6 if t == t else np.nan, note=note))
    cpu = pd.DataFrame(rows)
    fig = plots.plot_kernels(cpu)
    title = fig._suptitle.get_text()
    assert "only the PyTorch reference (torch) is timed" in title and "triton: cpu: reference only" in title
    for ax in fig.axes:
        assert [ln.get_label() for ln in _lines(ax)] == ["torch"] and ax.get_ylabel() in ("milliseconds per call", "")
        assert list(_lines(ax)[0].get_xdata()) == [4, 16]
    _save(fig, tmp_path, "kernels_cpu")
    gpu = cpu.assign(time_ms=0.05, device="cuda")
    gpu["gbps"] = gpu["bytes_read"] / gpu["time_ms"] / 1e6
    fig = plots.plot_kernels(gpu)
    assert fig._suptitle.get_text().startswith("triton vs torch vs torch.compile")
    assert all(len(_lines(ax)) == 3 for ax in fig.axes) and fig.axes[0].get_ylabel().startswith("achieved")
    _save(fig, tmp_path, "kernels_gpu")


def test_remasking_figure_keeps_the_families_apart(tmp_path):
    """Both families: each its own baseline, upstream one series per δ (never blended with ours' delta rule)."""
    runs = synthetic_runs(n=10, algorithms=("ours", "upstream"))
    t = paper.remasking_table(runs, rule=None, algorithm=None, n_boot=0)
    fig = plots.plot_remasking(t)
    n = len(set(t["benchmark"]))
    assert len(fig.axes) == 2 * n  # our accuracy, then the paper's row
    for ax in fig.axes[:n]:
        ours = _lines(ax)
        assert [ln.get_label() for ln in ours] == [
            "dynamic, no remasking (ours)", "dynamic, no remasking (upstream)", "MRP remask, rule delta (ours)",
            "MRP remask, rule tau (ours)", "MRP remask, δ veto δ=1 (upstream)", "MRP remask, δ veto δ=2 (upstream)"]
        assert all(len(ln.get_xdata()) == 4 for ln in ours)
        colors = [matplotlib.colors.to_hex(ln.line.get_color()) for ln in ours]
        assert len(set(colors)) == len(colors)  # every series its own colour
    _save(fig, tmp_path, "remasking_families")


def test_training_curve_and_trajectory(tmp_path):
    curve = pd.DataFrame({"step": [0, 5, 10], "train_loss": [1.0, 0.5, 0.3], "heldout_kl": [1.0, 0.6, 0.4]})
    curve["heldout_uncorrected_kl"] = 1.0
    fig = plots.plot_training_curve(curve)
    train, held = fig.axes  # one panel per quantity, each its own y-label
    assert train.get_ylabel() != held.get_ylabel()
    assert [ln.get_label() for ln in _lines(train)] == ["KL(B ‖ A + C) on the training batch"]
    assert [ln.get_label() for ln in _lines(held)] == ["KL(B ‖ A + C): with the MRP head",
                                                       "KL(B ‖ A): uncorrected, no head"]  # fmt: skip
    _save(fig, tmp_path, "curve")
    one = plots.plot_training_curve(pd.DataFrame({"step": range(30), "block-diffusion loss": np.linspace(3, 1, 30)}))
    assert len(one.axes) == 1 and one.axes[0].get_ylabel() == "block-diffusion loss"  # notebook 01's curve
    trace = [{"row": 0, "block": 1, "step": s, "kind": "reveal", "pos": 8 + s, "token": 5 + s} for s in range(8)]
    trace.append({"row": 0, "block": 1, "step": 2, "kind": "revoke", "pos": 9, "token": 6})
    fig = plots.plot_trajectory(trace, setting="remask τ=0.5, rule loo", row_names=["synth-math/test/3"])
    assert {c.get_label() for c in _scatters(fig.axes[0])} == {"reveal (a token written)",
                                                               "revoke (masked again: red X)"}  # fmt: skip
    title = fig.axes[0].get_title()
    assert "remask τ=0.5, rule loo" in title and "synth-math/test/3" in title and "token written" in title
    assert sorted(t.get_text() for t in fig.axes[0].texts) == sorted(str(5 + s) for s in range(8))
    _save(fig, tmp_path, "trajectory")
    _save(plots.plot_trajectory([]), tmp_path, "trajectory_empty")


def _every_figure(runs):
    """Every figure the package draws (report.plots and report.pareto), from synthetic frames, by name."""
    from mrp_repro.report import pareto

    both = synthetic_runs(n=N, algorithms=("ours", "upstream"))
    spec = plots.at_batch(paper.speculative_table(both, n_boot=10), both)
    curve = pd.DataFrame({"step": [0, 5, 10], "train_loss": [1.0, 0.5, 0.3], "heldout_kl": [1.0, 0.6, 0.4],
                          "heldout_uncorrected_kl": 1.0})  # fmt: skip
    trace = [{"row": 0, "block": 1, "step": s, "kind": k, "pos": 8 + s, "token": 5 + s}
             for s in range(4) for k in ("reveal", "revoke")]  # fmt: skip
    kernels = pd.DataFrame([dict(op="confidence", n=n, vocab=64, dtype="bfloat16", device="cpu", impl="torch",
                                 time_ms=0.1 * n, bytes_read=1000 * n, gbps=1.0, note="")
                            for n in (4, 16)])  # fmt: skip
    adj = synthetic_adjacent()
    matched = pareto.matched_speed_table(both, n_boot=10, head_cost=0.25)  # every axis, weighted_tpf too
    return {
        "adjacent": lambda: plots.plot_adjacent(adj),
        "remasking": lambda: plots.plot_remasking(paper.remasking_table(both, rule=None, algorithm=None, n_boot=10),
                                                  both),
        "lookahead": lambda: plots.plot_lookahead(paper.lookahead_table(runs, n_boot=10)),  # declared SDAR-8B
        "speculative": lambda: plots.plot_speculative(both),
        "speedup": lambda: plots.plot_speedup(spec, plots.at_batch(paper.direct_table(runs, n_boot=10), runs)),
        "training_curve": lambda: plots.plot_training_curve(curve),
        "trajectory": lambda: plots.plot_trajectory(trace),
        "kernels": lambda: plots.plot_kernels(kernels),
        **{f"matched_speed_{a}": (lambda a=a: pareto.plot_matched_speed(matched, a)) for a in ("ours", "upstream")},
    }


def test_every_legend_entry_draws_a_finite_point(runs):
    """Walk each figure's legends: every entry's artists (lines, scatters, errorbars, bars) draw a finite point.
    The remasking figure of before drew its paper remasking series from the first row per τ (the delta rule,
    whose paper column is blank): a legend entry with no point, which this fails."""
    for name, draw in _every_figure(runs).items():
        fig = draw()
        points = plots.legend_points(fig)
        assert points, f"{name}: no legend"
        empty = [label for label, n in points.items() if n == 0]
        assert not empty, f"{name}: legend entries that draw no finite point: {empty}"
        matplotlib.pyplot.close(fig)
    # and the walker itself sees an entry that draws nothing (all-NaN errorbar, line, scatter, empty bars)
    fig, ax = matplotlib.pyplot.subplots()
    ax.errorbar([1, 2], [np.nan, np.nan], yerr=[1, 1], label="errorbar")
    ax.plot([1], [np.nan], label="line")
    ax.scatter([np.nan], [1], label="scatter")
    ax.bar([1], [np.nan], label="bars")
    ax.plot([1, 2], [3, 4], label="drawn")
    ax.legend()
    assert plots.legend_points(fig) == {"errorbar": 0, "line": 0, "scatter": 0, "bars": 0, "drawn": 2}
    matplotlib.pyplot.close(fig)


def test_lookahead_figure_draws_the_papers_sdar4b_values_under_the_declared_sdar8b(runs):
    look = paper.lookahead_table(runs, n_boot=10)  # declared SDAR-8B: its paper_accuracy column is blank
    assert look["paper_accuracy"].isna().all()
    fig = plots.plot_lookahead(look)
    ref = paper.load("lookahead")
    for ax in fig.axes:
        lines = {ln.get_label(): ln for ln in _lines(ax)}
        want = {"naive MTP (SDAR-4B, paper)": "naive_mtp", "MRP (SDAR-4B, paper)": "mrp"}
        if ax.get_title() != "synth-math":  # the paper's lookahead table is GSM8K only
            assert not set(want) & set(lines)
            continue
        for label, method in want.items():
            r = ref[(ref["method"] == method) & (ref["benchmark"] == "gsm8k")].sort_values("lookahead_k")
            assert list(lines[label].get_xdata()) == list(r["lookahead_k"])
            assert np.allclose(lines[label].get_ydata(), r["accuracy"])
    matplotlib.pyplot.close(fig)


def _overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_remasking_series_equal_to_dynamic_says_so_in_its_label(tmp_path):
    """A series that equals the dynamic baseline at every τ would sit exactly on it, unseen: its label carries
    "(= dynamic)" and it is drawn off its τ beside the baseline (dodge_offsets); a series that differs is not
    marked."""
    one = synthetic_runs(n=N, benchmarks=("synth-math",))
    t = paper.remasking_table(one, rule=None, algorithm=None, n_boot=0)
    delta = t["rule"] == "delta"
    t = t.copy()
    t.loc[delta, "mrp_remask_accuracy"] = t.loc[delta, "baseline_accuracy"] + 1e-12  # equal within tolerance
    for c in ("lo", "hi"):
        t.loc[delta, f"mrp_remask_accuracy_{c}"] = t.loc[delta, f"baseline_accuracy_{c}"]
    fig = plots.plot_remasking(t)
    labels = _fig_legend(fig)
    assert "MRP remask, rule delta (ours) (= dynamic)" in labels
    assert "MRP remask, rule tau (ours)" in labels and not any("tau" in x and "= dynamic" in x for x in labels)
    lines = {ln.get_label(): ln.line for ln in _lines(fig.axes[0])}
    eq, base = lines["MRP remask, rule delta (ours) (= dynamic)"], lines["dynamic, no remasking (ours)"]
    y, x = (lambda ln: np.asarray(ln.get_ydata(), float)), (lambda ln: np.asarray(ln.get_xdata(), float))
    assert np.allclose(y(eq), y(base)) and not np.allclose(x(eq), x(base))
    assert all(n > 0 for n in plots.legend_points(fig).values())
    _save(fig, tmp_path, "remasking_equal")
    plain = synthetic_runs(n=N, benchmarks=("synth-math",))
    fig = plots.plot_remasking(paper.remasking_table(plain, rule=None, algorithm=None, n_boot=0))
    assert not any("= dynamic" in x for x in _fig_legend(fig))  # no series equals it here
    matplotlib.pyplot.close(fig)


def test_remasking_series_equal_to_dynamic_on_one_benchmark_names_it(runs):
    t = paper.remasking_table(runs, rule=None, algorithm=None, n_boot=0).copy()
    at = (t["rule"] == "delta") & (t["benchmark"] == "synth-code")
    t.loc[at, "mrp_remask_accuracy"] = t.loc[at, "baseline_accuracy"]
    fig = plots.plot_remasking(t)
    assert "MRP remask, rule delta (ours) (= dynamic on synth-code)" in _fig_legend(fig)
    matplotlib.pyplot.close(fig)


def test_speedup_panels_wrap_into_a_grid_of_readable_width():
    """Three batch sizes: at most SPEEDUP_COLUMNS panels a row (~5 in each), every panel with its y tick labels."""
    spec = pd.concat([plots.at_batch(paper.speculative_table(r, n_boot=0), r)
                      for r in (synthetic_runs(n=N, batch_size=b) for b in (1, 8, 32))])  # fmt: skip
    fig = plots.plot_speedup(spec)
    assert [ax.get_title().split(" (")[0] for ax in fig.axes] == ["batch 1", "batch 8", "batch 32"]
    w, h = fig.get_size_inches()
    assert w <= 5.5 * plots.SPEEDUP_COLUMNS and h > 6  # two rows, not one row three panels wide
    cols = {round(ax.get_position().x0, 3) for ax in fig.axes}
    assert len(cols) == plots.SPEEDUP_COLUMNS
    fig.canvas.draw()
    assert all(any(t.get_visible() and t.get_text() for t in ax.get_yticklabels()) for ax in fig.axes)
    matplotlib.pyplot.close(fig)


def test_lookahead_every_panel_shows_its_y_ticks(runs):
    fig = plots.plot_lookahead(paper.lookahead_table(runs, n_boot=0))
    assert len(fig.axes) == 2
    fig.canvas.draw()
    assert all(any(t.get_visible() and t.get_text() for t in ax.get_yticklabels()) for ax in fig.axes)
    matplotlib.pyplot.close(fig)


def test_speculative_legend_clears_the_tick_labels():
    """The left legend sits below the (rotated, long: upstream settings) tick labels; nothing overlaps."""
    fig = plots.plot_speculative(synthetic_runs(n=N, algorithms=("ours", "upstream")))
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    left, right = fig.axes[0], fig.axes[-1]
    leg = left.get_legend().get_window_extent(r)
    ticks = [t.get_window_extent(r) for ax in (left, right) for t in ax.get_xticklabels() if t.get_text()]
    assert ticks and not any(_overlap(leg, b) for b in ticks)
    assert leg.y1 <= min(b.y0 for b in ticks[: len(left.get_xticklabels())])
    rleg = right.get_legend().get_window_extent(r)
    assert not _overlap(leg, rleg) and not _overlap(rleg, right.get_window_extent(r))
    matplotlib.pyplot.close(fig)


# ----------------------------------------------------------------------------- the no-MRP controls (issue 35)


def _with_no_head_drafter(r: pd.DataFrame) -> pd.DataFrame:
    """r with speculative(K, naive) rows: MRP's drafts without the head (TPF 1.25 of a forward per token here)."""
    m = r[(r["mode"] == "speculative") & (r["drafter"] == "mrp") & (r["algorithm"] == "ours")]
    nv = m.assign(drafter="naive", setting=m["setting"].str.replace("mrp", "naive"), mrp_forwards=0,
                  denoise_forwards=(m["tokens"] * 0.8).round().astype(int), accept_lengths="1 0 1",
                  wall_s=m["wall_s"] * 0.9)  # fmt: skip
    return pd.concat([r, nv], ignore_index=True)


def _controls_runs(r: pd.DataFrame, same_at=(0.9,)) -> pd.DataFrame:
    """A controls grid: the random and lowest-confidence vetoes at every remask τ of r (below rule tau's accuracy,
    equal to it at the τ in `same_at`: there nothing is revoked and every series is one point)."""
    tau = r[(r["mode"] == "remask") & (r["rule"] == "tau") & (r["algorithm"] == "ours")]
    out = []
    for name, rule, drop in (("random_veto", "random-veto", 0.3), ("confidence_veto", "confidence-veto", 0.15)):
        v = tau.assign(setting=[f"{name}({t:g},tau,total)" for t in tau["threshold"]], rule=rule)
        worse = ~v["threshold"].round(6).isin(list(same_at)) & (v["prompt_index"] < drop * N)
        v.loc[worse, "correct"] = False
        out.append(v)
    return pd.concat(out, ignore_index=True)


def test_speculative_figure_draws_the_no_head_drafter_beside_mrp(tmp_path, runs):
    r = _with_no_head_drafter(runs)
    fig = plots.plot_speculative(r)
    left, right = fig.axes[0], fig.axes[-1]
    ticks = [t.get_text() for t in left.get_xticklabels()]
    assert ticks == ["static"] + [x for k in SPEC_K for x in (f"K={k}", f"K={k}, no-head drafter")]
    pts = {c.get_label(): len(c.get_offsets()) for c in _scatters(left)}
    for b in BENCHES:
        assert pts[f"{b}, no-head drafter (no-MRP control, hollow)"] == N * len(SPEC_K)
        assert pts[b] == N * (1 + len(SPEC_K))  # MRP's points unchanged
    labels = {ln.get_label() for ln in _lines(right)}
    assert {f"K={k}, no-head drafter" for k in SPEC_K} <= labels
    assert all(n > 0 for n in plots.legend_points(fig).values())
    assert plots.hidden_markers(fig) == []
    _save(fig, tmp_path, "speculative_controls")


def test_speedup_figure_draws_each_control_beside_mrp(tmp_path):
    one = _with_no_head_drafter(synthetic_runs(n=N, batch_size=1))
    one = one[one["mode"].isin(["static", "speculative"])]  # the latency grid: static and speculative only
    many = _with_no_head_drafter(synthetic_runs(n=N, batch_size=32))
    spec = pd.concat([plots.at_batch(paper.speculative_table(r, n_boot=10), r) for r in (one, many)])
    ctl = plots.speedup_controls(one, many, one, n_boot=10)  # a frame at a batch size already given adds nothing
    assert set(ctl["batch_size"]) == {1, 32} and not ctl.duplicated(["batch_size", "series", "benchmark"]).any()
    fig = plots.plot_speedup(spec, plots.at_batch(paper.direct_table(many, n_boot=10), many), ctl)
    series = [[c.get_label() for c in ax.containers if hasattr(c, "patches")] for ax in fig.axes]
    drafter = [f"speculative K={k}, no-head drafter (no-MRP control)" for k in SPEC_K]
    naive = [f"naive MTP K={k} (no-MRP control of MRP direct step {k}: no head)" for k in (1, 2)]
    assert set(drafter) <= set(series[0]) and not set(naive) & set(series[0])  # batch 1: no direct grid there
    assert set(drafter + naive) <= set(series[1])
    # each control right after the MRP series it controls, hatched
    s1 = series[1]
    assert s1.index(drafter[0]) == s1.index("MRP speculative K=3") + 1
    assert s1.index(naive[0]) == s1.index("MRP direct step 1") + 1
    for c in fig.axes[1].containers:
        if hasattr(c, "patches") and "control" in c.get_label():
            assert all(p.get_hatch() == "//" for p in c.patches)
    # the bar is the control's own speedup over static on the same prompts
    nv = many[(many["mode"] == "naive") & (many["K"] == 1) & (many["benchmark"] == BENCHES[0])]
    st = many[(many["mode"] == "static") & (many["benchmark"] == BENCHES[0])]
    want = (nv["tokens"].sum() / nv["wall_s"].sum()) / (st["tokens"].sum() / st["wall_s"].sum())
    got = ctl[(ctl["series"] == naive[0]) & (ctl["batch_size"] == 32) & (ctl["benchmark"] == BENCHES[0])]
    assert float(got["throughput_speedup"].iloc[0]) == pytest.approx(want)
    assert all(n > 0 for n in plots.legend_points(fig).values())
    _save(fig, tmp_path, "speedup_controls")
    # with the record of each decode, a control whose clock gate did not pass is marked like MRP's bars
    from mrp_repro.report import wallclock

    record = wallclock.record_table({"speculative_runs": one, "modes_runs": many}, None, n_boot=0)
    gated = plots.speedup_controls(one, many, n_boot=10, record=record)
    assert gated["clock_gate"].str.startswith("unchecked").all() and len(gated) == len(ctl)
    fig = plots.plot_speedup(spec.assign(clock_gate="passed"), None, gated)
    marks = [c for ax in fig.axes for c in ax.collections if c.get_label() == plots.GATE_UNCHECKED_LABEL]
    assert sum(len(c.get_offsets()) for c in marks) == len(gated[gated["batch_size"].isin([1, 32])])
    # a failed gate's × sits above the paper's line across its bar (under it, it hid half of it), over the bar
    both = synthetic_runs(n=N, algorithms=("ours", "upstream"), batch_size=1)  # upstream K = 3: the paper's ◆
    both_spec = plots.at_batch(paper.speculative_table(both, n_boot=10), both)
    both_spec["paper_throughput_speedup"] += both_spec["throughput_speedup_hi"]  # the ◆ above the bar's CI
    fig = plots.plot_speedup(both_spec.assign(clock_gate="failed: passes disagree"))
    checked = 0
    for ax in fig.axes:
        paper_segs = [s for c in ax.collections if c.get_label().startswith("paper (") for s in c.get_segments()]
        crosses = [c.get_offsets() for c in ax.collections if c.get_label() == plots.GATE_FAILED_LABEL]
        for (x0, py), (x1, _) in paper_segs:
            xy = np.concatenate([np.asarray(cs) for cs in crosses])
            x, y = xy[np.abs(xy[:, 0] - (x0 + x1) / 2).argmin()]  # the × of its bar: at the bar's centre, the nearest
            assert y > py and x0 < x < x1, (x0, x1, py, x, y)
            checked += 1
    assert checked > 0


def test_remasking_figure_draws_the_head_free_controls_and_hides_no_marker(tmp_path, runs):
    """The random veto and the lowest-confidence veto as series of their own (accuracy and TPF rows); at τ = 0.9
    they, rule tau and dynamic share one point: the later markers nest (hollow, larger), so none hides another."""
    t = paper.remasking_table(runs, rule=None, algorithm=None, n_boot=10)
    ctl = _controls_runs(runs)
    fig = plots.plot_remasking(t, runs, controls=ctl, n_boot=10)
    labels = [s.get_label() for s in _lines(fig.axes[0])]
    for rule in ("random-veto", "confidence-veto"):
        lab = plots_remask._CONTROL_LABELS[rule]
        assert any(x.startswith(lab) for x in labels), labels
    tpf_labels = [ln.get_label() for ln in fig.axes[len(BENCHES)].get_lines()]
    assert any("random-veto" in x for x in tpf_labels) and any("confidence-veto" in x for x in tpf_labels)
    assert all(n > 0 for n in plots.legend_points(fig).values())
    assert plots.hidden_markers(fig) == []
    _save(fig, tmp_path, "remasking_controls")
    with pytest.raises(ValueError, match="runs"):
        plots.plot_remasking(t, controls=ctl)
    # the check itself: two lines through one point, the later neither hollow nor larger, is a hidden marker
    f, ax = matplotlib.pyplot.subplots()
    ax.plot([1, 2], [3, 4], "o-", label="a")
    ax.plot([2, 3], [4, 5], "o-", label="b")
    assert plots.hidden_markers(f) == [("a", "b")]
    plots.nest_coincident_markers(ax)
    assert plots.hidden_markers(f) == []
    matplotlib.pyplot.close(f)
    # scatters count too (matched_speed's hollow off-frontier rings, direct(K)'s triangles): a filled one as large
    # hides a line's marker; a hollow larger ring, a × (no face) or a clearly smaller marker (its rim shows) do not
    f, ax = matplotlib.pyplot.subplots()
    ax.plot([1, 2], [3, 4], "o-", ms=6, label="line")
    ax.scatter([2], [4], s=36, label="filled", zorder=3)  # a scatter's default zorder (1) is under lines (2)
    ax.scatter([1], [3], s=100, facecolors="none", edgecolors="k", label="ring", zorder=3)
    ax.scatter([1], [3], marker="x", s=36, label="cross", zorder=3)
    ax.plot([2], [4], "s", ms=3, label="small", zorder=4)
    assert plots.hidden_markers(f) == [("line", "filled")]
    ax.scatter([5], [5], s=36, label="under")  # default zorder: the line drawn later covers it
    ax.plot([5], [5], "o", ms=6, label="over")
    assert sorted(plots.hidden_markers(f)) == [("line", "filled"), ("under", "over")]
    matplotlib.pyplot.close(f)


def test_nesting_hollows_only_the_covered_point_and_the_remasking_series_sit_apart(runs):
    """nest_coincident_markers hollows the one marker that sits on an earlier one (an overlay at that point), not the
    whole series: elsewhere it keeps its filled markers (hollowing a whole series made two of our rules look like a
    hollow-marker peer in peers.png). plot_remasking draws each series off its τ (dodge_offsets), so the rules that
    equal dynamic at τ = 0.9 sit side by side rather than growing one ring per series; each panel has its own y."""
    f, ax = matplotlib.pyplot.subplots()
    ax.plot([1, 2, 3], [3, 4, 5], "o-", label="a")
    (b,) = ax.plot([2, 3, 4], [4, 6, 7], "s-", label="b")
    plots.nest_coincident_markers(ax)
    plots.nest_coincident_markers(ax)  # a second call adds nothing
    assert str(b.get_markerfacecolor()) != "none" and list(b.get_markevery()) == [False, True, True]
    over = [ln for ln in ax.get_lines() if ln.get_label().startswith(plots_base.NESTED_PREFIX)]
    assert len(over) == 1 and list(over[0].get_xdata()) == [2] and str(over[0].get_markerfacecolor()) == "none"
    assert over[0].get_markersize() > b.get_markersize() and plots.hidden_markers(f) == []
    matplotlib.pyplot.close(f)

    t = paper.remasking_table(runs, rule=None, algorithm=None, n_boot=10)
    fig = plots.plot_remasking(t, runs, controls=_controls_runs(runs), n_boot=10)
    taus = np.array(sorted(t["threshold"].unique()), float)
    grid = [ax for ax in fig.axes if ax.get_subplotspec() is not None]
    for ax in grid[: 2 * len(BENCHES)]:  # our accuracy and TPF rows (the paper's row below)
        xs = [ln.get_xdata() for ln in ax.get_lines() if ln.get_marker() not in ("", "None", "_", "|")
              and "paper" not in ln.get_label()]  # fmt: skip
        offsets = {round(float(x[0]) - taus[np.abs(taus - float(x[0])).argmin()], 9) for x in xs if len(x)}
        assert len(offsets) == len(xs) > 3, "two series share an x offset"
        assert max(abs(o) for o in offsets) <= 0.3 * np.diff(taus).min() + 1e-9  # within ±0.3 of the τ step
        nested = [ln.get_label() for ln in ax.get_lines() if ln.get_label().startswith(plots_base.NESTED_PREFIX)]
        assert not nested, nested
    assert fig.axes[0].get_shared_y_axes().get_siblings(fig.axes[0]) == [fig.axes[0]]
    matplotlib.pyplot.close(fig)


def test_series_on_one_point_are_drawn_side_by_side_and_no_longer_hide_each_other():
    """side_by_side_offsets spreads the series on one shared point `step` points apart around it, every other point
    at 0; shift draws markers that far sideways after autoscaling read their data, and the checks compare where
    markers are drawn (a shifted marker neither hides nor nests under the one it shares a point with)."""
    off = plots_base.side_by_side_offsets({"a": [(1, 2), (3, 4)], "b": [(3, 4)], "c": [(3, 4), (5, 6)], "d": [(9, 9)],
                                           "e": [(5, 6)], "f": [(float("nan"), 1)]}, step=8)  # fmt: skip
    # only the shared points move: (3, 4) of a, b, c spread 8 apart; (5, 6) of c and e; a's (1, 2) stays
    assert off == {"a": [0.0, -8.0], "b": [0.0], "c": [8.0, -4.0], "d": [0.0], "e": [4.0], "f": [0.0]}
    assert plots_base.side_by_side_offsets({"a": [(1, 2)], "b": [(1, 2.5)]}, step=8) == {"a": [0.0], "b": [0.0]}
    f, ax = matplotlib.pyplot.subplots()
    lines = [ax.errorbar([10, 20], [50, 60], yerr=5, marker="o", capsize=2, label=k) for k in ("a", "b")]
    assert len(plots.hidden_markers(f)) == 1  # b's markers over a's
    for c, k in zip(lines, ("a", "b"), strict=True):
        plots_base.shift(ax, c, {"a": -4.5, "b": 4.5}[k])
    f.canvas.draw()
    assert ax.get_xlim()[0] < 10 and ax.get_xlim()[1] > 20 and ax.get_ylim()[0] < 45 and ax.get_ylim()[1] > 65
    (xa, ya), (xb, yb) = (c.lines[0].get_transform().transform([(10, 50)])[0] for c in lines)
    assert xb - xa == pytest.approx(9 * f.dpi / 72) and ya == yb  # 9 points apart, at one height
    for c in lines:  # each CI (its bar and caps) moves with its marker
        assert len(c.get_children()) == 4 and all(a.get_transform() is c.lines[0].get_transform()
                                                  for a in c.get_children())  # fmt: skip
    assert plots.hidden_markers(f) == []
    plots.nest_coincident_markers(ax)
    assert not [ln for ln in ax.get_lines() if ln.get_label().startswith(plots_base.NESTED_PREFIX)]
    matplotlib.pyplot.close(f)


def test_crowded_labels_are_thinned_until_none_overlaps():
    """drop_overlapping_labels: of labels printed at nearly one point (matched_speed's τ = 0.15 ... 0.35), the first
    stays and the ones over it go; labels apart all stay."""
    f, ax = matplotlib.pyplot.subplots()
    for i in range(5):
        ax.annotate(f"τ={0.15 + 0.05 * i:g}", (1.0 + 0.001 * i, 1.0))
    ax.annotate("far", (0.0, 0.0))
    ax.set_xlim(-1, 2), ax.set_ylim(-1, 2)
    assert plots_labels.drop_overlapping_labels(ax) == 4
    texts = [c.get_text() for c in ax.get_children() if isinstance(c, Annotation)]
    assert texts == ["τ=0.15", "far"]
    ax.annotate("K=2", (1.002, 1.0))  # a label to keep: it stays, the τ label under it goes
    assert plots_labels.drop_overlapping_labels(ax, keep=lambda t: t.startswith("K=")) == 1
    assert [c.get_text() for c in ax.get_children() if isinstance(c, Annotation)] == ["far", "K=2"]
    # two labels to keep on one spot at the panel's top: the second moves to a clear place inside the panel
    for k in (3, 4):
        ax.annotate(f"K={k}", (0.5, 1.95), xytext=(5, 5), textcoords="offset points")
    assert plots_labels.drop_overlapping_labels(ax, keep=lambda t: t.startswith("K=")) == 0
    r = f.canvas.get_renderer()
    boxes = [c.get_window_extent(r) for c in ax.texts if c.get_text() in ("K=3", "K=4")]
    assert len(boxes) == 2 and not boxes[0].overlaps(boxes[1])
    assert all(ax.bbox.y0 <= b.y0 and b.y1 <= ax.bbox.y1 for b in boxes)
    matplotlib.pyplot.close(f)
    # a label to keep whose place sits on another point's marker moves clear of it (matched_speed: "K=1" printed on
    # direct(3,4)'s triangle read as its label); its own marker does not count
    f, ax = matplotlib.pyplot.subplots()
    ax.set_xlim(0, 10), ax.set_ylim(0, 10)
    ax.scatter([5.0], [5.0], marker="^", s=45)
    (own,) = ax.plot([4.6], [4.6], "o", ms=6)
    ax.annotate("K=1", (4.6, 4.6), xytext=(5, 5), textcoords="offset points")
    r = f.canvas.get_renderer()
    (lab,) = ax.texts
    (x, y), size = ax.transData.transform((5.0, 5.0)), 0.5 * np.sqrt(45) * f.dpi / 72
    hit = lambda b: b.x0 - size < x < b.x1 + size and b.y0 - size < y < b.y1 + size  # noqa: E731
    assert hit(lab.get_window_extent(r))  # as placed, it covers the triangle
    assert plots_labels.drop_overlapping_labels(ax, keep=lambda t: t.startswith("K=")) == 0
    assert not hit(lab.get_window_extent(r)) and lab.xyann[0] == 5
    matplotlib.pyplot.close(f)
    # with matched_speed's merge, the kept τ label names the range of the points whose labels went
    from mrp_repro.report import pareto

    f, ax = matplotlib.pyplot.subplots()
    for tau in (0.25, 0.3, 0.2):
        ax.annotate(f"τ={tau:g}", (1.0, 1.0))
    ax.set_xlim(-1, 2), ax.set_ylim(-1, 2)
    assert plots_labels.drop_overlapping_labels(ax, merge=pareto._merge_tau_labels) == 2
    assert [c.get_text() for c in ax.texts] == ["τ=0.2…0.3"]
    assert pareto._merge_tau_labels("K=3", "τ=0.2") is None
    matplotlib.pyplot.close(f)


def test_series_colours_stay_distinct_beyond_the_palettes_size():
    """plots_base._colors(n): n distinct colours for any n up to 30 (the palette cycled after 10: peers.png drew two of
    its 13 series in one colour)."""
    from mrp_repro.report.plots_base import _colors

    for n in (1, 5, 10, 13, 20, 30):
        cs = [tuple(round(x, 4) for x in c) for c in _colors(n)]
        assert len(cs) == n and len(set(cs)) == n, n


@pytest.mark.parametrize("figure", ["lookahead", "matched_speed"])
def test_the_committed_tables_draw_no_marker_under_another(figure):
    """Redrawn from figures/chain16's committed tables, lookahead.png and matched_speed.png hide no marker (issue 35:
    naive MTP under MRP at K = 1, 2 on chain-math; remask rules loo and sequential on one point, and remask points
    under the frontier's): coincident markers nest (plots_base.nest_coincident_markers), the frontier's stay filled."""
    from pathlib import Path

    from mrp_repro.report import pareto, plots_speed

    d = Path(__file__).resolve().parents[1] / "figures" / "chain16"
    table = pd.read_csv(d / f"{figure}.csv")
    figs = ([plots_speed.plot_lookahead(table)] if figure == "lookahead"
            else [pareto.plot_matched_speed(table, a) for a in dict.fromkeys(table["algorithm"])])  # fmt: skip
    shared = zoomed = tangled = 0
    for fig in figs:
        assert plots.hidden_markers(fig) == []
        if figure == "matched_speed":  # the frontier is the reference: drawn first, its markers filled
            front = [ln for ax in fig.axes for ln in ax.get_lines() if ln.get_label().startswith("dynamic frontier")]
            assert front and all(str(ln.get_markerfacecolor()) != "none" for ln in front)
            # every direct(K) named at its point, settings on one point in one label (chain-math: K=3,4)
            named = {}
            for ax in fig.axes:
                for t in ax.texts:
                    if t.get_text().startswith("K="):
                        named.setdefault(ax, set()).update(int(k) for k in t.get_text()[2:].split(","))
            for ax in fig.axes:
                direct = [c for c in ax.collections if c.get_label() == "direct(K)"]
                if direct:
                    n = len(direct[0].get_offsets())
                    assert len(named.get(ax, ())) == n, (ax.get_title(), named.get(ax))
                    shared += any("," in t.get_text() for t in ax.texts if t.get_text().startswith("K="))
            # no label past its panel (or its inset): the τ labels at the fast end printed into the next panel
            for ax in [a for p in fig.axes for a in (p, *p.child_axes)]:
                assert plots_labels.labels_outside(ax) == [], ax.get_title()
                # each label nearer its own point than any other marker, or joined to it by a leader line
                assert plots_labels.labels_off_their_point(ax) == [], ax.get_title()
                tangled += len(plots_labels.leaders_tangled(ax))
            for p in fig.axes:  # an inset widened for its labels stays inside its panel (its frame is drawn there)
                for ins in p.child_axes:
                    for lim, parent in ((ins.get_xlim(), p.get_xlim()), (ins.get_ylim(), p.get_ylim())):
                        assert parent[0] <= lim[0] < lim[1] <= parent[1], p.get_title()
            # the K labels inside their panel, none over another (chain-math's wall clock: K=1 and K=3,4 printed
            # over each other above the panel)
            r = fig.canvas.get_renderer()
            for ax in fig.axes:
                boxes = [plots_labels.text_extent(t, r) for t in ax.texts if t.get_text().startswith("K=")]
                assert all(ax.bbox.y0 <= b.y0 and b.y1 <= ax.bbox.y1 for b in boxes), ax.get_title()
                assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :]), ax.get_title()
            # a panel whose dynamic and remask points crowd into a sliver of its axis (chain-math's TPF 13.5-16 on
            # an axis from 1) has them in a zoomed inset; the others have none
            for ax in fig.axes:
                bench, rest = ax.get_title().split(", ", 1)
                axis = {label: a for a, label in pareto.AXIS_LABELS.items()}[ax.get_xlabel()]
                algo = rest.split(":")[0]
                t = table[(table["benchmark"] == bench) & (table["axis"] == axis) & (table["algorithm"] == algo)]
                crowd = t[t["mode"].isin(["dynamic", "remask"])]
                span = (lambda v: np.ptp(np.log(v))) if axis in pareto.LOG_AXES else np.ptp  # noqa: E731
                narrow = span(crowd["speed"]) < pareto.ZOOM_SHARE * span(t["speed"])  # on the axis as drawn
                assert len(ax.child_axes) == int(narrow), ax.get_title()
                if narrow:
                    (ins,) = ax.child_axes
                    (x0, x1), (y0, y1) = ins.get_xlim(), ins.get_ylim()
                    assert crowd["speed"].between(x0, x1).all() and crowd["accuracy"].between(y0, y1).all()
                    zoomed += 1
        matplotlib.pyplot.close(fig)
    assert figure != "matched_speed" or shared > 0  # chain16 has direct(3) and direct(4) on one point
    assert figure != "matched_speed" or zoomed > 0  # and chain-math's crowded TPF panel
    # leader lines across one another, or a label on another's line, read as naming the other's point (a cold read
    # of 8e701bd's drawing: 7 such labels in chain-code's three panels). A ratchet: chain-code's crowded top-left
    # corner (static, direct(1-4), sequential's squares) on the weighted-TPF panel still has one crossing (static's
    # and K=3's lines), for which drop_overlapping_labels finds no place read against nothing
    assert tangled <= TANGLED_AT_MOST, tangled


TANGLED_AT_MOST = 2


def test_remasking_series_equal_to_dynamic_in_accuracy_only_says_accuracy(tmp_path):
    """With the TPF panel drawn, "(= dynamic)" claims the same decode: a series whose accuracy equals dynamic's at
    every τ but whose TPF does not is tagged "(accuracy = dynamic)"; one whose TPF equals too keeps "(= dynamic)"."""
    one = synthetic_runs(n=N, benchmarks=("synth-math",))
    t = paper.remasking_table(one, rule=None, algorithm=None, n_boot=0).copy()
    for rule in ("delta", "tau"):
        at = t["rule"] == rule
        t.loc[at, "mrp_remask_accuracy"] = t.loc[at, "baseline_accuracy"]
    dyn = one[one["mode"] == "dynamic"].set_index(["threshold", "problem_id"])
    runs = one.copy()
    tau = (runs["mode"] == "remask") & (runs["rule"] == "tau")
    key = pd.MultiIndex.from_frame(runs.loc[tau, ["threshold", "problem_id"]])
    for c in ("tokens", "denoise_forwards"):  # rule tau decodes as dynamic does, as far as TPF shows
        runs.loc[tau, c] = dyn[c].reindex(key).to_numpy()
    fig = plots.plot_remasking(t, runs=runs)
    labels = _fig_legend(fig)
    assert "MRP remask, rule tau (ours) (= dynamic)" in labels, labels
    assert "MRP remask, rule delta (ours) (accuracy = dynamic)" in labels, labels
    _save(fig, tmp_path, "remasking_accuracy_equal")
