"""Recovery: every error message's advice is followed here, and the pipeline then recovers.

Each test damages an artifact the way a crash or a disk does, checks that the error names the file
and the fix, does exactly what the message says, reruns the stage and compares with an undamaged run;
finished work is not redone (file mtimes).
"""

import hashlib
import json
import re
import shutil
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import save_file

from mrp_repro import stages
from mrp_repro.checkpoint import CheckpointError, load_backbone, save_backbone
from mrp_repro.config import load_profile
from mrp_repro.mrp import BackboneMismatchError, MRPHead, load_head, save_head
from mrp_repro.stages import random_backbone
from mrp_repro.training.backbone import train_backbone
from mrp_repro.training.mrp import train_mrp
from mrp_repro.trajectories import (
    TrajectoryError,
    load_trajectories,
    model_fingerprint,
    read_manifest,
)


def sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def mtimes(paths):
    return {p.name: p.stat().st_mtime_ns for p in paths}


def truncate(path, keep=0.5):
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def flip_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def rerecord(out):
    """Record a finished stage directory's files as they are now (done.json's integrity record)."""
    done = json.loads((out / "done.json").read_text())
    done["files"] = {rel: sha(out / rel) for rel in done["files"]}
    (out / "done.json").write_text(json.dumps(done))


@pytest.fixture
def profile():
    # 4 shards of 4 prompts; a random backbone of smoke's shape: no backbone training needed
    return load_profile("smoke").replace(
        {
            "trajectories.shard_size": 4,
            "mrp.train_source": "gt-multi",
            "mrp_training.steps": 4,
            "mrp_training.ckpt_every": 2,
        }
    )


@pytest.fixture
def bb(profile):
    return random_backbone(profile, std=0.2, seed=0)


def shard_files(out):
    return sorted(out.glob("shard-*.parquet"))


# ----------------------------------------------------------------------------- trajectory shards


def test_deleted_corrupted_shard_is_redone_by_the_profile_stage(tmp_runs, profile, bb):
    """The issue's scenario: corrupt shard -> error says delete it and rerun -> do that -> same data,
    the other shards untouched. (Before: the rerun returned early on `complete` and failed again.)"""
    out = stages.trajectories(profile, bb, "gt-multi", progress=False)
    want = load_trajectories(out).data.table
    shards = shard_files(out)
    assert len(shards) == 4
    before, sha1 = mtimes(shards), sha(shards[1])
    flip_byte(shards[1])

    with pytest.raises(TrajectoryError) as e:
        load_trajectories(out)
    msg = str(e.value)
    assert str(shards[1]) in msg and "corrupted" in msg
    m = re.search(r"delete (\S+) and rerun python -m mrp_repro.stages head --profile smoke", msg)
    assert m, msg
    (out / m.group(1)).unlink()  # do what it says

    assert stages.trajectories(profile, bb, "gt-multi", progress=False) == out
    assert load_trajectories(out).data.table.equals(want)
    assert sha(shards[1]) == sha1  # the same bytes as the undamaged run
    after = mtimes(shard_files(out))
    assert {k: v for k, v in after.items() if k != shards[1].name} == {
        k: v for k, v in before.items() if k != shards[1].name
    }
    assert read_manifest(out)["complete"]


def test_truncated_shard_is_redone_on_rerun_without_deleting(tmp_runs, profile, bb):
    """The stage's reuse check (a stat of every listed shard) sees a truncated shard and redoes it."""
    out = stages.trajectories(profile, bb, "gt-multi", progress=False)
    want = load_trajectories(out).data.table
    shards = shard_files(out)
    before = mtimes(shards)
    truncate(shards[2])
    stages.trajectories(profile, bb, "gt-multi", progress=False)
    assert load_trajectories(out).data.table.equals(want)
    after = mtimes(shard_files(out))
    assert after[shards[2].name] != before[shards[2].name]
    assert all(after[k] == before[k] for k in before if k != shards[2].name)


def test_missing_shard_error_advice_works(tmp_runs, profile, bb):
    out = stages.trajectories(profile, bb, "gt-multi", progress=False)
    want = load_trajectories(out).data.table
    shard_files(out)[0].unlink()
    with pytest.raises(TrajectoryError, match=r"shard-00000.parquet is listed in the manifest but missing; rerun"):
        load_trajectories(out)
    stages.trajectories(profile, bb, "gt-multi", progress=False)
    assert load_trajectories(out).data.table.equals(want)


# ----------------------------------------------------------------------------- head vs backbone


def test_head_of_another_backbone_is_refused_even_at_the_same_shapes(tmp_path, profile):
    a = random_backbone(profile, seed=0).model
    b = random_backbone(profile, seed=1).model
    assert a.config == b.config
    fa, fb = model_fingerprint(a), model_fingerprint(b)
    assert fa != fb
    head = MRPHead(a.config).init_weights(generator=torch.Generator().manual_seed(0))
    save_head(head, tmp_path / "head", extra={"backbone_hash": fa})

    with pytest.raises(BackboneMismatchError) as e:
        load_head(tmp_path / "head", b.config, backbone_hash=fb)
    assert fa in str(e.value) and fb in str(e.value) and "allow_backbone_mismatch=True" in str(e.value)
    assert isinstance(e.value, CheckpointError)
    # the override, and the callers that pass no fingerprint (shape check only) as before
    forced = load_head(tmp_path / "head", b.config, backbone_hash=fb, allow_backbone_mismatch=True)
    same = load_head(tmp_path / "head", a.config, backbone_hash=fa)
    legacy = load_head(tmp_path / "head", b.config)
    for k, v in head.state_dict().items():
        assert torch.equal(forced.state_dict()[k], v) and torch.equal(same.state_dict()[k], v)
        assert torch.equal(legacy.state_dict()[k], v)
    # a head that records no fingerprint cannot be checked: refused when one is asked for
    save_head(head, tmp_path / "anon")
    with pytest.raises(BackboneMismatchError, match="<not recorded>"):
        load_head(tmp_path / "anon", a.config, backbone_hash=fa)


def test_profile_head_is_refused_on_another_backbone(tmp_runs, profile, bb):
    out = stages.train_head(profile, bb, progress=False)
    meta_path = out / "head" / "mrp_config.json"
    meta = json.loads(meta_path.read_text())
    meta["backbone_hash"] = "0123456789abcdef"  # as if this head were trained on another backbone
    meta_path.write_text(json.dumps(meta))
    rerecord(out)  # ... and recorded so (an edit alone would be caught as corruption and rewritten)
    with pytest.raises(BackboneMismatchError, match="0123456789abcdef.*" + model_fingerprint(bb.model)):
        stages.train_head(profile, bb, progress=False)
    with pytest.raises(BackboneMismatchError):
        stages.head(profile, bb, progress=False)
    head = stages.head(profile, bb, progress=False, allow_backbone_mismatch=True)
    assert isinstance(head, MRPHead)


# ----------------------------------------------------------------------------- head weights


def test_truncated_head_names_file_and_fix_and_the_fix_works(tmp_runs, profile, bb):
    out = stages.train_head(profile, bb, progress=False)
    weights = out / "head" / "mrp.safetensors"
    want = load_head(out / "head", bb.model.config).state_dict()
    keep = mtimes([out / "ckpt.pt", *shard_files(stages.trajectories(profile, bb, progress=False))])
    truncate(weights)

    with pytest.raises(CheckpointError) as e:
        load_head(out / "head", bb.model.config, backbone_hash=model_fingerprint(bb.model))
    msg = str(e.value)
    assert str(weights) in msg and "truncated or unreadable" in msg
    assert "delete it and rerun python -m mrp_repro.stages head --profile smoke" in msg
    weights.unlink()  # do what it says, then rerun the stage

    head = stages.head(profile, bb, progress=False)
    for k, v in want.items():
        assert torch.equal(head.state_dict()[k], v), k
    # rewritten from ckpt.pt: no retraining (ckpt.pt untouched) and no trajectories redone
    traj = stages.trajectories(profile, bb, progress=False)
    assert mtimes([out / "ckpt.pt", *shard_files(traj)]) == keep


def test_truncated_head_is_rewritten_by_rerunning_the_stage(tmp_runs, profile, bb):
    out = stages.train_head(profile, bb, progress=False)
    want = sha(out / "head" / "mrp.safetensors")
    truncate(out / "head" / "mrp.safetensors")
    assert stages.train_head(profile, bb, progress=False) == out
    assert sha(out / "head" / "mrp.safetensors") == want
    assert stages.head_dir(profile, bb) == out


# ----------------------------------------------------------------------------- training checkpoints


def test_truncated_mrp_training_checkpoint(tmp_path, profile, bb):
    from mrp_repro.trajectories import collect

    items = [([5, 6, 7, 8], [9, 10, 11, 12, 13, 14, 15, 16, 9, 10]) for _ in range(12)]
    d = tmp_path / "traj"
    collect(bb.model, bb.mask_id, items, "gt-multi", d, 4, seed=0, progress=False, block_size=8, eos_ids=bb.eos_ids)
    backbone = SimpleNamespace(model=bb.model, mask_id=bb.mask_id)
    train_mrp(profile, backbone, d, tmp_path / "full", progress=False)
    train_mrp(profile, backbone, d, tmp_path / "cut", progress=False, stop_after=2)
    ck = tmp_path / "cut" / "ckpt.pt"
    truncate(ck)

    with pytest.raises(CheckpointError) as e:
        train_mrp(profile, backbone, d, tmp_path / "cut", progress=False)
    msg = str(e.value)
    assert str(ck) in msg and "delete it and rerun" in msg
    ck.unlink()
    assert train_mrp(profile, backbone, d, tmp_path / "cut", progress=False)["finished"]
    a = load_head(tmp_path / "full" / "head", bb.model.config).state_dict()
    b = load_head(tmp_path / "cut" / "head", bb.model.config).state_dict()
    for k in a:
        assert torch.equal(a[k], b[k]), k


@pytest.mark.parametrize("damaged", ["model.safetensors", "state.pt"])
def test_truncated_backbone_training_checkpoint(tmp_path, smoke_profile, damaged):
    p = smoke_profile.replace({"backbone_training.steps": 8, "backbone_training.ckpt_every": 100})
    train_backbone(p, tmp_path / "full", progress=False)
    train_backbone(p, tmp_path / "cut", progress=False, stop_after=4)
    ck = tmp_path / "cut" / "ckpt-4"
    truncate(ck / damaged)

    with pytest.raises(CheckpointError) as e:
        train_backbone(p, tmp_path / "cut", progress=False)
    msg = str(e.value)
    assert str(ck / damaged) in msg
    m = re.search(r"delete (\S+) and rerun python -m mrp_repro.stages backbone --profile smoke", msg)
    assert m and m.group(1) == str(ck), msg
    shutil.rmtree(m.group(1))
    assert train_backbone(p, tmp_path / "cut", progress=False)["finished"]
    a = load_backbone(tmp_path / "full" / "model").state_dict()
    b = load_backbone(tmp_path / "cut" / "model").state_dict()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_scratch_backbone_model_truncated_then_rewritten_from_checkpoint(tmp_runs, smoke_profile, capsys):
    """A damaged model/ of a finished run no longer matches done.json's record: the stage names the file and
    rewrites the model from the last training checkpoint (its inputs are there), without retraining. (Before:
    a same-size corruption was reused silently; a truncation raised, asking the user to delete model/.)"""
    p = smoke_profile.replace({"backbone_training.steps": 6, "backbone_training.ckpt_every": 3})
    bb = stages.backbone(p, device="cpu", progress=False)
    out = bb.path.parent
    want = {k: v.clone() for k, v in bb.model.state_dict().items()}
    ckpt = next(out.glob("ckpt-*"))
    ck_mtime = (ckpt / "state.pt").stat().st_mtime_ns
    for damage in (truncate, flip_byte):
        damage(out / "model" / "model.safetensors")
        capsys.readouterr()
        again = stages.backbone(p, device="cpu", progress=False)
        err = capsys.readouterr().err
        assert f"not reusing {out}: {out / 'model' / 'model.safetensors'} has sha256" in err, err
        for k, v in want.items():
            assert torch.equal(again.model.state_dict()[k], v), k
        assert (ckpt / "state.pt").stat().st_mtime_ns == ck_mtime  # rewritten from the checkpoint, not retrained
        assert train_backbone(p, out, progress=False)["finished"] and not capsys.readouterr().err  # whole again


def test_truncated_hub_format_shard_is_named(tmp_path, profile):
    """A sharded hub-format checkpoint (model-0000k-of-00002.safetensors + index): the broken shard is
    named with the fix (restore it); restoring it loads the same weights."""
    model = random_backbone(profile, seed=0).model
    save_backbone(model, tmp_path / "one")
    from safetensors.torch import load_file

    tensors = load_file(str(tmp_path / "one" / "model.safetensors"))
    names = sorted(tensors)
    ck = tmp_path / "sharded"
    ck.mkdir()
    shutil.copy(tmp_path / "one" / "config.json", ck / "config.json")
    halves = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for f, ks in halves.items():
        save_file({k: tensors[k] for k in ks}, str(ck / f), metadata={"format": "pt"})
    index = {"weight_map": {k: f for f, ks in halves.items() for k in ks}}
    (ck / "model.safetensors.index.json").write_text(json.dumps(index))
    good = (ck / "model-00002-of-00002.safetensors").read_bytes()
    truncate(ck / "model-00002-of-00002.safetensors", keep=0.3)

    with pytest.raises(CheckpointError) as e:
        load_backbone(ck)
    msg = str(e.value)
    assert str(ck / "model-00002-of-00002.safetensors") in msg and "restore model-00002-of-00002.safetensors" in msg
    (ck / "model-00002-of-00002.safetensors").write_bytes(good)  # restored from its source
    got = load_backbone(ck).state_dict()
    for k, v in model.state_dict().items():
        assert torch.equal(got[k], v), k
