"""mrp_repro.report.variance: the robustness rule, the spread table against plain numbers, and the whole seed pipeline
on smoke (2 head seeds, 2 backbone seeds, tiny step counts)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mrp_repro.report import variance, variance_spread, variance_store
from mrp_repro.report.verdicts import DIRECTION, HOLDS, NA, NOT, NOT_SHOWN

ROOT = Path(__file__).resolve().parents[1]


def test_a_verdict_is_robust_only_if_every_measured_seed_passes():
    r = variance.robust_verdict([HOLDS, HOLDS, HOLDS])
    assert r.robust and r.verdict == HOLDS
    r = variance.robust_verdict([HOLDS, DIRECTION, HOLDS])
    assert r.robust and r.verdict == DIRECTION  # the weakest
    r = variance.robust_verdict([HOLDS, NOT_SHOWN, HOLDS])
    assert not r.robust and r.verdict == NOT_SHOWN  # one seed does not show it: not robust
    r = variance.robust_verdict([HOLDS, NOT, HOLDS])
    assert not r.robust and r.verdict == NOT and "2 of 3" in r.reason
    r = variance.robust_verdict([HOLDS, NA, DIRECTION])
    assert r.robust and r.verdict == DIRECTION and "2 of 2" in r.reason  # a seed where it is not measurable is left out
    r = variance.robust_verdict([HOLDS, NA])
    assert not r.robust and r.verdict == HOLDS  # one measured seed cannot show robustness
    assert variance.robust_verdict([NA, NA]).verdict == NA
    with pytest.raises(ValueError, match="unknown verdict"):
        variance.robust_verdict(["holds", "maybe"])


def test_spread_table_is_mean_std_and_the_published_seeds_ci():
    per = pd.DataFrame([
        {"seed_kind": variance.HEAD, "seed": s, "headline": "static_accuracy", "benchmark": "t", "seed_value": v,
         "seed_value_lo": v - 2, "seed_value_hi": v + 2} for s, v in ((0, 90.0), (1, 91.5), (2, 95.0))
    ] + [{"seed_kind": variance.HEAD, "seed": s, "headline": "heldout_kl_ratio", "benchmark": "all", "seed_value": v,
          "seed_value_lo": math.nan, "seed_value_hi": math.nan} for s, v in ((0, 0.5), (1, 0.6), (2, 0.55))])
    t = variance_spread.spread_table(per, published_seed=0).set_index("headline")
    acc = t.loc["static_accuracy"]
    assert (acc["published"], acc["published_lo"], acc["published_hi"]) == (90.0, 88.0, 92.0)
    assert acc["seed_mean"] == pytest.approx(np.mean([90, 91.5, 95]))
    assert acc["seed_std"] == pytest.approx(np.std([90, 91.5, 95], ddof=1))
    assert (acc["seed_min"], acc["seed_max"], acc["n_seeds"], acc["seeds"]) == (90.0, 95.0, 3, "0 1 2")
    assert acc["ci_covers_seeds"] is False  # seed 2's 95.0 lies above the published CI's 92.0
    assert t.loc["heldout_kl_ratio", "ci_covers_seeds"] == ""  # no per-prompt CI
    assert list(t.columns) == list(variance.COLUMNS)[1:]


def test_seed_rows_sort_head_seeds_first_and_kept_commits_come_from_the_rows():
    H, B = variance_store.HEAD, variance_store.BACKBONE
    rows = pd.DataFrame({"seed_kind": [B, H, B, H, H], "seed": [1, 2, 0, 0, 2], "x": ["b1", "h2a", "b0", "h0", "h2b"],
                         "computed_at": ["c1", "c2", "c0", "c9", "c2"]})
    assert list(variance_store.in_seed_order(rows)["x"]) == ["h0", "h2a", "h2b", "b0", "b1"]  # stable within a seed
    kept = variance_store.Kept(values=rows)
    assert kept.commits == {(H, 0): "c9", (H, 2): "c2", (B, 0): "c0", (B, 1): "c1"}
    assert variance_store.nothing_kept().commits == {}
    assert variance_store.kept_note(variance_store.nothing_kept()) == ""
    assert "head 2 at c2" in variance_store.kept_note(kept)


def test_the_spread_figure_draws_every_seed_apart_and_rings_the_published_one():
    import matplotlib.pyplot as plt

    H, B = variance_store.HEAD, variance_store.BACKBONE
    values = {H: (96.9, 96.9, 96.9), B: (96.9, 100.0, 100.0)}  # equal values within a kind
    per = pd.DataFrame([{"seed_kind": k, "seed": s, "headline": "static_accuracy", "benchmark": "t", "seed_value": v,
                         "seed_value_lo": v - 1, "seed_value_hi": v + 1}
                        for k, vals in values.items() for s, v in enumerate(vals)])
    fig = variance_spread.plot_spread(per, published_seed=0)
    ax = fig.axes[0]
    from matplotlib.collections import PathCollection

    points = np.concatenate([c.get_offsets() for c in ax.collections if isinstance(c, PathCollection)])
    assert len(points) == 6 and len({tuple(np.round(p, 6)) for p in points}) == 6  # equal values stay apart
    rings = [ln for ln in ax.lines if ln.get_marker() == "o"]
    ring_xy = {(round(float(ln.get_xdata()[0]), 6), round(float(ln.get_ydata()[0]), 6)) for ln in rings}
    seed0 = {(round(float(x), 6), round(float(y), 6)) for x, y in points if y == pytest.approx(96.9)}
    assert len(ring_xy) == 2 and ring_xy <= seed0  # one ring per kind, on a seed-0 point
    plt.close(fig)


def _report(verdicts: dict[tuple[str, str], str]) -> pd.DataFrame:
    return pd.DataFrame([{"id": i, "scope": sc, "verdict": v, "extension": False} for (i, sc), v in verdicts.items()])


def test_claims_across_seeds_take_the_weakest_seed_and_reach_claims_md(tmp_path):
    from mrp_repro.report import verdicts

    rec, fits, acc = ("remask-recovers", "synth-code, τ=0.5"), ("mrp-fits-residual", ""), ("speculative-accuracy", "t")
    reports = {(variance.HEAD, 0): _report({rec: HOLDS, fits: HOLDS, acc: HOLDS, ("remask-own-rules", "t"): HOLDS}),
               (variance.HEAD, 1): _report({rec: HOLDS, fits: HOLDS, acc: HOLDS}),
               (variance.BACKBONE, 0): _report({rec: HOLDS, fits: HOLDS, acc: HOLDS}),
               (variance.BACKBONE, 1): _report({rec: NOT_SHOWN, fits: HOLDS})}  # fmt: skip
    a = variance.claims_across_seeds(reports, published_seed=0)
    assert list(a.columns) == list(variance.CLAIM_COLUMNS)
    assert "remask-own-rules" not in set(a["id"])  # not a seed claim: a seed decodes rule tau only
    row = a.set_index(["id", "seed_kind"])
    assert row.loc[(rec[0], variance.HEAD), "robust"] and row.loc[(rec[0], variance.HEAD), "seeds"] == "0 1"
    assert not row.loc[(rec[0], variance.BACKBONE), "robust"]  # backbone seed 1 does not show it
    every = row.loc[(rec[0], variance.ALL_SEEDS)]
    assert (every["seeds"], every["verdict_across_seeds"], every["robust"]) == ("0 head 1 backbone 1", NOT_SHOWN, False)
    assert "backbone 1: not shown" in every["seed_verdicts"]  # the published run counted once, then the others
    sa = row.loc[(acc[0], variance.ALL_SEEDS)]
    assert sa["robust"] and "backbone 1: not measured" in sa["seed_verdicts"]  # a missing scope: not measured there
    # claims.md: the all-seeds verdict beside the claim's own, blank where the claim is not judged across seeds
    main = _report({rec: HOLDS, ("direct-tradeoff", "t"): HOLDS, fits: HOLDS}).assign(
        claim="c", paper="", ours="", reason="r", statistic="s", null="n", paper_number="p", tolerance="–",
        verdict_rule="v", table="t", source="s")  # fmt: skip
    md = verdicts.write_report(main, tmp_path, "tiny", False, "SDAR-8B", a).read_text()
    out = pd.read_csv(tmp_path / "claims.csv", keep_default_na=False).set_index("id")
    assert out.loc["remask-recovers", "robust"] == "False" and out.loc["direct-tradeoff", "robust"] == ""
    assert out.loc["remask-recovers", "verdict_across_seeds"].startswith(f"{NOT_SHOWN} (holds on 2 of 3")
    assert out.loc["mrp-fits-residual", "robust"] == "True"
    assert "| robust | verdict_across_seeds |" in md and "make variance" in md
    assert "has not run" in verdicts.write_report(main, tmp_path, "tiny", False).read_text()  # none: said so


def test_an_across_seeds_verdict_attaches_only_to_the_same_declared_test(tmp_path):
    """variance_claims.csv judged under an earlier declared statistic (or before `declared` was recorded) must not lend
    its robust / verdict_across_seeds to a claim whose test has changed since."""
    from mrp_repro.report import verdicts

    rec = ("remask-recovers", "synth-code, τ=0.5")
    old = {k: _report({rec: HOLDS}).assign(declared="statistic: gain; null: 0") for k in
           ((variance.HEAD, 0), (variance.HEAD, 1))}  # fmt: skip
    a = variance.claims_across_seeds(old, published_seed=0)
    assert set(a["declared"]) == {"statistic: gain; null: 0"}
    base = _report({rec: HOLDS}).assign(
        claim="c", paper="", ours="", reason="r", statistic="s", null="n", paper_number="p", tolerance="–",
        verdict_rule="v", table="t", source="s")  # fmt: skip
    same = verdicts.write_report(base.assign(declared="statistic: gain; null: 0"), tmp_path, "tiny", False, "", a)
    assert str(pd.read_csv(tmp_path / "claims.csv", keep_default_na=False).loc[0, "robust"]) == "True"
    assert "judged under earlier declared tests" not in same.read_text()
    md = verdicts.write_report(base.assign(declared="statistic: recovery share; null: 0.5"), tmp_path, "tiny", False,
                               "", a).read_text()  # fmt: skip
    out = pd.read_csv(tmp_path / "claims.csv", keep_default_na=False)
    assert out.loc[0, "robust"] == "" and out.loc[0, "verdict_across_seeds"] == ""
    assert "judged under earlier declared tests (1 verdicts" in md
    legacy = a.drop(columns="declared")  # a variance_claims.csv written before `declared` was recorded
    verdicts.write_report(base.assign(declared="statistic: gain; null: 0"), tmp_path, "tiny", False, "", legacy)
    assert pd.read_csv(tmp_path / "claims.csv", keep_default_na=False).loc[0, "robust"] == ""


@pytest.mark.slow  # make test-slow (CI runs it once): keeps make test within its 12 minutes on 2 cores
def test_variance_on_smoke_runs_both_kinds_of_seed(smoke_profile, tmp_runs, monkeypatch):
    from mrp_repro import stages

    P = smoke_profile.replace({"mrp_training.steps": 4, "mrp_training.ckpt_every": 2})
    res = variance.run(P, head_seeds=(0, 1), backbone_seeds=(0, 1), n_prompts=2)
    per = res["per_seed"]
    for kind in (variance.HEAD, variance.BACKBONE):
        for s in (0, 1):
            got = set(per[(per["seed_kind"] == kind) & (per["seed"] == s)]["headline"])
            assert got == set(variance.HEADLINES), (kind, s)
    # seed 0 of both kinds is the published run: the same backbone and head, the same numbers
    a, b = (per[(per["seed_kind"] == k) & (per["seed"] == 0)].reset_index(drop=True)
            for k in (variance.HEAD, variance.BACKBONE))
    pd.testing.assert_frame_equal(a.drop(columns="seed_kind"), b.drop(columns="seed_kind"))
    # head seed 1 on the published backbone; backbone seed 1 is another backbone
    assert len(list((tmp_runs / "smoke").glob("variance-head-*"))) == 1
    assert stages.backbone_dir(P.replace({"seed": 1})) != stages.backbone_dir(P)
    assert (stages.backbone_dir(P.replace({"seed": 1})) / "done.json").exists()
    kl = per.query("headline == 'heldout_kl_ratio' and seed_kind == @variance.HEAD").set_index("seed")["seed_value"]
    assert kl[0] != kl[1]  # another head (init, batches, held-out split): another held-out KL
    t = res["table"]
    pub = t.query("headline == 'static_accuracy' and seed_kind == @variance.HEAD").set_index("benchmark")
    ref = per.query("headline == 'static_accuracy' and seed_kind == @variance.HEAD and seed == 0")
    assert (pub["published"] == ref.set_index("benchmark")["seed_value"].loc[pub.index]).all()
    figs = tmp_runs.parent / "figures" / "smoke"
    for f in ("variance.md", "variance.csv", "variance.png", "variance_seeds.csv", "variance_claims.md"):
        assert (figs / f).stat().st_size > 0
    # every seed claim judged across the seeds run; measured ones name every seed run once
    across = res["claims"]
    assert set(across["id"]) <= set(variance.SEED_CLAIMS) and "mrp-fits-residual" in set(across["id"])
    every = across[across["seed_kind"] == variance.ALL_SEEDS]
    assert (every["seeds"] == "0 head 1 backbone 1").all()
    # every control decoded on every seed: the control verdicts are judged across them (issue 35)
    ctl = every.set_index("id")
    for cid in ("remask-recovers", "direct-tradeoff", "mrp-graceful"):
        assert (ctl.loc[[cid], "control_across_seeds"] != "").all(), cid
        assert (ctl.loc[[cid], "other_control_across_seeds"] != "").all(), cid
    assert (ctl.loc[["speculative-speedup"], "control_across_seeds"] != "").all()
    assert (ctl.loc[["speculative-speedup"], "verdict_across_seeds"] == "").all()  # batch 1 in claims.md: controls only
    heads = res["heads"]
    assert heads["chosen_by_rule"].sum() == 1 and heads.loc[heads["seed"] == P.seed, "published_head"].all()
    assert (figs / "variance_heads.md").stat().st_size > 0 and "chooses head seed" in (figs / "variance.md").read_text()
    # every seed decode carries the commit that computed it, and the tables name the decodes they read
    decodes = sorted((tmp_runs / "smoke" / "variance").glob("runs-*.csv"))
    assert decodes and all(p.with_name(p.name + ".provenance.json").exists() for p in decodes)
    stamp = (figs / "variance.md").read_text().strip().splitlines()[-1]
    assert stamp.startswith("Provenance: computed from") and all(p.stem in stamp for p in decodes), stamp
    # cached: a second run decodes and trains nothing
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_runs / "smoke" / "variance").glob("*.csv")}
    again = variance.run(P, head_seeds=(0, 1), backbone_seeds=(0, 1), n_prompts=2)
    pd.testing.assert_frame_equal(again["per_seed"], per)
    assert all(p.stat().st_mtime_ns == s for p, s in stamps.items())
    # a later run keeps the seeds it does not run, each with the commit that computed it (report.variance_store)
    claims_rows = pd.read_csv(figs / variance_store.SEED_CLAIMS_FILE, keep_default_na=False)
    every = {(k, s) for k in (variance.HEAD, variance.BACKBONE) for s in (0, 1)}
    assert set(zip(claims_rows["seed_kind"], claims_rows["seed"], strict=True)) == every
    assert per["computed_at"].nunique() == 1 and (per["profile_hash"] == P.hash).all()
    assert (per["seed_prompts"] == 2).all()
    part = variance.run(P, head_seeds=(0,), backbone_seeds=(), n_prompts=2)
    assert set(part["kept"].commits) == {(variance.HEAD, 1), (variance.BACKBONE, 0), (variance.BACKBONE, 1)}
    pd.testing.assert_frame_equal(part["per_seed"], per)
    pd.testing.assert_frame_equal(part["claims"], across)
    assert list(part["heads"]["seed"]) == [0, 1] and part["heads"].attrs["chosen"] == heads.attrs["chosen"]
    assert "Kept from an earlier run" in (figs / "variance.md").read_text()
    # the seed files left by the kept run give back its across-seeds table (what tests/ checks on committed figures)
    pd.testing.assert_frame_equal(_across_from_seed_files(figs, P.seed), _read_str(figs / "variance_claims.csv"))
    alone = variance.run(P, head_seeds=(0,), backbone_seeds=(), n_prompts=2, keep_other_seeds=False)
    assert set(alone["per_seed"]["seed"]) == {0} and alone["kept"].commits == {}
    # a seed decoded on other prompts, or under another recipe, is not kept, and says why
    wrong = variance_store.kept_seeds(figs, P, set(), n_prompts=3)
    assert not wrong.commits and any("decoded on 2 prompts per task, this run on 3" in w for w in wrong.dropped)
    other = variance_store.kept_seeds(figs, P.replace({"decoding.frontier_max_gap": 7.0}), set(), n_prompts=2)
    assert not other.commits and any("another recipe" in w for w in other.dropped), other.dropped
    # a published backbone (as tiny's) stands for the profile's seed: --threads must not retrain it
    from mrp_repro import published
    from mrp_repro.training import backbone as training_backbone

    pub = stages.backbone_dir(P)
    monkeypatch.setattr(published, "backbone_dir", lambda Q: pub if Q.seed == P.seed else None)
    monkeypatch.setattr(training_backbone, "train_backbone", lambda *a, **k: pytest.fail("retrained the published"))
    (pub / "done.json").rename(pub / "done.json.moved")  # as in a clone: the runs/ cache has no such backbone
    r = variance.seed_run(P, variance.BACKBONE, P.seed, n_prompts=2, threads=1)
    same = variance.seed_run(P, variance.HEAD, P.seed, n_prompts=2)["values"]
    pd.testing.assert_frame_equal(pd.DataFrame(r["values"]), pd.DataFrame(same))


def test_an_across_seeds_verdict_attaches_only_where_the_seed_runs_give_the_published_run_its_verdict(tmp_path):
    """A seed run decodes no no-MRP control, so its check of the published run can read "holds" where claims.md,
    with the control, reads "not shown": that across-seeds verdict belongs to another test and is not attached."""
    from mrp_repro.report import verdicts

    gain = ("remask-max-gain", "synth-code")
    seeds = {k: _report({gain: HOLDS}) for k in ((variance.HEAD, 0), (variance.HEAD, 1), (variance.BACKBONE, 1))}
    a = variance.claims_across_seeds(seeds, published_seed=0)
    base = _report({gain: NOT_SHOWN}).assign(
        claim="c", paper="", ours="", reason="r", statistic="s", null="n", paper_number="p", tolerance="–",
        verdict_rule="v", table="t", source="s")  # fmt: skip
    md = verdicts.write_report(base, tmp_path, "tiny", False, "", a).read_text()
    out = pd.read_csv(tmp_path / "claims.csv", keep_default_na=False)
    assert out.loc[0, "robust"] == "" and out.loc[0, "verdict_across_seeds"] == ""
    assert "1 more are not attached" in md
    verdicts.write_report(base.assign(verdict=HOLDS), tmp_path, "tiny", False, "", a)  # the same verdict: attached
    assert str(pd.read_csv(tmp_path / "claims.csv", keep_default_na=False).loc[0, "robust"]) == "True"


def test_every_control_verdict_is_judged_across_seeds_and_reaches_claims_md(tmp_path):
    """Each seed run decodes the controls, so each control verdict (of record, and the others) is judged over the
    seeds like the claim's own, and claims.md shows it where the published seed's control verdict is this report's;
    a claim whose own verdict a seed measures otherwise (speculative-speedup: batch 1 vs the decoding batch) carries
    its controls across seeds only."""
    from mrp_repro.report import verdicts

    rec, spd = ("remask-recovers", "synth-code, τ=0.5"), ("speculative-speedup", "synth-code, ours")

    def rep(rec_c, rec_o, spd_c):
        return pd.DataFrame([{"id": rec[0], "scope": rec[1], "verdict": NOT_SHOWN, "extension": False,
                              "control_verdict": rec_c, "other_control_verdict": rec_o},
                             {"id": spd[0], "scope": spd[1], "verdict": NOT_SHOWN, "extension": False,
                              "control_verdict": spd_c, "other_control_verdict": ""}])  # fmt: skip

    reports = {(variance.HEAD, 0): rep(NOT, NOT_SHOWN, NOT), (variance.HEAD, 1): rep(NOT, HOLDS, NOT),
               (variance.BACKBONE, 1): rep(NOT_SHOWN, HOLDS, NOT)}  # fmt: skip
    a = variance.claims_across_seeds(reports, published_seed=0)
    assert list(a.columns) == list(variance.CLAIM_COLUMNS)
    every = a[a["seed_kind"] == variance.ALL_SEEDS].set_index("id")
    assert every.loc[rec[0], "seed_control_verdicts"] == f"0: {NOT}; head 1: {NOT}; backbone 1: {NOT_SHOWN}"
    assert every.loc[rec[0], "control_across_seeds"].startswith(f"{NOT} (holds on 0 of 3")
    assert every.loc[rec[0], "other_control_across_seeds"].startswith(f"{NOT_SHOWN} (holds on 2 of 3")
    assert every.loc[spd[0], "seed_verdicts"] == "" and every.loc[spd[0], "verdict_across_seeds"] == ""
    assert every.loc[spd[0], "control_across_seeds"].startswith(NOT)
    main = rep(NOT, NOT_SHOWN, NOT).assign(claim="c", paper="", ours="", reason="r", statistic="s", null="n",
                                           paper_number="p", tolerance="–", verdict_rule="v", table="t", source="s")
    md = verdicts.write_report(main, tmp_path, "tiny", False, "SDAR-8B", a).read_text()
    out = pd.read_csv(tmp_path / "claims.csv", keep_default_na=False).set_index("id")
    assert out.loc[rec[0], "control_across_seeds"].startswith(NOT) and out.loc[rec[0], "robust"] == "False"
    assert out.loc[spd[0], "control_across_seeds"].startswith(NOT) and out.loc[spd[0], "verdict_across_seeds"] == ""
    assert "| control_across_seeds |" in md and "more are not attached" not in md
    # a published control verdict other than this report's: another test, not attached
    verdicts.write_report(main.assign(control_verdict=HOLDS), tmp_path, "tiny", False, "SDAR-8B", a)
    out = pd.read_csv(tmp_path / "claims.csv", keep_default_na=False).set_index("id")
    assert out.loc[rec[0], "control_across_seeds"] == ""


def test_the_published_head_is_chosen_by_a_rule_declared_before_decoding():
    """The median held-out KL ratio of the head seeds, from training alone: never a decoding result."""
    assert variance.rule_choice({0: 0.55, 1: 0.50, 2: 0.60}) == 0  # the median
    assert variance.rule_choice({0: 0.70, 1: 0.50, 2: 0.60}) == 2
    assert variance.rule_choice({0: 0.5, 1: 0.6}) == 0  # even: the lower middle
    assert variance.rule_choice({3: 0.5, 1: 0.5, 2: 0.5}) == 2  # ties: the lower seed, at the median
    with pytest.raises(ValueError):
        variance.rule_choice({})
    assert "median" in variance.PUBLISHED_HEAD_RULE and "before" not in variance.PUBLISHED_HEAD_RULE.split("(")[0]
    import inspect

    src = inspect.getsource(variance.head_choice)
    assert "collect_runs" not in src and "generate" not in src  # the rule reads metrics.json, nothing decoded


def _read_str(path) -> pd.DataFrame:
    return pd.read_csv(path, keep_default_na=False, dtype=str)


def _across_from_seed_files(directory, published_seed: int) -> pd.DataFrame:
    """variance_claims computed again from variance_seed_claims.csv's per-seed verdicts alone."""
    rows = pd.read_csv(directory / variance_store.SEED_CLAIMS_FILE, keep_default_na=False)
    reports = {(k, int(s)): g.reset_index(drop=True) for (k, s), g in rows.groupby(["seed_kind", "seed"], sort=False)}
    out = variance.claims_across_seeds(reports, published_seed)
    return out.astype(str).replace({"nan": ""}).reset_index(drop=True)


@pytest.mark.parametrize("profile", sorted(p.parent.name for p in (ROOT / "figures").glob(
    f"*/{variance_store.SEED_CLAIMS_FILE}")))  # fmt: skip
def test_the_committed_across_seeds_verdicts_follow_from_the_committed_per_seed_verdicts(profile):
    """variance_claims.csv is what claims_across_seeds gives on variance_seed_claims.csv's per-seed rows, so a seed
    kept from an earlier run (report.variance_store) is judged with the seeds run since, by the same rule."""
    d = ROOT / "figures" / profile
    seeds = pd.read_csv(d / "variance_seeds.csv", keep_default_na=False)
    claims_rows = pd.read_csv(d / variance_store.SEED_CLAIMS_FILE, keep_default_na=False)
    key = lambda f: set(zip(f["seed_kind"], f["seed"].astype(int), strict=True))  # noqa: E731
    assert key(seeds) == key(claims_rows)  # every seed in both files
    assert (seeds["profile_hash"] != "").all() and (seeds["computed_at"] != "").all()
    from mrp_repro.config import load_profile

    published = load_profile(profile).seed
    pd.testing.assert_frame_equal(_across_from_seed_files(d, published), _read_str(d / "variance_claims.csv"))
