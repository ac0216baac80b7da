"""Chat SFT data (tasks/sft.py): the record layouts, the chat template split, block-aligned packing, GSM8K."""

import json
from pathlib import Path

import pytest

from mrp_repro.tasks.sft import SFTSourceError, load_sft_records, pack, to_turns, tokenize_records
from mrp_repro.tokenizer import build_qwen_tokenizer_offline, eos_token_ids

GSM8K_DIR = Path("/work/shared/data")


def test_record_layouts_agree():
    want = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    assert to_turns({"messages": want}) == want
    assert to_turns({"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]}) == want
    assert to_turns({"prompt": "q", "response": "a"}) == want
    assert to_turns({"question": "q", "answer": "a"}) == want
    with pytest.raises(SFTSourceError, match="messages"):
        to_turns({"text": "x"})


def test_chat_template_prompt_is_never_the_answer():
    tok = build_qwen_tokenizer_offline()
    eos = eos_token_ids(tok)[0]
    rec = {"messages": [{"role": "user", "content": "What is 2+3?"}, {"role": "assistant", "content": "It is 5."}]}
    ((p, a),) = tokenize_records([rec], tok, block_size=16, eos_id=eos)
    assert (len(p) + len(a)) % 16 == 0
    assert tok.decode(p).endswith("<|im_start|>assistant\n") and "What is 2+3?" in tok.decode(p)
    assert tok.decode(a).startswith("It is 5.<|im_end|>") and a[-1] == eos


def test_packing_is_block_aligned_and_keeps_samples_apart():
    samples = [([5] * 3, [6] * 5), ([7] * 4, [8] * 12), ([9] * 2, [1] * 6), ([3] * 40, [4] * 8)]
    p = pack(samples, seq_len=32, block_size=8)
    assert p.ids.shape[1] == 32
    for r in range(len(p)):
        starts = (p.pos[r] == 0) & (p.doc[r] >= 0)
        assert all(int(i) % 8 == 0 for i in starts.nonzero().flatten())
    # the 40-token prompt fills seq_len: dropped; prompts are never answer slots
    assert int((p.doc >= 0).sum()) == 8 + 16 + 8
    assert not (p.answer & (p.ids == 5)).any() and (p.answer & (p.ids == 8)).sum() == 12


def test_local_jsonl_dir_and_missing_sources(tmp_path):
    d = tmp_path / "sft"
    d.mkdir()
    (d / "a.jsonl").write_text("\n".join(json.dumps({"prompt": f"p{i}", "response": f"r{i}"}) for i in range(5)))
    recs = load_sft_records(str(d), max_samples=3)
    assert [r["prompt"] for r in recs] == ["p0", "p1", "p2"]
    with pytest.raises(SFTSourceError, match="hub dataset id.*local directory"):
        load_sft_records(str(tmp_path / "nowhere"))
    with pytest.raises(SFTSourceError, match="gsm8k/train.jsonl"):
        load_sft_records("gsm8k", data_dir=tmp_path)


@pytest.mark.skipif(not (GSM8K_DIR / "gsm8k" / "train.jsonl").is_file(), reason="no shared GSM8K train split")
def test_gsm8k_train_split():
    recs = load_sft_records("gsm8k", data_dir=GSM8K_DIR, max_samples=4)
    assert len(recs) == 4 and "####" in recs[0]["answer"]
    assert to_turns(recs[0])[1]["content"] == recs[0]["answer"]


def test_pack_to_disk_streams_the_same_rows_as_pack_and_names_damage(tmp_path):
    """The streaming packer (what a million-record SFT set goes through) writes exactly pack()'s rows, in chunks
    of a few rows (memory bounded by chunk_rows), and a truncated file is named with its fix."""
    import random

    import torch

    from mrp_repro.tasks.sft import open_packed, pack_to_disk

    rng = random.Random(0)
    samples = [([rng.randrange(1, 50)] * rng.randrange(1, 9), [rng.randrange(1, 50)] * (8 * rng.randrange(1, 4)))
               for _ in range(200)]  # fmt: skip
    ref = pack(samples, seq_len=64, block_size=8, pad_id=0)
    meta = pack_to_disk(iter(samples), 64, 8, tmp_path / "p", pad_id=0, chunk_rows=7)  # many partial chunks
    got, meta2 = open_packed(tmp_path / "p")
    assert meta == meta2 and meta["rows"] == len(ref) > 20
    for k in ("ids", "doc", "pos", "answer"):
        assert torch.equal(got.rows(torch.arange(len(ref)))[k], getattr(ref, k)), k
    with open(tmp_path / "p" / "pos.bin", "r+b") as fh:
        fh.truncate(100)
    with pytest.raises(SFTSourceError, match="pos.bin has 100 bytes.*delete"):
        open_packed(tmp_path / "p")


def test_online_packed_cache_is_reused_and_follows_the_data(tmp_path):
    """training.online.load_packed packs once into <parent>/sft-packed-<key>/; an unchanged source reuses it (no
    rewrite), an edited one gets a new key (the resume check then sees other data)."""
    from types import SimpleNamespace

    from mrp_repro.config import load_profile
    from mrp_repro.training.online import load_packed

    src = tmp_path / "sft"
    src.mkdir()
    lines = [json.dumps({"prompt": f"q{i}", "response": f"answer {i}"}) for i in range(30)]
    (src / "a.jsonl").write_text("\n".join(lines) + "\n")
    P = load_profile("smoke", {"mrp_training.sft_source": str(src), "mrp_training.seq_len": 32})
    tok = build_qwen_tokenizer_offline()
    bb = SimpleNamespace(tokenizer=tok, eos_ids=eos_token_ids(tok), pad_id=0)
    mem, sha_mem = load_packed(P, bb)
    disk, sha = load_packed(P, bb, cache_parent=tmp_path)
    (cache,) = tmp_path.glob("sft-packed-*")
    assert len(disk) == len(mem) and (disk.ids.long() == mem.ids).all()
    stamp = (cache / "ids.bin").stat().st_mtime_ns
    assert load_packed(P, bb, cache_parent=tmp_path)[1] == sha and (cache / "ids.bin").stat().st_mtime_ns == stamp
    with open(src / "a.jsonl", "a") as fh:
        fh.write(json.dumps({"prompt": "new", "response": "one more"}) + "\n")
    assert load_packed(P, bb, cache_parent=tmp_path)[1] != sha and len(list(tmp_path.glob("sft-packed-*"))) == 2
