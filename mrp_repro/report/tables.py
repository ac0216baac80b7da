"""The one table writer: ``value [lo, hi]`` cells, Markdown, LaTeX and CSV.

    from mrp_repro.report import tables
    tables.save_table(df, tables.out_dir(profile), "speculative")   # figures/<profile>/speculative.{md,tex,csv}
    tables.markdown(tables.format_table(df))                        # the Markdown a notebook displays

Every ``<metric>`` with ``<metric>_lo`` and ``<metric>_hi`` beside it is shown as ``metric [lo, hi]``
in one cell (percent and speedups as the summary holds them: nothing is rescaled here); the CSV keeps
the numbers as they are.
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

__all__ = ["out_dir", "format_table", "markdown", "latex", "save_table"]


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


def _fmt(x, digits: int) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if isinstance(x, (float, np.floating)):
        return f"{x:.{digits}f}"
    return str(x)


_TWO_DIGITS = ("identical_to_static", "tpf", "static_tpf", "threshold", "tpf_share_of_oracle", "mean_accept")


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
    d = out_dir(directory)
    shown = format_table(df, digits)
    paths = [d / f"{name}.md", d / f"{name}.tex", d / f"{name}.csv"]
    paths[0].write_text(markdown(shown) + (f"\n{note}\n" if note else ""))
    paths[1].write_text(latex(shown))
    df.to_csv(paths[2], index=False)
    return paths
