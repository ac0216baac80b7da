"""The released-head profiles (issue 21) proven on CPU: sdar-mini and its -k2 / -direct variants load generated
released-format heads and train nothing; every shipped *-released* profile declares its paper model and head.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_released_mini.py

The notebook run of sdar-mini itself (every notebook, fp32; 04 and 05 in bf16) is tests/test_notebooks.py.
"""

import hashlib
import re
from pathlib import Path

import pytest
import torch

from mrp_repro import inputs, sdar_mini, stages
from mrp_repro.config import load_profile
from mrp_repro.decoding import Direct

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def mini(tmp_path_factory):
    """The sdar-mini backbone, generated (with every released variant) into a temporary runs root."""
    root = tmp_path_factory.mktemp("released-mini")
    mp = pytest.MonkeyPatch()
    mp.setenv("MRP_REPRO_RUNS", str(root / "runs"))
    mp.setenv("MRP_REPRO_FIGURES", str(root / "figures"))
    bb = stages.backbone(load_profile("sdar-mini"), device="cpu", progress=False)
    yield bb, root / "runs"
    mp.undo()


def test_released_head_path_trains_nothing(mini, monkeypatch):
    """What notebook 04 runs on a released-head profile (load, the file list, the held-out check) and 05-07's
    stages.head: no optimizer is created, no training function runs, no head or packed-SFT directory is written;
    the paper model is the declared one; the resolved inputs carry each file's sha256."""
    from mrp_repro.training import mrp as offline
    from mrp_repro.training import online

    bb, runs = mini
    P = load_profile("sdar-mini")
    assert P.paper.model == "SDAR-1.7B" and not P.paper.comparable and not P.mrp_training.beside_pretrained

    def refuse(*a, **k):
        raise AssertionError("a training step ran on a released-head profile")

    monkeypatch.setattr(torch.optim.Optimizer, "__init__", refuse)
    monkeypatch.setattr(online, "train_online", refuse)
    monkeypatch.setattr(offline, "train_mrp", refuse)
    monkeypatch.setattr(stages, "train_online", refuse)
    monkeypatch.setattr(stages, "train_mrp", refuse)
    monkeypatch.setattr(stages, "RELEASED_HELDOUT_SEQS", 2)  # the notebook measures 8; the path is the same
    head, info = stages.pretrained_head(P, bb)
    about = dict(stages.released_about(P, bb, head, info))
    held = stages.released_heldout(P, bb, head)
    assert stages.head(P, bb, progress=False).num_layers == 3
    assert held["sequences"] == 2 and held["heldout_slots"] > 0
    assert held["heldout_kl"] > 0 and held["heldout_uncorrected_kl"] > 0  # both measured (a random head: KL is large)
    made = sorted(p.name for p in (runs / "sdar-mini").iterdir())
    assert not [n for n in made if n.startswith(("mrp-", "sft-packed-", "trajectories-"))], made
    weights = sdar_mini.generated_path(P.mrp.pretrained) / "model.safetensors"
    assert about["sha256 model.safetensors"] == hashlib.sha256(weights.read_bytes()).hexdigest()
    assert about["resolved commit"] == "local directory" and about["head layers"] == "3"
    rec = {r["input"]: r for r in inputs.recorded(P)}
    assert set(rec) >= {"backbone", "head", "heldout"} and rec["head"]["files"]["model.safetensors"] == \
        about["sha256 model.safetensors"]  # fmt: skip


@pytest.mark.parametrize("name", ["sdar-mini-k2", "sdar-mini-direct"])
def test_other_released_variants_load_and_decode(mini, name):
    """-k2 (two MRP steps) and -direct (direct objective): loaded from their generated released checkpoints, they
    decode a few tokens with the head (direct mode, MRP step 2: the head chains two reveals per backbone forward).
    Speculative decoding with a loaded released head is lossless: tests/test_notebooks.py (sdar-mini, 05)."""
    bb, _ = mini
    P = load_profile(name)
    head, info = stages.pretrained_head(P, bb)
    assert head.objective == P.mrp.objective and info.path.name == Path(P.mrp.pretrained).name
    prompt = [bb.tokenizer.encode("What is 2 + 3 + 4 + 5?")]
    out = bb.generate(prompt, Direct(2, head=head), 8)
    assert len(out.tokens[0]) >= 8 and out.stats[0].mrp_forwards > 0  # decoded, and the head ran
    assert out.stats[0].denoise_forwards < out.stats[0].tokens  # more than one token per backbone forward


def test_a_direct_head_under_the_residual_objective_is_refused(mini):
    from mrp_repro.released import ReleasedHeadMismatch

    bb, _ = mini
    P = load_profile("sdar-mini-direct").replace({"mrp.objective": "residual"})
    with pytest.raises(ReleasedHeadMismatch, match="mrp.objective: direct"):
        stages.pretrained_head(P, bb)


@pytest.mark.parametrize("size, model", [("1.7b", "SDAR-1.7B"), ("4b", "SDAR-4B"), ("8b", "SDAR-8B")])
def test_released_profiles_declare_their_paper_model_and_head(size, model):
    """Each size ships -released, -released-k2, -released-direct: the declared paper model (inherited, never from
    the name), the authors' head of that variant, no training, and a comment saying what it serves."""
    for variant, objective, k in (("", "residual", 1), ("-k2", "residual", 2), ("-direct", "direct", 1)):
        name = f"sdar-{size}-released{variant}"
        P = load_profile(name)
        assert P.paper.model == model and P.paper.comparable
        assert P.mrp.pretrained == f"heavyball/sdar-{size}-mrp-3lyr{variant}"
        assert (P.mrp.objective, P.mrp.k_steps, P.mrp_training.beside_pretrained) == (objective, k, False)
        text = (ROOT / "configs" / f"{name}.yaml").read_text()
        assert f"Paper model: {model}" in text and "Serves:" in text and "TODO" not in text
    assert re.search(r"Runs that reproduce every .* rows? of the paper's four tables: \d", (
        ROOT / "configs" / f"sdar-{size}-released.yaml").read_text())  # fmt: skip
