"""chain16's tasks (tasks/chain.py): chained answers, scored like GSM8K / HumanEval."""

import random

import pytest

from mrp_repro.config import load_profile
from mrp_repro.tasks import chain, synthetic


@pytest.mark.parametrize("task", chain.TASKS)
def test_splits_are_disjoint_prompts_padded_and_sampled_answers_correct(task):
    test = synthetic.generate(task, "test", 200, 1, 16)
    train = synthetic.generate(task, "train", 2000, 1, 16)
    assert not {p.extra["key"] for p in test} & {p.extra["key"] for p in train}
    assert len({p.extra["key"] for p in test}) == 200
    rng = random.Random(0)
    lengths = []
    for p in test:
        assert len(p.prompt_text) == chain.prompt_len(task, 16) and len(p.prompt_text) % 16 == 0
        a = synthetic.sample_answer(p, rng)
        assert set(a) <= set(synthetic.alphabet(chain.TASKS))
        r = chain.score(p, a + "<|eos|><|eos|>", execute=False)
        assert r["correct"] and r["valid_chain"], (p.prompt_text, a)
        lengths.append(len(a))
    assert sum(lengths) / len(lengths) >= 64  # issue 34: answers of at least 4 blocks of 16


def test_math_writes_the_units_column_and_carries_each_result():
    assert chain.math_step(37, 48) == "37+48: 7+8=15, so 85."
    assert chain.math_step(85, -27) == "85-27: 15-7=8, so 58."  # a borrow: the column's 1 written out
    assert chain.math_step(85, -23) == "85-23: 5-3=2, so 62."
    for p in synthetic.generate("chain-math", "test", 50, 1, 16):
        assert len(p.extra["terms"]) >= chain.MATH_N_TERMS[0]
        value = p.extra["start"]
        for t in p.extra["terms"]:
            value += t
            assert chain.MATH_VALUE[0] <= value <= chain.MATH_VALUE[1]  # two digits all along
        assert str(value) == p.reference
    a = chain.canonical_answer(p)
    assert {synthetic.sample_answer(p, random.Random(s)) for s in range(5)} == {a}  # one answer: no ties by design
    # a wrong carried value breaks the chain and (here) the final answer
    first = p.extra["start"] + p.extra["terms"][0]
    broken = a.replace(f"so {first}. {first}", f"so {first}. {first + 1}", 1)
    assert broken != a and chain.score(p, broken, execute=False)["valid_chain"] is False
    assert chain.score(p, a, execute=False)["correct"]
    assert not chain.score(p, a.rsplit("#### ", 1)[0] + "#### 1000", execute=False)["correct"]


def test_code_names_have_a_graded_majority():
    took_first = [0] * len(chain.NAME_MAJORITY)  # statement k took the first name its predecessors left unused
    rng, n = random.Random(0), 4000
    for _ in range(n):
        names = chain._names(len(chain.NAME_MAJORITY), rng)
        assert len(set(names)) == len(names)
        for k, name in enumerate(names):
            took_first[k] += name == next(x for x in chain.NAMES if x not in names[:k])
    for k, q in enumerate(chain.NAME_MAJORITY):
        assert abs(took_first[k] / n - q) < 0.03, (k, took_first[k] / n, q)
    assert chain.NAME_MAJORITY[0] > 0.9 and 0.5 < chain.NAME_MAJORITY[-1] < 0.6  # sure first, barely a majority last


def test_code_runs_in_the_sandbox_and_a_misspelled_name_fails():
    p = synthetic.generate("chain-code", "test", 3, 1, 16)[2]
    a = chain.canonical_answer(p)
    assert chain.score(p, a)["correct"]  # executed in the sandbox against the prompt's function
    body, last = a.rsplit(" return ", 1)
    # another defined name, one whose value differs on the check's inputs (in-process, on our own text)
    others = [body + " return " + n for n in chain.NAMES[: len(p.extra["statements"])] if n != last]
    wrong = next(w for w in others if not chain.score(p, w, execute=False)["correct"])
    assert not chain.score(p, wrong)["correct"]
    assert not chain.score(p, body + " return nosuch")["correct"]  # a name never defined
    assert not chain.score(p, "while True: pass")["correct"]


def test_true_function_follows_the_prompt():
    p = synthetic.generate("chain-code", "test", 1, 1, 16)[0]
    env = {"a": 2, "b": -3, "c": 5}
    for k, (x, op, y) in enumerate(p.extra["statements"], start=1):
        env[str(k)] = eval(f"{env[x]}{op}{env[y]}")  # noqa: S307 - our own integers
    assert chain.true_function(p, 2, -3, 5) == env[str(len(p.extra["statements"]))]


def test_alphabets_keep_tiny_unchanged_and_profile_uses_its_tasks():
    assert synthetic.alphabet() == " #+.0123456789:=Qabcdef"  # tiny's published tokenizer
    p = load_profile("chain16")
    assert set(synthetic.alphabet(p.data.tasks)) == set(chain.alphabet())
    with pytest.raises(ValueError, match="no generated task"):
        synthetic.alphabet(["gsm8k"])


def test_training_block_sizes_alternate_and_must_divide_block_size():
    from mrp_repro.config import ConfigError
    from mrp_repro.training.backbone import train_block_size

    p = load_profile("chain16")
    assert [train_block_size(p, s) for s in range(4)] == [4, 16, 4, 16]
    assert train_block_size(load_profile("tiny"), 7) == 8
    with pytest.raises(ConfigError, match="must divide block_size"):
        p.replace({"backbone_training.block_sizes": [6]})


def test_chain_generator_version_is_in_the_backbone_key_and_the_published_settings(monkeypatch):
    # a published chain16 backbone trained on other chain data must not stand in for this one (it did: the key
    # had the version, the published record did not)
    from mrp_repro import published, stages

    P = load_profile("chain16")
    key, settings = stages.backbone_key(P), published.backbone_settings(P)
    assert settings["chain_generator_version"] == chain.GENERATOR_VERSION
    monkeypatch.setattr(chain, "GENERATOR_VERSION", chain.GENERATOR_VERSION + 1)
    assert stages.backbone_key(P) != key
    assert published.settings_differences(settings, published.backbone_settings(P)) != []
    assert "chain_generator_version" not in published.backbone_settings(load_profile("tiny"))
