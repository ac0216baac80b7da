"""The decoding grid sharded over torch.distributed ranks: collect_runs' runs frame, token for token.

    torchrun --standalone --nproc-per-node 2 -m mrp_repro.report.grids --profile smoke      # every grid
    from mrp_repro.measure.sharded import collect_runs_sharded
    path = collect_runs_sharded(profile, bb, head, shard_dir, out_csv, settings=...)  # on every rank

Work unit (a *shard*): one batch of one benchmark, exactly a batch that collect_runs decodes
(measure.runs.batch_order: prompts sorted by length, cut every batch_size), decoded with every setting, static(1)
first. Shard k of the grid (benchmarks in order, then batches in order) belongs to rank k % world, so the same
rows are decoded together as in one process and every output is the same, token for token; static and every
other setting of one prompt run on the same rank, so their wall times (and speedups) compare within a rank
(`wall_rank` names it).

Each shard is written to <shard_dir>/<benchmark>-<batch>.csv by a rename, then its sidecar .json (rows, sha256 of
the csv, the grid's key, rank, world, seconds to decode and score it, provenance) the same way. A shard is done when
its sidecar's key matches and its csv hashes to the recorded sha256; a missing or corrupt one is redone on the next
run, by whichever rank owns it then (any world size), and a finished one never is. After a barrier rank 0 checks
every shard and merges them in collect_runs' order (benchmark, setting, prompt_index) as text, each CSV cell
untouched, into `out_csv` (atomically): the file equals collect_runs' frame saved by report.paper.save_result but
for wall_s and wall_rank.
A rank that dies stops the launch (torchrun), so no merge runs on a partial set; the merge also refuses one.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from mrp_repro import distributed, integrity
from mrp_repro import inputs as run_inputs
from mrp_repro.errors import UserError
from mrp_repro.integrity import atomic_file
from mrp_repro.measure.runs import batch_order, decode_batch, eval_problems, model_for_profile, static_first
from mrp_repro.measure.schema import RUN_COLUMNS
from mrp_repro.runtime import provenance, write_json_atomic
from mrp_repro.trajectories import model_fingerprint

__all__ = ["ShardError", "grid_shards", "grid_key", "collect_runs_sharded", "merge_shards", "TIMING_COLUMNS"]

#: columns measured by a rank's clock, and the machine column (a rank's threads): the only ones a sharded grid's
#: merge may differ in from one process
TIMING_COLUMNS = ("wall_s", "wall_rank", "machine")


class ShardError(UserError, RuntimeError):
    """A grid shard is missing, corrupt or of another grid; the message names it and the fix."""


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def grid_shards(profile, backbone, benchmarks: Sequence[str], n_prompts: int | None, batch_size: int) -> list[dict]:
    """Every shard of the grid, in order: {"benchmark", "batch", "indices" (prompt indices), "problems"}."""
    from mrp_repro.backbone import encode_prompts

    out = []
    for bench in benchmarks:
        problems = eval_problems(profile, bench, n_prompts)
        for j, idx in enumerate(batch_order(encode_prompts(backbone, problems), batch_size)):
            out.append(dict(benchmark=bench, batch=j, indices=idx, problems=[problems[i] for i in idx]))
    return out


def grid_key(profile, backbone, head, shards: list[dict], settings, batch_size: int, max_new_tokens: int,
             inputs: str) -> str:
    """What a shard's rows depend on: prompts, settings, sizes, the backbone's and head's weights, the inputs."""
    spec = dict(
        model=model_for_profile(profile),
        paper_model=profile.paper.model,
        inputs=inputs,  # other hub commits or file bytes: other rows
        prompts=[[s["benchmark"], [p.task_id for p in s["problems"]]] for s in shards],
        settings=[p.name for _, p in settings],
        batch_size=batch_size,
        max_new_tokens=max_new_tokens,
        backbone=model_fingerprint(backbone.model),
        head=model_fingerprint(head) if head is not None else None,
        columns=list(RUN_COLUMNS),
        rows_version=2,  # 2: rows carry extra_rows (measure.runs.run_setting)
    )
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _names(shard: dict) -> tuple[str, str]:
    stem = f"{shard['benchmark']}-{shard['batch']:05d}"
    return f"{stem}.csv", f"{stem}.json"


def shard_problem(shard_dir: Path, shard: dict, key: str) -> str | None:
    """Why a shard is not done (None when it is)."""
    csv, side = (shard_dir / n for n in _names(shard))
    if not side.exists() or not csv.exists():
        return "is missing"
    try:
        meta = json.loads(side.read_text())
    except (OSError, ValueError) as e:
        return f"has an unreadable sidecar ({type(e).__name__})"
    if meta.get("key") != key:
        return "belongs to another grid (other prompts, settings or weights)"
    if meta.get("sha256") != _sha256(csv):
        return "does not match its recorded sha256 (corrupt or edited)"
    return None


def _decode_shard(backbone, shard: dict, settings, batch_size: int, max_new_tokens: int, model: str,
                  paper_model: str, inputs: str = "") -> pd.DataFrame:  # fmt: skip
    return decode_batch(backbone, shard["problems"], shard["indices"], settings, batch_size, max_new_tokens, model,
                        paper_model, inputs)  # fmt: skip


def _write_shard(shard_dir: Path, shard: dict, df: pd.DataFrame, key: str, d: distributed.Dist, profile,
                 seconds: float = float("nan")) -> None:  # fmt: skip
    csv_name, side_name = _names(shard)
    with atomic_file(shard_dir / csv_name) as tmp:
        df.to_csv(tmp, index=False)
    meta = dict(key=key, rows=len(df), sha256=_sha256(shard_dir / csv_name), benchmark=shard["benchmark"],
                batch=shard["batch"], prompt_indices=shard["indices"], rank=d.rank, world=d.world, seconds=seconds,
                provenance=provenance(profile))  # fmt: skip
    write_json_atomic(shard_dir / side_name, meta)


def merge_shards(shard_dir: Path, shards: list[dict], key: str, settings, benchmarks: Sequence[str], out_csv: Path,
                 rerun: str) -> Path:  # fmt: skip
    """Check every shard, then write them to out_csv (atomically) in collect_runs' row order, cells as text."""
    bad = [(s, p) for s in shards if (p := shard_problem(shard_dir, s, key)) is not None]
    if bad:
        s, p = bad[0]
        raise ShardError(
            f"{len(bad)} of {len(shards)} grid shards are not done, e.g. {shard_dir / _names(s)[0]} {p}; no merged "
            f"file was written. Rerun {rerun}: it redoes only those shards"
        )
    frames = [pd.read_csv(shard_dir / _names(s)[0], dtype=str, keep_default_na=False) for s in shards]
    df = pd.concat(frames, ignore_index=True)
    bench_rank = {b: i for i, b in enumerate(benchmarks)}
    setting_rank = {p.name: i for i, (_, p) in enumerate(settings)}
    order = sorted(
        range(len(df)),
        key=lambda i: (bench_rank[df.at[i, "benchmark"]], setting_rank[df.at[i, "setting"]],
                       int(df.at[i, "prompt_index"])),
    )  # fmt: skip
    buf = io.StringIO()
    df.iloc[order].to_csv(buf, index=False)
    with atomic_file(out_csv) as tmp:
        tmp.write_text(buf.getvalue())
    integrity.write_sidecar(out_csv, rows=len(df))  # its sha256 and rows: report.paper.load_result checks them
    from mrp_repro.runtime import stamp_computed

    stamp_computed(out_csv)  # the commit that computed it (runtime: provenance of reuse)
    return out_csv


def collect_runs_sharded(profile, backbone, head, shard_dir: str | os.PathLike, out_csv: str | os.PathLike,
                         n_prompts: int | None = None, benchmarks: Sequence[str] | None = None, settings=None,
                         batch_size: int | None = None, max_new_tokens: int | None = None, progress: bool = False,
                         rerun: str = "the same command", inputs: str | None = None) -> Path | None:  # fmt: skip
    """Decode this rank's missing shards, then (rank 0, after every rank is done) merge all of them into out_csv.
    The arguments mean what they mean for collect_runs. Returns out_csv on rank 0, None on the others."""
    d = distributed.current()
    dec = profile.decoding
    bs, max_new = batch_size or dec.batch_size, max_new_tokens or dec.max_new_tokens
    settings = static_first(profile, head, settings, "a sharded grid")
    benchmarks = list(benchmarks or profile.evaluation.benchmarks)
    shard_dir, out_csv = Path(shard_dir), Path(out_csv)
    shard_dir.mkdir(parents=True, exist_ok=True)
    shards = grid_shards(profile, backbone, benchmarks, n_prompts, bs)
    resolved = inputs if inputs is not None else run_inputs.summary_for(profile)  # once: the key and the rows
    key = grid_key(profile, backbone, head, shards, settings, bs, max_new, resolved)
    # rank 0 holds shard_dir's lock for the launch and clears a killed run's temporaries before any rank writes
    with distributed.stage_lock(shard_dir, "a sharded decoding grid"):
        mine = [s for s in d.shard(shards) if shard_problem(shard_dir, s, key) is not None]
        if progress:
            from tqdm.auto import tqdm

            mine = tqdm(mine, desc=f"grid shards (rank {d.rank}/{d.world})", dynamic_ncols=True)
        model = model_for_profile(profile)
        for s in mine:
            t0 = time.perf_counter()
            df = _decode_shard(backbone, s, settings, bs, max_new, model, profile.paper.model, resolved)
            _write_shard(shard_dir, s, df, key, d, profile, seconds=time.perf_counter() - t0)
        d.barrier()
        if not d.is_main:
            d.barrier()  # rank 0 merges; the launch ends when every rank has returned
            return None
        try:
            return merge_shards(shard_dir, shards, key, settings, benchmarks, out_csv, rerun)
        finally:
            d.barrier()
