"""Benchmark problems: the shared record type.

Created by the synthetic-tasks engineer only because this file did not exist yet;
the benchmark loaders (GSM8K, MATH500, HumanEval, MBPP) belong here too.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Problem:
    """One evaluation or training problem.

    task_id: unique id ("synth-code/test/17", "gsm8k/42", "HumanEval/0").
    benchmark: the task family ("synth-math", "gsm8k", "humaneval", ...).
    prompt_text: the raw prompt given to the model (before any chat template).
    reference: the gold answer (final answer for math, canonical solution for code).
    entry_point: function name for code tasks, else None.
    extra: task-specific data (JSON-serialisable).
    """

    task_id: str
    benchmark: str
    prompt_text: str
    reference: str
    entry_point: str | None = None
    extra: dict = field(default_factory=dict)
