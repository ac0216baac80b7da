"""Published reference artifacts: the scratch backbone and MRP head that produced the committed figures/<profile>/,
shipped in artifacts/<profile>/ with each file's sha256, the settings they were trained with, and the provenance of
the run that trained them (commit, torch threads, torch version, machine).

    python -m mrp_repro.published --profile tiny      # check them: every sha256, the settings vs the profile
    python -m mrp_repro.publish --profile tiny --from RUNS_ROOT     # (re)publish a finished run (publish.py)

    from mrp_repro import published
    published.backbone_dir(P)                 # artifacts/tiny/backbone (hashes verified), or None: train as usual
    published.head_dir(P, fingerprint)        # artifacts/tiny/head (verified), or None

stages.backbone / stages.train_head use them, never a runs/ cache, whenever they apply: artifacts/<profile.name>/
has a record, $MRP_REPRO_FROM_SCRATCH is not set (runtime.from_scratch(); `make reproduce FROM_SCRATCH=1` sets
it), the profile's settings equal the recorded ones (a setting added since, at its default, counts as equal), and,
for the head, the backbone is the published one (its weight fingerprint). A file whose sha256 differs from the
record is refused (PublishedArtifactError, naming the file and the fix). The shipped profile itself
(configs/<name>.yaml) differing from the record is an error too (the artifacts are out of date); a derived profile
of the same name (Profile.replace: another seed, an ablation) just trains, with a note naming what differs.

Layout (artifacts/<profile>/):
    published.json            the record: per artifact its files' sha256, settings, provenance, metrics
    backbone/model/           hub-format checkpoint + tokenizer (stages.backbone loads it; bb.path)
    backbone/loss_curve.csv   notebook 01's curve (it reads bb.path.parent / "loss_curve.csv")
    backbone/done.json        the training run's metrics and provenance, as written by training.backbone
    head/head/                mrp.safetensors + mrp_config.json (stages._load_head reads <dir>/head)
    head/loss_curve.csv       notebook 04's curve; head/metrics.json (report.drafters); head/provenance.json
"""

from __future__ import annotations

import json
import sys
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

from mrp_repro.config import DEFAULT_PROFILE, SECTIONS, Profile, load_profile, repo_root
from mrp_repro.errors import UserError
from mrp_repro.runtime import FROM_SCRATCH_ENV, from_scratch, sha256_file

__all__ = [
    "MANIFEST",
    "ARTIFACTS",
    "PublishedArtifactError",
    "artifacts_root",
    "record",
    "backbone_settings",
    "head_settings",
    "settings_differences",
    "sha256_file",
    "verify_files",
    "backbone_dir",
    "head_dir",
    "head_applies",
    "republish_command",
    "main",
]

MANIFEST = "published.json"
ARTIFACTS = ("backbone", "head")
FORMAT = 1
_noted: set[str] = set()


class PublishedArtifactError(UserError):
    """A published file is missing, or its sha256 is not the recorded one (corrupted, replaced, stale)."""


def artifacts_root() -> Path:
    """<repo>/artifacts (tests point it elsewhere with monkeypatch)."""
    return repo_root() / "artifacts"


def republish_command(name: str) -> str:
    # runs/from-scratch: where `make reproduce FROM_SCRATCH=1` trains (the runs root of a finished retraining)
    return f"python -m mrp_repro.publish --profile {name} --from runs/from-scratch, after make reproduce FROM_SCRATCH=1"


def record(name: str) -> dict | None:
    """artifacts/<name>/published.json, or None when nothing is published for that profile name."""
    path = artifacts_root() / name / MANIFEST
    if not path.exists():
        return None
    try:
        rec = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise PublishedArtifactError(
            f"{path} is unreadable ({e}); restore it with `git checkout -- {path.parent}` or republish: "
            f"{republish_command(name)}"
        ) from e
    if rec.get("format") != FORMAT:
        raise PublishedArtifactError(f"{path}: format {rec.get('format')!r}, this code reads {FORMAT}; republish: "
                                     f"{republish_command(name)}")  # fmt: skip
    return rec


# ----------------------------------------------------------------------------- settings


def unset_backbone_settings(profile: Profile) -> tuple[str, ...]:
    """backbone_training settings at their empty defaults: left out of the backbone's key and published settings,
    so adding a setting keeps the key (and the published record) a backbone trained before it had."""
    bt = profile.backbone_training
    unset = ("backbone_training.block_sizes",) if not bt.block_sizes else ()
    if bt.restart_steps == 0:
        unset += ("backbone_training.restart_steps", "backbone_training.restart_lr")
    return unset


def backbone_settings(profile: Profile) -> dict[str, Any]:
    """What a scratch backbone depends on: exactly the inputs of stages.backbone_dir's cache key."""
    from mrp_repro.tasks import chain
    from mrp_repro.tasks.synthetic import GENERATOR_VERSION

    d = profile.to_dict()
    out = {"seed": d["seed"], "block_size": d["block_size"], "synthetic_generator_version": GENERATOR_VERSION}
    if set(profile.data.tasks) & set(chain.TASKS):  # as in stages.backbone_key: the chain data's version too
        out["chain_generator_version"] = chain.GENERATOR_VERSION
    out.update({s: d[s] for s in ("model", "tokenizer", "data", "backbone_training")})
    for key in unset_backbone_settings(profile):  # as in stages.backbone_key
        section, _, name = key.partition(".")
        out[section].pop(name)
    return out


def head_settings(profile: Profile) -> dict[str, Any]:
    """What a trained head depends on besides its backbone: the inputs of stages.head_dir's cache key, and of
    stages.trajectories_dir's for the offline recipe (its trajectories)."""
    from mrp_repro.trajectories import FORMAT_VERSION

    d = profile.to_dict()
    out = {"seed": d["seed"], "block_size": d["block_size"]}
    out.update({s: d[s] for s in ("mrp", "mrp_training", "data")})
    if profile.mrp_training.recipe == "offline":
        out["trajectories"] = d["trajectories"]
        out["trajectories_format_version"] = FORMAT_VERSION
        out["decoding"] = {"max_new_tokens": d["decoding"]["max_new_tokens"]}
    return out


def _defaults(section: str) -> dict[str, Any]:
    """A section's settings that have a dataclass default, as plain values (as Profile.to_dict writes them)."""
    out = {}
    for f in fields(SECTIONS[section]):
        if f.default is not MISSING:
            out[f.name] = f.default
        elif f.default_factory is not MISSING:
            out[f.name] = f.default_factory()
    return json.loads(json.dumps(out))  # tuples -> lists


def settings_differences(recorded: dict, current: dict) -> list[str]:
    """`key: recorded -> current` for every setting that differs. A setting the record lacks (added to the schema
    after publishing) counts as equal at its dataclass default; one the profile lacks (removed since) differs."""
    out = []
    for key in sorted(set(recorded) | set(current)):
        r, c = recorded.get(key, "<absent>"), current.get(key, "<absent>")
        if isinstance(c, dict) and isinstance(r, dict):
            defaults = _defaults(key) if key in SECTIONS else {}
            for k in sorted(set(r) | set(c)):
                if k not in r and k in defaults and c[k] == defaults[k]:
                    continue
                rv, cv = r.get(k, "<absent>"), c.get(k, "<absent>")
                if rv != cv:
                    out.append(f"{key}.{k}: {rv!r} -> {cv!r}")
        elif r != c:
            out.append(f"{key}: {r!r} -> {c!r}")
    return out


# ----------------------------------------------------------------------------- hashes


def verify_files(name: str, artifact: str, rec: dict | None = None) -> Path:
    """artifacts/<name>/<artifact>/ after checking every recorded file's sha256; PublishedArtifactError (one
    line: the file, both hashes, the fix) on a missing or changed file."""
    rec = rec if rec is not None else record(name)
    if rec is None or artifact not in rec:
        raise PublishedArtifactError(f"no published {artifact} for profile {name} (artifacts/{name}/{MANIFEST})")
    root = artifacts_root() / name
    fix = (
        f"restore it with `git checkout -- {root}`, republish ({republish_command(name)}), or retrain instead "
        f"({FROM_SCRATCH_ENV}=1, make reproduce FROM_SCRATCH=1)"
    )
    files = rec[artifact]["files"]
    for rel, want in sorted(files.items()):
        path = root / rel
        if not path.is_file():
            raise PublishedArtifactError(f"published file {path} is missing; {fix}")
        got = sha256_file(path)
        if got != want:
            raise PublishedArtifactError(
                f"published file {path} has sha256 {got[:16]}..., not the recorded {want[:16]}... (corrupted or "
                f"replaced); {fix}"
            )
    # the record is the manifest: a file it does not list (an extra *.safetensors, tokenizer file) would be loaded
    # beside the recorded ones (checkpoint and tokenizer loaders read directories), so it is an error too
    adir = root / rec[artifact]["dir"]
    extra = [f for f in sorted(adir.rglob("*")) if (f.is_file() or f.is_symlink())
             and f.relative_to(root).as_posix() not in files]  # fmt: skip
    if extra:
        more = f", nor {len(extra) - 1} more" if len(extra) > 1 else ""
        raise PublishedArtifactError(
            f"{extra[0]} is not a published file ({MANIFEST} does not list it{more}); remove it (`git clean -n "
            f"{adir}` lists what git does not track), or republish ({republish_command(name)})"
        )
    return adir


# ----------------------------------------------------------------------------- use


def _applies(profile: Profile, artifact: str, rec: dict, current: dict) -> bool:
    """Whether the recorded settings are the profile's; a shipped profile that differs is an error."""
    diff = settings_differences(rec[artifact]["settings"], current)
    if not diff:
        return True
    shipped = None
    try:
        shipped = load_profile(profile.name)
    except UserError:
        pass  # a profile given as a path whose name has no configs/<name>.yaml: a derived one
    what = "; ".join(diff[:6]) + ("; ..." if len(diff) > 6 else "")
    if shipped is not None and shipped == profile:
        raise PublishedArtifactError(
            f"artifacts/{profile.name}/{MANIFEST}: the published {artifact} was trained with other settings than "
            f"configs/{profile.name}.yaml ({what}); republish ({republish_command(profile.name)}) or retrain "
            f"({FROM_SCRATCH_ENV}=1, make reproduce FROM_SCRATCH=1)"
        )
    note = f"published: not using artifacts/{profile.name}/{artifact} (settings differ: {what}); training instead"
    if note not in _noted:  # once per process: stages ask several times
        _noted.add(note)
        print(note, file=sys.stderr)
    return False


def backbone_dir(profile: Profile) -> Path | None:
    """The published backbone's directory (its model/ verified against the record), or None when none applies
    (see the module docstring). Only scratch profiles have one."""
    if profile.model.source != "scratch" or from_scratch():
        return None
    rec = record(profile.name)
    if rec is None or "backbone" not in rec or not _applies(profile, "backbone", rec, backbone_settings(profile)):
        return None
    return verify_files(profile.name, "backbone", rec)


def phase1_backbone_dir(profile: Profile) -> Path:
    """The published backbone as the first phase of `profile`'s warm restart (backbone_training.restart_steps):
    its recorded settings must be the profile's with no restart, and every file its recorded sha256."""
    bt = profile.backbone_training
    if not bt.restart_steps:
        raise UserError(f"profile {profile.name} has no warm restart (backbone_training.restart_steps is 0), so no "
                        "first phase to start from: train it without --phase1-from-published")  # fmt: skip
    first = profile.replace({"backbone_training.restart_steps": 0, "backbone_training.restart_lr": None})
    rec = record(profile.name)
    if rec is None or "backbone" not in rec:
        raise UserError(f"no published backbone for profile {profile.name} (artifacts/{profile.name}/{MANIFEST}) "
                        "to start the warm restart from: train without --phase1-from-published")  # fmt: skip
    diff = settings_differences(rec["backbone"]["settings"], backbone_settings(first))
    if diff:
        raise UserError(f"artifacts/{profile.name}: the published backbone is not this profile's first phase "
                        f"({'; '.join(diff[:4])}): train without --phase1-from-published")  # fmt: skip
    return verify_files(profile.name, "backbone", rec)


def head_dir(profile: Profile, backbone_fingerprint: str) -> Path | None:
    """The published head's directory (verified), or None when none applies: also when the backbone is not the
    one it was trained on (a head only predicts the residuals of its own backbone), or mrp.pretrained is set."""
    if profile.mrp.pretrained or from_scratch():
        return None
    rec = record(profile.name)
    if rec is None or "head" not in rec:
        return None
    recorded = rec["head"]["backbone_fingerprint"]
    if recorded != backbone_fingerprint:
        # the published backbone applies but the loaded one is not it: its files changed under a matching record
        # (or were loaded from elsewhere); never fall back to training silently
        if backbone_dir(profile) is not None:
            raise PublishedArtifactError(
                f"artifacts/{profile.name}: the published head was trained on backbone {recorded}, the backbone "
                f"loaded for profile {profile.name} has fingerprint {backbone_fingerprint} although the published "
                f"backbone applies; restore artifacts/{profile.name} (`git checkout -- artifacts/{profile.name}`) "
                f"or retrain ({FROM_SCRATCH_ENV}=1)"
            )
        note = (f"published: not using artifacts/{profile.name}/head (trained on backbone {recorded}, this backbone "
                f"is {backbone_fingerprint}); training instead")  # fmt: skip
        if note not in _noted:
            _noted.add(note)
            print(note, file=sys.stderr)
        return None
    if not _applies(profile, "head", rec, head_settings(profile)):
        return None
    return verify_files(profile.name, "head", rec)


def head_applies(profile: Profile) -> bool:
    """Whether the published head stands in for `profile`'s head, decided from the records alone (no model is
    loaded): the published backbone applies and the head's record names it. Such a run trains no head, so it
    collects no trajectories (reproduce.stage_launches, stages.trajectories_summary)."""
    if backbone_dir(profile) is None:
        return False
    return head_dir(profile, record(profile.name)["backbone"]["fingerprint"]) is not None


# ----------------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default=DEFAULT_PROFILE)
    args = ap.parse_args(argv)
    profile = load_profile(args.profile)
    rec = record(profile.name)
    if rec is None:
        print(f"nothing published for profile {profile.name} (artifacts/{profile.name}/{MANIFEST})")
        return 1
    current = {"backbone": backbone_settings(profile), "head": head_settings(profile)}
    for artifact in ARTIFACTS:
        if artifact not in rec:
            continue
        a = rec[artifact]
        verify_files(profile.name, artifact, rec)
        diff = settings_differences(a["settings"], current[artifact])
        t = a["trained"]
        print(f"{artifact}: {len(a['files'])} files, sha256 verified; settings "
              f"{'= the profile' if not diff else 'differ: ' + '; '.join(diff)}")  # fmt: skip
        print(f"  trained at commit {t.get('git_commit')} (dirty: {t.get('git_dirty')}), torch {t.get('torch')}, "
              f"{t.get('threads')} threads, {t.get('machine')}, {t.get('wall_s')} s")  # fmt: skip
    note = machine_note(profile.name)
    if note:
        print(note, file=sys.stderr)
    return 0


#: the environment keys whose difference can move a table's last digits (runtime.cpu_numerics; docs/portability.md)
MACHINE_KEYS = ("platform", "cpu_capability", "blas")


def machine_note(name: str, env_csv: Path | None = None) -> str | None:
    """A warning when this machine's CPU numerics (MACHINE_KEYS) differ from those recorded in the committed
    figures/<name>/environment.csv, the run that made the committed tables; None when they match or none is
    committed."""
    import csv

    from mrp_repro.runtime import cpu_numerics

    path = env_csv or repo_root() / "figures" / name / "environment.csv"
    if not path.exists():
        return None
    with open(path, newline="") as f:
        made = {r["key"]: r["value"] for r in csv.DictReader(f)}
    here = {k: str(v) for k, v in cpu_numerics().items()}
    diff = [f"{k} {made.get(k, 'not recorded')} there, {here[k]} here" for k in MACHINE_KEYS if made.get(k) != here[k]]
    if not diff:
        return None
    return (f"warning: this machine differs from the one that made the committed figures/{name}/ ({'; '.join(diff)}): "
            "make reproduce gives the same accuracy and TPF tables, but KL columns can move in their last digits "
            "(docs/portability.md says which and by how much)")  # fmt: skip


if __name__ == "__main__":
    from mrp_repro.cli import run_cli

    run_cli(main)
