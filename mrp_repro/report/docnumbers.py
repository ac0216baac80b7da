"""Numbers in README.md and docs/ that come from the committed tables, or say which earlier run they are from.

    .venv/bin/python -m mrp_repro.report.docnumbers           # check: exit 1 naming every stale or unheld number
    .venv/bin/python -m mrp_repro.report.docnumbers --write   # rewrite every generated excerpt from figures/

Three kinds of text quote a number (tests/test_doc_numbers.py holds all of them to it):

- a **generated excerpt**, rewritten by `--write` from a committed table and checked to equal it: a cell in prose,
  ``<!-- from figures/tiny/backbone.md: accuracy where benchmark=synth-code; setting=static(1) -->97.0 [94.5, 99.0]
  <!-- /from -->``, or a table of rows and columns, ``<!-- from figures/tiny/variance.md: columns metric, published
  where metric=heldout_kl_ratio|adjacent_relative_kl -->`` then the lines of the table, then ``<!-- /from -->``. The
  excerpt is the table's Markdown cell as written (CIs merged), so it cannot drift from the table;
- a **historical** passage, a number of an earlier run: ``<!-- historical: <fingerprint or commit> -->`` ...
  ``<!-- /historical -->``, whose visible text names that fingerprint or commit (a reader sees which run it is);
- an **estimate** (a number computed from declared constants or hardware specs, not measured):
  ``<!-- estimate: <what it is> -->`` ... ``<!-- /estimate -->``;
- every other decimal number in prose (not in code, a link target, a version or an arXiv id) must be one a committed
  table holds: figures/<profile>/*.md and *.csv (at the number's own decimals), the published artifacts' records
  (artifacts/<profile>/published.json) or the paper's numbers (mrp_repro/paper_data/*.csv). Integers are not
  checked (counts, issue numbers, batch sizes); a count read from a table belongs in an excerpt. A block another
  generator writes and its own test checks (OTHER_GENERATORS) counts as an excerpt.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DOCS", "held_numbers", "excerpts", "render_excerpt", "check", "write", "main"]

_FROM = re.compile(r"<!--\s*from\s+(?P<spec>[\w./-]+\.md:.*?)-->(?P<body>.*?)<!--\s*/from\s*-->", re.S)
_EST = re.compile(r"<!--\s*estimate:\s*(?P<label>.*?)-->(?P<body>.*?)<!--\s*/estimate\s*-->", re.S)
#: generated blocks of other tools, each checked against its source by its own test: marker name -> that test
OTHER_GENERATORS = {"quickcheck.docs_table": "tests/test_released_quickcheck.py"}
_OTHER = re.compile(r"<!--\s*(?P<name>[\w.]+): begin\s*-->.*?<!--\s*(?P=name): end\s*-->", re.S)
_HIST = re.compile(r"<!--\s*historical:\s*(?P<label>.*?)-->(?P<body>.*?)<!--\s*/historical\s*-->", re.S)
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\]\([^)]*\)")
#: a decimal number in prose: not part of a version (1.2.3), a word or a path
_NUMBER = re.compile(r"(?<![\w.\-/])[-+−]?\d+\.\d+(?![\d.]*\d)(?=$|[^\w/]|x(?:\W|$))", re.M)
_VERSION = re.compile(r"\d+\.\d+(?:\.\d+)+|(?<=arXiv )\d{4}\.\d{4,5}(?:v\d+)?")  # versions, arXiv ids
_LABEL = re.compile(r"\b[0-9a-f]{7,40}\b")


def DOCS(root: Path) -> list[Path]:
    """README.md and every docs/*.md."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def _root() -> Path:
    from mrp_repro.config import repo_root

    return repo_root()


# ----------------------------------------------------------------------------- what the tables hold


def held_numbers(root: Path) -> set[str]:
    """Every number a committed table holds, as text: as written in figures/*/*.md and the CSVs, and each CSV value
    at 0-4 decimals (a doc rounds); the paper's numbers (paper_data) the same way. Signs dropped."""
    held: set[str] = set()
    num = re.compile(r"\d+\.\d+|\d+")
    for p in sorted((root / "figures").glob("*/*.md")):
        held.update(num.findall(p.read_text(errors="replace")))
    for p in sorted((root / "artifacts").glob("*/published.json")):
        for v in re.findall(r"(?<![\w.])-?\d+\.\d+(?:e-?\d+)?", p.read_text()):
            x = abs(float(v))
            held.add(v.lstrip("-"))
            held.update(f"{x:.{d}f}" for d in range(5))
    for p in [*sorted((root / "figures").glob("*/*.csv")), *sorted((root / "mrp_repro" / "paper_data").glob("*.csv"))]:
        with p.open(newline="", errors="replace") as fh:
            for row in csv.reader(fh):
                for cell in row:
                    held.update(num.findall(cell))
                    try:
                        v = abs(float(cell))
                    except ValueError:
                        continue
                    if v == v and v != float("inf"):
                        held.update(f"{v:.{d}f}" for d in range(5))
    return held


# ----------------------------------------------------------------------------- generated excerpts


@dataclass(frozen=True)
class Excerpt:
    doc: Path
    spec: str
    body: str
    start: int  # offsets of the body in the doc
    end: int


def excerpts(text: str, doc: Path) -> list[Excerpt]:
    return [Excerpt(doc, m.group("spec").strip(), m.group("body"), m.start("body"), m.end("body"))
            for m in _FROM.finditer(text)]  # fmt: skip


def _md_table(path: Path) -> tuple[list[str], list[list[str]]]:
    """The first Markdown table of `path`: its header cells and rows, cells as written (`\\|` kept as `|`)."""
    lines = path.read_text().splitlines()
    for i, (head, rule) in enumerate(zip(lines, lines[1:], strict=False)):
        if head.startswith("|") and rule.startswith("|---"):
            rows = []
            for ln in lines[i + 2 :]:
                if not ln.startswith("|"):
                    break
                rows.append(_cells(ln))
            return _cells(head), rows
    raise ValueError(f"{path}: no Markdown table")


def _cells(line: str) -> list[str]:
    parts = re.split(r"(?<!\\)\|", line.strip().strip("|"))
    return [c.strip().replace("\\|", "|") for c in parts]


_SPEC = re.compile(r"^(?P<path>[^:]+?):\s*(?P<what>.+?)(?:\s+where\s+(?P<where>.+))?$", re.S)


def _parse(spec: str) -> tuple[str, list[str], bool, list[tuple[str, list[str]]]]:
    m = _SPEC.match(" ".join(spec.split()))
    if not m:
        raise ValueError(f"excerpt spec {spec!r}: want `<table path>: <column> [where k=v; ...]` or "
                         "`<table path>: columns a, b [where k=v|w; ...]`")  # fmt: skip
    what = m.group("what").strip()
    block = what.startswith("columns ")
    cols = [c.strip() for c in what.removeprefix("columns ").split(",")] if block else [what]
    where = []
    for cond in (m.group("where") or "").split(";"):
        if cond.strip():
            k, _, v = cond.partition("=")
            where.append((k.strip(), [x.strip() for x in v.split("|")]))
    return m.group("path").strip(), cols, block, where


def render_excerpt(spec: str, root: Path) -> str:
    """The text an excerpt with `spec` holds, from the committed table it names: one cell (inline) or a Markdown table
    of the selected columns and rows (the lines between the markers, a blank line before and after)."""
    path, cols, block, where = _parse(spec)
    header, rows = _md_table(root / path)
    missing = [c for c in cols + [k for k, _ in where] if c not in header]
    if missing:
        raise ValueError(f"excerpt {spec!r}: {path} has no column {', '.join(missing)} (it has {', '.join(header)})")
    idx = {c: header.index(c) for c in header}
    keep = [r for r in rows if all(r[idx[k]] in vs for k, vs in where)]
    if not block:
        if len(keep) != 1:
            raise ValueError(f"excerpt {spec!r}: {len(keep)} rows of {path} match, want one")
        return keep[0][idx[cols[0]]]
    if not keep:
        raise ValueError(f"excerpt {spec!r}: no row of {path} matches")
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(r[idx[c]].replace("|", "\\|") for c in cols) + " |" for r in keep]
    return "\n\n" + "\n".join(lines) + "\n\n"


# ----------------------------------------------------------------------------- the check


def _prose(text: str) -> str:
    """`text` with what quotes no result blanked: generated excerpts and historical passages (checked apart), HTML
    comments, code blocks and spans, link targets (the text keeps its length and line breaks)."""

    def blank(m: re.Match) -> str:
        return re.sub(r"[^\n]", " ", m.group(0))

    def other(m: re.Match) -> str:
        return blank(m) if m.group("name") in OTHER_GENERATORS else m.group(0)

    text = _OTHER.sub(other, text)
    for pat in (_FROM, _HIST, _EST, _COMMENT, _FENCE, _CODE, _LINK, _VERSION):
        text = pat.sub(blank, text)
    return text


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def check(root: Path | None = None, docs: list[Path] | None = None) -> list[str]:
    """Every problem with the numbers of `docs` (default README.md and docs/*.md), one line each: a generated
    excerpt that differs from its table (or names none), a historical passage whose text does not show its label,
    a number in prose no committed table holds. [] when none."""
    root = root or _root()
    docs = docs if docs is not None else DOCS(root)
    held = held_numbers(root)
    problems = []
    for doc in docs:
        text = doc.read_text()
        rel = doc.relative_to(root) if doc.is_relative_to(root) else doc
        for ex in excerpts(text, doc):
            try:
                want = render_excerpt(ex.spec, root)
            except (OSError, ValueError) as e:
                problems.append(f"{rel}:{_line(text, ex.start)}: {e}")
                continue
            if ex.body != want:
                problems.append(f"{rel}:{_line(text, ex.start)}: the excerpt of `{ex.spec}` reads {ex.body.strip()!r}, "
                                f"the table {want.strip()!r} (python -m mrp_repro.report.docnumbers --write)")
        for m in _EST.finditer(text):
            if not m.group("label").strip():
                problems.append(f"{rel}:{_line(text, m.start())}: an estimate passage says not what it is "
                                "(`<!-- estimate: <what> -->`)")
        for m in _HIST.finditer(text):
            labels = _LABEL.findall(m.group("label"))
            visible = _COMMENT.sub("", m.group("body"))
            if not labels:
                problems.append(f"{rel}:{_line(text, m.start())}: a historical passage names no fingerprint or commit "
                                f"(`<!-- historical: <hex> ... -->`): {m.group('label').strip()!r}")
            elif not any(lb in visible for lb in labels):
                problems.append(f"{rel}:{_line(text, m.start())}: a historical passage's text does not show its label "
                                f"{labels[0]} (say in the text which run the numbers are from)")
        prose = _prose(text)
        for m in _NUMBER.finditer(prose):
            n = m.group(0).lstrip("+-−")
            if n not in held:
                problems.append(f"{rel}:{_line(text, m.start())}: {m.group(0)} is in no committed table (figures/, "
                                "paper_data): quote it from a table (<!-- from ... -->) or mark the passage "
                                "<!-- historical: <fingerprint or commit> -->")
    return problems


def write(root: Path | None = None, docs: list[Path] | None = None) -> list[Path]:
    """Rewrite every generated excerpt of `docs` from its table; returns the docs that changed."""
    from mrp_repro.report.tables import write_text

    root = root or _root()
    changed = []
    for doc in docs if docs is not None else DOCS(root):
        text = doc.read_text()
        out, at = [], 0
        for ex in excerpts(text, doc):
            try:
                out += [text[at : ex.start], render_excerpt(ex.spec, root)]
            except (OSError, ValueError) as e:
                raise ValueError(f"{doc}:{_line(text, ex.start)}: {e}") from None
            at = ex.end
        new = "".join(out) + text[at:]
        if new != text:
            write_text(doc, new)
            changed.append(doc)
    return changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite the generated excerpts from figures/ first")
    ap.add_argument("docs", nargs="*", type=Path, help="default: README.md and docs/*.md")
    a = ap.parse_args(argv)
    root = _root()
    docs = [d.resolve() for d in a.docs] or None
    if a.write:
        for d in write(root, docs):
            print(f"rewrote {d.relative_to(root)}")
    problems = check(root, docs)
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    from mrp_repro.cli import run_cli

    run_cli(main)  # a user error, Ctrl-C or a full disk is one error: line
