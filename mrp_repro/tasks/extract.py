"""Answer extraction and scoring for math and code outputs.

Math (GSM8K, MATH500, synthetic math)
-------------------------------------
``extract_math_answer(text)`` looks, in order, for

1. the LAST ``\\boxed{...}`` or ``\\fbox{...}`` with balanced braces (so
   ``\\boxed{\\frac{1}{2}}`` yields ``\\frac{1}{2}``); ``\\boxed 5`` (no braces)
   is accepted too.  A box whose braces never close (output cut off) is
   skipped in favour of an earlier, complete one;
2. the last "answer is X" (``The answer is 42.`` -> ``42``);
3. the last "#### X" (GSM8K's own format);

and returns ``None`` when none is present (``benchmark=None``, the synthetic
tasks).  With ``benchmark=`` a benchmark's own rule applies when no box is
present, following OpenCompass (``opencompass/datasets/gsm8k.py`` and
``math.py`` at commit 96263b1a):

- ``"gsm8k"``: OpenCompass ``gsm8k_postprocess`` cuts the text at
  ``"Question:"`` and returns the LAST number (regex ``-?\\d+\\.\\d+|-?\\d+``),
  ``"NULL"`` if none.  We do the same, except that thousands separators are
  removed first (``1,234`` -> ``1234``; OpenCompass would return ``234``).
- ``"math500"``: OpenCompass ``math_postprocess_v2`` returns the last box if
  any; else, splitting the text at every ``.``, the FIRST piece that contains
  "final answer" or "answer is", passed through ``normalize_final_answer``
  (drops spaces and unit words, keeps the text after "answer is", the last
  ``$...$``); else ``normalize_final_answer`` of the text before the first
  ``.``.  We follow it literally, quirks included (``... answer is 0.5`` is cut
  at the decimal point, as there).  ``math_equal(pred, gold)`` first
compares normalised strings, then asks ``math_verify`` (``parse`` + ``verify``)
whether the two are mathematically equal; both sides are wrapped in
``\\boxed{}`` (then ``$...$``) so that plain numbers, ``1,000``, ``\\$18``,
``18.00``, ``\\frac12`` and ``0.5`` all parse.  Any exception or timeout counts
as "not equal".  ``math_verify`` times out with SIGALRM, which only works in the
main thread; elsewhere it runs without a timeout.

Code (HumanEval, MBPP, synthetic code)
--------------------------------------
``extract_code(text, prompt=None, entry_point=None)`` returns the FIRST fenced
code block tagged ``python``/``py``/``python3`` or untagged (blocks in other
languages are skipped).  An opening fence that never closes (generation hit the
length limit) yields the rest of the text.  With no fenced block it returns
``None``: the prompts ask for a fenced block, and guessing code out of prose
would score outputs that did not follow the format (OpenCompass does the same
for these prompt variants).  When ``prompt`` is given (HumanEval) and the block
does not define ``entry_point`` (taken from the prompt's last ``def`` when not
given), the block is taken to be the function body: it is indented if needed
and appended to the prompt.  When the block does define the function, the
prompt's import lines are put in front (models often drop
``from typing import List``).

``score_code(output_text, problem)`` runs the code and the tests
(``build_tests``) in :mod:`mrp_repro.tasks.sandbox`: the code as module
``candidate`` (not ``__main__``), then the tests; correct only when the tests
ran to completion (an early ``sys.exit(0)`` or ``unittest.main()`` fails).
``problem.reference`` holds the test code: HumanEval's ``check`` function (the
call ``check(entry_point)`` is appended) or MBPP's imports + asserts.  The
result names the sandbox that scored it (``"sandbox"``: ``"bwrap"`` or
``"guard-only"``).
"""

from __future__ import annotations

import re
import threading
from typing import Any

from mrp_repro.tasks.sandbox import run_program_once, sandbox_kind

__all__ = [
    "extract_math_answer",
    "math_equal",
    "score_math",
    "extract_code",
    "build_tests",
    "build_test_program",
    "score_code",
]

# --------------------------------------------------------------------------- math

_BOX_RE = re.compile(r"\\(?:boxed|fbox)\b")


def _braced(text: str, start: int) -> str | None:
    """Content of the balanced ``{...}`` opening at ``text[start]``, else None."""
    depth = 0
    for i in range(start, len(text)):
        c = text[i]
        if c == "{" and text[i - 1 : i] != "\\":
            depth += 1
        elif c == "}" and text[i - 1 : i] != "\\":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i]
    return None  # never closed


def _last_boxed(text: str) -> str | None:
    for m in reversed(list(_BOX_RE.finditer(text))):
        j = m.end()
        while j < len(text) and text[j] == " ":
            j += 1
        if j < len(text) and text[j] == "{":
            content = _braced(text, j)
        else:  # "\boxed 5": a single token after a space
            tok = re.match(r"\s*([^\s$]+)", text[m.end() :])
            content = tok.group(1) if tok and m.end() < len(text) and text[m.end()] == " " else None
        if content is not None and content.strip():
            return content.strip()
    return None


_ANSWER_IS_RE = re.compile(r"answer\s+is\s*:?\s*(.+)", re.IGNORECASE)
_HASHES_RE = re.compile(r"####\s*(.+)")


def _clean_tail(ans: str) -> str | None:
    ans = ans.strip()
    ans = re.sub(r"^\*+|\*+$", "", ans).strip()  # markdown bold
    # Cut a trailing sentence end ("42." / "42. So ...") but keep decimals ("0.5").
    ans = re.split(r"\.(?:\s|$)", ans, maxsplit=1)[0].strip()
    ans = ans.strip("$ ").rstrip(".").strip()
    ans = re.sub(r"^\*+|\*+$", "", ans).strip()
    return ans or None


MATH_BENCHMARKS = (None, "gsm8k", "math500")
_NUMBER_RE = re.compile(r"-?\d+\.\d+|-?\d+")
_THOUSANDS_RE = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_OC_SUBSTITUTIONS = (
    ("an ", ""),
    ("a ", ""),
    (".$", "$"),
    ("\\$", ""),
    ("\\ ", ""),
    (" ", ""),
    ("mbox", "text"),
    (",\\text{and}", ","),
    ("\\text{and}", ","),
    ("\\text{m}", "\\text{}"),
    ("\\le", "<"),
)
_OC_REMOVED = (
    "square",
    "ways",
    "integers",
    "dollars",
    "mph",
    "inches",
    "ft",
    "hours",
    "km",
    "units",
    "\\ldots",
    "sue",
    "points",
    "feet",
    "minutes",
    "digits",
    "cents",
    "degrees",
    "cm",
    "gm",
    "pounds",
    "meters",
    "meals",
    "edges",
    "students",
    "childrentickets",
    "multiples",
    "\\text{s}",
    "\\text{.}",
    "\\text{\ns}",
    "\\text{}^2",
    "\\text{}^3",
    "\\text{\n}",
    "\\text{}",
    r"\mathrm{th}",
    r"^\circ",
    r"^{\circ}",
    r"\;",
    r",\!",
    "{,}",
    '"',
    "\\dots",
    "\n",
    "\r",
    "\f",
)


def _oc_normalize_final_answer(ans: str) -> str:
    """OpenCompass ``normalize_final_answer`` (opencompass/datasets/math.py), step by step."""
    for before, after in _OC_SUBSTITUTIONS:
        ans = ans.replace(before, after)
    for expr in _OC_REMOVED:
        ans = ans.replace(expr, "")
    ans = re.sub(r"(\\text\{)\((.*?)\)(\})", "\\2", ans)
    ans = re.sub(r"(\\text\{)(.*?)(\})", "\\2", ans)
    ans = re.sub(r"(\\textbf\{)(.*?)(\})", "\\2", ans)
    ans = re.sub(r"(\\overline\{)(.*?)(\})", "\\2", ans)
    ans = re.sub(r"(\\boxed\{)(.*)(\})", "\\2", ans)
    for pattern in (r"finalansweris(.*)", r"answer?is:?(.*)", r"oxed\{(.*?)\}", r"\$(.*?)\$"):
        hits = re.findall(pattern, ans)
        if hits:
            ans = hits[-1]
    ans = ans.strip()
    if "rac" in ans and "\\frac" not in ans:
        ans = ans.replace("rac", "\\frac")
    ans = re.sub(r"(frac)([^{])(.)", "frac{\\2}{\\3}", ans)
    ans = re.sub(r"(sqrt)([^{])", "sqrt{\\2}", ans)
    ans = ans.replace("$", "")
    if ans.replace(",", "").isdigit():
        ans = ans.replace(",", "")
    return ans


def _gsm8k_fallback(text: str) -> str | None:
    numbers = _NUMBER_RE.findall(_THOUSANDS_RE.sub("", text.split("Question:")[0]))
    return numbers[-1] if numbers else None


def _math500_fallback(text: str) -> str | None:
    pieces = text.split(".")
    chosen = next((p for p in pieces if re.search("final answer|answer is", p.lower())), pieces[0])
    ans = _oc_normalize_final_answer(chosen)
    return ans or None


def extract_math_answer(text: str, benchmark: str | None = None) -> str | None:
    """The final answer of a math solution; ``benchmark`` picks the no-box rule (module docstring)."""
    if benchmark not in MATH_BENCHMARKS:
        raise ValueError(f"extract_math_answer: unknown benchmark {benchmark!r}; valid: gsm8k, math500 or None")
    if not text:
        return None
    boxed = _last_boxed(text)
    if boxed is not None:
        return boxed
    if benchmark == "gsm8k":
        return _gsm8k_fallback(text)
    if benchmark == "math500":
        return _math500_fallback(text)
    hits = _ANSWER_IS_RE.findall(text)
    if hits:
        ans = _clean_tail(hits[-1])
        if ans:
            return ans
    hits = _HASHES_RE.findall(text)
    if hits:
        return _clean_tail(hits[-1])
    return None


def _normalise(s: str) -> str:
    s = s.strip().strip("$").strip()
    s = s.replace("\\$", "").replace("\\!", "").replace("\\,", "").replace(" ", "")
    s = re.sub(r"\\text\{(.*?)\}", r"\1", s)
    s = s.replace("\\left", "").replace("\\right", "").replace("dfrac", "frac").replace("tfrac", "frac")
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s):
        s = s.replace(",", "")
    return s.rstrip(".")


def _wrappings(s: str) -> list[str]:
    s = s.strip()
    if "\\boxed" in s or "\\fbox" in s:
        return [s]
    inner = s.strip("$").strip()
    return [f"\\boxed{{{inner}}}", f"${inner}$", inner]


def math_equal(pred: str | None, gold: str | None) -> bool:
    """True when ``pred`` and ``gold`` are the same answer; never raises."""
    if pred is None or gold is None:
        return False
    pred, gold = str(pred), str(gold)
    try:
        if _normalise(pred) == _normalise(gold):
            return True
    except Exception:
        pass
    try:
        from math_verify import parse, verify
    except ImportError:  # pragma: no cover - math-verify is a pinned dependency
        return False
    # SIGALRM-based timeouts only work in the main thread.
    t = 5 if threading.current_thread() is threading.main_thread() else None
    try:
        gold_parsed = next((p for w in _wrappings(gold) if (p := parse(w, parsing_timeout=t))), None)
        if not gold_parsed:
            return False
        for w in _wrappings(pred):
            pred_parsed = parse(w, parsing_timeout=t)
            if pred_parsed and verify(gold_parsed, pred_parsed, timeout_seconds=t):
                return True
    except BaseException as e:  # math_verify raises TimeoutException etc.
        if isinstance(e, KeyboardInterrupt):
            raise
        return False
    return False


def score_math(output_text: str, gold: str, benchmark: str | None = None) -> dict[str, Any]:
    """``{"correct": bool, "extracted": str | None}`` for one math output.

    Pass ``benchmark="gsm8k"`` / ``"math500"`` for that benchmark's no-box rule
    (``measure.runs.score_problem`` passes ``benchmark=problem.benchmark``).
    """
    extracted = extract_math_answer(output_text, benchmark=benchmark)
    return {"correct": extracted is not None and math_equal(extracted, gold), "extracted": extracted}


# --------------------------------------------------------------------------- code

_FENCE_RE = re.compile(r"^[ \t]*```[ \t]*([\w+.-]*)[^\n]*\n", re.MULTILINE)
_CLOSE_RE = re.compile(r"^[ \t]*```[ \t]*$", re.MULTILINE)
_PY_TAGS = {"", "python", "py", "python3", "py3", "Python"}


def _first_python_block(text: str) -> str | None:
    pos = 0
    while True:
        m = _FENCE_RE.search(text, pos)
        if m is None:
            return None
        close = _CLOSE_RE.search(text, m.end())
        body = text[m.end() : close.start()] if close else text[m.end() :]
        if m.group(1) in _PY_TAGS:
            return body
        if close is None:
            return None
        pos = close.end()


def _entry_point_from_prompt(prompt: str) -> str | None:
    names = re.findall(r"^def\s+([A-Za-z_]\w*)\s*\(", prompt, re.MULTILINE)
    return names[-1] if names else None


def extract_code(text: str, prompt: str | None = None, entry_point: str | None = None) -> str | None:
    """The program in a model output, or None; see the module docstring."""
    if not text:
        return None
    code = _first_python_block(text)
    if code is None:
        return None
    code = code.rstrip() + "\n"
    if prompt is None:
        return code
    entry_point = entry_point or _entry_point_from_prompt(prompt)
    if entry_point and re.search(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE):
        imports = [ln for ln in prompt.splitlines() if re.match(r"(import|from)\s+\w", ln)]
        return ("\n".join(imports) + "\n\n" + code) if imports else code
    # Only the body: make sure it is indented under the prompt's signature.
    lines = code.splitlines()
    first = next((ln for ln in lines if ln.strip()), "")
    if first and not first[0].isspace():
        code = "\n".join(("    " + ln) if ln.strip() else ln for ln in lines) + "\n"
    return prompt.rstrip("\n") + "\n" + code


def build_tests(problem: Any) -> str:
    """The test code run after the candidate: ``problem.reference`` (+ ``check(entry_point)``)."""
    tests = problem.reference.rstrip() + "\n"
    if re.search(r"^def\s+check\s*\(", tests, re.MULTILINE) and problem.entry_point:
        tests += f"\n\ncheck({problem.entry_point})\n"
    return tests


def build_test_program(code: str, problem: Any) -> str:
    """One source with ``code`` then the tests (for reading; scoring runs them separately)."""
    return code.rstrip() + "\n\n\n" + build_tests(problem)


def score_code(
    output_text: str, problem: Any, timeout_s: float = 10.0, memory_mb: int = 1024, sandbox: str | None = None
) -> dict[str, Any]:
    """``{"correct", "extracted", "status", "sandbox"}`` for one code output.

    ``status`` is the sandbox status, or ``"no_code"`` when no fenced block
    was found (then nothing is run).  ``sandbox`` overrides ``$MRP_REPRO_SANDBOX``.
    """
    prompt = None
    if problem.benchmark == "humaneval":
        prompt = problem.extra.get("prompt", problem.prompt_text)
    extracted = extract_code(output_text, prompt=prompt, entry_point=problem.entry_point if prompt else None)
    if extracted is None:
        return {"correct": False, "extracted": None, "status": "no_code", "sandbox": sandbox_kind(sandbox)}
    result = run_program_once(
        extracted, tests=build_tests(problem), timeout_s=timeout_s, memory_mb=memory_mb, sandbox=sandbox
    )
    return {
        "correct": result.status == "passed",
        "extracted": extracted,
        "status": result.status,
        "sandbox": result.sandbox,
    }
