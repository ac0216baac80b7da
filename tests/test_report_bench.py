"""report.bench.modes_report: every mode family on the same prompts, speculative lossless, the oracle at 100%
of itself, the cost model."""

import torch

from mrp_repro.model import ModelConfig, SDARModel
from mrp_repro.mrp import MRPHead


def test_modes_report_table(smoke_profile):
    from mrp_repro.backbone import Backbone
    from mrp_repro.measure.cost import cost_note
    from mrp_repro.report.bench import modes_report
    from mrp_repro.report.tables import format_table, markdown
    from mrp_repro.tasks import synthetic
    from mrp_repro.tokenizer import build_tiny_tokenizer, eos_token_ids, mask_token_id

    tok = build_tiny_tokenizer(synthetic.alphabet())
    cfg = ModelConfig(len(tok), 32, 64, 2, 4, 2, 8)
    m = SDARModel(cfg).init_weights(std=0.3, generator=torch.Generator().manual_seed(0)).eval()
    h = MRPHead(cfg, 1).init_weights("normal", 0.3, generator=torch.Generator().manual_seed(1)).eval()
    eos = eos_token_ids(tok)
    bb = Backbone(m, tok, mask_token_id(tok), eos, eos[0], smoke_profile.block_size, None, smoke_profile)
    df = modes_report(smoke_profile, bb, h, ["synth-code"], 4, batch_size=2, max_new_tokens=12, progress=False)
    assert {"static", "dynamic", "speculative", "direct", "naive", "remask"} <= set(df["mode"])
    assert df[df["mode"] == "speculative"]["lossless"].all()
    assert (df[df["setting"].str.contains("oracle")]["tpf_share_of_oracle"] == 1.0).all()
    assert df.loc[df["setting"] == "static(1)", "speedup"].item() == 1.0
    assert "predicted_speedup" in df and "Cost model" in cost_note(df.attrs["cost_model"])
    assert "[" in markdown(format_table(df))


def test_cost_model_ratios_are_taken_within_each_repeat(monkeypatch):
    """A machine that slows down by a third over the run: each ratio is still exact, since its two sides are timed
    back to back in every repeat (a fake clock; the times themselves drift)."""
    import mrp_repro.measure.cost as cost

    clock = {"t": 0.0, "calls": 0}
    monkeypatch.setattr(cost.time, "perf_counter", lambda: clock["t"])

    def work(seconds):
        def f():
            clock["calls"] += 1
            clock["t"] += seconds * (1 + clock["calls"] / 100)  # ever slower

        return f

    t = cost._interleaved({"forward": work(1.0), "verify": work(1.2), "head": work(0.2)}, torch.device("cpu"), 9)
    assert clock["calls"] == 3 + 3 * 9  # one warm-up each, then 9 interleaved rounds
    assert t["forward"][1] == 1.0
    assert abs(t["verify"][1] - 1.2) < 0.02 and abs(t["head"][1] - 0.2) < 0.01  # drift within one round only
    assert t["verify"][0] > 1.2 * 1.1  # the median time itself drifted
