"""torch.distributed for the heavy stages: one process per rank, launched by torchrun.

    torchrun --standalone --nproc-per-node 2 -m mrp_repro.stages head --profile smoke      # by hand
    .venv/bin/python -m mrp_repro.stages head --profile smoke --nproc 2                    # the same, launched
    make reproduce PROFILE=tiny NPROC=2                                                    # the heavy stages

    from mrp_repro import distributed
    d = distributed.init()            # Dist(rank, world, local_rank, backend); world 1 outside torchrun
    mine = d.shard(range(n))          # this rank's items: i % world == rank (deterministic, disjoint, complete)
    d.all_reduce_sum([loss_sum, n])   # sums over ranks (the values themselves at world 1)
    with distributed.stage_lock(out, "what"):   # a directory every rank writes: rank 0 locks it, clears dead temps

Backend: nccl on CUDA, gloo on CPU. A rank on CUDA uses cuda:<local rank>. Outside torchrun (no WORLD_SIZE)
nothing is initialised and every helper is the identity, so single-process code paths are unchanged.
`launch` runs a module under torchrun with one log per rank and turns a failed rank into a UserError naming
the rank, its exit status and its log.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from mrp_repro import integrity
from mrp_repro.errors import UserError

__all__ = ["Dist", "init", "finish", "current", "launch", "without_nproc", "stage_lock", "RankFailed", "ERROR_FILE_ENV"]

#: where a failing rank writes its traceback (set by `launch`, read back to name the rank)
ERROR_FILE_ENV = "MRP_REPRO_RANK_ERRORS"


#: errors a rank raises because another rank died (not a cause of their own)
# a peer's death seen through the process group, or torchrun's SIGTERM to the survivors (cli.Terminated, "Terminated:")
_SECONDARY = re.compile(
    r"Connection closed by peer|Connection reset by peer|remote worker crash|NCCL communicator was aborted"
    r"|^Terminated\b", re.M
)


class RankFailed(UserError, RuntimeError):
    """A rank of a torchrun launch failed; the message names the rank, its exit status and its log."""


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    backend: str | None = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world > 1

    def shard(self, items: Sequence) -> list:
        """This rank's items: every `world`-th from position `rank` (round robin, so ranks get similar work
        when items are sorted by size)."""
        return [x for i, x in enumerate(items) if i % self.world == self.rank]

    def barrier(self) -> None:
        if self.active:
            dist.barrier()

    def all_reduce_sum(self, values: Sequence[float]) -> list[float]:
        """Elementwise sums over ranks, in float64 (the values as floats at world 1)."""
        if not self.active:
            return [float(v) for v in values]
        t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self._device())
        dist.all_reduce(t)
        return t.tolist()

    def broadcast_object(self, obj=None, src: int = 0):
        """rank `src`'s `obj` on every rank."""
        if not self.active:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=src, device=self._device())
        return box[0]

    def _device(self) -> torch.device:
        return torch.device("cuda", torch.cuda.current_device()) if self.backend == "nccl" else torch.device("cpu")


def current() -> Dist:
    """The initialised process group as a Dist (world 1 when none is)."""
    if not (dist.is_available() and dist.is_initialized()):
        return Dist()
    return Dist(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)), dist.get_backend())


def init() -> Dist:
    """Join the process group torchrun describes (WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR/PORT), once.

    nccl when CUDA is available (and the rank's device set to cuda:<local rank>), else gloo. Without
    torchrun's variables, or with WORLD_SIZE=1, nothing is initialised and Dist() (rank 0 of 1) is returned."""
    if dist.is_available() and dist.is_initialized():
        return current()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available() and os.environ.get("MRP_REPRO_DEVICE", "cuda").startswith("cuda")
    if use_cuda:
        torch.cuda.set_device(local)
        os.environ.setdefault("MRP_REPRO_DEVICE", f"cuda:{local}")
    # Ranks wait at barriers for the slowest rank's shards (hours on an SDAR grid), far past the defaults
    # (NCCL 10 min, gloo 30 min): the timeout is $MRP_REPRO_DIST_TIMEOUT_S, default 24 h.
    timeout = datetime.timedelta(seconds=float(os.environ.get("MRP_REPRO_DIST_TIMEOUT_S", 24 * 3600)))
    dist.init_process_group(backend="nccl" if use_cuda else "gloo", timeout=timeout)
    atexit.register(_leave)
    return current()


def finish() -> None:
    """Leave the process group after this rank's work succeeded: every rank waits for the others (a barrier), then
    each destroys its group while the interpreter is whole. Without the barrier a rank that finished first tore its
    connections down while a peer still talked to it, and a gloo rank died of SIGABRT ("terminate called without an
    active exception") after writing every result, failing the launch (tests/test_ddp_training.py, 1 CI run in
    about 10 on 2 loaded cores). A no-op outside a process group; cli.run_cli calls it when main returns."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        _leave()


def _leave() -> None:
    """Destroy the process group before the interpreter exits (also after an error: atexit, no barrier, since a
    failed rank's peers may never reach one). The group's C++ threads outlive destroy_process_group while anything
    holds the group (a DDP module in a reference cycle): collected here, not during interpreter shutdown, where
    gloo's threads met a half-torn-down interpreter and aborted."""
    import gc

    if dist.is_available() and dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()
    gc.collect()


@contextlib.contextmanager
def stage_lock(d: str | os.PathLike, what: str):
    """integrity.stage_lock on directory `d` for a stage every rank writes, with a killed run's temporaries cleared
    (integrity.remove_stale_temps_in) before anything is written. Under torchrun rank 0 holds the lock for the whole
    launch and clears `d` before a barrier that every rank passes before writing, so no temporary a live rank made
    is taken for a dead one's, and a second launch (or a one-process run) on `d` gets StageLocked instead of writing
    beside this one; every rank waits at a second barrier before rank 0 lets go. In one process: the lock and the
    clearing."""
    ctx = current()
    if not ctx.active:
        with integrity.stage_lock(d, what):
            integrity.remove_stale_temps_in(d)
            yield
        return
    with integrity.stage_lock(d, what) if ctx.is_main else contextlib.nullcontext():
        if ctx.is_main:
            integrity.remove_stale_temps_in(d)
        ctx.barrier()
        yield
        ctx.barrier()  # a rank still writing keeps rank 0's lock held


def without_nproc(argv: Sequence[str]) -> list[str]:
    """argv without "--nproc N" / "--nproc=N": what a self-launching CLI passes on to its ranks."""
    argv = list(argv)
    return [a for i, a in enumerate(argv) if not (a.startswith("--nproc") or (i and argv[i - 1] == "--nproc"))]


def record_failure(exc: BaseException) -> None:
    """Write this rank's error where `launch` reads it (a no-op outside `launch`)."""
    d = os.environ.get(ERROR_FILE_ENV)
    if not d:
        return
    import traceback

    rank = os.environ.get("RANK", "0")
    Path(d).mkdir(parents=True, exist_ok=True)
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    (Path(d) / f"rank-{rank}.txt").write_text(f"{type(exc).__name__}: {exc}\n\n{text}")


def _rank_logs(log_dir: Path) -> dict[int, Path]:
    """local rank -> its stderr log under torchrun's --log-dir (<dir>/<run id>/attempt_<n>/<local rank>/)."""
    out: dict[int, Path] = {}
    for p in sorted(log_dir.glob("**/attempt_*/*/stderr.log")):
        out[int(p.parent.name)] = p
    return out


def _run_showing_stderr(cmd: list[str], env: dict, timeout_s: float | None) -> tuple[int, str]:
    """Run cmd, passing its stderr through as it comes (rank 0's progress bars) and keeping a copy."""
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE)
    kept = bytearray()
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        for chunk in iter(lambda: proc.stderr.read1(1 << 14), b""):
            out = getattr(sys.stderr, "buffer", None)  # a notebook's stderr takes text only
            out.write(chunk) if out is not None else sys.stderr.write(chunk.decode(errors="replace"))
            sys.stderr.flush()
            kept += chunk
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(cmd, timeout_s)
        proc.wait(timeout=None if deadline is None else max(1.0, deadline - time.monotonic()))
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc.returncode, kept.decode(errors="replace")


def launch(module: str, args: Sequence[str], nproc: int, log_dir: str | os.PathLike, timeout_s: float | None = None,
           extra_env: dict | None = None) -> None:  # fmt: skip
    """Run `python -m module *args` (or the script `module`, a .py path) on `nproc` local ranks through torchrun
    (standalone rendezvous).

    Each rank's stdout and stderr go to a log under `log_dir` (torchrun --redirects 3 --log-dir); rank 0's
    are also shown. A failed launch raises RankFailed naming the first rank that failed (the first error
    written: the others fail after it), its exit status,
    its error's last line and its log; a rank that is killed (no error of its own) is named from
    torchrun's summary. No retries: the stages resume from what finished ranks wrote."""
    if nproc < 1:
        raise ValueError(f"nproc={nproc}: need at least 1 process")
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix=time.strftime("%Y%m%d-%H%M%S-"), dir=log_dir))
    os.chmod(run_dir, integrity.dir_mode())  # mkdtemp's 0700 would hide the logs from the umask's readers
    errors = run_dir / "errors"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           f"--log-dir={run_dir}", "--redirects=3", "--tee=0:3", "--max-restarts=0",
           *([module] if module.endswith(".py") else ["-m", module]), *args]  # fmt: skip
    env = {**os.environ, ERROR_FILE_ENV: str(errors), **(extra_env or {})}
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    returncode, summary = _run_showing_stderr(cmd, env, timeout_s)
    if returncode == 0:
        return
    logs = _rank_logs(run_dir)
    # The cause is the earliest error that is not a peer's death seen through the process group (gloo:
    # "Connection closed by peer"); a rank killed without a Python error is named by torchrun's "Root Cause".
    errs = sorted(errors.glob("rank-*.txt"), key=lambda p: (p.stat().st_mtime_ns, p.name)) if errors.exists() else []
    own = [p for p in errs if not _SECONDARY.search(p.read_text())]
    m = re.search(r"Root Cause.*?rank\s*:\s*(\d+)", summary, re.S)
    if own or (errs and not m):
        cause = (own or errs)[0]
        rank, first = int(cause.stem.split("-")[1]), cause.read_text().splitlines()[0]
    else:
        rank = int(m.group(1)) if m else -1
        code = re.search(r"exitcode\s*:\s*(-?\d+)", summary[m.start() :] if m else summary)
        first = f"exit status {code.group(1)}" if code else f"torchrun exit status {returncode}"
    log = logs.get(rank, run_dir)
    what = " ".join(([module] if module.endswith(".py") else ["python -m", module]) + list(args))
    raise RankFailed(
        f"rank {rank} of {nproc} failed in `{what}`: {first}; its log: {log} "
        f"(every rank's log is under {run_dir}); nothing was merged from a partial set: rerun the same command "
        "to resume (finished shards and checkpoints are kept)"
    )
