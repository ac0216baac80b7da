"""Issue 29: nothing untrusted runs, nothing corrupted is reused.

A training checkpoint whose pickle would run code is refused at every loading path (and the code never runs); a
finished stage's outputs, packed SFT data and results CSVs are checked against their integrity records before reuse;
two processes never write one stage directory at once; a killed checkpoint generation is never reused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from mrp_repro import integrity, stages
from mrp_repro.checkpoint import CheckpointError, load_backbone
from mrp_repro.config import load_profile, repo_root
from mrp_repro.training.backbone import train_backbone
from mrp_repro.training.mrp import train_mrp
from mrp_repro.training.online import train_online


class Hostile:
    """Unpickling this runs `touch <marker>` (what a tampered checkpoint does with os.system)."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def plant(path: Path, marker: Path, keep: dict | None = None) -> None:
    """Replace a checkpoint with one whose pickle would run code, and update every record an attacker can reach
    (the directory's integrity.json, the sidecar), so that only safe loading stands between it and the code."""
    torch.save({**(keep or {}), "step": Hostile(marker)}, path)
    if (path.parent / integrity.MANIFEST).exists():
        integrity.seal(path.parent)
    if path.with_name(path.name + ".sha256.json").exists():
        integrity.write_sidecar(path, rows=0)


def refused(fn, path: Path, marker: Path) -> str:
    with pytest.raises(CheckpointError) as e:
        fn()
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg and "refused" in msg and "posix.system" in msg, msg
    assert "weights_only=False" not in msg  # torch's advice (run the pickle) is never relayed
    assert not marker.exists(), "the pickle ran"
    return msg


@pytest.fixture
def traj(tmp_path):
    from mrp_repro.trajectories import collect

    p = load_profile("smoke").replace({"mrp_training.steps": 4, "mrp_training.ckpt_every": 2,
                                       "mrp.train_source": "gt-multi", "trajectories.n_prompts": 8})  # fmt: skip
    bb = stages.random_backbone(p, std=0.2, seed=0)
    items = [([5, 6, 7, 8], [9, 10, 11, 12, 13, 14, 15, 16, 9, 10]) for _ in range(12)]
    d = tmp_path / "traj"
    collect(bb.model, bb.mask_id, items, "gt-multi", d, 4, seed=0, progress=False, block_size=8, eos_ids=bb.eos_ids)
    return p, SimpleNamespace(model=bb.model, mask_id=bb.mask_id), d


# ----------------------------------------------------------------------------- 1. safe loading


def test_backbone_resume_refuses_a_checkpoint_that_would_run_code(tmp_path, smoke_profile):
    p = smoke_profile.replace({"backbone_training.steps": 4, "backbone_training.ckpt_every": 100})
    out = tmp_path / "bb"
    assert not train_backbone(p, out, progress=False, stop_after=2)["finished"]
    state, marker = out / "ckpt-2" / "state.pt", tmp_path / "MARKER"
    plant(state, marker)
    msg = refused(lambda: train_backbone(p, out, progress=False), state, marker)
    assert f"delete {out / 'ckpt-2'} and rerun" in msg


def test_head_resume_refuses_a_checkpoint_that_would_run_code(tmp_path, traj):
    p, bb, d = traj
    out = tmp_path / "head"
    train_mrp(p, bb, d, out, progress=False, stop_after=2)
    marker = tmp_path / "MARKER"
    plant(out / "ckpt.pt", marker)
    refused(lambda: train_mrp(p, bb, d, out, progress=False), out / "ckpt.pt", marker)


def test_online_resume_refuses_a_checkpoint_that_would_run_code(tmp_path):
    from test_online import _bb, _profile, _sft_dir

    p = _profile(_sft_dir(tmp_path, 48), **{"mrp_training.steps": 4, "mrp_training.ckpt_every": 2})
    out = tmp_path / "online"
    train_online(p, _bb(), out, progress=False, stop_after=2)
    marker = tmp_path / "MARKER"
    plant(out / "ckpt.pt", marker)
    refused(lambda: train_online(p, _bb(), out, progress=False), out / "ckpt.pt", marker)


def test_rewriting_a_damaged_head_from_ckpt_refuses_a_checkpoint_that_would_run_code(tmp_runs, traj):
    p, _, _ = traj
    bb = stages.random_backbone(p, std=0.2, seed=0)
    out = stages.train_head(p, bb, progress=False)
    marker = tmp_runs / "MARKER"
    st = torch.load(out / "ckpt.pt", weights_only=True)
    plant(out / "ckpt.pt", marker, keep={k: v for k, v in st.items() if k != "step"})
    (out / "head" / "mrp.safetensors").write_bytes(b"cut")  # the finished head is damaged: rewritten from ckpt.pt
    refused(lambda: stages.train_head(p, bb, progress=False), out / "ckpt.pt", marker)


def test_a_changed_head_checkpoint_is_named_before_it_is_loaded(tmp_path, traj):
    p, bb, d = traj
    out = tmp_path / "head"
    train_mrp(p, bb, d, out, progress=False, stop_after=2)
    data = bytearray((out / "ckpt.pt").read_bytes())
    data[len(data) // 2] ^= 0x01  # same size: the zip reader does not notice a flipped tensor byte
    (out / "ckpt.pt").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"ckpt\.pt does not match its recorded sha256.*delete it and rerun"):
        train_mrp(p, bb, d, out, progress=False)


# ----------------------------------------------------------------------------- 2. manifests, not globs


def test_a_checkpoint_loads_only_the_files_its_manifest_lists(tmp_path, smoke_profile):
    p = smoke_profile.replace({"backbone_training.steps": 2, "backbone_training.ckpt_every": 100})
    out = tmp_path / "bb"
    train_backbone(p, out, progress=False)
    model = out / "model"
    assert sorted(json.loads((model / integrity.MANIFEST).read_text())["files"]) == [
        "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]  # fmt: skip
    load_backbone(model)
    (model / "special_tokens_map.json").write_text('{"mask_token": "<eos>"}')
    with pytest.raises(CheckpointError, match=r"special_tokens_map\.json is not in the record"):
        load_backbone(model)
    (model / "special_tokens_map.json").unlink()
    (model / "zz.safetensors").write_bytes((model / "model.safetensors").read_bytes())
    with pytest.raises(CheckpointError, match=r"zz\.safetensors"):
        load_backbone(model)


def test_a_directory_without_a_manifest_loads_no_stray_safetensors(tmp_path, smoke_profile):
    from mrp_repro.checkpoint import save_backbone

    d = save_backbone(stages.random_backbone(smoke_profile, seed=0).model, tmp_path / "local")
    load_backbone(d)
    (d / "zz.safetensors").write_bytes((d / "model.safetensors").read_bytes())  # before: globbed and loaded
    with pytest.raises(CheckpointError, match=r"zz\.safetensors is not a file of this checkpoint"):
        load_backbone(d)


def test_file_sha256_hashes_bytes_and_a_rewrite_in_place_is_hashed_again(tmp_path):
    from mrp_repro import inputs

    f = tmp_path / "w.bin"
    f.write_bytes(b"a" * 64)
    cache: dict = {}
    first = inputs.file_sha256(f, cache)
    st = f.stat()
    f.write_bytes(b"b" * 64)  # same size; mtime put back as it was
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert inputs.file_sha256(f, cache) != first  # keyed by ctime and inode too, not (path, size, mtime) alone
    # a hub-cache link: its blob's sha256 name is checked, never taken for the hash
    blob = tmp_path / "blobs" / integrity.sha256(f)
    blob.parent.mkdir()
    blob.write_bytes(f.read_bytes())
    link = tmp_path / "model.safetensors"
    link.symlink_to(blob)
    assert inputs.file_sha256(link, {}) == blob.name
    blob.write_bytes(b"c" + b"b" * 63)
    with pytest.raises(CheckpointError, match="not its hub blob's name"):
        inputs.file_sha256(link, {})


# ----------------------------------------------------------------------------- 3. integrity records


def test_a_flipped_byte_in_a_cached_head_is_named_and_rewritten_from_its_checkpoint(tmp_runs, capsys):
    p = load_profile("smoke").replace({"mrp_training.steps": 3, "mrp_training.ckpt_every": 3,
                                       "mrp.train_source": "gt-multi", "trajectories.n_prompts": 8})  # fmt: skip
    bb = stages.random_backbone(p, std=0.2, seed=0)
    out = stages.train_head(p, bb, progress=False)
    weights = out / "head" / "mrp.safetensors"
    good = weights.read_bytes()
    ck = (out / "ckpt.pt").stat().st_mtime_ns
    data = bytearray(good)
    data[-5] ^= 0x01  # the last tensor's bytes: same size, still a valid safetensors file (before: reused)
    weights.write_bytes(bytes(data))
    capsys.readouterr()
    assert stages.train_head(p, bb, progress=False) == out
    assert f"not reusing {out}: {weights} has sha256" in capsys.readouterr().err
    assert weights.read_bytes() == good and (out / "ckpt.pt").stat().st_mtime_ns == ck  # no step retrained


def test_a_results_csv_cut_short_is_not_reused(tmp_runs, capsys):
    from mrp_repro.report import grids, paper

    p = load_profile("smoke")
    df = pd.DataFrame({"prompt_index": range(160), "correct": [True, False] * 80})
    path = paper.save_result(p, "adjacent", df)
    assert len(paper.load_result(p, "adjacent")) == 160
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:81]))  # header + 80 of 160 rows, cut at a line boundary (before: "80 rows")
    assert paper.load_result(p, "adjacent") is None and "does not match its recorded sha256" in capsys.readouterr().err
    calls = []
    again = paper.cached_result(p, "adjacent", lambda: calls.append(1) or df)
    assert calls == [1] and len(again) == 160
    # the grids' cache: a stored grid whose CSV was cut is not "stored"
    spec = {"n_prompts": 1, "settings": [], "batch_size": 1}
    paper.save_result(p, "backbone_runs", df)
    (grids._spec_path(p, "backbone_runs")).write_text(json.dumps(grids._spec_record(spec)))
    assert grids.stored(p, "backbone_runs", spec)
    gpath = paper.result_path(p, "backbone_runs")
    gpath.write_text("".join(gpath.read_text().splitlines(keepends=True)[:81]))
    assert not grids.stored(p, "backbone_runs", spec)


def test_a_flipped_byte_in_packed_sft_data_is_repacked(tmp_path, capsys):
    from test_online import _bb, _profile, _sft_dir

    from mrp_repro.tasks.sft import SFTSourceError, open_packed
    from mrp_repro.training.online import load_packed

    p = _profile(_sft_dir(tmp_path, 48))
    data, sha = load_packed(p, _bb(), cache_parent=tmp_path / "runs")
    want = data.ids.clone()  # data maps the file: it would show the flipped byte too
    (cache,) = (tmp_path / "runs").glob("sft-packed-*")
    ids = cache / "ids.bin"
    good = ids.read_bytes()
    b = bytearray(good)
    b[8] ^= 0x01
    ids.write_bytes(bytes(b))
    with pytest.raises(SFTSourceError, match=r"ids\.bin has sha256 .*meta\.json records"):
        open_packed(cache)  # before: trained on silently
    capsys.readouterr()
    again, sha2 = load_packed(p, _bb(), cache_parent=tmp_path / "runs")
    assert "not reusing" in capsys.readouterr().err and ids.read_bytes() == good and sha2 == sha
    assert torch.equal(again.ids, want)


# ----------------------------------------------------------------------------- 4. atomic and locked


def test_two_writers_never_share_a_temporary_name(tmp_path):
    target = tmp_path / "ckpt.pt"
    with integrity.atomic_file(target) as a, integrity.atomic_file(target) as b:
        assert a != b and a.parent == b.parent == tmp_path and a.name.startswith(".")
        a.write_text("a")
        b.write_text("b")
    assert target.read_text() == "a" and [f.name for f in tmp_path.iterdir()] == ["ckpt.pt"]


def test_a_second_stage_on_a_locked_directory_names_the_holder_and_does_nothing(tmp_runs):
    """Two processes, one runs folder: a second `stages backbone` exits with one line naming the first's PID and
    writes nothing, and so does a second head stage (before: both trained, or one died on a fixed temporary name)."""
    p = load_profile("smoke")
    bb = stages.random_backbone(p, std=0.2, seed=0)
    out, head_out = stages.backbone_dir(p), stages.head_dir(p, bb)
    env = {**os.environ, "MRP_REPRO_RUNS": str(tmp_runs)}
    hold = ("import sys, time; from mrp_repro import integrity\n"
            "with integrity.stage_lock(sys.argv[1], 'test'), integrity.stage_lock(sys.argv[2], 'test'):\n"
            "    print('held', flush=True); time.sleep(60)")  # fmt: skip
    holder = subprocess.Popen([sys.executable, "-c", hold, str(out), str(head_out)], env=env, stdout=subprocess.PIPE,
                              text=True, cwd=repo_root())  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        t0 = time.time()
        r = subprocess.run([sys.executable, "-m", "mrp_repro.stages", "backbone", "--profile", "smoke",
                            "--no-progress"], env=env, capture_output=True, text=True, cwd=repo_root(),
                           timeout=120)  # fmt: skip
        assert r.returncode == 2, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and f"PID {holder.pid}" in lines[0] and str(out) in lines[0], r.stderr
        assert not (out / "done.json").exists() and not list(out.glob("ckpt-*")) and time.time() - t0 < 60
        with pytest.raises(integrity.StageLocked, match=f"PID {holder.pid}"):
            stages.train_head(p, bb, progress=False)
        assert not (head_out / "done.json").exists() and not list((tmp_runs / "smoke").glob("trajectories-*"))
    finally:
        holder.kill()
        holder.wait()
    with integrity.stage_lock(out, "test"):  # the kernel dropped the killed holder's lock: no stale lock
        pass


def test_a_killed_checkpoint_generation_is_never_reused(tmp_runs, monkeypatch):
    """A generation killed midway leaves nothing at the checkpoint's path; a half-written one of an older version
    (config.json there, tokenizer missing) is rewritten, not reused. The writer is a small stand-in of _write (the
    real one is exercised by test_sdar_mini): what is tested is how `write` and `ensure` treat its directory."""
    from mrp_repro import sdar_mini
    from mrp_repro.checkpoint import save_backbone
    from mrp_repro.model import ModelConfig, SDARModel
    from mrp_repro.tokenizer import build_tiny_tokenizer, save_tokenizer

    cfg = ModelConfig(**{**sdar_mini.MINI_CONFIG, "vocab_size": 64, "hidden_size": 16, "intermediate_size": 32,
                         "head_dim": 4})  # fmt: skip
    tag = {"generator_version": sdar_mini.GENERATOR_VERSION}
    calls = []

    def small(out, name, std, kill=False):
        calls.append(out)
        save_backbone(SDARModel(cfg), out / "backbone", extra_config=tag)
        if kill:  # killed after the backbone's weights, before its tokenizer
            raise KeyboardInterrupt
        save_tokenizer(build_tiny_tokenizer("abc"), out / "backbone")
        integrity.seal(out / "backbone")

    monkeypatch.setattr(sdar_mini, "_write", lambda out, name, std: small(out, name, std, kill=True))
    with pytest.raises(KeyboardInterrupt):
        sdar_mini.ensure("runs/sdar-mini/checkpoint/backbone")
    d = tmp_runs / "sdar-mini" / "checkpoint"
    assert not d.exists() and not [f for f in d.parent.iterdir() if f.name != ".lock"]  # nothing half-written
    (d / "backbone").mkdir(parents=True)  # as an older version left it: config.json written, the rest missing
    (d / "backbone" / "config.json").write_text(json.dumps(tag))
    monkeypatch.setattr(sdar_mini, "_write", small)
    calls.clear()
    p = sdar_mini.ensure("runs/sdar-mini/checkpoint/backbone")  # before: reused (it checked config.json only)
    assert len(calls) == 1 and integrity.verify_dir(p, "") is not None and load_backbone(p).config.hidden_size == 16
    assert sdar_mini.ensure("runs/sdar-mini/checkpoint/backbone") == p and len(calls) == 1  # whole: reused
    (p / "tokenizer.json").unlink()
    sdar_mini.ensure("runs/sdar-mini/checkpoint/backbone")
    assert len(calls) == 2 and (p / "tokenizer.json").exists()
