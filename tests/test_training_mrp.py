"""MRP training: K-step chaining, the loss going down, checkpoint resume, head cost ratio."""

import json
import random
from types import SimpleNamespace

import pytest
import torch

from mrp_repro.config import load_profile
from mrp_repro.measure.cost import head_cost_ratio
from mrp_repro.model import ModelConfig, SDARModel
from mrp_repro.mrp import MRPHead, load_head
from mrp_repro.training.mrp import train_mrp
from mrp_repro.trajectories import collect

MASK, EOS, L = 1, 2, 4


def tiny_model(seed=0):
    torch.manual_seed(seed)
    cfg = ModelConfig(
        vocab_size=20, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=2, num_kv_heads=1, head_dim=16
    )
    return SDARModel(cfg).init_weights(0.2).eval()


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    torch.set_num_threads(1)
    model = tiny_model()
    rng = random.Random(0)
    items = [
        (
            [rng.randrange(3, 20) for _ in range(rng.choice([4, 8]))],
            [rng.randrange(3, 20) for _ in range(rng.choice([8, 12]))],
        )
        for _ in range(48)
    ]
    d = tmp_path_factory.mktemp("traj")
    collect(model, MASK, items, "gt-multi", d, 16, seed=0, progress=False, block_size=L, eos_ids=[EOS])
    return model, d


def profile(**over):
    base = {
        "block_size": L,
        "mrp_training.steps": 40,
        "mrp_training.batch_size": 16,
        "mrp_training.ckpt_every": 10,
        "mrp.k_steps": 2,
        "mrp_training.lr": 3e-3,
        # a random start, so that "training reduces the KL" is a real, failable claim on a random backbone
        "mrp.init": "normal",
    }
    base.update(over)
    return load_profile("smoke").replace(base)


@pytest.mark.parametrize("objective", ["residual", "direct"])
def test_k_step_chain_is_sum_of_single_steps(objective):
    model = tiny_model()
    head = MRPHead(model.config, 1, objective).init_weights("normal", 0.1)
    g = torch.Generator().manual_seed(0)
    h_A = torch.randn(2, L, 32, generator=g)
    pos = torch.arange(L)[None].expand(2, -1)
    steps = [torch.randint(3, 20, (2, L), generator=g) for _ in range(3)]
    chained = head.chain(h_A, steps, pos, model.embed_tokens)
    h, acc = h_A, h_A
    for k, ids in enumerate(steps):
        h_C = head(h, ids, pos, model.embed_tokens)
        h = head.step(h, ids, pos, model.embed_tokens)
        acc = acc + h_C if objective == "residual" else h_C
        torch.testing.assert_close(chained[k], h)
        torch.testing.assert_close(chained[k], acc)


def test_training_reduces_heldout_kl_and_resumes(setup, tmp_path):
    model, d = setup
    bb = SimpleNamespace(model=model, mask_id=MASK)
    p = profile()
    full = train_mrp(p, bb, d, tmp_path / "full", progress=False)
    assert full["finished"]
    # a real improvement: the head's held-out KL falls far below its initial value ...
    assert full["heldout_kl"] < 0.3 * full["initial_heldout_kl"]
    # ... and ends near (within 2x of) the uncorrected KL(B || A) that a zero residual would give
    assert full["heldout_kl"] < 2 * full["heldout_baseline_kl"]
    for f in ("loss_curve.csv", "loss_curve.json", "metrics.json", "done.json", "head/mrp.safetensors"):
        assert (tmp_path / "full" / f).exists()

    # killed after 15 steps (checkpoint at 10), resumed: identical head
    part = train_mrp(p, bb, d, tmp_path / "cut", progress=False, stop_after=15)
    assert not part["finished"]
    resumed = train_mrp(p, bb, d, tmp_path / "cut", progress=False)
    assert resumed["heldout_kl"] == full["heldout_kl"]
    a = load_head(tmp_path / "full" / "head", model.config)
    b = load_head(tmp_path / "cut" / "head", model.config)
    for (n, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(x, y), n


def test_zero_out_init_starts_at_the_uncorrected_baseline(setup, tmp_path):
    model, d = setup
    m = train_mrp(
        profile(**{"mrp.init": "zero-out", "mrp_training.steps": 1}),
        SimpleNamespace(model=model, mask_id=MASK),
        d,
        tmp_path,
        progress=False,
    )
    assert m["initial_heldout_kl"] == pytest.approx(m["heldout_baseline_kl"], rel=1e-5)


def test_k_steps_beyond_stored_chain_is_an_error(setup, tmp_path):
    model, d = setup
    with pytest.raises(ValueError, match="chain"):
        train_mrp(
            profile(**{"mrp.k_steps": 5}), SimpleNamespace(model=model, mask_id=MASK), d, tmp_path, progress=False
        )


def test_head_cost_ratio():
    model = tiny_model()
    head = MRPHead(model.config, 1).init_weights()
    r = head_cost_ratio(model, head, batch=4, block=L, repeats=3)
    assert 0 < r < 10


def test_head_from_released_state_dict():
    from mrp_repro.mrp import PREFIX, head_from_released, split_released_state

    model = tiny_model()
    head = MRPHead(model.config, 3).init_weights("normal", 0.05)
    state = {f"model.{k}": v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    state["lm_head.weight"] = model.lm_head.weight
    state.update({PREFIX + k: v for k, v in head.state_dict().items()})
    h, bb = split_released_state(state)
    assert "lm_head.weight" in bb and not any(k.startswith("mrp_modules") for k in bb)
    got = head_from_released(state, model.config)
    assert got.num_layers == 3
    for k, v in head.state_dict().items():
        assert torch.equal(got.state_dict()[k], v)


def test_training_beside_a_bf16_backbone(tmp_path):
    """MRP_REPRO_DTYPE=bfloat16 used to fail at the first matmul ("expected m1 and m2 to have the same dtype"):
    the head now keeps fp32 master weights and computes under autocast in the backbone's dtype."""
    model = tiny_model().to(torch.bfloat16)
    rng = random.Random(0)
    items = [([rng.randrange(3, 20) for _ in range(4)], [rng.randrange(3, 20) for _ in range(8)]) for _ in range(24)]
    d = tmp_path / "traj"
    collect(model, MASK, items, "gt", d, 16, seed=0, progress=False, block_size=L, eos_ids=[EOS])
    p = profile(**{"mrp_training.steps": 20, "mrp.k_steps": 1})
    m = train_mrp(p, SimpleNamespace(model=model, mask_id=MASK), d, tmp_path / "out", progress=False)
    losses = [r["loss"] for r in json.loads((tmp_path / "out" / "loss_curve.json").read_text())["train"]]
    assert all(torch.isfinite(torch.tensor(losses)))
    assert sum(losses[-5:]) < 0.5 * sum(losses[:5])
    assert m["heldout_kl"] < 0.3 * m["initial_heldout_kl"]
    head = load_head(tmp_path / "out" / "head", model.config, dtype=torch.bfloat16)  # as stages.head loads it
    assert head.eh_proj.weight.dtype == torch.bfloat16


def test_pick_loss_and_pick_accuracy_against_a_per_row_reference(setup):
    """mrp_loss(pick_weight=w) = the plain loss + w * sum over rows of -log softmax(log-confidence of A + C_1 over
    the still-masked slots)[next pick] / denom; the held-out pick accuracy counts the rows whose most confident
    slot is the backbone's recorded next pick. Both computed here one row at a time."""
    from mrp_repro.training.mrp import TrajectoryData, build_head_cache, mrp_loss
    from mrp_repro.trajectories import load_trajectories

    model, d = setup
    data = TrajectoryData([load_trajectories(d)], MASK, L)
    b = data.batch(torch.arange(min(24, len(data))), "cpu")
    head = MRPHead(model.config, 1).init_weights("normal", 0.3, torch.Generator().manual_seed(0))
    plain, st = mrp_loss(head, model, b, 1, MASK, L, with_stats=True)
    w = 0.7
    picked = mrp_loss(head, model, b, 1, MASK, L, pick_weight=w)
    denom = b["answer_mask"].sum().float()
    ce, hits, rows = 0.0, 0, 0
    with torch.no_grad():
        cache = build_head_cache(head, model, b, L)
        h1 = head.step(b["hidden"][:, 0], b["ids"][:, 1], b["positions"], model.embed_tokens, cache)
        for r in range(len(b["ids"])):
            still = (b["ids"][r, 1] == MASK) & (b["n_steps"][r] >= 1)
            if not still.any():
                continue
            slots = still.nonzero().flatten().tolist()
            z = model.lm_head(h1[r, slots]).double()
            z[:, MASK] = float("-inf")
            logconf = z.max(-1).values - torch.logsumexp(z, -1)
            target = slots.index(int(b["next_pos"][r]))
            ce += float(-torch.log_softmax(logconf, -1)[target])
            hits += int(int(logconf.argmax()) == target)
            rows += 1
    assert rows >= 10 and st["pick_rows"] == rows and st["pick_hits"] == hits
    assert int(((b["ids"][:, 1] == MASK).sum(1) > 1).sum()) >= 3  # rows where the pick is a real choice
    assert float(picked) == pytest.approx(float(plain) + w * ce / float(denom), rel=1e-5)
    assert 0 <= st["pick_hits_base"] <= rows


def test_pick_loss_with_the_online_recipe_is_an_error(tmp_path):
    from mrp_repro.config import ConfigError
    from mrp_repro.training.online import train_online

    P = load_profile("smoke").replace({"mrp_training.recipe": "online", "mrp_training.pick_loss_weight": 1.0})
    bb = SimpleNamespace(model=tiny_model(), mask_id=MASK)
    with pytest.raises(ConfigError, match="recipe: offline"):
        train_online(P, bb, tmp_path, progress=False)


def test_trajectory_data_from_dirs_equals_a_per_row_reference(setup, tmp_path):
    """TrajectoryData.from_dirs (one collection at a time, tensors allocated from the manifests) holds, row for row,
    what a plain loop over the rows of every collection gives: ids and hidden states padded to S + 1 states by
    repeating the last, and every per-row field; the same as the constructor on loaded datasets."""
    import numpy as np

    from mrp_repro.training.mrp import TrajectoryData
    from mrp_repro.trajectories import load_trajectories

    model, d = setup
    rng = random.Random(1)
    items = [([rng.randrange(3, 20) for _ in range(4)], [rng.randrange(3, 20) for _ in range(8)]) for _ in range(20)]
    d2 = tmp_path / "self"
    collect(model, MASK, items, "self", d2, 8, seed=1, progress=False, block_size=L, eos_ids=[EOS])
    got = TrajectoryData.from_dirs([d, d2], MASK, L)
    same = TrajectoryData([load_trajectories(d), load_trajectories(d2)], MASK, L)
    rows = [(si, r) for si, dd in enumerate([d, d2]) for r in load_trajectories(dd)]
    assert len(got) == len(rows) and got.S >= 1 and len({si for si, _ in rows}) == 2
    H = model.config.hidden_size
    for i, (si, r) in enumerate(rows):
        ids = np.asarray(r["ids"]).reshape(-1, L)
        hid = np.asarray(r["hidden"], dtype=np.float32).reshape(ids.shape[0], L, H)
        n = ids.shape[0]
        want_ids = np.concatenate([ids, np.repeat(ids[-1:], got.S + 1 - n, 0)])
        want_hid = np.concatenate([hid, np.repeat(hid[-1:], got.S + 1 - n, 0)])
        assert torch.equal(got.ids[i], torch.from_numpy(want_ids)), i
        assert torch.equal(got.hidden[i], torch.from_numpy(want_hid)), i
        assert got.context[i] == r["context_ids"] and got.example[i] == (si, r["example"])
        assert got.answer_mask[i].tolist() == r["answer_mask"] and int(got.source[i]) == si
        assert int(got.n_steps[i]) == r["n_steps"] and int(got.block_start[i]) == r["block_start"]
        assert int(got.next_pos[i]) == r["next_pos"] and float(got.t[i]) == max(np.float32(r["t"]), np.float32(1e-3))
    for name in ("ids", "hidden", "answer_mask", "n_steps", "t", "block_start", "source", "next_pos"):
        assert torch.equal(getattr(got, name), getattr(same, name)), name
    assert got.context == same.context and got.example == same.example
