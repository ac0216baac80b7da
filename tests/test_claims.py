"""Claims logic on synthetic result tables: one set where every claim holds, one where none does."""

from __future__ import annotations

import pandas as pd
import pytest

from mrp_repro import claims, paper


def _results(good: bool) -> dict[str, pd.DataFrame]:
    runs = paper.synthetic_runs(n=40, good=good)
    adj = pd.DataFrame(
        [
            {"distance": d, "model": m, "kl_mean": kl * d, "top1_agreement": ag - 0.02 * d, "n_positions": 50}
            for m, kl, ag in (("trained", 0.05, 0.97 if good else 0.3), ("random-init", 0.5, 0.2))
            for d in (1, 2, 3)
        ]
    )
    if not good:
        adj.loc[adj["model"] == "trained", "kl_mean"] = [3.0, 2.0, 1.0]
    curve = pd.DataFrame({"step": [0, 10, 20], "train_kl": [1.0, 0.6, 0.4], "heldout_kl": [1.0, 0.7, 0.5]})
    curve["baseline_kl"] = 0.6 if good else 0.3
    return {
        "adjacent": adj,
        "mrp_curve": curve,
        "speculative_runs": runs[runs["mode"].isin(["static", "speculative"])],
        "direct_runs": runs[runs["mode"].isin(["static", "direct"])],
        "lookahead_runs": runs[runs["mode"].isin(["naive", "direct"])],
        "remasking_runs": runs[runs["mode"].isin(["dynamic", "remask"])],
    }


def _verdicts(good: bool, numeric: bool = False) -> dict[str, str]:
    tables = claims.tables_from_results(_results(good), n_boot=200)
    rep = claims.evaluate(tables, numeric=numeric)
    assert list(rep["id"]) == [c.id for c in claims.CLAIMS]
    assert rep["verdict"].isin(claims.VERDICTS).all()
    return dict(zip(rep["id"], rep["verdict"], strict=True))


def test_claims_are_data():
    ids = [c.id for c in claims.CLAIMS]
    assert len(ids) == len(set(ids)) >= 10
    for c in claims.CLAIMS:
        assert c.text and c.paper_figure and c.measured and c.table and c.column and c.threshold


def test_every_claim_holds_on_good_tables():
    v = _verdicts(good=True)
    assert all(x in (claims.HOLDS, claims.QUAL) for x in v.values()), v
    assert v["speculative-lossless"] == claims.HOLDS  # a property: checked exactly on every profile
    assert v["remask-max-gsm8k"] == claims.QUAL  # a number: only the direction on tiny


def test_no_claim_holds_on_bad_tables():
    v = _verdicts(good=False)
    assert all(x == claims.NOT for x in v.values()), v


def test_numeric_profile_checks_numbers():
    v = _verdicts(good=True, numeric=True)
    assert v["speculative-speedup"] == claims.HOLDS  # synthetic speedup ~1.43 >= 0.9 x 1.4
    assert v["remask-max-gsm8k"] == claims.HOLDS  # synthetic gain +27.5 >= 17.7 - 5
    assert claims.is_numeric_profile("sdar-8b") and not claims.is_numeric_profile("tiny")


def test_missing_tables_are_not_measurable(tmp_path):
    rep = claims.evaluate({}, numeric=False)
    assert (rep["verdict"] == claims.NA).all()
    md = claims.write_report(rep, tmp_path, "smoke")
    text = md.read_text()
    assert "not measurable on this profile" in text and "profile `smoke`" in text
    assert (tmp_path / "claims.csv").stat().st_size > 0


@pytest.mark.parametrize("broken", [pd.DataFrame({"x": [1]})])
def test_malformed_table_is_reported_not_raised(broken):
    rep = claims.evaluate({"adjacent": broken, "speculative": broken})
    assert set(rep.loc[rep["table"].isin(["adjacent", "speculative"]), "verdict"]) == {claims.NA}
