"""The backbone against transformers' Qwen3, and its four attention paths against each other."""

import json

import pytest
import torch

from mrp_repro.checkpoint import CheckpointError, load_backbone, save_backbone
from mrp_repro.model import VERIFY_PATHS, ModelConfig, SDARModel, block_causal_mask

TINY = ModelConfig(
    vocab_size=61,
    hidden_size=48,
    intermediate_size=96,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=12,
)


def random_model(cfg=TINY, seed=0):
    g = torch.Generator().manual_seed(seed)
    return SDARModel(cfg).init_weights(std=0.2, generator=g).eval()


@pytest.fixture(scope="module")
def hf_qwen3_dir(tmp_path_factory):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3Config(
        vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, tie_word_embeddings=False, rope_theta=10000.0,
    )  # fmt: skip
    model = Qwen3ForCausalLM(cfg).eval()
    # Random init leaves the norms at 1: perturb them so the test sees q_norm/k_norm and friends.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.3 * torch.randn_like(p))
    d = tmp_path_factory.mktemp("qwen3")
    model.save_pretrained(d)
    return d, model


def test_matches_transformers_qwen3(hf_qwen3_dir):
    d, hf = hf_qwen3_dir
    ours = load_backbone(d)
    ids = torch.randint(0, 97, (4, 13), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = hf(ids).logits
        pos = torch.arange(13)[None].expand(4, -1)
        out = ours(ids, pos, block_causal_mask(torch.ones(4, 13, dtype=torch.bool), 1))
    assert out.hidden.shape == (4, 13, 64)
    torch.testing.assert_close(out.logits, ref, atol=1e-4, rtol=0)


def test_sharded_checkpoint_and_sdar_model_type(hf_qwen3_dir, tmp_path):
    d, hf = hf_qwen3_dir
    hf.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").exists()
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["model_type"] = "sdar"
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    a, b = load_backbone(d), load_backbone(tmp_path)
    for (n1, p1), (n2, p2) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert n1 == n2 and torch.equal(p1, p2)


def test_save_load_roundtrip(tmp_path):
    m = random_model()
    save_backbone(m, tmp_path)
    m2 = load_backbone(tmp_path)
    assert m2.config == m.config
    for k, v in m.state_dict().items():
        assert torch.equal(v, m2.state_dict()[k])


def _edit_checkpoint(src_model, tmp_path, edit):
    from safetensors.torch import load_file, save_file

    save_backbone(src_model, tmp_path)
    t = load_file(tmp_path / "model.safetensors")
    cfg = json.loads((tmp_path / "config.json").read_text())
    edit(t, cfg)
    save_file(t, tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps(cfg))


def test_loader_errors_name_the_problem(tmp_path):
    m = random_model()
    _edit_checkpoint(m, tmp_path / "a", lambda t, c: t.pop("model.layers.1.mlp.up_proj.weight"))
    with pytest.raises(CheckpointError, match=r"missing tensors \['model.layers.1.mlp.up_proj.weight'\]"):
        load_backbone(tmp_path / "a")

    def wrong_shape(t, c):
        t["model.norm.weight"] = torch.ones(7)

    _edit_checkpoint(m, tmp_path / "b", wrong_shape)
    with pytest.raises(
        CheckpointError, match=r"wrong shapes \['model.norm.weight: checkpoint \(7,\) vs model \(48,\)'\]"
    ):
        load_backbone(tmp_path / "b")

    def extra(t, c):
        t["model.layers.9.foo.weight"] = torch.ones(2)

    _edit_checkpoint(m, tmp_path / "c", extra)
    with pytest.raises(CheckpointError, match="unexpected tensors"):
        load_backbone(tmp_path / "c")

    _edit_checkpoint(m, tmp_path / "d", lambda t, c: c.update(model_type="llama"))
    with pytest.raises(CheckpointError, match="model_type='llama'"):
        load_backbone(tmp_path / "d")

    with pytest.raises(CheckpointError, match="not a checkpoint directory"):
        load_backbone(tmp_path / "nowhere" / "x.bin")


@pytest.mark.parametrize("block", [4, 16])
def test_cached_block_by_block_equals_full_block_causal(block):
    m = random_model(seed=block)
    B, n_blocks = 3, 4
    T = block * n_blocks
    ids = torch.randint(0, TINY.vocab_size, (B, T), generator=torch.Generator().manual_seed(2))
    pos = torch.arange(T)[None].expand(B, -1)
    with torch.no_grad():
        full = m(ids, pos, block_causal_mask(torch.ones(B, T, dtype=torch.bool), block))
        cache = m.new_cache(B, T)
        pre = m.prefill(
            ids[:, : 2 * block], pos[:, : 2 * block], torch.ones(B, 2 * block, dtype=torch.bool), cache, block
        )
        got = [pre.logits]
        for b in range(2, n_blocks):
            sl = slice(b * block, (b + 1) * block)
            read = m.forward_block(ids[:, sl], pos[:, sl], cache)
            assert cache.length == b * block  # reading must not write
            wrote = m.commit_block(ids[:, sl], pos[:, sl], cache)
            torch.testing.assert_close(read.logits, wrote.logits, atol=1e-5, rtol=0)
            got.append(read.logits)
    torch.testing.assert_close(torch.cat(got, 1), full.logits, atol=1e-4, rtol=0)


def test_packed_candidates_equal_one_by_one():
    m = random_model(seed=3)
    B, L, M = 2, 8, 4
    prefix = torch.randint(0, TINY.vocab_size, (B, 2 * L), generator=torch.Generator().manual_seed(4))
    pos = torch.arange(3 * L)[None].expand(B, -1)
    cands = torch.randint(0, TINY.vocab_size, (B, M, L), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        cache = m.new_cache(B, 3 * L)
        m.prefill(prefix, pos[:, : 2 * L], torch.ones(B, 2 * L, dtype=torch.bool), cache, L)
        got = {p: m.forward_candidates(cands, pos[:, 2 * L :], cache, verify=p) for p in VERIFY_PATHS}
        for j in range(M):
            one = m.forward_block(cands[:, j], pos[:, 2 * L :], cache)
            for p in ("exact", "fold", "loop"):  # the lossless paths: bitwise (tests/test_lossless_bf16.py for bf16)
                assert torch.equal(got[p].logits[:, j], one.logits) and torch.equal(got[p].hidden[:, j], one.hidden)
            torch.testing.assert_close(got["packed"].logits[:, j], one.logits, atol=1e-5, rtol=0)
            torch.testing.assert_close(got["packed"].hidden[:, j], one.hidden, atol=1e-5, rtol=0)
        assert cache.length == 2 * L  # a verify reads the cache, never writes it
    with pytest.raises(ValueError, match="cannot write"):
        m(cands[:, 0], pos[:, 2 * L :], torch.ones(B, 1, L, L, dtype=torch.bool), cache, write_cache=True, fold=2)


def test_padding_rows_do_not_leak():
    """A row left-padded by a block gives the logits it gets alone."""
    m = random_model(seed=6)
    L = 4
    ids = torch.randint(0, TINY.vocab_size, (1, 2 * L), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        alone = m(ids, torch.arange(2 * L)[None], block_causal_mask(torch.ones(1, 2 * L, dtype=torch.bool), L)).logits
        padded = torch.cat([torch.zeros(1, L, dtype=torch.long), ids], 1)
        valid = torch.cat([torch.zeros(1, L, dtype=torch.bool), torch.ones(1, 2 * L, dtype=torch.bool)], 1)
        pos = torch.cat([torch.zeros(1, L, dtype=torch.long), torch.arange(2 * L)[None]], 1)
        out = m(padded, pos, block_causal_mask(valid, L)).logits[:, L:]
    torch.testing.assert_close(out, alone, atol=1e-5, rtol=0)


def test_hub_id_offline_gives_actionable_error(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(CheckpointError, match="model.local_dir"):
        load_backbone("JetLM/SDAR-1.7B-Chat", revision="main")


def test_hub_id_resolves_from_a_hub_cache(monkeypatch, tmp_path):
    """A repo id + revision found in the hub's cache layout loads offline, as on a GPU box with a warm cache."""
    m = random_model()
    snap = tmp_path / "hub" / "models--JetLM--SDAR-tiny-test" / "snapshots" / ("a" * 40)
    save_backbone(m, snap)
    refs = snap.parents[1] / "refs"
    refs.mkdir()
    (refs / "main").write_text("a" * 40)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    import importlib

    import huggingface_hub.constants

    importlib.reload(huggingface_hub.constants)
    try:
        got = load_backbone("JetLM/SDAR-tiny-test", revision="main")
    finally:
        monkeypatch.undo()
        importlib.reload(huggingface_hub.constants)
    assert torch.equal(got.lm_head.weight, m.lm_head.weight)
