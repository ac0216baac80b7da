"""CUDA-graph replays that do not copy the KV cache (issue 36): a KVCache's tensors are static addresses for
torch.compile (model._static_addresses, what torch._dynamo.mark_static_address(t, guard=False) sets), so cudagraph
trees read and write them in place instead of copying them into graph-owned inputs before every replay (~10 GB per
replay at batch 16 on SDAR-4B before). Measured on CPU by model.replay_copy_bytes (dynamo's graph inputs, traced only:
the copy rule is dynamo's and cudagraph trees', not the device's; gpu_check records the same on the device): every
forward of a Speculative(3) decode, backbone and head, static and growing cache, copies only its ids, positions, mask
and scalars, and the same decode with the cache unmarked copies the whole cache at every backbone forward.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_gpu_static_cache.py
"""

from __future__ import annotations

import pytest
import torch

import mrp_repro.model as model_mod
from mrp_repro.decoding import Speculative, generate
from mrp_repro.decoding.mismatch import MASK, PAD, random_backbone, random_head
from mrp_repro.model import graph_inputs, replay_copy_bytes

torch.set_num_threads(1)
L = 4


def _decode(m, h, static_cache):
    return generate(m, [[5, 6, 7, 8, 9, 10, 11]], Speculative(3, "mrp", head=h), L, MASK, [MASK], 2 * L, pad_id=PAD,
                    static_cache=static_cache, trace=False)  # fmt: skip


def _cache_bytes(m, static_cache):
    c = m.new_cache(1, 16, static=static_cache)
    return c.k.nbytes + c.v.nbytes


def test_the_mark_is_dynamo_s_mark_static_address():
    t = torch.zeros(2, 3)
    torch._dynamo.mark_static_address(t, guard=False)
    c = random_backbone(0, torch.float32).new_cache(1, 8)
    for x in (c.k, c.v, c.valid, c.select_rows(torch.tensor([0])).k):
        assert x._dynamo_static_input_type == t._dynamo_static_input_type == "unguarded"


@pytest.mark.parametrize("static_cache", [True, pytest.param(False, marks=pytest.mark.slow)],  # growing: make test-slow
                         ids=["static cache", "growing cache"])
@torch.no_grad()
def test_a_replay_copies_no_cache(static_cache, capsys):
    m, h = random_backbone(0, torch.float32), random_head(1, torch.float32)
    want = _decode(m, h, static_cache).tokens
    got = []
    rows = replay_copy_bytes((m, h), lambda: got.append(_decode(m, h, static_cache).tokens))
    assert got == [want]  # measuring changes nothing
    assert {r["module"] for r in rows} == {"SDARModel", "MRPHead"} and len(rows) >= 4
    cache = _cache_bytes(m, static_cache)
    for r in rows:
        assert not [s for s in r["copied"] if "cache" in s], r["copied"]
        assert r["bytes"] < cache / 4, (r["kind"], r["copied"])
    with capsys.disabled():
        print(f"\n  {'static' if static_cache else 'growing'} cache: bytes copied per replay "
              f"{min(r['bytes'] for r in rows)}-{max(r['bytes'] for r in rows)} over {len(rows)} call kinds "
              f"(the cache: {cache} bytes, read in place)")  # fmt: skip


@torch.no_grad()
def test_an_unmarked_cache_is_copied_whole_at_every_backbone_replay(monkeypatch):
    """What the measurement sees without the marks (the code before): every backbone forward copies k and v whole."""
    monkeypatch.setattr(model_mod, "_static_addresses", lambda cache: cache)
    m, h = random_backbone(0, torch.float32), random_head(1, torch.float32)
    rows = replay_copy_bytes(m, lambda: _decode(m, h, True))
    cache = _cache_bytes(m, True)
    assert rows and all(r["copied"]["L['cache'].k"] + r["copied"]["L['cache'].v"] == cache for r in rows)
    assert all(r["bytes"] > cache for r in rows)


def test_graph_inputs_runs_nothing_and_refuses_a_graph_break():
    m = random_backbone(0, torch.float32)
    cache = m.new_cache(1, 8)
    ids, pos = torch.full((1, L), 5), torch.arange(L)[None]
    ins = graph_inputs(m.commit_block, ids, pos, cache)  # traced: the commit's write never happens
    assert cache.length == 0 and not cache.valid.any()
    assert {i["source"] for i in ins if i["static"]} >= {"L['cache'].k", "L['cache'].v"}

    def breaks(x):
        return x * 2 if bool(x.sum() > 0) else x

    with pytest.raises(Exception, match="(?i)graph break|data-dependent|Unsupported"):
        graph_inputs(breaks, torch.ones(3))


def _double(x):
    return x * 2


@pytest.mark.slow  # a compile with a recompile limit: a regression of make test-slow's order, checked there
def test_graph_inputs_traces_a_function_an_earlier_compile_exhausted():
    """dynamo's state lives on the code object: an earlier compile of the same function (another model, another test)
    that hit the recompile limit leaves the code marked to run eagerly, and a fullgraph trace of it then found 'no
    compiled frames' (CI's make test-slow, after tests/test_compiled.py). graph_inputs clears it first."""
    torch._dynamo.reset_code(_double.__code__)
    with torch._dynamo.config.patch(recompile_limit=1, fail_on_recompile_limit_hit=False):
        f = torch.compile(_double, dynamic=False)
        for n in (2, 3, 5):  # the second shape is past the limit: the code is left to run eagerly
            f(torch.ones(n))
    ins = graph_inputs(_double, torch.ones(4))
    assert [i["shape"] for i in ins] == [(4,)] and not ins[0]["static"]
    assert graph_inputs(_double, torch.ones(6))  # and again: the trace leaves nothing behind either
