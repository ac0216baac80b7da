"""Declared tests revised after their data were seen, and the pre-registration claims.md prints (issue 34).

    from mrp_repro.report.revisions import registration_lines
    lines = registration_lines(tables, "chain16")     # claims.md's "Pre-registration" section

A test changed after its data is listed as *revised after the data*: the commit that changed it, the earlier test,
and the verdict under the earlier test beside the current one. The registration is the commit that added
docs/preregistration.md for the profile (report.preregister); a claims.py change after it is a revision too
(shared/hooks/before-stop lists such commits).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from mrp_repro.config import repo_root

__all__ = ["Revision", "REVISIONS", "registration_commit", "registration_lines"]


@dataclass(frozen=True)
class Revision:
    claim: str
    commit: str  # the commit that changed the test
    earlier: str  # the earlier test, in one line
    check: Callable[[dict[str, pd.DataFrame]], list[tuple[str, str, str]]]  # -> (scope, ours, verdict) per scope


def _naive_vs_naive_k1(tables: dict[str, pd.DataFrame]) -> list[tuple[str, str, str]]:
    """The test before f3c05be: naive MTP at the largest K below half of naive MTP at K = 1 (CI below half)."""
    t = tables.get("lookahead")
    if t is None:
        return []
    out = []
    for bench, g in t[t["method"] == "naive_mtp"].groupby("benchmark", sort=False):
        g = g.sort_values("lookahead_k")
        if len(g) < 2:
            continue
        a, z = g.iloc[0], g.iloc[-1]
        half = 0.5 * float(a["accuracy"])
        lo, hi = float(z["accuracy_lo"]), float(z["accuracy_hi"])
        # report.verdicts' words (it imports this module, so they are spelled here): the CI against the null
        verdict = "holds" if hi < half else "does not hold" if lo > half else "not shown"
        ours = (f"K={int(a['lookahead_k'])} {a['accuracy']:.1f}% → K={int(z['lookahead_k'])} "
                f"{z['accuracy']:.1f} [{lo:.1f}, {hi:.1f}]% (half of K=1: {half:.1f})")  # fmt: skip
        out.append((bench, ours, verdict))
    return out


REVISIONS: tuple[Revision, ...] = (
    Revision("naive-mtp-collapses", "f3c05be", "naive MTP at the largest K below half of naive MTP at K = 1 (the "
             "largest K's accuracy CI below half of K = 1's)", _naive_vs_naive_k1),
)


def registration_commit(profile_name: str) -> str | None:
    """The commit that added docs/preregistration.md for `profile_name`, or None (no registration, or no git)."""
    path = repo_root() / "docs" / "preregistration.md"
    try:
        if f"profile `{profile_name}`" not in path.read_text().splitlines()[0]:
            return None
        out = subprocess.run(["git", "log", "--diff-filter=A", "--format=%h", "--", str(path)], cwd=repo_root(),
                             capture_output=True, text=True, timeout=20, check=True).stdout.split()  # fmt: skip
    except (OSError, IndexError, subprocess.SubprocessError):
        return None
    return out[-1] if out else None


def registration_lines(tables: dict[str, pd.DataFrame], profile_name: str) -> list[str]:
    """claims.md's pre-registration section: the registration commit, then every revised test with both verdicts."""
    commit = registration_commit(profile_name)
    head = (f"Pre-registration: docs/preregistration.md, committed in {commit} before any MRP head was trained on this "
            "backbone." if commit else "Pre-registration: none for this profile (its tests were declared in "
            "report/claims.py, not registered before its data).")  # fmt: skip
    lines = ["## Pre-registration and revised tests", "", head, ""]
    for r in REVISIONS:
        rows = r.check(tables)
        lines.append(f"- **{r.claim}**: revised after the data in {r.commit}; the earlier test: {r.earlier}.")
        lines += [f"  - {scope}: {ours}: under the earlier test **{verdict}**" for scope, ours, verdict in rows]
    return lines + [""]
