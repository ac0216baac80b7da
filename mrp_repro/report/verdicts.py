"""The verdict vocabulary of the claims report, the rule shape every claim with a CI uses, and its writer.

    from mrp_repro.report.verdicts import direction, sized, write_report
    direction(lo, hi, null=1.0)          # HOLDS above the null, NOT below, NOT_SHOWN when the CI holds it
    write_report(report, "figures/tiny", "tiny", numeric=False, paper_model="SDAR-8B")   # claims.md + claims.csv

The claims themselves (what each measures, its null, the paper's number, tolerance and rule) are
mrp_repro.report.claims.CLAIMS; this module only states what a verdict means and prints the report.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

__all__ = ["HOLDS", "DIRECTION", "SHORT", "NOT_SHOWN", "NOT", "NA", "VERDICTS", "Outcome", "Context", "na", "missing",
           "fmt", "fmt_ci", "direction", "sized", "ALL_SEEDS", "with_across_seeds", "report_markdown",
           "write_report", "refresh_provenance", "tally", "mode_sentences", "MODE_CLAIMS"]  # fmt: skip

HOLDS = "holds"
DIRECTION = "holds in direction; size not compared"
SHORT = "holds in direction, not in size"
NOT_SHOWN = "not shown"
NOT = "does not hold"
NA = "not measured"
#: a wall-clock verdict whose sanity checks fail (report.wallclock: ceiling, agreement, repeatable): no verdict on noise
NOT_MEASURABLE = "not measurable here"
VERDICTS = (HOLDS, DIRECTION, SHORT, NOT_SHOWN, NOT, NA, NOT_MEASURABLE)
__all__ += ["NOT_MEASURABLE"]
#: variance_claims' seed_kind of the rows judged over every seed run (report.variance); claims.md shows those
ALL_SEEDS = "all seeds"


@dataclass(frozen=True)
class Outcome:
    """One verdict row: scope (a benchmark, a setting, or "" for the whole claim), our numbers, the paper's."""

    scope: str
    ours: str
    paper: str
    verdict: str
    reason: str
    extension: bool = False
    #: the statistic and null the check computed, in words its claim's `declared` text must contain (a test checks it)
    stat: str = ""
    null: str = ""
    #: the no-MRP control of record beside an MRP verdict (issue 35: the dynamic frontier for direct mode and
    #: remasking, the no-head drafter for speculative): what it is and MRP minus (or over) it with its CI; its verdict
    control: str = ""
    control_verdict: str = ""
    #: the other no-MRP controls, reported beside it and never gating: MTP without a head (naive MTP, the untrained
    #: head) for direct mode, the head-free vetoes (random, lowest confidence) for remasking
    other_control: str = ""
    other_control_verdict: str = ""


@dataclass(frozen=True)
class Context:
    numeric: bool  # the profile's paper.comparable
    paper_model: str  # the declared paper model: every paper number comes from its rows
    n_boot: int = 1000
    ci: float = 0.95
    #: the run decoded the no-MRP controls (controls_runs): an MRP verdict then holds only beside a control it beats
    controls: bool = False
    #: the widest dynamic-frontier segment (accuracy points) a comparison may interpolate across (report.pareto)
    frontier_max_gap: float = 10.0


def na(reason: str, scope: str = "") -> list[Outcome]:
    return [Outcome(scope, "–", "", NA, reason)]


def missing(tables, *names) -> list[Outcome] | None:
    for n in names:
        t = tables.get(n)
        if t is None or len(t) == 0:
            return na(f"no `{n}` results on this profile")
    return None


def fmt(x, d=1) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{d}f}"


def fmt_ci(x, lo, hi, d=1, sign=False) -> str:
    fmt = f"{{:+.{d}f}}" if sign else f"{{:.{d}f}}"
    return "–" if x is None or math.isnan(x) else f"{fmt.format(x)} [{fmt.format(lo)}, {fmt.format(hi)}]"


def direction(lo: float, hi: float, null: float) -> str:
    """HOLDS when the CI is above the null, NOT when below, NOT_SHOWN when it holds it."""
    if lo > null:
        return HOLDS
    if hi < null:
        return NOT
    return NOT_SHOWN


def sized(found: str, ctx: Context, has_paper: bool, size_ok: bool) -> str:
    """A sized claim's verdict from its direction: the size is judged only on comparable profiles with a paper
    number."""
    if found != HOLDS:
        return found
    if not ctx.numeric or not has_paper:
        return DIRECTION
    return HOLDS if size_ok else SHORT


def _cells(*xs) -> str:
    return "| " + " | ".join(str(x).replace("|", "\\|").replace("\n", " ") for x in xs) + " |"


#: claims.md's across-seeds columns of the controls: (its column, variance_claims' per-seed column, its across column,
#: the report's verdict column it must agree with on the published seed)
_CONTROL_ACROSS = (("control_across_seeds", "seed_control_verdicts", "control_across_seeds", "control_verdict"),
                   ("other_control_across_seeds", "seed_other_control_verdicts", "other_control_across_seeds",
                    "other_control_verdict"))  # fmt: skip


def with_across_seeds(report: pd.DataFrame, across: pd.DataFrame | None) -> pd.DataFrame:
    """report with `verdict_across_seeds` and `robust` from variance_claims' all-seeds rows (report.variance;
    `make variance`), matched on (id, scope), and the controls' across-seeds verdicts (control_across_seeds,
    other_control_across_seeds) where the seed runs decoded them; blank where a claim is not judged across seeds or
    it has not run. Each is attached only where the seed runs' check gives the published run this report's verdict
    (the same test)."""
    cols = ["verdict_across_seeds", "robust"] + [c for c, *_ in _CONTROL_ACROSS]
    out = report.drop(columns=cols, errors="ignore").copy()
    for c in cols:
        out[c] = ""
    if across is None:
        return out
    a = across[across["seed_kind"] == ALL_SEEDS]
    found = {(r.id, r.scope): r for r in a.itertuples(index=False)}
    out.attrs["stale_across_seeds"] = 0
    for i, r in out.iterrows():
        if (hit := found.get((r["id"], r["scope"]))) is not None:
            if getattr(hit, "declared", "") != r.get("declared", ""):
                # judged across seeds under another declared test (variance_claims.csv predates it): not this claim's
                out.attrs["stale_across_seeds"] += 1
                continue
            for col, seeds_col, across_col, mine in _CONTROL_ACROSS:
                per = getattr(hit, seeds_col, "")
                if per and str(r.get(mine, "")) and _published_seed_verdict(per) == r.get(mine, ""):
                    out.at[i, col] = f"{getattr(hit, across_col)} ({hit.seeds})"
            if not str(getattr(hit, "seed_verdicts", "")):  # judged across seeds for its controls only
                continue
            if _published_seed_verdict(getattr(hit, "seed_verdicts", "")) != r["verdict"]:
                # the seed runs' check of the published run gives another verdict than this row's (a seed run
                # without a grid this run has, e.g. the wall-clock checks): across seeds it is another test
                out.attrs["unlike_across_seeds"] = out.attrs.get("unlike_across_seeds", 0) + 1
                continue
            out.at[i, "verdict_across_seeds"] = f"{hit.verdict_across_seeds} ({hit.robust_reason}: {hit.seeds})"
            out.at[i, "robust"] = str(hit.robust)
    return out


def _published_seed_verdict(seed_verdicts) -> str:
    """The published run's verdict in variance_claims' seed_verdicts ("0: holds; head 1: ...; backbone 2: ..."),
    or "" when it has none. A verdict may itself hold "; " ("holds in direction; size not compared"), so an entry
    ends where the next seed's name begins."""
    m = re.search(r"(?:^|; )0: (.*?)(?=; (?:head |backbone )?\d+: |$)", str(seed_verdicts))
    return m.group(1) if m else ""


#: the claims each mode's sentence reads (their control verdicts), in report order
MODE_CLAIMS = {"speculative": ("speculative-speedup",), "direct": ("direct-tradeoff", "mrp-graceful"),
               "remasking": ("remask-recovers", "remask-max-gain", "remask-gain-shrinks")}  # fmt: skip
#: each mode's control of record, and what its other controls are (report.claims_controls), as the sentences say
_RECORD = {"speculative": "the no-head drafter (weighted TPF)",
           "direct": "the dynamic frontier at equal TPF and equal weighted TPF",
           "remasking": "the dynamic frontier at equal TPF and equal weighted TPF"}  # fmt: skip
_OTHER = {"direct": "MTP without a head (naive MTP, the untrained head; not evidence that MRP helps)",
          "remasking": "a head-free veto of as many revocations (random, least confident)"}  # fmt: skip


def _where(t: pd.DataFrame) -> str:
    return ", ".join(f"{i} ({s})" if s else i for i, s in zip(t["id"], t["scope"], strict=True))


def _against(rows: pd.DataFrame, col: str) -> tuple[str, bool]:
    """(the outcome of MRP against the controls in column `col` over `rows`, whether any was measured)."""
    measured = rows[(rows[col] != NA) & (rows[col] != "")]
    if measured.empty:
        return "not measured", False
    won, lost = measured[measured[col] == HOLDS], measured[measured[col] == NOT]
    if len(won) == len(measured):
        return f"MRP beats it in every verdict ({_where(won)})", True
    if won.empty:
        return (f"MRP beats it in none of {len(measured)} verdicts"
                + (f"; the control is better in {_where(lost)}" if len(lost) else "")), True
    return (f"MRP beats it in {len(won)} of {len(measured)} verdicts ({_where(won)}); not in "
            f"{_where(measured[measured[col] != HOLDS])}"), True


def mode_sentences(report: pd.DataFrame) -> dict[str, str]:
    """mode -> one sentence, from the control-of-record verdicts of MODE_CLAIMS' paper rows (extensions left out),
    and, for direct mode and remasking, what MRP does against the other controls (never read as "MRP helps")."""
    out = {}
    rows = report[~report["extension"].astype(bool)] if "extension" in report.columns else report
    if "other_control_verdict" not in rows.columns:
        rows = rows.assign(other_control_verdict="")
    for mode, ids in MODE_CLAIMS.items():
        r = rows[rows["id"].isin(ids) & (rows["control_verdict"] != "")]
        if mode == "speculative":  # the no-head drafter exists in our family only
            r = r[r["control_verdict"] != NA]
        text, measured = _against(r, "control_verdict")
        if not measured:
            s = (f"no control of record ({_RECORD[mode]}) was measured on this profile, so it cannot say whether MRP "
                 "helps.")  # fmt: skip
        else:
            m = r[r["control_verdict"] != NA]
            # helps: the control of record beaten, and no measured other control unbeaten (report.claims_controls.gate)
            ok = (m["control_verdict"] == HOLDS) & m["other_control_verdict"].isin([HOLDS, NA, ""])
            helps = ("MRP itself helps on this profile" if ok.all() else
                     "MRP itself is not shown to help on this profile" if not ok.any()
                     else f"MRP itself helps in {int(ok.sum())} of {len(ok)} verdicts")  # fmt: skip
            s = f"{helps}: against its control of record, {_RECORD[mode]}, {text}."
        if mode in _OTHER:
            o_text, o_measured = _against(rows[rows["id"].isin(ids)], "other_control_verdict")
            if o_measured:
                s += f" Against {_OTHER[mode]}: {o_text}."
        out[mode] = f"{mode}: {s}"
    return out


#: claims.md's sections, in order: the report's `group` column (report.claims.GROUPS) and its heading
_SECTIONS = (("paper", "The paper's claims"), ("package", "The package's own claims (not the paper's)"),
             ("implementation", "Implementation checks (true by construction under exact verification)"))  # fmt: skip


def _summary(rows: pd.DataFrame) -> str:
    counts = rows["verdict"].value_counts()
    return ", ".join(f"{counts.get(v, 0)} {v}" for v in VERDICTS if counts.get(v, 0)) or "none"


def _control_summary(rows: pd.DataFrame) -> str:
    c = rows[rows["control_verdict"].astype(str) != ""]
    if c.empty:
        return "no verdict has a no-MRP control"
    counts = c["control_verdict"].value_counts()
    named = {HOLDS: "MRP beats its control", NOT_SHOWN: "not shown to beat it", NOT: "the control is better",
             NA: "control not measured"}  # fmt: skip
    measured = len(c) - int(counts.get(NA, 0))
    rest = sorted(set(rows["id"]) - set(c["id"]))  # claims about the backbone, or whose null is itself a no-MRP model
    text = (f"{len(c)} of them judge an MRP decoding mode and carry a no-MRP control of record (the dynamic frontier "
            "at equal TPF and weighted TPF for direct mode and remasking, the no-head drafter for speculative)"
            + (f" (not {', '.join(rest)}: {len(rows) - len(c)} verdicts whose statistic is about the backbone or "
               "already has a no-MRP model as its null)" if rest else "")
            + f"; {measured} have it measured: "
            + ", ".join(f"{counts.get(v, 0)} {named[v]}" for v in (HOLDS, NOT_SHOWN, NOT) if counts.get(v, 0)))
    return text + (f"; {int(counts[NA])} have none measured (the control column says why)" if counts.get(NA, 0) else "")


def tally(report: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The report's verdict rows (extensions left out) per group: paper, package, implementation."""
    report = _with_columns(report)
    main = report[~report["extension"].astype(bool)]
    return {g: main[main["group"] == g] for g, _ in _SECTIONS}


def _with_columns(report: pd.DataFrame) -> pd.DataFrame:
    out = report.copy()
    for c, default in (("group", "paper"), ("control", ""), ("control_verdict", ""), ("other_control", ""),
                       ("other_control_verdict", ""), ("declared", "")):
        if c not in out.columns:
            out[c] = default
        out[c] = out[c].fillna(default).astype(str) if c != "group" else out[c].fillna(default)
    return out


def report_markdown(report: pd.DataFrame, profile_name: str, numeric: bool, paper_model: str = "",
                    across: pd.DataFrame | None = None) -> str:  # fmt: skip
    report = with_across_seeds(_with_columns(report), across)
    stale = report.attrs.get("stale_across_seeds", 0)
    unlike = report.attrs.get("unlike_across_seeds", 0)
    main, ext = report[~report["extension"].astype(bool)], report[report["extension"].astype(bool)]
    groups = tally(report)
    paper_rows = groups["paper"]
    pm = paper_model or "the declared paper model"
    mode = ("comparable with the paper: sized claims are judged against the paper's numbers within the stated "
            "tolerance" if numeric else "not the paper's experiment (paper.comparable: false): sized claims are judged "
            "by direction only, and the paper's numbers stand beside ours for reference")  # fmt: skip
    n_paper_claims = paper_rows["id"].nunique()
    lines = [f"# Claims: paper vs reproduced (profile `{profile_name}`, compared with {pm})", "",
             f"**The paper's claims: {len(paper_rows)} verdicts over {n_paper_claims} claims: "
             f"{_summary(paper_rows)}.** {_control_summary(paper_rows)}. Counted apart: "
             f"{len(groups['implementation'])} implementation checks ({_summary(groups['implementation'])}; true by "
             f"construction under exact verification, for any head), {len(groups['package'])} verdicts of the "
             f"package's own claims ({_summary(groups['package'])}), {len(ext)} extension rows beyond the paper's grid "
             "(counted nowhere).", "",
             "Does MRP itself help here? (from the verdicts against each mode's control of record: MRP minus a decode "
             "without MRP, paired over prompts; report.claims_controls)", ""]  # fmt: skip
    lines += [f"- {s}" for s in mode_sentences(report).values()]
    lines += ["", f"Every paper number below is {pm}'s, for the same benchmark, unless the paper column names "
              "another model and benchmark (blank where the paper has none). This "
              f"profile is {mode}. {len(main)} verdicts over {report['id'].nunique()} claims in all.", "",
              "Verdicts: **holds** (the CI clears the null; a sized claim on a comparable profile also within "
              "tolerance of the paper); **holds in direction; size not compared**; **holds in direction, not in "
              "size**; **not shown** (the CI holds the null, or MRP does not beat its no-MRP control); **does not "
              "hold** (the CI is on the wrong side); **not measurable here** (a wall-clock verdict whose clock fails "
              "report.wallclock's checks: its forward-count ceiling, agreement of two grids timing the same decode, "
              "or repeated interleaved passes; wallclock_checks.md); **not measured**. Each claim's declared "
              "statistic, null and control are listed below the tables.", "",
              _seeds_line(across, main, stale, unlike)]  # fmt: skip
    tail = ("| control (of record: MRP vs it; gates the verdict) | control_verdict | control_across_seeds | "
            "other_control (beside it, never gating) | other_control_verdict | other_control_across_seeds | robust | "
            "verdict_across_seeds |")
    rule = "|" + "---|" * 14
    head = [f"| claim | scope | paper ({pm}) | ours | verdict | reason {tail}", rule]

    def cells(r, claim):
        return _cells(claim, r.scope, r.paper or "", r.ours, f"**{r.verdict}**", r.reason, r.control, r.control_verdict,
                      r.control_across_seeds, r.other_control, r.other_control_verdict, r.other_control_across_seeds,
                      r.robust, r.verdict_across_seeds)  # fmt: skip

    for g, title in _SECTIONS:
        rows = groups[g]
        if rows.empty:
            continue
        lines += ["", f"## {title}", ""] + head
        lines += [cells(r, f"**{r.id}**: {r.claim}") for r in rows.itertuples(index=False)]
    if len(ext):
        lines += ["", "## Extensions beyond the paper's grid (judged by the same rule; counted in no group)", "",
                  f"| claim | scope | paper | ours | verdict | reason {tail}", rule]
        lines += [cells(r, f"**{r.id}**") for r in ext.itertuples(index=False)]
    lines += ["", "## Each claim's declared test", "",
              "`declared` is fixed in mrp_repro/report/claims.py (version control) and names the statistic, null and "
              "control the check computes (tests/test_claims.py holds the two together).", ""]
    for r in report.drop_duplicates("id").itertuples(index=False):
        lines.append(f"- `{r.id}` ({r.group}; {r.source}; table `{r.table}`). **Declared:** {r.declared}. "
                     f"Statistic: {r.statistic}. Null: {r.null}. Paper: {r.paper_number}. Tolerance: {r.tolerance}. "
                     f"Rule: {r.verdict_rule}.")  # fmt: skip
    return "\n".join(lines) + "\n"


def _seeds_line(across: pd.DataFrame | None, main: pd.DataFrame, stale: int = 0, unlike: int = 0) -> str:
    if across is None:
        return ("Across seeds: `make variance` has not run on this profile, so no verdict here is judged across seeds "
                "(`robust` and `verdict_across_seeds` are blank).")  # fmt: skip
    judged = main[main["robust"] != ""]
    if stale and judged.empty:
        return (f"Across seeds: variance_claims.csv was judged under earlier declared tests ({stale} verdicts whose "
                "statistic or null has changed since), so none is attached here (`robust` and `verdict_across_seeds` "
                "are blank); `make variance` judges them again.")  # fmt: skip
    return (f"Across seeds (`make variance`, variance_claims.md): {len(judged)} of these {len(main)} verdicts were "
            f"judged on every seed run, {int((judged['robust'] == 'True').sum())} of them robust. "
            "`verdict_across_seeds` is the weakest verdict of the same check on every seed run (the published one, "
            "the other head seeds, the other backbone seeds; speculative at the decoding batch size); `robust` is "
            "True only when the claim holds (or holds in direction) on every seed measured, at least two. Blank: not "
            "judged across seeds (the claim reads a grid the seed runs do not decode, or the other decoding family)."
            + (f" {stale} more were judged under earlier declared tests and are not attached (`make variance` judges "
               "them again)." if stale else "")
            + (f" {unlike} more are not attached: the seed runs' check gives the published run another verdict than "
               "this table's (a seed run lacks a grid this run has, e.g. the wall-clock checks), so across seeds it is "
               "another test." if unlike else "")
            + " `control_across_seeds` / `other_control_across_seeds`: the weakest verdict of MRP against its control "
            "of record / its other controls on every seed run (each seed run decodes every control beside MRP), with "
            "the seeds; blank where no seed run judged it.")


def write_report(report: pd.DataFrame, directory, profile_name: str, numeric: bool, paper_model: str = "",
                 across: pd.DataFrame | None = None) -> Path:  # fmt: skip
    """Write <dir>/claims.md and claims.csv (with the across-seeds columns of `across`: variance_claims, when
    `make variance` has run); returns the Markdown path."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    md = d / "claims.md"
    from mrp_repro.report.revisions import registration_lines  # it reads this module's verdict words
    from mrp_repro.report.tables import (  # renamed into place: links replaced, not followed
        provenance_summary,
        write_csv,
        write_text,
    )

    tables = {"lookahead": pd.read_csv(d / "lookahead.csv")} if (d / "lookahead.csv").is_file() else {}
    text = report_markdown(report, profile_name, numeric, paper_model, across)
    if prov := provenance_summary(d):  # what this run computed and what it read from earlier runs, under the title
        title, _, rest = text.partition("\n\n")
        text = f"{title}\n\n{prov}\n\n{rest}"
    write_text(md, text.rstrip("\n") + "\n\n" + "\n".join(registration_lines(tables, profile_name)))
    write_csv(with_across_seeds(report, across), d / "claims.csv")
    return md


def refresh_provenance(directory) -> bool:
    """Rewrite claims.md's provenance paragraph from every table's stamp as it stands now. Notebook 09 writes it
    mid-run, before notebook 11 re-renders the peers tables: read then, it named the commit of the run that had
    rendered those last. reproduce.main calls this after the last notebook; True when a paragraph was rewritten."""
    from mrp_repro.report.tables import provenance_summary, write_text

    md = Path(directory) / "claims.md"
    if not md.is_file():
        return False
    paragraphs = md.read_text().split("\n\n")
    at = next((i for i, p in enumerate(paragraphs[:3]) if p.startswith("Provenance: ")), None)
    prov = provenance_summary(directory)
    if at is None or not prov or paragraphs[at] == prov:
        return False
    paragraphs[at] = prov
    write_text(md, "\n\n".join(paragraphs))
    return True
