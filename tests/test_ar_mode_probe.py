"""scripts/ar_mode_probe.py: static(1) at the profile's block size and at block size 1 (SDAR's AR mode), scored."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "ar_mode_probe.py"


def test_the_probe_decodes_both_block_sizes_and_scores_them(smoke_profile, monkeypatch, capsys):
    from mrp_repro import stages

    spec = importlib.util.spec_from_file_location("ar_mode_probe", SCRIPT)
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    bb = stages.random_backbone(smoke_profile, std=0.2, seed=0)
    monkeypatch.setattr(stages, "backbone", lambda profile, progress=True: bb)
    probe.main(["--profile", "smoke", "--n-prompts", "2"])
    out = capsys.readouterr().out
    lines = re.findall(r"^(\S+) block (\d+): accuracy ([\d.]+)% \((\d+)/2\)", out, re.M)
    blocks = {(b, int(k)) for b, k, _, _ in lines}
    assert blocks == {(b, k) for b in smoke_profile.evaluation.benchmarks for k in (smoke_profile.block_size, 1)}, out
    assert all(float(acc) == 100 * int(n) / 2 for _, _, acc, n in lines)
