"""Run untrusted, model-generated Python programs with limits.

``run_program(source)`` executes ``source`` in a fresh interpreter and reports
how it ended.  It is used to score HumanEval / MBPP completions (and the code
tasks of the synthetic generators): the program is the completion followed by
its tests, and "passed" means it exited with status 0.

Layers, outermost first (each one catches what the ones inside it miss):

1. Process: a new ``sys.executable -I -B`` subprocess per program (isolated
   mode: no user site, no PYTHON* variables; no bytecode writes), in a new
   session and process group, with a minimal environment, in a fresh temporary
   directory used as cwd and deleted afterwards.  When the program ends, times
   out, or anything else happens, the whole process group is SIGKILLed, so no
   process is left behind.
2. Kernel resource limits (``preexec_fn``): RLIMIT_AS (memory), RLIMIT_CPU,
   RLIMIT_FSIZE (files, including captured stdout/stderr), RLIMIT_CORE=0 and
   RLIMIT_NPROC=0 (no fork/threads for an unprivileged user).  RLIMIT_NPROC is
   NOT enforced for root, which is why layer 3 exists.
3. In-interpreter guard: a runner installs a ``sys.addaudithook`` hook before
   the program runs.  Audit hooks cannot be removed from Python code.  The
   hook refuses (raises :class:`PermissionError`, subclass ``SandboxViolation``)
   process creation (``os.fork``, ``os.system``, ``os.exec*``,
   ``os.posix_spawn``, ``subprocess.Popen``, ``os.forkpty``), signals to other
   processes (``os.kill``/``os.killpg``), every ``socket.*`` event (no
   network), raising resource limits (``resource.setrlimit``/``prlimit``),
   ``ctypes`` and ``gc`` introspection (ways around the hook), and any file
   write / remove / rename / mkdir / chmod / rmtree whose resolved path lies
   outside the sandbox directory.  ``_posixsubprocess.fork_exec`` is not
   audited in CPython 3.11, so it is replaced by a stub before the hook is
   installed and re-importing that module is refused.

This is defence in depth against buggy or careless code (fork loops, runaway
loops, huge allocations, stray file writes), NOT a security boundary like a
container, a VM or seccomp: CPython offers ways around audit hooks to a
determined attacker.  Run untrusted code at scale inside a container as well.

Status values of :class:`SandboxResult`:

- ``"passed"``: exit status 0.
- ``"failed"``: the program raised (AssertionError from a test, any other
  exception, SyntaxError, ``sys.exit(1)``).
- ``"timeout"``: wall clock (``timeout_s``) or CPU (``cpu_s``) limit hit.
- ``"memory"``: ``MemoryError`` (RLIMIT_AS reached).
- ``"error"``: the sandbox stopped it: a guarded operation was refused
  (``SandboxViolation`` in stderr), it was killed by a signal (e.g. SIGXFSZ),
  or the interpreter could not be started.
"""

from __future__ import annotations

import dataclasses
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

__all__ = ["SandboxResult", "run_program", "STATUSES", "VIOLATION_MARKER"]

STATUSES = ("passed", "failed", "timeout", "error", "memory")
VIOLATION_MARKER = "SandboxViolation"
_MAX_STREAM_CHARS = 8_000  # per stream kept in the result; tracebacks fit easily


@dataclasses.dataclass(frozen=True)
class SandboxResult:
    status: str
    returncode: int | None
    stdout: str
    stderr: str
    elapsed_s: float
    pid: int | None = None  # also the process-group id (new session)

    @property
    def passed(self) -> bool:
        return self.status == "passed"


# The runner is written next to the program.  It installs the guard, then
# executes the program as __main__ with its own file name, so tracebacks point
# at the program's own line numbers (no prelude offset).  All guard state lives
# in the closure of ``_install`` (not in module globals reachable through
# frames), and gc introspection is refused, so the program has no handle on it.
_RUNNER = r"""
import os, sys
sys.dont_write_bytecode = True

def _install(root):
    import _posixsubprocess
    def _no_fork_exec(*a, **k):
        raise PermissionError("SandboxViolation: _posixsubprocess.fork_exec")
    _posixsubprocess.fork_exec = _no_fork_exec

    realpath, join, getcwd, fsdecode = os.path.realpath, os.path.join, os.getcwd, os.fsdecode
    readlink, sep = os.readlink, os.sep
    root = realpath(root)
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

    class SandboxViolation(PermissionError):
        pass

    always = frozenset({
        "os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
        "os.startfile", "subprocess.Popen", "os.kill", "os.killpg", "signal.pthread_kill",
        "resource.setrlimit", "resource.prlimit", "gc.get_objects", "gc.get_referrers",
        "gc.get_referents", "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata",
        "ctypes.string_at", "ctypes.wstring_at", "sys.remote_exec", "os.setuid",
    })
    # event -> indices of the path arguments that must stay inside ``root``
    path_events = {
        "os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,), "os.rename": (0, 1),
        "os.link": (1,), "os.symlink": (1,), "os.chmod": (0,), "os.chown": (0,),
        "os.utime": (0,), "os.truncate": (0,), "shutil.rmtree": (0,),
        "os.setxattr": (0,), "os.removexattr": (0,), "os.chflags": (0,), "os.lchflags": (0,),
    }
    dirfd_index = {"os.remove": 1, "os.rmdir": 1, "os.mkdir": 2, "os.rename": 2,
                   "os.symlink": 2, "os.chmod": 2, "os.chown": 3, "os.utime": 3,
                   "shutil.rmtree": 1}

    def deny(event, detail=""):
        raise SandboxViolation(f"SandboxViolation: {event} {detail}".rstrip())

    def inside(path, dir_fd=None):
        if isinstance(path, int):
            return True  # an already open descriptor
        if not isinstance(path, (str, bytes)):
            # Only trust path objects whose __fspath__ we know is honest.
            if type(path).__module__ != "pathlib":
                return False
            path = str(path)
        path = fsdecode(path)
        base = getcwd()
        # dir_fd arrives as None or AT_FDCWD (negative) when not given.
        if isinstance(dir_fd, int) and dir_fd >= 0 and not path.startswith(sep):
            try:
                base = readlink(f"/proc/self/fd/{int(dir_fd)}")
            except OSError:
                return False
        full = realpath(join(base, path))
        return full == root or full.startswith(root + sep)

    def hook(event, args):
        if event in always or event.startswith("socket."):
            deny(event)
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            if isinstance(mode, str):
                writing = any(c in mode for c in "wax+")
            else:
                writing = bool((flags or 0) & write_flags)
            if writing and not inside(path):
                deny(event, repr(path))
        elif event == "import" and args and args[0] in ("_posixsubprocess", "_ctypes"):
            deny(event, args[0])
        elif event == "object.__setattr__" and args and args[0] is hook:
            deny(event)  # e.g. hook.__code__ = ...
        elif event in path_events:
            di = dirfd_index.get(event)
            dir_fd = args[di] if di is not None and di < len(args) else None
            for i in path_events[event]:
                if i < len(args) and not inside(args[i], dir_fd):
                    deny(event, repr(args[i]))

    sys.addaudithook(hook)


_install(os.getcwd())
del _install
with open(sys.argv[1], "rb") as _f:
    _src = _f.read()
sys.argv = [sys.argv[1]]
_code = compile(_src, sys.argv[0], "exec")
del _f, _src
exec(_code, {"__name__": "__main__", "__file__": sys.argv[0], "__builtins__": __builtins__})
"""


def _limits(memory_mb: int, cpu_s: int, fsize_mb: int):
    """Build the preexec_fn; it runs in the child between fork and exec."""

    def apply() -> None:
        mem = int(memory_mb) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
        fs = int(fsize_mb) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (fs, fs))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        try:
            # 0: an unprivileged program cannot fork at all.  Ignored for root.
            resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
        except (ValueError, OSError):
            pass

    return apply


def _read_tail(path: str, limit: int = _MAX_STREAM_CHARS) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            # Keep the end: the traceback / assertion message is what matters.
            f.seek(max(0, size - 4 * limit))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    if len(text) > limit or size > 4 * limit:
        text = "...[truncated]...\n" + text[-limit:]
    return text


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_program(
    source: str,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    cpu_s: int | None = None,
    *,
    fsize_mb: int = 16,
    guard: bool = True,
) -> SandboxResult:
    """Run ``source`` in a fresh, limited interpreter; see the module docstring.

    ``cpu_s`` defaults to ``ceil(timeout_s) + 1`` so that the wall-clock limit
    normally fires first.  ``guard=False`` skips the audit-hook guard (layer 3);
    it exists only so tests can check that the process-group cleanup works on
    its own.
    """
    if cpu_s is None:
        cpu_s = int(timeout_s + 0.999) + 1
    root = tempfile.mkdtemp(prefix="mrp_sandbox_")
    work = os.path.join(root, "work")  # the program may write only here
    os.mkdir(work)
    prog = os.path.join(work, "program.py")
    runner = os.path.join(root, "runner.py")
    out_path, err_path = os.path.join(root, "stdout"), os.path.join(root, "stderr")
    with open(prog, "w", encoding="utf-8") as f:
        f.write(source)
    argv = [sys.executable, "-I", "-B"]
    if guard:
        with open(runner, "w", encoding="utf-8") as f:
            f.write(_RUNNER)
        argv += [runner, prog]
    else:
        argv += [prog]
    env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8", "HOME": work}

    start = time.monotonic()
    proc = None
    timed_out = False
    try:
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            try:
                proc = subprocess.Popen(
                    argv,
                    cwd=work,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                    close_fds=True,
                    preexec_fn=_limits(memory_mb, cpu_s, fsize_mb),
                )
            except OSError as e:
                return SandboxResult(
                    "error", None, "", f"sandbox: could not start: {e}", time.monotonic() - start
                )
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                # Always kill the whole group: a timed-out program, and anything
                # it may have left running in the background.
                _kill_group(proc.pid)
                proc.wait()
        elapsed = time.monotonic() - start
        stdout, stderr = _read_tail(out_path), _read_tail(err_path)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    rc = proc.returncode
    if timed_out or rc == -signal.SIGXCPU:
        status = "timeout"
    elif rc == 0:
        status = "passed"
    elif "MemoryError" in stderr[-2000:]:
        status = "memory"
    elif VIOLATION_MARKER in stderr or rc < 0:
        status = "error"
    else:
        status = "failed"
    return SandboxResult(status, None if timed_out else rc, stdout, stderr, elapsed, proc.pid)
