"""One number per decode (issue 35): report.wallclock.record_table picks each decode's measurement of record, and
mark_clock gives every table that shows a wall-clock number its gate (`clock_gate`) and the grid the number is from
(`clock_record`), replacing a number another grid timed of record, so a decode timed by several grids shows one
speed everywhere; the columns are defined once in the glossary."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from runs_helpers import synthetic_runs

from mrp_repro.measure import schema
from mrp_repro.report import paper, tables, wallclock

N = 16


def _grids(backbone_wall: float = 1.0) -> dict:
    """modes_runs at batch 32; backbone_runs (its static and dynamic decodes, timed again: `backbone_wall` times
    slower); controls_runs (static again and one control of its own); speculative_runs at batch 1."""
    modes = synthetic_runs(n=N)
    bb = synthetic_runs(n=N, seed=1)
    bb = bb[bb["mode"].isin(["static", "dynamic"])].copy()
    bb.loc[bb["mode"] == "dynamic", "wall_s"] *= backbone_wall
    ctl = synthetic_runs(n=N, seed=2)
    ctl = ctl[(ctl["mode"] == "static") | (ctl["setting"] == "remask(0.5,tau)")].copy()
    ctl.loc[ctl["mode"] == "remask", ["setting", "rule"]] = ["random_veto(0.5)", "random"]
    one = synthetic_runs(n=N, batch_size=1, seed=3)
    one = one[one["mode"].isin(["static", "speculative"])].copy()
    return {"modes_runs": modes, "backbone_runs": bb, "controls_runs": ctl, "speculative_runs": one}


def _passes(grids: dict, spread: float = 0.02) -> pd.DataFrame:
    """Five passes of every modes and speculative setting at its grid's pooled speed, each pass a little off."""
    rows = []
    f = np.exp(spread * np.array([-2.0, -1.0, 0.0, 1.0, 2.0]))
    for name, bs in (("speculative_runs", 1), ("modes_runs", 32)):
        for (b, a, m, s), g in grids[name].groupby(["benchmark", "algorithm", "mode", "setting"]):
            for i, x in enumerate(f if m != "static" else np.ones(5)):
                rows.append(dict(benchmark=b, batch_size=bs, algorithm=a, mode=m, setting=s, repeat=i, slot=0,
                                 tokens=g["tokens"].sum(), wall_s=g["wall_s"].sum() / x))  # fmt: skip
    return pd.DataFrame(rows)


def _record(grids, passes=True, **kw):
    results = {**grids, **({"wallclock_passes": _passes(grids, **kw)} if passes else {})}
    checks = wallclock.checks_table(results, n_boot=100)
    return wallclock.record_table(results, checks, n_boot=100), checks


def test_one_measurement_of_record_per_decode_in_record_order():
    grids = _grids()
    rec, _ = _record(grids)
    key = ["benchmark", "algorithm", "setting", "batch_size"]
    assert not rec.duplicated(key).any() and list(rec.columns) == wallclock.RECORD_COLUMNS
    r = rec.set_index(key)
    st = r.loc[("synth-math", "ours", "static(1)", 32)]
    assert st["clock_record"] == "modes_runs" and st["clock_gate"] == "reference"
    assert st["clock_grids"] == "modes_runs, controls_runs, backbone_runs"  # timed three times, recorded once
    modes = grids["modes_runs"]
    g = modes[(modes["benchmark"] == "synth-math") & (modes["setting"] == "static(1)")]
    assert st["tokens_per_s"] == pytest.approx(g["tokens"].sum() / g["wall_s"].sum())
    assert r.loc[("synth-math", "ours", "dynamic(0.7)", 32), "clock_grids"] == "modes_runs, backbone_runs"
    assert r.loc[("synth-math", "ours", "random_veto(0.5)", 32), "clock_record"] == "controls_runs"
    assert r.loc[("synth-code", "ours", "speculative(3,mrp)", 1), "clock_record"] == "speculative_runs"
    assert not rec["setting"].str.contains("oracle").any()  # its picks are not timed: no wall-clock number


def test_the_gate_of_record_passed_failed_or_unchecked():
    grids = _grids()
    rec, checks = _record(grids)
    r = rec.set_index(["benchmark", "setting", "batch_size"])
    d7 = r.loc[("synth-math", "dynamic(0.7)", 32)]
    assert d7["clock_gate"] == "passed" and d7["passes"] == 5
    assert d7["speedup_clock_lo"] < d7["speedup_lo"] and d7["speedup_clock_hi"] > d7["speedup_hi"]
    # re-timed by no pass (remasking below the speed verdicts' range; controls): no gate, said so
    assert r.loc[("synth-math", "random_veto(0.5)", 32), "clock_gate"].startswith("unchecked")
    assert r.loc[("synth-math", "remask(0.3,tau)", 32), "clock_gate"].startswith("unchecked")
    # no passes at all: no decode passes (a failed ceiling or agreement still fails it), the clock CI the prompt CI
    bare, _ = _record(grids, passes=False)
    nonstatic = bare[~bare["setting"].str.startswith("static")]
    assert nonstatic["clock_gate"].str.startswith(("unchecked", "failed")).all()
    assert nonstatic["clock_gate"].str.startswith("unchecked").any()
    assert (bare["speedup_clock_lo"] == bare["speedup_lo"]).all()
    # the backbone grid 40% slower on its dynamic decodes: the two grids disagree, the decode's gate fails
    slow, _ = _record(_grids(backbone_wall=1.4))
    s = slow.set_index(["benchmark", "setting", "batch_size"]).loc[("synth-math", "dynamic(0.7)", 32)]
    assert s["clock_gate"].startswith("failed") and "agreement" in s["clock_gate"]


def test_a_decode_timed_in_several_tables_shows_the_record_everywhere():
    grids = _grids()
    rec, _ = _record(grids)
    bb_t = wallclock.mark_clock(paper.backbone_table(grids["backbone_runs"], n_boot=0), "backbone_runs", rec,
                                grids["backbone_runs"])  # fmt: skip
    modes_t = wallclock.mark_clock(paper.modes_table(grids["modes_runs"], n_boot=0), "modes_runs", rec,
                                   grids["modes_runs"])  # fmt: skip
    ctl_t = wallclock.mark_clock(paper.modes_table(grids["controls_runs"], n_boot=0), "controls_runs", rec,
                                 grids["controls_runs"])  # fmt: skip
    tps = {}
    for _name, t in (("backbone", bb_t), ("modes", modes_t), ("controls", ctl_t)):
        for r in t.itertuples():
            tps.setdefault((r.benchmark, r.setting), set()).add(round(float(r.tokens_per_s), 9))
    shared = {k: v for k, v in tps.items() if k[1] in ("static(1)", "dynamic(0.7)")}
    assert shared and all(len(v) == 1 for v in shared.values()), shared  # one number per decode
    b = bb_t.set_index(["benchmark", "setting"])
    assert (b["clock_record"] == "modes_runs").all()  # every backbone decode is modes_runs' of record
    assert b.loc[("synth-math", "static(1)"), "clock_gate"] == "reference"
    assert b.loc[("synth-math", "dynamic(0.7)"), "clock_gate"] == "passed"
    c = ctl_t.set_index(["benchmark", "setting"])
    assert c.loc[("synth-math", "random_veto(0.5)"), "clock_record"] == "controls_runs"
    # the raw backbone table had its own (other) numbers
    raw = paper.backbone_table(grids["backbone_runs"], n_boot=0).set_index(["benchmark", "setting"])
    assert raw.loc[("synth-math", "static(1)"), "tokens_per_s"] != b.loc[("synth-math", "static(1)"), "tokens_per_s"]


def test_speculative_and_direct_tables_get_the_clock_inclusive_ci():
    grids = _grids()
    rec, _ = _record(grids, spread=0.1)
    one = grids["speculative_runs"]
    spec = paper.speculative_table(one, n_boot=100)
    marked = wallclock.mark_clock(spec, "speculative_runs", rec, one)
    r = rec.set_index(["benchmark", "setting", "batch_size"]).loc[("synth-math", "speculative(3,mrp)", 1)]
    m = marked[(marked["benchmark"] == "synth-math") & (marked["K"] == 3)].iloc[0]
    assert m["throughput_speedup_lo"] == pytest.approx(r["speedup_clock_lo"])
    assert m["throughput_speedup_hi"] == pytest.approx(r["speedup_clock_hi"])
    assert m["throughput_speedup_hi"] - m["throughput_speedup_lo"] > (
        spec.loc[m.name, "throughput_speedup_hi"] - spec.loc[m.name, "throughput_speedup_lo"])  # wider: the clock
    assert m["clock_record"] == "speculative_runs" and m["clock_gate"] in ("passed", "failed: repeatable")
    modes = grids["modes_runs"]
    direct = wallclock.mark_clock(paper.direct_table(modes, n_boot=100), "modes_runs", rec, modes)
    d = direct.set_index(["benchmark", "setting"])
    assert d.loc[("synth-math", "baseline"), "clock_gate"] == "reference"
    assert d.loc[("synth-math", "mrp_step2"), "clock_record"] == "modes_runs"
    assert d.loc[("synth-math", "mrp_step2"), "clock_gate"] != ""


def test_without_a_record_the_table_says_so_or_refers_to_the_grid_of_record():
    grids = _grids()
    bb = paper.backbone_table(grids["backbone_runs"], n_boot=0)
    ref = wallclock.mark_clock(bb, "backbone_runs", refer_to="modes_runs")
    assert ref["tokens_per_s"].isna().all() and ref["speedup"].isna().all()
    assert (ref["clock_record"] == "modes_runs").all() and ref["clock_gate"].str.startswith("of record in").all()
    none = wallclock.mark_clock(bb, "backbone_runs")
    assert none["clock_gate"].str.startswith("unchecked").all() and (none["tokens_per_s"] == bb["tokens_per_s"]).all()
    # the oracle drafter shows no wall clock: no mark
    modes = paper.modes_table(grids["modes_runs"], n_boot=0)
    m = wallclock.mark_clock(modes, "modes_runs")
    oracle = m[m["setting"].str.contains("oracle")]
    assert len(oracle) and (oracle["clock_gate"] == "").all()


def test_every_clock_column_is_defined_once_in_the_glossary(tmp_path):
    grids = _grids()
    rec, checks = _record(grids)
    marked = wallclock.mark_clock(paper.modes_table(grids["modes_runs"], n_boot=0), "modes_runs", rec,
                                  grids["modes_runs"])  # fmt: skip
    for name, t in (("clock_record", rec), ("wallclock_checks", checks), ("modes", marked)):
        assert not schema.undefined_columns(t.columns), (name, schema.undefined_columns(t.columns))
        tables.save_table(t, tmp_path, name, digits=2)
    text, undefined = tables.glossary_markdown(tmp_path)
    assert not undefined and "`clock_gate`" in text and "`clock_record`" in text and "`speedup_clock`" in text
    md = (tmp_path / "clock_record.md").read_text()
    assert "speedup_clock" in md and "reference" in md and not math.isnan(rec["tokens_per_s"].iloc[0])
