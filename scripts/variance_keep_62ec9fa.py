"""One-off: give chain16's head seeds 0-2, measured by `make variance` at 62ec9fa (committed in f7f02eb), the per-seed
files a later variance run keeps them from (report.variance_store), so that backbone seeds can join them without
retraining the head seeds (their trajectories, heads and decodes are not on the machine that adds the backbones).

    .venv/bin/python scripts/variance_keep_62ec9fa.py            # rewrites figures/chain16/variance_{seeds,heads}.csv,
                                                                 # writes figures/chain16/variance_seed_claims.csv

What it reads, all as committed at f7f02eb: variance_seeds.csv (every head seed's headline values), variance_heads.csv
(their held-out KL), variance_claims.csv (each claim's per-seed verdicts, `seed: verdict; ...`, and its declared test).
What it adds: seed_prompts 64 (variance.md's note at f7f02eb), computed_at 62ec9faeacf4 (provenance.json: every
variance table rendered there, no uncommitted change), profile_hash: today's chain16 hash. The profile at 62ec9fa
hashed 92c5c47345e2; its resolved settings differ from today's only by decoding.s2d2_thresholds, added since with the
value () that chain16 keeps (no S2D2 decode), and no decoding, claims or training code a seed run executes changed
since (git diff 62ec9fa..HEAD: formatting, and the S2D2 peer chain16 never decodes). The script checks the first two
and refuses otherwise.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SOURCE_COMMIT = "f7f02eb"  # the commit that holds the run's tables
COMPUTED_AT = "62ec9faeacf4"  # the commit the run rendered them at
OLD_HASH = "92c5c47345e2"
N_PROMPTS = 64


def committed(name: str) -> pd.DataFrame:
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{SOURCE_COMMIT}:figures/chain16/{name}"],
                          check=True, capture_output=True, text=True).stdout  # fmt: skip
    return pd.read_csv(io.StringIO(text), keep_default_na=False)


def per_seed(text: str, seeds: list[int]) -> dict[int, str]:
    """'0: holds; 1: holds in direction; size not compared; 2: ...' -> {seed: verdict} (a verdict may hold '; ')."""
    if not text:
        return {}
    parts = re.split(r"(?:^|; )(\d+): ", text)[1:]
    got = {int(parts[i]): parts[i + 1] for i in range(0, len(parts), 2)}
    if sorted(got) != seeds:
        raise SystemExit(f"cannot read {text!r} as the verdicts of seeds {seeds}")
    return got


def settings_then() -> dict:
    """chain16's resolved settings at COMPUTED_AT (a temporary worktree of that commit loads the profile)."""
    import json
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        wt = Path(tmp) / "wt"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(wt), COMPUTED_AT], check=True)
        try:
            code = ("import json; from mrp_repro.config import load_profile; P = load_profile('chain16'); "
                    "print(json.dumps({'hash': P.hash, 'settings': P.to_dict()}, default=list))")  # fmt: skip
            out = subprocess.run([sys.executable, "-c", code], cwd=wt, check=True, capture_output=True, text=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(wt)], check=True)
    return json.loads(out.stdout)


def differences(a, b, path=""):
    """Dotted keys whose values differ between two settings trees."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in differences(a.get(k), b.get(k), f"{path}{k}.")]
    return [] if a == b else [path.rstrip(".")]


def main() -> None:
    import json

    from mrp_repro.config import load_profile
    from mrp_repro.report import tables, variance, variance_store
    from mrp_repro.report.verdicts import NA, VERDICTS

    P = load_profile("chain16")
    then = settings_then()
    now = json.loads(json.dumps(P.to_dict(), default=list))
    diff = differences(then["settings"], now)
    if then["hash"] != OLD_HASH or diff != ["decoding.s2d2_thresholds"] or now["decoding"]["s2d2_thresholds"]:
        raise SystemExit(f"chain16 at {COMPUTED_AT} ({then['hash']}) differs from today's ({P.hash}) in {diff}: "
                         "its head seeds are another recipe's; run them again (make variance)")  # fmt: skip
    stamp = tables.read_provenance(ROOT / "figures" / "chain16").get("variance_claims", {})
    if str(stamp.get("rendered_at", ""))[:12] != COMPUTED_AT or stamp.get("rendered_dirty"):
        raise SystemExit(f"variance_claims was not rendered at {COMPUTED_AT} from committed code: {stamp}")
    prov = {"seed_prompts": N_PROMPTS, "computed_at": COMPUTED_AT, "profile_hash": P.hash}
    values = committed("variance_seeds.csv")
    seeds = sorted(int(s) for s in values.loc[values["seed_kind"] == variance.HEAD, "seed"].unique())
    if set(values["seed_kind"]) != {variance.HEAD}:
        raise SystemExit(f"expected head seeds only in {SOURCE_COMMIT}'s variance_seeds.csv")
    heads = committed("variance_heads.csv")
    across = committed("variance_claims.csv")
    across = across[across["seed_kind"] == variance.HEAD]
    rows = []
    for r in across.itertuples():
        v = per_seed(r.seed_verdicts, seeds) or {s: NA for s in seeds}  # speculative-speedup: controls only
        c = per_seed(r.seed_control_verdicts, seeds)
        o = per_seed(r.seed_other_control_verdicts, seeds)
        for s in seeds:
            if v[s] not in VERDICTS:
                raise SystemExit(f"{r.id} {r.scope}: seed {s}'s verdict {v[s]!r} is not one of {VERDICTS}")
            rows.append({"seed_kind": variance.HEAD, "seed": s, "id": r.id, "scope": r.scope, "verdict": v[s],
                         "control_verdict": c.get(s, ""), "other_control_verdict": o.get(s, ""),
                         "declared": r.declared, **prov})  # fmt: skip
    claims = pd.DataFrame(rows, columns=list(variance_store.SEED_CLAIM_COLUMNS))
    out = ROOT / "figures" / "chain16"
    tables.write_csv(values.assign(**prov)[list(variance.SEED_COLUMNS)], out / "variance_seeds.csv")
    tables.write_csv(heads.assign(computed_at=COMPUTED_AT, profile_hash=P.hash)[list(variance.HEAD_COLUMNS)],
                     out / "variance_heads.csv")  # fmt: skip
    tables.write_csv(claims.sort_values(["seed", "id"], kind="stable"), out / variance_store.SEED_CLAIMS_FILE)
    print(f"head seeds {seeds}: {len(values)} headline rows, {len(claims)} claim rows (computed at {COMPUTED_AT})")


if __name__ == "__main__":
    main()
