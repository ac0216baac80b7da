import random

import pytest

from mrp_repro.tasks import synthetic as S
from mrp_repro.tasks.benchmarks import Problem


@pytest.mark.parametrize("task", S.MULTISET_TASKS)
def test_deterministic_and_seed_dependent(task):
    a = S.generate(task, "test", 50, seed=1, block_size=8)
    b = S.generate(task, "test", 50, seed=1, block_size=8)
    c = S.generate(task, "test", 50, seed=2, block_size=8)
    assert a == b
    assert [p.prompt_text for p in a] != [p.prompt_text for p in c]
    assert all(isinstance(p, Problem) and p.benchmark == task for p in a)


@pytest.mark.parametrize("task", S.MULTISET_TASKS)
@pytest.mark.parametrize("block_size", [8, 16])
def test_splits_disjoint_and_layout(task, block_size):
    train = S.generate(task, "train", 5000, seed=0, block_size=block_size)
    test = S.generate(task, "test", 250, seed=0, block_size=block_size)
    assert not {p.prompt_text for p in train} & {p.prompt_text for p in test}
    assert len({p.prompt_text for p in test}) == 250  # test problems are distinct (code at block 8 has 295)
    assert all(S.split_of_key(S.problem_key(p)) == "test" for p in test)
    sp = S.spec(task, block_size)
    chars = set(S.alphabet())
    for p in test[:100]:
        assert len(p.prompt_text) == sp.prompt_len and sp.prompt_len % block_size == 0
        assert sp.n_min <= len(p.extra["items"]) <= sp.n_max
        assert set(p.prompt_text + S.canonical_answer(p)) <= chars


def test_exhausted_split_warns_and_repeats():
    # synth-code's val split at block 8 holds 143 distinct problems
    with pytest.warns(UserWarning, match="holds only 143 distinct problems"):
        val = S.generate("synth-code", "val", 200, seed=0, block_size=8)
    assert len(val) == 200 and len({p.prompt_text for p in val}) == 143
    assert all(S.split_of_key(S.problem_key(p)) == "val" for p in val)


@pytest.mark.parametrize("task", S.MULTISET_TASKS)
@pytest.mark.parametrize("block_size", [8, 16])
def test_sampled_and_canonical_answers_score_correct(task, block_size):
    rng = random.Random(0)
    for p in S.generate(task, "test", 100, seed=3, block_size=block_size):
        for ans in (S.canonical_answer(p), S.sample_answer(p, rng), S.sample_answer(p, rng)):
            r = S.score(p, ans)
            assert r["correct"] and r["valid_chain"], (p, ans, r)
            # trailing special tokens / newline are cut off
            assert S.score(p, ans + "<|eos|><|pad|>")["correct"]
        assert 0 < S.answer_ambiguity(p) <= 1


def test_sample_answer_is_random_order():
    p = next(q for q in S.generate("synth-code", "test", 50, 0, 16) if len(set(q.extra["items"])) >= 3)
    rng = random.Random(0)
    assert len({S.sample_answer(p, rng) for _ in range(30)}) > 3


def _code_problem(coefs: dict[str, int], block_size=8) -> Problem:
    d = {
        "key": "synth-code:" + "".join(f"{v}{coefs.get(v, 0)}" for v in S.CODE_VARIABLES),
        "coefs": {v: coefs.get(v, 0) for v in S.CODE_VARIABLES},
    }
    return S._code_problem(d, "test", 0, block_size)


def test_code_scoring_examples():
    p = _code_problem({"a": 1, "c": 1, "d": 1, "e": 3})
    assert p.prompt_text == "Q:a1b0c1d1e3f0.="
    assert S.score(p, "e+e+e+a+d+c") == {"correct": True, "valid_chain": True, "extracted": "e+e+e+a+d+c"}
    assert S.score(p, "c+e+a+e+d+e\nmore")["correct"]
    # collapsed: a term repeated too often
    assert not S.score(p, "e+e+e+e+d+c")["correct"]
    assert not S.score(p, "e+e+e+a+d")["correct"]
    assert not S.score(p, "e+e+e+a+d+c+")["correct"]  # syntax error
    assert not S.score(p, "")["correct"]
    # equivalent but not expanded: correct, not a valid chain
    r = S.score(p, "3*e+a+c+d")
    assert r["correct"] and not r["valid_chain"]
    assert S.code_equivalent(p, "(a+c)+d+e*3-0")
    assert not S.code_equivalent(p, "__import__('os')")


def test_math_scoring_examples():
    d = {"key": "synth-math:3+1255", "digits": "1255", "start": 3}
    p = S._math_problem(d, "test", 0, 8)
    assert p.prompt_text.startswith("Q:3+1255") and p.prompt_text.endswith("=")
    assert p.reference == "6"  # (3 + 13) % 10
    good = "5125    8916    #### 6"
    assert S.score(p, good) == {"correct": True, "valid_chain": True, "extracted": "6"}
    # digit order and running sums inconsistent
    r = S.score(p, "1255    8937    #### 6")
    assert r["correct"] and not r["valid_chain"]
    # collapsed digit list: sums of the wrong list, wrong final answer
    r = S.score(p, "5555    8383    #### 3")
    assert not r["correct"] and not r["valid_chain"] and r["extracted"] == "3"
    assert not S.score(p, "5125    8916")["correct"]
    assert S.canonical_answer(p) == "1255    4616    #### 6"


def test_ideal_model_collapses_only_at_low_tau():
    for task in S.MULTISET_TASKS:
        ps = S.generate(task, "test", 200, seed=0, block_size=16)
        rows = {r["tau"]: r for r in S.ideal_curve(ps, taus=(None, 0.9, 0.5, 0.3))}
        assert rows[None]["accuracy"] == 1.0 and rows[None]["tpf"] == 1.0
        assert rows[0.9]["accuracy"] > 0.95
        assert rows[0.5]["accuracy"] < 0.7 and rows[0.3]["accuracy"] < 0.3
        assert rows[0.3]["tpf"] > rows[0.9]["tpf"] > 1.0


def test_sandbox_agrees_with_fast_check():
    sandbox = pytest.importorskip("mrp_repro.tasks.sandbox")
    assert hasattr(sandbox, "run_program")
    ps = S.generate("synth-code", "test", 3, seed=5, block_size=8)
    rng = random.Random(1)
    cases = []
    for p in ps[:2]:
        good = S.sample_answer(p, rng)
        terms = good.split("+")
        bad = "+".join([terms[0]] * len(terms)) if len(set(terms)) > 1 else good + "+a"
        cases += [(p, good), (p, bad)]
    cases += [(ps[2], S.canonical_answer(ps[2]).replace("+", "*", 1)), (ps[2], "b+")]
    for p, out in cases:
        fast = S.score(p, out)
        slow = S.score(p, out, execute=True)
        assert fast == slow, (p.prompt_text, out, fast, slow)
    assert sum(S.score(p, o)["correct"] for p, o in cases) == 2
