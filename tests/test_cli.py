"""run_cli: a user error is one line on stderr and exit status 2; --debug gives the traceback."""

import os
import subprocess
import sys

import pytest

from mrp_repro.checkpoint import CheckpointError
from mrp_repro.cli import run_cli
from mrp_repro.config import ConfigError, list_profiles
from mrp_repro.errors import UserError
from mrp_repro.mrp import HeadNotFoundError
from mrp_repro.tasks.benchmarks import BenchmarkDataUnavailable
from mrp_repro.trajectories import TrajectoryError


def raiser(exc):
    def main(argv):
        raise exc

    return main


@pytest.mark.parametrize(
    "exc",
    [
        ConfigError("unknown key 'stepz'\nin section 'mrp'"),
        CheckpointError("x is truncated"),
        TrajectoryError("shard gone"),
        HeadNotFoundError("no head"),
        BenchmarkDataUnavailable("gsm8k: no data"),
    ],
)
def test_user_error_is_one_line_and_exit_2(exc, capsys):
    with pytest.raises(SystemExit) as e:
        run_cli(raiser(exc), ["--profile", "x"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "--debug" in err
    assert " ".join(str(exc).split()) in err


def test_debug_propagates_and_is_stripped():
    seen = []

    def main(argv):
        seen.append(argv)
        raise ConfigError("bad")

    with pytest.raises(ConfigError):
        run_cli(main, ["--profile", "x", "--debug"])
    assert seen == [["--profile", "x"]]


def test_other_errors_keep_their_traceback_and_status_passes_through():
    with pytest.raises(ZeroDivisionError):
        run_cli(raiser(ZeroDivisionError("bug")), [])
    with pytest.raises(SystemExit) as e:
        run_cli(lambda argv: 1, [])
    assert e.value.code == 1
    assert run_cli(lambda argv: None, []) is None
    assert issubclass(ConfigError, UserError) and issubclass(ConfigError, ValueError)
    assert issubclass(HeadNotFoundError, FileNotFoundError)


def cli(*args):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize(
    "command",
    [
        ["mrp_repro.stages", "head"],
        ["mrp_repro.stages", "backbone"],
        ["mrp_repro.reproduce"],
        ["mrp_repro.report.bench"],
    ],
)
def test_unknown_profile_subprocess(command):
    r = cli(*command, "--profile", "nosuch")
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: unknown profile 'nosuch'")
    assert all(p in lines[0] for p in list_profiles())
    assert "Traceback" not in r.stderr


def test_unknown_profile_with_debug_gives_traceback():
    r = cli("mrp_repro.stages", "head", "--profile", "nosuch", "--debug")
    assert r.returncode == 1
    assert "Traceback (most recent call last)" in r.stderr and "unknown profile 'nosuch'" in r.stderr


def test_bad_key_subprocess(tmp_path):
    bad = tmp_path / "mine.yaml"
    bad.write_text("extends: smoke\nname: mine\nmrp_training:\n  stepz: 3\n")
    r = cli("mrp_repro.stages", "backbone", "--profile", str(bad))
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "stepz" in lines[0] and "valid keys" in lines[0], r.stderr


def test_every_command_line_entry_point_goes_through_run_cli():
    """Each `python -m mrp_repro...` module ends in run_cli, so a user error, Ctrl-C or a full disk is one error:
    line there too (issue 39: report.regime, report.speed, decoding.mismatch, gpu_check, ... printed tracebacks)."""
    import ast
    from pathlib import Path

    import mrp_repro

    missing, found = [], 0
    for path in sorted(Path(mrp_repro.__file__).parent.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
                    and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__"):  # fmt: skip
                found += 1
                if "run_cli(" not in ast.unparse(node):
                    missing.append(path.name)
    assert found >= 20 and not missing, missing
