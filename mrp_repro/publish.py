"""(Re)publish a finished run's scratch backbone and MRP head as the profile's reference artifacts.

    python -m mrp_repro.publish --profile tiny --from runs                      # a run of this checkout
    python -m mrp_repro.publish --profile tiny --from runs/from-scratch         # after make reproduce FROM_SCRATCH=1
    python -m mrp_repro.publish --profile tiny --from /work/bb/runs --backbone-only

Reads <from>/<profile>/backbone-<key>/ and <from>/<profile>/mrp-<key>/, the directories the profile's current
settings name (stages.backbone_key, stages.head_key on the backbone's weight fingerprint): so the settings recorded
are, verifiably, the ones that trained them (a directory of other settings has another name and is not found; the
error lists what is there). Copies what the notebooks and stages read (mrp_repro.published: layout), records each
file's sha256, the settings, and the training run's provenance (commit, torch threads, torch version, wall time),
plus the CPU model and core count of the machine publishing (the training machine when run where it trained), then
replaces artifacts/<profile>/ in one rename. Nothing under <from> is written. Afterwards: `make reproduce` (the
default mode evaluates the new artifacts) and commit artifacts/<profile>/ with the figures it regenerates.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

from mrp_repro import published, stages
from mrp_repro.config import DEFAULT_PROFILE, Profile, load_profile
from mrp_repro.errors import UserError
from mrp_repro.runtime import write_json_atomic

__all__ = ["publish", "machine", "compare", "main"]


def machine() -> str:
    """This machine's CPU model and core count (`nproc`), e.g. 'Intel(R) Xeon(R) ... , 2 cores'."""
    model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import platform

    return f"{model or platform.processor() or platform.machine()}, {len(os.sched_getaffinity(0))} cores"


def _find(src: Path, stage: str, key: str) -> Path:
    d = src / f"{stage}-{key}"
    if not (d / "done.json").exists():
        there = sorted(p.name for p in src.glob(f"{stage}-*")) if src.is_dir() else []
        raise UserError(
            f"no finished {stage} at {d} (the directory the profile's current settings name); there: "
            f"{', '.join(there) or 'nothing'}. Train it with this checkout first ({published.FROM_SCRATCH_ENV}=1 "
            f"MRP_REPRO_RUNS={src.parent} python -m mrp_repro.stages {'head' if stage == 'mrp' else 'backbone'} "
            f"--profile {src.name})"
        )
    return d


def _copy(src_dir: Path, dst_dir: Path, rels: list[str], tag: str) -> dict[str, str]:
    files = {}
    for rel in rels:
        s, d = src_dir / rel, dst_dir / rel
        d.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(s, d)
        files[f"{tag}/{rel}"] = published.sha256_file(d)
    return files


def _threads(device_name: str | None) -> int | None:
    m = re.search(r"\((\d+) threads\)", device_name or "")
    return int(m.group(1)) if m else None


def publish(profile: Profile, src_root: str | os.PathLike, backbone_only: bool = False) -> Path:
    """Write artifacts/<profile.name>/ from the run under src_root (see the module docstring); returns it."""
    import torch

    from mrp_repro import checkpoint as ckpt_io
    from mrp_repro.trajectories import model_fingerprint

    if profile.model.source != "scratch":
        raise UserError(f"profile {profile.name} loads its backbone ({profile.model.source}); only scratch "
                        "profiles publish one")  # fmt: skip
    src = Path(src_root).expanduser().resolve() / profile.name
    bdir = _find(src, "backbone", stages.backbone_key(profile))
    fp = model_fingerprint(ckpt_io.load_backbone(bdir / "model", dtype=torch.float32))
    hdir = None if backbone_only else _find(src, "mrp", stages.head_key(profile, fp))

    root = published.artifacts_root()
    out = root / profile.name
    tmp = root / f".{profile.name}.publishing"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    here = machine()

    done = json.loads((bdir / "done.json").read_text())
    prov, met = done["provenance"], done["metrics"]
    model_files = sorted(p.relative_to(bdir).as_posix() for p in (bdir / "model").iterdir() if p.is_file())
    rec: dict = {"format": published.FORMAT, "profile": profile.name}
    rec["backbone"] = {
        "dir": "backbone",
        "source": str(bdir),
        "fingerprint": fp,
        "settings": published.backbone_settings(profile),
        "trained": {
            "git_commit": prov.get("git_commit"),
            "git_dirty": prov.get("git_dirty"),
            "torch": prov.get("torch"),
            "python": prov.get("python"),
            "threads": met.get("threads"),  # torch.get_num_threads() while training (training.backbone)
            "wall_s": met.get("wall_s"),
            "timestamp": prov.get("timestamp"),
            "device_name": prov.get("device_name"),
            "mkl_cbwr": prov.get("mkl_cbwr"),  # None: recorded by a commit before mrp_repro set it (MKL default)
            "machine": here,
        },
        "metrics": met,
        "files": _copy(bdir, tmp / "backbone", [*model_files, "loss_curve.csv", "done.json"], "backbone"),
    }
    if hdir is not None:
        hprov = json.loads((hdir / "provenance.json").read_text())
        hmet = json.loads((hdir / "metrics.json").read_text())
        head_files = sorted(p.relative_to(hdir).as_posix() for p in (hdir / "head").iterdir() if p.is_file())
        rec["head"] = {
            "dir": "head",
            "source": str(hdir),
            "backbone_fingerprint": fp,
            "settings": published.head_settings(profile),
            "trained": {
                "git_commit": hprov.get("git_commit"),
                "git_dirty": hprov.get("git_dirty"),
                "torch": hprov.get("torch"),
                "python": hprov.get("python"),
                "threads": _threads(hprov.get("device_name")),  # read from provenance's device_name at the end
                "wall_s": hmet.get("train_time_s"),  # head steps only; trajectory collection is not in it
                "timestamp": hprov.get("timestamp"),
                "device_name": hprov.get("device_name"),
                "mkl_cbwr": hprov.get("mkl_cbwr"),  # None: recorded by a commit before mrp_repro set it (MKL default)
                "machine": here,
            },
            "metrics": hmet,
            "files": _copy(
                hdir, tmp / "head", [*head_files, "loss_curve.csv", "metrics.json", "provenance.json"], "head"
            ),  # fmt: skip
        }
    rec["machine_note"] = "trained.machine: CPU model and cores of the machine that ran `mrp_repro.publish`"
    write_json_atomic(tmp / published.MANIFEST, rec)
    old = root / f".{profile.name}.old"
    shutil.rmtree(old, ignore_errors=True)
    if out.exists():
        os.replace(out, old)
    os.replace(tmp, out)
    shutil.rmtree(old, ignore_errors=True)
    published.verify_files(profile.name, "backbone", rec)
    if hdir is not None:
        published.verify_files(profile.name, "head", rec)
    return out


def _table_diff(a: Path, b: Path) -> tuple[str, int, int]:
    """(verdict, differing cells, cells) of two CSV tables, compared as text cell by cell."""
    import pandas as pd

    x, y = pd.read_csv(a, dtype=str, keep_default_na=False), pd.read_csv(b, dtype=str, keep_default_na=False)
    if x.shape != y.shape or list(x.columns) != list(y.columns):
        return f"shape {x.shape} -> {y.shape}", -1, x.size
    n = int((x.values != y.values).sum())
    return ("identical" if n == 0 else "differs"), n, x.size


def compare(profile: Profile, published_figures: Path | None = None) -> str:
    """Markdown: a from-scratch run (this process has $MRP_REPRO_FROM_SCRATCH=1: runs_root() and figures_root()
    are its own) against the published artifacts and the committed figures/<profile>/ they produced: each
    artifact's sha256 and weight fingerprint, the training metrics, and every CSV table cell by cell. Written to
    <from-scratch figures>/<profile>/from_scratch_vs_published.md."""
    import torch

    from mrp_repro import checkpoint as ckpt_io
    from mrp_repro.config import repo_root
    from mrp_repro.runtime import figures_dir, from_scratch
    from mrp_repro.trajectories import model_fingerprint

    if not from_scratch():
        raise UserError(f"compare() reads a from-scratch run: set {published.FROM_SCRATCH_ENV}=1")
    rec = published.record(profile.name)
    if rec is None:
        raise UserError(f"nothing published for profile {profile.name} to compare with")
    pub_root = published.artifacts_root() / profile.name
    rows = ["| | published | from scratch | same |", "|---|---|---|---|"]

    def row(what, a, b):
        rows.append(f"| {what} | {a} | {b} | {'yes' if a == b else 'no'} |")

    bdir = stages.backbone_dir(profile)
    if (bdir / "done.json").exists():
        fp = model_fingerprint(ckpt_io.load_backbone(bdir / "model", dtype=torch.float32))
        new = published.sha256_file(bdir / "model" / "model.safetensors")
        met = json.loads((bdir / "done.json").read_text())["metrics"]
    else:  # not trained (yet) in this runs root: e.g. a run of notebook 00 alone
        fp, new, met = "-", "-", {}
    row("backbone model.safetensors sha256", rec["backbone"]["files"]["backbone/model/model.safetensors"][:16],
        new[:16])  # fmt: skip
    row("backbone weight fingerprint", rec["backbone"]["fingerprint"], fp)
    for k in ("final_loss", "threads", "wall_s"):
        row(f"backbone {k}", rec["backbone"]["metrics"].get(k), met.get(k))
    if "head" in rec and fp != "-":
        hdir = stages.artifact_dir(profile, "mrp", stages.head_key(profile, fp))
        new = published.sha256_file(hdir / "head" / "mrp.safetensors") if (hdir / "done.json").exists() else "-"
        row("head mrp.safetensors sha256", rec["head"]["files"]["head/head/mrp.safetensors"][:16], new[:16])
        hmet = json.loads((hdir / "metrics.json").read_text()) if (hdir / "metrics.json").exists() else {}
        for k in ("heldout_kl", "heldout_baseline_kl", "final_train_loss", "train_time_s"):
            row(f"head {k}", rec["head"]["metrics"].get(k), hmet.get(k))
    ours = figures_dir(profile)
    theirs = (published_figures or repo_root() / "figures") / profile.name
    tables = ["", f"Tables: {theirs} (published artifacts) vs {ours} (from scratch); wall-clock columns differ "
              "on every run.", "", "| table | verdict | cells differing |", "|---|---|---|"]  # fmt: skip
    for a in sorted(theirs.glob("*.csv")):
        b = ours / a.name
        if a.stem == "trajectories":  # stages.trajectories_summary: the published run collects none
            tables.append("| trajectories | not compared: the published run evaluates the published head and "
                          "collects no trajectories | - |")  # fmt: skip
        elif b.exists():
            verdict, n, size = _table_diff(a, b)
            tables.append(f"| {a.stem} | {verdict} | {n if n >= 0 else '-'} of {size} |")
    text = "\n".join([f"# {profile.name}: from scratch vs published ({pub_root})", "", *rows, *tables, ""])
    from mrp_repro.integrity import atomic_file

    with atomic_file(ours / "from_scratch_vs_published.md") as tmp:  # renamed into place: a link there is replaced
        tmp.write_text(text)
    return text


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default=DEFAULT_PROFILE)
    ap.add_argument("--from", dest="src", required=True, help="the runs root of the finished run (MRP_REPRO_RUNS)")
    ap.add_argument("--backbone-only", action="store_true", help="publish the backbone alone (no head yet)")
    a = ap.parse_args(argv)
    out = publish(load_profile(a.profile), a.src, a.backbone_only)
    rec = json.loads((out / published.MANIFEST).read_text())
    for artifact in published.ARTIFACTS:
        if artifact in rec:
            n = sum(Path(out / f).stat().st_size for f in rec[artifact]["files"])
            print(f"{artifact}: {len(rec[artifact]['files'])} files, {n / 1e6:.2f} MB -> {out / artifact}")
    print(f"published {out}; now run `make reproduce` and commit {out} with the figures", file=sys.stderr)
    return 0


if __name__ == "__main__":
    from mrp_repro.cli import run_cli

    run_cli(main)
