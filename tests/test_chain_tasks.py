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


def test_math_order_is_uncertain_and_carried():
    p = synthetic.generate("chain-math", "test", 1, 1, 16)[0]
    answers = {synthetic.sample_answer(p, random.Random(s)) for s in range(50)}
    assert len(answers) > 1  # genuine variation in order and words
    a = chain.canonical_answer(p)
    # a wrong carried value breaks the chain and (here) the final answer
    first = p.extra["start"] + sorted(p.extra["terms"], key=abs)[0]
    broken = a.replace(f"={first}.", f"={first + 1}.", 1)
    assert chain.score(p, broken, execute=False)["valid_chain"] is False
    assert chain.score(p, a, execute=False)["correct"]
    assert not chain.score(p, a.rsplit("#### ", 1)[0] + "#### 1000", execute=False)["correct"]


def test_code_runs_in_the_sandbox_and_a_misspelled_name_fails():
    p = synthetic.generate("chain-code", "test", 3, 1, 16)[2]
    a = chain.canonical_answer(p)
    assert chain.score(p, a)["correct"]  # executed in the sandbox against the prompt's function
    body, last = a.rsplit(" return ", 1)
    wrong = body + " return " + ("tot" if last != "tot" else "acc")  # another defined name: a wrong value
    assert wrong != a
    assert not chain.score(p, wrong)["correct"]
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
