"""The grid: decode every problem with every decoding setting, score it, one runs record per (prompt, setting).

    from mrp_repro.measure.runs import collect_runs, settings_for, eval_problems
    runs = collect_runs(profile, backbone, head)                        # every mode (the notebooks' runs frame)
    runs = collect_runs(profile, backbone, head, settings=settings_for(profile, head, ("static", "speculative")),
                        batch_size=1)                                   # the latency regime of 05

The only producer of runs frames; the columns are mrp_repro.measure.schema.RUN_COLUMNS. Summaries are
mrp_repro.measure.stats.summarize; tables and figures live in mrp_repro.report.

Settings (METHOD.md §1, §3-5): static(1); dynamic(tau) for the profile thresholds (with a head: also every
remasking tau, the remask rows' paired baseline); speculative K in
decoding.speculative_k x drafter {mrp, oracle, naive}; direct steps {1, 2} + decoding.lookahead_k;
naive lookahead K in decoding.lookahead_k (reveals K + 1 tokens per forward); remask tau in
{0.5, 0.3} + thresholds x decoding.remask_rules. With "upstream" in decoding.algorithms (and a head), the
released code's speculative for every K (decoding.upstream, draft logits decoding.upstream_draft_logits) and its
static, their reference (column `algorithm`); without "ours" there, our speculative is left out. With "upstream"
and a head, also the released code's remasking (decoding.upstream_remask): UpstreamDynamic(tau), its baseline, and
UpstreamRemask(tau, delta) for delta in decoding.upstream_remask_deltas, at every remasking tau.

Resuming (collect_runs(..., partial=dir); report.grids passes <result>.partial/): after each batch its rows are
written to <dir>/<benchmark>-<batch>.json (write_partial: a header line with the batch's key, its rows' sha256 and
who decoded it, then the rows with their dtypes; a unique temporary name renamed into place, so a killed process
leaves the finished batches and never half a file under that name). A rerun reads every batch whose key matches
(batch_key: the grid's settings, sizes, weights, inputs, profile hash and the batch's own prompts) and decodes the
rest; the frame equals an uninterrupted run's but for wall_s and resumed_from, which names the earlier process that
decoded a kept row ('' on rows decoded by the call that returns the frame). A file of another spec, cut short,
edited or not of this format is not read: a note on stderr names it, and its batch is decoded again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import hashlib
import json
import math
import os
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from mrp_repro import distributed
from mrp_repro import inputs as run_inputs
from mrp_repro.decoding import (
    DRAFTERS,
    REMASK_RULES,
    Direct,
    Dynamic,
    NaiveLookahead,
    Policy,
    Remask,
    Speculative,
    Static,
)
from mrp_repro.decoding.upstream import UpstreamSpeculative, UpstreamStatic
from mrp_repro.decoding.upstream_remask import UpstreamDynamic, UpstreamRemask
from mrp_repro.measure.schema import MODES, RUN_COLUMNS, UPSTREAM_COUNTERS
from mrp_repro.runtime import machine_summary
from mrp_repro.tasks import synthetic

__all__ = ["model_for_profile", "score_problem", "eval_problems", "settings_for", "static_first", "batch_order",
           "run_setting", "decode_batch", "in_grid_order", "collect_runs", "decode_events", "identical_to_static",
           "PARTIAL_FORMAT", "grid_record", "batch_key", "write_partial", "read_partial", "partial_path"]  # fmt: skip

def model_for_profile(profile) -> str:
    """The model name our runs carry: the declared paper model (profile.paper.model) where our numbers compare
    with the paper's (profile.paper.comparable), else the profile's name (tiny, smoke, sdar-mini)."""
    return profile.paper.model if profile.paper.comparable else profile.name


def score_problem(problem, text: str) -> dict:
    """{"correct", "valid_chain" (NaN for real benchmarks), "extracted", "sandbox"} for one output."""
    b = problem.benchmark
    if b in synthetic.TASKS:
        return {"sandbox": "", **synthetic.score(problem, text)}
    from mrp_repro.tasks import extract

    if b in ("gsm8k", "math500"):
        r = extract.score_math(text, problem.reference, benchmark=b)
        sandbox = ""  # nothing is executed
    elif b in ("humaneval", "mbpp"):
        r = extract.score_code(text, problem)
        sandbox = r["sandbox"]  # which sandbox ran the tests: "bwrap", or "guard-only" when opted in
    else:
        raise ValueError(f"no scorer for benchmark {b!r}; add one to measure.runs.score_problem")
    return {"correct": bool(r["correct"]), "valid_chain": math.nan, "extracted": r["extracted"], "sandbox": sandbox}


def eval_problems(profile, task: str | None = None, n: int | None = None) -> list:
    """Held-out problems of one task (or of every evaluation.benchmarks entry): the test split of a
    synthetic task, or the first n of a real benchmark (n defaults to evaluation.n_prompts)."""
    from mrp_repro.runtime import data_dir
    from mrp_repro.tasks import benchmarks

    if task is None:
        return [p for t in profile.evaluation.benchmarks for p in eval_problems(profile, t, n)]
    n = n if n is not None else profile.evaluation.n_prompts
    if task in synthetic.TASKS:
        return synthetic.generate(task, "test", n or profile.data.n_eval or 200, profile.data.seed, profile.block_size)
    return benchmarks.load_benchmark(task, data_dir(profile), limit=n)


def settings_for(profile, head, modes: Sequence[str] = MODES) -> list[tuple[str, Policy]]:
    """(mode, policy) of every benchmarked setting of the given modes; the MRP settings only with a head."""
    bad = set(modes) - set(MODES)
    if bad:
        raise ValueError(f"unknown mode(s) {sorted(bad)}; valid: {', '.join(MODES)}")
    d = profile.decoding
    remask_taus = sorted({0.5, 0.3, *d.thresholds}, reverse=True)
    out: list[tuple[str, Policy]] = [("static", Static(1))]
    # with a head, dynamic(tau) at every remasking tau too: remask(tau) is paired with it (the remasking table)
    out += [("dynamic", Dynamic(t)) for t in (remask_taus if head is not None else d.thresholds)]
    if "ours" in d.algorithms:
        drafters = [dr for dr in DRAFTERS if dr != "mrp" or head is not None]
        out += [("speculative", Speculative(K, dr, head=head, verify=d.verify)) for K in d.speculative_k
                for dr in drafters]  # fmt: skip
    upstream = "upstream" in d.algorithms and head is not None
    if upstream and {"speculative", "dynamic", "remask"} & set(modes):
        # their static is the reference of their other settings (identical_to_static), decoded with them
        out += [("static", UpstreamStatic())]
    if upstream and "speculative" in modes:
        out += [("speculative", UpstreamSpeculative(K, head, d.upstream_draft_logits, d.upstream_sum_scale, d.verify))
                for K in d.speculative_k]  # fmt: skip
    if head is not None:  # direct steps 1/2 (the direct table) and every lookahead K (the lookahead table)
        out += [("direct", Direct(s, head=head)) for s in sorted({1, 2, *d.lookahead_k})]
    # The paper's lookahead K counts tokens beyond the backbone's own pick (its naive K = 1 row is below
    # static, its MRP K = 1 row equals direct step 1), so naive lookahead K reveals K + 1 tokens.
    out += [("naive", NaiveLookahead(k + 1)) for k in d.lookahead_k]
    if head is not None:
        for t in remask_taus:
            for rule in (r for r in REMASK_RULES if r in d.remask_rules):
                delta = {"delta": d.remask_delta, "logp-delta": d.remask_logp_delta}.get(rule)
                out.append(("remask", Remask(t, rule, delta=delta, head=head)))
        if upstream:  # the released code's remasking, paired with its own dynamic(tau)
            for t in remask_taus:
                out.append(("dynamic", UpstreamDynamic(t)))
                out += [("remask", UpstreamRemask(t, x, head=head)) for x in d.upstream_remask_deltas]
    return [(m, p) for m, p in out if m in modes]


def _setting_columns(mode: str, pol: Policy) -> dict:
    """The schema's setting columns of one policy (NaN / '' where the mode has no such parameter)."""
    K = {"speculative": lambda: pol.K, "direct": lambda: pol.steps, "naive": lambda: pol.k - 1}.get(mode)
    return {
        "algorithm": pol.algorithm,
        "mode": mode,
        "setting": pol.name,
        "K": float(K()) if K else math.nan,
        "threshold": float(pol.tau) if mode in ("dynamic", "remask") else math.nan,
        "rule": pol.rule if mode == "remask" else "",
        "delta": float(pol.delta) if mode == "remask" and getattr(pol, "delta", None) is not None else math.nan,
        "drafter": pol.drafter if mode == "speculative" else "",
        "verify": str(getattr(pol, "verify", "")) if mode == "speculative" else "",
    }


def batch_order(prompts: Sequence[Sequence[int]], batch_size: int) -> list[list[int]]:
    """The batches run_setting decodes: prompt indices sorted by (length, index), cut every batch_size.
    measure.sharded hands out exactly these batches, so a sharded grid decodes the same rows together."""
    order = sorted(range(len(prompts)), key=lambda i: (len(prompts[i]), i))
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def run_setting(backbone, problems: Sequence, mode: str, policy: Policy, batch_size: int, max_new_tokens: int,
                model: str, paper_model: str = "", progress: bool = False,
                inputs: str = "") -> pd.DataFrame:  # fmt: skip
    """Decode every problem with `policy`; one runs record per problem, in the input order (identical_to_static
    is left False: collect_runs fills it against the static run of the same problems).

    Batches are formed after sorting by prompt length (less padding); wall_s is the batch's wall time split
    evenly over its rows."""
    from mrp_repro.backbone import decode, encode_prompts

    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; valid: {', '.join(MODES)}")
    prompts = encode_prompts(backbone, problems)
    batches = batch_order(prompts, batch_size)
    if progress:
        from tqdm.auto import tqdm

        batches = tqdm(batches, desc=policy.name, leave=False, dynamic_ncols=True)
    setting = _setting_columns(mode, policy)
    rank = distributed.current().rank
    machine = machine_summary()
    rows: dict[int, dict] = {}
    for idx in batches:
        t0 = time.perf_counter()
        res = backbone.generate([prompts[i] for i in idx], policy, max_new_tokens)
        wall = (time.perf_counter() - t0) / len(idx)
        for j, i in enumerate(idx):
            p, s = problems[i], res.stats[j]
            text = decode(backbone, res.tokens[j])
            sc = score_problem(p, text)
            rows[i] = {
                "model": model, "paper_model": paper_model, "inputs": inputs, "machine": machine,
                "benchmark": p.benchmark,
                "problem_id": p.task_id,
                "prompt_index": i, **setting,
                "batch_size": batch_size, "correct": bool(sc["correct"]), "valid_chain": float(sc["valid_chain"]),
                "extracted": sc["extracted"], "sandbox": sc.get("sandbox", ""), "text": text, "tokens": s.tokens,
                "denoise_forwards": s.denoise_forwards, "commit_forwards": s.commit_forwards,
                "fused_commits": s.fused_commits, "mrp_forwards": s.mrp_forwards, "rounds": s.rounds,
                "drafted": s.drafted, "accepted": s.accepted, "revoked": s.revoked,
                "accept_lengths": " ".join(map(str, s.accept_lengths)), "extra_rows": int(getattr(s, "extra_rows", 0)),
                "wall_s": wall, "wall_rank": rank,
                "resumed_from": "", "identical_to_static": False,
                **_upstream_columns(res, len(idx)),
            }  # fmt: skip
    return pd.DataFrame([rows[i] for i in range(len(problems))], columns=list(RUN_COLUMNS))


def _upstream_columns(res, rows: int) -> dict:
    """The upstream counter columns of one row of a batch of `rows`: the batch's counts / rows; NaN for ours."""
    batch = getattr(res, "batch", None)  # decoding.upstream.UpstreamResult
    if batch is None:
        return {c: math.nan for c in UPSTREAM_COUNTERS}
    return {c: getattr(batch, attr) / rows for c, attr in UPSTREAM_COUNTERS.items()}


def static_first(profile, head, settings, what: str) -> list[tuple[str, Policy]]:
    """`settings` (default settings_for(profile, head)) with the static settings first, one per algorithm: the
    reference every other setting of that algorithm compares with (identical_to_static). ValueError unless our
    static(1) is there and every algorithm has exactly one static."""
    settings = list(settings if settings is not None else settings_for(profile, head))
    static = [s for s in settings if s[0] == "static"]
    by_algo = [p.algorithm for _, p in static]
    if "static(1)" not in [p.name for _, p in static] or len(set(by_algo)) != len(by_algo) or (
        {p.algorithm for _, p in settings} != set(by_algo)
    ):
        raise ValueError(f"{what} needs our static(1) and exactly one static setting per algorithm (the reference "
                         "of identical_to_static)")  # fmt: skip
    return static + [s for s in settings if s[0] != "static"]


def in_grid_order(frame: pd.DataFrame, settings) -> pd.DataFrame:
    """`frame`'s rows of `settings` ((mode, policy) pairs, as static_first orders them) in collect_runs' order:
    benchmark (first appearance), setting, prompt. A grid assembled from stored rows (a covered grid, the peers grid
    with modes_runs' rows) keeps the order of one decoded whole."""
    rank = {p.name: i for i, (_, p) in enumerate(settings)}
    sub = frame[frame["setting"].isin(rank)]
    bench = {b: i for i, b in enumerate(dict.fromkeys(sub["benchmark"]))}
    sub = sub.assign(_b=sub["benchmark"].map(bench), _s=sub["setting"].map(rank))
    sub = sub.sort_values(["_b", "_s", "prompt_index"], kind="stable")
    return sub.drop(columns=["_b", "_s"]).reset_index(drop=True)


def identical_to_static(refs: dict, policy, text):
    """text (array) == the static output of policy's algorithm (refs: algorithm -> texts; the first call of an
    algorithm, its static, records them)."""
    ref = refs.setdefault(policy.algorithm, text)
    return text == ref


def decode_batch(backbone, problems: Sequence, indices: Sequence[int], settings, batch_size: int,
                 max_new_tokens: int, model: str, paper_model: str = "", inputs: str = "") -> pd.DataFrame:  # fmt: skip
    """One batch of a benchmark (`problems`, at positions `indices` of its evaluation list) decoded with every
    setting in turn, each algorithm's static(1) first (that algorithm's reference of identical_to_static). Every
    setting of a prompt runs back to back, so a slow stretch of the machine hits static and the others alike: their
    wall-clock ratios are paired (at batch 1 this is the speedup's measurement of record). collect_runs and
    measure.sharded decode through it."""
    frames, refs = [], {}
    for mode, pol in settings:
        df = run_setting(backbone, problems, mode, pol, batch_size, max_new_tokens, model, paper_model,
                         inputs=inputs)  # fmt: skip
        df["prompt_index"] = [indices[i] for i in df["prompt_index"]]
        df["identical_to_static"] = identical_to_static(refs, pol, df["text"].to_numpy())
        frames.append(df)
    out = pd.concat(frames, ignore_index=True)
    for c in ("valid_chain", "K", "threshold"):  # floats whatever the batch holds
        out[c] = out[c].astype(float)
    return out


#: the first field of a partial batch file's header line (write_partial); a file without it is not read
PARTIAL_FORMAT = "mrp-runs-partial-batch/2"  # 2: rows carry extra_rows


def grid_record(profile, backbone, head, settings, batch_size: int, max_new_tokens: int, inputs: str) -> dict:
    """What every batch of a grid depends on beyond its own prompts (batch_key hashes it): the runs columns, model
    names, resolved inputs, the profile's hash (and the backbone's profile's, whose decoding options generate reads),
    the settings in decoding order, batch size, max_new_tokens, the backbone's and head's weight fingerprints."""
    from mrp_repro.trajectories import model_fingerprint

    bb_profile = getattr(backbone, "profile", None)
    return dict(
        format=PARTIAL_FORMAT,
        columns=list(RUN_COLUMNS),
        model=model_for_profile(profile),
        paper_model=profile.paper.model,
        inputs=inputs,
        profile_hash=profile.hash,
        backbone_profile_hash=bb_profile.hash if bb_profile is not None else None,
        settings=[[m, p.name] for m, p in settings],
        batch_size=batch_size,
        max_new_tokens=max_new_tokens,
        backbone=model_fingerprint(backbone.model),
        head=model_fingerprint(head) if head is not None else None,
    )


def batch_key(grid: dict, benchmark: str, batch: int, indices: Sequence[int], problems: Sequence,
              prompts: Sequence[Sequence[int]]) -> str:  # fmt: skip
    """The key of one batch of a grid (grid_record): the grid, the benchmark, the batch's position, its prompt
    indices, its problems (every field) and their encoded prompts; 24 hex of the sha256."""
    rec = dict(grid=grid, benchmark=benchmark, batch=batch, indices=[int(i) for i in indices],
               problems=[dataclasses.asdict(q) if dataclasses.is_dataclass(q) else repr(q) for q in problems],
               prompts=[[int(t) for t in x] for x in prompts])  # fmt: skip
    return hashlib.sha256(json.dumps(rec, sort_keys=True, default=str).encode()).hexdigest()[:24]


def partial_path(partial: str | os.PathLike, benchmark: str, batch: int) -> Path:
    """<partial>/<benchmark>-<batch, 5 digits>.json: where collect_runs keeps one finished batch."""
    return Path(partial) / f"{benchmark}-{batch:05d}.json"


def _decoded_by() -> str:
    """`<commit 12 hex>[-dirty] pid <pid> on <host> at <UTC now>`: who decodes a batch, and when (resumed_from)."""
    from mrp_repro.runtime import code_version

    v = code_version()
    at = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    return (f"{v['git_commit'][:12]}{'-dirty' if v['git_dirty'] else ''} pid {os.getpid()} on {socket.gethostname()} "
            f"at {at}")  # fmt: skip


def _native(v):
    """A numpy scalar in an object column as the Python value json writes."""
    item = getattr(v, "item", None)
    if item is None:
        raise TypeError(f"{type(v).__name__} is not JSON serialisable")
    return item()


def write_partial(path: str | os.PathLike, df: pd.DataFrame, key: str, **header) -> Path:
    """One finished batch's rows at `path`, atomically (integrity.atomic_file: a unique temporary name beside it,
    flushed to disk, renamed into place). Line 1: the header (PARTIAL_FORMAT, key, rows, the sha256 of the rest,
    `header`); the rest: {"columns", "dtypes", "data"}, every cell as JSON writes it (floats exactly, NaN as NaN),
    so read_partial gives back the same frame, dtypes included."""
    from mrp_repro import integrity

    body = {"columns": [str(c) for c in df.columns], "dtypes": [str(df[c].dtype) for c in df.columns],
            "data": df.to_dict(orient="split")["data"]}  # fmt: skip
    payload = json.dumps(body, ensure_ascii=True, allow_nan=True, separators=(",", ":"), default=_native).encode()
    head = dict(header, format=PARTIAL_FORMAT, key=key, rows=len(df), sha256=hashlib.sha256(payload).hexdigest())
    path = Path(path)
    with integrity.atomic_file(path) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(json.dumps(head, sort_keys=True, default=str).encode() + b"\n" + payload)
            fh.flush()
            os.fsync(fh.fileno())
    return path


#: read_partial's reason for a file whose key is another batch's (counted, then named once per grid)
_OTHER_SPEC = "is of another grid spec (settings, prompts, sizes, weights, inputs or profile)"


def read_partial(path: str | os.PathLike, key: str) -> tuple[pd.DataFrame | None, dict, str | None]:
    """(rows, header, None) of a batch write_partial wrote with `key`; (None, header or {}, why) when it must not be
    read: not this format, another key, its rows not matching their recorded sha256 (cut short, edited), columns
    other than RUN_COLUMNS, or unreadable."""
    path = Path(path)
    head: dict = {}
    try:
        raw = path.read_bytes()
        first, _, payload = raw.partition(b"\n")
        head = json.loads(first)
        if not isinstance(head, dict) or head.get("format") != PARTIAL_FORMAT:
            return None, {}, f"is not a partial batch of this package ({PARTIAL_FORMAT})"
        if head.get("key") != key:
            return None, head, _OTHER_SPEC
        if hashlib.sha256(payload).hexdigest() != head.get("sha256"):
            return None, head, (f"does not match its recorded sha256 ({len(raw)} bytes: cut short, edited or "
                                "corrupted)")  # fmt: skip
        body = json.loads(payload)
        cols, dtypes, data = body["columns"], body["dtypes"], body["data"]
        if cols != list(RUN_COLUMNS) or len(dtypes) != len(cols) or len(data) != head.get("rows"):
            return None, head, "holds other columns or rows than recorded (another version of the runs schema)"
        typed = zip(cols, dtypes, strict=True)
        df = pd.DataFrame({c: pd.Series([r[j] for r in data], dtype=dt) for j, (c, dt) in enumerate(typed)})
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
        return None, head, f"is unreadable ({type(e).__name__}: {str(e)[:120]})"
    return df, head, None


def _resume(partial: Path, bench: str, j: int, key: str, idx: Sequence[int], names: list[str],
            other: list[Path]) -> pd.DataFrame | None:  # fmt: skip
    """Batch j's rows kept in `partial` (resumed_from set to the process that decoded them), else None: absent, of
    another spec (added to `other`) or damaged (a note on stderr names it; it is decoded again and overwritten)."""
    from mrp_repro import integrity

    path = partial_path(partial, bench, j)
    integrity.remove_stale_temps(path)  # what a killed write left (.<name>.*.tmp); safe under the grid's lock
    if not path.exists():
        return None
    df, head, why = read_partial(path, key)
    if why is None:
        want = sorted(int(i) for i in idx)
        got = {n: sorted(g["prompt_index"].astype(int)) for n, g in df.groupby("setting", sort=False)}
        if list(got) != names or any(v != want for v in got.values()):
            why = "holds other settings or prompts than its batch"
    if why == _OTHER_SPEC:
        other.append(path)
        return None
    if why is not None:
        print(f"runs: not resuming {path}: it {why}; its batch is decoded again", file=sys.stderr, flush=True)
        return None
    return df.assign(resumed_from=str(head.get("decoded_by") or "an earlier process (unrecorded)"))


def collect_runs(profile, backbone, head, n_prompts: int | None = None, benchmarks: Sequence[str] | None = None,
                 settings: Sequence[tuple[str, Policy]] | None = None, batch_size: int | None = None,
                 max_new_tokens: int | None = None, progress: bool = False,
                 partial: str | os.PathLike | None = None, inputs: str | None = None) -> pd.DataFrame:  # fmt: skip
    """The runs frame: every setting (default settings_for(profile, head)) on the same problems of every
    benchmark (default evaluation.benchmarks), batch by batch (batch_order), each batch decoded with every setting
    in turn, static(1) first (decode_batch). Rows in (benchmark, setting, prompt_index) order.

    `partial` (a directory; report.grids passes <result>.partial/): resumable. Each finished batch is written there
    (write_partial) before the next starts, and the batches already there with this grid's key (batch_key) are read
    instead of decoded, so a process killed mid-grid (Ctrl-C, kill -9, the end of a sitting) loses at most the batch
    it was decoding. The frame equals an uninterrupted run's in every column but wall_s (each kept row has its own
    process's clock) and resumed_from (that process: commit, pid, host, time; '' on rows decoded by this call). A
    file of another spec, damaged or cut short is never read (a note names it; its batch is decoded again). The
    directory is held under integrity.stage_lock while the grid runs (a second process on it gets StageLocked) and
    left in place: the caller removes it once the frame is stored. The torchrun path
    (measure.sharded.collect_runs_sharded) keeps its own per-batch shards, resumable the same way, and does not use
    `partial` or mark resumed_from. `inputs`: the runs rows' inputs column (inputs.summary_for(profile)) as the
    calling stage resolved it once; None resolves it here, once per grid."""
    from mrp_repro import integrity
    from mrp_repro.backbone import encode_prompts

    d = profile.decoding
    bs, max_new = batch_size or d.batch_size, max_new_tokens or d.max_new_tokens
    settings = static_first(profile, head, settings, "collect_runs")
    rank = {p.name: i for i, (_, p) in enumerate(settings)}
    names = [p.name for _, p in settings]
    model = model_for_profile(profile)
    # the profile's inputs (hub commits, file bytes) as a stage resolved them once (inputs=), else resolved here, once
    resolved = inputs if inputs is not None else run_inputs.summary_for(profile)
    frames = []
    with contextlib.ExitStack() as stack:
        if partial is not None:
            partial = Path(partial)
            stack.enter_context(integrity.stage_lock(partial, "a decoding grid's partial results"))
            grid = grid_record(profile, backbone, head, settings, bs, max_new, resolved)
        other: list[Path] = []
        for bench in benchmarks or profile.evaluation.benchmarks:
            problems = eval_problems(profile, bench, n_prompts)
            prompts = encode_prompts(backbone, problems)
            batches = batch_order(prompts, bs)
            parts: list[pd.DataFrame | None] = [None] * len(batches)
            keys: list[str] = []
            if partial is not None:
                for j, idx in enumerate(batches):
                    keys.append(batch_key(grid, bench, j, idx, [problems[i] for i in idx], [prompts[i] for i in idx]))
                    parts[j] = _resume(partial, bench, j, keys[j], idx, names, other)
                if other:
                    print(f"runs: not resuming {len(other)} partial batch file(s) of {bench} in {partial} (e.g. "
                          f"{other[0].name}): each {_OTHER_SPEC.removeprefix('is ')}; decoded again", file=sys.stderr,
                          flush=True)  # fmt: skip
                    other.clear()
            kept = sum(p is not None for p in parts)
            bar = None
            if progress:
                from tqdm.auto import tqdm

                bar = tqdm(total=len(batches), initial=kept, desc=f"{bench} ({len(settings)} settings)", leave=False,
                           dynamic_ncols=True)  # fmt: skip
                if kept:
                    print(f"[runs] {bench}: {kept} of {len(batches)} batches resumed from {partial}", flush=True)
            for j, idx in enumerate(batches):
                if parts[j] is not None:
                    continue
                t0 = time.perf_counter()
                parts[j] = decode_batch(backbone, [problems[i] for i in idx], idx, settings, bs, max_new, model,
                                        profile.paper.model, resolved)  # fmt: skip
                if partial is not None:
                    write_partial(partial_path(partial, bench, j), parts[j], keys[j], benchmark=bench, batch=j,
                                  indices=[int(i) for i in idx], decoded_by=_decoded_by(),
                                  seconds=time.perf_counter() - t0)  # fmt: skip
                if bar is not None:
                    bar.update(1)
            if bar is not None:
                bar.close()
            df = pd.concat(parts, ignore_index=True)
            df = df.assign(_r=df["setting"].map(rank)).sort_values(["_r", "prompt_index"], kind="stable")
            frames.append(df.drop(columns="_r"))
            if progress:
                for name, g in frames[-1].groupby("setting", sort=False):
                    tpf = g["tokens"].sum() / max(g["denoise_forwards"].sum(), 1)
                    print(f"[runs] {bench} {name}: acc {100 * g['correct'].mean():.1f} tpf {tpf:.2f}", flush=True)
    out = pd.concat(frames, ignore_index=True)
    out["valid_chain"] = out["valid_chain"].astype(float)
    out["K"] = out["K"].astype(float)
    out["threshold"] = out["threshold"].astype(float)
    return out


def decode_events(backbone, policy, problems: list, max_new_tokens: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run one decoding policy on a few problems; returns (trace events, per-round accept lengths)."""
    from mrp_repro.backbone import encode_prompts

    bb = backbone
    res = bb.generate(encode_prompts(bb, problems), policy, max_new_tokens)
    trace = pd.DataFrame(res.trace, columns=["row", "block", "step", "kind", "pos", "token"])
    acc = [{"row": r, "round": i, "accept_length": a} for r, s in enumerate(res.stats)
           for i, a in enumerate(s.accept_lengths)]  # fmt: skip
    return trace, pd.DataFrame(acc, columns=["row", "round", "accept_length"])
