"""The paper's design ablations (issue 22): one MRP head per variant of one axis, every head measured the same way.

    .venv/bin/python -m mrp_repro.report.ablations --profile tiny       # make ablations: trains what is missing
    .venv/bin/python -m mrp_repro.report.ablations --profile tiny --axes depth objective --n 100 --threads 1
    .venv/bin/python -m mrp_repro.report.ablations --profile sdar-4b --released base=heavyball/sdar-4b-mrp-3lyr@SHA \
        k2=heavyball/sdar-4b-mrp-3lyr-k2@SHA,mrp.k_steps=2 \
        direct=heavyball/sdar-4b-mrp-3lyr-direct@SHA,mrp.objective=direct

    from mrp_repro.report import ablations
    res = ablations.run(profile)      # {"tables": {axis: table}, "claims", "runs", ...}; figures/<profile>/ablation_*

Axes (`axes`; each variant is a set of profile overrides of existing mrp / mrp_training / trajectories settings, its
head trained by mrp_repro.stages on the profile's own backbone and trajectories, cached like any head):
depth (mrp.num_layers), objective (mrp.objective), k_steps (mrp.k_steps), train_source (mrp.train_source: the
paper's `gt` reveal mode on our offline recipe vs our sources), init (mrp.init / mrp.init_std). A variant equal to
the profile's own head is that head (same cache key), trained once. On a profile whose numbers compare with the
paper's (paper.comparable) nothing is trained: the released heads (mrp.pretrained, one per variant: `released`)
fill the objective and k_steps axes, the only ones the authors released variants for.

Every variant reports, per task, the metrics of report.ablations_metrics (held-out KL ratio, speculative TPF share
of the oracle per decoding family, direct step accuracy, remasking recovery; each with its CI), on the same prompts
for every head (evaluation.n_prompts unless --n).

Per axis: ablation_<axis>.{md,tex,csv} (the paper's statement and, for depth / objective / k_steps, a declared-test
claim under the table) and ablation_<axis>.{png,pdf}; ablation_claims.{md,tex,csv} collects the claims.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from mrp_repro.config import DEFAULT_PROFILE
from mrp_repro.report.ablations_metrics import (
    AXIS_CLAIMS,
    CLAIM_COLUMNS,
    FAMILY_PREFIX,
    KS,
    TAUS,
    _kstep_diffs,
    _tau_key,
    check_claim,
    columns,
    variant_metrics,
)

__all__ = ["Axis", "FAMILIES", "DEPTHS", "axes", "released_axes", "parse_released", "run", "plot_axis",
           "main"]  # fmt: skip


#: head depths of the depth axis (the paper: 3 layers, 2-3 best, 8 worse)
DEPTHS = (1, 2, 3, 8)


def _spec_ours(K: int, head, decoding):
    from mrp_repro.decoding import Speculative

    return Speculative(K, "mrp", head=head, verify=decoding.verify)


def _spec_upstream(K: int, head, decoding):
    from mrp_repro.decoding.upstream import UpstreamSpeculative

    return UpstreamSpeculative(K, head, decoding.upstream_draft_logits, decoding.upstream_sum_scale, decoding.verify)


#: decoding family -> speculative policy builder (K, head, the profile's decoding section); both families' shares
#: divide by the oracle drafter's TPF (ours: Speculative(K, "oracle")), decoded once in the baseline; each family's
#: column prefix: ablations_metrics.FAMILY_PREFIX
FAMILIES: dict[str, Callable] = {"ours": _spec_ours, "upstream": _spec_upstream}


@dataclass(frozen=True)
class Axis:
    name: str
    setting: str  # the profile settings it varies
    paper: str  # the paper's statement
    variants: tuple[tuple[str, dict], ...]  # (label, profile overrides)


def axes(profile, depths: Sequence[int] = DEPTHS, ks: Sequence[int] | None = None) -> dict[str, Axis]:
    """The trained axes of a scratch or offline profile (labels say which variant is the paper's, which ours).
    ks: the k_steps axis (default 1 .. min(3, trajectories.chain_steps))."""
    mc = profile.mrp
    own = "ours: " + (mc.train_source if isinstance(mc.train_source, str) else " + ".join(mc.train_source))
    src = [(own, {"mrp.train_source": mc.train_source}),
           ("paper: gt", {"trajectories.sources": ["gt"], "mrp.train_source": "gt"})]  # fmt: skip
    src += [(s, {"mrp.train_source": s}) for s in profile.trajectories.sources if s != "gt" and s != mc.train_source]
    ks = ks or range(1, min(3, profile.trajectories.chain_steps) + 1)
    return {
        "depth": Axis("depth", "mrp.num_layers", "3 layers; 2-3 layers best, 8 worse",
                      tuple((f"{d} layer{'s' * (d > 1)}", {"mrp.num_layers": d}) for d in depths)),
        "objective": Axis("objective", "mrp.objective", "the residual objective beats predicting B directly",
                          (("residual", {"mrp.objective": "residual"}), ("direct", {"mrp.objective": "direct"}))),
        "k_steps": Axis("k_steps", "mrp.k_steps", "K-step heads (released -k2) for longer drafts",
                        tuple((f"k={k}", {"mrp.k_steps": k}) for k in ks)),
        "train_source": Axis("train_source", "mrp.train_source", "trained online on gt reveals (one ground-truth "
                             "token per block)", tuple(src)),
        "init": Axis("init", "mrp.init, mrp.init_std", "normal init, std 0.2 (training script); a structured init "
                     "exists upstream", ((f"ours: zero-out, std {mc.init_std:g}", {"mrp.init": "zero-out"}),
                                         ("paper: normal, std 0.2", {"mrp.init": "normal", "mrp.init_std": 0.2}),
                                         ("structured, std 0.2", {"mrp.init": "structured", "mrp.init_std": 0.2}))),
    }  # fmt: skip


def parse_released(text: str) -> tuple[str, dict]:
    """'label=SPEC[,key=value...]' -> (label, {"mrp.pretrained": SPEC, key: value}) (values as YAML scalars)."""
    import yaml

    label, eq, rest = text.partition("=")
    if not eq or not rest:
        raise ValueError(f"--released {text!r}: write label=SPEC[,mrp.k_steps=2], SPEC a hub id@revision or a dir")
    spec, *pairs = rest.split(",")
    out = {"mrp.pretrained": spec}
    for p in pairs:
        k, eq, v = p.partition("=")
        if not eq:
            raise ValueError(f"--released {text!r}: {p!r} is not key=value")
        out[k.strip()] = yaml.safe_load(v)
    return label.strip(), out


def released_axes(profile, released: Sequence[tuple[str, dict]]) -> dict[str, Axis]:
    """Axes over released heads (each overrides mrp.pretrained): objective and k_steps, each holding the released
    heads that differ from the first (the base head) in that setting, beside the base head; none with one head."""
    if not released:
        raise ValueError(f"profile {profile.name}: paper.comparable profiles evaluate released heads; pass them as "
                         "released=[(label, {'mrp.pretrained': spec, ...}), ...] (CLI: --released label=SPEC,...)")
    for label, ov in released:
        if "mrp.pretrained" not in ov:
            raise ValueError(f"released head {label!r}: its overrides must set mrp.pretrained")
    base = profile.replace(released[0][1]).mrp
    out = {}
    for name, key, paper in (("objective", "objective", "the residual objective beats predicting B directly"),
                             ("k_steps", "k_steps", "K-step heads (released -k2) for longer drafts")):  # fmt: skip
        vs = [released[0]] + [(lab, ov) for lab, ov in released[1:]
                              if getattr(profile.replace(ov).mrp, key) != getattr(base, key)]  # fmt: skip
        if len(vs) > 1:
            out[name] = Axis(name, f"mrp.{key}", paper, tuple(vs))
    return out


# ----------------------------------------------------------------------------- heads and decoding


def _head(P, bb, progress: bool):
    """(head, head id, training metrics or {}) of one variant profile: released (mrp.pretrained) or trained."""
    from mrp_repro import stages

    if P.mrp.pretrained:
        head, info = stages.pretrained_head(P, bb)
        return head, f"released:{info.spec}@{info.revision}:{info.fingerprint}", {}
    head = stages.head(P, bb, progress=progress)
    d = stages.head_dir(P, bb)
    return head, d.name, json.loads((d / "metrics.json").read_text())


def _cache_path(P, kind: str, key: str) -> Path:
    from mrp_repro.runtime import runs_root

    d = runs_root() / P.name / "ablations"
    d.mkdir(parents=True, exist_ok=True)
    return d / f"{kind}-{hashlib.sha256(key.encode()).hexdigest()[:12]}.csv"


def _check_family(family: str) -> None:
    if family not in FAMILIES:
        raise ValueError(f"decoding family {family!r}: choose from {', '.join(FAMILIES)}")


def _decode(P, bb, head, head_id: str, family: str, Ks, taus, n_prompts, benchmarks) -> pd.DataFrame:
    """The runs frame (measure.schema columns) of one head's settings, or of the head-free baselines (head None:
    static, dynamic(τ), the oracle drafter at each K; family "ours"); cached under runs/<profile>/ablations/, keyed
    by the head, the family, the settings, the prompts and the decoding section. Family "ours": the head's
    speculative, direct and remask settings; another family: its speculative settings only (direct and remasking
    are ours in both)."""
    from mrp_repro.decoding import Direct, Dynamic, Remask, Speculative, Static
    from mrp_repro.measure.runs import eval_problems, model_for_profile, run_setting
    from mrp_repro.report.paper import RESULTS_SCHEMA

    _check_family(family)
    spec = FAMILIES[family]
    if head is None:
        settings = [("static", Static(1))] + [("dynamic", Dynamic(t)) for t in taus]
        settings += [("speculative", Speculative(K, "oracle", verify=P.decoding.verify)) for K in Ks]
    else:
        settings = [("speculative", spec(K, head, P.decoding)) for K in Ks]
        if family == "ours":
            settings += [("direct", Direct(s, head=head)) for s in (1, 2)]
            settings += [("remask", Remask(t, "tau", head=head)) for t in taus]
    # upstream decodes one prompt at a time: its acceptance is the batch minimum (docs/upstream.md), so at the
    # decoding batch size the batch's worst row sets every round's and the share hardly moves with the head
    # (tiny, batch 32: 0.54-0.55 for every head); ours accepts per row and decodes at decoding.batch_size
    batch = P.decoding.batch_size if family == "ours" else 1
    key = "|".join(map(str, (head_id, family, [p.name for _, p in settings], n_prompts, list(benchmarks),
                             P.section_hash("decoding", "data"), RESULTS_SCHEMA) + ((batch,) if batch == 1 else ())))
    path = _cache_path(P, "baseline" if head is None else "head", key)
    if path.exists():
        return pd.read_csv(path, keep_default_na=False, na_values=[""])
    d = P.decoding
    frames = []
    for bench in benchmarks:
        problems = eval_problems(P, bench, n_prompts)
        for mode, pol in settings:
            frames.append(run_setting(bb, problems, mode, pol, batch, d.max_new_tokens, model_for_profile(P),
                                      P.paper.model))  # fmt: skip
    df = pd.concat(frames, ignore_index=True)
    tmp = path.with_name(f".{path.name}.tmp")
    df.to_csv(tmp, index=False)
    tmp.replace(path)
    return pd.read_csv(path, keep_default_na=False, na_values=[""])


# ----------------------------------------------------------------------------- figure


def plot_axis(table: pd.DataFrame, paper: str = "", verdict: str = "", Ks: Sequence[int] = KS,
              taus: Sequence[float] = TAUS):  # fmt: skip
    """Four panels over the axis's variants: held-out KL ratio; TPF share of the oracle (task x K); direct step 1/2
    accuracy (task x step); remasking recovery (task x τ). Every series a bar group with its CI."""
    import matplotlib.pyplot as plt

    from mrp_repro.report.plots_base import _colors, set_theme

    if table.empty:
        raise ValueError("plot_axis: the table is empty; nothing to draw")
    set_theme()
    variants = list(dict.fromkeys(table["label"]))
    tasks = sorted(table["benchmark"].unique())
    x = np.arange(len(variants))
    fig, axs = plt.subplots(1, 4, figsize=(18, 4.4))
    kl = table.drop_duplicates("label").set_index("label").loc[variants, "heldout_kl_ratio"].astype(float)
    axs[0].bar(x, kl.fillna(0).to_numpy(), color=_colors(1)[0])
    axs[0].axhline(1.0, color="grey", ls="--", lw=1, label="uncorrected KL(B‖A)")
    for i, v in enumerate(kl):
        axs[0].text(i, 0 if math.isnan(v) else v, "n/a" if math.isnan(v) else f"{v:.2f}", ha="center",
                    va="bottom", fontsize=8)  # fmt: skip
    kl_title = {"objective": "held-out KL ratio, step 1\n(residual: KL(B‖A+C), direct: KL(B‖C); over KL(B‖A))",
                "train_source": "held-out KL(B‖A+C) / KL(B‖A), step 1\n(each on its own source's rows: not "
                "comparable across heads)"}.get(str(table["ablation"].iloc[0]), "held-out KL(B‖A+C) / KL(B‖A), step 1")
    axs[0].set_title(kl_title, fontsize=10)
    axs[0].legend(fontsize=8, loc="lower right")
    fams = [(p, f) for f, p in FAMILY_PREFIX.items() if f"{p}tpf_share_k{Ks[0]}" in table]
    panels = [(axs[1], [(f"{p}tpf_share_k{K}", f"K={K} {f}") for p, f in fams for K in Ks],
               "TPF share of the oracle (family ours / upstream)", None),
              (axs[2], [(f"direct_step{s}_accuracy", f"step {s}") for s in (1, 2)], "direct mode accuracy (%)",
               "static_accuracy"),
              (axs[3], [(f"remask_recovery_{_tau_key(t)}", f"τ={t:g}") for t in taus],
               "remasking recovery (% of dynamic's loss)", None)]  # fmt: skip
    for ax, series, title, ref in panels:
        groups = [(task, col, lab) for task in tasks for col, lab in series]
        w = 0.8 / len(groups)
        cols = _colors(len(groups))
        for j, (task, col, lab) in enumerate(groups):
            g = table[table["benchmark"] == task].set_index("label").loc[variants]
            y = g[col].astype(float).to_numpy()
            err = np.vstack([(y - g[f"{col}_lo"]).clip(lower=0), (g[f"{col}_hi"] - y).clip(lower=0)])
            pos = x - 0.4 + w * (j + 0.5)
            ax.bar(pos, np.nan_to_num(y), w, yerr=np.nan_to_num(err), color=cols[j], label=f"{task} {lab}", capsize=2)
            for p, v in zip(pos, y, strict=True):
                if math.isnan(v):
                    ax.text(p, 0, "n/a", ha="center", va="bottom", fontsize=7, rotation=90)
        if ref is not None:
            for task, ls in zip(tasks, ("--", ":", "-."), strict=False):
                ax.axhline(float(table[table["benchmark"] == task][ref].iloc[0]), color="grey", ls=ls, lw=1,
                           label=f"{task} static")  # fmt: skip
        ax.set_title(title)
        ax.legend(fontsize=7, loc="best", framealpha=0.8)
    for ax in axs:
        ax.set_xticks(x, variants, rotation=20, ha="right", fontsize=8)
    axis = table["ablation"].iloc[0]
    head = f"ablation: {axis} — paper: {paper}" + (f" — declared test: {verdict}" if verdict else "")
    fig.suptitle(head, fontsize=11)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- driver


def _head_seed_kl_spread(figs) -> str:
    """'min-max' of the held-out KL ratio over head seeds in <figs>/variance.csv (make variance), or ''."""
    path = Path(figs) / "variance.csv"
    if not path.exists():
        return ""
    t = pd.read_csv(path)
    r = t[(t["headline"] == "heldout_kl_ratio") & (t["seed_kind"] == "head seeds")]
    return f"{r['seed_min'].iloc[0]:.3f}-{r['seed_max'].iloc[0]:.3f} ({r['seeds'].iloc[0]})" if len(r) else ""


def _trained(P, bb) -> bool:
    """A finished head for P: a trained run (its done.json) or the published head (artifacts/, sha256-checked)."""
    from mrp_repro import published, stages
    from mrp_repro.trajectories import model_fingerprint

    if (stages.head_dir(P, bb) / "done.json").exists():
        return True
    return published.head_dir(P, model_fingerprint(bb.model)) is not None


def run(profile, axis_names: Sequence[str] | None = None, n_prompts: int | None = None,
        families: Sequence[str] = tuple(FAMILIES),
        Ks: Sequence[int] = KS, taus: Sequence[float] = TAUS, depths: Sequence[int] = DEPTHS,
        ks: Sequence[int] | None = None,
        released: Sequence[tuple[str, dict]] | None = None, out=None, threads: int | None = None,
        benchmarks: Sequence[str] | None = None, train: bool = True, progress: bool = False) -> dict:  # fmt: skip
    """Train (or load) every variant's head, decode, write the tables, figures and claims; see the module docstring.
    Finished heads and decodes are reused (stages' cache, runs/<profile>/ablations/), so a killed run resumes.
    released: (label, overrides with mrp.pretrained) per released head; default on paper.comparable profiles: the
    profile's own mrp.pretrained alone. threads: torch threads for training and decoding (None: as the profile).
    benchmarks: default evaluation.benchmarks. train=False: variants whose head is not trained yet are left out
    (named under their table as not run) instead of trained."""
    from mrp_repro import stages
    from mrp_repro.report import tables
    from mrp_repro.report.plots_base import save_figure
    from mrp_repro.runtime import seed_everything, set_num_threads

    P = profile
    ev = P.evaluation
    boot = dict(n_boot=ev.bootstrap_samples, ci=ev.ci, seed=0)
    seed_everything(P.seed)
    bb = stages.backbone(P, progress=progress)
    set_num_threads(threads)
    if released is None and (P.paper.comparable or P.mrp.pretrained):  # never train on such a profile
        released = [("profile", {"mrp.pretrained": P.mrp.pretrained})] if P.mrp.pretrained else []
    if released is not None:
        all_axes = released_axes(P, released)
        all_axes["released"] = Axis("released", "mrp.pretrained", "the released heads (-3lyr, -3lyr-k2, "
                                    "-3lyr-direct)", tuple(released))  # every released head, one table
    else:
        all_axes = axes(P, depths, ks)
    names = list(axis_names or all_axes)
    bad = [a for a in names if a not in all_axes]
    if bad:
        raise ValueError(f"unknown or unavailable axis {bad}; valid here: {', '.join(all_axes)}")
    n = n_prompts if n_prompts is not None else ev.n_prompts
    benches = list(benchmarks or ev.benchmarks)
    t0 = time.perf_counter()
    families = list(families)
    for f in families:
        _check_family(f)
    if "ours" not in families:
        raise ValueError("ablations: families must include `ours` (direct and remasking decode in it)")
    base_runs = _decode(P, bb, None, "baseline", "ours", Ks, taus, n, benches)
    figs = tables.out_dir(out if out is not None else P)
    spread = _head_seed_kl_spread(figs)  # make variance's span of the KL ratio, printed under depth and objective
    tabs, claims, timing, all_runs, family_runs = {}, [], [], {}, {}
    for name in names:
        ax = all_axes[name]
        rows, head_runs, skipped = [], {}, []
        for label, ov in ax.variants:
            tv = time.perf_counter()
            Pv = P.replace(ov)
            if not train and not Pv.mrp.pretrained and not _trained(Pv, bb):
                skipped.append(label)
                continue
            head, hid, metrics = _head(Pv, bb, progress)
            head_runs[label] = _decode(Pv, bb, head, hid, "ours", Ks, taus, n, benches)
            others = {f: _decode(Pv, bb, head, hid, f, Ks, taus, n, benches) for f in families if f != "ours"}
            ovs = ",".join(f"{k}={v}" for k, v in ov.items())
            for r in variant_metrics(head_runs[label], base_runs, metrics, others, Ks, taus, **boot):
                rows.append({"ablation": name, "label": label, "variant": ovs, **r, "family": " ".join(families)})
            all_runs[name, label] = head_runs[label]
            family_runs.update({(name, label, f): r for f, r in others.items()})
            timing.append((name, label, time.perf_counter() - tv))
            print(f"[ablations] {name} / {label}: {timing[-1][2]:.0f}s ({hid})", flush=True)
        if not rows:
            print(f"[ablations] {name}: no head trained yet (train=False); not tabulated", flush=True)
            continue
        t = pd.DataFrame(rows)
        first = ["ablation", "label", "benchmark", "n"]
        order = first + [c for c in columns(Ks, taus, families) if c in t and c not in (*first, "variant", "family")]
        t = t[order + ["variant", "family"] + [c for c in t if c.endswith(("_lo", "_hi"))]]
        claim = None
        if name in AXIS_CLAIMS:
            k_of = {label: P.replace(ov).mrp.k_steps for label, ov in ax.variants}
            diffs = _kstep_diffs(t, head_runs, base_runs, k_of, max(Ks), **boot) if name == "k_steps" else None
            claim = {**check_claim(name, t, diffs), "paper": ax.paper}
            claims.append(claim)
        note = [f"Paper: {ax.paper}. Axis: {ax.setting}; every head on the profile's backbone"
                + (" (released heads: mrp.pretrained)." if released is not None else " and trajectories.")]
        note.append(f"{n} prompts per task (evaluation.n_prompts{' overridden' if n_prompts is not None else ''}); "
                    f"speculative decoding families {', '.join(f'`{f}`' for f in families)} (upstream_tpf_share_*: "
                    "the released code's, over the same oracle); remasking rule tau. Columns: docs/ablations.md.")
        if name in ("depth", "objective") and spread:
            note.append(f"One head per variant (the profile's seed). Over head seeds the same KL ratio of the "
                        f"profile's own head spans {spread} (variance.md): a difference inside that span holds on "
                        "this seed without being shown robust.")
        if name == "train_source":
            note.append("Held-out KL: each head's on the held-out rows of its own training source, so the ratio "
                        "compares a head with KL(B‖A) on its own data, not the heads with each other; the decoding "
                        "columns share prompts and compare.")
        if skipped:
            note.append(f"Not run (head not trained in the time this run had): {', '.join(skipped)}.")
        if claim:
            note.append(f"Declared test — statistic: {claim['statistic']}; comparison: {claim['comparison']}; "
                        f"rule: {claim['verdict_rule']}. Ours: {claim['ours']}. **Verdict: {claim['verdict']}**.")
        tables.save_table(t, figs, f"ablation_{name}", digits=3, note="\n\n".join(note))
        tabs[name] = t
        if name == "released":  # a list of heads, not an axis: the table only
            continue
        fig = plot_axis(t, ax.paper, claim["verdict"] if claim else "", Ks, taus)
        save_figure(fig, figs, f"ablation_{name}")
        import matplotlib.pyplot as plt

        plt.close(fig)
    cl = pd.DataFrame(claims, columns=list(CLAIM_COLUMNS))
    if len(cl):
        tables.save_table(cl, figs, "ablation_claims", note=f"{n} prompts per task; the k_steps test reads family "
                          "`ours` (tpf_share_k*).")
    return {"tables": tabs, "claims": cl, "runs": all_runs, "family_runs": family_runs, "baseline": base_runs,
            "timing": timing,
            "seconds": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default=DEFAULT_PROFILE)
    ap.add_argument("--axes", nargs="*", default=None, help="default: every axis the profile has")
    ap.add_argument("--n", type=int, default=None, help="prompts per task (default evaluation.n_prompts)")
    ap.add_argument("--families", nargs="+", default=list(FAMILIES), help=f"speculative decoding families "
                    f"(default: {' '.join(FAMILIES)}; ours is required)")
    ap.add_argument("--depths", type=int, nargs="+", default=list(DEPTHS), help="head depths of the depth axis")
    ap.add_argument("--ks", type=int, nargs="+", default=None, help="k_steps of the K-step axis (default 1 2 3)")
    ap.add_argument("--released", nargs="+", default=None, help="label=SPEC[,key=value] per released head")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: the profile's)")
    ap.add_argument("--out", type=Path, default=None, help="default: figures/<profile>/")
    ap.add_argument("--no-train", action="store_true", help="tabulate the heads trained so far; train nothing")
    a = ap.parse_args(argv)
    from mrp_repro.config import load_profile

    released = [parse_released(r) for r in a.released] if a.released else None
    res = run(load_profile(a.profile), a.axes, a.n, a.families, depths=a.depths, ks=a.ks, released=released,
              out=a.out, threads=a.threads, train=not a.no_train, progress=False)  # fmt: skip
    print(res["claims"].to_string(index=False))
    print(f"[ablations] done in {res['seconds']:.0f}s")


if __name__ == "__main__":
    from mrp_repro.cli import run_cli

    run_cli(main)
