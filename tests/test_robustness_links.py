"""Nothing the package writes or locks follows a link out of its own directories (issue 39, finding 1).

Before the fix a `.lock` symlink (or hard link) in a run directory had its target truncated (stage_lock opened it
following links, then truncated it to write its PID: `stages head` exited 0 and left the file it pointed to empty),
and a symlink in figures/<profile>/ had its target overwritten by the next table, figure or notebook copy. Each
test plants a link to a victim file outside, runs the writer, and checks the victim is byte for byte as it was.
"""

from __future__ import annotations

import os
import subprocess
import sys

import matplotlib
import pandas as pd
import pytest

from mrp_repro import integrity
from mrp_repro.config import repo_root

matplotlib.use("Agg")

ORIGINAL = "precious: not the package's file\n"


@pytest.fixture
def victim(tmp_path):
    f = tmp_path / "outside" / "victim.txt"
    f.parent.mkdir()
    f.write_text(ORIGINAL)
    return f


def _intact(victim):
    assert victim.read_text() == ORIGINAL and victim.stat().st_nlink == 1


# ----------------------------------------------------------------------------- locks


def test_a_symlinked_lock_is_refused_and_its_target_kept(tmp_path, victim):
    run = tmp_path / "run"
    run.mkdir()
    (run / ".lock").symlink_to(victim)
    with pytest.raises(integrity.LinkRefused) as e:
        with integrity.stage_lock(run, "test"):
            pytest.fail("the lock was taken through a symlink")
    msg = str(e.value)
    assert "\n" not in msg and str(run / ".lock") in msg and "symbolic link" in msg and f"rm {run / '.lock'}" in msg
    _intact(victim)
    (run / ".lock").unlink()  # the advice, as printed
    with integrity.stage_lock(run, "test"):
        pass
    _intact(victim)


def test_a_hard_linked_lock_is_refused_and_its_target_kept(tmp_path, victim):
    run = tmp_path / "run"
    run.mkdir()
    os.link(victim, run / ".lock")
    with pytest.raises(integrity.LinkRefused, match="2 hard links"):
        with integrity.stage_lock(run, "test"):
            pass
    assert victim.read_text() == ORIGINAL


def test_a_fifo_at_the_lock_is_refused_without_blocking(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    os.mkfifo(run / ".lock")
    with pytest.raises(integrity.LinkRefused, match="not a regular file"):
        with integrity.stage_lock(run, "test"):
            pass


def test_a_stage_on_a_directory_with_a_symlinked_lock_exits_with_one_line(tmp_runs, victim):
    """The reported case through the command line: the stage refuses before training and the victim is whole."""
    from mrp_repro import stages
    from mrp_repro.config import load_profile

    out = stages.backbone_dir(load_profile("smoke"))
    out.mkdir(parents=True, exist_ok=True)
    (out / ".lock").symlink_to(victim)
    r = subprocess.run([sys.executable, "-m", "mrp_repro.stages", "backbone", "--profile", "smoke", "--no-progress"],
                       capture_output=True, text=True, cwd=repo_root(), timeout=300)  # fmt: skip
    assert r.returncode == 2, r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(out / ".lock") in lines[0], r.stderr
    assert not list(out.glob("ckpt-*")) and not (out / "done.json").exists()
    _intact(victim)


# ----------------------------------------------------------------------------- tables, figures, notebooks


def test_tables_and_the_glossary_replace_a_link_instead_of_writing_through_it(tmp_path, victim):
    from mrp_repro.report import tables

    d = tmp_path / "figures" / "smoke"
    d.mkdir(parents=True)
    for name in ("t.md", "t.tex", "t.csv", tables.GLOSSARY):
        (d / name).symlink_to(victim)
    df = pd.DataFrame({"benchmark": ["synth-math"], "accuracy": [50.0], "accuracy_lo": [40.0], "accuracy_hi": [60.0]})
    tables.save_table(df, d, "t")
    _intact(victim)
    for name in ("t.md", "t.tex", "t.csv", tables.GLOSSARY):
        assert not (d / name).is_symlink() and (d / name).stat().st_size > 0
    assert "accuracy" in (d / "t.csv").read_text() and "`accuracy`" in (d / tables.GLOSSARY).read_text()


def test_a_hard_link_in_figures_is_replaced_too(tmp_path, victim):
    from mrp_repro.report import tables

    d = tmp_path / "figures"
    d.mkdir()
    os.link(victim, d / "claims.md")
    tables.write_text(d / "claims.md", "new\n")
    assert (d / "claims.md").read_text() == "new\n" and victim.read_text() == ORIGINAL


def test_a_figure_replaces_a_link_instead_of_writing_through_it(tmp_path, victim):
    import matplotlib.pyplot as plt

    from mrp_repro.report.plots_base import save_figure

    d = tmp_path / "figures" / "smoke"
    d.mkdir(parents=True)
    (d / "fig.png").symlink_to(victim)
    (d / "fig.pdf").symlink_to(victim)
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    paths = save_figure(fig, d, "fig")
    plt.close(fig)
    _intact(victim)
    assert paths[0].read_bytes()[:4] == b"\x89PNG" and paths[1].read_bytes()[:4] == b"%PDF"


def test_a_notebook_copy_replaces_a_link_instead_of_writing_through_it(tmp_path, victim):
    import json

    from mrp_repro.reproduce import publish_notebook

    executed = tmp_path / "run.ipynb"
    executed.write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    dest = tmp_path / "figures" / "notebooks" / "00_x.ipynb"
    dest.parent.mkdir(parents=True)
    dest.symlink_to(victim)
    publish_notebook(executed, dest)
    _intact(victim)
    assert json.loads(dest.read_text())["nbformat"] == 4


# ----------------------------------------------------------------------------- shards, checkpoints, directories
# (renamed into place before this issue too: these hold the guarantee for the writers that were already safe)


def test_a_trajectory_shard_replaces_a_link(tmp_path, victim):
    from mrp_repro import trajectory_store

    path = tmp_path / "shard-00000.parquet"
    path.symlink_to(victim)
    row = {"example": 0, "block": 0, "step": 0, "context_ids": [1, 2], "block_start": 2, "ids": [3, 4],
           "answer_mask": [True, True], "reveal_step": [0], "reveal_pos": [0], "reveal_tok": [3], "next_pos": 1,
           "next_tok": 4, "hidden": [0.0, 1.0], "n_steps": 1, "t": 0.5}
    trajectory_store._write_shard([row], path)
    _intact(victim)
    assert not path.is_symlink() and path.read_bytes()[:4] == b"PAR1"


def test_a_checkpoint_file_and_directory_replace_links(tmp_path, victim, smoke_profile):
    from mrp_repro.checkpoint import save_backbone
    from mrp_repro.stages import random_backbone

    bb = random_backbone(smoke_profile, std=0.2, seed=0)
    out = tmp_path / "model"
    out.mkdir()
    (out / "model.safetensors").symlink_to(victim)
    (out / "config.json").symlink_to(victim)
    save_backbone(bb.model, out)
    _intact(victim)
    outside = tmp_path / "outside-dir"
    outside.mkdir()
    (outside / "keep").write_text("keep")
    link = tmp_path / "final"
    link.symlink_to(outside, target_is_directory=True)
    with integrity.atomic_dir(link) as tmp:
        (tmp / "new").write_text("new")
    assert not link.is_symlink() and (link / "new").read_text() == "new"
    assert [p.name for p in outside.iterdir()] == ["keep"]  # the directory the link pointed to: untouched


def test_claims_md_and_csv_replace_a_link_instead_of_writing_through_it(tmp_path, victim, monkeypatch):
    from mrp_repro.report import verdicts

    monkeypatch.setattr(verdicts, "report_markdown", lambda *a, **k: "# claims\n")  # the write is what is tested
    monkeypatch.setattr(verdicts, "with_across_seeds", lambda report, across: report)
    d = tmp_path / "figures" / "smoke"
    d.mkdir(parents=True)
    (d / "claims.md").symlink_to(victim)
    (d / "claims.csv").symlink_to(victim)
    verdicts.write_report(pd.DataFrame({"id": ["x"]}), d, "smoke", numeric=False)
    _intact(victim)
    assert (d / "claims.md").read_text().startswith("# claims\n") and (d / "claims.csv").read_text().startswith("id")


# ----------------------------------------------------------------------------- directories that are links
# figures/<profile>/ or a run directory that is itself a symbolic link had every file written there land in the
# directory it points to (before: followed; now: LinkRefused, one line naming the link and the fix)


@pytest.fixture
def elsewhere(tmp_path):
    """A directory outside the package's, holding one file: it must stay exactly as it is."""
    d = tmp_path / "elsewhere"
    d.mkdir()
    (d / "keep.txt").write_text(ORIGINAL)
    return d


def _untouched(elsewhere):
    assert sorted(p.name for p in elsewhere.iterdir()) == ["keep.txt"]
    assert (elsewhere / "keep.txt").read_text() == ORIGINAL


def _refusal(e, link):
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{link} is a symbolic link (to ") and f"rm {link}" in msg, msg
    return msg


@pytest.mark.parametrize("writer", ["atomic_file", "atomic_dir", "stage_lock", "make_dir"])
def test_a_directory_that_is_a_link_is_refused_not_written_into(tmp_path, elsewhere, writer):
    link = tmp_path / "figures" / "smoke"
    link.parent.mkdir()
    link.symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(integrity.LinkRefused) as e:
        if writer == "atomic_file":
            with integrity.atomic_file(link / "t.csv") as tmp:
                tmp.write_text("x")
        elif writer == "atomic_dir":
            with integrity.atomic_dir(link / "ckpt-10") as tmp:
                (tmp / "state.pt").write_text("x")
        elif writer == "stage_lock":
            with integrity.stage_lock(link, "test"):
                pass
        else:
            integrity.make_dir(link)
    _refusal(e, link)
    _untouched(elsewhere)


def test_a_dangling_linked_directory_is_refused_too(tmp_path):
    link = tmp_path / "run"
    link.symlink_to(tmp_path / "gone", target_is_directory=True)
    with pytest.raises(integrity.LinkRefused) as e:
        with integrity.atomic_file(link / "done.json") as tmp:
            tmp.write_text("{}")
    _refusal(e, link)
    assert not (tmp_path / "gone").exists()


def test_a_linked_root_above_the_written_directory_is_the_users_layout(tmp_path, elsewhere):
    """runs/ on another disk (a link at the root) stays allowed: only the directory written into is checked."""
    root = tmp_path / "runs"
    root.symlink_to(elsewhere, target_is_directory=True)
    with integrity.atomic_file(root / "smoke" / "t.csv") as tmp:
        tmp.write_text("x")
    assert (elsewhere / "smoke" / "t.csv").read_text() == "x"


def test_tables_refuse_a_linked_figures_profile_directory(tmp_path, elsewhere):
    from mrp_repro.report import tables

    d = tmp_path / "figures" / "smoke"
    d.parent.mkdir()
    d.symlink_to(elsewhere, target_is_directory=True)
    df = pd.DataFrame({"benchmark": ["synth-math"], "accuracy": [50.0], "accuracy_lo": [40.0], "accuracy_hi": [60.0]})
    with pytest.raises(integrity.LinkRefused) as e:
        tables.save_table(df, d, "t")
    _refusal(e, d)
    _untouched(elsewhere)


def test_a_stage_on_a_linked_run_directory_exits_with_one_line_and_writes_nothing_there(tmp_runs, elsewhere):
    """The command line: `stages backbone` whose run directory is a link to a directory elsewhere refuses before
    training (status 2, one `error:` line naming the link and the fix); following the fix, it trains."""
    from mrp_repro import stages
    from mrp_repro.config import load_profile

    out = stages.backbone_dir(load_profile("smoke"))
    out.rmdir()  # backbone_dir made it; the link takes its place
    out.symlink_to(elsewhere, target_is_directory=True)
    cmd = [sys.executable, "-m", "mrp_repro.stages", "backbone", "--profile", "smoke", "--no-progress"]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=repo_root(), timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {out} is a symbolic link (to {elsewhere})"), r.stderr
    assert f"rm {out}" in lines[0]
    _untouched(elsewhere)


def test_a_linked_profile_directory_under_the_runs_root_is_refused_before_anything_is_made_there(
        tmp_runs, elsewhere, smoke_profile):  # fmt: skip
    """runs/<profile>/ linked elsewhere: the run directory inside it is not created where the link points (it was,
    empty, before the refusal), and a dangling linked run directory gets the link's refusal, not 'File exists'."""
    from mrp_repro import runtime

    (tmp_runs / smoke_profile.name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_runs / smoke_profile.name).symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(integrity.LinkRefused) as e:
        runtime.figures_dir(smoke_profile)  # the figures root is not linked: allowed
        runtime.artifact_dir(smoke_profile, "backbone", "0" * 12)
    _refusal(e, tmp_runs / smoke_profile.name)
    _untouched(elsewhere)
    (tmp_runs / smoke_profile.name).unlink()
    run = tmp_runs / smoke_profile.name / ("backbone-" + "1" * 12)
    run.parent.mkdir()
    run.symlink_to(tmp_runs / "gone", target_is_directory=True)
    with pytest.raises(integrity.LinkRefused) as e:
        runtime.artifact_dir(smoke_profile, "backbone", "1" * 12)
    _refusal(e, run)
    with pytest.raises(integrity.LinkRefused):  # a JSON record written into a linked directory
        runtime.write_json_atomic(run / "done.json", {})
    assert not (tmp_runs / "gone").exists()
