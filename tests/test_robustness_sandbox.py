"""The sandbox shows a program only what an ordinary user could read, wherever it lies (issue 39, finding 6).

Scoring as root, bwrap maps the program to the host's uid 0, which owns (and so reads) every owner-only file. Before
the fix only /etc was walked for such files: a 0600 file under /var/cache was readable inside. Now every directory
the program sees is walked (once per process) and each owner-only file is replaced by an empty one, each such
directory hidden; /sys (0400 firmware and kernel attributes) is hidden whole.
"""

from __future__ import annotations

import os
import shutil
import textwrap

import pytest

from mrp_repro.tasks import sandbox
from mrp_repro.tasks.sandbox import run_program

SECRET = "robustness-sandbox-secret-8f1c"


@pytest.fixture
def planted():
    """A 0600 file and a 0700 directory (holding a 0644 file) under /var/cache, as root owns them."""
    if os.geteuid() != 0 or not os.access("/var/cache", os.W_OK):
        pytest.skip("needs root: the finding is about scoring as root")
    base = f"/var/cache/mrp-robustness-{os.getpid()}"
    os.mkdir(base, 0o755)
    try:
        with open(f"{base}/owner-only", "w") as f:
            f.write(SECRET)
        os.chmod(f"{base}/owner-only", 0o600)
        os.mkdir(f"{base}/private", 0o700)
        with open(f"{base}/private/readable", "w") as f:
            f.write(SECRET)
        os.chmod(f"{base}/private/readable", 0o644)
        with open(f"{base}/public", "w") as f:
            f.write("public")
        os.chmod(f"{base}/public", 0o644)
        sandbox._owner_only.cache_clear()  # walked once per process: see the files planted now
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)
        sandbox._owner_only.cache_clear()


@pytest.mark.parametrize("guard", [True, False])
def test_owner_only_files_outside_etc_are_hidden_as_root(planted, guard):
    code = textwrap.dedent(f"""
        import os
        for path in ({planted!r} + "/owner-only", {planted!r} + "/private/readable", {planted!r} + "/public"):
            try:
                print(path, "=", repr(open(path).read()))
            except OSError as e:
                print(path, ":", type(e).__name__)
        print("private lists", os.listdir({planted!r} + "/private") if os.path.isdir({planted!r} + "/private")
              else "absent")
        print("sys lists", len(os.listdir("/sys")))
    """).lstrip()
    r = run_program(code, guard=guard, timeout_s=60, sandbox="bwrap")
    assert r.status == "passed", r.stderr[-1000:]
    assert SECRET not in r.stdout, r.stdout
    assert f"{planted}/public = 'public'" in r.stdout  # what others may read stays visible
    assert "private lists []" in r.stdout and "sys lists 0" in r.stdout, r.stdout


def test_the_walk_finds_owner_only_files_anywhere_but_the_skipped_trees(planted):
    files, dirs = sandbox._owner_only("/", tuple(sandbox._hidden_dirs()) + sandbox._NOT_WALKED)
    assert f"{planted}/owner-only" in files and f"{planted}/private" in dirs
    assert f"{planted}/public" not in files and not any(f.startswith(("/proc/", "/dev/", "/sys/")) for f in files)
