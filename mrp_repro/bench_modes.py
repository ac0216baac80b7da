"""TEMPORARY shim, delete at integration: the old import path of two callers this engineer does not own.

mrp_repro/train_mrp.py:   from mrp_repro.bench_modes import cost_model   ->  mrp_repro.measure.cost
tests/test_mrp_modes.py:  from mrp_repro.bench_modes import run_all_modes, to_markdown
                          ->  mrp_repro.report.bench.modes_report, report.tables (see the report)
"""

from __future__ import annotations

from mrp_repro.measure.cost import cost_model, cost_note
from mrp_repro.report.bench import modes_report as run_all_modes
from mrp_repro.report.tables import format_table, markdown

__all__ = ["cost_model", "run_all_modes", "to_markdown"]


def to_markdown(df, cost: dict | None = None) -> str:
    return markdown(format_table(df, 2)) + (f"\n{cost_note(cost)}\n" if cost else "")
