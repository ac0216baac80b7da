"""The batch-invariant numerics chosen by a profile (issue 36): `decoding.kernel_numerics: batch_invariant` makes
Backbone.generate run every decode (both families, static and speculative) inside kernels.batch_invariant's mode, so
verify "exact" is one folded backbone call per round on any device, and under an emulated GPU (kernels.emulate:
reductions split by the call's rows and the cache length) speculative decodes token for token as Static(1) in the
same mode. "default" runs outside the mode (there, off CPU, "exact" would be "checked"). An unknown value is refused
by name, in a profile and in code.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_batch_invariant_profile.py
"""

from __future__ import annotations

import random
import typing

import pytest
import torch

import mrp_repro.model as model_mod
from mrp_repro.backbone import Backbone
from mrp_repro.config import ConfigError, KernelNumerics, load_profile
from mrp_repro.decoding import Speculative, Static
from mrp_repro.decoding.mismatch import MASK, PAD, random_backbone, random_head
from mrp_repro.decoding.upstream import UpstreamSpeculative, UpstreamStatic
from mrp_repro.kernels.batch_invariant import KERNEL_NUMERICS, active, batch_invariant, kernel_numerics
from mrp_repro.kernels.emulate import EmulatedGPU
from mrp_repro.measure.cost import verify_passes

torch.set_num_threads(1)
pytestmark = pytest.mark.filterwarnings("ignore:verify 'checked'")

BLOCK, MAX_NEW = 4, 24


def _prompts(n, seed, lo=3, hi=7):
    rng = random.Random(seed)
    return [[rng.randrange(3, 64) for _ in range(rng.randint(lo, hi))] for _ in range(n)]


def _backbone(numerics: str | None):
    over = {} if numerics is None else {"decoding.kernel_numerics": numerics}
    m = random_backbone(3, torch.bfloat16)
    return Backbone(m, None, MASK, [MASK], PAD, BLOCK, None, load_profile("tiny", over)), m


class _Spy:
    """Wraps m.forward_candidates: per verify, the backbone calls it made, whether the mode was on, and the path
    "exact" takes there on a GPU (model.resolve_verify with device "cuda")."""

    def __init__(self, m):
        self.m, self.real, self.verifies = m, m.forward_candidates, []

    def __enter__(self):
        def counted(*a, **k):
            out = []
            n = verify_passes(self.m, lambda: out.append(self.real(*a, **k)))
            self.verifies.append((n, active(), model_mod.resolve_verify(k.get("verify", "exact"), "cuda")))
            return out[0]

        self.m.forward_candidates = counted
        return self

    def __exit__(self, *exc):
        del self.m.forward_candidates
        return False


def test_the_setting_and_its_choices_are_one_list():
    assert typing.get_args(KernelNumerics) == KERNEL_NUMERICS
    assert load_profile("tiny").decoding.kernel_numerics == "default"


def test_an_unknown_value_is_refused_by_name():
    with pytest.raises(ConfigError, match=r"decoding\.kernel_numerics: expected one of 'default', 'batch_invariant'"):
        load_profile("tiny", {"decoding.kernel_numerics": "batch-invariant"})
    with pytest.raises(ValueError, match=r"decoding.kernel_numerics='fast': choose one of \('default', 'batch_inv"):
        with kernel_numerics("fast"):
            pass
    bb, _ = _backbone(None)
    with pytest.raises(ValueError, match="kernel_numerics='fast'"):
        bb.generate(_prompts(1, 0), Static(1), 4, kernel_numerics="fast")


@torch.no_grad()
def test_a_profile_in_batch_invariant_mode_verifies_in_one_call_as_static():
    """Under the emulated GPU, with the profile's decoding.kernel_numerics: batch_invariant, Speculative(3, mrp) and
    the upstream family's speculative, each prompt alone and a padded batch of 3, run inside the mode (seen inside
    every verify), every verify is one backbone call and "exact" is fold on a GPU too; tokens equal Static(1)'s
    (upstream: UpstreamStatic's) decoded through the same profile. The default profile runs outside the mode, where
    "exact" on a GPU is "checked"."""
    m_h = random_head(103, torch.bfloat16)
    ps = _prompts(3, 7)
    for numerics in ("batch_invariant", "default"):
        bb, m = _backbone(numerics)
        with EmulatedGPU(sms=12, kv_block=16), _Spy(m) as spy:
            for static, spec in ((Static(1), Speculative(3, "mrp", head=m_h)),
                                 (UpstreamStatic(), UpstreamSpeculative(3, m_h))):  # fmt: skip
                want = [bb.generate([p], static, MAX_NEW).tokens[0] for p in ps]
                got = [bb.generate([p], spec, MAX_NEW).tokens[0] for p in ps]
                if numerics == "batch_invariant":
                    assert got == want, spec.name
                    if spec.algorithm == "ours":  # the padded batch (upstream's layout has no padding)
                        assert bb.generate(ps, spec, MAX_NEW).tokens == bb.generate(ps, static, MAX_NEW).tokens
        assert spy.verifies, numerics
        if numerics == "batch_invariant":
            assert set(spy.verifies) == {(1, True, "fold")}, set(spy.verifies)
        else:
            assert {(a, path) for _, a, path in spy.verifies} == {(False, "checked")}
        assert not active()


@torch.no_grad()
def test_the_mode_is_entered_once():
    """Inside a mode entered already (a test's, gpu_check's), the profile's setting adds none; outside, one."""
    with kernel_numerics("batch_invariant", "torch") as mode:
        assert active() and mode is not None
        with kernel_numerics("batch_invariant") as inner:
            assert inner is None and active()
    with batch_invariant("torch"), kernel_numerics("batch_invariant") as inner:
        assert inner is None
    with kernel_numerics("default") as none:
        assert none is None and not active()
