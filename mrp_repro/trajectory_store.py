"""On-disk storage of MRP training trajectories (the rows `mrp_repro.trajectories` collects): parquet
shards with their sha256, the manifest, settings checks, resume, the torchrun rank merge, loading and verification.

    python -m mrp_repro.stages trajectories --profile P    # writes runs/<P>/trajectories-... via trajectories.collect
    from mrp_repro.trajectories import load_trajectories, read_manifest  # these names are re-exported there
    ds = load_trajectories(out_dir)            # datasets.Dataset, one row per (example, block, step)

Storage: parquet shards `shard-00000.parquet` (examples [i*shard_size, (i+1)*shard_size)), each
written to a temporary file and renamed, and `manifest.json` (rewritten atomically after each shard)
with the profile hash, source, settings, backbone fingerprint and every shard's rows and sha256.
Each shard's randomness is seeded by (seed, shard index) and each example's answer by
(seed, example index), so a killed run resumes at the first missing shard and the result equals
an uninterrupted run's.

Under torchrun (one process per rank; the stage CLI calls distributed.init()):

    torchrun --standalone --nproc-per-node N -m mrp_repro.stages trajectories --profile P

every rank calls `collect` with the same arguments and collects the shards i with i % N == rank. A shard's
content depends on (seed, shard index) only, so N ranks write the same bytes as one process. No two ranks
write one file: each finished shard is recorded in its own `finished/shard-XXXXX.json` (index, file, rows,
bytes, sha256, written atomically after the shard); rank 0 alone writes manifest.json, once at the start
(the kept shards, complete=False) and, after every rank has reported, once more with complete=True if every
shard is there and matches its sha256 (else the run fails naming the shards, and the manifest stays
unfinished). A rank that fails reports it and waits for the others to finish their shards, then every rank
raises. Ranks meet through small files in out_dir/.sync-<run token>/ rather than long collectives, so a
rank collecting a long shard does not trip the process group's timeout; multi-node runs need out_dir on a
shared filesystem. Resume works on any world size: listed or recorded shards that verify are kept
(`finished/` records are folded into the manifest), missing or corrupt ones are redone by their owner now.
With world 1 nothing of this runs and the layout is as above.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from mrp_repro.errors import UserError
from mrp_repro.integrity import atomic_file
from mrp_repro.runtime import sha256_file, write_json_atomic

__all__ = [
    "FORMAT_VERSION",
    "TrajectoryError",
    "TrajectoriesNotFound",
    "DEFAULT_RERUN",
    "load_trajectories",
    "read_manifest",
    "shard_problem",
]

FORMAT_VERSION = 1


class TrajectoryError(UserError, RuntimeError):
    """A trajectory directory that cannot be used as it is (corrupt shard, other backbone/profile)."""


class TrajectoriesNotFound(TrajectoryError, FileNotFoundError):
    """No manifest.json in a directory (a FileNotFoundError, as before)."""


# Only for a caller that names no command and a manifest that records none (written before it did): the stages
# always pass their profile's own command, so no advice holds a placeholder to fill in.
DEFAULT_RERUN = "the collection that wrote it (trajectories.collect with the same arguments)"


# ----------------------------------------------------------------------------- fingerprints


# ----------------------------------------------------------------------------- storage

_SCHEMA = pa.schema(
    [
        ("example", pa.int64()),
        ("block", pa.int32()),
        ("step", pa.int32()),
        ("context_ids", pa.list_(pa.int32())),
        ("block_start", pa.int32()),
        ("ids", pa.list_(pa.int32())),
        ("answer_mask", pa.list_(pa.bool_())),
        ("reveal_step", pa.list_(pa.int8())),
        ("reveal_pos", pa.list_(pa.int32())),
        ("reveal_tok", pa.list_(pa.int32())),
        ("next_pos", pa.int32()),
        ("next_tok", pa.int32()),
        ("hidden", pa.list_(pa.float32())),
        ("n_steps", pa.int32()),
        ("t", pa.float32()),
    ]
)


def _write_shard(rows: list[dict], path: Path) -> None:
    cols = {f.name: [r[f.name] for r in rows] for f in _SCHEMA}
    table = pa.table({k: pa.array(v, type=_SCHEMA.field(k).type) for k, v in cols.items()}, schema=_SCHEMA)
    with atomic_file(path) as tmp:  # a unique temporary name: two writers never share one
        pq.write_table(table, tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())


def read_manifest(out_dir: str | os.PathLike, rerun: str | None = None) -> dict:
    """manifest.json of a collection. rerun: the command a caller that knows its profile names in errors."""
    path = Path(out_dir) / "manifest.json"
    if not path.exists():
        raise TrajectoriesNotFound(f"{out_dir}: no trajectories here (no manifest.json); collect them first")
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        # Written atomically, so this is outside damage; without it no shard can be trusted.
        raise TrajectoryError(
            f"{path} is unreadable ({e}); delete the directory {Path(out_dir)} and rerun {rerun or DEFAULT_RERUN}"
        ) from e


def _rerun(manifest: dict, rerun: str | None = None) -> str:
    """The caller's command, else the one the collection recorded (older manifests record none)."""
    return rerun or manifest.get("rerun") or DEFAULT_RERUN


def _check_settings(manifest: dict, settings: dict, out_dir: Path) -> None:
    diff = {k: (manifest.get(k), v) for k, v in settings.items() if manifest.get(k) != v}
    if diff:
        what = ", ".join(f"{k}: stored {a!r} vs now {b!r}" for k, (a, b) in sorted(diff.items()))
        who = "another backbone/profile" if {"backbone_hash", "profile_hash"} & diff.keys() else "other settings"
        raise TrajectoryError(
            f"{out_dir} holds trajectories collected with {who} ({what}); delete the directory or collect "
            "into another one"
        )


def shard_problem(out_dir: Path, entry: dict, full: bool) -> str | None:
    """Why a listed shard cannot be used (None if it can). full=False checks existence and size only
    (a stat); full=True also the sha256 (reads the file)."""
    path = out_dir / entry["file"]
    if not path.exists():
        return "is listed in the manifest but missing"
    size = path.stat().st_size
    if entry.get("bytes") is not None and size != entry["bytes"]:
        return f"is truncated or overwritten ({size} bytes, manifest {entry['bytes']})"
    if full:
        sha = sha256_file(path)
        if sha != entry["sha256"]:
            return f"is corrupted (sha256 {sha[:12]}... != manifest {entry['sha256'][:12]}...)"
    return None


def _verify_shard(out_dir: Path, entry: dict, rerun: str = DEFAULT_RERUN, full: bool = True) -> None:
    problem = shard_problem(out_dir, entry, full)
    if problem is None:
        return
    path = out_dir / entry["file"]
    if "missing" in problem:
        raise TrajectoryError(f"shard {path} {problem}; rerun {rerun}: it rewrites only the missing shards")
    raise TrajectoryError(f"shard {path} {problem}: delete {path.name} and rerun {rerun}: it rewrites only that shard")


# ----------------------------------------------------------------------------- resume state

FINISHED = "finished"  # multi-rank runs: one <shard>.json per finished shard, written by the rank that made it
SYNC_POLL_S = 0.2


def _settings_key(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def _finished_entries(out: Path, key: str) -> list[dict]:
    """Shard entries recorded by ranks of an unfinished multi-rank run (those of these settings)."""
    entries = []
    for p in sorted((out / FINISHED).glob("shard-*.json")):
        try:
            e = json.loads(p.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue  # written atomically: unreadable means outside damage; the shard is simply redone
        if isinstance(e, dict) and e.pop("settings_key", None) == key:
            entries.append(e)
    return entries


def _prepare(out: Path, settings: dict, rerun: str | None, n_shards: int) -> dict:
    """The manifest to resume from, written back with complete=False: every shard listed in it or recorded
    by a rank of an earlier multi-rank run that exists and matches its sha256; the rest are to be redone."""
    mpath = out / "manifest.json"
    if mpath.exists():
        manifest = read_manifest(out)
        _check_settings(manifest, settings, out)
    else:
        manifest = {**settings, "shards": []}
    kept: dict[int, dict] = {}
    problems: dict[int, str] = {}
    for e in manifest["shards"] + _finished_entries(out, _settings_key(settings)):
        i = e.get("index")
        if i in kept or not isinstance(i, int) or not 0 <= i < n_shards:
            continue
        problem = shard_problem(out, e, full=True)  # a resume reads every kept shard once: affordable
        if problem is None:
            kept[i] = e
            problems.pop(i, None)
        else:
            problems[i] = f"shard {out / e['file']} {problem}"
    for why in problems.values():
        print(f"trajectories: {why}; collecting it again", file=sys.stderr)
    manifest["shards"] = [kept[i] for i in sorted(kept)]
    manifest["complete"] = False
    if rerun:
        manifest["rerun"] = rerun
    write_json_atomic(mpath, manifest)  # before any rewrite: the manifest never lists a shard being redone
    # every usable record is in the manifest now; dropping the rest means no stale record outlives a rewrite
    shutil.rmtree(out / FINISHED, ignore_errors=True)
    return manifest


def _finish(out: Path, manifest: dict) -> Path:
    manifest["complete"] = True
    manifest["n_rows"] = sum(e["rows"] for e in manifest["shards"])
    return write_json_atomic(out / "manifest.json", manifest)


# ----------------------------------------------------------------------------- collect under torchrun


def _post(path: Path, obj: dict) -> None:
    write_json_atomic(path, obj)


def _await(path: Path) -> dict:
    """Wait for a file another rank posts. Files, not collectives: a rank still collecting a long shard
    must not trip the process group's timeout (NCCL's watchdog aborts after 10 minutes by default). A rank
    that dies is not waited for forever: torchrun stops the other ranks when one fails."""
    while True:
        try:
            return json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            time.sleep(SYNC_POLL_S)


def _collect_ranks(d, out, settings, rerun, n_shards, make_shard, shard_len, progress, source) -> Path:
    """Every rank collects its shards and records each in finished/<shard>.json (no two ranks write one
    file); rank 0 alone writes manifest.json: at the start (what is kept), and once every rank has reported
    and every shard verifies against its sha256, complete. Ranks meet through small files in a per-run
    directory .sync-<token> of out (a shared filesystem across nodes, as the shards themselves need)."""
    token = d.broadcast_object(uuid.uuid4().hex if d.is_main else None)
    sync = out / f".sync-{token}"
    key = _settings_key(settings)
    if d.is_main:
        for old in out.glob(".sync-*"):  # left by a killed run; no rank of this run has posted yet
            if old != sync:
                shutil.rmtree(old, ignore_errors=True)
        try:
            manifest = _prepare(out, settings, rerun, n_shards)
        except Exception as e:
            _post(sync / "plan.json", {"error": f"{type(e).__name__}: {e}"})
            raise
        _post(sync / "plan.json", {"done": [e["index"] for e in manifest["shards"]], "settings": settings})
    plan = _await(sync / "plan.json")
    if "error" in plan:
        raise TrajectoryError(f"rank 0 could not start the collection in {out}: {plan['error']}")
    mine = [i for i in d.shard(range(n_shards)) if i not in set(plan["done"])]
    bar = None
    if progress and d.is_main:
        from tqdm.auto import tqdm

        bar = tqdm(total=sum(map(shard_len, mine)), desc=f"trajectories {source} (rank 0 of {d.world})", unit="ex")
    error = None
    try:
        diff = sorted(k for k in settings if plan["settings"].get(k) != settings[k])
        if diff:
            raise TrajectoryError(
                f"rank {d.rank} collects with other settings than rank 0 ({', '.join(diff)} differ): every rank "
                "must load the same backbone, profile and examples"
            )
        for i in mine:
            entry = make_shard(i)
            write_json_atomic(out / FINISHED / f"{Path(entry['file']).stem}.json", {**entry, "settings_key": key})
            if bar is not None:
                bar.update(shard_len(i))
    except Exception as e:  # reported, then re-raised once every rank has reported: the others finish theirs
        error = e
    finally:
        if bar is not None:
            bar.close()
    _post(sync / f"rank-{d.rank}.json", {"error": None if error is None else f"{type(error).__name__}: {error}"})
    reports = {r: _await(sync / f"rank-{r}.json")["error"] for r in range(d.world)}
    if d.is_main:
        result = {"error": None}
        try:
            _merge(out, n_shards, key, reports, rerun)
        except Exception as e:
            result = {"error": str(e)}
            error = error or e
        _post(sync / "result.json", result)
    result = _await(sync / "result.json")
    d.barrier()  # everyone has read result.json: the sync directory can go
    if d.is_main:
        shutil.rmtree(sync, ignore_errors=True)
    if error is not None:
        raise error
    if result["error"]:
        raise TrajectoryError(result["error"])
    return out / "manifest.json"


def _merge(out: Path, n_shards: int, key: str, reports: dict, rerun: str | None) -> None:
    """Rank 0: the complete manifest from the kept shards and the ranks' records, or a TrajectoryError
    (and the manifest stays unfinished) when a rank failed or a shard is missing or does not verify."""
    again = f"rerun {rerun or DEFAULT_RERUN} (on any number of ranks) to collect only the shards still missing"
    failed = {r: e for r, e in reports.items() if e}
    if failed:
        r, e = next(iter(failed.items()))
        raise TrajectoryError(
            f"rank{'s' if len(failed) > 1 else ''} {', '.join(map(str, failed))} failed (rank {r}: {e}); the "
            f"collection in {out} is unfinished, the shards that were finished are kept: {again}"
        )
    manifest = read_manifest(out)
    entries = {e["index"]: e for e in manifest["shards"]}  # hashed by _prepare in this run: a stat suffices
    problems = [f"shard {out / e['file']} {p}" for e in entries.values() if (p := shard_problem(out, e, False))]
    for e in _finished_entries(out, key):
        if e["index"] not in entries:
            p = shard_problem(out, e, full=True)
            if p is None:
                entries[e["index"]] = e
            else:
                problems.append(f"shard {out / e['file']} {p}")
    missing = [i for i in range(n_shards) if i not in entries]
    if missing:
        problems.append(f"shards {missing} have no record of being finished")
    if problems:
        raise TrajectoryError(f"{out}: not marked complete: {'; '.join(problems)}: {again}")
    manifest["shards"] = [entries[i] for i in range(n_shards)]
    _finish(out, manifest)
    shutil.rmtree(out / FINISHED, ignore_errors=True)


# ----------------------------------------------------------------------------- load


def load_trajectories(
    out_dir: str | os.PathLike, verify: bool = True, expect: dict | None = None, rerun: str | None = None
):
    """All rows of a finished collection, in shard order, as a `datasets.Dataset` (Arrow, in memory).

    verify: check every shard's sha256 against the manifest. expect: settings that must match
    (e.g. {"backbone_hash": ..., "profile_hash": ...}); a mismatch raises TrajectoryError. rerun: the command
    errors name (the stages pass their profile's), before the one the manifest records."""
    import datasets

    out = Path(out_dir)
    manifest = read_manifest(out, rerun)
    if expect:
        _check_settings(manifest, expect, out)
    rerun = _rerun(manifest, rerun)
    if not manifest.get("complete"):
        raise TrajectoryError(f"{out}: the collection is unfinished; rerun {rerun} to resume it")
    tables = []
    for e in manifest["shards"]:
        _verify_shard(out, e, rerun, full=verify)  # verify=False still stats: a missing shard is named
        try:
            tables.append(pq.read_table(out / e["file"], schema=_SCHEMA))
        except (OSError, pa.ArrowException) as err:  # only reachable with verify=False or a racing writer
            raise TrajectoryError(
                f"shard {out / e['file']} is unreadable ({type(err).__name__}: {err}): delete {e['file']} and "
                f"rerun {rerun}: it rewrites only that shard"
            ) from err
    table = pa.concat_tables(tables) if tables else _SCHEMA.empty_table()
    # The fingerprint names the rows by their shards' recorded sha256s. Left to datasets, it pickles the whole
    # in-memory table to hash it: several copies of it at once (chain16's self collection: killed at 24 GB).
    fingerprint = hashlib.sha256(json.dumps([e.get("sha256") for e in manifest["shards"]]).encode()).hexdigest()[:16]
    ds = datasets.Dataset(datasets.table.InMemoryTable(table), fingerprint=fingerprint)
    ds.info.description = json.dumps({k: v for k, v in manifest.items() if k != "shards"})
    return ds
