"""Synthetic math and code tasks on which low-threshold dynamic decoding collapses.

Design ("a multiset, listed in any order"; see shared/notes/tiny-tasks.md): the
answer contains a list whose items may appear in any order, and the items'
counts are skewed per problem (Dirichlet(0.5) over the kinds).  A well-trained
model's confidence at every masked list position is then about m/n (share of
the most common remaining item), identical for all positions of the block.
Dynamic decoding with a threshold tau below m/n reveals all those positions at
once as the same item, which is invalid; one-token-per-step (static) decoding
stays exact.  Because m/n varies across problems, accuracy falls step by step
as tau drops, as in the paper's curves.

Families
--------
``synth-code``  (stand-in for HumanEval)
    prompt ``Q:a1b0c1d1e3f0.=``  (the coefficients of f(a, ..., f), one slot per variable)
    answer ``e+e+e+a+d+c``: the ``return`` expression of ``f`` as expanded
    terms, in any order.  Scored by functional equivalence: by default an exact
    symbolic check (the answer parsed as a polynomial, no execution); with
    ``execute=True`` by running ``def f(...): return <answer>`` against the true
    function on random inputs in :mod:`mrp_repro.tasks.sandbox`.

``synth-math``  (stand-in for GSM8K)
    prompt ``Q:3+1255....=``  (a start value s, then the multiset of digits 1-5)
    answer ``5125    8037    #### 7``: the digits in any order (one block), the
    running sums mod 10 of that list starting from s (next block), then the
    GSM8K-style final answer = the last running sum = (s + sum) mod 10.  A
    collapsed digit list gives other running sums and so (usually) another
    final answer.  Scored on the final answer with the GSM8K extraction; the
    whole chain's validity is reported separately.

Layout: each prompt is padded with ``.`` to a multiple of ``block_size``, so
the answer starts on a block boundary whether blocks are aligned to absolute
positions (SDAR) or to the start of generation.  Each math list is padded with
spaces to a multiple of ``block_size`` and fits in one block; code terms take
two characters (``x+``), so a block holds ``block_size // 2`` terms.

Splits are disjoint by construction: a problem's canonical key (content only,
independent of seed and block size) is hashed into train / val / test.
"""

from __future__ import annotations

import ast
import random
import re
import warnings
from collections import Counter
from dataclasses import dataclass

from . import chain
from .benchmarks import Problem
from .splits import split_of_key

MULTISET_TASKS = ("synth-math", "synth-code")
#: every generated task: the multiset families here, and the chain families of tasks/chain.py (delegated to it)
TASKS = MULTISET_TASKS + chain.TASKS
# Bumped whenever generated problems change, so cached backbones trained on older data are not reused.
# v3: code over 6 variables, all in play (v2: 5 of 10 drawn per problem, prompt of 24 characters, on which the
# tiny backbone reached 47.5% static accuracy; v3: 88.5% in make reproduce, 95.5% in a 1-thread run).
GENERATOR_VERSION = 3
SPLITS = ("train", "val", "test")

CODE_VARIABLES = "abcdef"  # every problem draws Dirichlet(0.5) weights over all of them
CODE_MAX_COEF = 9  # one digit per coefficient in the prompt
MATH_DIGITS = "12345"
DIRICHLET_ALPHA = 0.5
PAD = "."

_STOP = re.compile(r"\n|<\|")  # end of an answer: newline or a special token
_HASH_RE = re.compile(r"####\s*(\S+)")


@dataclass(frozen=True)
class Spec:
    """List-length range and prompt length of one family at one block size."""

    n_min: int
    n_max: int
    prompt_len: int


def _round_up(x: int, b: int) -> int:
    return -(-x // b) * b


def spec(task: str, block_size: int) -> Spec:
    """Item-count range and prompt length for ``task`` at ``block_size``.

    code: 3..min(16, b) terms (block 8: 3-8 terms, 1-2 blocks; block 16:
    3-16 terms, 1-2 blocks; 3-10 at block 8 left the tiny model at 55% static
    accuracy, its errors miscounted terms across three blocks), prompt
    ``Q:`` + 6 coefficient slots + ``=`` (16 at block 8).  math: 3..min(b, 12)
    digits, one block per list, so answers take 3 blocks (digits, running
    sums, final line).
    """
    _check_task(task)
    if block_size < 4:
        raise ValueError(f"block_size must be >= 4, got {block_size}")
    if task == "synth-code":
        n_max = min(16, max(4, block_size))
        core = 2 + 2 * len(CODE_VARIABLES) + 1
    else:
        n_max = min(block_size, 12)
        core = 2 + 2 + n_max + 1
    return Spec(n_min=3, n_max=n_max, prompt_len=_round_up(core, block_size))


def _check_task(task: str) -> None:
    if task not in MULTISET_TASKS:
        raise ValueError(f"unknown synthetic task {task!r}; expected one of {TASKS}")


# ----------------------------------------------------------------------------- keys / splits


def problem_key(problem: Problem) -> str:
    return problem.extra["key"]


# ----------------------------------------------------------------------------- sampling


def _dirichlet_counts(rng: random.Random, kinds: list[str], n: int) -> Counter:
    weights = [rng.gammavariate(DIRICHLET_ALPHA, 1.0) for _ in kinds]
    if sum(weights) <= 0:  # astronomically unlikely underflow
        weights = [1.0] * len(kinds)
    return Counter(rng.choices(kinds, weights=weights, k=n))


def _draw_code(rng: random.Random, sp: Spec) -> dict:
    while True:
        n = rng.randint(sp.n_min, sp.n_max)
        counts = _dirichlet_counts(rng, list(CODE_VARIABLES), n)
        if max(counts.values()) <= CODE_MAX_COEF:
            break
    coefs = {v: counts.get(v, 0) for v in CODE_VARIABLES}
    key = "synth-code:" + "".join(f"{v}{c}" for v, c in coefs.items())
    return {"key": key, "coefs": coefs}


def _draw_math(rng: random.Random, sp: Spec) -> dict:
    n = rng.randint(sp.n_min, sp.n_max)
    counts = _dirichlet_counts(rng, list(MATH_DIGITS), n)
    digits = "".join(sorted(counts.elements()))
    start = rng.randrange(10)
    key = f"synth-math:{start}+{digits}"
    return {"key": key, "digits": digits, "start": start}


def _code_problem(d: dict, split: str, idx: int, block_size: int) -> Problem:
    sp = spec("synth-code", block_size)
    coefs = d["coefs"]
    body = "".join(f"{v}{c}" for v, c in coefs.items())
    prompt = "Q:" + body
    prompt = prompt + PAD * (sp.prompt_len - len(prompt) - 1) + "="
    items = sorted(Counter(coefs).elements())  # variable letters, with multiplicity
    # canonical order: most common first, then alphabetical
    canon = sorted(items, key=lambda v: (-coefs[v], v))
    return Problem(
        task_id=f"synth-code/{split}/{idx}",
        benchmark="synth-code",
        prompt_text=prompt,
        reference=_check_code(d["key"], coefs),
        entry_point="f",
        extra={
            "canonical": "+".join(canon),
            "key": d["key"],
            "block_size": block_size,
            "variables": CODE_VARIABLES,
            "coefs": dict(coefs),
            "items": items,
        },
    )


def _math_problem(d: dict, split: str, idx: int, block_size: int) -> Problem:
    sp = spec("synth-math", block_size)
    digits, start = d["digits"], d["start"]
    prompt = f"Q:{start}+{digits}"
    prompt = prompt + PAD * (sp.prompt_len - len(prompt) - 1) + "="
    final = (start + sum(int(c) for c in digits)) % 10
    return Problem(
        task_id=f"synth-math/{split}/{idx}",
        benchmark="synth-math",
        prompt_text=prompt,
        reference=str(final),
        entry_point=None,
        extra={
            "key": d["key"],
            "block_size": block_size,
            "digits": digits,
            "start": start,
            "items": list(digits),
            "final_answer": str(final),
        },
    )


def generate(task: str, split: str, n: int, seed: int, block_size: int) -> list[Problem]:
    """``n`` problems of ``task`` from ``split``; deterministic in (task, split, seed, block_size).

    Train and test never share a problem: a problem belongs to the split its
    canonical key hashes to (:func:`split_of_key`).  The val and test splits
    hold distinct problems (as long as the space allows); train may repeat a
    problem (training answers are re-sampled in random order anyway).
    """
    if task in chain.TASKS:
        return chain.generate(task, split, n, seed, block_size)
    _check_task(task)
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
    sp = spec(task, block_size)
    rng = random.Random(f"{task}|{split}|{seed}|{block_size}")
    draw = _draw_code if task == "synth-code" else _draw_math
    make = _code_problem if task == "synth-code" else _math_problem
    unique = split != "train"
    seen: set[str] = set()
    out: list[Problem] = []
    attempts = 0
    max_attempts = 200 * max(n, 1) + 10_000
    while len(out) < n:
        attempts += 1
        if attempts > max_attempts:
            if not unique:
                raise RuntimeError(f"could not draw {n} problems of {task}/{split}")  # pragma: no cover
            warnings.warn(
                f"{task}/{split} at block {block_size} holds only {len(out)} distinct problems; "
                f"the other {n - len(out)} repeat them",
                stacklevel=2,
            )
            unique, attempts = False, 0  # space exhausted: allow repeats rather than fail
        d = draw(rng, sp)
        if split_of_key(d["key"]) != split:
            continue
        if unique and d["key"] in seen:
            continue
        seen.add(d["key"])
        out.append(make(d, split, len(out), block_size))
    return out


# ----------------------------------------------------------------------------- answers


def _math_answer(problem: Problem, order: list[str]) -> str:
    b = problem.extra["block_size"]
    s = problem.extra["start"]
    sums = []
    acc = s
    for c in order:
        acc = (acc + int(c)) % 10
        sums.append(str(acc))
    digits_txt = "".join(order)
    sums_txt = "".join(sums)
    return (
        digits_txt.ljust(_round_up(len(digits_txt), b))
        + sums_txt.ljust(_round_up(len(sums_txt), b))
        + f"#### {acc}"
    )


def _render(problem: Problem, order: list[str]) -> str:
    if problem.benchmark == "synth-code":
        return "+".join(order)
    return _math_answer(problem, order)


def canonical_answer(problem: Problem) -> str:
    """The answer with the list in canonical order (code: most common term first; math: sorted)."""
    if problem.benchmark in chain.TASKS:
        return chain.canonical_answer(problem)
    if problem.benchmark == "synth-code":
        return problem.extra["canonical"]
    return _math_answer(problem, list(problem.extra["digits"]))


def sample_answer(problem: Problem, rng: random.Random) -> str:
    """A uniformly random valid answer (the list in a uniformly random order); chain tasks: chain.sample_answer."""
    if problem.benchmark in chain.TASKS:
        return chain.sample_answer(problem, rng)
    order = list(problem.extra["items"])
    rng.shuffle(order)
    return _render(problem, order)


def answer_ambiguity(problem: Problem) -> float:
    """m/n: share of the most common list item, the ideal model's confidence at a list position."""
    items = problem.extra["items"]
    return max(Counter(items).values()) / len(items)


def alphabet(tasks=MULTISET_TASKS) -> str:
    """Every character that the prompts and answers of ``tasks`` use (the tiny tokenizer's characters)."""
    chars = set()
    if set(tasks) & set(MULTISET_TASKS):
        chars |= set("Q:=+" + PAD + " #" + "0123456789" + CODE_VARIABLES + MATH_DIGITS)
    if set(tasks) & set(chain.TASKS):
        chars |= set(chain.alphabet())
    if not chars:
        raise ValueError(f"no generated task among {list(tasks)}; expected some of {TASKS}")
    return "".join(sorted(chars))


# ----------------------------------------------------------------------------- scoring


def _truncate(output_text: str) -> str:
    """The answer part of a model output: up to the first newline or special token."""
    m = _STOP.search(output_text)
    return (output_text[: m.start()] if m else output_text).strip()


class _NotPolynomial(Exception):
    pass


_MAX_POW = 16


def _poly(node: ast.AST, variables: str) -> dict[tuple, int]:
    """Exact polynomial (monomial -> integer coefficient) of a +,-,*,** expression."""
    if isinstance(node, ast.Expression):
        return _poly(node.body, variables)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return {(): node.value} if node.value else {}
    if isinstance(node, ast.Name) and node.id in variables:
        return {(node.id,): 1}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        p = _poly(node.operand, variables)
        return p if isinstance(node.op, ast.UAdd) else {k: -v for k, v in p.items()}
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Pow):
            e = node.right
            if not (isinstance(e, ast.Constant) and type(e.value) is int and 0 <= e.value <= _MAX_POW):
                raise _NotPolynomial
            base = _poly(node.left, variables)
            out: dict[tuple, int] = {(): 1}
            for _ in range(e.value):
                out = _mul(out, base)
            return out
        left, right = _poly(node.left, variables), _poly(node.right, variables)
        if isinstance(node.op, ast.Add):
            return _add(left, right, 1)
        if isinstance(node.op, ast.Sub):
            return _add(left, right, -1)
        if isinstance(node.op, ast.Mult):
            return _mul(left, right)
    raise _NotPolynomial


def _add(p: dict, q: dict, sign: int) -> dict:
    out = dict(p)
    for k, v in q.items():
        out[k] = out.get(k, 0) + sign * v
        if out[k] == 0:
            del out[k]
    return out


def _mul(p: dict, q: dict) -> dict:
    out: dict[tuple, int] = {}
    for k1, v1 in p.items():
        for k2, v2 in q.items():
            k = tuple(sorted(k1 + k2))
            out[k] = out.get(k, 0) + v1 * v2
            if out[k] == 0:
                del out[k]
    return out


def code_equivalent(problem: Problem, expr: str) -> bool:
    """Exact check that ``expr`` equals f's true return value for all inputs (no execution).

    Accepts Python integer polynomials over the variables (+, -, *, ** with a
    small constant exponent, parentheses); anything else counts as wrong.
    """
    if not expr or len(expr) > 2000:
        return False
    try:
        tree = ast.parse(expr, mode="eval")
        p = _poly(tree, problem.extra["variables"])
    except (SyntaxError, ValueError, RecursionError, _NotPolynomial):
        return False
    target = {(v,): c for v, c in problem.extra["coefs"].items() if c}
    return p == target


def _check_code(key: str, coefs: dict[str, int], n_tests: int = 5) -> str:
    """HumanEval-style test code: ``def check(candidate)`` asserting f on random integer inputs."""
    rng = random.Random(f"{key}|check")
    lines = ["def check(candidate):"]
    for _ in range(n_tests):
        xs = [rng.randint(-1000, 1000) for _ in coefs]
        want = sum(c * x for c, x in zip(coefs.values(), xs, strict=True))
        lines.append(f"    assert candidate({', '.join(map(str, xs))}) == {want}")
    return "\n".join(lines) + "\n"


def code_program(problem: Problem, expr: str) -> str:
    """Python source that exits 0 iff ``def f(...): return <expr>`` passes the problem's check."""
    variables = problem.extra["variables"]
    head = f"def {problem.entry_point}({', '.join(variables)}):\n    return {expr}\n\n"
    return head + problem.reference + f"\n\ncheck({problem.entry_point})\n"


def _extract_final(text: str) -> str | None:
    try:
        from .extract import extract_math_answer
    except ImportError:  # the shared extractor is not there yet
        m = _HASH_RE.findall(text)
        return m[-1] if m else None
    return extract_math_answer(text)


def _same_number(a: str | None, b: str) -> bool:
    if a is None:
        return False
    a = a.strip().rstrip(".")
    if a == b:
        return True
    try:
        return float(a.replace(",", "")) == float(b)
    except ValueError:
        return False


def _math_chain_valid(problem: Problem, text: str) -> bool:
    head, sep, tail = text.partition("####")
    if not sep:
        return False
    chain = re.sub(r"\s", "", head)
    n = len(problem.extra["digits"])
    if len(chain) != 2 * n or not chain.isdigit():
        return False
    digits, sums = chain[:n], chain[n:]
    if sorted(digits) != sorted(problem.extra["digits"]):
        return False
    acc = problem.extra["start"]
    for c, s in zip(digits, sums, strict=True):
        acc = (acc + int(c)) % 10
        if int(s) != acc:
            return False
    return tail.strip() == str(acc)


def score(problem: Problem, output_text: str, execute: bool = False) -> dict:
    """Score a model output (the text generated after the prompt).

    Returns ``{"correct", "valid_chain", "extracted"}``:

    - code: ``extracted`` is the expression (output up to the first newline or
      special token); ``correct`` = functionally equal to f (exact symbolic
      check, or sandboxed execution with ``execute=True``); ``valid_chain`` =
      exactly the expected multiset of expanded terms joined by ``+``.
    - math: ``extracted`` is the final answer (GSM8K extraction of ``#### X``);
      ``correct`` = it equals the reference; ``valid_chain`` = the digit list is
      a permutation of the prompt's digits, the running sums are right for that
      order, the final answer is the last sum.
    """
    if problem.benchmark in chain.TASKS:
        return chain.score(problem, output_text)
    text = _truncate(output_text)
    if problem.benchmark == "synth-code":
        expr = text or None
        terms = text.split("+") if text else []
        valid = sorted(terms) == sorted(problem.extra["items"])
        if execute:
            from .sandbox import run_program_once

            correct = (
                bool(expr) and run_program_once(code_program(problem, text), timeout_s=5.0).status == "passed"
            )
        else:
            correct = code_equivalent(problem, text)
        return {"correct": bool(correct), "valid_chain": bool(valid and correct), "extracted": expr}
    if problem.benchmark == "synth-math":
        extracted = _extract_final(text)
        correct = _same_number(extracted, problem.reference)
        return {"correct": correct, "valid_chain": _math_chain_valid(problem, text), "extracted": extracted}
    raise ValueError(f"not a synthetic problem: {problem.benchmark!r}")


# ----------------------------------------------------------------------------- ideal model


def _list_positions(problem: Problem) -> list[int]:
    """Answer-text offsets of the list items (the only uncertain positions)."""
    n = len(problem.extra["items"])
    if problem.benchmark == "synth-code":
        return [2 * i for i in range(n)]
    return list(range(n))


def ideal_dynamic_decode(problem: Problem, tau: float | None) -> dict:
    """Simulate an exact-probability model under threshold decoding.

    At each step of a block the ideal confidence of every masked list position
    is m/r (most common remaining item over items remaining); all other
    positions are certain and revealed at the block's first step.  ``tau=None``
    is static decoding (one list item per step).  Dynamic: reveal every masked
    list position of the block with confidence > tau, all as the current mode
    item (ties: smallest item); if none qualifies, reveal one.  Returns
    ``{"correct", "valid_chain", "forwards", "tokens"}`` (tokens = answer + EOS
    rounded up to whole blocks; forwards = denoising steps).
    """
    b = problem.extra["block_size"]
    items = problem.extra["items"]
    pos = _list_positions(problem)
    answer_len = len(canonical_answer(problem)) + 1  # + EOS
    n_blocks = -(-answer_len // b)
    remaining = Counter(items)
    own: list[str] = []
    valid = True
    forwards = 0
    for blk in range(n_blocks):
        masked = [p for p in pos if blk * b <= p < (blk + 1) * b]
        steps = 0
        while masked:
            steps += 1
            r = sum(remaining.values())
            mode, m = min(remaining.items(), key=lambda kv: (-kv[1], kv[0]))
            k = len(masked) if (tau is not None and m / r > tau) else 1
            if k > m:
                valid = False
            own.extend([mode] * k)
            remaining[mode] -= k
            if remaining[mode] <= 0:
                del remaining[mode]
            masked = masked[k:]
            if not valid:
                break
        forwards += max(steps, 1)
        if not valid:
            break
    if problem.benchmark == "synth-code":
        correct = valid
    else:
        own_digits = own + ["0"] * (len(items) - len(own))
        final = (problem.extra["start"] + sum(int(c) for c in own_digits)) % 10
        correct = str(final) == problem.reference
    if not valid:  # the rest of the answer is certain given the list: one step per block
        forwards += n_blocks - 1 - blk
    if tau is None:  # static decoding reveals exactly one token per step
        forwards = n_blocks * b
    return {"correct": correct, "valid_chain": valid, "forwards": forwards, "tokens": n_blocks * b}


def ideal_curve(problems: list[Problem], taus=(None, 0.9, 0.7, 0.5, 0.3)) -> list[dict]:
    """Ideal-model accuracy, chain validity and tokens per forward at each tau (None = static)."""
    rows = []
    for tau in taus:
        res = [ideal_dynamic_decode(p, tau) for p in problems]
        rows.append(
            {
                "tau": tau,
                "accuracy": sum(r["correct"] for r in res) / len(res),
                "valid_chain": sum(r["valid_chain"] for r in res) / len(res),
                "tpf": sum(r["tokens"] for r in res) / sum(r["forwards"] for r in res),
            }
        )
    return rows
