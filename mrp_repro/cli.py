"""Run a command-line entry point: user errors as one line, `--debug` for the traceback.

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
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from mrp_repro.errors import UserError

__all__ = ["run_cli", "format_user_error", "EXIT_USER_ERROR"]

EXIT_USER_ERROR = 2


def format_user_error(e: BaseException) -> str:
    """`error: <message> (run with --debug for the traceback)`, the message folded onto one line."""
    msg = " ".join(str(e).split()) or type(e).__name__
    return f"error: {msg} (run with --debug for the traceback)"


def run_cli(main: Callable[[list[str] | None], object], argv: Sequence[str] | None = None):
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if "--debug" in args:
            return _exit_status(main([a for a in args if a != "--debug"]))
        try:
            rc = main(args)
        except UserError as e:
            print(format_user_error(e), file=sys.stderr)
            raise SystemExit(EXIT_USER_ERROR) from e
        return _exit_status(rc)
    except BaseException as e:  # under distributed.launch: this rank's error, for the launcher to name
        if not (isinstance(e, SystemExit) and e.code in (0, None)):
            from mrp_repro.distributed import record_failure

            record_failure(e.__cause__ if isinstance(e, SystemExit) and e.__cause__ else e)
        raise


def _exit_status(rc):
    if isinstance(rc, int) and not isinstance(rc, bool) and rc != 0:
        raise SystemExit(rc)
    return rc
