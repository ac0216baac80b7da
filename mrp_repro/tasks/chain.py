"""Synthetic tasks whose answer tokens depend on each other: a carried number, a name defined and then used.

The stand-in of issue 34 (profile ``chain16``). Unlike the multiset tasks of :mod:`synthetic` (list slots that tie
by design), every answer here is a chain: each step's tokens are fixed by what came before.

``chain-math``  (stand-in for GSM8K; scored on the final answer, GSM8K's ``#### N`` extraction)
    prompt ``Q:37,+48,-25,+16=`` (a two-digit start, then 3-4 signed two-digit terms, every running value two
    digits, padded with ``.`` to whole blocks)
    answer ``37+48: 7+8=15, so 85. 85-25: 5-5=0, so 60. 60+16: 0+6=6, so 76. #### 76``: each term is applied in the
    prompt's order, its units column written out (``15-7=8`` for a borrow), its tens "in the head", and each
    result is carried into the next step. The result after ``so`` is easy once its column is revealed and a
    two-digit sum in the head without it: the uncertainty that makes SDAR's fast decoding lossy, a token revealed
    before the tokens it is computed from being only as good as the model's mental arithmetic. (Version 2's
    uncertainty was in the order of the terms and the step words, ambiguities a calibrated model does not reveal
    above tau: its fast decoding lost nothing, docs/regime-chain16.md.)

``chain-code``  (stand-in for HumanEval; executed in :mod:`sandbox` against the true function)
    prompt ``Q:a+b;1*c;a-2;3+1;2-b=`` (5-6 statements over the arguments a, b, c and earlier results: digit k
    names statement k's value)
    answer ``def f(a,b,c):\\n tot=a+b\\n acc=tot*c\\n val=a-acc\\n ... return res``: statement k is named the
    first unused name of NAMES with probability NAME_MAJORITY[k] (0.95 falling to 0.55: a majority, sure for the
    first statements and barely for the last), another unused one otherwise, and every later use must spell that
    name; commutative operands are written in either order (prompt order 0.7).

Splits are disjoint by construction (a problem's key, its prompt body, hashes into train / val / test). Bump
GENERATOR_VERSION when the generated problems change, so a cached backbone trained on other data is not reused.
"""

from __future__ import annotations

import itertools
import random
import re
import warnings

from .benchmarks import Problem
from .splits import SPLITS, split_of_key

TASKS = ("chain-math", "chain-code")
# 3: math in the prompt's order with its units column written, code names with a graded majority, 5-6 statements
# (2: one-digit terms applied smallest first, noisily; names from a flat pool: math lost nothing to fast decoding,
# code saturated at 100% and lost half to two tokens a forward, docs/regime-chain16.md)
GENERATOR_VERSION = 3
PAD = "."

# chain-math
MATH_VALUE = (10, 99)  # the start and every running value: two digits, so every step has two columns
MATH_TERM = (11, 89)  # a term's magnitude: two digits
MATH_N_TERMS = (3, 4)
#: None (version 3): the terms in the prompt's order. A tuple (a design knob, off in version 3): step k applies the
#: prompt's next unused term with probability MATH_ORDER_MAJORITY[k] (the last entry for later steps), another
#: unused one otherwise, so which term comes next is a choice with a graded majority; every order then keeps the
#: running values two-digit (_draw_math checks them all). scripts/regime_pilot.py sets it to try a design.
MATH_ORDER_MAJORITY: tuple[float, ...] | None = None

# chain-code
CODE_ARGS = "abc"
CODE_N_STATEMENTS = (5, 6)
CODE_OPS = "+-*"
CODE_MAX_MULS = 2  # keeps values small enough to print
NAMES = ("tot", "acc", "val", "res", "tmp", "out", "cur", "num")  # in order of preference
NAME_MAJORITY = (0.95, 0.85, 0.75, 0.65, 0.55, 0.55)  # P(statement k takes the first unused name)
SWAP_COMMUTATIVE = 0.3  # a commutative statement is written in the other operand order with this probability

_STOP = re.compile(r"<\|")  # an answer ends at the first special token (EOS)


def _round_up(x: int, b: int) -> int:
    return -(-x // b) * b


def prompt_len(task: str, block_size: int) -> int:
    """Prompt length at ``block_size``: the longest prompt body plus ``=``, rounded up to whole blocks."""
    _check_task(task)
    if task == "chain-math":
        core = 2 + 2 + MATH_N_TERMS[1] * (2 + 2) + 1  # Q: + start + ",+xy" per term + =
    else:
        core = 2 + CODE_N_STATEMENTS[1] * 4 - 1 + 1  # Q: + "a+b;" per statement (no trailing ;) + =
    return _round_up(core, block_size)


def _check_task(task: str) -> None:
    if task not in TASKS:
        raise ValueError(f"unknown chain task {task!r}; expected one of {TASKS}")


# ----------------------------------------------------------------------------- drawing problems


def _draw_math(rng: random.Random) -> dict:
    while True:
        start = rng.randint(*MATH_VALUE)
        terms, value = [], start
        for _ in range(rng.randint(*MATH_N_TERMS)):
            t = rng.choice((1, -1)) * rng.randint(*MATH_TERM)
            if not MATH_VALUE[0] <= value + t <= MATH_VALUE[1]:
                break
            terms.append(t)
            value += t
        else:
            if MATH_ORDER_MAJORITY is not None and not all(
                    all(MATH_VALUE[0] <= start + sum(p[: i + 1]) <= MATH_VALUE[1] for i in range(len(p)))
                    for p in itertools.permutations(terms)):  # fmt: skip
                continue  # an order a sampled answer may take would leave two digits
            body = f"{start}," + ",".join(f"{t:+d}" for t in terms)
            return {"key": f"chain-math:{body}", "body": body, "start": start, "terms": terms}


def _draw_code(rng: random.Random) -> dict:
    n = rng.randint(*CODE_N_STATEMENTS)
    stmts: list[tuple[str, str, str]] = []
    muls = 0
    for k in range(1, n + 1):
        refs = [str(j) for j in range(1, k)]
        pool = list(CODE_ARGS) + refs
        op = rng.choice(CODE_OPS if muls < CODE_MAX_MULS else "+-")
        muls += op == "*"
        if k == 1:
            left, right = rng.sample(CODE_ARGS, 2)
        else:
            dep = str(k - 1) if rng.random() < 0.6 else rng.choice(refs)  # a chain: each uses an earlier value
            other = rng.choice([x for x in pool if x != dep])
            left, right = (dep, other) if rng.random() < 0.5 else (other, dep)
        stmts.append((left, op, right))
    body = ";".join(f"{a}{op}{b}" for a, op, b in stmts)
    return {"key": f"chain-code:{body}", "body": body, "statements": stmts}


def _problem(task: str, d: dict, split: str, idx: int, block_size: int) -> Problem:
    prompt = "Q:" + d["body"]
    prompt = prompt + PAD * (prompt_len(task, block_size) - len(prompt) - 1) + "="
    extra = {"key": d["key"], "block_size": block_size}
    if task == "chain-math":
        final = d["start"] + sum(d["terms"])
        extra.update(start=d["start"], terms=list(d["terms"]), final_answer=str(final))
        return Problem(task_id=f"chain-math/{split}/{idx}", benchmark="chain-math", prompt_text=prompt,
                       reference=str(final), entry_point=None, extra=extra)  # fmt: skip
    extra.update(statements=[list(s) for s in d["statements"]], variables=CODE_ARGS)
    return Problem(task_id=f"chain-code/{split}/{idx}", benchmark="chain-code", prompt_text=prompt,
                   reference=_check_code(d["key"], d["statements"]), entry_point="f", extra=extra)  # fmt: skip


def generate(task: str, split: str, n: int, seed: int, block_size: int) -> list[Problem]:
    """``n`` problems of ``task`` from ``split``; deterministic in (task, split, seed, block_size).

    val and test hold distinct problems; train may repeat one (its answers are re-sampled anyway)."""
    _check_task(task)
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
    rng = random.Random(f"{task}|{split}|{seed}|{block_size}|v{GENERATOR_VERSION}")
    draw = _draw_math if task == "chain-math" else _draw_code
    unique = split != "train"
    seen: set[str] = set()
    out: list[Problem] = []
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 200 * max(n, 1) + 10_000:  # pragma: no cover - the spaces hold millions of problems
            warnings.warn(f"{task}/{split}: only {len(out)} distinct problems; the rest repeat", stacklevel=2)
            unique, attempts = False, 0
        d = draw(rng)
        if split_of_key(d["key"]) != split or (unique and d["key"] in seen):
            continue
        seen.add(d["key"])
        out.append(_problem(task, d, split, len(out), block_size))
    return out


# ----------------------------------------------------------------------------- answers


def math_step(value: int, term: int) -> str:
    """One step of a chain-math answer, its units column written out, its tens done "in the head":
    ``37+48: 7+8=15, so 85.``, ``85-27: 15-7=8, so 58.`` (a borrow), ``85-23: 5-3=2, so 62.``"""
    a1, b1, new = value % 10, abs(term) % 10, value + term
    if term > 0:
        col = f"{a1}+{b1}={a1 + b1}"
    else:
        col = f"1{a1}-{b1}={10 + a1 - b1}" if a1 < b1 else f"{a1}-{b1}={a1 - b1}"
    return f"{value}{'+' if term > 0 else '-'}{abs(term)}: {col}, so {new}."


def _math_answer(problem: Problem, order: list[int] | None = None) -> str:
    value, parts = problem.extra["start"], []
    for t in problem.extra["terms"] if order is None else order:
        parts.append(math_step(value, t))
        value += t
    parts.append(f"#### {value}")
    return " ".join(parts)


def _math_order(terms: list[int], rng: random.Random) -> list[int]:
    """The order of a sampled answer under MATH_ORDER_MAJORITY (module constants)."""
    left, order = list(terms), []
    while left:
        q = MATH_ORDER_MAJORITY[min(len(order), len(MATH_ORDER_MAJORITY) - 1)]
        t = left[0] if len(left) == 1 or rng.random() < q else rng.choice(left[1:])
        left.remove(t)
        order.append(t)
    return order


def _code_answer(problem: Problem, names: list[str], swaps: list[bool]) -> str:
    def operand(x: str) -> str:
        return names[int(x) - 1] if x.isdigit() else x

    lines = [f"def f({','.join(CODE_ARGS)}):"]
    for (left, op, right), name, swap in zip(problem.extra["statements"], names, swaps, strict=True):
        a, b = operand(left), operand(right)
        if swap and op in "+*":
            a, b = b, a
        lines.append(f" {name}={a}{op}{b}")
    lines.append(f" return {names[len(problem.extra['statements']) - 1]}")
    return "\n".join(lines)


def _names(n: int, rng: random.Random) -> list[str]:
    """Statement k takes the first unused name with probability NAME_MAJORITY[k], another unused one otherwise."""
    unused, names = list(NAMES), []
    for k in range(n):
        name = unused[0] if rng.random() < NAME_MAJORITY[k] else rng.choice(unused[1:])
        names.append(name)
        unused.remove(name)
    return names


def sample_answer(problem: Problem, rng: random.Random) -> str:
    """A random valid answer, drawn from the training distribution the module docstring describes (chain-math has
    one)."""
    if problem.benchmark == "chain-math":
        if MATH_ORDER_MAJORITY is None:
            return _math_answer(problem)
        return _math_answer(problem, _math_order(problem.extra["terms"], rng))
    n = len(problem.extra["statements"])
    return _code_answer(problem, _names(n, rng), [rng.random() < SWAP_COMMUTATIVE for _ in range(n)])


def canonical_answer(problem: Problem) -> str:
    """The most likely answer: chain-math's only one; chain-code's names in NAMES order, no swaps."""
    if problem.benchmark == "chain-math":
        return _math_answer(problem)
    n = len(problem.extra["statements"])
    return _code_answer(problem, list(NAMES[:n]), [False] * n)


def alphabet() -> str:
    """Every character the prompts and answers of both tasks use."""
    chars = set("Q:=,;.+-*# ()\n" + PAD + "0123456789" + CODE_ARGS + "".join(NAMES))
    chars |= set("so" + "def return")
    return "".join(sorted(chars))


# ----------------------------------------------------------------------------- scoring


def _truncate(output_text: str) -> str:
    m = _STOP.search(output_text)
    return (output_text[: m.start()] if m else output_text).rstrip()


def true_function(problem: Problem, a: int, b: int, c: int) -> int:
    """chain-code's f evaluated directly from the prompt's statements (no generated code involved)."""
    env = {"a": a, "b": b, "c": c}
    value = 0
    for k, (left, op, right) in enumerate(problem.extra["statements"], start=1):
        x, y = env[left], env[right]
        value = x + y if op == "+" else x - y if op == "-" else x * y
        env[str(k)] = value
    return value


def _check_code(key: str, statements, n_tests: int = 6) -> str:
    """HumanEval-style test code: ``def check(candidate)`` asserting f on random integer inputs."""
    probe = Problem(task_id="", benchmark="chain-code", prompt_text="", reference="", entry_point="f",
                    extra={"statements": [list(s) for s in statements]})  # fmt: skip
    rng = random.Random(f"{key}|check")
    lines = ["def check(candidate):"]
    for _ in range(n_tests):
        xs = [rng.randint(-20, 20) for _ in CODE_ARGS]
        lines.append(f"    assert candidate({', '.join(map(str, xs))}) == {true_function(probe, *xs)}")
    return "\n".join(lines) + "\n"


def code_program(problem: Problem, text: str) -> str:
    """Python source that exits 0 iff the generated ``def f`` passes the problem's check."""
    return text + "\n\n" + problem.reference + f"\n\ncheck({problem.entry_point})\n"


def _math_chain_valid(problem: Problem, text: str) -> bool:
    """Every step as math_step writes it (its column right, each carried value the previous result, each of the
    prompt's terms once, in the prompt's order unless MATH_ORDER_MAJORITY lets the order vary) and the final answer
    the last result."""
    if MATH_ORDER_MAJORITY is None:
        return text == _math_answer(problem)
    return any(text == _math_answer(problem, list(p)) for p in itertools.permutations(problem.extra["terms"]))


def score(problem: Problem, output_text: str, execute: bool = True) -> dict:
    """``{"correct", "valid_chain", "extracted"}`` for one model output (the text after the prompt).

    chain-math: ``extracted`` = the final answer (GSM8K extraction), ``correct`` = it equals the reference,
    ``valid_chain`` = every step right. chain-code: ``extracted`` = the program, ``correct`` = it passes the
    check in the sandbox (``execute=True``, the default; ``False`` compares f on the check's inputs in-process
    only for trusted text in tests), ``valid_chain`` = correct and written in the answer format."""
    text = _truncate(output_text)
    if problem.benchmark == "chain-math":
        from .extract import score_math

        r = score_math(text, problem.reference, benchmark="gsm8k")  # GSM8K's extraction and comparison
        return {"correct": bool(r["correct"]), "valid_chain": _math_chain_valid(problem, text),
                "extracted": r["extracted"]}  # fmt: skip
    if problem.benchmark == "chain-code":
        if not text.startswith("def f("):
            return {"correct": False, "valid_chain": False, "extracted": text or None}
        if execute:
            from .sandbox import run_program_once

            correct = run_program_once(code_program(problem, text), timeout_s=5.0).status == "passed"
        else:
            correct = _trusted_check(problem, text)
        lines = text.split("\n")
        shaped = len(lines) == len(problem.extra["statements"]) + 2 and lines[-1].startswith(" return ")
        return {"correct": bool(correct), "valid_chain": bool(correct and shaped), "extracted": text}
    raise ValueError(f"not a chain problem: {problem.benchmark!r}")


def _trusted_check(problem: Problem, text: str) -> bool:
    """In-process check for answers this module wrote itself (tests): never call it on model output."""
    env: dict = {}
    try:
        exec(compile(text, "<answer>", "exec"), env)  # noqa: S102 - trusted text only
        rng = random.Random(problem.extra["key"])
        for _ in range(6):
            xs = [rng.randint(-20, 20) for _ in CODE_ARGS]
            if env["f"](*xs) != true_function(problem, *xs):
                return False
        return True
    except Exception:  # noqa: BLE001
        return False
