"""Runtime: device, dtype, seeds, threads, artifact paths, provenance.

    from mrp_repro import runtime
    device = runtime.pick_device()               # $MRP_REPRO_DEVICE, else cuda, else cpu
    dtype = runtime.pick_dtype(device)           # $MRP_REPRO_DTYPE, else bf16 on cuda, else fp32
    runtime.seed_everything(profile.seed)
    out = runtime.artifact_dir(profile, "mrp", profile.section_hash("model", "mrp", "mrp_training"))
    runtime.write_json_atomic(out / "provenance.json", runtime.provenance(profile, device))
    runtime.stamp_computed(path)                 # <path>.provenance.json: the commit that computed a result file
    runtime.note_read(path); runtime.table_stamp()   # what a table read, computed at which commit, rendered at which

Environment variables: MRP_REPRO_DEVICE (cpu, cuda, cuda:1, mps), MRP_REPRO_DTYPE
(float32/fp32, bfloat16/bf16, float16/fp16, auto), MRP_REPRO_RUNS (artifact
cache root, default <repo>/runs), MRP_REPRO_FIGURES (default <repo>/figures),
MRP_REPRO_DATA (benchmark files), MRP_REPRO_ROOT (repository root), MRP_REPRO_FROM_SCRATCH (1: retrain
instead of using the published artifacts of artifacts/<profile>/; its runs and figures then go under
<runs root>/from-scratch/, apart from the published ones: mrp_repro.published).
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import platform
import random
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from mrp_repro.config import repo_root
from mrp_repro.errors import UserError

if TYPE_CHECKING:
    from mrp_repro.config import Profile

__all__ = [
    "sha256_file",
    "pick_device",
    "pick_dtype",
    "seed_everything",
    "set_num_threads",
    "FROM_SCRATCH_ENV",
    "from_scratch",
    "repo_root",
    "runs_root",
    "figures_root",
    "data_dir",
    "artifact_dir",
    "figures_dir",
    "provenance",
    "code_version",
    "RUN_STARTED_ENV",
    "mark_run_start",
    "stamp_computed",
    "computed_stamp",
    "note_read",
    "table_stamp",
    "cached_results",
    "write_json_atomic",
]

log = logging.getLogger(__name__)
_logged: set[str] = set()

_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def _log_once(msg: str) -> None:
    if msg not in _logged:
        _logged.add(msg)
        log.info(msg)


# ----------------------------------------------------------------------------- device / dtype


def pick_device(requested: str | torch.device | None = None) -> torch.device:
    """The compute device: $MRP_REPRO_DEVICE, else `requested`, else cuda if available, else cpu.

    Raises RuntimeError when CUDA (or MPS) is asked for and not available.
    """
    env = os.environ.get("MRP_REPRO_DEVICE", "").strip()
    if env and env != "auto":
        choice, reason = env, "MRP_REPRO_DEVICE"
    elif requested is not None and str(requested) != "auto":
        choice, reason = str(requested), "requested"
    elif torch.cuda.is_available():
        choice, reason = "cuda", "CUDA is available"
    else:
        choice, reason = "cpu", "no CUDA device"
    device = torch.device(choice)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device {choice!r} ({reason}) but torch.cuda.is_available() is False")
    if device.type == "mps" and not (
        getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()
    ):
        raise RuntimeError(f"device {choice!r} ({reason}) but MPS is not available")
    _log_once(f"device: {device} ({reason})")
    return device


def is_gpu_profile(profile: Profile) -> bool:
    """A profile declares where it runs in its description ("GPU: ...", "GPU, an estimated ...: ..." for sdar-*, "CPU:
    ..." for sdar-mini / tiny), inherited through `extends` unless it writes its own."""
    return profile.description.lstrip().upper().startswith("GPU")


def require_device(profile: Profile, device: torch.device) -> None:
    """A GPU profile on CPU (a torch without CUDA, or no GPU) is refused, in one line, unless MRP_REPRO_DEVICE=cpu
    asks for it: a silent CPU run of SDAR-4B takes days and looks like a hang."""
    if device.type != "cpu" or not is_gpu_profile(profile):
        return
    if os.environ.get("MRP_REPRO_DEVICE", "").strip() == "cpu":
        return
    from mrp_repro.errors import UserError

    why = "torch has no CUDA build here" if torch.version.cuda is None else "no CUDA device is visible"
    raise UserError(f"profile {profile.name} is a GPU profile and would run on CPU ({why}, torch {torch.__version__});"
                    " run it on a CUDA machine with a CUDA torch, or set MRP_REPRO_DEVICE=cpu to run it on CPU anyway")


def pick_dtype(device: str | torch.device, requested: str | torch.dtype = "auto") -> torch.dtype:
    """The compute dtype: $MRP_REPRO_DTYPE, else `requested`; "auto": bf16 on CUDA if supported, fp32 else."""
    device = torch.device(device)
    env = os.environ.get("MRP_REPRO_DTYPE", "").strip().lower()
    if isinstance(requested, torch.dtype) and not env:
        _log_once(f"dtype: {requested} (requested)")
        return requested
    name, reason = (env, "MRP_REPRO_DTYPE") if env else (str(requested).lower(), "requested")
    if name == "auto":
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            dtype, reason = torch.bfloat16, "auto: bf16 supported on CUDA"
        elif device.type == "cuda":
            dtype, reason = torch.float32, "auto: CUDA without bf16 support"
        else:
            dtype, reason = torch.float32, f"auto: {device.type}"
    elif name in _DTYPES:
        dtype = _DTYPES[name]
    else:
        raise ValueError(f"unknown dtype {name!r} ({reason}); valid: auto, {', '.join(_DTYPES)}")
    _log_once(f"dtype: {dtype} ({reason})")
    return dtype


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also seeds every CUDA device


def set_num_threads(n: int | None) -> int:
    """Set torch's intra-op threads (None: leave as is); returns the number in effect."""
    if n is not None:
        if n < 1:
            raise ValueError(f"num_threads must be >= 1, got {n}")
        torch.set_num_threads(n)
        _log_once(f"torch threads: {n}")
    return torch.get_num_threads()


# ----------------------------------------------------------------------------- paths


def _env_path(var: str, default: Path) -> Path:
    env = os.environ.get(var)
    return Path(env).expanduser().resolve() if env else default


FROM_SCRATCH_ENV = "MRP_REPRO_FROM_SCRATCH"


def from_scratch() -> bool:
    """$MRP_REPRO_FROM_SCRATCH=1 (make reproduce FROM_SCRATCH=1): retrain every artifact instead of using the
    published ones (mrp_repro.published). The one switch; "", 0 or unset: use them."""
    v = os.environ.get(FROM_SCRATCH_ENV, "").strip().lower()
    if v in ("", "0", "false", "no"):
        return False
    if v in ("1", "true", "yes"):
        return True
    raise UserError(f"{FROM_SCRATCH_ENV}={v!r}: set it to 1 (retrain everything) or 0 / unset (published artifacts)")


def runs_root() -> Path:
    """Artifact cache root: $MRP_REPRO_RUNS, else <repo>/runs; with from_scratch(), its from-scratch/ subfolder
    (so no cached result of the published artifacts is read for retrained ones, nor the other way round)."""
    root = _env_path("MRP_REPRO_RUNS", repo_root() / "runs")
    return root / "from-scratch" if from_scratch() else root


def figures_root() -> Path:
    """Figures root: $MRP_REPRO_FIGURES, else <repo>/figures; with from_scratch() and no $MRP_REPRO_FIGURES,
    <runs root>/figures (the committed figures/ stay those of the published artifacts)."""
    if from_scratch() and not os.environ.get("MRP_REPRO_FIGURES"):
        return runs_root() / "figures"
    return _env_path("MRP_REPRO_FIGURES", repo_root() / "figures")


def data_dir(profile: Profile) -> Path | None:
    """Benchmark directory: profile.data.data_dir, else $MRP_REPRO_DATA, else None (use datasets / hub)."""
    d = profile.data.data_dir or os.environ.get("MRP_REPRO_DATA")
    if not d:
        return None
    p = Path(d).expanduser()
    return p if p.is_absolute() else (repo_root() / p).resolve()


def artifact_dir(profile: Profile, stage: str, key_hash: str) -> Path:
    """runs/<profile.name>/<stage>-<key_hash>/, created."""
    for what, v in (("stage", stage), ("key_hash", key_hash)):
        if not v or "/" in v or os.sep in v or v.startswith("."):
            raise ValueError(f"bad {what} {v!r}: a non-empty name without path separators")
    return _writable_dir(runs_root() / profile.name / f"{stage}-{key_hash}", "MRP_REPRO_RUNS", runs_root())


def figures_dir(profile: Profile) -> Path:
    """figures/<profile.name>/, created."""
    return _writable_dir(figures_root() / profile.name, "MRP_REPRO_FIGURES", figures_root())


def _writable_dir(d: Path, var: str, root: Path) -> Path:
    """`d`, created and writable; else one UserError line naming `var` (a runs root that is a file, read-only or
    not ours gave a 19-28 line traceback from the first mkdir or write). A directory below `root` that is a symbolic
    link (runs/<profile>/, the run directory) is refused, one line (integrity.make_dir); `root` itself may be one."""
    from mrp_repro.integrity import LinkRefused, make_dir

    try:
        below = [a for a in reversed(d.parents) if a != root and root in a.parents] + [d]
        for a in below:  # outermost first: nothing is created where a linked directory points
            if a.is_symlink():
                make_dir(a)  # raises LinkRefused naming it
        make_dir(d)
        problem = None if os.access(d, os.W_OK) else os.strerror(30 if _read_only(d) else 13)  # EROFS / EACCES
    except LinkRefused:
        raise
    except OSError as e:
        problem = e.strerror or str(e)
    if problem is None:
        return d
    where = f"{var}={root}" if os.environ.get(var) else f"{root} (the default; {var} is unset)"
    example = Path(tempfile.gettempdir()) / ("mrp-runs" if var == "MRP_REPRO_RUNS" else "mrp-figures")
    raise UserError(f"cannot write {d}: {problem}; {where} must be a writable directory: "
                    f"set {var} to one, e.g. {var}={example}")  # fmt: skip


def _read_only(d: Path) -> bool:
    try:
        return bool(os.statvfs(d).f_flag & os.ST_RDONLY)
    except OSError:
        return False


# ----------------------------------------------------------------------------- provenance


def _git(*args: str) -> str | None:
    try:
        r = subprocess.run(["git", *args], cwd=repo_root(), capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{device.type}: {platform.processor() or platform.machine()} ({torch.get_num_threads()} threads)"


#: the variables that hold torch's CPU kernels to a lesser instruction set (make test-portable; docs/portability.md)
CPU_ISA_VARS = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")


def _blas() -> str:
    import re

    m = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    return m.group(1) if m else "unknown"


def cpu_numerics() -> dict[str, Any]:
    """What a CPU result's last bits depend on (issue 28): platform, torch's CPU capability (the SIMD width of ATen's
    kernels: AVX512, AVX2, DEFAULT...), the BLAS, torch's threads, and any CPU_ISA_VARS set."""
    held = ",".join(f"{v}={os.environ[v]}" for v in CPU_ISA_VARS if os.environ.get(v))
    return {"platform": f"{sys.platform}-{platform.machine()}",
            "cpu_capability": torch.backends.cpu.get_cpu_capability(), "blas": _blas(),
            "threads": torch.get_num_threads(), "cpu_isa_env": held}  # fmt: skip


def machine_summary() -> str:
    """cpu_numerics() as one string, e.g. `linux-x86_64 AVX512 mkl 2 threads`: the runs column `machine`."""
    c = cpu_numerics()
    held = f" ({c['cpu_isa_env']})" if c["cpu_isa_env"] else ""
    return f"{c['platform']} {c['cpu_capability']} {c['blas']} {c['threads']} threads{held}"


def upstream_attention(device: torch.device) -> str:
    """The kernel the upstream family's all-ones-mask attention calls (block forwards, store-KV commits, the head) run
    on `device` in the run's dtype (pick_dtype): `flash_attn_func (flash-attn <version>)`, as the released code on a
    GPU, where the optional flash-attn package can run them (CUDA, fp16 / bf16), else `sdpa` and why; its masked calls
    are SDPA with the released mask (model.released_attention; docs/upstream.md)."""
    from mrp_repro.model import flash_attn_package, released_unmasked_backend

    try:
        dtype = pick_dtype(device)
    except ValueError:
        return "unknown (MRP_REPRO_DTYPE is not a dtype)"
    _, version = flash_attn_package()
    if released_unmasked_backend(device, dtype) == "flash_attn":
        return f"flash_attn_func (flash-attn {version})"
    why = "flash-attn not installed" if version is None else f"flash-attn {version} needs CUDA and fp16/bf16"
    return f"sdpa ({why}; {device.type}, {str(dtype).removeprefix('torch.')})"


def _code_version() -> dict[str, Any]:
    commit = _git("rev-parse", "HEAD")
    # the committed figures are what a reproduce run rewrites: dirty means code or configs differ from the commit
    status = _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)figures") if commit else None
    return {"git_commit": commit or "unknown", "git_dirty": bool(status) if commit else None}


_version_cache: dict[str, Any] = {}
#: seconds a code_version() answer is reused within one process (every table written asks)
VERSION_TTL_S = 30.0


def code_version(fresh: bool = False) -> dict[str, Any]:
    """{git_commit, git_dirty} of the working tree now (dirty: tracked code or configs differ from the commit, figures/
    aside); reused for VERSION_TTL_S seconds within a process unless `fresh`."""
    import time

    now = time.monotonic()
    if fresh or not _version_cache or now - _version_cache["at"] > VERSION_TTL_S:
        _version_cache.update(_code_version(), at=now)
    return {k: _version_cache[k] for k in ("git_commit", "git_dirty")}


def provenance(profile: Profile, device: str | torch.device | None = None) -> dict[str, Any]:
    """What produced a result: profile, code version, package versions, device, the upstream family's attention
    kernel (upstream_attention), time (UTC), and the cached results present for the profile (cached_results: what
    a run started now may reuse instead of computing, each with the commit that computed it)."""
    dev = torch.device(device) if device is not None else pick_device()
    version = code_version(fresh=True)
    return {
        "profile": profile.name,
        "profile_hash": profile.hash,
        **version,
        "python": platform.python_version(),
        "mrp_repro": _version("mrp-repro"),
        "torch": torch.__version__,
        "transformers": _version("transformers"),
        "triton": _version("triton"),
        "flash_attn": _version("flash-attn"),  # optional: the upstream family's all-ones-mask attention on a GPU
        "upstream_attention": upstream_attention(dev),
        "numpy": np.__version__,
        "platform": f"{sys.platform}-{platform.machine()}",
        "device": str(dev),
        "device_name": _device_name(dev),
        "cuda": torch.version.cuda,
        "mkl_cbwr": os.environ.get("MKL_CBWR"),  # MKL's reproducibility mode (mrp_repro/__init__.py sets it)
        **{k: v for k, v in cpu_numerics().items() if k != "platform"},  # cpu_capability, blas, threads, cpu_isa_env
        "timestamp": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "cached_results": cached_results(profile),
    }


# ----------------------------------------------------------------------------- provenance of reuse
#
# A result file (report.paper.save_result, the sharded merge) gets <file>.provenance.json: the commit that computed
# it. A process that reads one (report.paper.load_result) notes it; every table it then writes
# (report.tables.save_table) records what it read, computed at which commit, and the commit that rendered it, so a
# run that reuses cached grids says so in every table, in environment.md (cached_results) and in claims.md.

#: the suffix of a result file's provenance record
COMPUTED_SUFFIX = ".provenance.json"
#: set by a reproduce run for its notebooks (ISO time, UTC): a result computed before it was cached by an earlier run
RUN_STARTED_ENV = "MRP_REPRO_RUN_STARTED"
_PROCESS_STARTED = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
_read: dict[str, dict[str, Any]] = {}


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def mark_run_start() -> str:
    """Set RUN_STARTED_ENV to now unless set (reproduce.main, before its notebooks: they inherit it); returns it."""
    os.environ.setdefault(RUN_STARTED_ENV, _now())
    return os.environ[RUN_STARTED_ENV]


def run_started() -> str:
    """When this run started: RUN_STARTED_ENV, else when this process did."""
    return os.environ.get(RUN_STARTED_ENV) or _PROCESS_STARTED


def stamp_computed(path: str | os.PathLike) -> Path:
    """Write <path>.provenance.json for a result file just written: the commit and dirty flag that computed it, the
    time, this run's start (run_started)."""
    path = Path(path)
    rec = {**code_version(), "computed": _now(), "run_started": run_started()}
    return write_json_atomic(path.with_name(path.name + COMPUTED_SUFFIX), rec)


def computed_stamp(path: str | os.PathLike) -> dict[str, Any] | None:
    """The provenance record of a result file (stamp_computed), or None: none was written (a result of an older
    version of the package) or it is unreadable."""
    path = Path(path)
    try:
        rec = json.loads(path.with_name(path.name + COMPUTED_SUFFIX).read_text())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


def _result_record(path: Path) -> dict[str, Any]:
    rec = computed_stamp(path) or {}
    computed = rec.get("computed")
    if not rec:
        when = "unrecorded"
    elif computed and computed >= run_started():
        when = "this run"
    else:
        when = "cached"
    return {"result": path.stem, "git_commit": rec.get("git_commit", "unrecorded"),
            "git_dirty": rec.get("git_dirty"), "computed": computed, "reuse": when}  # fmt: skip


def note_read(path: str | os.PathLike) -> None:
    """Note that this process read result file `path` (report.paper.load_result): the tables it writes next say so."""
    path = Path(path)
    _read[str(path)] = _result_record(path)


def reset_reads() -> None:
    """Forget the result files this process has read (note_read): a process that renders several runs' tables."""
    _read.clear()


def table_stamp() -> dict[str, Any]:
    """The provenance a table written now records: rendered_at / rendered_dirty (the commit rendering it), the result
    files this process has read (computed_from: one record each: result, git_commit, git_dirty, computed, reuse =
    this run / cached / unrecorded), their commits (computed_at) and whether any was cached by an earlier run."""
    v = code_version()
    src = list(_read.values())
    commits = list(dict.fromkeys(r["git_commit"] for r in src))
    return {"rendered_at": v["git_commit"], "rendered_dirty": v["git_dirty"], "computed_from": src,
            "computed_at": commits or [v["git_commit"]], "reused": any(r["reuse"] != "this run" for r in src)}


RESULTS_SCHEMA = "runs-v9"  # the runs frame's schema: the results directory's suffix (report.paper.results_dir)


def cached_results(profile: Profile) -> str:
    """The result files present for `profile` (report.paper.results_dir, this profile hash and runs schema), each as
    `name@<12 hex of the commit that computed it> (<time>)`, `;`-joined; "" when there are none. A run started now
    reuses those whose settings match (report.grids, report.paper.cached_result); each table's stamp says which."""
    d = runs_root() / profile.name / f"results-{profile.hash}-{RESULTS_SCHEMA}"
    if not d.is_dir():
        return ""
    out = []
    for p in sorted(d.glob("*.csv")):
        rec = computed_stamp(p)
        out.append(f"{p.stem}@{rec['git_commit'][:12]} ({rec.get('computed')})" if rec else f"{p.stem}@unrecorded")
    return "; ".join(out)


def sha256_file(path: str | os.PathLike) -> str:
    """sha256 of a file's bytes (artifacts, shards, hub files): integrity.sha256, hashed once per process for an
    unchanged file (keyed by inode, size, mtime and ctime)."""
    from mrp_repro.integrity import sha256

    return sha256(path)


def write_json_atomic(path: str | os.PathLike, obj: Any) -> Path:
    """Write JSON to a temporary file beside `path`, then os.replace it into place."""
    path = Path(path)
    from mrp_repro.integrity import file_mode, make_dir

    make_dir(path.parent)  # a linked directory is refused, not written through

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, file_mode())  # the umask's mode, as open() gives (mkstemp's 0600 would follow it into place)
        with os.fdopen(fd, "w") as fh:
            json.dump(obj, fh, indent=2, sort_keys=True, default=str)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
