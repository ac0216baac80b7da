"""The command line of a heavy decoding stage on the profile's backbone and head (report.peers, report.passes):
--profile, --nproc N (launch N local torchrun ranks running the same module, and return), --no-progress; then, on
every rank (or in one process), join the group, seed, load the backbone and head, run the stage's work, and print
what rank 0's work returns.

    def main(argv=None):   # report.peers
        stage_cli.run("mrp_repro.report.peers", __doc__, argv,
                      lambda profile, bb, head, progress: f"{len(peer_runs(profile, bb, head))} rows")
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

__all__ = ["run"]


def run(module: str, doc: str | None, argv: list[str] | None, work: Callable[..., str | None]) -> None:
    """Parse `argv` for `module` (its log directory: the module's last name) and run `work(profile, backbone, head,
    progress)` on every rank; rank 0 prints the line it returns."""
    from mrp_repro import distributed, stages
    from mrp_repro.config import DEFAULT_PROFILE, load_profile
    from mrp_repro.runtime import runs_root, seed_everything

    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default=DEFAULT_PROFILE)
    ap.add_argument("--nproc", type=int, default=1, help="launch this many local ranks through torchrun")
    ap.add_argument("--no-progress", action="store_true")
    a = ap.parse_args(argv)
    profile = load_profile(a.profile)
    if a.nproc > 1 and "WORLD_SIZE" not in os.environ:  # not yet under torchrun: launch it
        args = ["--profile", a.profile] + (["--no-progress"] if a.no_progress else [])
        distributed.launch(module, args, a.nproc, runs_root() / profile.name / "logs" / module.rsplit(".", 1)[-1])
        return
    d = distributed.init()
    seed_everything(profile.seed)
    bb = stages.shared_backbone(profile, progress=not a.no_progress)
    line = work(profile, bb, stages.head(profile, bb), not a.no_progress)
    if d.is_main and line:
        print(line, flush=True)
