"""report.regime_pilot: a chain-data design knob set from the command line, read on a fine-tuned checkpoint."""

import random

import pytest

from mrp_repro.report import regime_pilot
from mrp_repro.tasks import chain, synthetic


def test_settings_parse_and_refuse():
    assert regime_pilot.parse_setting("MATH_ORDER_MAJORITY=0.9,0.5") == ("MATH_ORDER_MAJORITY", (0.9, 0.5))
    assert regime_pilot.parse_setting("NAME_MAJORITY=0.9,") == ("NAME_MAJORITY", (0.9,))
    assert regime_pilot.parse_setting("SWAP_COMMUTATIVE=0.5") == ("SWAP_COMMUTATIVE", 0.5)
    assert regime_pilot.parse_setting("MATH_N_TERMS=3,4") == ("MATH_N_TERMS", (3, 4))
    assert regime_pilot.parse_setting("MATH_ORDER_MAJORITY=none") == ("MATH_ORDER_MAJORITY", None)
    for bad in ("NOSUCH=1", "NAME_MAJORITY", "NAME_MAJORITY=abc", "NAME_MAJORITY="):
        with pytest.raises(ValueError, match="--set"):
            regime_pilot.parse_setting(bad)


def test_the_order_knob_gives_a_graded_choice_of_valid_chains(monkeypatch):
    monkeypatch.setattr(chain, "MATH_ORDER_MAJORITY", (0.8, 0.5))
    problems = synthetic.generate("chain-math", "test", 40, 1, 16)
    rng, first, n = random.Random(0), 0, 0
    for p in problems:
        for _ in range(25):
            a = synthetic.sample_answer(p, rng)
            r = chain.score(p, a, execute=False)
            assert r["correct"] and r["valid_chain"], a  # every order keeps two digits and the same final answer
            first += a.startswith(chain.math_step(p.extra["start"], p.extra["terms"][0]))
            n += 1
    assert abs(first / n - 0.8) < 0.05
    wrong = chain.canonical_answer(problems[0]).replace("so ", "so 1", 1)
    assert not chain.score(problems[0], wrong, execute=False)["valid_chain"]


def test_apply_settings_returns_what_it_replaced(monkeypatch):
    monkeypatch.setattr(chain, "NAME_MAJORITY", chain.NAME_MAJORITY)  # restored after the test
    old = regime_pilot.apply_settings([("NAME_MAJORITY", (0.9, 0.6))])
    assert chain.NAME_MAJORITY == (0.9, 0.6) and old["NAME_MAJORITY"] == (0.95, 0.85, 0.75, 0.65, 0.55, 0.55)


@pytest.mark.slow
def test_a_pilot_runs_end_to_end_on_a_random_checkpoint(tmp_path, monkeypatch):
    from mrp_repro import checkpoint, stages
    from mrp_repro.config import load_profile

    monkeypatch.setattr(chain, "MATH_ORDER_MAJORITY", chain.MATH_ORDER_MAJORITY)
    prof = tmp_path / "pilot.yaml"  # chain16 with few training problems: building 2 x 200000 takes a minute
    prof.write_text("extends: chain16\nname: chain16\ndata:\n  n_train: 300\n")
    p = load_profile(str(prof))
    checkpoint.save_backbone(stages.random_backbone(p).model, tmp_path / "ckpt")
    regime_pilot.main(["--profile", str(prof), "--from", str(tmp_path / "ckpt"), "--set",
                       "MATH_ORDER_MAJORITY=0.9,0.5", "--steps", "2",
                       "--n-prompts", "2", "--threads", "1", "--out", str(tmp_path / "out"), "--no-progress"])
    text = (tmp_path / "out" / "regime.md").read_text()
    assert "| chain16 | chain-math | static(1) accuracy (%) |" in text and "A pilot" in text
    assert (tmp_path / "out" / "model" / "model.safetensors").is_file()
