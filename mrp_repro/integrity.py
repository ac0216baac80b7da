"""What the package reads back is what it wrote: content hashes, directory manifests, atomic writes, stage locks.

    from mrp_repro import integrity
    integrity.sha256(path)                          # sha256 of the bytes, hashed once per process per file state
    integrity.seal(d)                               # d/integrity.json: every file of d with its sha256
    integrity.verify_dir(d, fix)                    # exactly those files, each with its sha256, else IntegrityError
    rec = integrity.record(root, files)             # {relative path: sha256}: what done.json records
    integrity.problems(root, rec)                   # [] or "file: why" for each file that does not match
    integrity.write_sidecar(csv, rows)              # csv.sha256.json: sha256, bytes, rows of a cached table
    integrity.sidecar_problem(csv)                  # None, or why the table must not be reused
    with integrity.atomic_file(path) as tmp: ...    # a unique temporary name beside path, renamed into place
    with integrity.atomic_dir(path) as tmp: ...     # the same for a directory (complete or absent)
    with integrity.stage_lock(d, "backbone"): ...   # fcntl.flock on d/.lock; a second holder gets StageLocked
    integrity.make_dir(d)                           # d created, refused (LinkRefused) when it is a symbolic link
    integrity.remove_stale_temps(path)              # what a killed atomic_dir/atomic_file left beside path
    integrity.remove_stale_temps_in(d)              # the same for every name in d (under d's stage_lock)
    integrity.file_mode(), integrity.dir_mode()     # 0o666 / 0o777 less the umask: what open() and mkdir() give

Hash cache. A file's sha256 is cached in this process keyed by (device, inode, size, mtime_ns, ctime_ns): a file
rewritten in place changes its ctime even when its size and mtime are restored (the kernel sets ctime; utime cannot
set it back), so a same-size byte flip is hashed again. Nothing is cached across processes here (mrp_repro.inputs
keeps its own cache on the same key).

Names that start with "." (temporary files, the lock) are never listed in a manifest and never loaded.

Links. Nothing here writes through a link: atomic_file and atomic_dir create a new name (O_EXCL) and rename it onto
the target, which replaces a symbolic or hard link at the target's name instead of writing into the file it points
to; the lock is opened with O_NOFOLLOW and refused (LinkRefused, one line naming it) when it is a symbolic link, a
hard link or not a regular file, since locking truncates it. The directory written into (the one holding an
atomic_file or atomic_dir target, the one stage_lock locks: figures/<profile>/, a run directory) is refused the same
way when it is itself a symbolic link (make_dir), since every file written there would land where it points; the
roots above it ($MRP_REPRO_RUNS, $MRP_REPRO_FIGURES, a runs/ on another disk) are the user's layout and may be links.
Outputs get the modes open() and mkdir() would give under the process's umask (mkstemp's 0600 and mkdtemp's 0700
are not kept).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import hashlib
import json
import os
import shlex
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from mrp_repro.errors import UserError

__all__ = ["MANIFEST", "IntegrityError", "StageLocked", "LinkRefused", "stat_key", "sha256", "git_blob_sha1",
           "listed_files", "record", "problems", "seal", "read_manifest", "verify_dir", "write_sidecar",
           "sidecar_problem", "atomic_file", "atomic_dir", "stage_lock", "remove_stale_temps", "remove_stale_temps_in",
           "file_mode",
           "dir_mode", "make_dir"]  # fmt: skip

MANIFEST = "integrity.json"
FORMAT = 1
_SIDECAR = ".sha256.json"
_cache: dict[tuple, str] = {}


class IntegrityError(UserError, ValueError):
    """A recorded file that is missing, changed, or a file that no record lists; the message names it and the fix."""


class StageLocked(UserError, RuntimeError):
    """Another process holds a stage's output directory."""


class LinkRefused(UserError, OSError):
    """A path the package would write or lock is a link (or not a regular file): writing it would change the file
    it points to, outside the package's directories."""


def _refuse_symlink(path: Path, what: str, fix: str) -> None:
    """LinkRefused, one line: `path` is a symbolic link (to its target), `what`; `fix`."""
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    raise LinkRefused(f"{path} is a symbolic link (to {target}), {what}; {fix}") from None


def make_dir(d: str | os.PathLike) -> Path:
    """`d`, created with its parents; LinkRefused (one line naming it and the fix) when `d` is a symbolic link, which
    writing into would follow: figures/<profile>/ or a run directory linked to a directory elsewhere has every
    file written there land in that directory. Only `d` itself is checked (see the module docstring)."""
    d = Path(d)
    if d.is_symlink():
        _refuse_symlink(d, "not a directory of its own: what is written into it would land where it points",
                        f"remove the link (rm {shlex.quote(str(d))}; what it points to is kept) and rerun, which "
                        "makes a directory there; to keep outputs on another disk, set MRP_REPRO_RUNS or "
                        "MRP_REPRO_FIGURES to a directory on it")  # fmt: skip
    d.mkdir(parents=True, exist_ok=True)
    return d


# ----------------------------------------------------------------------------- hashes


def stat_key(path: str | os.PathLike) -> tuple:
    """The facts a cached hash is keyed by (see the module docstring)."""
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def sha256(path: str | os.PathLike) -> str:
    """sha256 of the file's bytes; hashed once per process for an unchanged file (stat_key)."""
    key = stat_key(path)
    got = _cache.get(key)
    if got is None:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        got = _cache[key] = h.hexdigest()
    return got


def git_blob_sha1(path: str | os.PathLike) -> str:
    """The git object id of a file (sha1 over "blob <size>\\0" + bytes): the hub cache's name of a non-LFS blob."""
    data = Path(path).read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


# ----------------------------------------------------------------------------- records and manifests


def listed_files(d: Path, recursive: bool = False) -> list[Path]:
    """The regular files of d a manifest lists: every one but the manifest and names starting with "."."""
    d = Path(d)
    it = d.rglob("*") if recursive else d.iterdir()
    out = []
    for f in it:
        rel = f.relative_to(d)
        if any(part.startswith(".") for part in rel.parts) or rel.as_posix() == MANIFEST:
            continue
        if f.is_file():
            out.append(f)
    return sorted(out)


def record(root: Path, files: Iterable[Path]) -> dict[str, str]:
    """{path relative to root: sha256} of `files`."""
    root = Path(root)
    return {Path(f).relative_to(root).as_posix(): sha256(f) for f in sorted(files)}


def problems(root: Path, files: dict[str, str], exact: bool = False, recursive: bool = True) -> list[str]:
    """What does not match a record: "<path> is missing" / "<path> has sha256 X, recorded Y"; with exact, also every
    file under root that the record does not list ("<path> is not in the record")."""
    root = Path(root)
    out = []
    for rel, want in sorted(files.items()):
        f = root / rel
        if not f.is_file():
            out.append(f"{f} is missing")
            continue
        got = sha256(f)
        if got != want:
            out.append(f"{f} has sha256 {got[:16]}..., recorded {want[:16]}... (changed or corrupted)")
    if exact:
        listed = set(files)
        out += [f"{f} is not in the record (an extra file)" for f in listed_files(root, recursive)
                if f.relative_to(root).as_posix() not in listed]  # fmt: skip
    return out


def seal(d: str | os.PathLike, rows: dict[str, int] | None = None) -> dict:
    """Write d/integrity.json: every file of d (not recursive) with its sha256, and the row count of its tables."""
    d = Path(d)
    man = {"format": FORMAT, "files": record(d, listed_files(d)), "rows": dict(rows or {})}
    with atomic_file(d / MANIFEST) as tmp:
        tmp.write_text(json.dumps(man, indent=1, sort_keys=True))
    return man


def read_manifest(d: Path) -> dict | None:
    """d/integrity.json, or None when d has none; an unreadable one is an IntegrityError."""
    p = Path(d) / MANIFEST
    if not p.exists():
        return None
    try:
        man = json.loads(p.read_text())
        if not isinstance(man.get("files"), dict):
            raise ValueError("no `files`")
        return man
    except (OSError, UnicodeDecodeError, ValueError, AttributeError) as e:
        raise IntegrityError(f"{p} is unreadable ({type(e).__name__}: {e}); delete {d} and rerun what wrote it") from e


def verify_dir(d: str | os.PathLike, fix: str) -> dict[str, str] | None:
    """The files d/integrity.json lists ({name: sha256}) after checking that d holds exactly those, each with its
    sha256; None when d has no manifest. IntegrityError (one line: the file, why, `fix`) on the first problem."""
    d = Path(d)
    man = read_manifest(d)
    if man is None:
        return None
    bad = problems(d, man["files"], exact=True, recursive=False)
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise IntegrityError(f"{bad[0]}{more}; {fix}")
    return man["files"]


# ----------------------------------------------------------------------------- tables


def write_sidecar(path: str | os.PathLike, rows: int) -> Path:
    """<path>.sha256.json: the sha256, size and row count of a table just written."""
    path = Path(path)
    side = path.with_name(path.name + _SIDECAR)
    rec = {"sha256": sha256(path), "bytes": path.stat().st_size, "rows": int(rows)}
    with atomic_file(side) as tmp:
        tmp.write_text(json.dumps(rec, sort_keys=True))
    return side


def sidecar_problem(path: str | os.PathLike, rows: int | None = None) -> str | None:
    """Why the table at `path` must not be reused (None when it matches its sidecar): missing, no record, another
    size or sha256 (cut short, edited), or, given `rows` (the rows read from it), another row count."""
    path = Path(path)
    side = path.with_name(path.name + _SIDECAR)
    if not path.is_file():
        return f"{path} is missing"
    try:
        rec = json.loads(side.read_text())
    except (OSError, ValueError) as e:
        return f"{path} has no readable integrity record ({side.name}: {type(e).__name__})"
    if rec.get("bytes") != path.stat().st_size or rec.get("sha256") != sha256(path):
        return (f"{path} does not match its recorded sha256 ({path.stat().st_size} bytes, recorded {rec.get('bytes')}:"
                " cut short, edited or corrupted)")  # fmt: skip
    if rows is not None and rows != rec.get("rows"):
        return f"{path} has {rows} rows, recorded {rec.get('rows')}"
    return None


# ----------------------------------------------------------------------------- atomic writes


def _umask() -> int:
    """The process's umask, read without changing it (/proc/self/status; os.umask's set-and-restore elsewhere)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode a new file gets from open(): 0o666 less the umask (mkstemp's 0600 would follow it into place)."""
    return 0o666 & ~_umask()


def dir_mode() -> int:
    """The mode a new directory gets from mkdir(): 0o777 less the umask (mkdtemp's 0700 would follow it)."""
    return 0o777 & ~_umask()


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[Path]:
    """A unique temporary path beside `path` (same directory, so the rename is atomic); renamed onto `path` when the
    block ends without an exception, removed otherwise. Two writers never share a temporary name. A link at `path`
    is replaced by the file, never written through (see the module docstring)."""
    path = Path(path)
    make_dir(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, file_mode())
    finally:
        os.close(fd)
    try:
        yield Path(tmp)
        # again at the end: a writer that replaces the file at `tmp` (safetensors does) leaves its own mode, 0600
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
    except BaseException as e:
        _mark_writing(e, path)
        raise
    finally:
        Path(tmp).unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """A unique temporary directory beside `path`, moved onto `path` (replacing what was there) when the block ends
    without an exception, removed otherwise: `path` is either the old directory or the complete new one. A killed
    process leaves its `.<name>.*.tmp` beside `path`: remove_stale_temps(path), under the writer's lock, clears it."""
    path = Path(path)
    make_dir(path.parent)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    os.chmod(tmp, dir_mode())
    try:
        yield tmp
        if path.exists() or path.is_symlink():
            old = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".old"))
            os.replace(path, old / "d")  # a link at path moves as a link: rmtree below never follows it
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException as e:
        _mark_writing(e, path)
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _mark_writing(e: BaseException, path: Path) -> None:
    """Record on `e` the output being written when it was raised (the innermost wins): a full disk's error names
    no file (pyarrow, safetensors, torch's zip writer), and cli.disk_full names this one."""
    if getattr(e, "_mrp_writing", None) is None:
        with contextlib.suppress(AttributeError, TypeError):
            e._mrp_writing = str(path)


def _remove(f: Path) -> None:
    """A temporary file, or directory (never followed when it is a link)."""
    if f.is_dir() and not f.is_symlink():
        shutil.rmtree(f, ignore_errors=True)
    else:
        f.unlink(missing_ok=True)


def remove_stale_temps(path: str | os.PathLike) -> list[Path]:
    """Remove the temporary files and directories atomic_file / atomic_dir left beside `path` when their process
    was killed (`.<name>.*.tmp`, `.<name>.*.old`); returns what was removed. Only safe while holding the lock of
    everyone who writes `path` (a live writer's temporary would go too)."""
    path = Path(path)
    if not path.parent.is_dir():
        return []
    gone = []
    for f in path.parent.glob(f".{glob.escape(path.name)}.*"):
        if f.suffix not in (".tmp", ".old"):
            continue
        _remove(f)
        gone.append(f)
    return gone


def remove_stale_temps_in(d: str | os.PathLike) -> list[Path]:
    """remove_stale_temps for every name in directory `d` at once: each `.<name>.*.tmp` / `.<name>.*.old` entry
    directly in `d` (what atomic_file / atomic_dir of a killed process left there). Only safe while holding `d`'s
    stage_lock with no other writer of `d` (torchrun ranks writing side by side are such writers:
    distributed.stage_lock clears `d` on rank 0 before a barrier that every rank passes before writing)."""
    d = Path(d)
    if not d.is_dir():
        return []
    gone = []
    for f in d.iterdir():
        if not (f.name.startswith(".") and f.suffix in (".tmp", ".old") and f.name.count(".") >= 3):
            continue
        _remove(f)
        gone.append(f)
    return gone


# ----------------------------------------------------------------------------- locks

_held: dict[str, int] = {}  # lock path -> depth: a stage that calls another on the same directory (re-entrant)


@contextlib.contextmanager
def stage_lock(d: str | os.PathLike, what: str) -> Iterator[None]:
    """An advisory lock (fcntl.flock) on d/.lock for as long as a stage writes d. When another process holds it:
    StageLocked, one line naming that process's PID; nothing is written. The kernel drops the lock when its holder
    dies (kill -9 too), so a stale .lock file never blocks."""
    d = make_dir(d)  # a linked run directory is refused: the stage would write wherever it points
    lock = d / ".lock"
    key = str(d.resolve() / ".lock")  # the directory resolved, never the lock (a link there is refused below)
    if key in _held:
        _held[key] += 1
        try:
            yield
        finally:
            _held[key] -= 1
        return
    fd = _open_lock(lock)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            raise StageLocked(
                f"{d} is being written by another process (PID {holder}, {what}); wait for it to finish and rerun, "
                f"or stop it (kill {holder}) if it is stuck"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        _held[key] = 1
        try:
            yield
        finally:
            del _held[key]
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _open_lock(lock: Path) -> int:
    """d/.lock opened for reading and writing, never through a link: stage_lock truncates it to write its PID, so a
    symbolic link (O_NOFOLLOW), a hard link (st_nlink > 1) or a non-regular file there is refused (LinkRefused)
    instead of emptying the file it points to."""
    fix = f"remove it (rm {lock}) and rerun: the lock is an empty file the stage creates"
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC,
                     0o666)  # fmt: skip
    except OSError as e:
        if e.errno == errno.ELOOP or lock.is_symlink():
            _refuse_symlink(lock, "not a lock file", fix)
        raise
    st = os.fstat(fd)
    why = None
    if not stat.S_ISREG(st.st_mode):
        why = "is not a regular file"
    elif st.st_nlink > 1:
        why = f"has {st.st_nlink} hard links (another name shares its content)"
    if why is not None:
        os.close(fd)
        raise LinkRefused(f"{lock} {why}, not a lock file; {fix}")
    return fd
