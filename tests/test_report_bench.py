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
