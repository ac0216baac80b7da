"""Claims as declared tests on result tables in the full runs schema: every verdict follows from the rule the
report prints, and flips when its statistic crosses that rule."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from runs_helpers import synthetic_adjacent, synthetic_runs

from mrp_repro.config import load_profile
from mrp_repro.measure.adjacent import RANDOM_INIT, SUBSET, TRAINED
from mrp_repro.measure.schema import RUN_COLUMNS
from mrp_repro.report import claims, paper, verdicts

GOOD = (claims.HOLDS, claims.DIRECTION)


def _results(good: bool, paper_model: str = "SDAR-8B") -> dict[str, pd.DataFrame]:
    runs = synthetic_runs(n=40, good=good, paper_model=paper_model, algorithms=("ours", "upstream"))
    assert list(runs.columns) == list(RUN_COLUMNS)  # every column the schema has
    curve = pd.DataFrame({"step": [0, 10, 20], "train_loss": [1.0, 0.6, 0.4], "heldout_kl": [1.0, 0.7, 0.5]})
    curve["heldout_uncorrected_kl"] = 0.6 if good else 0.3
    out = {"adjacent": synthetic_adjacent(good), "mrp_curve": curve, "modes_runs": runs,
           "speculative_runs": runs[runs["mode"].isin(["static", "speculative"])]}  # fmt: skip
    out.update(paper.split_runs(runs))
    return out


@pytest.fixture(scope="module")
def good_tables():
    return claims.tables_from_results(_results(True), n_boot=200)


@pytest.fixture(scope="module")
def bad_tables():
    return claims.tables_from_results(_results(False), n_boot=200)


@pytest.fixture(scope="module")
def reports(good_tables, bad_tables):
    """Each scenario's claims report, computed once for the module (check_claims bootstraps every paired check)."""
    return {"good": _check(good_tables), "bad": _check(bad_tables), "trained": _check(_controlled(False)),
            "untrained": _check(_controlled(True))}  # fmt: skip


def _controlled(untrained: bool) -> dict[str, pd.DataFrame]:
    """good results with the no-MRP controls decoded (controls_runs, speculative(K, naive), a cost model).

    untrained=False: a trained head, its controls worse (the random veto no better than dynamic(τ), the untrained
    head's direct(K) all wrong, the no-head drafter at TPF 1). untrained=True: what an untrained head gives, each MRP
    row equal to its control: direct(K) = naive_mtp(K) (a zero head), speculative(K, mrp) = the no-head drafter
    (its head calls still made), remask(τ, tau) = a random veto no better than dynamic(τ)."""
    res = _results(True)
    runs = res["modes_runs"].copy()
    mode = runs["mode"]
    ours = runs["algorithm"] == "ours"
    dyn = runs[(mode == "dynamic") & ours].set_index(["benchmark", "threshold", "problem_id"])["correct"]
    naive = runs[mode == "naive"].set_index(["benchmark", "K", "problem_id"])["correct"]
    rem = (mode == "remask") & (runs["rule"] == "tau") & (runs["algorithm"] == "ours")
    key = lambda df, c: list(zip(df["benchmark"], df[c], df["problem_id"], strict=True))  # noqa: E731
    if not untrained:  # naive MTP worse than MRP from K = 1 (the synthetic default keeps K = 1 at MRP's level)
        runs.loc[(mode == "naive") & runs["K"].isin([1, 2]), "correct"] = False
        naive = runs[runs["mode"] == "naive"].set_index(["benchmark", "K", "problem_id"])["correct"]
    if untrained:
        d = mode == "direct"
        runs.loc[d, "correct"] = naive.loc[key(runs[d], "K")].to_numpy()
        runs.loc[rem, "correct"] = dyn.loc[key(runs[rem], "threshold")].to_numpy()
    spec_m = (mode == "speculative") & (runs["drafter"] == "mrp") & (runs["algorithm"] == "ours")
    nv = runs[spec_m].assign(drafter="naive", mrp_forwards=0)
    nv["setting"] = nv["setting"].str.replace("mrp", "naive")
    if not untrained:
        nv["denoise_forwards"] = nv["tokens"]  # TPF 1: the no-head drafter accepts nothing
    runs = pd.concat([runs, nv], ignore_index=True)
    ctrl = [runs[(runs["mode"] == "static") & (runs["algorithm"] == "ours")]]
    for tau in (0.5, 0.7, 0.9):
        r = runs[(runs["mode"] == "remask") & (runs["rule"] == "tau") & (runs["algorithm"] == "ours")
                 & np.isclose(runs["threshold"], tau)].copy()  # fmt: skip
        r["setting"], r["rule"] = f"random_veto({tau:g},tau)", "random-veto"
        r["correct"] = dyn.loc[key(r, "threshold")].to_numpy()
        ctrl.append(r)
    for k in (1, 2):
        r = runs[(runs["mode"] == "direct") & (runs["K"] == k)].copy()
        r["setting"] = f"direct({k},untrained)"
        r["correct"] = naive.loc[key(r, "K")].to_numpy() if untrained else False
        ctrl.append(r)
    out = {"adjacent": res["adjacent"], "mrp_curve": res["mrp_curve"], "modes_runs": runs,
           "speculative_runs": runs[runs["mode"].isin(["static", "speculative"])],
           "controls_runs": pd.concat(ctrl, ignore_index=True),
           "cost_model": pd.DataFrame({"batch_size": [1, 32], "head_cost": [0.2, 0.2]})}  # fmt: skip
    out.update(paper.split_runs(runs))
    return claims.tables_from_results(out, n_boot=200)


#: the claims about MRP: each has a no-MRP control and an untrained head must fail it
MRP_CLAIMS = ("speculative-speedup", "direct-tradeoff", "mrp-graceful", "remask-recovers", "remask-max-gain",
              "remask-gain-shrinks")  # fmt: skip


def test_an_untrained_head_fails_every_mrp_claim(reports):
    """With the controls decoded, no MRP claim holds for a head that does what its no-MRP control does (the old
    checks passed it: speculative faster than static, direct within the accuracy bound, remasking gains over
    dynamic); the same data with a trained head's rows holds, so the gate is not a blanket "not shown"."""
    bad = reports["untrained"]
    rows = bad[bad["id"].isin(MRP_CLAIMS) & ~bad["extension"] & ~bad["scope"].str.contains("upstream")]
    assert set(rows["id"]) == set(MRP_CLAIMS)
    assert not rows["verdict"].isin(GOOD).any(), rows[["id", "scope", "verdict", "control_verdict"]]
    assert (rows["control_verdict"] != claims.HOLDS).all()
    good = reports["trained"]
    held = good[good["id"].isin(MRP_CLAIMS) & ~good["extension"] & good["verdict"].isin(GOOD)]
    assert {"speculative-speedup", "direct-tradeoff", "remask-max-gain", "remask-gain-shrinks"} <= set(held["id"])
    assert (held["control_verdict"] == claims.HOLDS).all()
    # a row without a control in its family (upstream speculative) cannot hold once the run has controls
    up = good[(good["id"] == "speculative-speedup") & good["scope"].str.contains("upstream")]
    assert len(up) and (up["verdict"] == claims.NOT_SHOWN).all() and (up["control_verdict"] == claims.NA).all()


def test_tally_counts_the_papers_claims_apart(reports, tmp_path):
    """claims.md's headline counts the paper's claims only; lossless / accuracy under exact verify are
    implementation checks and the equal-speed claims the package's own, each counted apart."""
    rep = reports["trained"]
    groups = verdicts.tally(rep)
    assert set(groups["implementation"]["id"]) == {"speculative-lossless", "speculative-accuracy"}
    assert set(groups["package"]["id"]) == {"remask-equal-speed", "direct-equal-speed"}
    paper_rows = groups["paper"]
    assert not paper_rows["id"].isin(["speculative-lossless", "speculative-accuracy", "remask-equal-speed"]).any()
    md = claims.write_report(rep, tmp_path, "tiny", False, "SDAR-8B").read_text()
    head = md.splitlines()[2]
    assert head.startswith(f"**The paper's claims: {len(paper_rows)} verdicts over {paper_rows['id'].nunique()}")
    assert f"{len(groups['implementation'])} implementation checks" in head and "no-MRP control" in head
    for mode in ("speculative:", "direct:", "remasking:"):
        assert any(line.startswith(f"- {mode}") for line in md.splitlines()), mode


def _check(tables, numeric=False, paper_model="SDAR-8B", n_boot=200) -> pd.DataFrame:
    rep = claims.check_claims(tables, numeric=numeric, paper_model=paper_model, n_boot=n_boot)
    assert list(dict.fromkeys(rep["id"])) == [c.id for c in claims.CLAIMS]
    assert rep["verdict"].isin(claims.VERDICTS).all()
    return rep


def _verdict(rep, cid, scope=None) -> str:
    r = rep[(rep["id"] == cid) & (~rep["extension"])]
    if scope is not None:
        r = r[r["scope"].str.startswith(scope)]
    assert len(r) == 1, (cid, scope, r)
    return r["verdict"].iloc[0]


def test_every_claim_declares_its_test_and_the_report_prints_it(reports, tmp_path):
    ids = [c.id for c in claims.CLAIMS]
    assert len(ids) == len(set(ids)) >= 12
    rep = reports["good"]
    md = claims.write_report(rep, tmp_path, "tiny", False, "SDAR-8B").read_text()
    for c in claims.CLAIMS:
        assert c.statistic and c.null and c.paper_number and c.tolerance and c.rule and c.declared
        assert c.group in claims.GROUPS
        for part in (c.statistic, c.null, c.rule, c.tolerance, c.declared):
            assert part in md, (c.id, part)
    assert "compared with SDAR-8B" in md and (tmp_path / "claims.csv").stat().st_size > 0


def test_declared_text_names_the_statistic_and_null_the_code_computes(reports):
    """Every measured verdict row names the statistic and null its check computed (Outcome.stat / .null), and both
    stand in its claim's declared text: a check that changes what it computes without changing `declared` fails."""
    declared = {c.id: c.declared for c in claims.CLAIMS}
    for rep in reports.values():
        measured = rep[rep["verdict"] != claims.NA]
        assert set(measured["id"]) == set(declared) - {"adjacent-similar"} or len(measured) > 20
        for r in measured.itertuples():
            assert r.stat and r.stat_null, (r.id, r.scope)
            assert r.stat in declared[r.id] and r.stat_null in declared[r.id], (r.id, r.stat, r.stat_null)


def test_good_tables_hold_and_bad_tables_do_not(reports):
    good, bad = reports["good"], reports["bad"]
    # synth-code's direct step 2 drops 5 points on 40 prompts: its CI [-12.5, 0] holds the -10 bound, not shown
    assert _verdict(good, "direct-tradeoff", "synth-code") == claims.NOT_SHOWN
    # 40 prompts: synth-code's recovery share 0.78 [0.46, 1.0] holds 0.5; mrp-graceful's K = 3-4 CIs hold the bound
    assert _verdict(good, "remask-recovers", "synth-code") == claims.NOT_SHOWN
    loose = good["id"].isin(["mrp-graceful"]) | ((good["id"].isin(["direct-tradeoff", "remask-recovers"]))
                                                 & good["scope"].str.startswith("synth-code"))  # fmt: skip
    assert good.loc[loose, "verdict"].isin([*GOOD, claims.NOT_SHOWN]).all()
    no_cost = good["scope"].str.endswith("weighted_tpf")  # these results carry no cost model
    assert (good.loc[no_cost, "verdict"] == claims.NA).all() and no_cost.sum() == 4
    good = good[~loose & ~no_cost]
    assert good.loc[~good["extension"], "verdict"].isin(GOOD).all(), good[["id", "scope", "verdict"]]
    bad = bad[~bad["scope"].str.endswith("weighted_tpf")]
    assert bad["verdict"].isin([claims.NOT, claims.NOT_SHOWN]).all(), bad[["id", "scope", "verdict"]]
    # sized claims: the direction only on a non-comparable profile; properties hold outright
    for algo in ("ours", "upstream"):  # each algorithm its own scope, against its own static
        assert _verdict(good, "speculative-speedup", f"synth-math, {algo}") == claims.DIRECTION
        assert _verdict(good, "speculative-lossless", f"synth-math, {algo}") == claims.HOLDS
        assert _verdict(bad, "speculative-speedup", f"synth-math, {algo}") == claims.NOT  # CI below 1


def test_paper_numbers_are_the_declared_models(reports):
    """Per benchmark, the declared model's rows: SDAR-8B HumanEval's largest remasking gain is +22.6, GSM8K's
    +14.4 (the abstract's +17.7 is SDAR-4B's); a run declaring SDAR-4B quotes 4B's numbers everywhere."""
    rep = reports["good"].set_index(["id", "scope"])
    assert rep.loc[("remask-max-gain", "synth-code"), "paper"].startswith("+22.6")
    assert rep.loc[("remask-max-gain", "synth-math"), "paper"].startswith("+14.4")
    # the paper's speculative number is the released code's K = 3: beside our upstream rows only
    assert rep.loc[("speculative-speedup", "synth-math, upstream"), "paper"] == "1.40×"
    assert rep.loc[("speculative-speedup", "synth-math, ours"), "paper"] == ""
    assert rep.loc[("naive-mtp-collapses", "synth-math"), "paper"] == ""  # the paper's lookahead is SDAR-4B only
    four = _check(claims.tables_from_results(_results(True, "SDAR-4B"), n_boot=20), paper_model="SDAR-4B", n_boot=20)
    four = four.set_index(["id", "scope"])
    assert four.loc[("remask-max-gain", "synth-math"), "paper"].startswith("+17.7")
    assert four.loc[("speculative-speedup", "synth-math, upstream"), "paper"] == "1.36×"
    assert four.loc[("naive-mtp-collapses", "synth-math"), "paper"].startswith("84.8")
    assert four.loc[("direct-tradeoff", "synth-math"), "paper"] == ""  # the paper's direct table is SDAR-8B only


def _adjacent(hi: float, lo: float, random_hi: float = 0.7) -> dict:
    adj = synthetic_adjacent(True)
    at = (adj["subset"] == SUBSET) & (adj["distance"] == 1)
    adj.loc[at & (adj["model"] == TRAINED), ["relative_kl", "relative_kl_lo", "relative_kl_hi"]] = [
        (lo + hi) / 2, lo, hi]
    adj.loc[at & (adj["model"] == RANDOM_INIT), ["relative_kl", "relative_kl_lo", "relative_kl_hi"]] = [
        random_hi, random_hi / 2, random_hi]
    return {"adjacent": adj}


@pytest.mark.parametrize("hi,lo,random_hi,verdict", [
    (0.09, 0.05, 0.7, claims.HOLDS),       # CI at or below 0.1
    (0.11, 0.05, 0.7, claims.NOT_SHOWN),   # the CI holds 0.1
    (0.20, 0.12, 0.7, claims.NOT),         # CI above 0.1
    (0.09, 0.05, 0.09, claims.NOT_SHOWN),  # the random init passes too: no discrimination
])  # fmt: skip
def test_adjacent_verdict_flips_at_its_threshold(hi, lo, random_hi, verdict):
    assert _verdict(_check(_adjacent(hi, lo, random_hi)), "adjacent-similar") == verdict


def _spec(rows) -> dict:
    cols = ["benchmark", "algorithm", "K", "accuracy", "static_accuracy", "paper_accuracy", "identical_share",
            "throughput_speedup", "throughput_speedup_lo", "throughput_speedup_hi", "paper_throughput_speedup"]
    return {"speculative": pd.DataFrame([dict(zip(cols, ["synth-math", "upstream", *r], strict=True)) for r in rows])}


def test_speedup_is_judged_at_the_papers_k_only():
    """A faster K = 5 row does not rescue K = 3 whose CI holds 1 (the old check took the maximum over K)."""
    t = _spec([(3, 90, 90, 90.4, 1.0, 1.05, 0.98, 1.12, 1.40), (5, 90, 90, 90.4, 1.0, 1.30, 1.20, 1.40, 1.40)])
    rep = _check(t)
    assert _verdict(rep, "speculative-speedup") == claims.NOT_SHOWN
    assert "K=3" in rep.loc[rep["id"] == "speculative-speedup", "ours"].iloc[0]
    assert _verdict(_check(_spec([(5, 90, 90, 90.4, 1.0, 1.3, 1.2, 1.4, 1.4)])), "speculative-speedup") == claims.NA


@pytest.mark.parametrize("speedup,numeric,verdict", [
    (1.27, True, claims.HOLDS),       # >= 0.9 x 1.40 = 1.26
    (1.25, True, claims.SHORT),       # below the tolerance
    (1.25, False, claims.DIRECTION),  # size not compared on a non-comparable profile
])  # fmt: skip
def test_speedup_size_rule_uses_the_paper_number(speedup, numeric, verdict):
    t = _spec([(3, 90, 90, 90.4, 1.0, speedup, speedup - 0.02, speedup + 0.02, 1.40)])
    assert _verdict(_check(t, numeric=numeric), "speculative-speedup") == verdict


def test_direct_is_judged_per_benchmark():
    """One benchmark's large accuracy drop is not averaged away by the other's."""
    res = _results(True)
    runs = res["direct_runs"].copy()
    hit = (runs["benchmark"] == "synth-math") & (runs["mode"] == "direct") & (runs["K"] == 2)
    runs.loc[hit, "correct"] = False  # synth-math step 2: -75 points
    res["direct_runs"] = runs
    rep = _check(claims.tables_from_results({"direct_runs": runs}, n_boot=200))
    assert _verdict(rep, "direct-tradeoff", "synth-math") == claims.NOT
    assert _verdict(rep, "direct-tradeoff", "synth-code") in (claims.DIRECTION, claims.NOT_SHOWN)


def test_remasking_is_judged_over_the_papers_tau_range():
    """A τ = 0.3 where remasking hurts is an extension row; the paper's claim (τ 0.5-0.9) still holds."""
    res = _results(True)
    runs = res["remasking_runs"].copy()
    hit = (runs["mode"] == "remask") & (runs["threshold"] == 0.3)
    runs.loc[hit, "correct"] = False
    rep = _check(claims.tables_from_results({"remasking_runs": runs, "direct_runs": res["direct_runs"]}, n_boot=200))
    for cid in ("remask-recovers", "remask-gain-shrinks", "remask-max-gain"):
        main = rep[(rep["id"] == cid) & ~rep["extension"]]
        assert not main["scope"].str.contains("0.3").any(), main
        assert main["verdict"].isin(GOOD if cid != "remask-recovers" else [*GOOD, claims.NOT_SHOWN]).all(), main
    ext = rep[rep["extension"]]
    assert set(ext["id"]) == {"remask-recovers", "remask-gain-shrinks"}
    assert (ext["verdict"] == claims.NOT).all() and ext["scope"].str.contains("extension").all()


def test_equal_speed_claim_reads_the_matched_speed_table(reports):
    assert _verdict(reports["good"], "remask-equal-speed", "synth-math, equal tpf") == claims.HOLDS
    assert _verdict(reports["bad"], "direct-equal-speed", "synth-math, equal tpf") == claims.NOT


def test_numeric_profile_flag():
    assert claims.is_numeric_profile(load_profile("sdar-8b")) and not claims.is_numeric_profile(load_profile("tiny"))


def test_missing_tables_are_not_measured(tmp_path):
    rep = claims.check_claims({}, numeric=False)
    assert (rep["verdict"] == claims.NA).all()
    text = claims.write_report(rep, tmp_path, "smoke", numeric=False).read_text()
    assert "not measured" in text and "profile `smoke`" in text


@pytest.mark.parametrize("broken", [pd.DataFrame({"x": [1]})])
def test_malformed_table_names_the_missing_column(broken):
    rep = claims.check_claims({"adjacent": broken, "speculative": broken, "mrp_curve": broken}).set_index("id")
    assert set(rep.loc[rep["table"].isin(["adjacent", "speculative", "mrp_curve"]), "verdict"]) == {claims.NA}
    assert "subset" in rep.loc["adjacent-similar", "reason"]
    assert "heldout_uncorrected_kl" in rep.loc["mrp-fits-residual", "reason"]
    assert "identical_share" in rep.loc["speculative-lossless", "reason"]


def test_fits_residual_reads_the_released_heads_heldout_check():
    """A released-head run trains nothing: the claim reads notebook 04's held-out check of the loaded head."""
    held = pd.DataFrame([{"heldout_kl": 0.05, "heldout_uncorrected_kl": 0.09, "sequences": 8, "source": "gsm8k train"}])
    rep = claims.check_claims({"mrp_heldout": held})
    r = rep[rep["id"] == "mrp-fits-residual"].iloc[0]
    assert r["verdict"] == claims.HOLDS and "released head" in r["ours"]
    rep = claims.check_claims({"mrp_heldout": held.assign(heldout_kl=13.8)})  # a random head: not closer
    assert rep.loc[rep["id"] == "mrp-fits-residual", "verdict"].iloc[0] == claims.NOT
