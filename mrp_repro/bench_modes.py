"""TEMPORARY shim, delete at integration: the old import path of two callers this engineer does not own.

    mrp_repro/train_mrp.py:   from mrp_repro.bench_modes import cost_model   ->  mrp_repro.measure.cost
    tests/test_mrp_modes.py:  from mrp_repro.bench_modes import run_all_modes, to_markdown
                              ->  mrp_repro.report.bench.modes_report, mrp_repro.report.tables

Built from measure/ and report.tables only (not report.bench, which imports train_mrp: a cycle).
"""

from __future__ import annotations

from mrp_repro.measure.cost import cost_model, cost_note, with_cost_model
from mrp_repro.measure.runs import collect_runs, settings_for
from mrp_repro.measure.stats import summarize
from mrp_repro.report.tables import format_table, markdown

__all__ = ["cost_model", "run_all_modes", "to_markdown"]


def run_all_modes(profile, backbone, head, tasks=None, n_prompts=None, batch_size=None, max_new_tokens=None,
                  progress: bool = True):  # fmt: skip
    runs = collect_runs(profile, backbone, head, n_prompts, tasks, settings_for(profile, head), batch_size,
                        max_new_tokens, progress)  # fmt: skip
    s = summarize(runs, profile.evaluation.bootstrap_samples, profile.evaluation.ci)
    Ks = sorted({int(k) for k in runs.loc[runs["mode"] == "speculative", "K"]})
    bs = min(batch_size or profile.decoding.batch_size, int(runs.groupby(["benchmark", "setting"]).size().max()))
    return with_cost_model(s, cost_model(backbone.model, head, bs, backbone.block_size, Ks)) if Ks else s


def to_markdown(df, cost: dict | None = None) -> str:
    return markdown(format_table(df, 2)) + (f"\n{cost_note(cost)}\n" if cost else "")
