"""Run every notebook, in order, on one profile.

    python -m mrp_repro.reproduce --profile tiny        # what `make reproduce` runs
    python -m mrp_repro.reproduce --profile smoke --only 00 01
    python -m mrp_repro.reproduce --profile nosuch --debug   # a user error with its traceback
    python -m mrp_repro.reproduce --profile tiny --nproc 2   # `make reproduce NPROC=2`: heavy stages on 2 ranks
    python -m mrp_repro.reproduce --profile tiny --nproc 1   # everything in the notebooks, one process
    MRP_REPRO_FROM_SCRATCH=1 python -m mrp_repro.reproduce --profile tiny   # `make reproduce FROM_SCRATCH=1`

Executes notebooks/[0-9][0-9]_*.ipynb with papermill on the Jupyter kernel
`mrp-repro` (registered by `make setup`), parameter `profile=<name or path>`,
writing the executed copies to runs/<profile>/notebooks/, and a browsable copy of each, outputs kept (long text
outputs cut, paths relative to the repository), next to the figures: figures/<profile>/notebooks/ (notebooks/
itself stays output-free). At the end, figures/<profile>/COLUMNS.md defines every column of every table there
(an undefined column is an error). Stops at the first notebook that fails, naming it, the failing cell (index and
source) and its executed copy. Stages whose cached artifacts are valid (runs/<profile>/<stage>-<hash>/,
results-<profile hash>/) are reused, so a re-run only recomputes what changed. OPT_IN
notebooks (10_ablations: about an hour of head training on tiny) run only when named: `--only 10` (`make ablations`).

--nproc auto (the default, auto_nproc): a rank per CPU core on a CPU (at most 8), 1 on a GPU, with
$MRP_REPRO_FROM_SCRATCH or with --only (the named notebooks run as they are). With --nproc N > 1 the heavy stages
run first, through torchrun on N local ranks (mrp_repro.distributed):
the backbone (one process), the trajectories of every trajectories.sources entry (sharded), the head (DDP; not
with mrp.pretrained), the decoding grids (report.grids and report.peers, sharded) and notebook 05's repeated
wall-clock passes (report.passes, a unit per batch size and benchmark on each rank). The notebooks then run as
always, in one process, and read what those stages wrote. With N = 1 nothing changes.

A profile with published artifacts (artifacts/<profile>/, mrp_repro.published) evaluates them: the backbone and
head are not trained. With $MRP_REPRO_FROM_SCRATCH=1 everything is retrained under runs/from-scratch/, the figures
go to runs/from-scratch/figures/<profile>/, and the command line ends with a comparison against the published
artifacts and the committed figures (from_scratch_vs_published.md there; mrp_repro.publish.compare).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from mrp_repro.config import DEFAULT_PROFILE, load_profile, repo_root
from mrp_repro.runtime import figures_dir, runs_root

KERNEL = "mrp-repro"

#: a text output (stream or text/plain) longer than this is cut in the published copy, saying how much was cut
MAX_TEXT_CHARS = 4000
#: output types that only repeat another one of the same output (the PDF beside a PNG is never embedded)
DROP_MIME = ("application/pdf",)


#: notebooks `make reproduce` leaves out unless named with --only: they train many heads (10: `make ablations`,
#: about an hour on tiny, next to make reproduce's budget: tiny's 30 minutes, chain16's 45)
OPT_IN = ("10_ablations",)


def notebooks(only: list[str] | None = None, opt_in: bool = False) -> list[Path]:
    """The notebooks in order; OPT_IN ones only when named in `only` or with opt_in=True."""
    nbs = sorted((repo_root() / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if only:
        return [nb for nb in nbs if nb.name[:2] in only or nb.stem in only]
    return nbs if opt_in else [nb for nb in nbs if nb.stem not in OPT_IN]


def failure_message(nb: Path, out: Path, e: BaseException, seconds: float, profile_arg: str) -> str:
    """Which notebook and which cell failed, with the error, where the executed copy is, and the command that reruns
    only it (profile_arg: the --profile value as given, shell-quoted: Profile.cli_arg), runnable as printed."""
    cell = getattr(e, "exec_count", None)
    index = getattr(e, "cell_index", None)
    if index is not None:
        where = f"cell {index} (execution count {cell})" if cell is not None else f"cell {index}"
        ename, evalue = getattr(e, "ename", type(e).__name__), getattr(e, "evalue", str(e))
        what = f"{ename}: {evalue}"
        src = getattr(e, "source", "") or ""
        snippet = "\n".join("    " + line for line in src.splitlines()[:8])
    else:
        where, what, snippet = "before any cell ran", f"{type(e).__name__}: {e}", ""
    msg = f"[{nb.name}] FAILED after {seconds:.0f}s in {where}: {what}"
    if snippet:
        msg += f"\n  cell source:\n{snippet}"
    msg += f"\n  executed copy (with the traceback): {out}"
    msg += f"\n  rerun only this notebook: python -m mrp_repro.reproduce --profile {profile_arg} --only {nb.name[:2]}"
    return msg


def _cut(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n... [{len(text) - limit} more characters cut]\n"


def publish_notebook(executed: Path, dest: Path) -> Path:
    """A browsable copy of an executed notebook at `dest`: every output kept (figures as embedded PNG, tables as
    HTML/Markdown), but each long text output cut to MAX_TEXT_CHARS and the repository's absolute path written
    as `.`, so the copy is small and the same on every machine."""
    import json

    nb = json.loads(Path(executed).read_text())
    root = str(repo_root())

    def clean(x):
        if isinstance(x, list):
            x = "".join(x)
        return _cut(x.replace(root, "."))

    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []):
            if "text" in out:
                out["text"] = clean(out["text"])
            if "traceback" in out:
                out["traceback"] = [t.replace(root, ".") for t in out["traceback"]]
            data = out.get("data", {})
            for mime in DROP_MIME:
                data.pop(mime, None)
            for mime in ("text/plain", "text/markdown", "text/html"):
                if mime in data:
                    data[mime] = clean(data[mime]) if mime == "text/plain" else "".join(data[mime]).replace(root, ".")
    dest.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
    from mrp_repro.report.tables import write_text  # renamed into place: a link at dest is replaced, not followed

    write_text(dest, text.replace(root, "."))  # papermill's metadata too (input_path, output_path)
    return dest


def run_notebook(nb: Path, profile, param: str, kernel: str = KERNEL, parameters: dict | None = None) -> Path:
    """Execute one notebook on a profile (papermill; runs/<profile>/notebooks/<name>, outputs as they are) and
    publish its browsable copy to figures/<profile>/notebooks/<name>; returns the published path. Raises what
    papermill raises (PapermillExecutionError names the failing cell)."""
    import papermill as pm

    out = runs_root() / profile.name / "notebooks" / nb.name
    out.parent.mkdir(parents=True, exist_ok=True)
    pm.execute_notebook(str(nb), str(out), parameters={"profile": param, **(parameters or {})}, kernel_name=kernel,
                        cwd=str(nb.parent), progress_bar=False)  # fmt: skip
    published = publish_notebook(out, figures_dir(profile) / "notebooks" / nb.name)
    _stamp_commit(published, profile)
    return published


def _stamp_commit(path: Path, profile) -> None:
    """The commit the notebook ran at, in the published copy's metadata (mrp_repro.git_commit, git_dirty): every
    copy of one figures/<profile>/ must carry environment.md's (tests/test_notebooks.py)."""
    import json

    from mrp_repro.runtime import provenance

    prov = provenance(profile, "cpu")
    nb = json.loads(path.read_text())
    nb.setdefault("metadata", {})["mrp_repro"] = {"git_commit": prov["git_commit"], "git_dirty": prov["git_dirty"],
                                                  "profile_hash": prov["profile_hash"]}  # fmt: skip
    from mrp_repro.report.tables import write_text

    write_text(path, json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


#: the most local ranks --nproc auto starts on a CPU
MAX_AUTO_RANKS = 8


def auto_nproc() -> int:
    """--nproc auto: one rank per CPU core this process may use (at most MAX_AUTO_RANKS) when the run decodes on a
    CPU; else 1. Why ranks and not threads: a CPU stand-in's forwards are too small to split
    over threads (chain16's static(1) batch: 4.20 s on 2 threads, 4.31 s on 1; two 1-thread processes at once: 4.52
    and 3.95 s), so a second core only helps as a second process. 1 with $MRP_REPRO_FROM_SCRATCH (the published heads
    were trained in one process; DDP sums gradients in another order, and the retrained head is compared bit for
    bit) and on a GPU (one device: a second rank would share it)."""
    import os

    from mrp_repro.runtime import from_scratch, pick_device

    if from_scratch() or pick_device(None).type != "cpu":
        return 1
    return max(1, min(MAX_AUTO_RANKS, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                      else os.cpu_count() or 1))  # fmt: skip


def stage_launches(profile, param: str) -> list[tuple[str, list[str], str]]:
    """(module, its arguments, its log's name) of each stage heavy_stages launches after the backbone, in order."""
    from mrp_repro.stages import why_no_trajectories

    launches = []
    # a released head alone (mrp.pretrained) trains nothing, and the published head that applies is not retrained:
    # neither reads trajectories (notebook 02 says so: stages.trajectories_summary)
    if why_no_trajectories(profile) is None:
        launches += [("mrp_repro.stages", ["trajectories", "--profile", param, "--source", s], "trajectories")
                     for s in profile.trajectories.sources]  # fmt: skip
        launches.append(("mrp_repro.stages", ["head", "--profile", param], "head"))
    launches.append(("mrp_repro.report.grids", ["--profile", param], "grids"))
    launches.append(("mrp_repro.report.peers", ["--profile", param], "peers"))
    # notebook 05's repeated passes on every core, under the grids' load (report.passes says why)
    launches.append(("mrp_repro.report.passes", ["--profile", param], "passes"))
    return launches


def heavy_stages(profile, param: str, nproc: int) -> None:
    """The stages that scale out, launched on `nproc` ranks before the notebooks (see the module docstring)."""
    import subprocess

    from mrp_repro import distributed

    t0 = time.perf_counter()
    logs = runs_root() / profile.name / "logs"
    print("[stages] backbone (one process)", flush=True)
    cmd = [sys.executable, "-m", "mrp_repro.stages", "backbone", "--profile", param]
    if subprocess.run(cmd, stdout=subprocess.DEVNULL).returncode != 0:
        from mrp_repro.errors import UserError

        raise UserError(f"the backbone stage failed (its error is above); rerun `{' '.join(cmd[1:])}` to see it alone")
    for module, args, what in stage_launches(profile, param):
        print(f"[stages] {what} on {nproc} ranks: python -m {module} {' '.join(args)}", flush=True)
        distributed.launch(module, args, nproc, logs / what)
    print(f"[stages] done in {time.perf_counter() - t0:.0f}s", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default=DEFAULT_PROFILE, help="profile name (configs/<name>.yaml) or a YAML path")
    ap.add_argument("--only", nargs="*", help="run only these notebooks (number prefix or stem)")
    ap.add_argument("--kernel", default=KERNEL, help="Jupyter kernel name (default: %(default)s)")
    ap.add_argument("--nproc", default="auto", help="ranks for the heavy stages (torchrun); 1: in the notebooks; auto "
                    "(default): auto_nproc, or 1 with --only")
    args = ap.parse_args(argv)

    profile = load_profile(args.profile)  # fail fast on a bad profile, as one line (run_cli)
    _say_published(profile)
    from mrp_repro.runtime import mark_run_start

    mark_run_start()  # the notebooks inherit it: a result computed before it was reused from an earlier run
    param = args.profile
    if Path(param).suffix in (".yaml", ".yml"):
        param = str(Path(param).resolve())  # notebooks run with their own cwd
    out_dir = runs_root() / profile.name / "notebooks"
    out_dir.mkdir(parents=True, exist_ok=True)
    nbs = notebooks(args.only)
    if not nbs:
        print("no notebooks to run (notebooks/[0-9][0-9]_*.ipynb)", file=sys.stderr)
        return 1

    nproc = (1 if args.only else auto_nproc()) if args.nproc == "auto" else int(args.nproc)
    if nproc > 1:
        heavy_stages(profile, param, nproc)
    print(f"profile {profile.name} ({profile.hash}): {len(nbs)} notebooks -> {out_dir}")
    for nb in nbs:
        out = out_dir / nb.name
        t0 = time.perf_counter()
        print(f"[{nb.name}] running", flush=True)
        try:
            run_notebook(nb, profile, param, args.kernel)
        except Exception as e:  # PapermillExecutionError, NoSuchKernel, ...
            print(failure_message(nb, out, e, time.perf_counter() - t0, profile.cli_arg), file=sys.stderr)
            return 1
        print(f"[{nb.name}] done in {time.perf_counter() - t0:.0f}s", flush=True)
    from mrp_repro.report.tables import write_glossary

    figs = figures_dir(profile)
    from mrp_repro.report.verdicts import refresh_provenance

    refresh_provenance(figs)  # claims.md (09) was written before 11 re-rendered the peers tables
    glossary, undefined = write_glossary(figs)
    if undefined:
        print(f"{glossary}: column(s) {', '.join(undefined)} have no definition; add each to "
              "mrp_repro/measure/schema.py TABLE_COLUMNS", file=sys.stderr)  # fmt: skip
        return 1
    print(f"all {len(nbs)} notebooks ran; figures, tables, {glossary.name} and the executed notebooks (notebooks/) "
          f"under {figs}")  # fmt: skip
    return 0


def _say_published(profile) -> None:
    """One line: whether this run evaluates the published artifacts or retrains them."""
    from mrp_repro import published
    from mrp_repro.runtime import from_scratch

    if published.record(profile.name) is None:
        return
    if from_scratch():
        print(f"{published.FROM_SCRATCH_ENV}=1: retraining instead of using artifacts/{profile.name}/ (runs and "
              f"figures under {runs_root()})")  # fmt: skip
    else:
        print(f"published artifacts: artifacts/{profile.name}/ (sha256 checked on load; "
              f"{published.FROM_SCRATCH_ENV}=1 or make reproduce FROM_SCRATCH=1 retrains instead)")  # fmt: skip


def main_and_compare(argv: list[str] | None = None) -> int:
    """main; then, for a from-scratch run of a profile with published artifacts, its total time and the comparison
    with them (mrp_repro.publish.compare)."""
    from mrp_repro import published
    from mrp_repro.runtime import from_scratch

    t0 = time.perf_counter()
    rc = main(argv)
    name = argparse.ArgumentParser(add_help=False)
    name.add_argument("--profile", default=DEFAULT_PROFILE)
    profile = load_profile(name.parse_known_args(argv)[0].profile)
    if rc == 0 and from_scratch() and published.record(profile.name) is not None:
        from mrp_repro.publish import compare

        print(f"from scratch: every stage and notebook in {time.perf_counter() - t0:.0f}s")
        print(compare(profile))
    return rc


if __name__ == "__main__":
    from mrp_repro.cli import run_cli

    run_cli(main_and_compare)  # exits with main's status; a bad profile prints one line (--debug: the traceback)
