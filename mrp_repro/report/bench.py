"""The two benchmark tables as commands: the backbone's modes, and every decoding mode with the cost model.

python -m mrp_repro.report.bench --profile tiny --table backbone   # static + dynamic(tau), adjacent steps
-> figures/<profile>/backbone_modes.{md,tex,csv}, backbone_modes_rows.csv, adjacent_steps.{md,tex,csv}
python -m mrp_repro.report.bench --profile tiny --table modes [--n-prompts 100] [--benchmarks synth-code]
-> figures/<profile>/modes.{md,tex,csv} (+ modes_rows.csv: the runs frame; --no-head: no MRP modes)

from mrp_repro.report.bench import backbone_report, modes_report
table = backbone_report(profile)              # paper.backbone_table of a fresh runs frame
table = modes_report(profile, backbone, head, out=None)  # paper.modes_table + cost model; no files
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from mrp_repro.config import DEFAULT_PROFILE
from mrp_repro.measure import cost as cost_mod
from mrp_repro.measure.runs import collect_runs, eval_problems, settings_for
from mrp_repro.measure.schema import MODES
from mrp_repro.report import paper, tables

__all__ = ["backbone_report", "modes_report", "main"]


def backbone_report(profile, backbone=None, progress: bool = True, adjacent: bool = True,
                    num_threads: int | None = None, out: Path | None = None) -> pd.DataFrame:  # fmt: skip
    """Static and dynamic(tau in decoding.thresholds) on every synthetic benchmark of the profile; writes
    backbone_modes.* (and adjacent_steps.*) under `out` (default figures/<profile>/) and returns the table."""
    from mrp_repro import stages
    from mrp_repro.measure.adjacent import adjacent_step_similarity
    from mrp_repro.runtime import set_num_threads
    from mrp_repro.tasks import synthetic

    set_num_threads(num_threads or profile.backbone_training.num_threads)
    bb = backbone if backbone is not None else stages.backbone(profile, progress=progress)
    benches = [t for t in profile.evaluation.benchmarks if t in synthetic.TASKS] or list(synthetic.TASKS)
    runs = collect_runs(profile, bb, None, benchmarks=benches, settings=settings_for(profile, None, ("static",
                        "dynamic")), progress=progress)  # fmt: skip
    ev = profile.evaluation
    table = paper.backbone_table(runs, ev.bootstrap_samples, ev.ci, profile.seed)
    d = tables.out_dir(out if out is not None else profile)
    tables.save_table(table, d, "backbone_modes")
    tables.write_csv(runs, d / "backbone_modes_rows.csv")
    if adjacent:
        probs = [p for t in benches for p in eval_problems(profile, t, 32)]
        adj = adjacent_step_similarity(bb, probs, max_distance=4, n_problems=len(probs), seed=profile.seed)
        tables.save_table(adj, d, "adjacent_steps", digits=4)
    return table


def modes_report(profile, backbone, head, benchmarks=None, n_prompts: int | None = None,
                 batch_size: int | None = None, max_new_tokens: int | None = None, modes=MODES,
                 progress: bool = True, out: Path | None = None) -> pd.DataFrame:  # fmt: skip
    """Every setting of `modes` on the same prompts, summarised per setting with the speculative cost model
    measured at the decoding batch size (in table.attrs["cost_model"]); writes modes.* and modes_rows.csv
    under `out` when given."""
    settings = settings_for(profile, head, modes)
    runs = collect_runs(profile, backbone, head, n_prompts, benchmarks, settings, batch_size, max_new_tokens,
                        progress)  # fmt: skip
    Ks = sorted({int(k) for k in runs.loc[runs["mode"] == "speculative", "K"]})
    cm = None
    if Ks:
        bs = min(batch_size or profile.decoding.batch_size, int(runs.groupby(["benchmark", "setting"]).size().max()))
        cm = cost_mod.cost_model(backbone.model, head, bs, backbone.block_size, Ks)
    ev = profile.evaluation
    table = paper.modes_table(runs, cm, ev.bootstrap_samples, ev.ci, profile.seed)
    if out is not None:
        d = tables.out_dir(out)
        tables.save_table(table, d, "modes", digits=2, note=cost_mod.cost_note(cm) if cm else "")
        tables.write_csv(runs, d / "modes_rows.csv")
    return table


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default=DEFAULT_PROFILE)
    ap.add_argument("--table", default="backbone", choices=["backbone", "modes"])
    ap.add_argument("--benchmarks", nargs="*", default=None, help="modes: benchmarks (default evaluation's)")
    ap.add_argument("--n-prompts", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (1 is faster on a shared machine)")
    ap.add_argument("--no-head", action="store_true", help="modes: skip the MRP modes (no head training)")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--out", default=None, help="output directory (default figures/<profile>)")
    a = ap.parse_args(argv)
    from mrp_repro import stages
    from mrp_repro.config import load_profile
    from mrp_repro.runtime import seed_everything, set_num_threads

    profile = load_profile(a.profile)
    out = Path(a.out) if a.out else None
    if a.table == "backbone":
        table = backbone_report(profile, progress=not a.no_progress, num_threads=a.threads, out=out)
    else:
        set_num_threads(a.threads)
        seed_everything(profile.seed)
        bb = stages.backbone(profile)
        head = None if a.no_head else stages.head(profile, bb)
        table = modes_report(profile, bb, head, a.benchmarks, a.n_prompts, a.batch_size,
                             progress=not a.no_progress, out=out or tables.out_dir(profile))  # fmt: skip
    print(tables.markdown(tables.format_table(table, 2)))


if __name__ == "__main__":
    from mrp_repro.cli import run_cli

    run_cli(main)
