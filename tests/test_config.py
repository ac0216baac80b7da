"""Profiles: loading, validation errors, hashing."""

from __future__ import annotations

import dataclasses
import re

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


# ----------------------------------------------------------------------------- ranges (issue 29, finding 7)


def _numeric_fields():
    """(dotted key, field) of every int/float setting of the tree (optional and list ones included)."""
    import typing

    from mrp_repro.config import SECTIONS

    def numeric(tp):  # int, float, or an optional / list of one
        return tp in (int, float) or any(numeric(a) for a in typing.get_args(tp))

    out = []
    for where, cls in [("", Profile), *SECTIONS.items()]:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.name not in SECTIONS and numeric(hints[f.name]):
                out.append((f"{where}.{f.name}" if where else f.name, f, hints[f.name]))
    return out


def _bad_value(f, tp):
    rng = f.metadata["range"]
    step = 1 if "int" in str(tp) else 1e-3
    if rng.lo is not None:
        v = rng.lo if rng.lo_open else rng.lo - step
    else:
        v = rng.hi if rng.hi_open else rng.hi + step
    return [v] if "tuple" in str(tp) else v


def test_every_numeric_setting_declares_a_range():
    keys = _numeric_fields()
    assert len(keys) > 40  # the walk found the tree
    missing = [k for k, f, _ in keys if "range" not in f.metadata]
    assert missing == []


@pytest.mark.parametrize("key,f,tp", _numeric_fields(), ids=[k for k, _, _ in _numeric_fields()])
def test_each_numeric_setting_out_of_range_is_refused_naming_it(key, f, tp):
    """One value just outside the declared range, and NaN for a float, on tiny (a scratch model: every section is
    used); the one-line error names the key and its allowed range."""
    tiny = load_profile("tiny")
    bad = [_bad_value(f, tp)]
    if "float" in str(tp):
        bad.append([float("nan")] if "tuple" in str(tp) else float("nan"))
    for value in bad:
        with pytest.raises(ConfigError) as e:
            tiny.replace({key: value})
        msg = str(e.value)
        assert "\n" not in msg and f"{key}:" in msg and str(f.metadata["range"]) in msg, msg


@pytest.mark.parametrize(
    "override,expected",
    [
        ({"backbone_training.steps": -5}, "backbone_training.steps: -5 is out of range, allowed in [1, 100000000]"),
        ({"mrp_training.steps": 0}, "mrp_training.steps: 0 is out of range, allowed in [1, 100000000]"),
        ({"model.hidden_size": 0}, "model.hidden_size: 0 is out of range, allowed in [1, 32768]"),
        ({"model.num_kv_heads": 0},  # was ZeroDivisionError
         "model.num_kv_heads: 0 is out of range, allowed in [1, 1024]"),
        ({"mrp_training.lr": float("nan")}, "mrp_training.lr: nan is out of range, allowed > 0"),
        ({"backbone_training.ckpt_every": 0},
         "backbone_training.ckpt_every: 0 is out of range, allowed in [1, 100000000]"),
        ({"mrp_training.ckpt_every": 0}, "mrp_training.ckpt_every: 0 is out of range, allowed in [1, 100000000]"),
        ({"decoding.thresholds": [0.5, 1.0]}, "decoding.thresholds: [0.5, 1.0] (item 1.0) is out of range"),
        ({"model.head_dim": 23}, "model.head_dim (23) must be even"),
    ],
)
def test_the_reported_bad_settings_are_refused(override, expected):
    with pytest.raises(ConfigError, match=re.escape(expected)):
        load_profile("tiny").replace(override)


def test_every_profile_is_in_range():
    for name in list_profiles():
        load_profile(name)  # raises on a shipped value outside its range


def test_a_loaded_backbone_skips_the_unused_backbone_training_ranges():
    """The SDAR profiles load their backbone and write backbone_training.steps: 0; tiny trains one and may not."""
    assert load_profile("sdar-1.7b").backbone_training.steps == 0
    with pytest.raises(ConfigError, match="backbone_training.steps"):
        load_profile("tiny").replace({"backbone_training.steps": 0})


@pytest.mark.parametrize("name", ["..", ".", ".hidden", "-x", "a/b", "a" * 101, ""])
def test_name_is_one_safe_path_component(tmp_path, name):
    raw = load_profile("smoke").to_dict()
    raw["name"] = name
    with pytest.raises(ConfigError, match="one path component"):
        load_profile(str(_write(tmp_path, raw)))
    raw["name"] = "my-run_2.b"
    assert load_profile(str(_write(tmp_path, raw))).name == "my-run_2.b"


def test_yaml_syntax_error_is_one_line_naming_the_line_and_fixing_it_there_works(tmp_path):
    path = tmp_path / "broken.yaml"
    lines = ["extends: smoke", "name: broken", "mrp_training:", "  steps: [3", "seed: 2"]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError) as e:
        load_profile(str(path))
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg and "not valid YAML" in msg, msg
    line = int(re.search(r"line (\d+)", msg).group(1))
    assert line in (4, 5)  # the flow list opened on line 4 is found unclosed at line 5
    lines[3] = "  steps: 3"  # the advice: fix the file there
    path.write_text("\n".join(lines) + "\n")
    assert load_profile(str(path)).mrp_training.steps == 3
