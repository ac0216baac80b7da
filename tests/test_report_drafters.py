"""report.drafters: one head per next-pick loss weight, TPF against the oracle ceiling and naive drafting."""

import pytest

from mrp_repro.report.drafters import COLUMNS, drafter_table, parse_variant, variant_name


def test_drafter_table_trains_one_head_per_weight_and_bounds_tpf_by_the_oracle(tmp_runs, smoke_profile):
    from mrp_repro import stages

    P = smoke_profile.replace({"mrp_training.steps": 20, "trajectories.n_prompts": 16})
    bb = stages.random_backbone(P, std=0.5)
    variants = [{}, {"mrp_training.pick_loss_weight": 1.0}]
    df = drafter_table(P, bb, variants, n_prompts=8, Ks=[3])
    assert list(df.columns) == COLUMNS and len(df) == 2 * len(P.data.tasks)
    assert list(dict.fromkeys(df["variant"])) == ["profile", "mrp_training.pick_loss_weight=1.0"]
    assert (df["tpf_mrp"] <= df["tpf_oracle"] + 1e-9).all() and (df["tpf_naive"] >= 1).all()
    assert ((df["tpf_share_of_oracle"] - df["tpf_mrp"] / df["tpf_oracle"]).abs() < 1e-12).all()
    dirs = {stages.head_dir(P.replace(v), bb) for v in variants}
    assert len(dirs) == 2 and all((d / "head" / "mrp.safetensors").exists() for d in dirs)
    assert df["heldout_pick_acc"].between(0, 1).all()
    with pytest.raises(ValueError, match="recipe: offline"):
        drafter_table(P.replace({"mrp_training.recipe": "online"}), bb)


def test_variants_parse_and_name():
    assert parse_variant("") == {} and variant_name({}) == "profile"
    v = parse_variant("mrp.k_steps=3,mrp.train_source=gt")
    assert v == {"mrp.k_steps": 3, "mrp.train_source": "gt"} and variant_name(v) == "mrp.k_steps=3,mrp.train_source=gt"
    with pytest.raises(ValueError, match="key=value"):
        parse_variant("mrp.k_steps")
