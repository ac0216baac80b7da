"""The tables' glossary (measure/schema.py): every column of every written table is defined once, save_table refuses
an undefined one, COLUMNS.md lists them; one name per setting; `lossless` only where the mode claims it."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from runs_helpers import LOOKAHEAD_K, synthetic_runs

from mrp_repro.measure import schema, stats
from mrp_repro.measure.adjacent import ADJACENT_COLUMNS
from mrp_repro.report import drafters, paper, shapes, tables

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = sorted(d for d in (ROOT / "figures").iterdir() if d.is_dir() and any(d.glob("*.csv")))


@pytest.fixture(scope="module")
def runs():
    return synthetic_runs(n=8)


def test_definitions_are_one_per_name():
    assert not set(schema.TABLE_COLUMNS) & set(schema.RUN_COLUMNS)  # a runs column is defined in RUN_COLUMNS only
    assert set(schema.TABLE_AGGREGATES) <= set(schema.RUN_COLUMNS)
    for name, text in {**schema.TABLE_COLUMNS, **schema.TABLE_AGGREGATES}.items():
        assert text.strip() and name not in ("", "nan"), name


def test_define_resolves_cis_and_paper_columns_of_defined_metrics_only():
    assert "confidence interval" in schema.define("nfe_speedup_lo") and "upper" in schema.define("gain_hi")
    assert "paper's throughput_speedup" in schema.define("paper_throughput_speedup")
    assert "runs column" in schema.define("mrp_forwards") and "per prompt mean" in schema.define("mrp_forwards")
    for bad in ("tpf_vs_oracle", "foo_lo", "paper_foo", "naive_lookahead", "s_total"):
        assert schema.define(bad) is None, bad
    assert schema.undefined_columns(["tpf", "foo", "accuracy_lo", "bar_hi"]) == ["foo", "bar_hi"]


@pytest.mark.parametrize("figures", COMMITTED, ids=[d.name for d in COMMITTED])
def test_every_committed_table_column_is_defined_and_listed(figures):
    """Every CSV header and Markdown table header under figures/<profile>/ (save_table's tables and the others:
    speed, kernels, claims), and the committed COLUMNS.md is the one write_glossary writes from them."""
    cols = tables.table_columns(figures)
    assert cols
    missing = {t: schema.undefined_columns(c) for t, c in cols.items() if schema.undefined_columns(c)}
    assert not missing, missing
    text, undefined = tables.glossary_markdown(figures)
    assert not undefined and (figures / tables.GLOSSARY).read_text() == text


def test_save_table_refuses_an_undefined_column_and_writes_the_glossary(tmp_path):
    ok = pd.DataFrame({"benchmark": ["synth-math"], "tpf": [1.5], "nfe_speedup": [1.2], "nfe_speedup_lo": [1.1],
                       "nfe_speedup_hi": [1.3]})  # fmt: skip
    tables.save_table(ok, tmp_path, "good")
    with pytest.raises(ValueError, match="tpf_vs_oracle.*TABLE_COLUMNS"):
        tables.save_table(ok.assign(tpf_vs_oracle=0.9), tmp_path, "bad")
    assert not list(tmp_path.glob("bad.*"))  # nothing written
    md = (tmp_path / tables.GLOSSARY).read_text()
    rows = [ln for ln in md.splitlines() if ln.startswith("| `")]
    assert [r.split("`")[1] for r in rows] == sorted(ok.columns, key=str.lower)
    assert schema.TABLE_COLUMNS["nfe_speedup"].split(":")[0] in md and "| good |" in md
    (tmp_path / "other.csv").write_text("benchmark,mystery\nx,1\n")  # a table written around save_table
    (tmp_path / "report.md").write_text("# r\n\n| claim | paper (SDAR-8B) | why |\n|---|---|---|\n| a | b | c |\n")
    _, undefined = tables.write_glossary(tmp_path)
    assert undefined == ["mystery", "why"] and "**UNDEFINED**" in (tmp_path / tables.GLOSSARY).read_text()
    assert tables.table_columns(tmp_path)["report"] == ["claim", "paper", "why"]  # `paper (detail)` is `paper`


def test_every_table_the_code_builds_is_defined(runs):
    boot = dict(n_boot=5)
    built = {
        "backbone": paper.backbone_table(runs, **boot),
        "modes": paper.modes_table(runs, {"t_forward_s": 0.01, "verify_cost": {3: 1.3, 5: 1.5}, "head_cost": 0.2},
                                   **boot),  # fmt: skip
        "remasking_by_rule": paper.remasking_table(runs, rule=None, **boot),
        "speculative": paper.speculative_table(runs, **boot),
        "direct": paper.direct_table(runs, **boot),
        "lookahead": paper.lookahead_table(runs, **boot),
        "mrp_curve": paper.mrp_curve_frame(pd.DataFrame({"step": [1, 1], "split": ["train", "heldout"],
                                                         "loss": [1.0, 0.9], "heldout_kl": [None, 0.5],
                                                         "heldout_baseline_kl": [None, 0.7]})),  # fmt: skip
    }
    for name, t in built.items():
        assert not schema.undefined_columns(t.columns), (name, schema.undefined_columns(t.columns))
    gpu_check = ["section", "item", "value", "unit", "note"]  # mrp_repro.gpu_check's rows
    for name, cols in (("drafters", drafters.COLUMNS), ("shapes", shapes.COLUMNS), ("adjacent", ADJACENT_COLUMNS),
                       ("gpu_check", gpu_check)):  # fmt: skip
        assert not schema.undefined_columns(cols), (name, schema.undefined_columns(cols))


def test_lossless_only_for_the_modes_that_claim_it(runs):
    """A dynamic row whose outputs all happen to equal static's is not `lossless`: blank, not True."""
    r = runs.copy()
    r.loc[r["mode"] == "dynamic", "identical_to_static"] = True
    s = stats.summarize(r, n_boot=0)
    lossy = s[~s["mode"].isin(stats.LOSSLESS_MODES)]
    assert set(lossy["mode"]) == {"dynamic", "direct", "naive", "remask"}
    assert lossy["lossless"].map(lambda v: v is None or (isinstance(v, float) and math.isnan(v))).all()
    assert s.loc[s["mode"] == "static", "lossless"].eq(True).all()
    spec = s[s["mode"] == "speculative"]
    assert spec["lossless"].eq(True).all()
    r.loc[r.index[(r["mode"] == "speculative")][0], "identical_to_static"] = False  # one differing output
    assert not stats.summarize(r, n_boot=0).query("mode == 'speculative'")["lossless"].all()


def test_one_name_and_k_per_naive_setting(runs):
    """modes.md's naive setting names and lookahead.md's naive_mtp K are one convention: naive_mtp(K), K the
    lookahead K (the runs column K)."""
    naive = runs[runs["mode"] == "naive"]
    assert sorted(set(naive["setting"])) == [f"naive_mtp({k})" for k in LOOKAHEAD_K]
    assert (naive["setting"] == [f"naive_mtp({int(k)})" for k in naive["K"]]).all()
    la = paper.lookahead_table(runs, n_boot=0)
    assert sorted(la.loc[la["method"] == "naive_mtp", "lookahead_k"].unique()) == list(LOOKAHEAD_K)
    from mrp_repro.decoding.mrp_modes import NaiveLookahead

    assert NaiveLookahead(2).name == "naive_mtp(1)"  # 2 tokens per forward: lookahead K = 1, as direct(1)
