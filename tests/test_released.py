"""The authors' released heads (mrp.pretrained, mrp_repro.released): a checkpoint written here in the released
whole-model layout loads through stages.head and computes exactly what our head computes; a head released for
another backbone, a truncated weights file and a head-less checkpoint are refused with the fix named."""

import importlib
import json

import pytest
import torch

from mrp_repro import integrity, released, stages
from mrp_repro.checkpoint import CheckpointError
from mrp_repro.config import load_profile
from mrp_repro.errors import UserError
from mrp_repro.mrp import MRPHead


@pytest.fixture
def setup(tmp_path, tmp_runs):
    p = load_profile("smoke")
    bb = stages.random_backbone(p, std=0.2, seed=0)
    ours = MRPHead(bb.model.config, 2, "residual").init_weights("normal", 0.2, torch.Generator().manual_seed(3))
    out = released.save_released(bb.model, ours, tmp_path / "sdar-x-mrp-2lyr", bb.block_size)
    prof = p.replace({"mrp.pretrained": str(out), "mrp.num_layers": 2})
    return prof, bb, ours, out


def _forward(head, bb):
    g = torch.Generator().manual_seed(1)
    L = bb.block_size
    h_a = torch.randn(2, L, bb.model.config.hidden_size, generator=g).to(bb.model.lm_head.weight.dtype)
    ids = torch.randint(0, bb.model.config.vocab_size, (2, L), generator=g)
    pos = torch.arange(L)[None].expand(2, L)
    with torch.no_grad():
        return head(h_a, ids, pos, bb.model.embed_tokens)


def test_stage_head_uses_the_released_head_and_matches_ours(setup):
    prof, bb, ours, out = setup
    got = stages.head(prof, bb, progress=False)
    assert not any(stages.head_dir(prof, bb).iterdir())  # nothing was trained
    assert got.num_layers == 2 and got.objective == "residual"
    assert torch.equal(_forward(got, bb), _forward(ours.eval(), bb))
    _, info = stages.pretrained_head(prof, bb)
    assert info.path == out and info.fingerprint == released.backbone_fingerprint(bb.model)


def test_released_head_follows_a_bf16_backbone(setup):
    prof, bb, ours, _ = setup
    bb.model = bb.model.to(torch.bfloat16)  # the fp32 release is checked in bf16 (a cast down is exact)
    got = stages.head(prof, bb, progress=False)
    w = next(got.parameters())
    assert w.dtype == torch.bfloat16 and w.device == bb.model.lm_head.weight.device
    assert torch.equal(_forward(got, bb), _forward(ours.to(torch.bfloat16).eval(), bb))


def test_head_of_another_backbone_names_both_fingerprints(setup):
    prof, bb, _, _ = setup
    other = stages.random_backbone(prof, std=0.2, seed=1)  # same shapes, other weights
    with pytest.raises(released.ReleasedHeadMismatch) as e:
        stages.head(prof, other, progress=False)
    msg = str(e.value)
    assert isinstance(e.value, UserError)
    assert released.backbone_fingerprint(bb.model) in msg and released.backbone_fingerprint(other.model) in msg
    assert "mrp.pretrained: null" in msg


def test_head_of_another_shape_is_refused(setup):
    prof, _, _, _ = setup
    wider = stages.random_backbone(prof.replace({"model.hidden_size": 48}), std=0.2, seed=0)
    with pytest.raises(released.ReleasedHeadMismatch, match="hidden_size: released 32 vs profile 48"):
        stages.head(prof, wider, progress=False)


def test_layer_count_must_match_the_profile(setup):
    prof, bb, _, _ = setup
    with pytest.raises(released.ReleasedHeadMismatch, match="mrp.num_layers: 2"):
        stages.head(prof.replace({"mrp.num_layers": 3}), bb, progress=False)


def test_truncated_weights_name_the_file_and_the_fix(setup):
    prof, bb, _, out = setup
    f = out / "model.safetensors"
    whole = f.read_bytes()
    f.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(CheckpointError) as e:
        stages.head(prof, bb, progress=False)
    # a local directory: the advice is to restore it (it once said `huggingface-cli download <this local path>`)
    msg = str(e.value)
    assert str(f) in msg and "is a local directory: restore it" in msg and "huggingface-cli" not in msg, msg
    f.write_bytes(whole)  # the advice, followed
    assert stages.head(prof, bb, progress=False).num_layers == 2


def test_checkpoint_without_a_head_is_refused(setup, tmp_path):
    prof, bb, _, _ = setup
    from mrp_repro.checkpoint import save_backbone

    bare = save_backbone(bb.model, tmp_path / "bare")
    with pytest.raises(released.ReleasedHeadMismatch, match="holds no MRP head"):
        stages.head(prof.replace({"mrp.pretrained": str(bare)}), bb, progress=False)


def test_hub_ids_parse_with_a_pinned_revision():
    assert released.parse_pretrained("heavyball/sdar-8b-mrp-3lyr@0123abc") == ("heavyball/sdar-8b-mrp-3lyr", "0123abc")
    assert released.parse_pretrained("heavyball/sdar-8b-mrp-3lyr") == ("heavyball/sdar-8b-mrp-3lyr", None)
    with pytest.raises(UserError):
        released.parse_pretrained("heavyball/sdar-8b-mrp-3lyr@")
    assert len(released.RELEASED_HEADS) == 9 and "heavyball/sdar-1.7b-mrp-3lyr-k2" in released.RELEASED_HEADS
    for name in ("1.7b", "4b", "8b"):  # the profiles name the authors' heads as their scripts spell them
        text = (stages.repo_root() / "configs" / f"sdar-{name}.yaml").read_text()
        assert f"heavyball/sdar-{name}-mrp-3lyr" in text and "1_7b" not in text


def test_hub_id_at_revision_loads_from_a_warm_cache(setup, tmp_path, monkeypatch):
    """owner/name@rev goes through checkpoint.resolve_checkpoint_dir: a hub cache that holds it works offline."""
    prof, bb, ours, out = setup
    sha = "b" * 40
    snap = tmp_path / "hub" / "models--heavyball--sdar-x-mrp-2lyr" / "snapshots" / sha
    snap.mkdir(parents=True)
    for f in out.iterdir():
        (snap / f.name).write_bytes(f.read_bytes())
    (snap.parents[1] / "refs").mkdir()
    (snap.parents[1] / "refs" / "main").write_text(sha)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    import huggingface_hub.constants

    importlib.reload(huggingface_hub.constants)
    try:
        got = stages.head(prof.replace({"mrp.pretrained": f"heavyball/sdar-x-mrp-2lyr@{sha}"}), bb, progress=False)
        with pytest.raises(CheckpointError, match="could not fetch heavyball/sdar-x-mrp-2lyr@" + "c" * 40):
            stages.head(prof.replace({"mrp.pretrained": "heavyball/sdar-x-mrp-2lyr@" + "c" * 40}), bb)
    finally:
        monkeypatch.undo()
        importlib.reload(huggingface_hub.constants)
    assert torch.equal(_forward(got, bb), _forward(ours.eval(), bb))
    assert json.loads((snap / "config.json").read_text())["num_nextn_predict_layers"] == 2


# ----------------------------------------------------------------------------- errors whose advice recovers (issue 21)


def _offline_empty_hub(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    importlib.reload(huggingface_hub.constants)


def test_unfetchable_hub_head_names_mrp_pretrained_and_following_it_recovers(setup, tmp_path, monkeypatch):
    """The fetch error names mrp.pretrained (not model.local_dir, the backbone's) and a local directory; doing what
    it says (download the head into a directory, point mrp.pretrained at it) loads the head."""
    import shutil

    import huggingface_hub.constants

    prof, bb, ours, out = setup
    _offline_empty_hub(tmp_path, monkeypatch)
    try:
        with pytest.raises(CheckpointError) as e:
            stages.head(prof.replace({"mrp.pretrained": "heavyball/sdar-x-mrp-2lyr@" + "d" * 40}), bb)
    finally:
        monkeypatch.undo()
        importlib.reload(huggingface_hub.constants)
    msg = str(e.value)
    assert "\n" not in msg and "mrp.pretrained" in msg and "model.local_dir" not in msg
    local = "released/heavyball--sdar-x-mrp-2lyr"  # no placeholder: the printed commands run as they are
    assert f"--local-dir {local})" in msg and f"set mrp.pretrained: {local} " in msg and "<" not in msg
    assert "--revision " + "d" * 40 in msg
    monkeypatch.chdir(tmp_path)  # a relative mrp.pretrained is read from where the command runs
    shutil.copytree(out, tmp_path / local)  # what `huggingface-cli download --local-dir` writes
    got = stages.head(prof.replace({"mrp.pretrained": local}), bb, progress=False)
    assert torch.equal(_forward(got, bb), _forward(ours.eval(), bb))


def test_finished_head_of_another_backbone_names_a_fix_that_does_not_loop(tmp_runs):
    """A finished head whose recorded backbone is not the loaded one: rerunning the stage reuses the directory (the
    old advice looped); the error says to delete it, and doing so trains a head for this backbone."""
    import shutil

    from mrp_repro.mrp import BackboneMismatchError
    from mrp_repro.trajectories import model_fingerprint

    p = load_profile("smoke").replace({"mrp_training.steps": 2, "mrp_training.ckpt_every": 2,
                                       "trajectories.n_prompts": 4, "trajectories.shard_size": 4})  # fmt: skip
    bb = stages.random_backbone(p, std=0.2, seed=0)
    out = stages.train_head(p, bb, progress=False)
    meta_path = out / "head" / "mrp_config.json"
    meta = json.loads(meta_path.read_text())
    meta["backbone_hash"] = "0123456789abcdef"  # as if trained on another backbone
    meta_path.write_text(json.dumps(meta))
    done = json.loads((out / "done.json").read_text())  # ... and recorded so (an edit alone is corruption: rewritten)
    done["files"]["head/mrp_config.json"] = integrity.sha256(meta_path)
    (out / "done.json").write_text(json.dumps(done))
    for _ in range(2):  # the stage as the old advice said: the same error again
        with pytest.raises(BackboneMismatchError) as e:
            stages.train_head(p, bb, progress=False)
    msg = str(e.value)
    assert f"Delete {out} and rerun" in msg and "--allow-backbone-mismatch" in msg
    assert "0123456789abcdef" in msg and model_fingerprint(bb.model) in msg
    shutil.rmtree(out)  # the advice
    assert stages.train_head(p, bb, progress=False) == out
    assert json.loads(meta_path.read_text())["backbone_hash"] == model_fingerprint(bb.model)
    assert isinstance(stages.head(p, bb, progress=False), MRPHead)


# ----------------------------------------------------------------------------- resolved inputs (issue 21)


def _hub_snapshot(cache, repo, src_dir, commit):
    """A hub-cache snapshot of src_dir as huggingface_hub writes one: blobs named by their sha256, links to them."""
    import hashlib

    base = cache / f"models--{repo.replace('/', '--')}"
    snap = base / "snapshots" / commit
    snap.mkdir(parents=True)
    (base / "blobs").mkdir(exist_ok=True)
    for f in src_dir.iterdir():
        data = f.read_bytes()
        blob = base / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snap / f.name).symlink_to(blob)
    (base / "refs").mkdir(exist_ok=True)
    (base / "refs" / "main").write_text(commit)
    return snap


def test_inputs_record_commits_and_sha256s_of_a_hub_checkpoint(setup, tmp_path, monkeypatch, capsys):
    """A backbone and a released head in a hub cache at `main`: the record holds the commit each resolved to and the
    sha256 of each file (equal to hashing the bytes), prints the line that pins each, names a commit that moved since
    the cached results, and the runs rows carry the summary."""
    import hashlib

    import huggingface_hub.constants

    from mrp_repro import inputs
    from mrp_repro.checkpoint import save_backbone
    from mrp_repro.decoding import Static
    from mrp_repro.measure.runs import collect_runs

    prof, bb, ours, out = setup
    cache = tmp_path / "hub"
    a, b = "a" * 40, "b" * 40
    bdir = save_backbone(bb.model, tmp_path / "bb-src")
    _hub_snapshot(cache, "org/sdar-x", bdir, a)
    head_snap = _hub_snapshot(cache, "heavyball/sdar-x-mrp-2lyr", out, b)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    importlib.reload(huggingface_hub.constants)
    try:
        P = prof.replace({"model.source": "hub", "model.hub_id": "org/sdar-x", "model.revision": "main",
                          "mrp.pretrained": "heavyball/sdar-x-mrp-2lyr"})  # fmt: skip
        recs = {r["input"]: r for r in inputs.record(P)}
        err = capsys.readouterr().err
        assert recs["backbone"]["commit"] == a and recs["head"]["commit"] == b
        weights = (head_snap / "model.safetensors").read_bytes()
        assert recs["head"]["files"]["model.safetensors"] == hashlib.sha256(weights).hexdigest()
        assert recs["backbone"]["files"]["model.safetensors"] == hashlib.sha256(
            (bdir / "model.safetensors").read_bytes()).hexdigest()
        assert f"model.revision: {a}" in err and f"mrp.pretrained: heavyball/sdar-x-mrp-2lyr@{b}" in err
        assert inputs.pin_hints(inputs.resolve(P.replace({"model.revision": a}))) == [
            f"mrp.pretrained: heavyball/sdar-x-mrp-2lyr@{b}   # resolved `main` to this"]  # a pinned one needs none
        head, info = stages.pretrained_head(P, bb)
        assert info.commit == b
        runs = collect_runs(P, bb, head, n_prompts=1, benchmarks=[P.evaluation.benchmarks[0]],
                            settings=[("static", Static(1))])  # fmt: skip
        summary = inputs.summary(inputs.recorded(P))
        assert set(runs["inputs"]) == {summary} and f"@{b[:12]}#" in summary and f"@{a[:12]}#" in summary
        # `main` moves: the record says which input changed since the cached results
        c = "c" * 40
        _hub_snapshot(cache / "moved", "heavyball/sdar-x-mrp-2lyr", out, c)
        (cache / "models--heavyball--sdar-x-mrp-2lyr" / "snapshots" / c).symlink_to(
            cache / "moved" / "models--heavyball--sdar-x-mrp-2lyr" / "snapshots" / c)
        (cache / "models--heavyball--sdar-x-mrp-2lyr" / "refs" / "main").write_text(c)
        inputs.record(P)
        err = capsys.readouterr().err
        assert f"head (mrp.pretrained): commit {b} -> {c}" in err and "changed since its cached results" in err
    finally:
        monkeypatch.undo()
        importlib.reload(huggingface_hub.constants)


def test_a_flipped_byte_in_a_hub_cache_head_is_refused(setup, tmp_path, monkeypatch):
    """The hub names an LFS blob by its sha256: a byte flipped in the cached head's model.safetensors (same size,
    still a valid file) is an error naming the file, not a silent load reading as the pinned hash (before: loaded, and
    inputs.file_sha256 returned the blob's name)."""
    import huggingface_hub.constants

    from mrp_repro import inputs

    prof, bb, ours, out = setup
    sha = "d" * 40
    snap = _hub_snapshot(tmp_path / "hub", "heavyball/sdar-x-mrp-2lyr", out, sha)
    blob = (snap / "model.safetensors").resolve()
    data = bytearray(blob.read_bytes())
    data[-3] ^= 0x01  # the last head tensor's bytes
    blob.write_bytes(bytes(data))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    importlib.reload(huggingface_hub.constants)
    try:
        P = prof.replace({"mrp.pretrained": f"heavyball/sdar-x-mrp-2lyr@{sha}"})
        with pytest.raises(CheckpointError, match=r"model\.safetensors has sha256 .*not its hub blob's name"):
            stages.head(P, bb, progress=False)
        with pytest.raises(CheckpointError, match="not its hub blob's name"):
            inputs.file_sha256(snap / "model.safetensors", {})
        data[-3] ^= 0x01
        blob.write_bytes(bytes(data))  # restored: loads
        assert torch.equal(_forward(stages.head(P, bb, progress=False), bb), _forward(ours.eval(), bb))
    finally:
        monkeypatch.undo()
        importlib.reload(huggingface_hub.constants)
