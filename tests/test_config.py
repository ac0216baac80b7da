"""Profiles: loading, validation errors, hashing."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from mrp_repro.config import ConfigError, Profile, list_profiles, load_profile

SHIPPED = ["sdar-1.7b", "sdar-4b", "sdar-8b", "smoke", "tiny"]


def _write(tmp_path, raw, name="custom.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw))
    return path


def test_list_profiles():
    assert set(SHIPPED) <= set(list_profiles())


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_profile_loads(name):
    p = load_profile(name)
    assert isinstance(p, Profile) and p.name == name
    assert p.block_size == (16 if name.startswith("sdar") else 8)
    assert p.mrp_training.lr == 1e-3 and isinstance(p.mrp_training.lr, float)
    assert p.decoding.remask_delta == 2.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.seed = 1  # type: ignore[misc]


def test_profile_specifics():
    tiny, smoke, sdar = load_profile("tiny"), load_profile("smoke"), load_profile("sdar-8b")
    assert tiny.model.source == "scratch" and tiny.data.tasks == ("synth-math", "synth-code")
    assert tiny.backbone_training.lr == 2e-3  # YAML "2.0e-3" and 1.2-style floats both parse
    assert smoke.backbone_training.steps == 30 and smoke.backbone_training.batch_size == 16
    assert smoke.mrp.num_layers == 1 and sdar.mrp.num_layers == 3
    assert sdar.model.hub_id == "JetLM/SDAR-8B-Chat" and sdar.model.hidden_size is None
    assert sdar.data.tasks == ("gsm8k", "math500", "humaneval", "mbpp")


def test_unknown_profile_lists_choices():
    with pytest.raises(ValueError) as e:
        load_profile("nope")
    msg = str(e.value)
    assert "nope" in msg and all(n in msg for n in SHIPPED)


def test_unknown_key_names_key_section_and_valid_keys(tmp_path):
    raw = load_profile("smoke").to_dict()
    raw["mrp"]["num_layer"] = 2
    with pytest.raises(ConfigError) as e:
        load_profile(str(_write(tmp_path, raw)))
    msg = str(e.value)
    assert "'num_layer'" in msg and "'mrp'" in msg and "num_layers" in msg and "init_std" in msg


def test_unknown_top_level_key(tmp_path):
    raw = load_profile("smoke").to_dict()
    raw["modle"] = {}
    with pytest.raises(ConfigError, match="modle"):
        load_profile(str(_write(tmp_path, raw)))


@pytest.mark.parametrize(
    "section,key,value,expected",
    [
        ("mrp", "num_layers", "3", "int"),
        ("mrp", "num_layers", True, "int"),
        ("mrp_training", "lr", [0.1], "float"),
        ("decoding", "thresholds", 0.5, "list[float]"),
        ("decoding", "remask_rules", ["tau", "bogus"], "one of"),
        ("model", "source", "s3", "one of"),
        ("data", "seed", None, "int"),
    ],
)
def test_wrong_type_names_field_expected_and_got(tmp_path, section, key, value, expected):
    raw = load_profile("smoke").to_dict()
    raw[section][key] = value
    with pytest.raises(ConfigError) as e:
        load_profile(str(_write(tmp_path, raw)))
    msg = str(e.value)
    assert f"{section}.{key}" in msg and expected in msg and "got" in msg


def test_int_accepted_for_float(tmp_path):
    raw = load_profile("smoke").to_dict()
    raw["mrp_training"]["lr"] = 1
    p = load_profile(str(_write(tmp_path, raw)))
    assert p.mrp_training.lr == 1.0 and isinstance(p.mrp_training.lr, float)


def test_missing_key(tmp_path):
    raw = load_profile("smoke").to_dict()
    del raw["mrp"]["objective"]
    with pytest.raises(ConfigError, match="objective"):
        load_profile(str(_write(tmp_path, raw)))


def test_hash_stable_and_sensitive(tmp_path):
    a, b = load_profile("tiny"), load_profile("tiny")
    assert a.hash == b.hash and len(a.hash) == 12
    # the same tree written out and read back has the same hash
    assert load_profile(str(_write(tmp_path, a.to_dict(), "tiny_copy.yaml"))).hash == a.hash
    c = a.replace({"mrp_training.steps": a.mrp_training.steps + 1})
    assert c.hash != a.hash and c.mrp_training.steps == a.mrp_training.steps + 1
    assert load_profile("tiny", overrides={"mrp_training.steps": c.mrp_training.steps}).hash == c.hash


def test_section_hash_only_depends_on_named_sections():
    a = load_profile("tiny")
    c = a.replace({"mrp_training.steps": 7})
    assert c.section_hash("model", "backbone_training") == a.section_hash("model", "backbone_training")
    assert c.section_hash("mrp", "mrp_training") != a.section_hash("mrp", "mrp_training")
    assert a.replace({"seed": 5}).section_hash("model") != a.section_hash("model")
    with pytest.raises(ConfigError, match="modle"):
        a.section_hash("modle")


def test_replace_validates():
    a = load_profile("smoke")
    with pytest.raises(ConfigError, match="steps"):
        a.replace({"mrp_training.steps": "many"})
    with pytest.raises(ConfigError, match="stepz"):
        a.replace({"mrp_training.stepz": 1})


def test_extends_requires_own_name(tmp_path):
    (tmp_path / "child.yaml").write_text("extends: smoke\nseed: 3\n")
    with pytest.raises(ConfigError, match="name"):
        load_profile(str(tmp_path / "child.yaml"))
    (tmp_path / "child.yaml").write_text("extends: smoke\nname: child\nseed: 3\n")
    p = load_profile(str(tmp_path / "child.yaml"))
    assert p.name == "child" and p.seed == 3 and p.model == load_profile("smoke").model


def test_decoding_algorithms_and_upstream_draft_settings():
    """tiny decodes both families, the SDAR profiles upstream (their published speculative sweep: draft logits
    none); bad values are refused naming the setting."""
    assert load_profile("tiny").decoding.algorithms == ("ours", "upstream")
    for name in ("sdar-1.7b", "sdar-4b", "sdar-8b", "sdar-mini"):
        d = load_profile(name).decoding
        assert d.algorithms == ("upstream",) and (d.upstream_draft_logits, d.upstream_sum_scale) == ("none", 1.0)
    a = load_profile("smoke")
    assert a.replace({"decoding.upstream_draft_logits": "sum", "decoding.upstream_sum_scale": 2.0})
    bad_values = [
        ({"decoding.algorithms": ["theirs"]}, "algorithms"),
        ({"decoding.algorithms": ["ours", "ours"]}, "algorithms"),
        ({"decoding.algorithms": []}, "algorithms"),
        ({"decoding.upstream_draft_logits": "mean"}, "upstream_draft_logits"),
        ({"decoding.upstream_draft_logits": "none", "decoding.upstream_sum_scale": 2.0}, "sum_scale"),
        ({"decoding.upstream_draft_logits": "sum", "decoding.upstream_sum_scale": 0.0}, "sum_scale"),
    ]
    for bad, match in bad_values:
        with pytest.raises(ConfigError, match=match):
            a.replace(bad)
