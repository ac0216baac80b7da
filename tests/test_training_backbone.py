"""Block-diffusion batch builder, training loss, checkpoint resume (smoke sizes, seconds)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from mrp_repro.checkpoint import load_backbone
from mrp_repro.model import SDARModel
from mrp_repro.training.backbone import (
    TrainData,
    build_block_diffusion_batch,
    make_tokenizer,
    model_config_for,
    train_backbone,
)

L = 8


def _batch(compact=True, seed=0):
    clean = torch.arange(5, 5 + 2 * 32).view(2, 32) % 20 + 3
    valid = torch.ones(2, 32, dtype=torch.bool)
    valid[1, 24:] = False  # row 1: 3 blocks
    plens = [16, 8]
    g = torch.Generator().manual_seed(seed)
    return clean, plens, valid, build_block_diffusion_batch(clean, plens, L, 1, g, valid, compact=compact)


@pytest.mark.parametrize("compact", [True, False])
def test_prompt_never_masked_and_weights(compact):
    for seed in range(5):
        clean, plens, valid, b = _batch(compact, seed)
        A = b["n_noisy"]
        pos = b["position_ids"][:, :A]
        for r in range(2):
            prompt = pos[r] < plens[r]
            assert not b["noisy_mask"][r][prompt].any()
            assert (b["weights"][r][prompt] == 0).all()
        w = b["weights"][b["noisy_mask"]]
        assert (w >= 1.0).all() and (w <= 1 / 0.02 + 1e-3).all()
        assert (b["weights"][~b["noisy_mask"]] == 0).all()
        assert (b["input_ids"][:, :A][b["noisy_mask"]] == 1).all()
        # unmasked noisy tokens equal the clean ones
        keep = ~b["noisy_mask"] & b["answer_mask"]
        assert (b["input_ids"][:, :A][keep] == b["targets"][keep]).all()


@pytest.mark.parametrize("compact", [True, False])
def test_mask_structure(compact):
    clean, plens, valid, b = _batch(compact)
    A = b["n_noisy"]
    m = b["mask"][:, 0]
    N = m.shape[-1]
    pos = b["position_ids"]
    blk = pos // L
    is_noisy = torch.arange(N) < A
    for r in range(2):
        keyok = torch.cat([torch.ones(A, dtype=torch.bool), valid[r, : N - A]])
        nq = torch.cat([b["answer_mask"][r], torch.zeros(N - A, dtype=torch.bool)])
        for i in range(N):
            for j in range(N):
                if i == j:
                    continue
                if is_noisy[i]:
                    if not nq[i]:
                        continue
                    if is_noisy[j]:
                        want = blk[r, i] == blk[r, j] and (b["answer_mask"][r, j] or pos[r, j] < 32)
                        want = want and bool(pos[r, j] < valid[r].sum())
                    else:
                        want = blk[r, j] < blk[r, i] and bool(keyok[j])  # clean earlier blocks only
                else:
                    want = (not is_noisy[j]) and blk[r, j] <= blk[r, i] and bool(keyok[j])  # block-causal
                assert bool(m[r, i, j]) == bool(want), (compact, r, i, j)


def test_compact_equals_full_layout(smoke_profile):
    """Same noisy tokens -> same logits in the compact and the textbook 2T layout."""
    tok = make_tokenizer()
    data = TrainData(smoke_profile, tok)
    clean, plens, valid = data.batch(0, 4)
    model = SDARModel(model_config_for(smoke_profile, len(tok))).init_weights(0.2, torch.Generator().manual_seed(0))
    b = build_block_diffusion_batch(clean, plens, L, 1, torch.Generator().manual_seed(1), valid)
    A = b["n_noisy"]
    full = clean.clone()
    for r in range(4):
        for j in range(A):
            if b["answer_mask"][r, j]:
                full[r, b["position_ids"][r, j]] = b["input_ids"][r, j]
    fb = build_block_diffusion_batch(clean, plens, L, 1, torch.Generator().manual_seed(1), valid, compact=False)
    with torch.no_grad():
        o1 = model(b["input_ids"], b["position_ids"], b["mask"]).logits[:, :A]
        o2 = model(torch.cat([full, clean], 1), fb["position_ids"], fb["mask"]).logits
    for r in range(4):
        for j in range(A):
            if b["answer_mask"][r, j]:
                torch.testing.assert_close(o1[r, j], o2[r, b["position_ids"][r, j]], atol=1e-4, rtol=1e-4)


def test_training_sequences_end_with_eos(smoke_profile):
    tok = make_tokenizer()
    data = TrainData(smoke_profile, tok)
    clean, plens, valid = data.batch(3, 16)
    assert clean.shape[1] % L == 0
    for r in range(16):
        n = int(valid[r].sum())
        assert n % L == 0 and int(clean[r, n - 1]) == data.eos and int(plens[r]) % L == 0
    # deterministic in the step
    c2, _, _ = data.batch(3, 16)
    assert torch.equal(clean, c2)


def test_loss_decreases_and_resume_is_bitwise(smoke_profile, tmp_path):
    p = smoke_profile.replace({"backbone_training.steps": 12, "backbone_training.ckpt_every": 100})
    m = train_backbone(p, tmp_path / "full", progress=False)
    curve = json.loads((tmp_path / "full" / "loss_curve.json").read_text())
    first = sum(c["loss"] for c in curve[:3]) / 3
    last = sum(c["loss"] for c in curve[-3:]) / 3
    assert last < first
    assert m["finished"] and (tmp_path / "full" / "done.json").exists()

    part = train_backbone(p, tmp_path / "split", progress=False, stop_after=6)
    assert part == {"steps_done": 6, "finished": False}
    train_backbone(p, tmp_path / "split", progress=False)
    a = load_backbone(tmp_path / "full" / "model").state_dict()
    b = load_backbone(tmp_path / "split" / "model").state_dict()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    # a second call is instant: done.json short-circuits
    assert train_backbone(p, tmp_path / "full", progress=False) == m


def test_warm_restart_from_a_finished_first_phase_equals_one_run(tmp_path):
    """backbone_training.restart_steps: a run that trains both phases ends at the weights of one that starts the
    restart from a finished first phase (phase1=): the restart's fresh optimizer makes them one computation. The
    restart is a real second phase (its lr warms up again), resumes across the boundary, and is recorded."""
    from mrp_repro.config import ConfigError, load_profile

    first = load_profile("smoke", {"backbone_training.steps": 6, "backbone_training.ckpt_every": 3,
                                   "backbone_training.warmup_steps": 2})  # fmt: skip
    both = first.replace({"backbone_training.restart_steps": 4, "backbone_training.restart_lr": 5e-4})
    kw = dict(progress=False, num_threads=1)
    train_backbone(first, tmp_path / "first", **kw)
    # one run of both phases, killed at the boundary (its checkpoint holds the first phase's optimizer) and resumed
    assert not train_backbone(both, tmp_path / "both", stop_after=6, **kw)["finished"]
    m_both = train_backbone(both, tmp_path / "both", **kw)
    # the first phase as publish keeps it: model/, loss_curve.csv and done.json, nothing else
    pub = tmp_path / "published"
    shutil.copytree(tmp_path / "first" / "model", pub / "model")
    for name in ("loss_curve.csv", "done.json"):
        shutil.copy(tmp_path / "first" / name, pub / name)
    m_warm = train_backbone(both, tmp_path / "warm", phase1=pub, **kw)
    assert m_both["steps_done"] == m_warm["steps_done"] == 10
    w_both = load_backbone(tmp_path / "both" / "model", dtype=torch.float32).state_dict()
    w_warm = load_backbone(tmp_path / "warm" / "model", dtype=torch.float32).state_dict()
    assert all(torch.equal(w_both[k], w_warm[k]) for k in w_both)
    w_first = load_backbone(tmp_path / "first" / "model", dtype=torch.float32).state_dict()
    assert not all(torch.equal(w_both[k], w_first[k]) for k in w_both)
    curve = json.loads((tmp_path / "warm" / "loss_curve.json").read_text())
    lrs = [r["lr"] for r in curve]
    assert len(curve) == 10 and lrs[6] < lrs[7] and abs(lrs[7] - 5e-4) < 1e-12  # warms up again, to restart_lr
    assert m_warm["phase1_from"]["dir"] == str(pub) and "phase1_from" not in m_both
    from mrp_repro.trajectories import model_fingerprint  # what published.json records of the first phase

    assert m_warm["phase1_from"]["fingerprint"] == model_fingerprint(load_backbone(pub / "model", dtype=torch.float32))
    assert sorted(p.name for p in pub.iterdir()) == ["done.json", "loss_curve.csv", "model"]  # left as it was
    with pytest.raises(ConfigError, match="not a finished backbone run"):
        train_backbone(both, tmp_path / "nodone", phase1=tmp_path / "first" / "model", **kw)
    with pytest.raises(ConfigError, match="trained 6 steps"):
        train_backbone(both.replace({"backbone_training.steps": 5}), tmp_path / "bad", phase1=tmp_path / "first",
                       **kw)  # fmt: skip
    with pytest.raises(ConfigError, match="restart_steps is 0"):
        first.replace({"backbone_training.restart_lr": 1e-3})
