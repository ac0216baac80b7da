"""Packaging: pins in pyproject.toml and environment.yml agree; runtime paths and device choice."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import shutil
import subprocess
import sys
import tomllib

import pytest
import yaml

from mrp_repro.config import repo_root

ROOT = repo_root()


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _parse(req: str) -> tuple[str, str]:
    """'Name==1.2; marker' -> ('name', '==1.2; marker') with normalised spacing."""
    m = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*([^;]*?)\s*(?:;\s*(.*))?", req)
    assert m, f"cannot parse requirement {req!r}"
    name, spec, marker = m.groups()
    marker = re.sub(r"\s+", " ", marker.replace('"', "'")).strip() if marker else ""
    return _norm(name), spec.replace(" ", "") + (f"; {marker}" if marker else "")


def _pyproject_pins() -> dict[str, str]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(data["dependencies"]) + [r for rs in data.get("optional-dependencies", {}).values() for r in rs]
    return dict(_parse(r) for r in reqs)


def _conda_pins() -> dict[str, str]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    return dict(_parse(r) for r in pip if not r.startswith("-"))


def test_pyproject_pins_are_exact():
    for name, spec in _pyproject_pins().items():
        assert spec.startswith("==") and re.match(r"==[0-9][^,<>=!~*]*$", spec.split(";")[0]), (name, spec)


def test_environment_yml_matches_pyproject():
    py, conda = _pyproject_pins(), _conda_pins()
    assert py == conda, {
        "only in pyproject": sorted(set(py) - set(conda)),
        "only in environment.yml": sorted(set(conda) - set(py)),
        "differ": {k: (py[k], conda[k]) for k in set(py) & set(conda) if py[k] != conda[k]},
    }
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert "python=3.11" in env["dependencies"] and "pip" in env["dependencies"]


def test_library_imports_are_pinned():
    """Every third-party distribution mrp_repro imports is pinned (uninstalled optional ones skipped)."""
    pinned = set(_pyproject_pins())
    dists = importlib.metadata.packages_distributions()
    unpinned = {}
    for path in sorted((ROOT / "mrp_repro").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top == "mrp_repro" or top in sys.stdlib_module_names:
                    continue
                owners = {_norm(d) for d in dists.get(top, [])}
                if owners and not owners & pinned:
                    unpinned.setdefault(top, []).append(str(path.relative_to(ROOT)))
    assert not unpinned, f"imported but not pinned in pyproject.toml: {unpinned}"


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_test_runs_pytest():
    out = subprocess.run(
        ["make", "-n", "-C", str(ROOT), "test", "PYTEST_ARGS=-k foo"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    # the slow ones: make test-slow; two workers, a file each at a time (a file's module fixtures built once)
    assert '.venv/bin/python -m pytest -q -m "not slow" -n 2 --dist loadfile -k foo' in out.stdout
    one = _make_n("test", "TEST_WORKERS=1", "PYTEST_ARGS=-k foo")
    assert '-m "not slow" -n 1 --dist loadfile -k foo' in one


def _make_n(*args):
    out = subprocess.run(["make", "-n", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_make_test_portable_runs_each_emulated_capability():
    out = _make_n("test-portable")
    for env in ("ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2",
                "ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2"):  # fmt: skip
        assert f"env {env} .venv/bin/python -m pytest" in out, out
    assert "tests/test_lossless_bf16.py" in out and "tests/test_published.py" in out
    assert "-m slow" in _make_n("test-slow")
    rnd = _make_n("test-random", "SEED=7")  # the seed given is the one used and printed
    assert "seed=7;" in rnd and "--randomly-seed=$seed" in rnd and 'echo "test-random: --randomly-seed=$seed"' in rnd


def test_ci_run_is_executable():
    ci = ROOT / ".ci" / "run"
    text = ci.read_text()
    assert ci.stat().st_mode & 0o111 and "make test" in text
    # every test runs in CI: the suite, the portable subset under the emulated CPUs, the slow tests once
    assert [line for line in text.splitlines() if line.startswith("make ")] == [
        "make test", "make test-portable", "make test-slow"]  # fmt: skip


# ----------------------------------------------------------------------------- runtime


def test_artifact_paths_honour_env(tmp_runs, smoke_profile):
    from mrp_repro import runtime

    assert runtime.runs_root() == tmp_runs.resolve()
    key = smoke_profile.section_hash("model", "backbone_training")
    d = runtime.artifact_dir(smoke_profile, "backbone", key)
    assert d == tmp_runs.resolve() / "smoke" / f"backbone-{key}" and d.is_dir()
    f = runtime.figures_dir(smoke_profile)
    assert f.is_dir() and f.name == "smoke" and tmp_runs.parent.resolve() in f.parents
    with pytest.raises(ValueError):
        runtime.artifact_dir(smoke_profile, "../escape", key)


def test_write_json_atomic_and_provenance(tmp_path, smoke_profile):
    import json

    from mrp_repro import runtime

    prov = runtime.provenance(smoke_profile, device="cpu")
    for k in (
        "profile",
        "profile_hash",
        "git_commit",
        "git_dirty",
        "python",
        "torch",
        "transformers",
        "triton",
        "device",
        "device_name",
        "timestamp",
    ):
        assert k in prov
    assert prov["profile_hash"] == smoke_profile.hash and prov["device"] == "cpu"
    out = runtime.write_json_atomic(tmp_path / "a" / "prov.json", prov)
    assert json.loads(out.read_text()) == prov
    assert [p.name for p in out.parent.iterdir()] == ["prov.json"]


def test_pick_device_env_override(monkeypatch):
    import torch

    from mrp_repro import runtime

    monkeypatch.setenv("MRP_REPRO_DEVICE", "cpu")
    assert runtime.pick_device() == torch.device("cpu")
    assert runtime.pick_device("cuda") == torch.device("cpu")  # the environment wins
    monkeypatch.delenv("MRP_REPRO_DEVICE")
    assert runtime.pick_device("cpu") == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert runtime.pick_device().type == expected
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError):
            runtime.pick_device("cuda")


def test_pick_dtype(monkeypatch):
    import torch

    from mrp_repro import runtime

    monkeypatch.delenv("MRP_REPRO_DTYPE", raising=False)
    assert runtime.pick_dtype("cpu") == torch.float32
    assert runtime.pick_dtype("cpu", "bfloat16") == torch.bfloat16
    monkeypatch.setenv("MRP_REPRO_DTYPE", "bf16")
    assert runtime.pick_dtype("cpu", "float32") == torch.bfloat16
    monkeypatch.setenv("MRP_REPRO_DTYPE", "int3")
    with pytest.raises(ValueError, match="int3"):
        runtime.pick_dtype("cpu")


# ----------------------------------------------------------------------------- the machine (issue 28)


def test_provenance_and_runs_rows_record_the_cpu_numerics(smoke_profile, monkeypatch):
    """environment.md and every runs row say which CPU capability, BLAS and threads made them, and any variable
    that held the instruction set down (make test-portable's)."""
    import torch

    from mrp_repro import runtime
    from mrp_repro.measure.schema import RUN_COLUMNS

    for v in runtime.CPU_ISA_VARS:  # make test-portable / an emulated run sets some of them already
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    prov = runtime.provenance(smoke_profile, device="cpu")
    assert prov["cpu_capability"] == torch.backends.cpu.get_cpu_capability() and prov["blas"]
    assert prov["threads"] == torch.get_num_threads() and prov["cpu_isa_env"] == "ONEDNN_MAX_CPU_ISA=AVX2"
    s = runtime.machine_summary()
    assert prov["cpu_capability"] in s and f"{prov['threads']} threads" in s and "ONEDNN_MAX_CPU_ISA=AVX2" in s
    assert "machine" in RUN_COLUMNS


def test_published_warns_when_the_machine_differs(tmp_path):
    import csv

    from mrp_repro import published, runtime

    here = runtime.cpu_numerics()
    env = tmp_path / "environment.csv"

    def write(**over):
        with open(env, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["key", "value"])
            for k, v in {**here, **over}.items():
                w.writerow([k, v])

    write()
    assert published.machine_note("tiny", env) is None
    write(threads=here["threads"] + 1)  # threads alone do not move a table (MKL_CBWR strict; docs/portability.md)
    assert published.machine_note("tiny", env) is None
    write(cpu_capability="NOSUCH")
    note = published.machine_note("tiny", env)
    assert note.startswith("warning:") and "cpu_capability NOSUCH there" in note and "docs/portability.md" in note
    assert published.machine_note("tiny", tmp_path / "missing.csv") is None


def test_git_dirty_counts_code_not_the_figures_a_run_rewrites(tmp_path, monkeypatch, smoke_profile):
    """A reproduce run rewrites the committed figures/ while it runs: that must not stamp its own notebooks dirty,
    while a changed code file must."""
    import subprocess

    from mrp_repro import runtime

    def git(*a):
        subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "t.md").write_text("a\n")
    (tmp_path / "code.py").write_text("a\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    monkeypatch.setattr(runtime, "repo_root", lambda: tmp_path)
    assert runtime.provenance(smoke_profile, "cpu")["git_dirty"] is False
    (tmp_path / "figures" / "t.md").write_text("b\n")
    assert runtime.provenance(smoke_profile, "cpu")["git_dirty"] is False
    (tmp_path / "code.py").write_text("b\n")
    assert runtime.provenance(smoke_profile, "cpu")["git_dirty"] is True
