"""gpu_check at tiny shapes on CPU (issue 30): every section writes its CSV as it finishes, the kernels are checked
against the reference (the Triton modules interpreted on CPU), --out is required and is the only output; without
CUDA the GPU run exits with one line.

    .venv/bin/python -m pytest -q tests/test_gpu_check.py
"""

import pandas as pd
import pytest
import torch

from mrp_repro import gpu_check

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check")
    seen = {}
    real = gpu_check._write

    def spy(o, device, section, rows, done):  # what is on disk when each section has just finished
        real(o, device, section, rows, done)
        seen[section] = sorted(p.name for p in o.iterdir())

    gpu_check._write = spy
    try:
        rc = gpu_check.main(["--out", str(out), "--device", "cpu", "--small"])  # on CPU: all but engine_compiled
    finally:
        gpu_check._write = real
    return out, rc, seen


def test_each_section_writes_its_csv_as_it_finishes(small_run):
    out, rc, seen = small_run
    order = [s for s in gpu_check.SECTIONS if s != "engine_compiled"]
    assert list(seen) == order
    for i, s in enumerate(order):  # after section i: its CSV and the earlier ones, not the later ones
        assert {f"{x}.csv" for x in order[: i + 1]} <= set(seen[s])
        assert not {f"{x}.csv" for x in order[i + 1 :]} & set(seen[s])
    df = pd.read_csv(out / "gpu_check.csv")
    assert set(df["section"]) == set(order)
    assert (out / "gpu_check.md").read_text().startswith("# gpu_check on cpu")
    assert sorted(p.name for p in out.iterdir()) == sorted([f"{s}.csv" for s in order] + ["gpu_check.csv",
                                                                                          "gpu_check.md"])


def test_kernels_are_checked_against_the_reference_in_both_dtypes(small_run):
    out, rc, _ = small_run
    kc = pd.read_csv(out / "kernel_check.csv")
    kc = kc[kc["item"] != "section time"]
    for dt in ("float32", "bfloat16"):
        for impl in ("triton", "dispatch"):
            rows = kc[kc["item"].str.startswith(impl) & kc["item"].str.contains(dt)]["item"]
            assert rows.str.contains("confidence argmax").any() and rows.str.contains("residual_kl grad").any()
    assert kc["ok"].astype(bool).all(), kc[~kc["ok"].astype(bool)].to_string()
    bi = pd.read_csv(out / "batch_invariance.csv")
    assert bi["item"].str.contains("triton confidence max_prob bfloat16 batch 16 vs 1").any()


def test_verify_paths_and_engine_rows(small_run):
    out, rc, _ = small_run
    vb = pd.read_csv(out / "verify_bitwise.csv").set_index("item")
    assert vb.loc["bfloat16 batch 4 K=3 verify=fold", "ok"] and vb.loc["float32 batch 4 K=3 verify=checked", "ok"]
    mm = pd.read_csv(out / "mismatch.csv").set_index("item")
    assert mm.loc["bf16 verify=fold", "value"] == 0 and mm.loc["bf16 verify=checked", "value"] == 0  # CPU: exact
    eng = pd.read_csv(out / "engine.csv").set_index("item")["value"]
    assert eng["block forward (batch 1)"] > 0 and eng["head step + lm_head"] > 0
    assert eng["speculative(3,mrp) eager"] > 0
    assert rc == 0  # no failed check on CPU


def test_a_failing_section_is_a_row_and_the_rest_still_run(tmp_path, monkeypatch):
    def boom(dev, small):
        raise RuntimeError("accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run")

    monkeypatch.setitem(gpu_check.SECTION_FNS, "kernel_check", boom)
    rc = gpu_check.main(["--out", str(tmp_path), "--device", "cpu", "--small", "--sections",
                         "kernel_check,verify_bitwise"])  # fmt: skip
    df = pd.read_csv(tmp_path / "gpu_check.csv")
    assert rc == 1 and "overwritten" in df[df["section"] == "kernel_check"]["note"].iloc[0]
    assert (tmp_path / "verify_bitwise.csv").exists()


def test_out_is_required(capsys):
    with pytest.raises(SystemExit):
        gpu_check.main(["--device", "cpu", "--small"])
    assert "--out" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA error")
def test_gpu_check_without_cuda_is_one_line(tmp_path):
    with pytest.raises(SystemExit) as e:
        gpu_check.main(["--out", str(tmp_path)])
    assert "no CUDA device" in str(e.value) and "\n" not in str(e.value)


def test_the_documented_quickcheck_command_runs_on_cpu(tmp_path):
    """docs/gpu.md §2's first command, as documented (issue 36: it stopped with a schema ValueError on the columns
    metric and ci_width): exit 0, both tables and a glossary with every column defined."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, MRP_REPRO_FIGURES=str(tmp_path / "figures"), PYTHONPATH=str(root))
    res = subprocess.run([sys.executable, "-m", "mrp_repro.report.quickcheck", "--profile", "sdar-4b-released-quick"],
                         cwd=root, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    assert "expected wall time:" in res.stdout
    out = tmp_path / "figures" / "sdar-4b-released-quick"
    for name in ("quickcheck_expected", "quickcheck_time"):
        assert (out / f"{name}.csv").exists() and (out / f"{name}.md").exists()
    assert "UNDEFINED" not in (out / "COLUMNS.md").read_text()
