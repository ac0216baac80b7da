"""No doc quotes a number no committed table holds (issue 35): README.md and docs/*.md quote current numbers in
generated excerpts that equal their figures/<profile>/ table, numbers of earlier runs in historical passages that
name the run, estimates as such; any other decimal in prose must be one a committed table holds
(mrp_repro.report.docnumbers)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from mrp_repro.report import docnumbers, tables

ROOT = Path(__file__).resolve().parents[1]


def test_readme_and_docs_quote_only_numbers_the_committed_tables_hold():
    """The repository's own docs. A failure names the doc, the line and the number: quote it from its table
    (`<!-- from figures/<profile>/<table>.md: <column> where <k>=<v> -->`, then `python -m mrp_repro.report.docnumbers
    --write`) or mark the passage `<!-- historical: <fingerprint or commit> -->` and say which run it is."""
    problems = docnumbers.check(ROOT)
    assert not problems, "\n".join(problems)


def test_the_repositorys_docs_use_excerpts_and_label_earlier_backbones():
    ab, rs = (ROOT / "docs" / n for n in ("ablations.md", "run-stability.md"))
    for doc in (ab, rs):
        text = doc.read_text()
        assert docnumbers.excerpts(text, doc), doc  # the current backbone's seed spread, from variance.md
        assert "<!-- historical: 88f6f882ade516ad" in text  # the earlier backbone's numbers, labelled
    # the earlier backbone's static accuracy (97.0 on synth-code) stays only inside a historical passage
    for doc in (ab, rs):
        prose = docnumbers._prose(doc.read_text())
        assert "97.0 [94.5, 99.0]" not in prose and "0.110 [0.076, 0.165]" not in prose, doc


@pytest.fixture()
def repo(tmp_path):
    """A repository root with one committed table and a doc."""
    figs = tmp_path / "figures" / "toy"
    df = pd.DataFrame({"benchmark": ["synth-math", "synth-code"], "setting": ["static(1)", "static(1)"],
                       "accuracy": [100.0, 88.5], "accuracy_lo": [100.0, 84.0], "accuracy_hi": [100.0, 93.0],
                       "tpf": [1.0, 1.0]})  # fmt: skip
    tables.save_table(df, figs, "backbone")
    (tmp_path / "docs").mkdir()
    return tmp_path


def _doc(root: Path, text: str) -> Path:
    p = root / "docs" / "x.md"
    p.write_text(text)
    return p


def test_an_excerpt_equals_its_table_and_write_brings_it_back(repo):
    spec = "figures/toy/backbone.md: accuracy where benchmark=synth-code; setting=static(1)"
    doc = _doc(repo, f"Static reaches <!-- from {spec} -->88.5 [84.0, 93.0]<!-- /from --> on code.\n")
    assert docnumbers.check(repo, [doc]) == []
    doc.write_text(doc.read_text().replace("88.5 [84.0, 93.0]", "97.0 [94.5, 99.0]"))  # an earlier backbone's
    (problem,) = docnumbers.check(repo, [doc])
    assert "97.0 [94.5, 99.0]" in problem and "88.5 [84.0, 93.0]" in problem and "--write" in problem
    assert docnumbers.write(repo, [doc]) == [doc] and docnumbers.check(repo, [doc]) == []
    assert "88.5 [84.0, 93.0]" in doc.read_text()
    # a table regenerated with other numbers: the excerpt is stale until rewritten
    md = repo / "figures" / "toy" / "backbone.md"
    md.write_text(md.read_text().replace("88.5 [84.0, 93.0]", "90.0 [86.0, 94.0]"))
    assert len(docnumbers.check(repo, [doc])) == 1
    docnumbers.write(repo, [doc])
    assert "90.0 [86.0, 94.0]" in doc.read_text() and docnumbers.check(repo, [doc]) == []


def test_a_block_excerpt_is_a_table_of_the_rows_and_columns_asked_for(repo):
    spec = "figures/toy/backbone.md: columns benchmark, accuracy where benchmark=synth-math|synth-code"
    doc = _doc(repo, f"Both:\n\n<!-- from {spec} -->\n<!-- /from -->\n")
    docnumbers.write(repo, [doc])
    text = doc.read_text()
    assert "| benchmark | accuracy |\n|---|---|\n| synth-math | 100.0 [100.0, 100.0] |\n" in text
    assert docnumbers.check(repo, [doc]) == []
    bad = _doc(repo, "<!-- from figures/toy/backbone.md: columns benchmark, nope -->\n<!-- /from -->\n")
    (problem,) = docnumbers.check(repo, [bad])
    assert "no column nope" in problem
    none = _doc(repo, "<!-- from figures/toy/backbone.md: accuracy where benchmark=other -->x<!-- /from -->\n")
    assert "0 rows" in docnumbers.check(repo, [none])[0]


def test_a_number_no_table_holds_fails_unless_labelled_historical_or_estimate(repo):
    doc = _doc(repo, "Static accuracy was 97.0 on code, and TPF 1.00.\n")
    (problem,) = docnumbers.check(repo, [doc])
    assert "x.md:1: 97.0 is in no committed table" in problem  # 1.00 is held (the CSV at two decimals)
    doc.write_text("<!-- historical: 88f6f882ade516ad -->On backbone 88f6f882ade516ad static accuracy was 97.0"
                   "<!-- /historical -->.\n")
    assert docnumbers.check(repo, [doc]) == []
    doc.write_text("<!-- historical: 88f6f882ade516ad -->Static accuracy was 97.0.<!-- /historical -->\n")
    assert "does not show its label" in docnumbers.check(repo, [doc])[0]  # the reader must see which run
    doc.write_text("<!-- historical: an earlier run -->97.0<!-- /historical -->\n")
    assert "names no fingerprint or commit" in docnumbers.check(repo, [doc])[0]
    doc.write_text("A weight read of <!-- estimate: a hardware spec -->3.35 TB/s<!-- /estimate -->.\n")
    assert docnumbers.check(repo, [doc]) == []


def test_code_versions_links_and_integers_are_not_results(repo):
    doc = _doc(repo, "torch 2.13.0, arXiv 2605.18817, `python -m x --tau 0.37`, [a](docs/v1.5.md), 5 passes,\n"
                     "```\nspeedup 9.99\n```\nissue 35.\n")  # fmt: skip
    assert docnumbers.check(repo, [doc]) == []


def test_the_command_exits_1_naming_the_problem(repo, monkeypatch, capsys):
    monkeypatch.setattr(docnumbers, "_root", lambda: repo)
    (repo / "README.md").write_text("Speedup 1.88x.\n")
    assert docnumbers.main([]) == 1 and "README.md:1: 1.88" in capsys.readouterr().err
    (repo / "README.md").write_text("Speedup <!-- from figures/toy/backbone.md: tpf where benchmark=synth-math -->"
                                    "<!-- /from -->.\n")  # fmt: skip
    assert docnumbers.main(["--write"]) == 0 and "1.00" in (repo / "README.md").read_text()
