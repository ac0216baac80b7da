"""Benchmark loaders, prompts and end-to-end scoring of canonical solutions."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mrp_repro.errors import UserError
from mrp_repro.tasks import benchmarks
from mrp_repro.tasks.benchmarks import (
    BenchmarkDataUnavailable,
    build_messages,
    format_prompt,
    load_benchmark,
)
from mrp_repro.tasks.extract import score_code, score_math

# CI keeps the benchmark files beside the repository: <parent>/shared/data.
DATA = Path(os.environ.get("MRP_REPRO_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")
needs_data = pytest.mark.skipif(
    not (DATA / "gsm8k" / "test.jsonl").is_file(),
    reason=f"benchmark data not found at {DATA} (set MRP_REPRO_DATA to a folder like ../shared/data)",
)


@needs_data
@pytest.mark.parametrize("name, count", [("gsm8k", 1319), ("math500", 500), ("humaneval", 164), ("mbpp", 257)])
def test_counts(name, count):
    problems = load_benchmark(name, data_dir=DATA)
    assert len(problems) == count
    assert len({p.task_id for p in problems}) == count
    assert all(p.benchmark == name and p.prompt_text and p.reference for p in problems)
    assert len(load_benchmark(name, data_dir=DATA, limit=3)) == 3


@needs_data
def test_fields():
    g = load_benchmark("gsm8k", data_dir=DATA, limit=1)[0]
    assert g.task_id == "gsm8k/0" and g.reference == "18" and g.entry_point is None
    m = load_benchmark("math500", data_dir=DATA, limit=1)[0]
    assert m.reference == "\\left( 3, \\frac{\\pi}{2} \\right)" and m.extra["level"] in range(1, 6)
    mb = load_benchmark("mbpp", data_dir=DATA)
    ids = [int(p.task_id.split("/")[1]) for p in mb]
    assert mb[0].task_id == "mbpp/11" and min(ids) >= 11 and max(ids) <= 510
    assert mb[0].entry_point == "remove_Occ" and mb[0].reference.startswith("assert remove_Occ(")
    # test_imports come first in the test code
    with_imports = next(p for p in mb if p.extra["test_imports"])
    assert with_imports.reference.startswith(with_imports.extra["test_imports"][0])
    # every MBPP entry point is defined by the reference solution
    assert all(f"def {p.entry_point}(" in p.extra["code"].replace(" (", "(") for p in mb)


def test_env_variable_is_used(monkeypatch, tmp_path):
    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "test.jsonl").write_text(
        '{"question": "1+1?", "answer": "1+1=2\\n#### 2"}\n', encoding="utf-8"
    )
    monkeypatch.setenv("MRP_REPRO_DATA", str(tmp_path))
    with pytest.raises(UserError, match="MRP_REPRO_DATA_UNRECORDED=1"):  # not the recorded GSM8K test set
        load_benchmark("gsm8k")
    monkeypatch.setenv("MRP_REPRO_DATA_UNRECORDED", "1")  # a file of one's own, read as it is
    [p] = load_benchmark("gsm8k")
    assert (p.prompt_text, p.reference) == ("1+1?", "2")


def test_missing_source_error_names_both_ways(monkeypatch, tmp_path):
    def offline(*args, **kwargs):
        raise ConnectionError("hub unreachable (offline)")

    monkeypatch.setattr(benchmarks, "_from_hub", offline)
    monkeypatch.delenv("MRP_REPRO_DATA", raising=False)
    for name in ("gsm8k", "math500", "mbpp"):
        with pytest.raises(BenchmarkDataUnavailable) as e:
            load_benchmark(name, data_dir=tmp_path)
        msg = str(e.value)
        assert "MRP_REPRO_DATA" in msg and "data_dir" in msg and benchmarks._LOCAL[(name, "test")] in msg
        assert "hub" in msg and "online" in msg


def test_unknown_benchmark_lists_valid_names():
    with pytest.raises(ValueError, match="gsm8k, math500, humaneval, mbpp"):
        load_benchmark("arc")


@needs_data
def test_prompts():
    g = load_benchmark("gsm8k", data_dir=DATA, limit=1)[0]
    [msg] = build_messages(g)
    assert msg["role"] == "user"
    assert msg["content"] == g.prompt_text + "\nPlease reason step by step, and put your final answer within \\boxed{}."
    h = load_benchmark("humaneval", limit=1)[0]
    content = build_messages(h)[0]["content"]
    assert content.startswith("Complete the following python code:\n" + h.prompt_text) and "```python" in content
    mb = load_benchmark("mbpp", data_dir=DATA, limit=1)[0]
    content = build_messages(mb)[0]["content"]
    assert content.startswith(
        "You are an expert Python programmer, and here is your task: "
        + mb.prompt_text
        + " Your code should pass these tests:\n\n"
        + mb.extra["test_list"][0]
        + "\n"
    )
    assert "```python" in content


def test_format_prompt_uses_chat_template():
    class FakeTokenizer:  # records the call; a ChatML rendering like Qwen3's
        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            assert tokenize is False and add_generation_prompt is True
            body = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
            return body + "<|im_start|>assistant\n"

    p = benchmarks.Problem("gsm8k/0", "gsm8k", "What is 2+2?", "4")
    text = format_prompt(p, FakeTokenizer())
    assert text.startswith("<|im_start|>user\nWhat is 2+2?\nPlease reason step by step")
    assert text.endswith("<|im_start|>assistant\n")


@needs_data
def test_gold_solutions_score_correct():
    g = load_benchmark("gsm8k", data_dir=DATA, limit=1)[0]
    assert score_math(g.extra["solution"], g.reference)["correct"]  # "#### 18" fallback
    m = load_benchmark("math500", data_dir=DATA, limit=5)
    assert all(score_math(p.extra["solution"], p.reference)["correct"] for p in m)


@needs_data
def test_canonical_code_solutions_pass_in_sandbox():
    h = load_benchmark("humaneval", limit=1)[0]
    out = "```python\n" + h.extra["canonical_solution"] + "\n```"  # body only: prompt is prepended
    r = score_code(out, h)
    assert r == {"correct": True, "extracted": r["extracted"], "status": "passed", "sandbox": "bwrap"}
    wrong = "```python\n" + h.prompt_text + "    return False\n```"
    assert not score_code(wrong, h)["correct"]
    mb = load_benchmark("mbpp", data_dir=DATA, limit=1)[0]
    r = score_code("```python\n" + mb.extra["code"] + "\n```", mb)
    assert r["correct"] and r["status"] == "passed"


# ------------------------------------------------------------------ recorded files (issue 29, finding 8)


def _copy(rel, tmp_path, cut=None):
    """DATA/<rel> copied to tmp_path/data/<rel>, its bytes passed through `cut` if given."""
    src, dst = DATA / rel, tmp_path / "data" / rel
    dst.parent.mkdir(parents=True, exist_ok=True)
    data = src.read_bytes()
    dst.write_bytes(data if cut is None else cut(data))
    return tmp_path / "data"


@needs_data
def test_recorded_counts_and_hashes_match_the_shared_files():
    for rel, (count, sha) in benchmarks.RECORDED.items():
        assert benchmarks._sha256(DATA / rel) == sha, rel
        assert len(benchmarks._parse_local(DATA / rel)) == count, rel


@needs_data
def test_truncated_at_a_line_boundary_is_refused_and_both_advices_recover(tmp_path, monkeypatch):
    """100 of GSM8K's 1319 lines loaded silently before; now one line naming the file, both counts and the fixes."""
    monkeypatch.delenv("MRP_REPRO_DATA_UNRECORDED", raising=False)
    root = _copy("gsm8k/test.jsonl", tmp_path, cut=lambda b: b"".join(b.splitlines(True)[:100]))
    with pytest.raises(UserError) as e:
        load_benchmark("gsm8k", data_dir=root)
    msg = str(e.value)
    assert "\n" not in msg and str(root / "gsm8k" / "test.jsonl") in msg, msg
    assert "100 records" in msg and "1319 records" in msg and "MRP_REPRO_DATA_UNRECORDED=1" in msg, msg
    monkeypatch.setenv("MRP_REPRO_DATA_UNRECORDED", "1")  # advice 2: use this file as it is
    assert len(load_benchmark("gsm8k", data_dir=root)) == 100
    monkeypatch.delenv("MRP_REPRO_DATA_UNRECORDED")
    _copy("gsm8k/test.jsonl", tmp_path)  # advice 1: replace it with the original
    assert len(load_benchmark("gsm8k", data_dir=root)) == 1319


@needs_data
@pytest.mark.parametrize("name,rel,where", [("gsm8k", "gsm8k/test.jsonl", "line 101"),
                                            ("mbpp", "mbpp/sanitized-mbpp.json", "line 1 column")])  # fmt: skip
def test_cut_inside_a_record_names_the_file_and_line(tmp_path, monkeypatch, name, rel, where):
    """A JSONDecodeError without the file before."""
    monkeypatch.delenv("MRP_REPRO_DATA_UNRECORDED", raising=False)
    lines = (DATA / rel).read_bytes().splitlines(True)
    cut = (lambda b: b"".join(lines[:100]) + lines[100][:40]) if rel.endswith("l") else (lambda b: b[:5000])
    root = _copy(rel, tmp_path, cut=cut)
    for unrecorded in ("0", "1"):  # damaged either way
        monkeypatch.setenv("MRP_REPRO_DATA_UNRECORDED", unrecorded)
        with pytest.raises(UserError) as e:
            load_benchmark(name, data_dir=root)
        msg = str(e.value)
        assert "\n" not in msg and str(root / rel) in msg and where in msg and "not valid JSON" in msg, msg
