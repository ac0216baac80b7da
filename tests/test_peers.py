"""report.peers: MRP beside its peers in one grid of mrp_repro.methods, through measure.runs.collect_runs; the table
charges extra rows and head calls, reports no speed of a lossless method that fails its reference, and a method
added by one declaration (methods.register) is decoded, tabulated and drawn with report/ untouched.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_peers.py
"""

from __future__ import annotations

import io
import math

import matplotlib
import numpy as np
import pandas as pd

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from mrp_repro import methods  # noqa: E402
from mrp_repro.report import peers, plots_base  # noqa: E402

#: a small grid: one benchmark, three prompts, short answers (the smoke profile's settings)
SMALL = dict(n_prompts=3, benchmarks=["synth-code"], max_new_tokens=12)


@pytest.fixture(scope="module")
def models(smoke_profile):
    from mrp_repro.mrp import MRPHead
    from mrp_repro.stages import random_backbone

    bb = random_backbone(smoke_profile, std=0.5)  # outputs that differ between settings
    head = MRPHead(bb.model.config, num_layers=1).init_weights("normal", 0.3,
                                                               generator=torch.Generator().manual_seed(0))  # fmt: skip
    return bb, head.eval()


@pytest.fixture(scope="module")
def runs(smoke_profile, models):
    return peers.decode(smoke_profile, *models, **SMALL)


def test_the_grid_holds_every_declared_method_and_records_extra_rows(smoke_profile, models, runs):
    bb, head = models
    want = peers.grid_methods(smoke_profile, head)
    assert set(want) >= {"static", "dynamic", "speculative-naive", "speculative-mrp", "remask", "spiffy",
                         "spiffy-dynamic", "wino", "speculative-mrp-tree"}  # fmt: skip
    method = runs["method"].fillna("")
    assert set(method) - {""} == set(want) and set(runs.loc[method == "", "setting"]) == {"peer_static(1)"}
    assert set(runs["algorithm"]) == {"ours", "peer"}
    # the peer family's static is static(1), token for token: collect_runs' reference of identical_to_static
    s, ps = (runs[runs["setting"] == n].set_index("problem_id")["text"] for n in ("static(1)", "peer_static(1)"))
    assert (s == ps.loc[s.index]).all() and runs.loc[runs["algorithm"] == "peer", "identical_to_static"].any()
    by = runs.groupby("method")[["extra_rows", "denoise_forwards"]].sum()
    assert (by.loc[["static", "dynamic", "remask"], "extra_rows"] == 0).all()
    assert (by.loc[["speculative-naive", "speculative-mrp", "spiffy", "spiffy-dynamic", "speculative-mrp-tree"],
                   "extra_rows"] > 0).all()  # fmt: skip
    # the MRP draft tree at each draft graph's verify rows (D = K and 2K, at least 3)
    tree = runs[runs["method"] == "speculative-mrp-tree"]
    assert sorted(set(tree["K"])) == sorted(set(runs.loc[runs["method"] == "spiffy", "K"]))
    assert by.loc["wino", "extra_rows"] == by.loc["wino", "denoise_forwards"]  # its shadow block: one row a forward
    # the graph of D = 2K verifies more rows a round than the chain's K
    spiffy = runs[runs["method"] == "spiffy"].groupby("K")["extra_rows"].sum()
    assert spiffy.index.min() == 3 and spiffy.iloc[-1] > spiffy.iloc[0]
    assert (runs.loc[runs["setting"] == "dynamic(0.9)", "method"] == "dynamic").all()  # spiffy-dynamic's reference


def test_the_table_charges_rows_and_reports_no_speed_of_a_failed_lossless_method(runs):
    t = peers.peers_table(runs, head_cost=0.5, row_cost=0.25, n_boot=20).set_index("setting")
    assert list(t.columns) == [c for c in peers.PEERS_COLUMNS if c != "setting"]
    assert "peer_static(1)" not in t.index
    lossless = t[t["reference"] != ""]
    assert set(lossless["method"]) == {"speculative-naive", "speculative-mrp", "spiffy", "spiffy-dynamic",
                                       "speculative-mrp-tree"}  # fmt: skip
    assert (lossless["reference_identical"] == 1.0).all() and lossless["throughput_speedup"].notna().all()
    assert t.loc["static(1)", "throughput_speedup"] == pytest.approx(1.0)
    for name, r in t.iterrows():  # tokens over forwards + head calls x 0.5 + extra rows x 0.25, pooled
        g = runs[runs["setting"] == name]
        den = g["denoise_forwards"] + 0.5 * g["mrp_forwards"] + 0.25 * g["extra_rows"]
        assert r["charged_tpf"] == pytest.approx(g["tokens"].sum() / den.sum()), name
        assert r["charged_tpf"] <= r["weighted_tpf"] <= r["tpf"] + 1e-12, name
    # one output of the graph changed: it no longer reproduces static(1), so no speed of it is reported
    bad = runs.copy()
    i = bad.index[bad["setting"] == "spiffy(3)"][0]
    bad.loc[i, "text"] = str(bad.loc[i, "text"]) + "x"
    b = peers.peers_table(bad, head_cost=0.5, row_cost=0.25, n_boot=20).set_index("setting")
    assert b.loc["spiffy(3)", "reference_identical"] == pytest.approx(2 / 3)
    assert all(math.isnan(b.loc["spiffy(3)", c]) for c in ("tpf", "charged_tpf", "throughput_speedup"))
    assert not math.isnan(b.loc["spiffy(3)", "accuracy"])


def test_a_toy_method_is_found_in_the_grid_table_and_figure(smoke_profile, models):
    """Two declarations, nothing else: a lossy toy (naive lookahead) and a lossless one whose reference, dynamic(0.7),
    no other method decodes on smoke (the grid adds it)."""
    from mrp_repro.decoding import Dynamic, NaiveLookahead
    from mrp_repro.decoding.peers_spiffy import DraftGraph, Spiffy

    lossy = methods.Method("toy-lookahead", "peer", "naive", lambda head, k: NaiveLookahead(k),
                           lambda p, h: [dict(k=2)], "toy: naive lookahead")  # fmt: skip
    chain = methods.Method("toy-chain", "peer", "speculative",
                           lambda head, D: Spiffy(DraftGraph.chain(D, "dynamic(0.7)"), Dynamic(0.7)),
                           lambda p, h: [dict(D=2)], "toy: chain over dynamic(0.7)", methods.Reference("dynamic", 0.7),
                           ("dynamic",))  # fmt: skip
    for m in (lossy, chain):
        methods.register(m)
    try:
        assert {"toy-lookahead", "toy-chain"} <= set(peers.grid_methods(smoke_profile, models[1]))
        runs = peers.decode(smoke_profile, *models, **SMALL)
        t = peers.peers_table(runs, head_cost=0.5, row_cost=0.25, n_boot=20)
        toy = t.set_index("method").loc[["toy-lookahead", "toy-chain"]]
        assert list(toy["setting"]) == ["naive_mtp(1)", "spiffy(2,chain,dynamic(0.7))"]
        assert list(toy["reference"]) == ["", "dynamic(0.7)"] and toy["reference_identical"].iloc[1] == 1.0
        assert toy["charged_tpf"].notna().all() and set(toy["family"]) == {"peer"}
        assert (runs.loc[runs["setting"] == "dynamic(0.7)", "method"] == "dynamic").all()
        fig = peers.plot_peers(t)
        points = plots_base.legend_points(fig)
        assert points["toy: naive lookahead [peer]"] == 1 and points["toy: chain over dynamic(0.7) [peer]"] == 1
        assert all(n > 0 for n in points.values()) and not plots_base.hidden_markers(fig), points
        plt.close(fig)
    finally:
        for m in (lossy, chain):
            methods.unregister(m.name)


def test_run_stores_the_grid_and_writes_the_table_and_figure(smoke_profile, models, tmp_runs, monkeypatch):
    """run(): peers_runs stored in report.paper's results and reused, the table with its clock gate (the peers
    unchecked), the figure; every column defined (tables.save_table)."""
    import pandas as pd

    P = smoke_profile.replace({"evaluation.n_prompts": 2, "decoding.max_new_tokens": 8})
    out = peers.run(P, *models)
    figs = tmp_runs.parent / "figures" / P.name
    for ext in ("md", "csv", "png", "pdf"):
        assert (figs / f"peers.{ext}").stat().st_size > 0
    t = pd.read_csv(figs / "peers.csv", keep_default_na=False, na_values=[""])
    assert {"clock_gate", "clock_record"} <= set(t.columns) and set(t["benchmark"]) == {"synth-math", "synth-code"}
    assert t.loc[t["algorithm"] == "peer", "clock_gate"].str.startswith("unchecked").all()
    assert out["costs"]["row_cost"] >= 0 and "row_cost" not in t.columns
    a = pd.read_csv(figs / "peers_aup.csv", keep_default_na=False, na_values=[""])
    assert set(a["method"]) == set(t["method"]) and set(a["benchmark"]) == set(t["benchmark"])
    assert (a["aup"].dropna() > 0).all() and (a["aup_best_accuracy"] == a["benchmark"].map(
        t.groupby("benchmark")["accuracy"].max())).all()  # fmt: skip
    monkeypatch.setattr(peers, "decode", lambda *a, **k: pytest.fail("the stored grid is decoded again"))
    again = peers.peer_runs(P, *models)
    assert len(again) == len(out["runs"]) and set(again["method"].fillna("")) == set(out["runs"]["method"].fillna(""))


def test_aup_is_the_weighted_area_under_accuracy_against_parallelism():
    """AUP by hand: a rectangle to the first setting, then trapezoids of accuracy x W(accuracy); an accuracy below the
    best is penalised (W < 1), the order of the settings does not matter, a faster equal-accuracy method scores more."""
    w80 = 80 * math.exp(-3 * (1 - 80 / 100))
    assert peers.aup([1.0, 2.0], [100.0, 80.0], 100.0) == pytest.approx(100 + (100 + w80) / 2)
    assert peers.aup([2.0, 1.0], [80.0, 100.0], 100.0) == peers.aup([1.0, 2.0], [100.0, 80.0], 100.0)
    assert peers.aup([1.0, 3.0], [100.0, 100.0], 100.0) > peers.aup([1.0, 2.0], [100.0, 100.0], 100.0)
    assert peers.aup([1.0, 2.0], [100.0, 60.0], 100.0) < peers.aup([1.0, 2.0], [100.0, 80.0], 100.0)
    assert math.isnan(peers.aup([], [], 100.0)) and math.isnan(peers.aup([float("nan")], [50.0], 100.0))
    t = pd.DataFrame({"model": "m", "benchmark": "b", "method": ["static", "mrp", "mrp"], "family": "ours", "rule": "",
                      "accuracy": [100.0, 100.0, 80.0], "charged_tpf": [1.0, 1.0, 2.0]})  # fmt: skip
    a = peers.aup_table(t).set_index("method")
    assert a.loc["mrp", "aup"] == pytest.approx(100 + (100 + w80) / 2) and a.loc["static", "aup"] == 100.0
    assert a.loc["mrp", "aup_settings"] == 2 and (a["aup_best_accuracy"] == 100.0).all()


@pytest.fixture(scope="module")
def small(smoke_profile, models):
    """(profile, the whole peers grid decoded in one call): 3 prompts a benchmark at batch 2, 8 new tokens."""
    P = smoke_profile.replace({"evaluation.n_prompts": 3, "decoding.max_new_tokens": 8, "decoding.batch_size": 2})
    return P, peers.decode(P, *models)


def test_peer_runs_resumes_a_killed_grid_from_its_kept_batches(small, models, tmp_runs, monkeypatch):
    """peer_runs keeps each finished batch in <results>/peers_runs.partial/ (collect_runs): a grid killed after its
    first batch decodes only the rest when rerun, the stored frame equals an uninterrupted one but for the clock, and
    the partial directory is gone once the frame is stored."""
    from mrp_repro.measure import runs as runs_mod
    from mrp_repro.report import paper

    P, whole = small
    real, calls = runs_mod.decode_batch, []

    def dies_after_the_first(*a, **k):
        if calls:
            raise KeyboardInterrupt("killed")
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(runs_mod, "decode_batch", dies_after_the_first)
    with pytest.raises(KeyboardInterrupt):
        peers.peer_runs(P, *models)
    partial = paper.results_dir(P) / f"{peers.GRID}.partial"
    assert len(list(partial.glob("*.json"))) == 1 and paper.load_result(P, peers.GRID) is None
    decoded = []
    monkeypatch.setattr(runs_mod, "decode_batch", lambda *a, **k: decoded.append(1) or real(*a, **k))
    got = peers.peer_runs(P, *models)
    assert len(decoded) == 3  # 2 benchmarks x batches of 2 and 1 prompts, less the kept one
    clock = ["wall_s", "resumed_from"]
    as_text = lambda df: pd.read_csv(io.StringIO(df.drop(columns=clock).to_csv(index=False)), dtype=str,  # noqa: E731
                                     keep_default_na=False)  # the stored file's cells against the decoded frame's
    pd.testing.assert_frame_equal(as_text(got), as_text(whole))
    assert (got["resumed_from"].fillna("") != "").sum() == (whole["setting"].nunique() * 2)  # the kept batch's rows
    assert not partial.exists() and (got["extra_rows"] >= 0).all()


def test_the_figure_and_aup_never_join_a_methods_rules_into_one_curve(smoke_profile, models, runs):
    """MRP remasking's settings hold several rules: each rule is its own series in the figure (a legend entry with that
    rule's points only) and its own AUP row; a method of one rule keeps one unsuffixed series."""
    t = peers.peers_table(runs, head_cost=0.5, row_cost=0.25, n_boot=20)
    rem = t[t["method"] == "remask"]
    rules = sorted(set(rem["rule"]))
    assert len(rules) > 1 and (rem["setting"].str.contains(",")).all()
    fig = peers.plot_peers(t)
    points = plots_base.legend_points(fig)
    series = methods.get("remask").series
    for rule in rules:
        assert points[f"{series}, rule {rule} [ours]"] == int((rem["rule"] == rule).sum()), points
    assert f"{series} [ours]" not in points and points[f"{methods.get('static').series} [ours]"] == 1
    plt.close(fig)
    a = peers.aup_table(t)
    assert sorted(a.loc[a["method"] == "remask", "rule"]) == rules


def test_the_figure_draws_rules_on_one_point_side_by_side(runs):
    """Two remasking rules that revoke nothing sit on one point per τ (chain-math's delta, loo and logp-delta): the
    figure draws them SIDE_BY_SIDE_PT apart, each marker and CI visible, and says so in the panel's title; a panel
    where no series shares a point draws every series at its x and says nothing."""
    t = peers.peers_table(runs, head_cost=0.5, row_cost=0.25, n_boot=20)
    rem = t[t["method"] == "remask"]
    r1, r2 = sorted(set(rem["rule"]))[:2]
    cols = ["charged_tpf", "accuracy", "accuracy_lo", "accuracy_hi"]
    bench = t["benchmark"].iloc[0]
    tau = t["setting"].str.extract(r"^remask\(([\d.]+),", expand=False)
    copy = t.copy()
    for v in tau.dropna().unique():
        at = (copy["method"] == "remask") & (tau == v) & (copy["benchmark"] == bench)
        copy.loc[at & (copy["rule"] == r2), cols] = copy.loc[at & (copy["rule"] == r1), cols].to_numpy()
    # and r1's first point alone: it stays where it is
    lone = copy.index[(copy["method"] == "remask") & (copy["rule"] == r1) & (copy["benchmark"] == bench)][0]
    copy.loc[lone, "accuracy"] += 0.5
    fig = peers.plot_peers(copy)
    series = methods.get("remask").series
    top = fig.axes[0]
    assert top.get_title().endswith(peers.SIDE_BY_SIDE_NOTE)
    on_screen = lambda xy: top.transData.transform(np.atleast_2d(xy))[0]  # noqa: E731
    drawn = []  # (series, display x, display y) of every marker in the panel
    for ln in top.get_lines():
        if ln.get_marker() in ("none", "None", "", "_", "|") or ln.get_label().startswith(plots_base.NESTED_PREFIX):
            continue
        xy = np.column_stack([ln.get_xdata(), ln.get_ydata()])
        every = ln.get_markevery()
        keep = np.asarray(every, bool) if every is not None else np.ones(len(xy), bool)
        name = ln.get_label().lstrip("_").removesuffix(" CI")
        # (series, its data point, how far sideways it is drawn: display units)
        drawn += [(name, tuple(p), ln.get_transform().transform(p)[0] - on_screen(p)[0]) for p in xy[keep]]
        if not ln.get_label().startswith("_"):  # a series' line runs through its true points, unshifted
            assert ln.get_transform() == top.transData
    lone_at = tuple(copy.loc[lone, ["charged_tpf", "accuracy"]].to_numpy(float))
    r1_name = f"{series}, rule {r1} [ours]"
    assert [off for n, p, off in drawn if n == r1_name and np.allclose(p, lone_at)] == [0.0]  # drawn where it is
    pts = {r: {tuple(v) for v in copy.loc[(copy["method"] == "remask") & (copy["rule"] == r)
                                             & (copy["benchmark"] == bench), ["charged_tpf", "accuracy"]]
                                        .to_numpy(float)} for r in (r1, r2)}  # fmt: skip
    step = peers.SIDE_BY_SIDE_PT * fig.dpi / 72
    assert pts[r1] & pts[r2]
    for pt in pts[r1] & pts[r2]:  # every series on a shared point drawn a step apart, around it
        offs = sorted(off for n, p, off in drawn if np.allclose(p, pt))
        assert len(offs) >= 2 and np.allclose(np.diff(offs), step) and np.isclose(np.mean(offs), 0), offs
    assert not plots_base.hidden_markers(fig)
    fig.canvas.draw()
    for ax in fig.axes[len(set(copy["benchmark"])):]:  # every bar's label inside its panel
        assert all(t.get_window_extent().x1 <= ax.bbox.x1 for t in ax.texts)
    plt.close(fig)
    lossy = t[t["method"].map(lambda m: methods.get(m).lossless is None) & t["charged_tpf"].notna()]
    shared = {b: g.duplicated(["charged_tpf", "accuracy"]).any() for b, g in lossy.groupby("benchmark")}
    fig = peers.plot_peers(t)
    for ax, b in zip(fig.axes, t["benchmark"].unique(), strict=False):
        assert ax.get_title().endswith(peers.SIDE_BY_SIDE_NOTE) == bool(shared[b])
    plt.close(fig)


def test_peer_runs_reads_the_settings_modes_runs_holds_and_equals_decoding_them(small, models, tmp_runs, monkeypatch):
    """With modes_runs stored (report.grids runs it first), peer_runs decodes only our static(1) and the settings it
    lacks; the frame equals the fully decoded grid cell for cell but for the clock, each read row names modes_runs in
    resumed_from, and its wall-clock ratio to static(1) is modes_runs' own."""
    from mrp_repro.measure import runs as runs_mod
    from mrp_repro.report import grids, paper

    P, whole = small
    bb, head = models
    modes = grids.runs(P, bb, head, "modes_runs")
    decoded = []
    real = runs_mod.decode_batch
    monkeypatch.setattr(runs_mod, "decode_batch",
                        lambda b, pr, idx, settings, *a, **k: decoded.append([p.name for _, p in settings])
                        or real(b, pr, idx, settings, *a, **k))  # fmt: skip
    got = peers.peer_runs(P, bb, head)
    held = set(modes["setting"]) & set(whole["setting"]) - {"static(1)"}
    assert held and decoded and all(set(n).isdisjoint(held) and "static(1)" in n for n in decoded), decoded
    clock = ["wall_s", "resumed_from"]
    as_text = lambda df: pd.read_csv(io.StringIO(df.drop(columns=clock).to_csv(index=False)), dtype=str,  # noqa: E731
                                     keep_default_na=False)  # fmt: skip
    pd.testing.assert_frame_equal(as_text(got), as_text(whole))
    read = got["setting"].isin(held)
    assert (got.loc[read, "resumed_from"].str.startswith("modes_runs: ")).all()
    assert (got.loc[~read, "resumed_from"].fillna("") == "").all()
    for b in set(got["benchmark"]):  # the ratio to static(1) is the one modes_runs measured
        s_got, s_modes = (df[(df["benchmark"] == b) & (df["setting"] == "static(1)")]["wall_s"].sum()
                          for df in (got, modes))  # fmt: skip
        for name in held:
            w_got, w_modes = (df[(df["benchmark"] == b) & (df["setting"] == name)]["wall_s"].sum()
                              for df in (got, modes))  # fmt: skip
            assert w_got / s_got == pytest.approx(w_modes / s_modes)
    assert peers.peer_runs(P, bb, head) is not None and paper.load_result(P, peers.GRID) is not None


def test_the_figure_draws_each_lossless_setting_as_its_own_bar_not_in_the_accuracy_cluster(smoke_profile, runs):
    """Lossless methods share their reference's accuracy, so on the accuracy panels they would hide each other: each
    of their settings is a bar of its own in the bottom row (none of them on the top row); one that is not identical
    to its reference reports no speed and draws no bar."""
    from matplotlib.container import BarContainer

    t = peers.peers_table(runs, head_cost=0.5, row_cost=0.25, n_boot=20)
    lossless = t["method"].map(lambda m: methods.get(m).lossless is not None)
    assert lossless.any() and (~lossless).any()
    t.loc[t.index[lossless][0], "charged_tpf"] = float("nan")  # as peers_table reports a non-identical setting
    fig = peers.plot_peers(t)
    top, bottom = fig.axes[: len(set(t["benchmark"]))], fig.axes[len(set(t["benchmark"])) :]
    labels = {f"{methods.get(m).series} [{methods.get(m).family}]" for m in t.loc[lossless, "method"]}
    assert not labels & {ln.get_label() for ax in top for ln in ax.get_lines()}
    for ax, (_, g) in zip(bottom, t[lossless].groupby("benchmark", sort=False), strict=True):
        ticks = [x.get_text() for x in ax.get_yticklabels()]
        assert len(ticks) == len(set(ticks)) == len(g)
        bars = sum(len(c) for c in ax.containers if isinstance(c, BarContainer))
        assert bars == int(g["charged_tpf"].notna().sum())
    assert any("not identical" in x.get_text() for ax in bottom for x in ax.texts)
    assert all(n > 0 for n in plots_base.legend_points(fig).values())
    plt.close(fig)
