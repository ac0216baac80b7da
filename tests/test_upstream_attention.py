"""Issue 38: under `use_numerics("upstream")` every attention call of the upstream family takes the released code's
form (modeling_sdar_mrp.py, SDARAttention at inference): a call whose mask is all ones (block forwards, seeds,
store-KV commits, the head, a one-block prefill) runs flash-attn's `flash_attn_func` where the optional package can
run it, SDPA without a mask otherwise; a masked call (a prefill of 2+ blocks, the packed verify) runs SDPA with the
released mask [1, T, S] bool, `is_causal=False`, `scale=head_dim**-0.5`, `enable_gqa=True`. On CPU the 3-D mask
sends SDPA to its math kernel, the 4-D mask of our numerics to its flash kernel: in bf16 they round apart.

Checked here: the arguments SDPA receives per call kind (and ours unchanged); the upstream family through
Backbone.generate equals tests/upstream_reference.py in its released mode (the forwards written again in the
released order and forms, their packed verify) token for token and in every counter, bf16 and fp32, batch 1 and 3,
prompts of 1-3 prefilled blocks; upstream speculative with the default verify ("exact") equals upstream static token
for token there; the flash-attn routing (a stand-in flash_attn_func on any machine, the real package where it is
installed on a GPU); the backend in the run's provenance."""

import random

import pytest
import torch
import torch.nn.functional as F
from upstream_reference import reference_upstream

from mrp_repro import model as model_mod
from mrp_repro.backbone import Backbone
from mrp_repro.decoding.mismatch import CONFIG, random_backbone, random_head
from mrp_repro.decoding.upstream import UpstreamSpeculative, UpstreamStatic
from mrp_repro.model import block_causal_mask, use_numerics

MASK, EOS, PAD, L = 1, 2, 0, 8
SCALE = CONFIG.head_dim**-0.5


class SDPASpy:
    """Records the arguments of every F.scaled_dot_product_attention call (the model looks it up per call)."""

    def __init__(self, monkeypatch):
        self.calls = []
        real = F.scaled_dot_product_attention

        def spy(q, k, v, attn_mask=None, **kw):
            self.calls.append(dict(q=tuple(q.shape), k=tuple(k.shape), mask=attn_mask, **kw))
            return real(q, k, v, attn_mask=attn_mask, **kw)

        monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)

    def take(self):
        out, self.calls = self.calls, []
        return out


def _released_masked(call, T, S):
    m = call["mask"]
    return (m is not None and tuple(m.shape) == (1, T, S) and m.dtype == torch.bool and call.get("scale") == SCALE
            and call.get("enable_gqa") is True and call.get("is_causal") is False)  # fmt: skip


def _released_unmasked(call):
    return (call["mask"] is None and call.get("scale") == SCALE and call.get("enable_gqa") is True
            and call.get("is_causal") is False)  # fmt: skip


def test_sdpa_receives_the_released_forms(monkeypatch):
    """Per call kind, the arguments SDPA receives under the upstream numerics (CPU: no flash-attn, so the all-ones
    calls are SDPA's unmasked ones), and under ours the calls of before (4-D mask, no scale)."""
    m, h = random_backbone(0, torch.bfloat16), random_head(10, torch.bfloat16)
    n_layers, B, M = CONFIG.num_layers, 3, 3
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, CONFIG.vocab_size, (B, 4 * L), generator=g)
    pos = torch.arange(4 * L)[None].expand(B, -1)
    ones = torch.ones(B, 4 * L, dtype=torch.bool)
    spy = SDPASpy(monkeypatch)
    with torch.no_grad(), use_numerics("upstream", m, h):
        cache = m.new_cache(B, 5 * L)
        m.prefill(ids[:, : 2 * L], pos[:, : 2 * L], ones[:, : 2 * L], cache, L)  # their masked prefill
        calls = spy.take()
        assert len(calls) == n_layers and all(_released_masked(c, 2 * L, 2 * L) for c in calls)
        assert torch.equal(calls[0]["mask"][0], block_causal_mask(ones[:1, : 2 * L], L)[0, 0])
        blk, bpos = ids[:, 2 * L : 3 * L], pos[:, 2 * L : 3 * L]
        out = m.forward_block(blk, bpos, cache)  # a denoising / seed forward: all ones
        calls = spy.take()
        assert len(calls) == n_layers and all(_released_unmasked(c) for c in calls)
        h(out.hidden, blk, bpos, m.embed_tokens)  # the head on its own block: all ones
        calls = spy.take()
        assert len(calls) == h.num_layers and all(_released_unmasked(c) for c in calls)
        cand = torch.stack([blk] * M, 1)
        m.forward_candidates(cand, bpos, cache, verify="packed")  # their packed verify
        calls = spy.take()
        assert len(calls) == n_layers and all(_released_masked(c, M * L, 2 * L + M * L) for c in calls)
        want = torch.zeros(M * L, 2 * L + M * L, dtype=torch.bool)
        want[:, : 2 * L] = True
        for k in range(M):
            want[k * L : (k + 1) * L, 2 * L + k * L : 2 * L + (k + 1) * L] = True
        assert torch.equal(calls[0]["mask"][0], want)
        m.forward_candidates(cand, bpos, cache, verify="exact")  # ours, lossless: M block forwards, folded
        calls = spy.take()
        assert all(_released_unmasked(c) and c["q"][0] == B * M for c in calls)
        m.commit_block(blk, bpos, cache, with_logits=False)  # their store-KV forward: all ones
        assert all(_released_unmasked(c) for c in spy.take())
        m.prefill(ids[:, :L], pos[:, :L], ones[:, :L], m.new_cache(B, 2 * L), L)  # one block: all ones, unmasked
        assert all(_released_unmasked(c) for c in spy.take())
        padded = ones[:, : 2 * L].clone()
        padded[0, :L] = False  # a padded row (our engine's layout; theirs has none): no released form, ours kept
        m.prefill(ids[:, : 2 * L], pos[:, : 2 * L], padded, m.new_cache(B, 2 * L), L)
        assert all(tuple(c["mask"].shape) == (B, 1, 2 * L, 2 * L) for c in spy.take())
    with torch.no_grad():  # our numerics: the calls of before
        m.prefill(ids[:, : 2 * L], pos[:, : 2 * L], ones[:, : 2 * L], m.new_cache(B, 2 * L), L)
        m.forward_block(ids[:, :L], pos[:, :L], m.new_cache(B, L))
        calls = spy.take()
        assert len(calls) == 2 * n_layers
        assert all(c["mask"] is not None and c["mask"].dim() == 4 and "scale" not in c and "is_causal" not in c
                   and c["enable_gqa"] is True for c in calls)  # fmt: skip


def _prompts(batch: int, blocks: int, seed: int) -> list[list[int]]:
    """batch prompts whose shortest has `blocks` whole blocks (their prefill), ending inside a block."""
    rng = random.Random(seed)
    lens = [blocks * L + rng.randrange(1, L) for _ in range(batch)]
    return [[rng.randrange(3, CONFIG.vocab_size) for _ in range(n)] for n in lens]


def _counters(res):
    b = res.batch
    return dict(prefill=b.prefill_forwards, denoise=b.denoise_forwards, store_kv=b.store_kv_forwards,
                mrp=b.mrp_forwards, blocks=b.blocks_decoded, rounds=b.spec_rounds, proposed=b.drafts_proposed,
                accepted=b.drafts_accepted, bonus=b.bonus_tokens, tokens=b.tokens,
                stalled=b.stalled_blocks)  # fmt: skip


def _rows(res):
    return [dict(tokens=s.tokens, denoise=s.denoise_forwards, commit=s.commit_forwards, mrp=s.mrp_forwards,
                 rounds=s.rounds, drafted=s.drafted, accepted=s.accepted, accept_lengths=s.accept_lengths)
            for s in res.stats]  # fmt: skip


def _same_as_released(bb, m, h, ps, K, mode, verify):
    """Backbone.generate (the upstream numerics) against the released-form reference: tokens and every counter."""
    pol = UpstreamStatic() if K is None else UpstreamSpeculative(K, h, mode, 2.0 if mode == "sum" else 1.0, verify)
    res = bb.generate(ps, pol, 2 * L)
    toks, c, rows = reference_upstream(m, ps, MASK, [EOS], L, 2 * L, K=K, head=h, draft_logits=mode,
                                       scale=2.0 if mode == "sum" else 1.0, released=True,
                                       verify="packed" if verify == "packed" else "each")  # fmt: skip
    assert res.tokens == toks, (pol.name, len(ps))
    assert _counters(res) == c, (pol.name, len(ps))
    assert _rows(res) == rows, (pol.name, len(ps))
    return res.tokens


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("batch", [1, 3])
def test_upstream_family_equals_the_released_forms(dtype, batch):
    """bf16 and fp32, prompts of 1-3 prefilled blocks: static, speculative with their packed verify and with ours
    ("exact"), every draft mode, equal the released-form reference in tokens and counters; speculative "exact"
    equals static token for token (lossless). bf16: their packed verify rounds apart from the block forwards
    (CPU: SDPA's math kernel for the 3-D mask) and so is not token-identical to static everywhere."""
    m, h = random_backbone(0, dtype), random_head(10, dtype)
    bb = Backbone(m, None, MASK, [EOS], PAD, L, None, None)
    packed_differs = 0
    for blocks in (1, 2, 3):
        ps = _prompts(batch, blocks, seed=blocks)
        static = _same_as_released(bb, m, h, ps, None, "none", "exact")
        for K, mode in ((1, "none"), (3, "none"), (2, "sum")):
            assert _same_as_released(bb, m, h, ps, K, mode, "exact") == static, (K, mode, blocks)
            packed_differs += _same_as_released(bb, m, h, ps, K, mode, "packed") != static
    if dtype == torch.float32:
        assert packed_differs == 0  # fp32: their verify rounds within 1e-6 of the block forwards; no pick moves
    # bf16: how many packed runs part from static depends on the CPU's rounding (measured, AVX512: 6 of 9 per batch)


def test_the_released_verify_form_rounds_apart_from_ours_in_bf16(monkeypatch):
    """What the form changes: on CPU in bf16 their packed verify ([1, ML, S] mask: SDPA's math kernel) and the same
    call with our 4-D mask (its flash kernel) give different logits; the upstream numerics take theirs."""
    m = random_backbone(0, torch.bfloat16)
    B, M = 3, 4
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, CONFIG.vocab_size, (B, 3 * L), generator=g)
    pos = torch.arange(3 * L)[None].expand(B, -1)
    cache = m.new_cache(B, 3 * L)
    cand = torch.randint(3, CONFIG.vocab_size, (B, M, L), generator=g)
    with torch.no_grad():
        m.prefill(ids[:, : 2 * L], pos[:, : 2 * L], torch.ones(B, 2 * L, dtype=torch.bool), cache, L)
        with use_numerics("upstream", m):
            theirs = m.forward_candidates(cand, pos[:, 2 * L :], cache, verify="packed").logits
            fold = m.forward_candidates(cand, pos[:, 2 * L :], cache, verify="exact").logits
            monkeypatch.setattr(model_mod, "attention_mask", lambda module, mask, form=None: mask)  # the 4-D mask kept
            ours_form = m.forward_candidates(cand, pos[:, 2 * L :], cache, verify="packed").logits
    assert not torch.equal(theirs, ours_form)
    assert (theirs.float() - ours_form.float()).abs().max() < 0.5  # rounding, not a different computation
    assert not torch.equal(theirs, fold)


def _fake_flash(log):
    """A stand-in flash_attn_func: the layout and arguments of flash-attn's, computed by SDPA."""

    def flash_attn_func(q, k, v, causal=False, softmax_scale=None):
        log.append(dict(q=tuple(q.shape), k=tuple(k.shape), causal=causal, softmax_scale=softmax_scale))
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=False,
                                           scale=softmax_scale, enable_gqa=True)  # fmt: skip
        return y.transpose(1, 2).contiguous()

    return flash_attn_func


def test_all_ones_calls_route_to_flash_attn_where_it_can_run(monkeypatch):
    """Where released_unmasked_backend says flash_attn (the package installed, CUDA, fp16 / bf16), every all-ones call
    goes to flash_attn_func on (B, T, heads, hd) with causal=False and softmax_scale=head_dim**-0.5, and SDPA gets only
    the masked calls (a stand-in flash_attn_func, so it runs on any machine); our numerics never call it."""
    m, h = random_backbone(0, torch.bfloat16), random_head(10, torch.bfloat16)
    bb = Backbone(m, None, MASK, [EOS], PAD, L, None, None)
    ps = _prompts(3, 2, seed=5)
    pol = UpstreamSpeculative(2, h, "none", verify="packed")
    want = bb.generate(ps, pol, 2 * L)  # SDPA for the all-ones calls (this machine's fallback)
    log = []
    monkeypatch.setattr(model_mod, "_FLASH_ATTN", [_fake_flash(log), "stand-in"])
    monkeypatch.setattr(model_mod, "released_unmasked_backend", lambda device, dtype: "flash_attn")
    spy = SDPASpy(monkeypatch)
    got = bb.generate(ps, pol, 2 * L)
    assert got.tokens == want.tokens and _counters(got) == _counters(want)
    assert log and all(c["causal"] is False and c["softmax_scale"] == SCALE and len(c["q"]) == 4
                       and c["q"][2:] == (CONFIG.num_heads, CONFIG.head_dim) for c in log)  # fmt: skip
    sdpa = [c for c in spy.calls if c["mask"] is not None]  # the stand-in's own SDPA calls are unmasked
    assert len(sdpa) == len(spy.calls) - len(log)  # every SDPA call of the model is a masked one
    assert all(c["mask"].dim() == 3 for c in sdpa)  # the prefill (2 blocks) and the packed verifies
    n_block_calls = _counters(got)["denoise"] - _counters(got)["rounds"] + _counters(got)["store_kv"]
    assert len(log) == CONFIG.num_layers * n_block_calls + h.num_layers * _counters(got)["mrp"]
    log.clear()
    from mrp_repro.decoding import Static, generate

    generate(m, ps, Static(1), L, MASK, [EOS], 2 * L, pad_id=PAD)  # ours: SDPA with its own mask only
    assert not log


def test_flash_attn_package_on_a_gpu():
    """The real flash-attn: the upstream family's all-ones calls run flash_attn_func on a GPU in bf16, and decode as
    the released-form reference (which calls flash_attn_func itself) does, token for token and in every counter."""
    pytest.importorskip("flash_attn", reason="flash-attn (the optional extra) is not installed here: the released "
                        "code's GPU decode kernel cannot be run, the SDPA fallback is what runs")  # fmt: skip
    if not torch.cuda.is_available():
        pytest.skip("flash-attn is installed but no CUDA device is visible: flash_attn_func runs on CUDA only")
    from mrp_repro.runtime import upstream_attention

    dev = torch.device("cuda")
    m, h = random_backbone(0, torch.bfloat16, dev), random_head(10, torch.bfloat16, dev)
    assert model_mod.released_unmasked_backend(dev, torch.bfloat16) == "flash_attn"
    assert model_mod.released_unmasked_backend(dev, torch.float32) == "sdpa"  # flash-attn has no fp32 kernel
    assert upstream_attention(dev).startswith("flash_attn_func") or "float32" in upstream_attention(dev)
    bb = Backbone(m, None, MASK, [EOS], PAD, L, None, None)
    for blocks in (1, 2):
        ps = _prompts(3, blocks, seed=blocks)
        _same_as_released(bb, m, h, ps, None, "none", "exact")
        _same_as_released(bb, m, h, ps, 2, "none", "packed")


def test_provenance_records_the_attention_backend(smoke_profile):
    from mrp_repro import runtime

    prov = runtime.provenance(smoke_profile, "cpu")
    _, version = model_mod.flash_attn_package()
    assert prov["flash_attn"] == runtime._version("flash-attn")
    assert prov["upstream_attention"].startswith("sdpa (")  # flash-attn runs on CUDA only
    assert ("not installed" in prov["upstream_attention"]) == (version is None)
