"""The quick check's table columns are defined once, in measure.schema.TABLE_COLUMNS (issue 36), as every table's:
report.quickcheck defines none of its own and registers nothing on import; both of its tables hold only columns the
schema defines without it.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_quickcheck_columns.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = r"""
import json, sys
from mrp_repro.measure import schema
before = dict(schema.TABLE_COLUMNS)
from mrp_repro.config import load_profile
from mrp_repro.report import quickcheck
P = load_profile("sdar-4b-released-quick")
cols = list(quickcheck.expected(P).columns) + list(quickcheck.wall_time(P).columns)
own = [k for k, v in vars(quickcheck).items() if isinstance(v, dict) and "metric" in v]
print(json.dumps(dict(cols=cols, same=schema.TABLE_COLUMNS == before, own=own,
                      undefined=[c for c in cols if c not in before and schema.define(c) is None])))
"""


def _probe() -> dict:
    res = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_the_quick_check_columns_are_the_schema_s():
    out = _probe()
    assert {"metric", "ci_width", "grid", "prompts", "batches", "forwards_low", "minutes_high"} <= set(out["cols"])
    assert out["undefined"] == [], out["undefined"]  # defined before quickcheck was imported: by the schema alone
    assert out["same"], "importing report.quickcheck changed measure.schema.TABLE_COLUMNS"
    assert out["own"] == [], out["own"]  # no column dictionary of its own


def test_the_schema_names_the_quick_check_in_its_entries():
    from mrp_repro.measure import schema

    for c in ("metric", "ci_width", "prompts", "batches", "forwards_low", "forwards_high", "head_calls_low",
              "head_calls_high", "minutes_low", "minutes_high"):  # fmt: skip
        assert schema.TABLE_COLUMNS[c].startswith("quick check: "), c
    assert "total" in schema.TABLE_COLUMNS["grid"]
