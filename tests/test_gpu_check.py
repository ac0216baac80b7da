"""gpu_check at tiny shapes on CPU (issues 30, 36): every section writes its rows as they come and its CSV, the kernels
are checked against the reference (the Triton modules interpreted on CPU), --out is required and is the only output;
without CUDA the GPU run exits with one line. Only real failures fail: fold's bits and compiled-vs-eager agreement
are measurements; exact, checked and the batch-invariant mode are checks. engine_compiled (an inductor compile,
minutes on CPU) runs alone in a slow test.

    .venv/bin/python -m pytest -q tests/test_gpu_check.py
"""

import pandas as pd
import pytest
import torch

from mrp_repro import gpu_check

torch.set_num_threads(1)


FAST = [s for s in gpu_check.SECTIONS if s != "engine_compiled"]


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
        rc = gpu_check.main(["--out", str(out), "--device", "cpu", "--small", "--sections", ",".join(FAST)])
    finally:
        gpu_check._write = real
    return out, rc, seen


def test_each_section_writes_its_csv_as_it_finishes(small_run):
    out, rc, seen = small_run
    order = FAST
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
    assert vb.loc["float32 batch 4 K=3 verify=checked", "ok"] and vb.loc["bfloat16 batch 4 K=3 verify=exact", "ok"]
    assert vb.loc["bfloat16 batch 4 K=3 verify=exact (batch-invariant mode)", "ok"]
    # fold's bits are the device's business (a GPU need not plan the fold like the block forward): measured only
    fold = vb.loc["bfloat16 batch 4 K=3 verify=fold"]
    assert fold["value"] == 0 and pd.isna(fold["ok"])
    mm = pd.read_csv(out / "mismatch.csv").set_index("item")
    assert mm.loc["bf16 verify=fold", "value"] == 0 and mm.loc["bf16 verify=checked", "value"] == 0  # CPU: exact
    eng = pd.read_csv(out / "engine.csv").set_index("item")["value"]
    assert eng["block forward (batch 1)"] > 0 and eng["head step + lm_head"] > 0
    assert eng["speculative(3,mrp) eager"] > 0 and eng["static(1) eager"] > 0
    assert eng["block forward (batch 1), batch-invariant mode"] > 0
    assert eng["speculative(3,mrp) eager, batch-invariant mode"] > 0
    assert eng["static(1) eager, batch-invariant mode"] > 0
    assert rc == 0  # no failed check on CPU


def test_environment_records_the_attention_backend_and_versions(small_run):
    out, _, _ = small_run
    env = pd.read_csv(out / "environment.csv").set_index("item")["note"]
    for item in ("torch", "triton", "flash-attn", "cuDNN", "cuBLAS", "device", "GPU clock state"):
        assert isinstance(env[item], str) and env[item], item
    backends = env[env.index.str.startswith("attention backend:")]
    assert len(backends) == 8 and set(backends) <= {"MATH", "FLASH_ATTENTION", "EFFICIENT_ATTENTION",
                                                     "CUDNN_ATTENTION", "OVERRIDEABLE"}  # fmt: skip
    assert pd.read_csv(out / "environment.csv")["ok"].isna().all()  # a record, never a failure


def test_the_batch_invariant_mode_is_checked(small_run):
    out, _, _ = small_run
    im = pd.read_csv(out / "invariant_mode.csv")
    im = im[im["item"] != "section time"]
    for op in ("linear", "attention", "mean", "rms_norm", "log_softmax"):
        for dt in ("float32", "bfloat16"):
            assert im["item"].str.contains(f"triton {op} {dt}: rows alone").any(), (op, dt)
            assert im["item"].str.contains(f"reference {op} {dt} vs float64").any(), (op, dt)
    assert im["ok"].astype(bool).all(), im[~im["ok"].astype(bool)].to_string()
    row = im.set_index("item").loc["backbone calls per verify in the mode"]
    assert row["value"] == 1


def test_rows_are_written_as_they_come(tmp_path, monkeypatch):
    """A section killed half-way (scripts/gpu_probe.sh's time limit) leaves the rows it had on disk."""
    seen = []

    def half(dev, small):
        rows = gpu_check._rows()
        rows.append(gpu_check._row("kernels", "first", 1.0, "ms"))
        seen.append(pd.read_csv(tmp_path / "kernels.csv")["item"].tolist())
        raise KeyboardInterrupt  # killed: nothing after this runs

    monkeypatch.setitem(gpu_check.SECTION_FNS, "kernels", half)
    with pytest.raises(KeyboardInterrupt):
        gpu_check.main(["--out", str(tmp_path), "--device", "cpu", "--small", "--sections", "kernels"])
    assert seen == [["first"]]
    assert pd.read_csv(tmp_path / "gpu_check.csv")["item"].tolist() == ["first"]


@pytest.mark.slow
def test_engine_compiled_passes_on_cpu(tmp_path):
    """engine_compiled on CPU (one inductor compile of the toy model: minutes): no failed row; the CUDA-graph runs'
    tokens are the same compile's; compiled-vs-eager agreement is a measured share; no recompile-limit hit."""
    rc = gpu_check.main(["--out", str(tmp_path), "--device", "cpu", "--small", "--sections", "engine_compiled"])
    df = pd.read_csv(tmp_path / "engine_compiled.csv").set_index("item")
    assert rc == 0, df.to_string()
    for cache in ("growing cache", "static cache"):
        assert df.loc[f"{cache}: CUDA graphs' tokens equal the same compile's without graphs", "ok"]
        share = df.loc[f"{cache}: compiled tokens equal to eager"]
        assert 0 <= share["value"] <= 1 and pd.isna(share["ok"])
    assert df.loc["graphs dynamo compiled, no graphs", "value"] > 0
    assert df.loc["no KV cache tensor copied per replay", "ok"]  # the cache at static addresses (issue 36)
    copied = df.loc["bytes copied into graph inputs per replay, static cache (largest call kind)"]
    assert 0 < copied["value"] < 10_000 and pd.isna(copied["ok"])


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
