"""Damaged inputs and what runs leave behind (issue 39, findings 5 and 6): a truncated local tokenizer or SFT file is
one line naming it, a hub file is hashed before its content is read, a killed generation's temporary directory is
removed by the next run, outputs keep the umask's modes, and printed advice runs as printed.

Before the fix: a truncated tokenizer.json was a 31-line JSONDecodeError naming no file, a truncated SFT .jsonl an
81-line datasets traceback naming no file; a corrupted hub config.json was read first, so the error advised adopting
its value (`set block_size: <the corrupted value>`); a killed sdar-mini generation left a 159 MB temporary directory
that no run removed; every output was 0644 / 0600 / 0700 whatever the umask; reproduce advised `--profile <profile>`.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from mrp_repro import integrity, released, stages
from mrp_repro.checkpoint import CheckpointError, save_backbone
from mrp_repro.cli import run_cli
from mrp_repro.config import load_profile
from mrp_repro.model import SDARModel
from mrp_repro.mrp import MRPHead
from mrp_repro.tokenizer import build_tiny_tokenizer, save_tokenizer


def _cut(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def _one_line(fn, capsys) -> str:
    """fn run as a command-line entry point: its one `error:` line (status 2, no traceback)."""
    with pytest.raises(SystemExit) as e:
        run_cli(lambda argv: fn(), [])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    return err.strip()


# ----------------------------------------------------------------------------- a damaged local tokenizer


@pytest.fixture
def local_model(tmp_path, smoke_profile):
    """A local model directory (model.source: local) as a user has one: config, weights and tokenizer files, no
    record of ours; and the profile that loads it."""
    bb = stages.random_backbone(smoke_profile, std=0.2, seed=0)
    d = save_backbone(bb.model, tmp_path / "my-model")
    save_tokenizer(bb.tokenizer, d)
    prof = smoke_profile.replace({"model.source": "local", "model.local_dir": str(d)})
    return d, prof


@pytest.mark.parametrize("name", ["tokenizer.json", "tokenizer_config.json"])
def test_a_truncated_tokenizer_file_of_a_local_model_is_one_line_naming_it(local_model, capsys, name):
    d, prof = local_model
    assert stages.backbone(prof).tokenizer is not None  # whole, it loads
    _cut(d / name)
    line = _one_line(lambda: stages.backbone(prof), capsys)
    assert f"{d / name} is truncated or corrupted" in line and "restore" in line, line


def test_a_truncated_tokenizer_json_loaded_directly_names_the_file(tmp_path, capsys):
    from mrp_repro.tokenizer import load_tokenizer

    d = save_tokenizer(build_tiny_tokenizer("abc"), tmp_path / "tok")
    _cut(d / "tokenizer.json")
    line = _one_line(lambda: load_tokenizer(d, fix="copy it again from the model"), capsys)
    assert f"{d / 'tokenizer.json'} is truncated or corrupted (JSONDecodeError" in line
    assert line.endswith("copy it again from the model (run with --debug for the traceback)"), line


# ----------------------------------------------------------------------------- a damaged local SFT file


def _sft_records(n=40):
    return [{"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a" * i}]}
            for i in range(n)]  # fmt: skip


def test_a_truncated_local_sft_jsonl_names_the_file_and_the_line(tmp_path, capsys, monkeypatch):
    from mrp_repro.tasks.sft import load_sft_records

    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    d = tmp_path / "sft"
    d.mkdir()
    (d / "a.jsonl").write_text("\n".join(json.dumps(r) for r in _sft_records()) + "\n")
    bad = d / "b.jsonl"
    bad.write_text("\n".join(json.dumps(r) for r in _sft_records()) + "\n")
    assert len(load_sft_records(str(d))) == 80
    _cut(bad, 0.7)  # cut in the middle of a line, as a copy that stopped
    line = _one_line(lambda: load_sft_records(str(d)), capsys)
    n = len(bad.read_text().splitlines())
    assert f"{bad} line {n} is not valid JSON (cut short or corrupted" in line and "restore the file" in line, line


def test_a_truncated_local_sft_parquet_names_the_file(tmp_path, capsys, monkeypatch):
    from mrp_repro.tasks.sft import load_sft_records

    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    d = tmp_path / "sft"
    d.mkdir()
    pd.DataFrame({"prompt": [f"q{i}" for i in range(50)], "response": ["a"] * 50}).to_parquet(d / "a.parquet")
    _cut(d / "a.parquet", 0.6)
    line = _one_line(lambda: load_sft_records(str(d)), capsys)
    assert f"{d / 'a.parquet'} is not a readable parquet file" in line, line


def test_a_truncated_gsm8k_train_file_names_the_file_and_the_line(tmp_path, capsys):
    from mrp_repro.tasks.sft import load_sft_records

    f = tmp_path / "gsm8k" / "train.jsonl"
    f.parent.mkdir()
    f.write_text("\n".join(json.dumps({"question": f"q{i}", "answer": f"#### {i}"}) for i in range(20)) + "\n")
    assert len(load_sft_records("gsm8k", data_dir=tmp_path)) == 20
    _cut(f, 0.55)
    line = _one_line(lambda: load_sft_records("gsm8k", data_dir=tmp_path), capsys)
    assert f"{f} line " in line and "is not valid JSON" in line, line
    f.write_bytes(b'{"question": "caf\xe9", "answer": "#### 1"}\n')
    line = _one_line(lambda: load_sft_records("gsm8k", data_dir=tmp_path), capsys)
    assert f"{f} is not UTF-8 text" in line, line


# ----------------------------------------------------------------------------- hash before read


def _hub_snapshot(cache: Path, repo: str, src: Path, commit: str) -> Path:
    """A hub-cache snapshot of src as huggingface_hub writes it: *.safetensors as blobs named by their sha256 (LFS),
    the rest by their git sha1, each file of the snapshot a link to its blob."""
    base = cache / f"models--{repo.replace('/', '--')}"
    snap = base / "snapshots" / commit
    snap.mkdir(parents=True)
    (base / "blobs").mkdir(exist_ok=True)
    for f in src.iterdir():
        if f.name == integrity.MANIFEST:
            continue
        data = f.read_bytes()
        name = hashlib.sha256(data).hexdigest() if f.suffix == ".safetensors" else integrity.git_blob_sha1(f)
        (base / "blobs" / name).write_bytes(data)
        (snap / f.name).symlink_to(base / "blobs" / name)
    (base / "refs").mkdir(exist_ok=True)
    (base / "refs" / "main").write_text(commit)
    return snap


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    importlib.reload(huggingface_hub.constants)
    yield tmp_path / "hub"
    monkeypatch.undo()
    importlib.reload(huggingface_hub.constants)


def _rewrite_json(link: Path, **changes) -> None:
    """Change a value in the blob a snapshot file links to (a corruption the blob's name no longer matches)."""
    blob = link.resolve()
    cfg = json.loads(blob.read_text())
    cfg.update(changes)
    blob.write_text(json.dumps(cfg, indent=2))


def test_a_corrupted_hub_config_of_a_released_head_is_named_before_its_value_is_used(tmp_path, tmp_runs, hub_cache):
    p = load_profile("smoke")
    bb = stages.random_backbone(p, std=0.2, seed=0)
    head = MRPHead(bb.model.config, 2, "residual").init_weights("normal", 0.2, torch.Generator().manual_seed(3))
    out = released.save_released(bb.model, head, tmp_path / "sdar-x-mrp-2lyr", bb.block_size)
    snap = _hub_snapshot(hub_cache, "heavyball/sdar-x-mrp-2lyr", out, "c" * 40)
    spec = "heavyball/sdar-x-mrp-2lyr"
    assert released.load_released_head(spec, bb, num_layers=2)[0].num_layers == 2  # intact: loads
    _rewrite_json(snap / "config.json", block_size=bb.block_size * 2)
    with pytest.raises(CheckpointError) as e:
        released.load_released_head(spec, bb, num_layers=2)
    msg = str(e.value)
    assert f"{snap / 'config.json'} has git sha1" in msg and "not its hub blob's name" in msg, msg
    # the paths hold pytest's run number ("pytest-162" holds "16"), so the value is looked for outside them
    words = msg.replace(str(tmp_path), "<tmp>").replace(str(hub_cache), "<hub>")
    assert "set block_size" not in words and not re.search(rf"\b{bb.block_size * 2}\b", words), msg


def test_a_corrupted_hub_config_of_a_backbone_is_named_before_it_is_read(tmp_path, hub_cache):
    from mrp_repro.checkpoint import load_backbone

    p = load_profile("smoke")
    bb = stages.random_backbone(p, std=0.2, seed=0)
    src = save_backbone(bb.model, tmp_path / "bb")
    snap = _hub_snapshot(hub_cache, "org/sdar-x", src, "d" * 40)
    assert load_backbone("org/sdar-x").config.hidden_size == bb.model.config.hidden_size
    _rewrite_json(snap / "config.json", model_type="llama")
    with pytest.raises(CheckpointError) as e:
        load_backbone("org/sdar-x")
    msg = str(e.value)
    assert f"{snap / 'config.json'} has git sha1" in msg and "model_type" not in msg, msg


# ----------------------------------------------------------------------------- temporaries of a killed run


def test_a_killed_generations_temporary_directory_is_removed_by_the_next(tmp_runs, monkeypatch, capsys):
    """A SIGKILL leaves atomic_dir's `.checkpoint.<random>.tmp` (no finally runs); the next generation, holding the
    lock, removes it. The writer is a small stand-in of _write (the real one: tests/test_sdar_mini.py)."""
    from mrp_repro import sdar_mini
    from mrp_repro.model import ModelConfig, SDARModel

    parent = tmp_runs / "sdar-mini"
    stale = parent / ".checkpoint.k1ll3d.tmp"
    (stale / "backbone").mkdir(parents=True)
    (stale / "backbone" / "model.safetensors").write_bytes(b"\0" * 1_000_000)  # what a killed write left
    old = parent / ".checkpoint.x.old"
    old.mkdir()
    keep = parent / ".other.tmp"  # not a temporary of the checkpoint: left alone
    keep.write_text("x")
    cfg = ModelConfig(**{**sdar_mini.MINI_CONFIG, "vocab_size": 64, "hidden_size": 16, "intermediate_size": 32,
                         "head_dim": 4})  # fmt: skip

    def small(out, name, std):
        save_backbone(SDARModel(cfg), out / "backbone", extra_config={"generator_version": sdar_mini.GENERATOR_VERSION})
        save_tokenizer(build_tiny_tokenizer("abc"), out / "backbone")
        integrity.seal(out / "backbone")

    monkeypatch.setattr(sdar_mini, "_write", small)
    sdar_mini.ensure("runs/sdar-mini/checkpoint/backbone")
    assert not stale.exists() and not old.exists() and keep.exists()
    assert f"removed {stale}" in capsys.readouterr().out


def test_remove_stale_temps_takes_only_the_targets_temporaries(tmp_path):
    target = tmp_path / "model"
    for name in (".model.abc.tmp", ".model.def.old", ".model.abc.tmpx", ".modelx.abc.tmp", "model.abc.tmp"):
        (tmp_path / name).mkdir()
    (tmp_path / ".model.f.tmp").write_text("file")
    gone = sorted(p.name for p in integrity.remove_stale_temps(target))
    assert gone == [".model.abc.tmp", ".model.def.old", ".model.f.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".model.abc.tmpx", ".modelx.abc.tmp", "model.abc.tmp"]


def test_remove_stale_temps_in_takes_every_atomic_temporary_of_the_directory(tmp_path):
    for name in (".ckpt-100.k1ll3d.tmp", ".model.x.old", ".shard-00003.parquet.ab12.tmp", ".lock", ".other.tmp",
                 "ckpt-100", "done.json.tmp"):  # fmt: skip
        (tmp_path / name).mkdir()
    gone = sorted(p.name for p in integrity.remove_stale_temps_in(tmp_path))
    assert gone == [".ckpt-100.k1ll3d.tmp", ".model.x.old", ".shard-00003.parquet.ab12.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lock", ".other.tmp", "ckpt-100", "done.json.tmp"]


def _stale(d: Path) -> Path:
    """What a SIGKILL inside atomic_dir leaves in a run directory (no finally runs)."""
    stale = d / ".ckpt-2.k1ll3d.tmp"
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(b"\0" * 1000)
    return stale


def test_each_stage_removes_a_killed_runs_temporaries_from_its_directory(tmp_runs, monkeypatch):
    """Backbone training, trajectory collection and head training each hold their directory's lock and clear what a
    killed run of theirs left there (it was left for good: nothing else removes a run directory's dot-names)."""
    from mrp_repro.training import backbone as tb

    p = load_profile("smoke").replace({"backbone_training.steps": 2, "backbone_training.ckpt_every": 1})
    out = tmp_runs / "bb"
    stale = _stale(out)
    tb.train_backbone(p, out, progress=False)
    assert not stale.exists() and (out / "done.json").exists()

    bb = stages.random_backbone(p)
    monkeypatch.setattr(stages, "_trajectories", lambda profile, bb, source, out, progress: out)
    monkeypatch.setattr(stages, "_train_head", lambda profile, bb, out, progress, allow: out)
    d = stages.trajectories_dir(p, bb, "gt")
    stale = _stale(d)
    assert stages.trajectories(p, bb, "gt", progress=False) == d and not stale.exists()
    d = stages.head_dir(p, bb)
    stale = _stale(d)
    assert stages.train_head(p, bb, progress=False) == d and not stale.exists()



def test_a_killed_sft_packs_temporaries_are_removed_by_the_next_pack(tmp_path):
    """The SFT pack cache (training.online.load_packed) is rebuilt under its lock after clearing what a killed pack
    left there (a half-written ids.bin temporary was left for good)."""
    from test_online import _bb, _profile, _sft_dir

    from mrp_repro.training.online import load_packed

    p = _profile(_sft_dir(tmp_path, 48))
    load_packed(p, _bb(), cache_parent=tmp_path / "runs")
    (cache,) = (tmp_path / "runs").glob("sft-packed-*")
    (cache / "meta.json").unlink()  # the killed pack never wrote it: the next load packs again
    stale = cache / ".ids.bin.k1ll3d.tmp"
    stale.write_bytes(b"\0" * 1000)
    load_packed(p, _bb(), cache_parent=tmp_path / "runs")
    assert not stale.exists() and (cache / "meta.json").exists()


def test_a_killed_tokenizer_caches_temporaries_are_removed_by_the_next_build(tmp_path, monkeypatch):
    """The offline Qwen tokenizer's cache is written atomically under its directory's lock, after clearing a killed
    writer's temporaries (this one's and the earlier `tokenizer.tmp<pid>` names); a cache another process holds is
    left alone and the tokenizer still builds."""
    from mrp_repro import tokenizer as tk

    monkeypatch.setenv("MRP_REPRO_CACHE", str(tmp_path / "cache"))
    d = tk._cache_dir()
    d.mkdir(parents=True)
    stale = [d / ".tokenizer.json.k1ll3d.tmp", d / "tokenizer.tmp4242"]
    for f in stale:
        f.write_text("{")
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time; fd = os.open(sys.argv[1], "
                               "os.O_RDWR | os.O_CREAT); fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); "
                               "time.sleep(60)", str(d / ".lock")], stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        tok = tk.build_qwen_tokenizer_offline()
        assert all(f.exists() for f in stale) and not (d / "tokenizer.json").exists()  # held: not cached
    finally:
        holder.kill()
        holder.wait()
    assert tk.build_qwen_tokenizer_offline().encode("def f(x):") == tok.encode("def f(x):")
    assert not any(f.exists() for f in stale) and (d / "tokenizer.json").is_file()


# ----------------------------------------------------------------------------- modes follow the umask


def _small_config():
    from mrp_repro.model import ModelConfig

    return ModelConfig(vocab_size=16, hidden_size=8, intermediate_size=16, num_layers=1, num_heads=2, num_kv_heads=1,
                       head_dim=4)  # fmt: skip


@pytest.fixture(params=[0o002, 0o022, 0o077])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_outputs_get_the_modes_the_umask_gives(tmp_path, umask):
    from mrp_repro.report import tables
    from mrp_repro.runtime import write_json_atomic

    with integrity.atomic_file(tmp_path / "f.bin") as tmp:
        tmp.write_bytes(b"x")
    with integrity.atomic_dir(tmp_path / "d") as tmp:
        (tmp / "inner").write_text("x")
    write_json_atomic(tmp_path / "done.json", {"a": 1})
    # a checkpoint's weights: safetensors replaces the temporary file with its own (0600 before the fix)
    save_backbone(SDARModel(_small_config()), tmp_path / "ckpt")
    tables.save_table(pd.DataFrame({"benchmark": ["x"]}), tmp_path / "figs", "t")
    want_file, want_dir = 0o666 & ~umask, 0o777 & ~umask
    got = {p.name: _mode(p) for p in (tmp_path / "f.bin", tmp_path / "done.json", tmp_path / "figs" / "t.csv",
                                      tmp_path / "figs" / "COLUMNS.md", tmp_path / "ckpt" / "model.safetensors",
                                      tmp_path / "ckpt" / "config.json")}  # fmt: skip
    assert got == dict.fromkeys(got, want_file), (oct(umask), {k: oct(v) for k, v in got.items()})
    assert _mode(tmp_path / "d") == want_dir, oct(_mode(tmp_path / "d"))
    assert integrity.file_mode() == want_file and integrity.dir_mode() == want_dir


def test_torchrun_log_directories_get_the_umasks_mode(tmp_path, umask, monkeypatch):
    from mrp_repro import distributed

    monkeypatch.setattr(distributed, "_run_showing_stderr", lambda cmd, env, timeout_s: (0, ""))
    distributed.launch("mrp_repro.stages", ["backbone"], 2, tmp_path / "logs")
    (run_dir,) = (tmp_path / "logs").iterdir()
    assert _mode(run_dir) == 0o777 & ~umask, oct(_mode(run_dir))


# ----------------------------------------------------------------------------- advice runs as printed


def test_reproduces_rerun_advice_is_the_command_with_the_profile_given(tmp_path, tmp_runs, monkeypatch, capsys):
    """A notebook fails: the printed rerun command names the profile as given (a path with a space here), quoted,
    and runs as printed: its --profile loads and its --only selects the failed notebook."""
    from mrp_repro import reproduce

    prof = tmp_path / "my profiles" / "mine.yaml"
    prof.parent.mkdir()
    prof.write_text("extends: smoke\nname: mine\n")

    def fail(nb, profile, param, kernel=None, parameters=None):
        raise RuntimeError("boom")

    monkeypatch.setattr(reproduce, "run_notebook", fail)
    assert reproduce.main(["--profile", str(prof), "--only", "00"]) == 1
    err = capsys.readouterr().err
    line = next(ln for ln in err.splitlines() if "rerun only this notebook:" in ln)
    argv = shlex.split(line.split("rerun only this notebook: ", 1)[1])
    assert argv[:3] == ["python", "-m", "mrp_repro.reproduce"] and "<" not in line, line
    assert argv[argv.index("--profile") + 1] == str(prof) and argv[argv.index("--only") + 1] == "00"
    assert load_profile(argv[argv.index("--profile") + 1]).name == "mine"
    assert [nb.name[:2] for nb in reproduce.notebooks(argv[argv.index("--only") + 1:])] == ["00"]


def test_a_missing_or_unreadable_head_names_the_profiles_command(tmp_path, smoke_profile):
    """stages loads a head with its profile's command as the advice (it was `--profile <profile>`)."""
    from mrp_repro.mrp import HeadNotFoundError, save_head

    bb = stages.random_backbone(smoke_profile, std=0.2, seed=0)
    with pytest.raises(HeadNotFoundError) as e:
        stages._load_head(bb, tmp_path / "mrp-x", False)
    assert "python -m mrp_repro.stages head --profile smoke)" in str(e.value) and "<" not in str(e.value)
    head = MRPHead(bb.model.config, 1, "residual").init_weights("normal", 0.2, torch.Generator().manual_seed(0))
    save_head(head, tmp_path / "mrp-x" / "head")
    (tmp_path / "mrp-x" / "head" / "mrp_config.json").write_text("{cut")
    with pytest.raises(CheckpointError) as e:
        stages._load_head(bb, tmp_path / "mrp-x", False)
    assert str(e.value).endswith("and rerun python -m mrp_repro.stages head --profile smoke"), str(e.value)


def test_reproduce_nproc_auto_is_a_rank_per_core_on_a_cpu_and_one_when_retraining(monkeypatch):
    """--nproc auto (make reproduce's default): the CPU cores this process may use, at most MAX_AUTO_RANKS; 1 with
    $MRP_REPRO_FROM_SCRATCH (published heads are compared bit for bit with one-process training) or on a GPU."""
    import os

    from mrp_repro import reproduce, runtime

    monkeypatch.delenv(runtime.FROM_SCRATCH_ENV, raising=False)
    monkeypatch.setenv("MRP_REPRO_DEVICE", "cpu")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert reproduce.auto_nproc() == 2
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    assert reproduce.auto_nproc() == reproduce.MAX_AUTO_RANKS
    monkeypatch.setenv(runtime.FROM_SCRATCH_ENV, "1")
    assert reproduce.auto_nproc() == 1
    monkeypatch.delenv(runtime.FROM_SCRATCH_ENV)
    monkeypatch.setattr(runtime, "pick_device", lambda requested=None: torch.device("cuda"))
    assert reproduce.auto_nproc() == 1


def test_reproduce_runs_the_heavy_stages_on_auto_ranks_unless_notebooks_are_named(monkeypatch, tmp_runs):
    """reproduce.main with no --nproc: heavy_stages on auto_nproc() ranks before the notebooks; with --only the named
    notebooks run as they are (no heavy stages); --nproc 1 runs none."""
    from mrp_repro import reproduce

    calls = []
    monkeypatch.setattr(reproduce, "auto_nproc", lambda: 2)
    monkeypatch.setattr(reproduce, "heavy_stages", lambda profile, param, nproc: calls.append(nproc))
    monkeypatch.setattr(reproduce, "run_notebook", lambda *a, **k: None)
    monkeypatch.setattr(reproduce, "notebooks", lambda only=None: [Path("notebooks/00_environment.ipynb")])
    monkeypatch.setattr("mrp_repro.report.tables.write_glossary", lambda figs: (Path("COLUMNS.md"), []))
    refreshed = []  # claims.md's provenance paragraph, rewritten after the last notebook of every run
    monkeypatch.setattr("mrp_repro.report.verdicts.refresh_provenance", refreshed.append)
    assert reproduce.main(["--profile", "smoke"]) == 0 and calls == [2]
    assert reproduce.main(["--profile", "smoke", "--only", "00"]) == 0 and calls == [2]
    assert reproduce.main(["--profile", "smoke", "--nproc", "1"]) == 0 and calls == [2]
    assert len(refreshed) == 3 and all(Path(d).name == "smoke" for d in refreshed)


def test_a_damaged_local_weights_files_advice_names_its_hub_repo_or_holds_no_placeholder(local_model, capsys):
    """A local checkpoint's truncated weights: the advice is the download command when its config.json names its
    hub repository (`_name_or_path`), run as printed (`--local-dir` is that directory), else words with no
    `<repo>` to fill in (it printed `huggingface-cli download <repo>`)."""
    d, prof = local_model
    _cut(d / "model.safetensors")
    line = _one_line(lambda: stages.backbone(prof), capsys)
    assert str(d / "model.safetensors") in line and "<" not in line and "huggingface-cli" not in line, line
    assert "its config.json names no hub repository" in line, line
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "_name_or_path": "JetLM/SDAR-1.7B-Chat"}))
    line = _one_line(lambda: stages.backbone(prof), capsys)
    cmd = shlex.split(line.split("(huggingface-cli download ", 1)[1].split(")", 1)[0])
    assert cmd == ["JetLM/SDAR-1.7B-Chat", "--local-dir", str(d)], line
    # a value that is not a plain owner/name (a path, shell text) is never put into a command
    (d / "config.json").write_text(json.dumps({**cfg, "_name_or_path": "a/b; rm -rf ~"}))
    line = _one_line(lambda: stages.backbone(prof), capsys)
    assert "huggingface-cli" not in line and "rm -rf" not in line, line


def test_an_unfetchable_hub_backbones_advice_names_a_concrete_local_dir(tmp_path, monkeypatch):
    """Offline, a hub backbone that is not cached: the download command and the profile setting name one concrete
    directory (they said `--local-dir <dir>` and `model.local_dir: <dir>`)."""
    from mrp_repro.checkpoint import resolve_checkpoint_dir

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    import huggingface_hub.constants

    importlib.reload(huggingface_hub.constants)
    try:
        with pytest.raises(CheckpointError) as e:
            resolve_checkpoint_dir("nobody/SDAR-none")
    finally:
        monkeypatch.undo()
        importlib.reload(huggingface_hub.constants)
    msg = str(e.value)
    cmd = shlex.split(msg.split("(huggingface-cli download ", 1)[1].split(",", 1)[0])
    assert cmd == ["nobody/SDAR-none", "--local-dir", "models/nobody--SDAR-none"], msg
    assert "model.local_dir: models/nobody--SDAR-none in the profile" in msg and "<" not in msg, msg


def test_the_republish_advice_runs_as_printed(monkeypatch):
    """published.republish_command (quoted when a published artifact is damaged or out of date) is a command whose
    arguments publish's own parser accepts, with no placeholder (it printed `--from <runs root of a finished run>`)."""
    from mrp_repro import publish, published

    class Parsed(Exception):
        pass

    def record(profile, src, backbone_only):
        raise Parsed(profile.name, src, backbone_only)

    line = published.republish_command("tiny")
    argv = shlex.split(line.split(",", 1)[0])
    assert argv[:3] == ["python", "-m", "mrp_repro.publish"] and "<" not in line, line
    monkeypatch.setattr(publish, "publish", record)
    with pytest.raises(Parsed) as e:  # past the parser (a refusal would be SystemExit 2)
        publish.main(argv[3:])
    assert e.value.args == ("tiny", "runs/from-scratch", False)
