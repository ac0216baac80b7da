"""The one base class of the errors a user can fix (a bad profile, a corrupt or foreign artifact).

    from mrp_repro.errors import UserError
    raise UserError("what is wrong; what to do about it")

Command-line entry points (`mrp_repro.cli.run_cli`) print these as one line, `error: <message>`, and
exit 2; anything else is a bug and keeps its traceback. Subclasses: config.ConfigError,
checkpoint.CheckpointError, trajectories.TrajectoryError, mrp.HeadNotFoundError.
"""

from __future__ import annotations

__all__ = ["UserError"]


class UserError(Exception):
    """An error the user fixes by changing input or deleting/redoing an artifact; the message says how."""
