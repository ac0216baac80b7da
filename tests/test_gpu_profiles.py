"""GPU profiles (sdar-*) refuse to run on CPU unless MRP_REPRO_DEVICE=cpu asks for it (issue 30); the CPU
profiles (sdar-mini*, tiny, smoke) are not GPU profiles.

    .venv/bin/python -m pytest -q tests/test_gpu_profiles.py
"""

import pytest
import torch

from mrp_repro import stages
from mrp_repro.config import configs_dir, load_profile
from mrp_repro.errors import UserError
from mrp_repro.runtime import is_gpu_profile, require_device

CPU = torch.device("cpu")


def test_which_profiles_are_gpu_profiles():
    names = sorted(p.stem for p in configs_dir().glob("*.yaml"))
    gpu = {n for n in names if is_gpu_profile(load_profile(n))}
    assert gpu == {n for n in names if n.startswith("sdar-") and not n.startswith("sdar-mini")}
    assert {"sdar-4b", "sdar-4b-released-quick", "sdar-8b-released-k2"} <= gpu


def test_a_gpu_profile_on_cpu_is_one_line_naming_the_fix(monkeypatch):
    monkeypatch.delenv("MRP_REPRO_DEVICE", raising=False)
    with pytest.raises(UserError) as e:
        require_device(load_profile("sdar-4b"), CPU)
    msg = str(e.value)
    assert "\n" not in msg and "GPU profile" in msg and "MRP_REPRO_DEVICE=cpu" in msg
    require_device(load_profile("sdar-4b"), torch.device("cuda"))  # the device it is meant for
    require_device(load_profile("sdar-mini"), CPU)  # the CPU / CI profile of the SDAR path
    require_device(load_profile("tiny"), CPU)


def test_stages_backbone_refuses_before_loading_anything(monkeypatch):
    monkeypatch.delenv("MRP_REPRO_DEVICE", raising=False)
    with pytest.raises(UserError, match="MRP_REPRO_DEVICE=cpu"):
        stages.backbone(load_profile("sdar-4b"), device="cpu")


def test_mrp_repro_device_cpu_lets_it_run(monkeypatch):
    monkeypatch.setenv("MRP_REPRO_DEVICE", "cpu")
    require_device(load_profile("sdar-4b-released"), CPU)
