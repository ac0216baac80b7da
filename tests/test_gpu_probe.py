"""scripts/gpu_probe.sh, the lent GPU's one script (issue 30), run on CPU with the device override: it writes only
under $OUT, at most 8 files (what a device run returns), gpu_check's sections inside.

    .venv/bin/python -m pytest -q tests/test_gpu_probe.py
"""

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pandas as pd

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_probe.sh"


def test_gpu_probe_runs_on_cpu_with_the_device_override(tmp_path):
    assert len(SCRIPT.read_text()) <= 2000
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "GPU_PROBE_DEVICE": "cpu", "GPU_PROBE_SMALL": "1",
           "GPU_PROBE_SECTIONS": "verify_bitwise,kernels", "OMP_NUM_THREADS": "1"}  # fmt: skip
    r = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    files = sorted(p.name for p in out.iterdir())
    assert files == ["env.txt", "gpu_check.csv", "gpu_check.log", "gpu_check.md", "sections.tar.gz"]
    assert "torch" in (out / "env.txt").read_text()
    with tarfile.open(out / "sections.tar.gz") as t:
        assert {"gc/verify_bitwise.csv", "gc/kernels.csv"} <= set(t.getnames())
    df = pd.read_csv(out / "gpu_check.csv")
    assert set(df["section"]) == {"verify_bitwise", "kernels"} and df["ok"].dropna().astype(bool).all()
    assert not (tmp_path / "figures").exists() and not (tmp_path / "runs").exists()
