"""Drafters the verifier accepts (issue 14, part 4): heads trained other ways beside the profile's, by TPF against
the oracle ceiling: the paper's recipe (gt trajectories, plain KL), our next-pick loss
(mrp_training.pick_loss_weight), chain-unrolled K-step training (mrp.k_steps).

    .venv/bin/python -m mrp_repro.report.drafters --profile tiny      # the default VARIANTS -> figures/tiny/drafters.*
    .venv/bin/python -m mrp_repro.report.drafters --profile smoke --n 16 --variants "" mrp.k_steps=2

    from mrp_repro.report.drafters import drafter_table
    df = drafter_table(profile, backbone, variants=[{}, {"mrp_training.pick_loss_weight": 0.3}], n_prompts=200)

A variant is a set of profile overrides ({} = the profile's own head); each head is trained by mrp_repro.stages.head
(collecting its trajectories if missing; cached under runs/<profile>/mrp-<key>/, the overrides being part of the
key). Per task and K: TPF = tokens / denoising
forwards of speculative(K, mrp) with that head, of speculative(K, oracle) (the backbone's own future picks: the
ceiling) and of speculative(K, naive) (no head), over the same prompts at the decoding batch size; and the head's
held-out next-pick accuracy (the share of block states whose most confident masked slot under A + C is the
backbone's own next pick) beside A's alone. TPF does not depend on the clock, so this table is exact on any
machine; every speculative output here is token-identical to static by construction (tests/test_lossless_bf16.py).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from mrp_repro.config import DEFAULT_PROFILE

__all__ = ["COLUMNS", "VARIANTS", "drafter_table", "variant_name", "parse_variant", "main"]

#: the comparison of record: the profile's head, the paper's recipe, the next-pick loss, a 3-step chain
VARIANTS = ({}, {"trajectories.sources": ["gt"], "mrp.train_source": "gt"}, {"mrp_training.pick_loss_weight": 0.3},
            {"mrp.k_steps": 3})  # fmt: skip


def variant_name(overrides: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in overrides.items()) or "profile"


def parse_variant(text: str) -> dict:
    """'key=value,key=value' (values as YAML scalars) -> overrides; '' -> {} (the profile's own head)."""
    import yaml

    out = {}
    for part in filter(None, text.split(",")):
        key, eq, value = part.partition("=")
        if not eq:
            raise ValueError(f"variant {text!r}: write key=value pairs, e.g. mrp.k_steps=3")
        out[key.strip()] = yaml.safe_load(value)
    return out

#: table column <- the head's metrics.json key (training/mrp.py); "uncorrected": A alone, as in mrp_curve
HEAD_METRICS = {"heldout_pick_acc": "heldout_pick_acc", "heldout_pick_acc_uncorrected": "heldout_pick_acc_baseline",
                "heldout_kl": "heldout_kl", "heldout_uncorrected_kl": "heldout_baseline_kl"}  # fmt: skip
COLUMNS = ["benchmark", "K", "variant", "tpf_mrp", "tpf_oracle", "tpf_naive", "tpf_share_of_oracle", *HEAD_METRICS]


def _tpf(backbone, prompts, policy, max_new: int, batch: int) -> float:
    tokens = forwards = 0
    for i in range(0, len(prompts), batch):
        r = backbone.generate(prompts[i : i + batch], policy, max_new, trace=False)
        tokens += sum(s.tokens for s in r.stats)
        forwards += sum(s.denoise_forwards for s in r.stats)
    return tokens / max(forwards, 1)


def drafter_table(profile, backbone, variants: Sequence[dict] = VARIANTS, n_prompts: int = 200,
                  Ks: Sequence[int] | None = None, progress: bool = False) -> pd.DataFrame:  # fmt: skip
    """One row per (benchmark, K, variant); columns COLUMNS (see the module docstring)."""
    from mrp_repro import stages
    from mrp_repro.backbone import encode_prompts
    from mrp_repro.decoding import Speculative
    from mrp_repro.measure.runs import eval_problems

    if profile.mrp_training.recipe != "offline":
        raise ValueError("drafters: the next-pick loss needs mrp_training.recipe: offline (recorded next picks)")
    d = profile.decoding
    Ks = list(Ks or d.speculative_k)
    prompts = {t: encode_prompts(backbone, eval_problems(profile, t, n_prompts)) for t in profile.data.tasks}
    ceiling = {}
    rows = []
    for overrides in variants:
        P = profile.replace(overrides)
        head = stages.head(P, backbone, progress=progress)
        m = json.loads((stages.head_dir(P, backbone) / "metrics.json").read_text())
        for task, ps in prompts.items():
            for K in Ks:
                if (task, K) not in ceiling:  # the oracle and naive drafters read no head: once per task and K
                    ceiling[task, K] = [_tpf(backbone, ps, Speculative(K, dr, verify=d.verify), d.max_new_tokens,
                                             d.batch_size) for dr in ("oracle", "naive")]  # fmt: skip
                oracle, naive = ceiling[task, K]
                mrp = _tpf(backbone, ps, Speculative(K, "mrp", head=head, verify=d.verify), d.max_new_tokens,
                           d.batch_size)  # fmt: skip
                rows.append(dict(benchmark=task, K=K, variant=variant_name(overrides), tpf_mrp=mrp, tpf_oracle=oracle,
                                 tpf_naive=naive, tpf_share_of_oracle=mrp / oracle,
                                 **{c: m[k] for c, k in HEAD_METRICS.items()}))  # fmt: skip
    return pd.DataFrame(rows, columns=COLUMNS)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default=DEFAULT_PROFILE)
    ap.add_argument("--variants", nargs="+", default=None, help="key=value,... per head ('': the profile's)")
    ap.add_argument("--n", type=int, default=200, help="prompts per task")
    ap.add_argument("--out", type=Path, default=None, help="default: figures/<profile>/")
    a = ap.parse_args(argv)
    from mrp_repro import stages
    from mrp_repro.config import load_profile
    from mrp_repro.report import tables
    from mrp_repro.runtime import seed_everything, set_num_threads

    profile = load_profile(a.profile)
    seed_everything(profile.seed)
    bb = stages.backbone(profile)
    set_num_threads(profile.backbone_training.num_threads)  # TPF is clock-free: use every thread the profile has
    variants = [parse_variant(v) for v in a.variants] if a.variants is not None else VARIANTS
    df = drafter_table(profile, bb, variants, a.n, progress=True)
    out = a.out or tables.out_dir(profile)
    note = ("tpf_share_of_oracle = tpf_mrp / tpf_oracle; variant: the overrides the head was trained with "
            f"(profile: the profile's own head). {a.n} prompts per task at batch {profile.decoding.batch_size}.")
    tables.save_table(df, out, "drafters", digits=3, note=note)
    print(tables.markdown(tables.format_table(df, 3)))


if __name__ == "__main__":
    from mrp_repro.cli import run_cli

    run_cli(main)
