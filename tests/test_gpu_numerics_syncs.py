"""Host syncs of the upstream family's speculative round (issue 36): ~32 per round before (every counter a .tolist(),
the acceptance a bool() per draft, the bonus and the fixed-point test one each), then one in decoding/upstream.py at the
round's end (any mask left, stalled), counting on the device and read once per generation; under the upstream numerics
model.attention_mask added one or two per backbone / head call (bool(mask.all()), the rows-equal test): 6.1-6.4 per
round in all. Now the mask's form is decided on the host (SDARModel._mask_form: whether key_valid was given, the
cache's KVCache.known_valid, the mask's structure; the head's calls by model.mask_form_hint): 2.2-2.6 per round in all
under either numerics, per-block and per-generation syncs included, asserted <= 3. Tokens and every counter are
unchanged: tests/test_upstream.py and tests/test_upstream_attention.py compare them with the released-form reference;
here the host-decided forms are checked against the masks' contents on every call (model.VERIFY_MASK_FORMS) and the
decodes against those that read every mask (the code before).

A host sync is counted wherever the decode asks the device for a value: bool(), int(), float(), .item(), .tolist(),
torch.equal, nonzero (a torch function mode sees every one of them, on CPU as on CUDA).

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_gpu_numerics_syncs.py
"""

from __future__ import annotations

import contextlib
import traceback
from collections import Counter

import pytest
import torch
from torch.overrides import TorchFunctionMode

from mrp_repro import model as model_mod
from mrp_repro.decoding import upstream as upstream_mod
from mrp_repro.decoding.mismatch import CONFIG, MASK, random_backbone, random_head, random_prompts
from mrp_repro.decoding.upstream import UpstreamSpeculative, UpstreamStatic, generate_upstream
from mrp_repro.model import SDARModel, attention_mask, mask_form_hint, mask_form_of, use_numerics

torch.set_num_threads(1)

SYNCS = {torch.Tensor.__bool__, torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__int__, torch.Tensor.__float__,
         torch.Tensor.__index__, torch.equal, torch.Tensor.nonzero, torch.nonzero}  # fmt: skip


class SyncCounter(TorchFunctionMode):
    """Counts host syncs by the file of the innermost mrp_repro frame that asked for them."""

    def __init__(self):
        super().__init__()
        self.by_file: Counter = Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in SYNCS:
            frames = [f for f in traceback.extract_stack()[:-1] if "mrp_repro" in f.filename]
            self.by_file[frames[-1].filename.rsplit("mrp_repro/", 1)[-1] if frames else "?"] += 1
        return func(*args, **(kwargs or {}))


def _decode(m, h, ps, verify="exact", K=3, mode="none"):
    pol = UpstreamSpeculative(K, h, draft_logits=mode, verify=verify) if K else UpstreamStatic()
    return generate_upstream(m, ps, pol, 4, MASK, [2], 16)


@pytest.mark.parametrize("verify", ["exact", "packed", "loop"])
@pytest.mark.parametrize("numerics", ["ours", "upstream"])
@pytest.mark.parametrize("batch", [1, 3])
@torch.no_grad()
def test_at_most_three_host_syncs_per_speculative_round(numerics, batch, verify, capsys, monkeypatch):
    """<= 3 host syncs per round in all (per-block and per-generation ones included), whichever numerics and verify;
    decoding/upstream.py one per round plus its per-block tests; model.py none (the masks' forms known on the host)."""
    monkeypatch.setattr(model_mod, "VERIFY_MASK_FORMS", False)  # that check reads every mask: syncs of its own
    m, h = random_backbone(0, torch.bfloat16), random_head(100, torch.bfloat16)
    ps = random_prompts(batch, 1, 9)
    with use_numerics(numerics, m, h), SyncCounter() as c:
        r = _decode(m, h, ps, verify)
    rounds, blocks = r.batch.spec_rounds, r.batch.blocks_decoded
    ours = c.by_file["decoding/upstream.py"]
    # one per round; per block: the finished test and the block's mask test; per generation: the counters, tokens
    assert ours <= rounds + 2 * blocks + 6, dict(c.by_file)
    total = sum(c.by_file.values())
    with capsys.disabled():
        print(f"\n  {numerics} numerics, batch {batch}, verify {verify}: {total / rounds:.1f} host syncs per round "
              f"({ours / rounds:.1f} in upstream.py, {c.by_file['model.py'] / rounds:.1f} in model.py) over "
              f"{rounds} rounds")  # fmt: skip
    assert c.by_file["model.py"] == 0, dict(c.by_file)
    assert total <= 3 * rounds, dict(c.by_file)


def _read_every_mask(monkeypatch):
    """The code before: no form known on the host, attention_mask reads every mask (mask_form_of)."""
    monkeypatch.setattr(SDARModel, "_mask_form", lambda self, *a, **k: None)
    monkeypatch.setattr(upstream_mod, "mask_form_hint", lambda *a, **k: contextlib.nullcontext())


def _everything(r):
    b = r.batch
    return r.tokens, [vars(s) for s in r.stats], vars(b)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@torch.no_grad()
def test_host_forms_are_the_masks_forms_and_decode_the_same(dtype, monkeypatch):
    """Every mask whose form the host decided has that form (model.VERIFY_MASK_FORMS: attention_mask reads it too
    and raises where they differ), and the decodes (tokens, RowStats, UpstreamCounters) equal those that read every
    mask: static and speculative, batch 1 and 3, prompts of 0-2 prefilled blocks, every verify path and draft mode."""
    m, h = random_backbone(0, dtype), random_head(100, dtype)
    cases = [(K, mode, verify) for K, mode in ((None, "none"), (1, "none"), (3, "none"), (2, "sum"))
             for verify in (("exact",) if K is None else ("exact", "packed", "loop", "checked"))]  # fmt: skip
    with use_numerics("upstream", m, h):
        got = {}
        monkeypatch.setattr(model_mod, "VERIFY_MASK_FORMS", True)
        for batch, max_len in ((1, 5), (3, 9), (3, 12)):
            ps = random_prompts(batch, batch + max_len, max_len)
            for K, mode, verify in cases:
                m.__dict__.pop("_fold_bitwise", None)
                got[batch, max_len, K, mode, verify] = _everything(_decode(m, h, ps, verify, K, mode))
        with monkeypatch.context() as mp:
            _read_every_mask(mp)
            mp.setattr(model_mod, "VERIFY_MASK_FORMS", False)
            for batch, max_len in ((1, 5), (3, 9), (3, 12)):
                ps = random_prompts(batch, batch + max_len, max_len)
                for K, mode, verify in cases:
                    m.__dict__.pop("_fold_bitwise", None)
                    want = _everything(_decode(m, h, ps, verify, K, mode))
                    assert got[batch, max_len, K, mode, verify] == want, (batch, max_len, K, mode, verify)


@torch.no_grad()
def test_mask_forms_decided_on_the_host_per_path(monkeypatch):
    """Per path and cache, the form _mask_form gives equals the mask's (checked on every call): a growing cache and a
    static one (all True once full, only then), 1- and 2-block prefills, the verify paths, key_valid given (unknown on
    the host: read from the mask, one or two syncs) and a cache written with a given key_valid (unknown from then on);
    a wrong form is caught (the check can fail)."""
    monkeypatch.setattr(model_mod, "VERIFY_MASK_FORMS", True)
    m, h = random_backbone(0, torch.float32), random_head(100, torch.float32)
    B, L = 3, 4
    ids = torch.randint(3, CONFIG.vocab_size, (B, 4 * L), generator=torch.Generator().manual_seed(0))
    pos = torch.arange(4 * L)[None].expand(B, -1)
    blk, bpos = ids[:, 2 * L : 3 * L], pos[:, 2 * L : 3 * L]
    cand = torch.stack([blk] * 3, 1)
    forms = []
    real = model_mod.attention_mask

    def spy(module, mask, form=None):
        forms.append(form)
        return real(module, mask, form)

    monkeypatch.setattr(model_mod, "attention_mask", spy)
    with use_numerics("upstream", m, h):
        for static, cap in ((False, 4 * L), (True, 4 * L), (True, 3 * L)):
            cache = m.new_cache(B, cap, static=static)
            m.prefill(ids[:, : 2 * L], pos[:, : 2 * L], None, cache, L)
            m.forward_block(blk, bpos, cache)
            for verify in ("fold", "loop", "packed", "checked"):
                m.forward_candidates(cand, bpos, cache, verify=verify)
                m.forward_candidates(cand[:, :1], bpos, cache, verify=verify)
            m.commit_block(blk, bpos, cache)  # the static cache of 3 blocks is full from here: all True
            m.forward_block(ids[:, 3 * L :], pos[:, 3 * L :], cache) if cache.length < cap else None
            assert cache.known_valid and None not in forms, (static, cap, forms)
            forms.clear()
        m.prefill(ids[:, :L], pos[:, :L], None, m.new_cache(B, L), L)  # one block: unmasked
        cache = m.new_cache(B, 4 * L)
        m.prefill(ids[:, : 2 * L], pos[:, : 2 * L], torch.ones(B, 2 * L, dtype=torch.bool), cache, L)
        assert forms[-1] is None and not cache.known_valid  # a key_valid tensor: its contents are the device's
        m.forward_block(blk, bpos, cache)
        assert forms[-1] is None  # the cache's validity unknown on the host: read from the mask
        padded = torch.ones(B, L, dtype=torch.bool)
        padded[0, 0] = False
        m.forward_block(blk, bpos, m.new_cache(B, L), padded)
        assert forms[-1] is None
        with mask_form_hint(h, "unmasked"):
            h(torch.zeros(B, L, CONFIG.hidden_size), blk, bpos, m.embed_tokens)  # no cache, no key_valid: all True
        assert mask_form_of(m._block_mask(None, padded)) == "rows"
        with pytest.raises(AssertionError, match="host said 'unmasked'"):
            attention_mask(m, m._block_mask(None, padded), "unmasked")
        with pytest.raises(AssertionError, match="host said 'shared'"), mask_form_hint(h, "shared"):
            h(torch.zeros(B, L, CONFIG.hidden_size), blk, bpos, m.embed_tokens)
