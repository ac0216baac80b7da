"""measure.runs: the grid's records follow the schema, in input order, scored; the backbone table; backbone
loading and caching."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from mrp_repro import stages
from mrp_repro.backbone import Backbone, decode, encode_prompts
from mrp_repro.decoding import Dynamic, Static
from mrp_repro.measure.runs import collect_runs, eval_problems, run_setting, score_problem, settings_for
from mrp_repro.measure.schema import MODES, RUN_COLUMNS
from mrp_repro.stages import random_backbone as _random_backbone
from mrp_repro.tasks import synthetic


def random_backbone(profile) -> Backbone:
    return _random_backbone(profile, std=0.5)


@pytest.fixture(scope="module")
def rb():
    from mrp_repro.config import load_profile

    return random_backbone(load_profile("smoke"))


def test_run_setting_schema_and_order(rb):
    probs = eval_problems(rb.profile, "synth-code", 5) + eval_problems(rb.profile, "synth-math", 4)
    probs = probs[::-1]  # mixed prompt lengths, out of length order
    df = run_setting(rb, probs, "static", Static(1), batch_size=3, max_new_tokens=16, model="smoke")
    assert list(df.columns) == list(RUN_COLUMNS)
    assert list(df["problem_id"]) == [p.task_id for p in probs] and list(df["prompt_index"]) == list(range(9))
    assert (df["setting"] == "static(1)").all() and (df["mode"] == "static").all() and df["K"].isna().all()
    assert (df["tokens"] <= df["denoise_forwards"]).all() and (df["wall_s"] > 0).all()
    assert df["correct"].dtype == bool and (df["batch_size"] == 3).all() and (df["sandbox"] == "").all()
    for p, (_, r) in zip(probs, df.iterrows(), strict=True):
        assert score_problem(p, r["text"])["correct"] == r["correct"]
    dyn = run_setting(rb, probs, "dynamic", Dynamic(0.5), batch_size=4, max_new_tokens=16, model="smoke")
    assert (dyn["denoise_forwards"] >= 1).all() and (dyn["threshold"] == 0.5).all()
    with pytest.raises(ValueError, match="unknown mode"):
        run_setting(rb, probs, "naive_lookahead", Static(2), 4, 16, "smoke")


def test_settings_columns_follow_the_papers_k(smoke_profile):
    """naive lookahead K reveals K + 1 tokens; direct K = MRP steps; K is NaN off speculative/direct/naive."""
    from mrp_repro.measure.runs import _setting_columns

    head = object()  # settings_for only passes the head on
    got = {(m, p.name): _setting_columns(m, p) for m, p in settings_for(smoke_profile, head)}
    assert {m for m, _ in got} == set(MODES)
    for (m, name), cols in got.items():
        if m == "naive":
            assert name == f"naive_mtp({int(cols['K'])})"  # the lookahead table's name and K
        if m == "speculative":
            assert cols["drafter"] in ("mrp", "oracle", "naive") and cols["K"] == 3
        if m in ("static", "dynamic", "remask"):
            assert math.isnan(cols["K"])
    assert {m for m, _ in settings_for(smoke_profile, None)} == {"static", "dynamic", "speculative", "naive"}
    with pytest.raises(ValueError, match="unknown mode"):
        settings_for(smoke_profile, None, ("naive_lookahead",))


def test_collect_runs_identical_to_static(rb):
    p = rb.profile
    settings = settings_for(p, None, ("static", "dynamic", "speculative"))
    runs = collect_runs(p, rb, None, 3, ["synth-code"], settings, batch_size=2, max_new_tokens=12)
    assert list(runs.columns) == list(RUN_COLUMNS) and runs["model"].eq("smoke").all()
    static = runs[runs["mode"] == "static"]
    assert static["identical_to_static"].all()
    spec = runs[runs["mode"] == "speculative"]  # lossless by construction
    assert len(spec) == 3 * 2 and spec["identical_to_static"].all() and (spec["K"] == 3).all()
    assert set(spec["drafter"]) == {"oracle", "naive"}
    with pytest.raises(ValueError, match="exactly one static"):
        collect_runs(p, rb, None, 3, ["synth-code"], settings[1:], batch_size=2, max_new_tokens=12)


def test_collect_runs_both_algorithms_each_against_its_own_static(rb):
    """tiny/smoke decode ours and upstream side by side: labelled rows, each family lossless against its own
    static, upstream's batch counters split over a batch's rows (sums = the batches' counts)."""
    from mrp_repro.decoding.upstream import generate_upstream
    from mrp_repro.measure.schema import UPSTREAM_COUNTERS
    from mrp_repro.mrp import MRPHead

    p = rb.profile
    assert p.decoding.algorithms == ("ours", "upstream")
    g = torch.Generator().manual_seed(0)
    head = MRPHead(rb.model.config, num_layers=1).init_weights("normal", 0.3, generator=g).eval()
    settings = settings_for(p, head, ("static", "speculative"))
    names = [pol.name for _, pol in settings]
    assert "upstream_static(1)" in names and "upstream_speculative(3,sum)" in names and "static(1)" in names
    runs = collect_runs(p, rb, head, 3, ["synth-code"], settings, batch_size=2, max_new_tokens=16)
    assert set(runs["algorithm"]) == {"ours", "upstream"} and runs["identical_to_static"].all()
    up, ours = runs[runs["algorithm"] == "upstream"], runs[runs["algorithm"] == "ours"]
    assert ours[list(UPSTREAM_COUNTERS)].isna().all().all() and up[list(UPSTREAM_COUNTERS)].notna().all().all()
    spec = up[up["mode"] == "speculative"]
    probs = eval_problems(p, "synth-code", 3)
    prompts = encode_prompts(rb, probs)
    order = sorted(range(3), key=lambda i: (len(prompts[i]), i))
    pol = dict((q.name, q) for _, q in settings)["upstream_speculative(3,sum)"]
    want = sum(generate_upstream(rb.model, [prompts[i] for i in b], pol, p.block_size, rb.mask_id, rb.eos_ids,
                                 16).batch.denoise_forwards for b in (order[:2], order[2:]))  # fmt: skip
    assert spec["upstream_denoise_forwards"].sum() == pytest.approx(want)


def test_score_problem_synthetic_and_benchmark():
    p = synthetic.generate("synth-math", "test", 1, 0, 8)[0]
    assert score_problem(p, synthetic.canonical_answer(p))["correct"]
    from mrp_repro.tasks.benchmarks import Problem

    g = Problem("gsm8k/0", "gsm8k", "q", "42")
    r = score_problem(g, "so #### 42")
    assert r["correct"] and math.isnan(r["valid_chain"])


def test_stages_backbone_trains_once_and_caches(smoke_profile, tmp_runs):
    p = smoke_profile.replace({"backbone_training.steps": 4})
    bb = stages.backbone(p, device="cpu", progress=False)
    assert bb.path is not None and (bb.path.parent / "done.json").exists()
    assert bb.mask_id == 1 and bb.eos_ids == [2] and bb.block_size == p.block_size
    probs = eval_problems(p, "synth-code", 2)
    ids = encode_prompts(bb, probs)
    assert decode(bb, ids[0]) == probs[0].prompt_text
    bb2 = stages.backbone(p, device="cpu", train_if_missing=False)
    for (k, a), (_, b) in zip(bb.model.state_dict().items(), bb2.model.state_dict().items(), strict=True):
        assert torch.equal(a, b), k


def test_backbone_report_writes_tables(smoke_profile, tmp_runs):
    from mrp_repro.report.bench import backbone_report
    from mrp_repro.runtime import figures_dir

    p = smoke_profile.replace({"backbone_training.steps": 2, "evaluation.n_prompts": 4})
    s = backbone_report(p, progress=False, num_threads=1)
    assert set(s["setting"]) == {"static(1)"} | {f"dynamic({t})" for t in p.decoding.thresholds}
    assert (s.loc[s["setting"] == "static(1)", "speedup"] == 1.0).all()
    out = figures_dir(p)
    for f in ("backbone_modes.csv", "backbone_modes.md", "adjacent_steps.csv", "backbone_modes_rows.csv"):
        assert (out / f).exists(), f
    md = (out / "backbone_modes.md").read_text()
    assert "accuracy_lo" not in md and " [" in md  # value [lo, hi], in percent
    adj = pd.read_csv(out / "adjacent_steps.csv")
    assert (adj["kl_median"] >= 0).all() and set(adj["subset"]) == {"all", "conf<0.99"}


def test_stages_backbone_local_checkpoint(smoke_profile, tmp_path):
    """A hub-format directory (config.json + safetensors + tokenizer) loads through model.source 'local'."""
    from mrp_repro.checkpoint import save_backbone
    from mrp_repro.tokenizer import save_tokenizer

    rb = _random_backbone(smoke_profile, std=0.5)
    d = tmp_path / "ckpt"
    save_backbone(rb.model, d)
    save_tokenizer(rb.tokenizer, d)
    p = smoke_profile.replace({"model.source": "local", "model.local_dir": str(d)})
    bb = stages.backbone(p, device="cpu")
    assert bb.mask_id == rb.mask_id and bb.eos_ids == rb.eos_ids
    for (k, a), (_, b) in zip(rb.model.state_dict().items(), bb.model.state_dict().items(), strict=True):
        assert torch.equal(a, b), k


def test_score_problem_uses_each_benchmarks_no_box_rule():
    """GSM8K falls back to the last number, MATH500 to OpenCompass's "answer is" sentence; code rows name the
    sandbox that ran them."""
    from mrp_repro.tasks.benchmarks import Problem

    gsm = Problem("gsm8k/0", "gsm8k", "q", "18")
    assert score_problem(gsm, "She sells 16 - 3 - 4 = 9 eggs, so she makes 9 * 2 = 18 dollars")["correct"]
    assert not score_problem(gsm, "She makes 18 dollars, or 19 with the tip")["correct"]  # the LAST number
    m5 = Problem("math500/0", "math500", "q", "5")
    assert score_problem(m5, "We simplify. The final answer is 5")["correct"]
    assert not score_problem(m5, "The final answer is 7. Then 5")["correct"]  # the answer sentence wins
    mb = Problem("mbpp/0", "mbpp", "q", "assert f(1) == 2", entry_point="f")
    r = score_problem(mb, "```python\ndef f(x):\n    return x + 1\n```")
    assert r["correct"] and r["sandbox"] == "bwrap"


def test_profile_fuse_commit_is_what_the_grid_decodes_with(rb):
    """decoding.fuse_commit reaches the engine through Backbone.generate: fused commits are recorded, tokens equal."""
    from dataclasses import replace

    p = rb.profile
    settings = settings_for(p, None, ("static", "speculative"))
    plain = collect_runs(p, rb, None, 3, ["synth-math"], settings, batch_size=2, max_new_tokens=24)
    fused_bb = replace(rb, profile=p.replace({"decoding.fuse_commit": True}))
    fused = collect_runs(fused_bb.profile, fused_bb, None, 3, ["synth-math"], settings, batch_size=2,
                         max_new_tokens=24)  # fmt: skip
    assert (plain["fused_commits"] == 0).all() and (fused["fused_commits"] > 0).all()
    assert (fused["fused_commits"] <= fused["commit_forwards"]).all()
    assert list(fused["text"]) == list(plain["text"]) and fused["identical_to_static"].all()
    assert list(fused["commit_forwards"]) == list(plain["commit_forwards"])  # upstream's accounting unchanged


def test_profile_compile_is_read_by_the_stages(tmp_path, monkeypatch):
    """decoding.compile: stages.head compiles the head's forward, and compile_model wraps each forward once
    (equality with eager: tests/test_compiled.py)."""
    from mrp_repro import model as model_mod
    from mrp_repro.config import load_profile
    from mrp_repro.mrp import MRPHead

    calls = []

    def fake_compile(f, **kw):
        calls.append(kw)
        return lambda *a, **k: f(*a, **k)  # a plain function, as torch.compile returns

    monkeypatch.setattr(model_mod.torch, "compile", fake_compile)
    P = load_profile("smoke", {"decoding.compile": True})
    bb = random_backbone(P)
    model_mod.compile_model(bb.model)  # what stages.backbone does for this profile
    head = MRPHead(bb.model.config, 1, "residual")
    monkeypatch.setattr(stages, "_load_head", lambda *a, **k: head)
    monkeypatch.setattr(stages, "train_head", lambda *a, **k: tmp_path)
    assert stages.head(P, bb) is head
    assert len(calls) == 2 and bb.model.forward.mrp_compiled and head.forward.mrp_compiled
    assert stages.head(P.replace({"decoding.compile": False}), bb) is head and len(calls) == 2


def test_a_grid_held_by_a_wider_one_is_read_from_it(rb, tmp_runs, monkeypatch):
    """At decoding.batch_size 1 with one n_prompts, modes_runs decodes every row of speculative_runs: that grid is
    its static + speculative rows (equal to collecting it apart but for the clock), decoded once."""
    import io
    from dataclasses import replace

    from mrp_repro.measure import runs as runs_mod
    from mrp_repro.measure.sharded import TIMING_COLUMNS
    from mrp_repro.mrp import MRPHead
    from mrp_repro.report import grids

    P = rb.profile.replace({"decoding.batch_size": 1, "evaluation.n_prompts": 2, "decoding.max_new_tokens": 16})
    bb = replace(rb, profile=P)
    head = MRPHead(bb.model.config, 1, "residual").init_weights("normal", 0.3, torch.Generator().manual_seed(0))
    calls = []
    real = runs_mod.collect_runs
    monkeypatch.setattr(grids, "collect_runs", lambda *a, **k: calls.append(k["settings"]) or real(*a, **k))
    spec = grids.runs(P, bb, head, "speculative_runs", n_prompts=2)
    assert len(calls) == 1 and len(calls[0]) == len(grids.grid_spec(P, head, "modes_runs")["settings"])
    assert grids.runs(P, bb, head, "modes_runs") is not None and len(calls) == 1  # stored, not decoded again
    apart = real(P, bb, head, **grids.grid_spec(P, head, "speculative_runs", 2))
    assert set(spec["mode"]) == {"static", "speculative"} and len(spec) == len(apart)
    as_text = lambda df: pd.read_csv(io.StringIO(df.drop(columns=list(TIMING_COLUMNS)).to_csv(index=False)),  # noqa: E731
                                     dtype=str, keep_default_na=False)  # fmt: skip
    pd.testing.assert_frame_equal(as_text(spec), as_text(apart))
    # another batch size: collected apart, as before
    P4 = P.replace({"decoding.batch_size": 4})
    grids.runs(P4, replace(bb, profile=P4), head, "speculative_runs", n_prompts=2)
    assert len(calls) == 2 and len(calls[1]) == len(grids.grid_spec(P4, head, "speculative_runs", 2)["settings"])



def test_the_backbone_grid_is_decoded_apart_even_with_a_head_and_its_rows_equal_the_modes_grids(rb, tmp_runs,
                                                                                              monkeypatch):  # fmt: skip
    """modes_runs holds backbone_runs' settings, but backbone_runs is decoded apart even with a head at hand (make
    reproduce's grids stage): its clock is the independent second timing that report.wallclock's agreement check
    compares with modes_runs' (a copy would pass by construction). Its rows equal modes_runs' but for the clock."""
    import io
    from dataclasses import replace

    from mrp_repro.measure import runs as runs_mod
    from mrp_repro.measure.sharded import TIMING_COLUMNS
    from mrp_repro.mrp import MRPHead
    from mrp_repro.report import grids

    P = rb.profile.replace({"evaluation.n_prompts": 2, "decoding.max_new_tokens": 16})
    bb = replace(rb, profile=P)
    head = MRPHead(bb.model.config, 1, "residual").init_weights("normal", 0.3, torch.Generator().manual_seed(0))
    calls = []
    real = runs_mod.collect_runs
    monkeypatch.setattr(grids, "collect_runs", lambda *a, **k: calls.append(k["settings"]) or real(*a, **k))
    got = grids.runs(P, bb, head, "backbone_runs")
    assert [[p.name for _, p in c] for c in calls] == [[p.name for _, p in grids.grid_spec(P, head, "backbone_runs")
                                                         ["settings"]]]  # fmt: skip
    modes = grids.runs(P, bb, head, "modes_runs")
    same = modes[modes["setting"].isin(set(got["setting"]))]
    as_text = lambda df: pd.read_csv(io.StringIO(df.drop(columns=list(TIMING_COLUMNS)).to_csv(index=False)),  # noqa: E731
                                     dtype=str, keep_default_na=False)  # fmt: skip
    key = ["benchmark", "setting", "prompt_index"]
    pd.testing.assert_frame_equal(as_text(got.sort_values(key)), as_text(same.sort_values(key)))


def test_profile_static_cache_reaches_the_engine(rb, monkeypatch):
    """decoding.static_cache is what Backbone.generate passes to the engine (its decoding: tests/test_static_cache.py);
    tokens equal the growing cache's on this backbone."""
    from dataclasses import replace

    import mrp_repro.decoding as decoding

    seen = []
    real = decoding.generate
    monkeypatch.setattr(decoding, "generate", lambda *a, **k: seen.append(k["static_cache"]) or real(*a, **k))
    prompts = encode_prompts(rb, eval_problems(rb.profile, "synth-math", 3))
    plain = rb.generate(prompts, Static(1), 16)
    static_bb = replace(rb, profile=rb.profile.replace({"decoding.static_cache": True}))
    static = static_bb.generate(prompts, Static(1), 16)
    assert seen == [False, True] and static.tokens == plain.tokens
