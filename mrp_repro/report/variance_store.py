"""Every seed's results kept beside the variance tables, so that `make variance` grows seed by seed (issue 35).

A seed run costs a head's training (head seeds) or a backbone's (backbone seeds) before its decodes: hours on 2 cores.
So what each seed measured is written per seed into figures/<profile>/ with the commit that computed it and the
profile's hash, and a later run that does not run that seed keeps it (variance.run(keep_other_seeds=True), the
default; `--fresh` drops them):

    variance_seeds.csv        one row per seed and headline (SEED_COLUMNS)
    variance_seed_claims.csv  one row per seed and claim scope: its verdict and control verdicts (SEED_CLAIM_COLUMNS)
    variance_heads.csv        one row per head seed: its held-out KL (variance.HEAD_COLUMNS)

    from mrp_repro.report import variance_store
    kept = variance_store.kept_seeds(figs, profile, running={("head seeds", 0), ("backbone seeds", 2)}, n_prompts=64)
    kept.reports[("head seeds", 1)]     # that seed's claims report, as claims.check_claims gave it (SEED_CLAIMS rows)

A seed is kept only when all its files name the profile's current hash (another hash: another recipe, its numbers
are not this profile's) and it is not run now (a seed run now replaces its rows). variance.md names every kept seed
with the commit that computed it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from mrp_repro.measure.schema import RUN_COLUMNS, TABLE_COLUMNS

__all__ = ["HEAD", "BACKBONE", "SEED_COLUMNS", "SEED_CLAIMS_FILE", "SEED_CLAIM_COLUMNS", "Kept", "nothing_kept",
           "seed_order", "in_seed_order", "seed_claim_rows", "kept_seeds", "computed_now", "provenance_of",
           "kept_note"]  # fmt: skip

#: the two kinds of seed (report.variance's module docstring)
HEAD, BACKBONE = "head seeds", "backbone seeds"
#: variance_seeds.csv's columns (one row per seed and headline): defined once in the schema
_SEEDS = ("seed_kind", "seed", "headline", "benchmark", "seed_value", "seed_value_lo", "seed_value_hi", "seed_prompts",
          "computed_at", "profile_hash")  # fmt: skip
SEED_COLUMNS = {c: TABLE_COLUMNS.get(c) or RUN_COLUMNS[c] for c in _SEEDS}
SEED_CLAIMS_FILE = "variance_seed_claims.csv"
_SEED_CLAIMS = ("seed_kind", "seed", "id", "scope", "verdict", "control_verdict", "other_control_verdict",
                "declared", "seed_prompts", "computed_at", "profile_hash")  # fmt: skip
SEED_CLAIM_COLUMNS = {c: TABLE_COLUMNS[c] for c in _SEED_CLAIMS}
#: what every per-seed file carries, so that a kept seed names where it came from
PROVENANCE_COLUMNS = ("seed_prompts", "computed_at", "profile_hash")


@dataclass
class Kept:
    """The seeds an earlier run measured and this one keeps: their headline rows, claims reports and head rows."""

    values: pd.DataFrame
    reports: dict[tuple[str, int], pd.DataFrame] = field(default_factory=dict)
    heads: pd.DataFrame | None = None
    dropped: list[str] = field(default_factory=list)  # why a seed in the files is not kept

    @property
    def commits(self) -> dict[tuple[str, int], str]:
        """(kind, seed) -> the commit that computed that kept seed (its rows' computed_at)."""
        if self.values.empty:
            return {}
        firsts = self.values.groupby(["seed_kind", "seed"], sort=True)["computed_at"].first()
        return {(str(k), int(s)): str(c) for (k, s), c in firsts.items()}


def nothing_kept() -> Kept:
    """A run that keeps no earlier seed (variance --fresh)."""
    return Kept(values=pd.DataFrame(columns=list(SEED_COLUMNS)))


def computed_now(profile) -> dict:
    """What anything computed now carries: this commit (12 hex, '+dirty' with uncommitted code) and the profile's
    hash (a head row, which decodes no prompt)."""
    from mrp_repro.runtime import code_version

    v = code_version()
    return {"computed_at": str(v["git_commit"])[:12] + ("+dirty" if v["git_dirty"] else ""),
            "profile_hash": profile.hash}


def provenance_of(profile, n_prompts: int) -> dict:
    """The provenance columns a seed computed now carries: the prompts per task it decodes, and computed_now."""
    return {"seed_prompts": int(n_prompts), **computed_now(profile)}


def seed_order(kind: str, seed: int) -> tuple[int, int]:
    """The sort key of a seed run: head seeds before backbone seeds, each kind by seed."""
    return ((HEAD, BACKBONE).index(kind), int(seed))


def in_seed_order(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame`'s rows in seed_order (stable within a seed)."""
    keys = [seed_order(k, s) for k, s in zip(frame["seed_kind"], frame["seed"], strict=True)]
    return frame.iloc[sorted(range(len(frame)), key=keys.__getitem__)].reset_index(drop=True)


def seed_claim_rows(kind: str, seed: int, report: pd.DataFrame, claim_ids, prov: dict) -> pd.DataFrame:
    """One seed's claims report (claims.check_claims) as SEED_CLAIM_COLUMNS rows: the claims in `claim_ids` only."""
    rep = report[report["id"].isin(claim_ids)]
    out = pd.DataFrame({"seed_kind": kind, "seed": seed, "id": rep["id"].to_numpy(), "scope": rep["scope"].to_numpy()})
    for c in ("verdict", "control_verdict", "other_control_verdict", "declared"):
        out[c] = rep[c].to_numpy() if c in rep else ""
    for c, v in prov.items():
        out[c] = v
    return out[list(SEED_CLAIM_COLUMNS)]


def _read(path: Path) -> pd.DataFrame | None:
    if not path.exists():
        return None
    return pd.read_csv(path, keep_default_na=False, na_values=[""], dtype={"computed_at": str, "profile_hash": str})


def kept_seeds(directory, profile, running: set[tuple[str, int]], n_prompts: int) -> Kept:
    """The seeds in `directory`'s per-seed files that this run keeps: not in `running`, measured under `profile`'s
    hash on `n_prompts` prompts per task, and present in both variance_seeds.csv and variance_seed_claims.csv. Head
    rows (variance_heads.csv) of kept head seeds come too."""
    d = Path(directory)
    values, claims, heads = (_read(d / n) for n in ("variance_seeds.csv", SEED_CLAIMS_FILE, "variance_heads.csv"))
    empty = nothing_kept()
    if values is None or claims is None:
        return empty
    missing = [c for c in PROVENANCE_COLUMNS if c not in values.columns]
    if missing:  # a table from before seeds were kept: nothing says which commit computed it
        empty.dropped.append(f"{d / 'variance_seeds.csv'} has no {', '.join(missing)}: none of its seeds kept")
        return empty
    out = Kept(values=values.iloc[:0].copy())
    for (kind, seed), rows in values.groupby(["seed_kind", "seed"], sort=True):
        key = (str(kind), int(seed))
        if key in running:
            continue
        rep = claims[(claims["seed_kind"] == kind) & (claims["seed"] == seed)]
        hashes = set(rows["profile_hash"]) | set(rep["profile_hash"])
        prompts = set(rows["seed_prompts"]) | set(rep["seed_prompts"])
        if rep.empty:
            out.dropped.append(f"{kind} {seed}: no rows in {SEED_CLAIMS_FILE}")
        elif prompts != {n_prompts}:
            out.dropped.append(f"{kind} {seed}: decoded on {', '.join(map(str, sorted(prompts)))} prompts per task, "
                               f"this run on {n_prompts}: run it again")  # fmt: skip
        elif hashes != {profile.hash}:
            out.dropped.append(f"{kind} {seed}: measured under profile hash {', '.join(sorted(hashes))}, not "
                               f"{profile.hash} (another recipe): run it again")  # fmt: skip
        else:
            out.values = pd.concat([out.values, rows], ignore_index=True) if len(out.values) else rows.copy()
            out.reports[key] = rep.fillna("").reset_index(drop=True)
    if heads is not None and "computed_at" in heads.columns:
        keep = sorted(s for k, s in out.reports if k == HEAD)
        out.heads = heads[heads["seed"].isin(keep)].reset_index(drop=True)
    return out


def kept_note(kept: Kept) -> str:
    """variance.md's sentence on the kept seeds: which, computed at which commit ('' when none)."""
    if not kept.commits:
        return ""
    by: dict[str, list[str]] = {}
    for (kind, seed), c in sorted(kept.commits.items()):
        by.setdefault(c, []).append(f"{kind.split()[0]} {seed}")
    parts = [f"{', '.join(seeds)} at {c[:7]}" for c, seeds in by.items()]
    return (" Kept from an earlier run, not run again (variance_seed_claims.csv, variance_seeds.csv): "
            + "; ".join(parts) + ".")
