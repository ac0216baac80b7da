"""Answer extraction and scoring on realistic model outputs."""

from __future__ import annotations

import pytest

from mrp_repro.tasks.benchmarks import Problem
from mrp_repro.tasks.extract import (
    build_test_program,
    extract_code,
    extract_math_answer,
    math_equal,
    score_code,
    score_math,
)

# ------------------------------------------------------------------ math extraction

GSM8K_OUT = (
    "Janet's ducks lay 16 eggs per day. She eats 3 and bakes with 4, so 16 - 3 - 4 = 9 eggs "
    "are left. She sells them at $2 each: 9 * 2 = 18.\n\nSo she makes \\boxed{18} dollars."
)
MATH_NESTED = (
    "We convert to polar coordinates: r = \\sqrt{0^2 + 3^2} = 3 and \\theta = \\frac{\\pi}{2}.\n"
    "Therefore the answer is $\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}$."
)


@pytest.mark.parametrize(
    "text, expected",
    [
        (GSM8K_OUT, "18"),
        ("The probability is \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}"),
        (MATH_NESTED, "\\left( 3, \\frac{\\pi}{2} \\right)"),
        # multiple boxes: the last one is the final answer
        ("First try: \\boxed{12}. Wait, I made an error. Correct: \\boxed{14}", "14"),
        ("\\fbox{7}", "7"),
        ("so $x = \\boxed 5$", "5"),
        ("Set: \\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
        # a box cut off by the length limit: fall back to the earlier complete one
        ("\\boxed{3} ... hmm so \\boxed{\\frac{1", "3"),
        ("Adding these up, the answer is 42.", "42"),
        ("Therefore, the final answer is: $0.5$. Done.", "0.5"),
        ("The answer is **1,234**", "1,234"),
        ("She pays 1000 + 234 = 1234 dollars.\n#### 1,234", "1,234"),
        ("I am not sure how to solve this problem.", None),
        ("", None),
    ],
)
def test_extract_math_answer(text, expected):
    assert extract_math_answer(text) == expected


@pytest.mark.parametrize(
    "pred, gold",
    [
        ("18", "18"),
        ("18.00", "18"),
        ("\\$18", "18"),
        ("$18$", "18"),
        ("1,234", "1234"),
        ("0.5", "\\frac{1}{2}"),
        ("\\frac12", "0.5"),
        ("\\dfrac{1}{2}", "\\frac{1}{2}"),
        ("(3, \\pi/2)", "\\left( 3, \\frac{\\pi}{2} \\right)"),
        ("x = 5", "5"),
        ("\\text{Monday}", "\\text{Monday}"),
    ],
)
def test_math_equal_equivalent_forms(pred, gold):
    assert math_equal(pred, gold)


@pytest.mark.parametrize(
    "pred, gold",
    [
        ("17", "18"),
        ("0.25", "\\frac{1}{2}"),
        (None, "18"),
        ("", "18"),
        ("\\frac{", "18"),  # unparseable -> False, never raises
    ],
)
def test_math_equal_rejects(pred, gold):
    assert not math_equal(pred, gold)


def test_score_math():
    assert score_math(GSM8K_OUT, "18") == {"correct": True, "extracted": "18"}
    assert score_math("So the answer is 17.", "18") == {"correct": False, "extracted": "17"}
    assert score_math("No idea.", "18") == {"correct": False, "extracted": None}
    assert score_math(MATH_NESTED, "\\left( 3, \\frac{\\pi}{2} \\right)")["correct"]


# ------------------------------------------------------------------ code extraction

ADD_PROMPT = 'def add(a: int, b: int) -> int:\n    """Return a + b.\n    >>> add(1, 2)\n    3\n    """\n'
HE_PROBLEM = Problem(
    "HumanEval/x",
    "humaneval",
    ADD_PROMPT,
    "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\n",
    "add",
    {"prompt": ADD_PROMPT},
)
MBPP_PROBLEM = Problem(
    "mbpp/x",
    "mbpp",
    "Write a function to square a number.",
    "import math\nassert square(3) == 9\nassert square(-2) == 4\n",
    "square",
    {"test_list": ["assert square(3) == 9", "assert square(-2) == 4"], "test_imports": ["import math"]},
)


def test_extract_code_python_block_with_text_around():
    text = "Sure! Here is the code:\n```python\ndef f(x):\n    return x\n```\nThis returns x.\n```python\nother\n```"
    assert extract_code(text) == "def f(x):\n    return x\n"


def test_extract_code_bare_fence_and_other_languages_skipped():
    assert extract_code("```\nprint(1)\n```") == "print(1)\n"
    text = "Run it with:\n```bash\npython f.py\n```\nCode:\n```py\nprint(2)\n```"
    assert extract_code(text) == "print(2)\n"


def test_extract_code_absent_and_unterminated():
    assert extract_code("def f(x):\n    return x") is None  # no fence: not accepted
    assert extract_code("") is None
    # generation cut off inside the block: the rest of the text is the code
    assert extract_code("```python\ndef f():\n    return 1\n") == "def f():\n    return 1\n"


def test_extract_code_humaneval_body_only_gets_prompt():
    indented = extract_code("```python\n    return a + b\n```", prompt=ADD_PROMPT)
    assert indented.startswith(ADD_PROMPT) and indented.endswith("    return a + b\n")
    # an unindented body is indented under the signature
    flat = extract_code("```python\nreturn a + b\n```", prompt=ADD_PROMPT, entry_point="add")
    assert flat.endswith("\n    return a + b\n")
    # a full function is kept as is (plus the prompt's imports)
    full = extract_code(
        "```python\ndef add(a, b):\n    return a + b\n```",
        prompt="from typing import List\n\n\n" + ADD_PROMPT,
    )
    assert full == "from typing import List\n\ndef add(a, b):\n    return a + b\n"


def test_build_test_program_appends_check_call():
    prog = build_test_program("def add(a, b):\n    return a + b\n", HE_PROBLEM)
    assert prog.rstrip().endswith("check(add)")
    assert "check(" not in build_test_program("def square(x): return x*x", MBPP_PROBLEM).split("assert")[-1]


def test_score_code_humaneval_body_only_passes():
    r = score_code("Here you go:\n```python\n    return a + b\n```", HE_PROBLEM)
    assert r["correct"] and r["status"] == "passed"


def test_score_code_humaneval_wrong_fails():
    r = score_code("```python\ndef add(a, b):\n    return a - b\n```", HE_PROBLEM)
    assert not r["correct"] and r["status"] == "failed"


def test_score_code_mbpp_pass_and_fail():
    good = score_code("```python\ndef square(x):\n    return x * x\n```\nThat squares x.", MBPP_PROBLEM)
    assert good == {"correct": True, "extracted": "def square(x):\n    return x * x\n", "status": "passed"}
    bad = score_code("```python\ndef square(x):\n    return 2 * x\n```", MBPP_PROBLEM)
    assert not bad["correct"] and bad["status"] == "failed"


def test_score_code_no_block_and_timeout():
    assert score_code("def square(x): return x*x", MBPP_PROBLEM) == {
        "correct": False,
        "extracted": None,
        "status": "no_code",
    }
    r = score_code("```python\ndef square(x):\n    while True: pass\n```", MBPP_PROBLEM, timeout_s=0.5)
    assert r["status"] == "timeout" and not r["correct"]
