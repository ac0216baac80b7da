"""mrp_repro.methods: each decoding method declared once; the declarations reproduce today's grids setting for
setting; a toy method added with one declaration is found in the registry and its grid.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_methods.py
"""

import pytest
import torch

from mrp_repro import methods
from mrp_repro.decoding import Dynamic, Static
from mrp_repro.decoding.mismatch import random_head

PROFILES = ("tiny", "smoke", "sdar-mini", "sdar-4b-released")


def _pairs(settings):
    return sorted((mode, pol.name) for mode, pol in settings)


@pytest.fixture(scope="module")
def head():
    return random_head(0, torch.float32)


@pytest.mark.parametrize("name", PROFILES)
@pytest.mark.parametrize("with_head", [False, True])
def test_declarations_reproduce_the_grids(name, with_head, head):
    """modes_runs' methods = measure.runs.settings_for, controls_runs' = report.grids.control_settings, as (mode,
    setting) pairs: a method missing, doubled or with another grid fails here."""
    from mrp_repro.config import load_profile
    from mrp_repro.measure.runs import settings_for
    from mrp_repro.report.grids import control_settings

    p = load_profile(name)
    h = head if with_head else None
    assert _pairs(methods.settings(p, h, runs="modes_runs")) == _pairs(settings_for(p, h))
    assert _pairs(methods.settings(p, h, runs="controls_runs")) == _pairs(control_settings(p, h))


def test_declarations_are_consistent():
    from mrp_repro.measure.schema import MODES
    from mrp_repro.report.grids import CONTROL_STEPS

    assert methods.CONTROL_STEPS == CONTROL_STEPS
    ms = methods.all_methods()
    assert len({m.name for m in ms}) == len(ms)
    for m in ms:
        assert m.family in methods.FAMILIES and m.mode in MODES and m.series, m.name
        assert all(methods.get(c) for c in m.controls), m.name
    naive = methods.get("speculative-naive")
    assert naive.family == "peer" and "SSD" in naive.series and "FreeDave" in naive.series
    assert naive.lossless == methods.STATIC1
    assert {m.name for m in methods.all_methods("peer")} >= {"speculative-naive", "spiffy", "spiffy-dynamic", "wino"}
    assert methods.get("spiffy").lossless.name == "static(1)"
    assert methods.get("spiffy-dynamic").lossless.name == f"dynamic({methods.SPIFFY_DYNAMIC_TAU})"
    assert methods.get("wino").lossless is None and methods.get("remask").lossless is None
    assert methods.get("speculative-mrp").controls == ("speculative-naive", "speculative-oracle")
    assert methods.get("upstream-speculative").family == "upstream"


def test_references_build_their_policies():
    assert methods.STATIC1.policy().name == Static(1).name
    assert methods.Reference("dynamic", 0.9).policy().name == Dynamic(0.9).name
    assert methods.STATIC1.policy("upstream").name == "upstream_static(1)"
    with pytest.raises(ValueError, match="static or dynamic"):
        methods.Reference("oracle", 1)


def test_peer_grids(head):
    """Spiffy at D = K and 2K for every speculative K; WINO at every remasking τ with τ2 = 0.9."""
    from mrp_repro.config import load_profile

    p = load_profile("tiny")  # speculative_k [3, 5]
    assert [s["D"] for s in methods.get("spiffy").grid(p, None)] == [3, 5, 6, 10]
    assert [pol.name for pol in methods.get("wino").policies(p)] == [f"wino({t},0.9)" for t in methods.remask_taus(p)]
    with pytest.raises(ValueError, match="backbone"):
        methods.get("spiffy").policies(p)  # its graph is calibrated on the backbone


def test_a_toy_method_is_one_declaration(head):
    """A method added by register() is found by name, by family, in its grid frame and in settings(); a duplicate
    name or an unregistered control is refused."""
    from mrp_repro.config import load_profile

    p = load_profile("smoke")
    toy = methods.Method("toy-static2", "peer", "static", lambda head, k: Static(k),
                         lambda profile, head: [dict(k=2), dict(k=3)], "toy", methods.STATIC1,
                         controls=("static",))  # fmt: skip
    before = len(methods.all_methods())
    methods.register(toy)
    try:
        assert methods.get("toy-static2") is toy
        assert toy in methods.all_methods("peer") and toy in methods.all_methods(runs="peers_runs")
        got = methods.settings(p, None, runs="peers_runs", names=["toy-static2"])
        assert [(m, pol.name) for m, pol in got] == [("static", "static(2)"), ("static", "static(3)")]
        assert ("static", "static(2)") in _pairs(methods.settings(p, None, runs="peers_runs", names=[
            m.name for m in methods.all_methods(runs="peers_runs") if m.prepare is None]))  # fmt: skip
        with pytest.raises(ValueError, match="registered already"):
            methods.register(toy)
        methods.register(toy, replace=True)
    finally:
        methods.unregister("toy-static2")
    assert len(methods.all_methods()) == before
    with pytest.raises(KeyError, match="toy-static2"):
        methods.get("toy-static2")
    with pytest.raises(ValueError, match="not registered"):
        methods.register(methods.Method("toy2", "peer", "static", lambda head: Static(1), lambda p, h: [{}], "t",
                                        controls=("no-such-method",)))  # fmt: skip
    with pytest.raises(ValueError, match="family"):
        methods.Method("toy3", "theirs", "static", lambda head: Static(1), lambda p, h: [{}], "t")
    with pytest.raises(ValueError, match="mode"):
        methods.Method("toy4", "peer", "lookahead", lambda head: Static(1), lambda p, h: [{}], "t")


def test_spiffy_calibrates_on_held_out_prompts(smoke_profile, monkeypatch):
    """prepare: the graph comes from the val split (never the evaluated test split), one calibration decode per
    (backbone, profile, base) for every D; the policies decode losslessly on the backbone."""
    from mrp_repro.backbone import Backbone, encode_prompts
    from mrp_repro.decoding.peers_spiffy import GraphRecorder
    from mrp_repro.measure.runs import eval_problems
    from mrp_repro.model import ModelConfig, SDARModel
    from mrp_repro.tasks import synthetic
    from mrp_repro.tokenizer import build_tiny_tokenizer, eos_token_ids, mask_token_id

    cal = methods.calibration_problems(smoke_profile, 4)
    test = eval_problems(smoke_profile)
    assert cal and not {c.task_id for c in cal} & {t.task_id for t in test}
    assert all("/val/" in c.task_id for c in cal)

    tok = build_tiny_tokenizer(synthetic.alphabet())
    cfg = ModelConfig(len(tok), 32, 64, 2, 4, 2, 8)
    m = SDARModel(cfg).init_weights(std=0.3, generator=torch.Generator().manual_seed(0)).eval()
    eos = eos_token_ids(tok)
    bb = Backbone(m, tok, mask_token_id(tok), eos, eos[0], smoke_profile.block_size, None, smoke_profile)
    calls = []
    orig = GraphRecorder.denoise

    def counting(self, st):
        calls.append(self.base.name)
        return orig(self, st)

    monkeypatch.setattr(GraphRecorder, "denoise", counting)
    pols = methods.get("spiffy").policies(smoke_profile, None, backbone=bb)
    assert [pol.graph.kind for pol in pols] == ["calibrated"] * len(pols)
    assert len(set(calls)) == 1 and calls  # one base, decoded once for both D
    n_blocks = len(calls)
    assert [pol.K for pol in pols] == [min(D, pol.graph.D) for D, pol in zip((3, 6), pols, strict=True)]
    assert pols[0].graph.nodes == pols[1].graph.nodes[: pols[0].graph.D]  # D nodes: a prefix of 2D's
    methods.get("spiffy").policies(smoke_profile, None, backbone=bb)  # memoised: no second calibration
    assert len(calls) == n_blocks
    prompts = encode_prompts(bb, test[:4])
    want = bb.generate(prompts, Static(1), 16).tokens
    for pol in pols:
        assert bb.generate(prompts, pol, 16).tokens == want
