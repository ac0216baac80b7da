"""The one table writer: ``value [lo, hi]`` cells, Markdown, LaTeX and CSV.

    from mrp_repro.report import tables
    tables.save_table(df, tables.out_dir(profile), "speculative")   # figures/<profile>/speculative.{md,tex,csv}
    tables.markdown(tables.format_table(df))                        # the Markdown a notebook displays
    tables.write_glossary(tables.out_dir(profile))                  # figures/<profile>/COLUMNS.md

Every ``<metric>`` with ``<metric>_lo`` and ``<metric>_hi`` beside it is shown as ``metric [lo, hi]``
in one cell (percent and speedups as the summary holds them: nothing is rescaled here); the CSV keeps
the numbers as they are. Every column must have a glossary entry (mrp_repro.measure.schema.define): save_table
refuses a table with an undefined column, and rewrites <dir>/COLUMNS.md, the definitions of every column of
every table in the directory (its CSV headers and Markdown table headers).

Every table records its provenance (issue 35): save_table puts one line under the .md and atop the .tex (the result
files the process read, each with the commit that computed it and whether it was computed this run or cached by an
earlier one: runtime.table_stamp; and the commit rendering it), and the same record in <dir>/provenance.json
(table -> stamp); provenance_summary(dir) is the run's reuse in one paragraph (claims.md's header).

Every file here (and every figure and report written beside them: plots.save_figure, verdicts.write_report, the
notebooks' copies) is written by `write_text` / `write_csv`: a temporary name renamed into place
(integrity.atomic_file), so a symbolic or hard link at figures/<profile>/<name> is replaced, never written through
to the file it points to, and a killed write leaves the old file whole.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from mrp_repro.config import Profile

__all__ = ["out_dir", "format_table", "markdown", "latex", "save_table", "table_columns", "write_glossary",
           "glossary_markdown", "write_text", "write_csv", "GLOSSARY", "PROVENANCE", "stamp_line", "record_provenance",
           "read_provenance", "provenance_summary"]

#: the glossary file written beside the tables
GLOSSARY = "COLUMNS.md"
#: every table's provenance record (save_table), beside the tables: table name -> runtime.table_stamp()
PROVENANCE = "provenance.json"


def out_dir(profile_or_dir: Profile | str | os.PathLike) -> Path:
    """figures/<profile>/ for a Profile or a profile name; a Path (or a string with a separator) as is."""
    from mrp_repro.runtime import figures_dir, figures_root

    if isinstance(profile_or_dir, Path):
        d = profile_or_dir
    elif isinstance(profile_or_dir, str):
        d = Path(profile_or_dir) if (os.sep in profile_or_dir) else figures_root() / profile_or_dir
    elif hasattr(profile_or_dir, "name") and hasattr(profile_or_dir, "hash"):
        return figures_dir(profile_or_dir)
    else:
        d = Path(profile_or_dir)
    d.mkdir(parents=True, exist_ok=True)
    return d


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write `text` to `path` through a temporary name renamed into place: a link at `path` is replaced, not
    followed (a figures/ symlink to a file elsewhere leaves that file as it was)."""
    from mrp_repro.integrity import atomic_file

    path = Path(path)
    with atomic_file(path) as tmp:
        tmp.write_text(text)
    return path


def write_csv(df: pd.DataFrame, path: str | os.PathLike, **kwargs) -> Path:
    """df.to_csv(path, index=False, **kwargs) the same way as write_text (renamed into place, links replaced)."""
    from mrp_repro.integrity import atomic_file

    path = Path(path)
    with atomic_file(path) as tmp:
        df.to_csv(tmp, **{"index": False, **kwargs})
    return path


def _fmt(x, digits: int) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if isinstance(x, (float, np.floating)):
        return f"{x:.{digits}f}"
    return str(x)


_TWO_DIGITS = ("identical_share", "tpf", "static_tpf", "threshold", "tpf_share_of_oracle", "mean_accept")


def format_table(df: pd.DataFrame, digits: int = 1) -> pd.DataFrame:
    """Strings for display: ``x [lo, hi]`` wherever x_lo and x_hi exist; other numbers rounded."""
    out = pd.DataFrame(index=df.index)
    skip = set()
    for c in df.columns:
        if c in skip:
            continue
        if f"{c}_lo" in df.columns and f"{c}_hi" in df.columns:
            d = 2 if "speedup" in c else digits
            out[c] = [
                f"{_fmt(x, d)} [{_fmt(lo, d)}, {_fmt(hi, d)}]" if not _isnan(x) else "–"
                for x, lo, hi in zip(df[c], df[f"{c}_lo"], df[f"{c}_hi"], strict=True)
            ]
            skip |= {f"{c}_lo", f"{c}_hi"}
        else:
            d = 2 if ("speedup" in c or c in _TWO_DIGITS) else digits
            out[c] = [_fmt(x, d) for x in df[c]]
    return out


def _isnan(x) -> bool:
    return x is None or (isinstance(x, (float, np.floating)) and math.isnan(x))


def markdown(df: pd.DataFrame) -> str:
    """A GitHub Markdown table of `df` as it is (format_table first for CIs)."""
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(str(v).replace("|", "\\|") for v in row) + " |")
    return "\n".join(lines) + "\n"


def latex(df: pd.DataFrame) -> str:
    """A booktabs tabular of `df` as it is (format_table first for CIs)."""

    def esc(s: str) -> str:
        for a, b in (("\\", r"\textbackslash{}"), ("_", r"\_"), ("%", r"\%"), ("&", r"\&"), ("#", r"\#")):
            s = s.replace(a, b)
        return s.replace("–", "--")

    cols = [esc(str(c)) for c in df.columns]
    lines = [r"\begin{tabular}{" + "l" * len(cols) + "}", r"\toprule", " & ".join(cols) + r" \\", r"\midrule"]
    for row in df.itertuples(index=False):
        lines.append(" & ".join(esc(str(v)) for v in row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def save_table(df: pd.DataFrame, directory, name: str, digits: int = 1, note: str = "") -> list[Path]:
    """Write <dir>/<name>.csv (numbers as they are), .md and .tex (formatted, CIs merged); `note` under the .md."""
    from mrp_repro.measure.schema import require_defined
    from mrp_repro.runtime import table_stamp

    require_defined(df.columns, name)
    d = out_dir(directory)
    shown = format_table(df, digits)
    stamp = table_stamp()
    line = stamp_line(stamp)
    paths = [d / f"{name}.md", d / f"{name}.tex", d / f"{name}.csv"]
    write_text(paths[0], markdown(shown) + (f"\n{note}\n" if note else "") + f"\n{line}\n")
    write_text(paths[1], f"% {line}\n" + latex(shown))
    write_csv(df, paths[2])
    record_provenance(d, name, stamp)
    write_glossary(d)
    return paths


def _short(commit: str | None) -> str:
    return str(commit)[:7] if commit and commit not in ("unknown", "unrecorded") else str(commit or "unknown")


def stamp_line(stamp: dict) -> str:
    """One line of a table's provenance (runtime.table_stamp): `Provenance: computed from <results> at <commit>
    (this run | cached by an earlier run, computed <time> | no record); rendered at <commit> (dirty).`"""
    rendered = _short(stamp.get("rendered_at")) + (" with uncommitted changes" if stamp.get("rendered_dirty") else "")
    src = stamp.get("computed_from") or []
    if not src:
        return f"Provenance: computed and rendered at {rendered} (no cached result read)."
    groups: dict[tuple, list[str]] = {}
    for r in src:
        groups.setdefault((r["git_commit"], r["reuse"], (r.get("computed") or "")[:10]), []).append(r["result"])
    parts = []
    for (commit, reuse, day), names in groups.items():
        how = {"this run": "this run", "cached": f"cached by an earlier run, computed {day}",
               "unrecorded": "no record of the commit that computed it"}[reuse]  # fmt: skip
        at = f" at {_short(commit)}" if commit != "unrecorded" else ""
        parts.append(f"{', '.join(names)}{at} ({how})")
    return f"Provenance: computed from {'; '.join(parts)}; rendered at {rendered}."


def read_provenance(directory) -> dict:
    """<dir>/provenance.json: table name -> the stamp it was written with ({} when absent or unreadable)."""
    import json

    try:
        rec = json.loads((Path(directory) / PROVENANCE).read_text())
    except (OSError, ValueError):
        return {}
    return rec if isinstance(rec, dict) else {}


def record_provenance(directory, name: str, stamp: dict) -> Path:
    """Set table `name`'s stamp in <dir>/provenance.json (the other tables' stamps kept: each says when it was
    rendered), renamed into place as every file here."""
    import json

    rec = read_provenance(directory)
    rec[name] = stamp
    return write_text(Path(directory) / PROVENANCE, json.dumps(dict(sorted(rec.items())), indent=1) + "\n")


def provenance_summary(directory, tables: list[str] | None = None) -> str:
    """The reuse of the run that wrote `directory`'s tables, in one paragraph: the commits that rendered them, and
    every result read that an earlier run had computed (cached), with its commit and date, or that carries no record
    of its commit; "" without provenance.json. `tables`: only these tables' stamps. A result is this run's when it
    was computed since runtime.run_started() (a stamp's "this run" is the run that rendered that table)."""
    rec = read_provenance(directory)
    if tables is not None:
        rec = {k: v for k, v in rec.items() if k in tables}
    if not rec:
        return ""
    from mrp_repro.runtime import run_started

    rendered = sorted({_short(s.get("rendered_at")) + ("+dirty" if s.get("rendered_dirty") else "")
                       for s in rec.values()})  # fmt: skip
    started = run_started()
    cached: dict[tuple, set] = {}
    fresh: set[str] = set()
    for t, s in rec.items():
        for r in s.get("computed_from") or []:
            # "this run" is the run that rendered that table: a table an earlier run left here (a later notebook of
            # this run has not rendered it yet) read its results then, so they are this run's only if computed since
            if r["reuse"] == "this run" and (r.get("computed") or "") >= started:
                fresh.add(r["result"])
            else:
                cached.setdefault((r["result"], r["git_commit"], (r.get("computed") or "")[:10]), set()).add(t)
    text = f"Provenance: {len(rec)} table{'s' if len(rec) > 1 else ''} rendered at {', '.join(rendered)}."
    if cached:
        items = [f"{res} (computed at {_short(c)}{', ' + day if day else ''}; read by {len(ts)} table"
                 f"{'s' if len(ts) > 1 else ''})" for (res, c, day), ts in sorted(cached.items())]  # fmt: skip
        text += f" Reused from an earlier run, not recomputed: {'; '.join(items)}."
    else:
        text += " No cached result of an earlier run was read."
    if fresh:
        text += f" Computed this run: {', '.join(sorted(fresh))}."
    return text


def _md_headers(text: str) -> list[list[str]]:
    """The header cells of every Markdown table in `text` (a `| a | b |` line above a `|---|` line); a cell
    `name (detail)` is the column `name` (e.g. claims.md's `paper (SDAR-8B)`)."""
    lines = text.splitlines()
    out = []
    for head, rule in zip(lines, lines[1:], strict=False):
        if head.startswith("|") and rule.startswith("|---"):
            out.append([c.strip().split(" (")[0] for c in head.strip().strip("|").split("|")])
    return out


def table_columns(directory) -> dict[str, list[str]]:
    """Every table in `directory` -> its columns: CSV headers, then the Markdown tables' headers (a Markdown
    file may hold tables its CSV has not, e.g. speed.md's targets), in order, once each."""
    import csv

    d = Path(directory)
    out: dict[str, list[str]] = {}
    for p in sorted(d.glob("*.csv")):
        with p.open(newline="") as fh:
            header = next(csv.reader(fh), [])
        out.setdefault(p.stem, []).extend(header)
    for p in sorted(d.glob("*.md")):
        if p.name == GLOSSARY:
            continue
        for header in _md_headers(p.read_text()):
            out.setdefault(p.stem, []).extend(header)
    return {k: list(dict.fromkeys(v)) for k, v in sorted(out.items())}


def write_glossary(directory) -> tuple[Path, list[str]]:
    """Write <dir>/COLUMNS.md (glossary_markdown); returns its path and the columns without a definition."""
    d = Path(directory)
    text, undefined = glossary_markdown(d)
    path = write_text(d / GLOSSARY, text)
    return path, undefined


def glossary_markdown(directory) -> tuple[str, list[str]]:
    """COLUMNS.md's text: each column of every table in `directory`, its definition and the tables that hold it;
    and the columns without a definition (listed as UNDEFINED)."""
    from mrp_repro.measure.schema import define

    d = Path(directory)
    where: dict[str, list[str]] = {}
    for table, cols in table_columns(d).items():
        for c in cols:
            where.setdefault(c, []).append(table)
    undefined = [c for c in where if define(c) is None]
    lines = [f"# Columns of the tables in `{d.name}/`", "",
             "Generated by mrp_repro.report.tables.write_glossary from the definitions in "
             "mrp_repro/measure/schema.py (TABLE_COLUMNS, RUN_COLUMNS); a `<m>_lo` / `<m>_hi` pair is m's "
             "confidence interval, merged into `m [lo, hi]` in the Markdown tables. Percent and points are on "
             "0-100, speedups are ratios (x).", "",
             "| column | definition | tables |", "|---|---|---|"]  # fmt: skip
    for c in sorted(where, key=str.lower):
        text = (define(c) or "**UNDEFINED**: add it to mrp_repro/measure/schema.py TABLE_COLUMNS").replace("|", "\\|")
        lines.append(f"| `{c}` | {text} | {', '.join(where[c])} |")
    return "\n".join(lines) + "\n", undefined
