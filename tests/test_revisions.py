"""report.revisions: claims.md lists each test revised after its data, with its verdict under the earlier test."""

import pandas as pd

from mrp_repro.report import revisions


def _lookahead(k1, k4, lo, hi):
    return pd.DataFrame([
        {"benchmark": "b", "method": "naive_mtp", "lookahead_k": 1, "accuracy": k1, "accuracy_lo": k1 - 5,
         "accuracy_hi": k1 + 5},
        {"benchmark": "b", "method": "naive_mtp", "lookahead_k": 4, "accuracy": k4, "accuracy_lo": lo,
         "accuracy_hi": hi},
    ])  # fmt: skip


def test_the_earlier_naive_test_is_judged_against_naive_k1_not_static():
    # naive(1) already collapsed (tiny: 34%): naive(4) = 15% [10, 20] is not below half of 34 -> not shown
    (row,) = revisions._naive_vs_naive_k1({"lookahead": _lookahead(34.0, 15.0, 10.0, 20.0)})
    assert row[0] == "b" and row[2] == "not shown"
    (row,) = revisions._naive_vs_naive_k1({"lookahead": _lookahead(84.8, 1.9, 0.5, 3.0)})
    assert row[2] == "holds"
    (row,) = revisions._naive_vs_naive_k1({"lookahead": _lookahead(40.0, 35.0, 30.0, 40.0)})
    assert row[2] == "does not hold"


def test_registration_lines_name_every_revision_and_the_registration(monkeypatch):
    monkeypatch.setattr(revisions, "registration_commit", lambda name: "abc1234" if name == "p" else None)
    lines = revisions.registration_lines({"lookahead": _lookahead(34.0, 15.0, 10.0, 20.0)}, "p")
    text = "\n".join(lines)
    assert "committed in abc1234" in text
    assert all(f"**{r.claim}**: revised after the data in {r.commit}" in text for r in revisions.REVISIONS)
    assert "under the earlier test **not shown**" in text
    assert "none for this profile" in "\n".join(revisions.registration_lines({}, "other"))
