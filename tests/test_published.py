"""Published reference artifacts (mrp_repro.published, mrp_repro.publish): the committed ones match their recorded
sha256 and the shipped profile's settings; published artifacts stand in for training and no runs/ cache shadows
them; a flipped byte is refused with the fix; MRP_REPRO_FROM_SCRATCH=1 retrains apart (its own runs and figures
roots) and the comparison names both hashes; settings that differ from the record are named."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file

from mrp_repro import checkpoint as ckpt_io
from mrp_repro import published, stages
from mrp_repro.config import load_profile, repo_root
from mrp_repro.mrp import PREFIX
from mrp_repro.publish import compare, publish
from mrp_repro.runtime import FROM_SCRATCH_ENV, figures_dir, figures_root, runs_root
from mrp_repro.trajectories import model_fingerprint

# smoke, smaller: 4 backbone steps, 3 head steps, one thread (the record holds these settings, not smoke.yaml's)
SMALL = {
    "backbone_training.steps": 4,
    "backbone_training.ckpt_every": 4,
    "backbone_training.num_threads": 1,
    "mrp_training.steps": 3,
    "mrp_training.ckpt_every": 3,
    "trajectories.n_prompts": 8,
}


def _flip(path: Path, at: int = 100) -> None:
    b = bytearray(path.read_bytes())
    b[at] ^= 0x01
    path.write_bytes(bytes(b))


def _state_bytes(model) -> dict[str, bytes]:
    return {k: v.detach().cpu().numpy().tobytes() for k, v in model.state_dict().items()}


@pytest.fixture(scope="module")
def pub(tmp_path_factory):
    """A small smoke run trained in a temporary runs root and published into a temporary artifacts root."""
    root = tmp_path_factory.mktemp("published")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MRP_REPRO_RUNS", str(root / "train-runs"))
        mp.setenv("MRP_REPRO_FIGURES", str(root / "figures"))
        mp.delenv(FROM_SCRATCH_ENV, raising=False)
        P = load_profile("smoke").replace(SMALL)
        bb = stages.backbone(P, device="cpu", progress=False)
        stages.train_head(P, bb, progress=False)
        mp.setattr(published, "artifacts_root", lambda: root / "artifacts")
        out = publish(P, root / "train-runs")
        mp.setenv("MRP_REPRO_RUNS", str(root / "runs"))  # the tests' own, empty runs root
        yield P, out, model_fingerprint(bb.model), _state_bytes(bb.model)


def test_committed_artifacts_match_their_records():
    """Every committed artifacts/<name>/: each recorded file's sha256, no unrecorded file, the settings of the
    shipped configs/<name>.yaml (so `make reproduce` evaluates them), and tiny's record is there."""
    roots = sorted(p.parent for p in (repo_root() / "artifacts").glob(f"*/{published.MANIFEST}"))
    assert "tiny" in [r.name for r in roots]
    for root in roots:
        rec = json.loads((root / published.MANIFEST).read_text())
        files = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
        recorded = {f for a in published.ARTIFACTS if a in rec for f in rec[a]["files"]}
        assert files == recorded | {published.MANIFEST}
        for f in sorted(recorded):
            want = next(rec[a]["files"][f] for a in published.ARTIFACTS if a in rec and f in rec[a]["files"])
            assert published.sha256_file(root / f) == want, f
        P = load_profile(root.name)
        assert published.settings_differences(rec["backbone"]["settings"], published.backbone_settings(P)) == []
        if "head" in rec:
            assert published.settings_differences(rec["head"]["settings"], published.head_settings(P)) == []
        for a in published.ARTIFACTS:
            if a in rec:
                t = rec[a]["trained"]
                assert t["git_commit"] and t["torch"] and t["threads"] and t["machine"], (root.name, a)


def test_published_artifacts_stand_in_and_no_cache_shadows_them(pub):
    P, out, fp, weights = pub
    # a runs/ cache at the backbone's own key, holding other weights: must not be read in the default mode
    cache = stages.backbone_dir(P)
    rnd = stages.random_backbone(P, std=0.3, seed=7)
    ckpt_io.save_backbone(rnd.model, cache / "model")
    (cache / "done.json").write_text("{}")
    bb = stages.backbone(P, device="cpu", progress=False)
    assert bb.path == out / "backbone" / "model"
    assert _state_bytes(bb.model) == weights and model_fingerprint(bb.model) == fp
    # notebook 01 plots bb.path.parent / loss_curve.csv; notebook 04 reads train_head(...) / loss_curve.csv
    assert (bb.path.parent / "loss_curve.csv").exists()
    hd = stages.train_head(P, bb, progress=False)
    assert hd == out / "head" == stages.head_dir(P, bb)
    assert (hd / "loss_curve.csv").exists() and (hd / "metrics.json").exists()
    head = stages.head(P, bb, progress=False)
    saved = load_file(str(hd / "head" / "mrp.safetensors"))
    assert {PREFIX + k: v.numpy().tobytes() for k, v in head.state_dict().items()} == {
        k: v.numpy().tobytes() for k, v in saved.items()
    }
    assert not list(runs_root().glob(f"{P.name}/mrp-*/done.json"))  # no head trained in runs/


def test_flipped_byte_is_refused_with_the_fix(pub, tmp_path, monkeypatch):
    P, out, fp, _ = pub
    copy = tmp_path / "artifacts"
    shutil.copytree(out, copy / P.name)
    monkeypatch.setattr(published, "artifacts_root", lambda: copy)
    _flip(copy / P.name / "backbone" / "model" / "model.safetensors")
    with pytest.raises(published.PublishedArtifactError, match=r"model\.safetensors has sha256 .*git checkout"):
        stages.backbone(P, device="cpu", progress=False)
    shutil.copyfile(out / "backbone" / "model" / "model.safetensors",
                    copy / P.name / "backbone" / "model" / "model.safetensors")  # fmt: skip
    bb = stages.backbone(P, device="cpu", progress=False)  # restored: accepted again
    _flip(copy / P.name / "head" / "head" / "mrp.safetensors", at=60)
    with pytest.raises(published.PublishedArtifactError, match=r"mrp\.safetensors has sha256"):
        stages.train_head(P, bb, progress=False)
    shutil.copyfile(out / "head" / "head" / "mrp.safetensors", copy / P.name / "head" / "head" / "mrp.safetensors")
    assert stages.train_head(P, bb, progress=False) == copy / P.name / "head"
    (copy / P.name / "head" / "loss_curve.csv").unlink()
    with pytest.raises(published.PublishedArtifactError, match="loss_curve.csv is missing"):
        published.verify_files(P.name, "head")


@pytest.mark.parametrize("extra", ["model/zz.safetensors", "model/special_tokens_map.json"])
def test_a_file_the_record_does_not_list_is_refused(pub, tmp_path, monkeypatch, extra):
    """An extra zz.safetensors replaced lm_head, an extra special_tokens_map.json turned mask_id 1 into 2 (eos),
    and the sha256 check passed both: published.json is the manifest, so an unlisted file is an error naming it."""
    P, out, fp, _ = pub
    copy = tmp_path / "artifacts"
    shutil.copytree(out, copy / P.name)
    monkeypatch.setattr(published, "artifacts_root", lambda: copy)
    model = copy / P.name / "backbone" / "model"
    if extra.endswith(".safetensors"):
        tensors = load_file(str(model / "model.safetensors"))
        from safetensors.torch import save_file

        save_file({"lm_head.weight": tensors["lm_head.weight"] * 0}, str(copy / P.name / "backbone" / extra))
    else:
        (copy / P.name / "backbone" / extra).write_text(json.dumps({"mask_token": "<eos>"}))
    with pytest.raises(published.PublishedArtifactError, match=f"{Path(extra).name} is not a published file"):
        stages.backbone(P, device="cpu", progress=False)
    (copy / P.name / "backbone" / extra).unlink()
    assert model_fingerprint(stages.backbone(P, device="cpu", progress=False).model) == fp


def test_settings_that_differ_are_named(pub, capsys):
    P, out, fp, _ = pub
    # a derived profile of the same name (another seed): the published backbone does not apply, with a note
    assert published.backbone_dir(P.replace({"seed": 5})) is None
    assert "seed: 0 -> 5" in capsys.readouterr().err
    # the shipped smoke.yaml differs from what was published (4 steps, not 30): an error naming the settings
    with pytest.raises(published.PublishedArtifactError, match=r"backbone_training\.steps: 4 -> 30"):
        published.backbone_dir(load_profile("smoke"))
    # a setting the record lacks counts as equal at its default, and differs at any other value
    rec = json.loads((out / published.MANIFEST).read_text())["head"]["settings"]
    cur = published.head_settings(P)
    del rec["mrp"]["pretrained"]  # as if mrp.pretrained (default None) had been added after publishing
    assert published.settings_differences(rec, cur) == []
    cur["mrp"]["pretrained"] = "some/head"
    assert published.settings_differences(rec, cur) == ["mrp.pretrained: '<absent>' -> 'some/head'"]
    del rec["mrp"]["init_std"]  # a setting without a default: absent from the record is a difference
    assert "mrp.init_std: '<absent>' -> 0.02" in published.settings_differences(rec, cur)
    # a head trained on another backbone is not the published one: with the published backbone applying, that
    # backbone's files changed under a matching record, an error naming both (before: None, silently)
    with pytest.raises(published.PublishedArtifactError, match=f"trained on backbone {fp}.*fingerprint 0000"):
        published.head_dir(P, "0" * 16)
    capsys.readouterr()
    assert published.head_dir(P.replace({"seed": 5}), "0" * 16) is None  # a derived profile trains its own, noted
    assert "trained on backbone" in capsys.readouterr().err


def test_from_scratch_retrains_apart_and_compares(pub, monkeypatch):
    P, out, fp, weights = pub
    base = runs_root()
    monkeypatch.setenv(FROM_SCRATCH_ENV, "1")
    monkeypatch.delenv("MRP_REPRO_FIGURES")
    assert runs_root() == base / "from-scratch" and figures_root() == base / "from-scratch" / "figures"
    assert published.backbone_dir(P) is None and published.head_dir(P, fp) is None
    bb = stages.backbone(P, device="cpu", progress=False)
    assert bb.path == stages.backbone_dir(P) / "model" and str(bb.path).startswith(str(base / "from-scratch"))
    # same settings, same thread count, same machine: the same bits as the published backbone
    assert _state_bytes(bb.model) == weights
    stages.train_head(P, bb, progress=False)
    text = compare(P)
    sha = json.loads((out / published.MANIFEST).read_text())["backbone"]["files"]["backbone/model/model.safetensors"]
    assert f"| backbone model.safetensors sha256 | {sha[:16]} | {sha[:16]} | yes |" in text
    assert "| head mrp.safetensors sha256 |" in text
    # the published run collects no trajectories (its head is published): that table is not compared, the others are
    theirs = base / "published-figures"
    for d, rows in ((theirs / P.name, 0), (figures_dir(P), 12)):
        d.mkdir(parents=True, exist_ok=True)
        (d / "trajectories.csv").write_text(f"source,rows\nself,{rows}\n")
        (d / "backbone.csv").write_text("setting,accuracy\nstatic(1),50.0\n")
    text = compare(P, published_figures=theirs)
    assert "| trajectories | not compared: the published run evaluates the published head" in text
    assert "| backbone |" in text
    monkeypatch.setenv(FROM_SCRATCH_ENV, "maybe")
    with pytest.raises(Exception, match="MRP_REPRO_FROM_SCRATCH='maybe'"):
        runs_root()


def test_a_warm_restart_starts_from_the_published_backbone_only_if_it_is_the_first_phase(pub, monkeypatch):
    """stages backbone --phase1-from-published (published.phase1_backbone_dir): the published backbone is the first
    phase of the same profile with a restart added; a profile with no restart, or another first phase, is refused
    naming the fix."""
    from mrp_repro.errors import UserError

    P, out, _, _ = pub
    monkeypatch.setattr(published, "artifacts_root", lambda: out.parent)
    both = P.replace({"backbone_training.restart_steps": 2, "backbone_training.restart_lr": 1e-3})
    first = published.phase1_backbone_dir(both)
    assert (first / "model" / "model.safetensors").is_file() and (first / "done.json").is_file()
    with pytest.raises(UserError, match="has no warm restart"):
        published.phase1_backbone_dir(P)
    other = both.replace({"backbone_training.lr": 1e-4})
    with pytest.raises(UserError, match=r"not this profile's first phase \(backbone_training.lr"):
        published.phase1_backbone_dir(other)
    with pytest.raises(UserError, match="no published backbone"):
        published.phase1_backbone_dir(both.replace({"name": "nowhere"}))


def test_the_published_head_collects_no_trajectories(pub, monkeypatch):
    """A run that evaluates the published head trains none, so make reproduce launches no trajectory collection and
    notebook 02's table says why; retraining (from scratch, or another head seed) collects them again."""
    from mrp_repro.reproduce import stage_launches

    P, _, _, _ = pub
    sources = list(P.trajectories.sources)
    assert published.head_applies(P)
    assert [what for *_, what in stage_launches(P, P.name)] == ["grids", "peers", "passes"]
    t = stages.trajectories_summary(P, stages.backbone(P, device="cpu", progress=False))
    assert list(t["source"]) == sources and (t["rows"] == 0).all()
    assert t["artifact"].str.startswith(f"not collected: the published head (artifacts/{P.name}/head)").all()
    assert not list(runs_root().glob(f"{P.name}/trajectories-*"))  # nothing collected
    trains = ["trajectories"] * len(sources) + ["head", "grids", "peers", "passes"]
    assert not published.head_applies(P.replace({"seed": P.seed + 1}))  # another head seed: its own head
    assert [what for *_, what in stage_launches(P.replace({"seed": P.seed + 1}), P.name)] == trains
    monkeypatch.setenv(FROM_SCRATCH_ENV, "1")
    assert not published.head_applies(P)
    assert [what for *_, what in stage_launches(P, P.name)] == trains
