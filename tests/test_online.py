"""Online MRP training (training/online.py): same loss as the offline `gt` path on the same draws, training
lowers held-out KL below the uncorrected KL(B || A), exact resume, packing masks."""

import json
import random
from types import SimpleNamespace

import pytest
import torch

from mrp_repro.config import load_profile
from mrp_repro.mrp import MRPHead, load_head
from mrp_repro.tasks.sft import pack
from mrp_repro.tokenizer import build_tiny_tokenizer
from mrp_repro.training.mrp import TrajectoryData, mrp_loss
from mrp_repro.training.online import draw_noise, online_loss, packed_state_mask, train_online
from mrp_repro.trajectories import collect, load_trajectories
from tests.test_training_mrp import EOS, MASK, L, tiny_model

LETTERS = "abcdefghijklmnop"
ALPHABET = LETTERS + "\n"  # 3 specials + 17 chars = the tiny model's vocab of 20; "\n" joins chat turns


def _items(n, seed=0):
    rng = random.Random(seed)
    return [
        (
            [rng.randrange(3, 20) for _ in range(rng.choice([4, 8]))],
            [rng.randrange(3, 20) for _ in range(rng.choice([7, 10]))],
        )
        for _ in range(n)
    ]


def _pad_answer(p, a):  # as trajectories._as_examples / tasks.sft.tokenize_records
    total = -(-(len(p) + len(a) + 1) // L) * L
    return p, a + [EOS] * (total - len(p) - len(a))


@pytest.mark.parametrize("objective,K", [("residual", 1), ("direct", 1), ("residual", 2)])
def test_online_loss_equals_offline_gt_on_the_same_draws(tmp_path, objective, K):
    """Offline: collect `gt` rows (per-example [noisy ; clean] forward, head cache by prefill + commit), then
    mrp_loss. Online: the same examples packed into one row, the same noise/reveal states and 1/t weights
    taken from the stored rows, online_loss. Same loss and same head gradient, at fp32 tolerance
    (rtol 1e-5, atol 1e-6): the two compute the same thing with differently shaped attention calls. K = 2: a
    stored chain shorter than K (n_steps < k) supervises nothing at step k offline; online, that block's step k
    reveals its last masked slot, so it supervises nothing either (state k = the clean block here)."""
    model = tiny_model()
    raw = _items(6)
    items = [_pad_answer(p, a) for p, a in raw]  # what collect does to raw answers (EOS to the block end)
    collect(model, MASK, raw, "gt", tmp_path, 16, seed=0, progress=False, block_size=L, eos_ids=[EOS], chain_steps=K)
    data = TrajectoryData([load_trajectories(tmp_path)], MASK, L)
    head = MRPHead(model.config, 2, objective).init_weights("normal", 0.1, generator=torch.Generator().manual_seed(1))

    rows = torch.arange(len(data))
    off = mrp_loss(head, model, data.batch(rows, "cpu"), K, MASK, L)
    g_off = torch.autograd.grad(off, list(head.parameters()))

    packed = pack(items, seq_len=len(items) * 24, block_size=L)
    assert len(packed) == 1  # all six samples in one row, so blocks of different samples share attention calls
    b = packed.rows(torch.tensor([0]))
    T = b["ids"].shape[1]
    states = b["ids"][:, None].repeat(1, K + 1, 1)
    weight = torch.ones(1, T)
    starts = (b["pos"][0] == 0).nonzero().flatten().tolist()
    n_rows = 0
    for r in range(len(data)):
        ex, blk = data.example[r][1], int(data.block_start[r])
        at = starts[ex] + blk
        for k in range(int(data.n_steps[r]) + 1):
            states[0, k, at : at + L] = data.ids[r, k]
        weight[0, at : at + L] = 1.0 / data.t[r]
        n_rows += 1
    assert int(data.answer_mask.sum()) == int(b["answer"].sum())  # every answer block has a row: same denominator
    on = online_loss(head, model, b, states, weight, MASK, L)
    g_on = torch.autograd.grad(on, list(head.parameters()))
    assert float(off.detach()) > 0.1
    assert torch.allclose(on, off, rtol=1e-5, atol=1e-6), (float(on), float(off))
    for x, y in zip(g_on, g_off, strict=True):
        assert torch.allclose(x, y, rtol=1e-4, atol=1e-6)


def test_packed_mask_never_crosses_samples():
    doc = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1, -1, -1, -1, -1]])
    m = packed_state_mask(doc, 4, 2)[0, 0]
    T = 12
    # noisy block 1 (sample 1, its first block) sees no clean slot: the earlier clean block is sample 0's
    assert not m[4:8, 2 * T : 3 * T].any()
    # noisy state 0 and state 1 never see each other
    assert not m[0:T, T : 2 * T].any() and not m[T : 2 * T, 0:T].any()
    # clean sample 0 is bidirectional inside its block
    assert m[2 * T : 2 * T + 4, 2 * T : 2 * T + 4].all()
    doc2 = torch.tensor([[0] * 8])
    m2 = packed_state_mask(doc2, 4, 1)[0, 0]
    assert m2[4:8, 8:12].all() and not m2[4:8, 12:16].any()  # noisy block 1 sees clean block 0, not clean 1


def test_draws_reveal_one_masked_slot_per_block_and_never_mask_prompts():
    p = pack([_pad_answer(*it) for it in _items(8, seed=3)], 64, L)
    b = p.rows(torch.arange(len(p)))
    d = draw_noise(b, L, MASK, 2, torch.Generator().manual_seed(0))
    s = d["states"]
    m = [(s[:, k] == MASK) for k in range(3)]
    assert not (m[0] & ~b["answer"]).any()
    for k in (1, 2):
        per_block = (m[k - 1].int() - m[k].int()).view(len(p), -1, L).sum(-1)
        had = m[k - 1].view(len(p), -1, L).any(-1)
        assert torch.equal(per_block, had.int())  # exactly one reveal where something was masked
        assert torch.equal(s[:, k][~m[k]], b["ids"][~m[k]])  # revealed with the ground-truth token
    # one t per sample: the weights are constant inside a sample
    for r in range(len(p)):
        for j in b["doc"][r].unique().tolist():
            if j >= 0:
                assert b["doc"][r].eq(j).sum() > 0 and d["weight"][r][b["doc"][r] == j].unique().numel() == 1


def _sft_dir(tmp_path, n=96):
    rng = random.Random(0)
    d = tmp_path / "sft"
    d.mkdir()
    with open(d / "data.jsonl", "w") as fh:
        for _ in range(n):
            q = "".join(rng.choice(LETTERS) for _ in range(rng.randrange(3, 9)))
            a = q[::-1] + "".join(rng.choice(LETTERS) for _ in range(rng.randrange(4, 12)))
            fh.write(
                json.dumps({"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}) + "\n"
            )
    return d


def _profile(src, **over):
    base = {
        "block_size": L,
        "mrp.k_steps": 1,
        "mrp.num_layers": 1,
        "mrp.init": "zero-out",
        "mrp_training.recipe": "online",
        "mrp_training.sft_source": str(src),
        "mrp_training.seq_len": 32,
        "mrp_training.batch_size": 8,
        "mrp_training.micro_batch_size": 4,
        "mrp_training.steps": 40,
        "mrp_training.ckpt_every": 10,
        "mrp_training.lr": 3e-3,
        "mrp_training.heldout_frac": 0.15,
    }
    base.update(over)
    return load_profile("smoke").replace(base)


def _bb():
    return SimpleNamespace(
        model=tiny_model(), tokenizer=build_tiny_tokenizer(ALPHABET), mask_id=MASK, eos_ids=[EOS], pad_id=0
    )


def test_online_training_beats_the_uncorrected_baseline_and_resumes(tmp_path):
    src = _sft_dir(tmp_path)
    bb = _bb()
    p = _profile(src)
    full = train_online(p, bb, tmp_path / "full", progress=False)
    assert full["finished"] and full["recipe"] == "online"
    # zero-out init starts exactly at the uncorrected KL(B || A); training goes below it. On this random
    # backbone the residual is small and hard to learn: 40 steps reach ~0.95x (deterministic), so the bar is 0.97x
    assert full["initial_heldout_kl"] == pytest.approx(full["heldout_baseline_kl"], rel=1e-4)
    assert full["heldout_kl"] < 0.97 * full["heldout_baseline_kl"], full
    for f in ("loss_curve.csv", "loss_curve.json", "metrics.json", "done.json", "head/mrp.safetensors", "ckpt.pt"):
        assert (tmp_path / "full" / f).exists()
    header = (tmp_path / "full" / "loss_curve.csv").read_text().splitlines()[0]
    assert header.startswith("step,split,loss,lr,elapsed_s,heldout_loss,heldout_kl,heldout_baseline_kl")

    part = train_online(p, bb, tmp_path / "cut", progress=False, stop_after=15)
    assert not part["finished"]
    resumed = train_online(p, bb, tmp_path / "cut", progress=False)
    assert resumed["heldout_kl"] == full["heldout_kl"]
    a = load_head(tmp_path / "full" / "head", bb.model.config)
    b = load_head(tmp_path / "cut" / "head", bb.model.config)
    for (n, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(x, y), n


def test_online_k2_chain_trains_and_resume_refuses_other_data(tmp_path):
    from mrp_repro.checkpoint import CheckpointError

    src = _sft_dir(tmp_path, 192)
    p = _profile(src, **{"mrp.k_steps": 2})
    m = train_online(p, _bb(), tmp_path / "o", progress=False)
    assert m["k_steps"] == 2 and m["heldout_kl"] < 0.97 * m["heldout_baseline_kl"], m
    part = train_online(p, _bb(), tmp_path / "cut", progress=False, stop_after=12)
    assert not part["finished"]
    with open(src / "data.jsonl", "a") as fh:  # the data changes under a half-finished run
        fh.write(json.dumps({"prompt": "abc", "response": "cba"}) + "\n")
    with pytest.raises(CheckpointError, match="other SFT data"):
        train_online(p, _bb(), tmp_path / "cut", progress=False)


def test_online_training_beside_a_bf16_backbone(tmp_path):
    src = _sft_dir(tmp_path, 48)
    bb = _bb()
    bb.model.to(torch.bfloat16)
    m = train_online(
        _profile(src, **{"mrp.init": "normal", "mrp_training.steps": 20}), bb, tmp_path / "o", progress=False
    )
    losses = [r["loss"] for r in json.loads((tmp_path / "o" / "loss_curve.json").read_text())["train"]]
    assert all(torch.isfinite(torch.tensor(losses)))
    assert sum(losses[-5:]) < 0.5 * sum(losses[:5])
    assert m["heldout_kl"] < 0.5 * m["initial_heldout_kl"]
    assert (
        load_head(tmp_path / "o" / "head", bb.model.config, dtype=torch.bfloat16).eh_proj.weight.dtype == torch.bfloat16
    )


def test_missing_sft_source_names_both_ways(tmp_path):
    from mrp_repro.errors import UserError

    with pytest.raises(UserError, match="hub dataset id.*local directory"):
        train_online(_profile(tmp_path / "nowhere"), _bb(), tmp_path / "o", progress=False)


def test_step_cost_cli_refuses_a_hub_profile_with_the_python_call_to_use():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "mrp_repro.training.online", "--profile", "sdar-mini"],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    # a user error through run_cli: one error: line, exit status 2 (it was a bare SystemExit, status 1)
    assert r.returncode == 2 and "step_cost(P, stages.backbone(P))" in r.stderr and "'sdar-mini'" in r.stderr
    assert r.stderr.startswith("error: ") and "Traceback" not in r.stderr
