"""Chat SFT data for the online MRP recipe (METHOD.md §2): load, tokenise with the chat template, pack.

    from mrp_repro.tasks.sft import load_sft_records, tokenize_records, pack
    recs = load_sft_records("JunxiongWang/sftdatasetv3")      # hub (upstream's data), needs the network
    recs = load_sft_records("/data/my_sft")                   # a local directory of *.jsonl / *.parquet
    recs = load_sft_records("gsm8k", data_dir="../shared/data")  # GSM8K train: question -> answer
    samples = tokenize_records(recs, tokenizer, block_size=16, eos_id=151645)
    packed = pack(samples, seq_len=4096, block_size=16)       # PackedSequences: ids, doc, pos, answer (N, T)
    # a million records: stream them into memory-mapped files (what training.online.load_packed does, once)
    recs, fingerprint = open_sft_source("JunxiongWang/sftdatasetv3")
    meta = pack_to_disk(iter_samples(recs, tokenizer, 16, 151645), 4096, 16, "runs/p/sft-packed-x")
    packed, meta = open_packed("runs/p/sft-packed-x")

Record fields (one of, checked in this order):
  messages       [{role, content}, ...]   (OpenAI / HF chat); the last turn must be the assistant's
  conversations  [{from, value}, ...]     (ShareGPT; from: human/user, gpt/assistant, system)
  prompt, response  (or question, answer: GSM8K)  one user turn and the answer
The answer is the LAST assistant turn; every earlier turn is the prompt (never masked). A tokenizer with a
chat template (the Qwen/SDAR one: ChatML) renders prompt = template(turns[:-1], add_generation_prompt) and
answer = template(turns)[len(prompt):]; one without (the tiny char tokenizer) joins the turns' contents with
newlines (dropping characters outside a char-level vocabulary).
As in the offline `gt` trajectories, each answer is completed with EOS to the end of its last block,
so every sample is a whole number of blocks and, packed back to back, starts at a block boundary (upstream
`bd_packed`).

GSM8K: read from <data_dir>/gsm8k/train.jsonl directly (tasks.benchmarks loads test splits only); data_dir
is the profile's data.data_dir, else $MRP_REPRO_DATA, else the repository's ../shared/data.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from mrp_repro import integrity
from mrp_repro.errors import UserError
from mrp_repro.integrity import atomic_file

__all__ = ["SFTSourceError", "PackedSequences", "open_sft_source", "load_sft_records", "to_turns", "iter_samples",
           "tokenize_records", "pack", "pack_to_disk", "packed_problem", "open_packed"]  # fmt: skip

DEFAULT_HUB_ID = "JunxiongWang/sftdatasetv3"
_ROLE = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}


class SFTSourceError(UserError, FileNotFoundError):
    """Chat SFT data that cannot be read (a missing directory, an unreachable hub id, unknown fields)."""


def _how_to_provide(source: str) -> str:
    return (
        f"set mrp_training.sft_source to a hub dataset id (default {DEFAULT_HUB_ID}; needs the network or a "
        "populated HF_DATASETS cache) or to a local directory of *.jsonl / *.parquet files with a `messages` "
        "list of {role, content} (or prompt/response) per line, or to `gsm8k` with data.data_dir / "
        f"$MRP_REPRO_DATA holding gsm8k/train.jsonl (got {source!r})"
    )


def _default_data_dir() -> Path | None:
    d = os.environ.get("MRP_REPRO_DATA")
    if d:
        return Path(d).expanduser()
    from mrp_repro.config import repo_root

    cand = repo_root().parent / "shared" / "data"
    return cand if cand.is_dir() else None


def _looks_like_path(source: str) -> bool:
    return source.startswith((".", "/", "~")) or os.sep in source and not _is_hub_id(source)


def _is_hub_id(source: str) -> bool:
    parts = source.split("/")
    return len(parts) == 2 and all(parts) and not source.startswith((".", "/", "~"))


def _stat_fingerprint(files) -> str:
    h = hashlib.sha256()
    for f in files:
        st = Path(f).stat()
        h.update(f"{f}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def open_sft_source(
    source: str, split: str = "train", data_dir: str | os.PathLike | None = None, max_samples: int | None = None
) -> tuple[Iterator[dict], str]:
    """(records, fingerprint) of `source` (see the module docstring), at most max_samples, in file order.

    The records are an iterator: a hub or local dataset is read lazily from its Arrow files (a million-record
    SFT set is never a Python list). The fingerprint changes when the data does (local files: path, size and
    mtime of each; a hub dataset: its `datasets` fingerprint), so caches of the packed data can be keyed by it."""
    if source == "gsm8k":
        d = Path(data_dir).expanduser() if data_dir is not None else _default_data_dir()
        f = d / "gsm8k" / f"{split}.jsonl" if d is not None else None
        if f is None or not f.is_file():
            raise SFTSourceError(f"GSM8K {split} split not found at {f}; " + _how_to_provide(source))

        def lines():
            n = 0
            with open(f, encoding="utf-8", errors="strict") as fh:
                for i, line in enumerate(_lines(fh, f), 1):
                    if max_samples is not None and n >= max_samples:
                        return
                    if line.strip():
                        n += 1
                        yield _record(line, f, i)

        return lines(), _stat_fingerprint([f])
    import datasets

    p = Path(source).expanduser()
    if p.is_dir():
        jsonl = sorted(str(x) for x in p.rglob("*.jsonl")) + sorted(str(x) for x in p.rglob("*.json"))
        parquet = sorted(str(x) for x in p.rglob("*.parquet"))
        if not jsonl and not parquet:
            raise SFTSourceError(f"{p} holds no *.jsonl / *.parquet files; " + _how_to_provide(source))
        parts = []
        try:
            with _quiet_datasets():
                if jsonl:
                    parts.append(datasets.load_dataset("json", data_files=jsonl, split="train"))
                if parquet:
                    parts.append(datasets.load_dataset("parquet", data_files=parquet, split="train"))
        except Exception as e:  # datasets' 80-line DatasetGenerationError names no file: find the damaged one
            raise SFTSourceError(_damaged(p, jsonl, parquet, e)) from e
        ds = parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
        fingerprint = _stat_fingerprint(jsonl + parquet)
    elif _is_hub_id(source) and not p.exists():
        try:
            ds = datasets.load_dataset(source, split=split)
        except Exception as e:  # offline, unknown id, no cache: datasets' own messages name no alternative
            raise SFTSourceError(
                f"could not load hub dataset {source!r} split {split!r} ({type(e).__name__}: "
                f"{' '.join(str(e).split())[:160]}); " + _how_to_provide(source)
            ) from e
        fingerprint = str(ds._fingerprint)
    else:
        raise SFTSourceError(f"no directory {p}; " + _how_to_provide(source))
    if max_samples is not None:
        ds = ds.select(range(min(max_samples, len(ds))))
    return iter(ds), f"{fingerprint}|{max_samples}"


@contextlib.contextmanager
def _quiet_datasets():
    """datasets' progress bars and its own error log off while it reads local files: a damaged file is then one
    SFTSourceError line (below), not a logged parse error and a bar above it. Restored afterwards."""
    import datasets

    log = datasets.utils.logging
    level, bars = log.get_verbosity(), datasets.utils.is_progress_bar_enabled()
    log.set_verbosity(log.CRITICAL)
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        log.set_verbosity(level)
        if bars:
            datasets.enable_progress_bars()


def _lines(fh, f: Path):
    """The lines of an open text file; a byte that is not UTF-8 is an SFTSourceError naming the file."""
    try:
        yield from fh
    except UnicodeDecodeError as e:
        raise SFTSourceError(f"{f} is not UTF-8 text ({e.reason} at byte {e.start} of a chunk); restore the file "
                             "from its source or remove it") from None  # fmt: skip


def _record(line: str, f: Path, i: int) -> dict:
    """One JSON-lines record; a line that does not parse (a file cut short) names the file and the line."""
    try:
        rec = json.loads(line)
    except ValueError as e:
        raise SFTSourceError(f"{f} line {i} is not valid JSON (cut short or corrupted: {e.msg}, column {e.colno});"
                             " restore the file from its source, or delete that line") from None  # fmt: skip
    if not isinstance(rec, dict):
        raise SFTSourceError(f"{f} line {i} is a JSON {type(rec).__name__}, not a record (an object); fix that line")
    return rec


def _damaged(d: Path, jsonl: list[str], parquet: list[str], e: BaseException) -> str:
    """Why the local SFT files under d could not be loaded: the first JSON-lines line or parquet file that does
    not read, named with its fix; else datasets' own reason, cut to one line."""
    for f in jsonl:
        if f.endswith(".jsonl"):
            with open(f, encoding="utf-8", errors="strict") as fh:
                for i, line in enumerate(_lines(fh, Path(f)), 1):
                    if line.strip():
                        try:
                            _record(line, Path(f), i)
                        except SFTSourceError as bad:
                            return str(bad)
        else:
            try:
                json.loads(Path(f).read_bytes())
            except ValueError as bad:
                return (f"{f} is not valid JSON (cut short or corrupted: {type(bad).__name__}); restore the file "
                        "from its source or remove it")  # fmt: skip
    if parquet:
        import pyarrow.parquet as pq

        for f in parquet:
            try:
                pq.read_metadata(f)
            except Exception as bad:  # ArrowInvalid: a truncated footer
                return (f"{f} is not a readable parquet file (cut short or corrupted: {type(bad).__name__}); restore "
                        "the file from its source or remove it")  # fmt: skip
    why = " ".join(str(e.__cause__ or e).split())[:200]
    return f"{d}: its SFT files could not be loaded ({type(e).__name__}: {why}); " + _how_to_provide(str(d))


def load_sft_records(
    source: str, split: str = "train", data_dir: str | os.PathLike | None = None, max_samples: int | None = None
) -> list[dict]:
    """The records of `source` as a list (small sources; open_sft_source streams)."""
    return list(open_sft_source(source, split, data_dir, max_samples)[0])


def to_turns(rec: dict) -> list[dict]:
    """[{role, content}, ...] of a record in any of the accepted layouts; the last turn is the answer."""
    if rec.get("messages"):
        turns = [{"role": _ROLE.get(m["role"], m["role"]), "content": m["content"]} for m in rec["messages"]]
    elif rec.get("conversations"):
        turns = [{"role": _ROLE.get(m["from"], m["from"]), "content": m["value"]} for m in rec["conversations"]]
    elif "prompt" in rec and "response" in rec:
        turns = [{"role": "user", "content": rec["prompt"]}, {"role": "assistant", "content": rec["response"]}]
    elif "question" in rec and "answer" in rec:
        turns = [{"role": "user", "content": rec["question"]}, {"role": "assistant", "content": rec["answer"]}]
    else:
        raise SFTSourceError(
            f"an SFT record with fields {sorted(rec)}: expected `messages`, `conversations`, prompt/response or "
            "question/answer"
        )
    while turns and turns[-1]["role"] != "assistant":  # a trailing user turn has no answer to learn
        turns = turns[:-1]
    return turns


def _prompt_answer(tokenizer, turns: list[dict]) -> tuple[list[int], list[int]]:
    if getattr(tokenizer, "chat_template", None):
        prompt = tokenizer.apply_chat_template(turns[:-1], add_generation_prompt=True, tokenize=True)
        full = tokenizer.apply_chat_template(turns, tokenize=True)
        prompt, full = list(_ids(prompt)), list(_ids(full))
        if full[: len(prompt)] != prompt:
            raise ValueError("the chat template renders the prompt differently inside the full conversation")
        return prompt, full[len(prompt) :]
    # A char-level tokenizer without an unknown token (the tiny one) cannot encode every character of real
    # SFT text: characters outside its vocabulary are dropped.
    vocab = tokenizer.get_vocab()
    keep = (lambda x: "".join(c for c in x if c in vocab)) if getattr(tokenizer, "unk_token", None) is None else str
    text = "".join(t["content"] + "\n" for t in turns[:-1])
    return (
        tokenizer.encode(keep(text), add_special_tokens=False),
        tokenizer.encode(keep(turns[-1]["content"]), add_special_tokens=False),
    )


def _ids(x):
    return x["input_ids"] if isinstance(x, dict) or hasattr(x, "keys") else x


def iter_samples(records, tokenizer, block_size: int, eos_id: int) -> Iterator[tuple[list[int], list[int]]]:
    """(prompt_ids, answer_ids) per usable record, lazily; answers completed with EOS to a whole number of blocks
    (at least one EOS, as trajectories._as_examples does for the offline `gt` rows)."""
    for rec in records:
        turns = to_turns(rec)
        if len(turns) < 2:
            continue
        p, a = _prompt_answer(tokenizer, turns)
        if not p or not a:
            continue
        total = -(-(len(p) + len(a) + 1) // block_size) * block_size
        yield p, a + [eos_id] * (total - len(p) - len(a))


def tokenize_records(records, tokenizer, block_size: int, eos_id: int) -> list[tuple[list[int], list[int]]]:
    """iter_samples as a list."""
    return list(iter_samples(records, tokenizer, block_size, eos_id))


@dataclass
class PackedSequences:
    """N packed sequences of T tokens. doc: sample index inside the sequence (-1 = padding); pos: position
    inside the sample (each sample's positions start at 0, as at inference); answer: maskable slots."""

    ids: torch.Tensor  # (N, T) long
    doc: torch.Tensor  # (N, T) long
    pos: torch.Tensor  # (N, T) long
    answer: torch.Tensor  # (N, T) bool

    def __len__(self):
        return self.ids.shape[0]

    def rows(self, idx: torch.Tensor) -> dict:
        """The rows `idx` as long (ids, doc, pos) and bool (answer) tensors, whatever the storage dtypes."""
        return dict(ids=self.ids[idx].long(), doc=self.doc[idx].long(), pos=self.pos[idx].long(),
                    answer=self.answer[idx].bool())  # fmt: skip


def _packed_rows(samples, seq_len: int, block_size: int) -> Iterator[list[tuple[list[int], int]]]:
    """Greedy in-order packing: a sample goes into the current sequence if it fits, else starts the next one.
    A sample longer than seq_len is cut to seq_len (its answer truncated; one whose prompt fills seq_len is
    dropped). Every sample is a whole number of blocks, so each starts at a block boundary. Yields each
    sequence as [(tokens, prompt length), ...]."""
    if seq_len % block_size:
        raise ValueError(f"seq_len {seq_len} is not a multiple of block_size {block_size}")
    cur: list[tuple[list[int], int]] = []
    used = 0
    for p, a in samples:
        if len(p) >= seq_len:
            continue
        toks = (p + a)[:seq_len]
        if used + len(toks) > seq_len and cur:
            yield cur
            cur, used = [], 0
        cur.append((toks, len(p)))
        used += len(toks)
    if cur:
        yield cur


def _fill(seq, seq_len: int, pad_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    ids = np.full(seq_len, pad_id, dtype=np.int32)
    doc = np.full(seq_len, -1, dtype=np.int32)
    pos = np.zeros(seq_len, dtype=np.int32)
    ans = np.zeros(seq_len, dtype=np.uint8)
    at = 0
    for j, (toks, n_prompt) in enumerate(seq):
        n = len(toks)
        ids[at : at + n] = toks
        doc[at : at + n] = j
        pos[at : at + n] = np.arange(n)
        ans[at + n_prompt : at + n] = 1
        at += n
    return ids, doc, pos, ans


def pack(samples, seq_len: int, block_size: int, pad_id: int = 0) -> PackedSequences:
    """Pack in memory (see _packed_rows); pack_to_disk streams the same rows into memory-mapped files."""
    rows = [_fill(seq, seq_len, pad_id) for seq in _packed_rows(samples, seq_len, block_size)]
    cols = [torch.from_numpy(np.stack([r[k] for r in rows])) if rows else torch.zeros(0, seq_len) for k in range(4)]
    return PackedSequences(cols[0].long(), cols[1].long(), cols[2].long(), cols[3].bool())


_FILES = ("ids", "doc", "pos", "answer")
_DTYPES = {"ids": np.int32, "doc": np.int32, "pos": np.int32, "answer": np.uint8}


def pack_to_disk(samples, seq_len: int, block_size: int, out_dir: str | os.PathLike, pad_id: int = 0,
                 progress: bool = False, chunk_rows: int = 1024) -> dict:  # fmt: skip
    """Stream samples into <out_dir>/{ids,doc,pos,answer}.bin (int32, answer uint8; rows of seq_len) and
    meta.json (rows, seq_len, sha256 of each file), written last and atomically: a directory without meta.json is
    an unfinished pack. Memory stays at chunk_rows rows whatever the data size. Returns the meta."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "meta.json").unlink(missing_ok=True)  # the old meta never describes new files
    hashes = {k: hashlib.sha256() for k in _FILES}
    n, buf = 0, []
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(desc="pack SFT", unit="seq", dynamic_ncols=True)
    with contextlib.ExitStack() as stack:  # unique temporary names, renamed into place only when all are complete
        tmp = {k: stack.enter_context(atomic_file(out / f"{k}.bin")) for k in _FILES}
        fh = {k: stack.enter_context(open(tmp[k], "wb")) for k in _FILES}

        def flush():
            for k, col in zip(_FILES, zip(*buf, strict=True), strict=True):
                b = np.stack(col).astype(_DTYPES[k], copy=False).tobytes()
                fh[k].write(b)
                hashes[k].update(b)
            buf.clear()

        try:
            for seq in _packed_rows(samples, seq_len, block_size):
                buf.append(_fill(seq, seq_len, pad_id))
                n += 1
                if len(buf) >= chunk_rows:
                    flush()
                if bar is not None:
                    bar.update(1)
            if buf:
                flush()
        finally:
            if bar is not None:
                bar.close()
    meta = dict(rows=n, seq_len=seq_len, block_size=block_size, sha256={k: hashes[k].hexdigest() for k in _FILES})
    with atomic_file(out / "meta.json") as tmp_meta:
        tmp_meta.write_text(json.dumps(meta, indent=1))
    return meta


def packed_problem(out_dir: str | os.PathLike) -> str | None:
    """Why a pack_to_disk directory must not be trained on (None when it is whole): no or an unreadable meta.json,
    a file of another size, or of another sha256 than meta.json records (hashed once per process per file state)."""
    out = Path(out_dir)
    try:
        meta = json.loads((out / "meta.json").read_text())
        n, T, shas = meta["rows"], meta["seq_len"], meta["sha256"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"{out / 'meta.json'} is missing or unreadable ({type(e).__name__})"
    for k in _FILES:
        f = out / f"{k}.bin"
        want = n * T * np.dtype(_DTYPES[k]).itemsize
        if not f.exists() or f.stat().st_size != want:
            return f"{f} has {f.stat().st_size if f.exists() else 'no file: 0'} bytes, expected {want}"
        got = integrity.sha256(f)
        if got != shas.get(k):
            return f"{f} has sha256 {got[:16]}..., meta.json records {str(shas.get(k))[:16]}... (corrupted)"
    return None


def open_packed(out_dir: str | os.PathLike) -> tuple[PackedSequences, dict]:
    """(the packed rows memory-mapped, meta) of a pack_to_disk directory; rows are read from disk as used.
    A missing, short or corrupted file (each is checked against meta.json's sha256 first) is a SFTSourceError naming
    the file and the fix (delete the directory: it is rebuilt)."""
    out = Path(out_dir)
    fix = f"delete {out} and rerun: the packed SFT data is rebuilt from the source"
    why = packed_problem(out)  # every file against meta.json's sha256 before any row is read
    if why is not None:
        raise SFTSourceError(f"{why}; {fix}")
    meta = json.loads((out / "meta.json").read_text())
    n, T = meta["rows"], meta["seq_len"]
    cols = []
    for k in _FILES:
        f = out / f"{k}.bin"
        arr = np.memmap(f, dtype=_DTYPES[k], mode="c", shape=(n, T)) if n else np.zeros((0, T), _DTYPES[k])
        cols.append(torch.from_numpy(arr))
    return PackedSequences(*cols), meta
