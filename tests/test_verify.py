"""The speculative verify off CPU (issue 30): "exact" is one folded backbone call wherever that call is bitwise
the block forwards ("checked"), never a different rounding; the profile selects the path (decoding.verify); the
cost model counts one call per verify of K = 3.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_verify.py
"""

import typing
import warnings

import pytest
import torch

from mrp_repro.config import VerifyPath, load_profile
from mrp_repro.decoding import Speculative, Static, generate
from mrp_repro.decoding.mismatch import MASK, PAD, random_backbone, random_head, random_prompts
from mrp_repro.decoding.upstream import UpstreamSpeculative
from mrp_repro.measure.cost import cost_model, verify_passes
from mrp_repro.measure.runs import settings_for
from mrp_repro.model import VERIFY_PATHS, ModelOutput, resolve_verify

torch.set_num_threads(1)


def test_exact_is_one_call_off_cpu():
    assert resolve_verify("exact", "cpu") == "fold"
    assert resolve_verify("exact", torch.device("cuda")) == "checked"  # it was "loop": K calls per verify
    assert resolve_verify("exact", "mps") == "checked"
    assert set(typing.get_args(VerifyPath)) == set(VERIFY_PATHS)


def _state(B=3, M=3, L=4, seed=0):
    m = random_backbone(seed, torch.float32)
    g = torch.Generator().manual_seed(seed)
    ctx = torch.randint(3, 64, (B, 2 * L), generator=g)
    cache = m.new_cache(B, 3 * L)
    m.prefill(ctx, torch.arange(2 * L)[None].expand(B, -1), torch.ones(B, 2 * L, dtype=torch.bool), cache, L)
    cand = torch.randint(3, 64, (B, M, L), generator=g)
    return m, cand, (2 * L + torch.arange(L))[None].expand(B, -1), cache


@torch.no_grad()
def test_checked_is_loop_bitwise_and_one_call_after_its_check():
    m, cand, pos, cache = _state()
    loop = m.forward_candidates(cand, pos, cache, verify="loop")
    first = verify_passes(m, lambda: m.forward_candidates(cand, pos, cache, verify="checked"))
    assert first == 1 + 3  # the check: fold and loop once
    got = []
    assert verify_passes(m, lambda: got.append(m.forward_candidates(cand, pos, cache, verify="checked"))) == 1
    assert torch.equal(got[0].logits, loop.logits) and torch.equal(got[0].hidden, loop.hidden)


@torch.no_grad()
def test_checked_falls_back_to_loop_where_fold_rounds_differently(monkeypatch):
    """A device whose fold is not bitwise (simulated: fold's logits moved by one ulp-sized step): checked warns
    once and verifies by loop at that shape, so the logits are still forward_block's."""
    m, cand, pos, cache = _state(seed=1)
    loop = m.forward_candidates(cand, pos, cache, verify="loop")
    fold = m._verify_fold

    def off(*a):
        o = fold(*a)
        return ModelOutput(o.logits + 1e-3, o.hidden)

    monkeypatch.setattr(m, "_verify_fold", off)
    with pytest.warns(UserWarning, match="not bitwise"):
        m.forward_candidates(cand, pos, cache, verify="checked")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per shape
        n = verify_passes(m, lambda: m.forward_candidates(cand, pos, cache, verify="checked"))
        out = m.forward_candidates(cand, pos, cache, verify="checked")
    assert n == 3 and torch.equal(out.logits, loop.logits)


def test_speculative_on_the_cuda_path_is_static_and_one_call_per_verify():
    """Speculative(3) with the verify CUDA resolves "exact" to, forced on CPU: token-identical to Static(1), and
    once its shapes are checked, one backbone call per verify (the old CUDA path, loop, makes up to 3)."""
    m, h = random_backbone(2, torch.bfloat16), random_head(2, torch.bfloat16)
    ps = random_prompts(6, 3, 9)
    args = (4, MASK, [2], 12)
    want = generate(m, ps, Static(1), *args, pad_id=PAD).tokens
    per_round = {}
    for verify in ("checked", "loop"):
        pol = Speculative(3, "mrp", head=h, verify=verify)
        assert generate(m, ps, pol, *args, pad_id=PAD).tokens == want  # also warms checked's per-shape check
        calls, verifies, real = [0], [0], m.forward_candidates

        def counted(*a, _real=real, _calls=calls, _verifies=verifies, **k):
            _verifies[0] += 1
            _calls[0] += verify_passes(m, lambda: counted.out.append(_real(*a, **k)))
            return counted.out.pop()

        counted.out = []
        m.forward_candidates = counted
        try:
            r = generate(m, ps, pol, *args, pad_id=PAD)
        finally:
            del m.forward_candidates
        assert r.tokens == want and verifies[0] > 0
        per_round[verify] = calls[0] / verifies[0]
    assert per_round["checked"] <= 1.2 < per_round["loop"]


def test_cost_model_counts_one_call_for_k3_on_the_cuda_path():
    m, h = random_backbone(0, torch.float32), random_head(0, torch.float32)
    cm = cost_model(m, h, batch=2, block=4, Ks=[3], context_blocks=2, repeats=1, verify="checked")
    assert cm["verify_passes"][3] <= 1.2 and cm["verify"] == "checked"
    loop = cost_model(m, None, batch=2, block=4, Ks=[3], context_blocks=2, repeats=1, verify="loop")
    assert loop["verify_passes"][3] == 3


def test_the_profile_selects_the_verify_path():
    P = load_profile("smoke", overrides={"decoding.verify": "packed", "decoding.algorithms": ["ours", "upstream"]})
    h = random_head(0, torch.float32)
    specs = [pol for mode, pol in settings_for(P, h) if mode == "speculative"]
    assert specs and all(p.verify == "packed" for p in specs)
    assert any(isinstance(p, UpstreamSpeculative) for p in specs)
    assert load_profile("smoke").decoding.verify == "exact"


def test_every_speculative_the_reports_build_reads_the_profiles_verify():
    """decoding.verify reaches the ablations, the seed runs and the drafters' speculative, not only the main grid
    (they built Speculative with the default verify, so the setting was silently ignored there)."""
    import inspect

    from mrp_repro.model import ModelConfig
    from mrp_repro.mrp import MRPHead
    from mrp_repro.report import ablations, drafters, speed, variance

    P = load_profile("smoke").replace({"decoding.verify": "loop"})
    head = MRPHead(ModelConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_layers=1, num_heads=2,
                               num_kv_heads=1, head_dim=8), 1)  # the seed runs build an untrained twin of it
    assert ablations._spec_ours(3, head, P.decoding).verify == "loop"
    assert ablations._spec_upstream(3, head, P.decoding).verify == "loop"
    spec = [pol for name, pol in variance._settings(P, head) if name == "speculative"]
    assert spec and all(pol.verify == "loop" for pol in spec)
    # drafters and speed build their policies inside loops over decodes: every Speculative( names its verify
    for mod in (drafters, speed, ablations):
        for line in inspect.getsource(mod).splitlines():
            code = line.split("#")[0]
            if "Speculative(" in code and "import" not in code and "def " not in code:
                assert "verify" in line, (mod.__name__, line.strip())
