"""report.speed's wall clock (issue 35): speedup_clock [lo, hi] holds the interleaved passes' spread beside the
batches', and every speed row marks its gate (clock_gate), as report.wallclock's tables do."""

import pytest
import torch

from mrp_repro.mrp import MRPHead
from mrp_repro.report.speed import speed_table

torch.set_num_threads(1)


def test_the_speed_tables_ci_holds_the_passes_and_every_speed_row_marks_its_gate(smoke_profile):
    """speedup_clock [lo, hi]: the batches resampled for the prompts and the passes for the clock; a noisier set of
    passes never narrows it nor passes the gate where a quieter one fails (tests/test_clock_gate.py's property)."""
    import numpy as np

    from mrp_repro.report.speed import clock_columns

    rng = np.random.default_rng(0)
    static = [list(0.10 * (1 + 0.01 * rng.random(8))) for _ in range(5)]  # 5 passes x 8 batches
    steady = [[t / 1.3 for t in p] for p in static]
    tok = [32] * 8
    q = clock_columns(static, steady, tok, tok)
    assert q["clock_gate"] == "passed" and q["speedup_clock"] == pytest.approx(1.3)
    assert q["speedup_clock_lo"] <= 1.3 <= q["speedup_clock_hi"]
    shaky = [[t / f for t in p] for p, f in zip(static, (0.9, 1.1, 1.3, 1.5, 2.0), strict=True)]
    n = clock_columns(static, shaky, tok, tok)
    assert n["clock_gate"] == "failed: repeatable" and n["speedup_clock_lo"] < 1 < n["speedup_clock_hi"]
    one = clock_columns(static[:1], steady[:1], tok, tok)
    assert one["clock_gate"].startswith("unchecked")


def test_speed_table_rows_carry_the_clock(smoke_profile):
    from mrp_repro.stages import random_backbone

    bb = random_backbone(smoke_profile, std=0.3)
    head = MRPHead(bb.model.config, 1).init_weights("normal", 0.3, torch.Generator().manual_seed(0)).eval()
    prompts = {"t": [[5, 6, 7], [5, 6]]}
    df = speed_table(bb, head, prompts, Ks=(3,), batches=(1,), repeats=2, max_new=8)
    assert set(df.loc[df["setting"] == "static(1)", "clock_gate"]) == {"reference"}
    spec = df[df["setting"] != "static(1)"]
    assert spec["clock_gate"].isin(["passed", "failed: repeatable"]).all()
    assert (spec["speedup_clock_lo"] <= spec["speedup"] + 1e-9).all()
    assert (spec["speedup"] <= spec["speedup_clock_hi"] + 1e-9).all()
    from mrp_repro.measure import schema

    assert not schema.undefined_columns(df.columns)
