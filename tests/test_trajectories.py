"""Trajectory collection: layout, consistency with inference, resume, corruption and mismatch errors."""

import json
import random

import pytest
import torch

from mrp_repro.model import ModelConfig, SDARModel
from mrp_repro.trajectories import TrajectoryError, collect, load_trajectories, read_manifest

MASK, EOS, L = 1, 2, 4


def tiny_model(seed=0):
    torch.manual_seed(seed)
    cfg = ModelConfig(
        vocab_size=20, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=2, num_kv_heads=1, head_dim=16
    )
    return SDARModel(cfg).init_weights(0.2).eval()


def examples(n, seed=0):
    rng = random.Random(seed)
    return [
        (
            [rng.randrange(3, 20) for _ in range(rng.choice([3, 4, 8]))],
            [rng.randrange(3, 20) for _ in range(rng.choice([5, 8, 11]))],
        )
        for _ in range(n)
    ]


def run(model, items, source, out, hook=None, shard_size=4):
    return collect(
        model,
        MASK,
        items,
        source,
        out,
        shard_size,
        seed=0,
        progress=False,
        block_size=L,
        eos_ids=[EOS],
        pad_id=0,
        max_new_tokens=8,
        hook=hook,
    )


class Stop(Exception):
    pass


@pytest.mark.parametrize("source", ["gt-multi", "self"])
def test_resume_equals_uninterrupted(tmp_path, source):
    model = tiny_model()
    items = examples(10) if source != "self" else [p for p, _ in examples(10)]
    run(model, items, source, tmp_path / "full")

    def hook(example, block):
        if example == 6:  # inside the second shard (examples 4..7)
            raise Stop

    with pytest.raises(Stop):
        run(model, items, source, tmp_path / "cut", hook=hook)
    man = read_manifest(tmp_path / "cut")
    assert [e["index"] for e in man["shards"]] == [0] and not man["complete"]
    with pytest.raises(TrajectoryError, match="unfinished"):
        load_trajectories(tmp_path / "cut")
    run(model, items, source, tmp_path / "cut")
    a, b = load_trajectories(tmp_path / "full"), load_trajectories(tmp_path / "cut")
    assert len(a) > 0 and a.data.table.equals(b.data.table)
    assert read_manifest(tmp_path / "cut")["n_rows"] == len(a)


def test_gt_rows_match_inference(tmp_path):
    """Stored hidden states equal the cached forward_block the decoders run; reveals are recorded."""
    model = tiny_model()
    items = examples(4)
    run(model, items, "gt", tmp_path)
    ds = load_trajectories(tmp_path)
    H = model.config.hidden_size
    for row in ds.select(range(min(6, len(ds)))):
        S = row["n_steps"]
        ids = torch.tensor(row["ids"]).view(S + 1, L)
        hid = torch.tensor(row["hidden"]).view(S + 1, L, H)
        ctx = torch.tensor(row["context_ids"])[None]
        assert row["block_start"] == ctx.shape[1] and ctx.shape[1] % L == 0
        pos = row["block_start"] + torch.arange(L)[None]
        cache = model.new_cache(1, max(ctx.shape[1], 1))
        with torch.no_grad():
            if ctx.shape[1]:
                model.prefill(ctx, torch.arange(ctx.shape[1])[None], torch.ones_like(ctx, dtype=torch.bool), cache, L)
            for s in range(S + 1):
                ref = model.forward_block(ids[s][None], pos, cache).hidden[0]
                torch.testing.assert_close(hid[s], ref, atol=1e-4, rtol=1e-4)
        rs = torch.tensor(row["reveal_step"])
        assert (rs == 1).sum() == 1 and torch.tensor(row["reveal_pos"]).tolist() == (
            rs == 1
        ).nonzero().flatten().tolist()
        assert ids[0][rs == 1].tolist() == [MASK] and ids[1][rs == 1].tolist() == row["reveal_tok"]
        assert (ids[S] == MASK).any(), "every step leaves a supervised slot"
        assert ids[1][row["next_pos"]] == MASK


def test_self_rows_follow_static_decoding(tmp_path):
    from mrp_repro.decoding.engine import Static, generate

    model = tiny_model()
    prompts = [p for p, _ in examples(3)]
    run(model, prompts, "self", tmp_path)
    ds = load_trajectories(tmp_path)
    res = generate(model, prompts, Static(), L, MASK, [EOS], 8, pad_id=0)
    assert len(ds) > 0
    for r in range(len(prompts)):
        rows = [row for row in ds if row["example"] == r]
        trace = [(e["block"], e["pos"], e["token"]) for e in res.trace if e["row"] == r]
        by_block = {}
        for blk, pos, tok in trace:
            by_block.setdefault(blk, []).append((pos, tok))
        # one row per step but the last of each block; its reveal and next pick are the backbone's static picks
        got = {}
        for row in rows:
            got.setdefault(row["step"], []).append(row)
        blocks = sorted(by_block)
        assert len(rows) == sum(len(v) - 1 for v in by_block.values())
        seq = [(row["reveal_pos"][0], row["reveal_tok"][0], row["next_pos"], row["next_tok"]) for row in rows]
        want = [(*v[s], *v[s + 1]) for b in blocks for v in [by_block[b]] for s in range(len(v) - 1)]
        assert seq == want


def test_corrupted_shard_is_named(tmp_path):
    model = tiny_model()
    run(model, examples(8), "gt", tmp_path / "full")
    run(model, examples(8), "gt", tmp_path / "bad")
    shard = tmp_path / "bad" / "shard-00001.parquet"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size: only the sha256 sees it
    shard.write_bytes(bytes(data))
    with pytest.raises(TrajectoryError, match="shard-00001.parquet is corrupted.*delete shard-00001.parquet and rerun"):
        load_trajectories(tmp_path / "bad")
    shard.unlink()  # the advice: delete it and rerun
    with pytest.raises(TrajectoryError, match="missing; rerun"):
        load_trajectories(tmp_path / "bad")
    run(model, examples(8), "gt", tmp_path / "bad")
    assert load_trajectories(tmp_path / "bad").data.table.equals(load_trajectories(tmp_path / "full").data.table)


def test_rerun_repairs_a_corrupted_shard_without_deleting_it(tmp_path):
    """Re-running the collection redoes a corrupted shard by itself (resume hashes every kept shard)."""
    model = tiny_model()
    run(model, examples(8), "gt", tmp_path)
    want = load_trajectories(tmp_path).data.table
    shard = tmp_path / "shard-00001.parquet"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    run(model, examples(8), "gt", tmp_path)
    assert load_trajectories(tmp_path).data.table.equals(want)


def test_truncated_shard_with_verify_off_is_named(tmp_path):
    run(tiny_model(), examples(8), "gt", tmp_path)
    shard = tmp_path / "shard-00000.parquet"
    shard.write_bytes(shard.read_bytes()[:100])
    with pytest.raises(TrajectoryError, match="shard-00000.parquet is truncated.*delete shard-00000.parquet"):
        load_trajectories(tmp_path, verify=False)


def test_mismatched_manifest(tmp_path):
    run(tiny_model(0), examples(4), "gt", tmp_path)
    with pytest.raises(TrajectoryError, match="another backbone"):
        run(tiny_model(1), examples(4), "gt", tmp_path)
    with pytest.raises(TrajectoryError, match="source"):
        run(tiny_model(0), examples(4), "gt-multi", tmp_path)
    with pytest.raises(TrajectoryError, match="another backbone"):
        load_trajectories(tmp_path, expect={"backbone_hash": "0" * 16})


def test_an_older_manifest_without_a_rerun_command_gets_the_callers_and_never_a_placeholder(tmp_path):
    """A manifest written before collections recorded their command (issue 39: the advice then read
    `--profile <profile>`): the caller's command is named (the stages and head training pass their profile's),
    and with none known the advice is words with no placeholder to fill in."""
    run(tiny_model(), examples(8), "gt", tmp_path)
    mpath = tmp_path / "manifest.json"
    manifest = json.loads(mpath.read_text())
    manifest.pop("rerun", None)
    manifest["complete"] = False  # an unfinished older collection: loading it advises a rerun
    mpath.write_text(json.dumps(manifest))
    cmd = "python -m mrp_repro.stages head --profile smoke"
    with pytest.raises(TrajectoryError) as e:
        load_trajectories(tmp_path, rerun=cmd)
    assert f"rerun {cmd} to resume it" in str(e.value), str(e.value)
    with pytest.raises(TrajectoryError) as e:
        load_trajectories(tmp_path)
    assert "<" not in str(e.value) and "trajectories.collect with the same arguments" in str(e.value), str(e.value)
    mpath.write_text("{cut")
    with pytest.raises(TrajectoryError) as e:
        load_trajectories(tmp_path, rerun=cmd)
    assert str(e.value).endswith(f"and rerun {cmd}"), str(e.value)


def test_loading_names_the_rows_by_their_shards_and_never_pickles_the_table(tmp_path, monkeypatch):
    """load_trajectories gives the Dataset a fingerprint from the shards' recorded sha256s: left to datasets, the
    fingerprint pickles the whole in-memory table (several copies at once: chain16's head training was OOM-killed at
    24 GB while loading its 172k-row collection). Another recorded shard gives another fingerprint."""
    import datasets.fingerprint

    run(tiny_model(), examples(8), "gt", tmp_path)

    def refuse(*a, **k):
        raise AssertionError("datasets hashed the table itself")

    monkeypatch.setattr(datasets.fingerprint, "generate_fingerprint", refuse)
    monkeypatch.setattr(datasets.arrow_dataset, "generate_fingerprint", refuse)
    first = load_trajectories(tmp_path)._fingerprint
    assert first == load_trajectories(tmp_path)._fingerprint  # the same rows: the same name
    mpath = tmp_path / "manifest.json"
    manifest = json.loads(mpath.read_text())
    manifest["shards"][0]["sha256"] = "0" * 64  # another recorded shard (not verified here)
    mpath.write_text(json.dumps(manifest))
    assert load_trajectories(tmp_path, verify=False)._fingerprint != first
