"""Shared fixtures. Keep this file small: module-specific fixtures live in their test files."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread():
    """The suite runs toy models op by op: one thread is faster than two, and two threads on a busy
    2-core machine make OpenMP spin (decoding 15-30x slower)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(autouse=True)
def threads_restored():
    """A stage run in-process sets the profile's thread count (stages.shared_backbone, training): put one thread back
    after every test, so a later test's bitwise comparison does not depend on which test ran before it (fp32 fold vs
    forward_block differ in their last bit at 2 threads)."""
    yield
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


@pytest.fixture
def tmp_runs(tmp_path, monkeypatch):
    """Point the artifact cache and figures roots at a temporary directory."""
    monkeypatch.setenv("MRP_REPRO_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("MRP_REPRO_FIGURES", str(tmp_path / "figures"))
    return tmp_path / "runs"


@pytest.fixture(scope="session")
def smoke_profile():
    """The `smoke` profile (toy sizes, for tests)."""
    from mrp_repro.config import load_profile

    return load_profile("smoke")
