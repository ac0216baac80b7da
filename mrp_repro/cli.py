"""Run a command-line entry point: user errors, a full disk and interrupts as one line, `--debug` for the traceback.

    if __name__ == "__main__":
        run_cli(main)          # python -m mrp_repro.<module> [args] [--debug]

`run_cli(main, argv=None)` calls `main(argv)` (argv defaults to sys.argv[1:]). A user error
(`mrp_repro.errors.UserError` and its subclasses ConfigError, CheckpointError, TrajectoryError,
HeadNotFoundError, BenchmarkDataUnavailable, ...) is printed to stderr as

    error: <message> (run with --debug for the traceback)

on one line, and the process exits with status 2 (argparse's status for bad arguments). With
`--debug` anywhere in argv the flag is removed and the exception propagates with its traceback.
An int returned by `main` other than 0 becomes the exit status. Under `distributed.launch` (torchrun) a
failing rank also writes its error where the launcher reads it, to name the rank.

What the machine does to a run is one line too, since no traceback helps with it:

- a full disk (ENOSPC / EDQUOT, however the writer reports it: an OSError, pyarrow's, safetensors' "os error 28",
  torch's "unexpected pos" from its zip writer) names the file being written (integrity.atomic_file /
  atomic_dir record it), the free space there and the fix; status 2;
- Ctrl-C (SIGINT) and SIGTERM end the run as an exception, so every `finally` runs (atomic writes remove their
  temporary names, locks are released), then print what to rerun; status 130 / 143, the shell's 128 + signal.
  This holds whatever disposition the process inherited: a command started with `&` by a script (or by a harness)
  inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler, so a Ctrl-C / `kill -INT` was
  ignored and the run went on to finish with status 0; run_cli installs the handlers itself while `main` runs (an
  ignored or default disposition; a handler set by in-process code is left alone) and puts the old ones back.

Either way nothing partial is left (every output is renamed into place when complete) and nothing finished is lost
(finished stages and training checkpoints stay; the rerun resumes from them).
"""

from __future__ import annotations

import contextlib
import errno
import shlex
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from mrp_repro.errors import UserError

__all__ = ["run_cli", "format_user_error", "disk_full", "Terminated", "EXIT_USER_ERROR", "EXIT_INTERRUPTED",
           "EXIT_TERMINATED"]  # fmt: skip

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130
EXIT_TERMINATED = 128 + signal.SIGTERM  # 143
_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# How writers that raise no OSError say the disk is full: pyarrow and safetensors quote the OS error; torch's zip
# writer sees a short write and reports the position it expected.
_DISK_FULL_TEXT = ("No space left on device", "os error 28", "errno 28", "Disk quota exceeded", "unexpected pos",
                   "PytorchStreamWriter failed writing")  # fmt: skip


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread as Ctrl-C's KeyboardInterrupt is, so the run unwinds the same way."""


def format_user_error(e: BaseException) -> str:
    """`error: <message> (run with --debug for the traceback)`, the message folded onto one line."""
    msg = " ".join(str(e).split()) or type(e).__name__
    return f"error: {msg} (run with --debug for the traceback)"


def _chain(e: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    while e is not None and id(e) not in seen and len(seen) < 16:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def disk_full(e: BaseException, in_process: bool = False) -> str | None:
    """The one-line message for an exception that says the disk is full (None for any other): the file being
    written, the free space on its file system and the fix (the command to rerun: this process's own, unless
    `in_process`: run_cli called with an argv by other code)."""
    hits = [x for x in _chain(e) if (isinstance(x, OSError) and x.errno in _DISK_FULL_ERRNOS)
            or any(t in str(x) for t in _DISK_FULL_TEXT)]  # fmt: skip
    if not hits:
        return None
    where = next((x._mrp_writing for x in _chain(e) if getattr(x, "_mrp_writing", None)), None)  # integrity's record
    where = where or next((x.filename for x in hits if isinstance(x, OSError) and x.filename), None)
    free = ""
    probe = Path(where) if where else Path.cwd()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    with contextlib.suppress(OSError):
        n = shutil.disk_usage(probe).free
        free = f"; {n / 2**20:.0f} MiB free there" if n >= 2**20 else f"; {n // 1024} KiB free there"
    what = f"writing {where}" if where else "while writing"
    return (f"no space left on device {what}{free}: free space on that disk (or set MRP_REPRO_RUNS to a directory "
            f"on a disk with room) and rerun {_rerun(in_process)}; nothing partial was kept (every output is renamed "
            "into place when complete) and finished stages and checkpoints are reused")  # fmt: skip


def _rerun(in_process: bool = False) -> str:
    """The command to rerun: this process's own command line, shell-quoted (it runs as printed); "it" when run_cli
    was called in-process (another program's command line is not this one's)."""
    argv = list(getattr(sys, "orig_argv", []))
    return "it" if in_process or not argv else shlex.join(argv)


def _raise_terminated(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM kills at once, as the default would
    raise Terminated


#: while an entry point runs, each signal raises in the main thread: SIGINT KeyboardInterrupt (Python's own handler),
#: SIGTERM Terminated
_RAISING = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: _raise_terminated}


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """While the entry point runs, SIGINT and SIGTERM raise (KeyboardInterrupt, Terminated) in the main thread, also
    where the process inherited them ignored (SIG_IGN: a job started with `&` by a non-interactive shell has SIGINT
    ignored, and Python installs no handler of its own then) or at the OS default; a handler already set (an
    in-process caller's, Python's own SIGINT one, one set by C code) is left alone. The old ones are put back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for sig, handler in _RAISING.items():
        old = signal.getsignal(sig)
        if old in (signal.SIG_IGN, signal.SIG_DFL):  # None (a handler set by C code) is left alone too
            previous[sig] = old
            signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _interrupted(e: KeyboardInterrupt, in_process: bool) -> SystemExit:
    what = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted (Ctrl-C)"
    print(f"error: {what}; nothing partial was kept (every output is renamed into place when complete) and finished "
          f"stages and checkpoints are kept: rerun {_rerun(in_process)} to resume from them", file=sys.stderr,
          flush=True)  # fmt: skip
    return SystemExit(EXIT_TERMINATED if isinstance(e, Terminated) else EXIT_INTERRUPTED)


def run_cli(main: Callable[[list[str] | None], object], argv: Sequence[str] | None = None):
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if "--debug" in args:
            rc = _exit_status(main([a for a in args if a != "--debug"]))
            _leave_process_group()
            return rc
        with _signals_raise():
            try:
                rc = main(args)
            except UserError as e:
                print(format_user_error(e), file=sys.stderr)
                raise SystemExit(EXIT_USER_ERROR) from e
            except KeyboardInterrupt as e:
                raise _interrupted(e, argv is not None) from e
            except Exception as e:
                msg = disk_full(e, argv is not None)
                if msg is None:
                    raise
                print(f"error: {msg} (run with --debug for the traceback)", file=sys.stderr)
                raise SystemExit(EXIT_USER_ERROR) from e
        rc = _exit_status(rc)
        _leave_process_group()
        return rc
    except BaseException as e:  # under distributed.launch: this rank's error, for the launcher to name
        if not (isinstance(e, SystemExit) and e.code in (0, None)):
            from mrp_repro.distributed import record_failure

            record_failure(e.__cause__ if isinstance(e, SystemExit) and e.__cause__ else e)
        raise


def _leave_process_group() -> None:
    """This rank succeeded: wait for the others, then leave the process group (distributed.finish); nothing to do
    for a CLI that never loaded torch.distributed."""
    if "torch.distributed" in sys.modules:
        from mrp_repro.distributed import finish

        finish()


def _exit_status(rc):
    if isinstance(rc, int) and not isinstance(rc, bool) and rc != 0:
        raise SystemExit(rc)
    return rc
