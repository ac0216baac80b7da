"""gpu_check runs its whole table at tiny shapes on CPU; without CUDA the GPU run exits with one line."""

import pandas as pd
import pytest
import torch

from mrp_repro import gpu_check

torch.set_num_threads(1)


def test_gpu_check_small_cpu(tmp_path):
    gpu_check.main(["--out", str(tmp_path), "--device", "cpu", "--small"])
    df = pd.read_csv(tmp_path / "gpu_check.csv")
    assert set(df["section"]) == {"kernels", "mismatch", "engine"}
    mm = df[df["section"] == "mismatch"]
    assert {"bf16 verify=fold", "bf16 verify=loop", "bf16 verify=packed"} <= set(mm["item"])
    assert (mm[mm["item"] == "bf16 verify=fold"]["value"] == 0).all()  # exact on CPU (tests/test_lossless_bf16.py)
    eng = df[df["section"] == "engine"].set_index("item")["value"]
    assert eng["block forward (batch 1)"] > 0 and eng["head step + lm_head"] > 0
    assert eng["speculative(3,mrp) eager"] > 0
    assert (tmp_path / "gpu_check.md").read_text().startswith("# gpu_check on cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA error")
def test_gpu_check_without_cuda_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        gpu_check.main(["--out", str(tmp_path)])
    assert "no CUDA device" in str(e.value) and "\n" not in str(e.value)
