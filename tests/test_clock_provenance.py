"""Provenance of reuse (issue 35): a result file records the commit that computed it; every table records what it
read, computed at which commit (this run, cached by an earlier run, or no record), and the commit that rendered it;
environment.md lists the cached results a run starts with; every published notebook copy, notebook 10's too,
carries the commit (and profile) it ran at."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from mrp_repro import runtime
from mrp_repro.report import paper, tables

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def fresh_reads():
    runtime.reset_reads()
    yield
    runtime.reset_reads()


def _df():
    return pd.DataFrame({"benchmark": ["synth-math"], "tpf": [1.5]})


def test_a_result_records_the_commit_that_computed_it(smoke_profile, tmp_runs, fresh_reads):
    path = paper.save_result(smoke_profile, "backbone", _df())
    rec = runtime.computed_stamp(path)
    v = runtime.code_version()
    assert rec["git_commit"] == v["git_commit"] and rec["git_dirty"] == v["git_dirty"] and rec["computed"]
    assert path.with_name(path.name + runtime.COMPUTED_SUFFIX).exists()
    assert paper.load_result(smoke_profile, "backbone") is not None  # the stamp is no part of the sha256 record
    assert runtime.cached_results(smoke_profile).startswith(f"backbone@{v['git_commit'][:12]} (")
    assert runtime.provenance(smoke_profile, "cpu")["cached_results"] == runtime.cached_results(smoke_profile)


def test_a_table_says_it_reused_a_cached_result_and_which_commit_computed_it(smoke_profile, tmp_runs, tmp_path,
                                                                              monkeypatch, fresh_reads):  # fmt: skip
    path = paper.save_result(smoke_profile, "backbone", _df())
    # an earlier run computed it at another commit
    rec = {**runtime.computed_stamp(path), "git_commit": "90a71a6" + "0" * 33, "computed": "2026-12-02T17:20:00+00:00"}
    runtime.write_json_atomic(path.with_name(path.name + runtime.COMPUTED_SUFFIX), rec)
    monkeypatch.setenv(runtime.RUN_STARTED_ENV, "2026-12-03T00:00:00+00:00")  # this run started later
    paper.load_result(smoke_profile, "backbone")
    figs = tmp_path / "figs"
    tables.save_table(_df(), figs, "backbone")
    md, tex = (figs / "backbone.md").read_text(), (figs / "backbone.tex").read_text()
    line = md.strip().splitlines()[-1]
    rendered = runtime.code_version()["git_commit"][:7]
    assert line.startswith("Provenance: computed from backbone at 90a71a6 (cached by an earlier run, computed "
                           "2026-12-02)") and f"rendered at {rendered}" in line  # fmt: skip
    assert tex.startswith(f"% {line}\n")
    stamp = tables.read_provenance(figs)["backbone"]
    assert stamp["reused"] and stamp["computed_at"] == [rec["git_commit"]] and stamp["rendered_at"].startswith(rendered)
    summary = tables.provenance_summary(figs)
    assert "Reused from an earlier run, not recomputed: backbone (computed at 90a71a6, 2026-12-02" in summary
    # the glossary reads no provenance: the record is JSON, the line is under the table
    assert tables.table_columns(figs) == {"backbone": ["benchmark", "tpf"]}
    # claims.md says the same under its title, before any verdict
    from mrp_repro.report import claims

    claims_md = claims.write_report(claims.check_claims({}), figs, "smoke", numeric=False).read_text()
    head = claims_md.split("\n\n")
    assert head[0].startswith("# Claims") and head[1] == summary


def test_claims_md_names_the_renders_of_the_end_of_the_run(smoke_profile, tmp_runs, tmp_path, monkeypatch,
                                                           fresh_reads):  # fmt: skip
    """claims.md (notebook 09) is written before notebook 11 re-renders the peers tables: reproduce.main refreshes
    its provenance paragraph after the last notebook, so it names this run's render, not the earlier run's."""
    from mrp_repro.report import claims, verdicts

    figs = tmp_path / "figs"
    tables.save_table(_df(), figs, "peers")
    stale = {**tables.read_provenance(figs)["peers"], "rendered_at": "1799e55" + "0" * 33}  # an earlier run's render
    tables.record_provenance(figs, "peers", stale)
    claims.write_report(claims.check_claims({}), figs, "smoke", numeric=False)
    assert "1799e55" in (figs / "claims.md").read_text()
    tables.save_table(_df(), figs, "peers")  # notebook 11, after 09
    assert verdicts.refresh_provenance(figs)
    text = (figs / "claims.md").read_text()
    assert "1799e55" not in text and text.split("\n\n")[1] == tables.provenance_summary(figs)
    assert text.startswith("# Claims") and not verdicts.refresh_provenance(figs)  # nothing left to rewrite
    assert not verdicts.refresh_provenance(tmp_path / "none")  # no claims.md: nothing written


def test_a_result_computed_this_run_and_one_with_no_record(smoke_profile, tmp_runs, tmp_path, monkeypatch,
                                                           fresh_reads):  # fmt: skip
    monkeypatch.setenv(runtime.RUN_STARTED_ENV, "2000-01-01T00:00:00+00:00")
    path = paper.save_result(smoke_profile, "backbone", _df())
    paper.load_result(smoke_profile, "backbone")
    old = paper.save_result(smoke_profile, "trajectories", _df())
    old.with_name(old.name + runtime.COMPUTED_SUFFIX).unlink()  # a result of a package without the record
    paper.load_result(smoke_profile, "trajectories")
    figs = tmp_path / "figs"
    tables.save_table(_df(), figs, "t")
    line = (figs / "t.md").read_text().strip().splitlines()[-1]
    assert "backbone at" in line and "(this run)" in line
    assert "trajectories (no record of the commit that computed it)" in line
    assert runtime.computed_stamp(path) and runtime.computed_stamp(old) is None
    assert "trajectories@unrecorded" in runtime.cached_results(smoke_profile)
    assert "Computed this run: backbone" in tables.provenance_summary(figs)
    runtime.reset_reads()
    tables.save_table(_df(), figs, "u")
    assert (figs / "u.md").read_text().strip().endswith("(no cached result read).")
    # a later run renders its tables beside t, which it has not rendered yet: t's "this run" was the earlier run's,
    # so its backbone is reused, never "computed this run" (claims.md, written before a later notebook re-renders)
    monkeypatch.setenv(runtime.RUN_STARTED_ENV, "2999-01-01T00:00:00+00:00")
    summary = tables.provenance_summary(figs)
    assert "Computed this run" not in summary and "Reused from an earlier run, not recomputed: backbone" in summary


def test_a_reproduce_run_marks_its_start_for_its_notebooks(monkeypatch):
    monkeypatch.delenv(runtime.RUN_STARTED_ENV, raising=False)
    t = runtime.mark_run_start()
    assert runtime.run_started() == t and runtime.mark_run_start() == t  # set once


def test_a_published_notebook_copy_is_stamped_with_its_commit_and_profile(smoke_profile, tmp_path):
    from mrp_repro.reproduce import _stamp_commit

    nb = tmp_path / "n.ipynb"
    nb.write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    _stamp_commit(nb, smoke_profile)
    stamp = json.loads(nb.read_text())["metadata"]["mrp_repro"]
    assert stamp["git_commit"] == runtime.provenance(smoke_profile, "cpu")["git_commit"]
    assert stamp["profile_hash"] == smoke_profile.hash and "git_dirty" in stamp


@pytest.mark.parametrize("profile", ["tiny"])
def test_every_committed_notebook_copy_carries_a_stamp_notebook_10_too(profile):
    """The opt-in notebook 10 is its own run (make ablations): its stamp names the commit and the profile hash it ran
    at, which differ from environment.md's; the others carry environment.md's (tests/test_notebooks.py)."""
    figs = ROOT / "figures" / profile
    env = {r["key"]: r["value"] for r in pd.read_csv(figs / "environment.csv").to_dict("records")}
    for nb in sorted((figs / "notebooks").glob("*.ipynb")):
        stamp = json.loads(nb.read_text())["metadata"].get("mrp_repro", {})
        assert len(stamp.get("git_commit", "")) == 40 and isinstance(stamp.get("git_dirty"), bool), nb.name
    ten = json.loads((figs / "notebooks" / "10_ablations.ipynb").read_text())["metadata"]["mrp_repro"]
    assert ten["profile_hash"] != env["profile_hash"] and ten["git_commit"] != env["git_commit"]
    assert "after the run" in ten["stamped"]  # a stamp added later says so


def test_a_table_charged_at_the_cost_model_names_the_run_that_measured_it(smoke_profile, tmp_runs, tmp_path,
                                                                           monkeypatch, fresh_reads):  # fmt: skip
    """run_cost_model's stored measurement carries the commit that measured it, and every call notes it as read: a
    table written after it names it (this run), and a later run that reuses it says it was cached, not measured again
    (before, notebook 07 re-saved the cost_model table every run, stamped as computed by that run)."""
    import torch

    from mrp_repro.measure.cost import run_cost_model
    from mrp_repro.mrp import MRPHead
    from mrp_repro.stages import random_backbone

    bb = random_backbone(smoke_profile)
    head = MRPHead(bb.model.config, num_layers=1).init_weights("normal", 0.02,
                                                               generator=torch.Generator().manual_seed(0))  # fmt: skip
    monkeypatch.setenv(runtime.RUN_STARTED_ENV, "2000-01-01T00:00:00+00:00")
    path = Path(run_cost_model(smoke_profile, bb, head, batch=1, Ks=(2,))["source"])
    assert runtime.computed_stamp(path)["git_commit"] == runtime.code_version()["git_commit"]
    figs = tmp_path / "figs"
    tables.save_table(_df(), figs, "t")
    line = (figs / "t.md").read_text().strip().splitlines()[-1]
    assert f"{path.stem} at" in line and "(this run)" in line, line
    measured = path.read_bytes()
    runtime.reset_reads()
    monkeypatch.setenv(runtime.RUN_STARTED_ENV, "2999-01-01T00:00:00+00:00")  # a later run reads it
    assert run_cost_model(smoke_profile, bb, head, batch=1, Ks=(2,))["source"] == str(path)
    assert path.read_bytes() == measured  # read, not measured again
    tables.save_table(_df(), figs, "u")
    line = (figs / "u.md").read_text().strip().splitlines()[-1]
    assert f"{path.stem} at" in line and "cached by an earlier run" in line and "this run" not in line, line
