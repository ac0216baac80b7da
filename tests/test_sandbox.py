"""The sandbox really faces each attack, and the host is checked afterwards."""

from __future__ import annotations

import os
import textwrap
import time

import pytest

from mrp_repro.tasks.sandbox import run_program


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is ``pgid``, from /proc."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # comm may contain spaces; fields after the closing paren are fixed.
        fields = stat.rsplit(")", 1)[1].split()
        state, pgrp = fields[0], int(fields[2])
        if pgrp == pgid and state != "Z":
            members.append(int(entry))
    return members


def _src(code: str) -> str:
    return textwrap.dedent(code).lstrip()


def test_passing_program():
    r = run_program("print(sum(range(10)))\nassert 1 + 1 == 2\n")
    assert r.status == "passed" and r.returncode == 0
    assert r.stdout.strip() == "45"


def test_failing_program_reports_assertion():
    r = run_program("def f(x):\n    return x + 1\n\nassert f(1) == 3, 'wrong'\n")
    assert r.status == "failed" and r.returncode == 1
    assert "AssertionError" in r.stderr and "wrong" in r.stderr
    # Tracebacks point at the program's own lines (no prelude offset).
    assert 'program.py", line 4' in r.stderr


def test_syntax_error_is_failed():
    r = run_program("def f(:\n")
    assert r.status == "failed" and "SyntaxError" in r.stderr


def test_fork_loop_is_blocked_and_leaves_no_process():
    r = run_program(
        _src("""
        import os
        while True:
            os.fork()
        """),
        timeout_s=5,
    )
    assert r.status == "error"
    assert "SandboxViolation" in r.stderr and "os.fork" in r.stderr
    assert _group_members(r.pid) == []


@pytest.mark.parametrize(
    "code",
    [
        "import subprocess\nsubprocess.run(['sleep', '30'])\n",
        "import os\nos.system('sleep 30')\n",
        "import _posixsubprocess\n_posixsubprocess.fork_exec()\n",
        "import multiprocessing\np = multiprocessing.Process(target=print)\np.start()\n",
    ],
)
def test_other_process_creation_is_blocked(code):
    r = run_program(code, timeout_s=5)
    assert r.status == "error" and "SandboxViolation" in r.stderr
    assert _group_members(r.pid) == []


def test_background_child_is_killed_even_without_guard():
    # Layer 1 on its own: a child left sleeping in the group is SIGKILLed.
    r = run_program(
        _src("""
        import os, time
        if os.fork() == 0:
            time.sleep(60)
        print("parent done")
        """),
        timeout_s=5,
        guard=False,
    )
    assert r.status == "passed" and "parent done" in r.stdout
    time.sleep(0.1)
    assert _group_members(r.pid) == []


def test_infinite_loop_times_out():
    t0 = time.monotonic()
    r = run_program("while True:\n    pass\n", timeout_s=1.0)
    assert r.status == "timeout"
    assert r.elapsed_s < 1.0 + 2.0 and time.monotonic() - t0 < 1.0 + 2.0
    assert _group_members(r.pid) == []


def test_cpu_limit_counts_as_timeout():
    r = run_program("while True:\n    pass\n", timeout_s=10.0, cpu_s=1)
    assert r.status == "timeout" and r.elapsed_s < 5.0


def test_huge_allocation_is_refused():
    r = run_program("x = bytearray(10 * 1024 ** 3)\nprint('allocated')\n", memory_mb=256)
    assert r.status in ("memory", "error")
    assert r.status == "memory"  # RLIMIT_AS -> MemoryError
    assert "allocated" not in r.stdout
    # The host is fine: this process can still allocate and compute.
    assert sum(bytearray(10**6)) == 0


def test_write_outside_sandbox_is_refused(tmp_path):
    target = tmp_path / "pwned.txt"
    for code in (
        f"open({str(target)!r}, 'w').write('x')\n",
        f"import os\nos.close(os.open({str(target)!r}, os.O_WRONLY | os.O_CREAT))\n",
        f"import pathlib\npathlib.Path({str(target)!r}).write_text('x')\n",
        # a symlink inside the sandbox that points outside does not help
        f"import os\nos.symlink({str(target)!r}, 'link')\nopen('link', 'w').write('x')\n",
    ):
        r = run_program(code)
        assert r.status == "error", (code, r)
        assert "SandboxViolation" in r.stderr
        assert not target.exists()


def test_remove_and_rmtree_outside_are_refused(tmp_path):
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "file.txt").write_text("data")
    for code in (
        f"import os\nos.remove({str(keep / 'file.txt')!r})\n",
        f"import shutil\nshutil.rmtree({str(keep)!r})\n",
        f"import os\nos.rename({str(keep / 'file.txt')!r}, 'stolen.txt')\n",
    ):
        r = run_program(code)
        assert r.status == "error" and "SandboxViolation" in r.stderr, (code, r)
        assert (keep / "file.txt").read_text() == "data"


def test_network_and_limit_raising_are_refused():
    r = run_program("import socket\ns = socket.socket()\ns.connect(('127.0.0.1', 9))\n")
    assert r.status == "error" and "socket" in r.stderr
    r = run_program("import resource\nresource.setrlimit(resource.RLIMIT_AS, (-1, -1))\n")
    assert r.status == "error" and "resource.setrlimit" in r.stderr


def test_writes_inside_sandbox_are_allowed_and_cleaned_up():
    r = run_program(
        _src("""
        import os, shutil, pathlib
        pathlib.Path('d').mkdir()
        pathlib.Path('d/f.txt').write_text('x')
        shutil.rmtree('d')
        open('out.txt', 'w').write('ok')
        print(os.getcwd())
        """)
    )
    assert r.status == "passed", r.stderr
    assert not os.path.exists(r.stdout.strip())  # temp dir deleted


def test_output_is_truncated():
    r = run_program("print('x' * 200_000)\n")
    assert r.status == "passed" and len(r.stdout) < 20_000


def test_bwrap_setup_failure_names_the_fix(monkeypatch, tmp_path):
    from mrp_repro.tasks import sandbox

    # A stand-in for bwrap on a machine without user namespaces: it fails before running anything.
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sandbox, "_bwrap_binary", lambda: str(fake))
    with pytest.raises(sandbox.SandboxUnavailable, match="MRP_REPRO_SANDBOX=guard-only"):
        run_program("print(1)\n")


def test_guard_only_is_an_explicit_opt_in(monkeypatch):
    from mrp_repro.tasks.benchmarks import Problem
    from mrp_repro.tasks.extract import score_code

    prompt = "def add(a, b):\n"
    he = Problem(
        "HumanEval/x", "humaneval", prompt, "def check(c):\n    assert c(1, 2) == 3\n", "add", {"prompt": prompt}
    )

    monkeypatch.setenv("MRP_REPRO_SANDBOX", "guard-only")
    r = run_program("assert 1 + 1 == 2\n")
    assert r.status == "passed" and r.sandbox == "guard-only"
    early = run_program("import sys\nsys.exit(0)\n")
    assert early.status == "failed" and early.sandbox == "guard-only"
    scored = score_code("```python\n    return a + b\n```", he)
    assert scored["correct"] and scored["sandbox"] == "guard-only"
    monkeypatch.setenv("MRP_REPRO_SANDBOX", "docker")
    with pytest.raises(ValueError, match="valid: bwrap, guard-only"):
        run_program("pass\n")


def test_run_program_once_runs_each_distinct_program_once(monkeypatch):
    """The scorers' memo: a program (with its tests, limits and sandbox kind) runs once per process; another
    program, other tests or another limit runs again, and each gets its own result."""
    from mrp_repro.tasks import sandbox

    ran = []
    real = sandbox.run_program

    def counting(source, *a, **k):
        ran.append(source)
        return real(source, *a, **k)

    monkeypatch.setattr(sandbox, "run_program", counting)
    monkeypatch.setattr(sandbox, "_ONCE", {})
    good, bad = "x = 1\n", "assert False\n"
    assert sandbox.run_program_once(good).status == "passed"
    assert sandbox.run_program_once(good).status == "passed"
    assert sandbox.run_program_once(bad).status == "failed"
    assert sandbox.run_program_once(good, tests="assert x == 2\n").status == "failed"
    assert sandbox.run_program_once(good, timeout_s=4.0).status == "passed"
    assert ran == [good, bad, good, good]
    monkeypatch.setattr(sandbox, "_ONCE_MAX", 2)
    sandbox.run_program_once(bad)  # remembered: no run, nothing evicted
    sandbox.run_program_once("y = 2\n")  # evicts the oldest down to the bound
    assert len(sandbox._ONCE) == 2 and len(ran) == 5
