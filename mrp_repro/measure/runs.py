"""The grid: decode every problem with every decoding setting, score it, one runs record per (prompt, setting).

    from mrp_repro.measure.runs import collect_runs, settings_for, eval_problems
    runs = collect_runs(profile, backbone, head)                        # every mode (the notebooks' runs frame)
    runs = collect_runs(profile, backbone, head, settings=settings_for(profile, head, ("static", "speculative")),
                        batch_size=1)                                   # the latency regime of 05

The only producer of runs frames; the columns are mrp_repro.measure.schema.RUN_COLUMNS. Summaries are
mrp_repro.measure.stats.summarize; tables and figures live in mrp_repro.report.

Settings (METHOD.md §1, §3-5): static(1); dynamic(tau) for the profile thresholds (with a head: also every
remasking tau, the remask rows' paired baseline); speculative K in
decoding.speculative_k x drafter {mrp, oracle, naive}; direct steps {1, 2} + decoding.lookahead_k;
naive lookahead K in decoding.lookahead_k (reveals K + 1 tokens per forward); remask tau in
{0.5, 0.3} + thresholds x decoding.remask_rules. With "upstream" in decoding.algorithms (and a head), the
released code's speculative for every K (decoding.upstream, draft logits decoding.upstream_draft_logits) and its
static, their reference (column `algorithm`); without "ours" there, our speculative is left out. With "upstream"
and a head, also the released code's remasking (decoding.upstream_remask): UpstreamDynamic(tau), its baseline, and
UpstreamRemask(tau, delta) for delta in decoding.upstream_remask_deltas, at every remasking tau.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import pandas as pd

from mrp_repro import distributed
from mrp_repro import inputs as run_inputs
from mrp_repro.decoding import (
    DRAFTERS,
    REMASK_RULES,
    Direct,
    Dynamic,
    NaiveLookahead,
    Policy,
    Remask,
    Speculative,
    Static,
)
from mrp_repro.decoding.upstream import UpstreamSpeculative, UpstreamStatic
from mrp_repro.decoding.upstream_remask import UpstreamDynamic, UpstreamRemask
from mrp_repro.measure.schema import MODES, RUN_COLUMNS, UPSTREAM_COUNTERS
from mrp_repro.runtime import machine_summary
from mrp_repro.tasks import synthetic

__all__ = ["model_for_profile", "score_problem", "eval_problems", "settings_for", "static_first", "batch_order",
           "run_setting", "decode_batch", "collect_runs", "decode_events", "identical_to_static"]  # fmt: skip

def model_for_profile(profile) -> str:
    """The model name our runs carry: the declared paper model (profile.paper.model) where our numbers compare
    with the paper's (profile.paper.comparable), else the profile's name (tiny, smoke, sdar-mini)."""
    return profile.paper.model if profile.paper.comparable else profile.name


def score_problem(problem, text: str) -> dict:
    """{"correct", "valid_chain" (NaN for real benchmarks), "extracted", "sandbox"} for one output."""
    b = problem.benchmark
    if b in synthetic.TASKS:
        return {"sandbox": "", **synthetic.score(problem, text)}
    from mrp_repro.tasks import extract

    if b in ("gsm8k", "math500"):
        r = extract.score_math(text, problem.reference, benchmark=b)
        sandbox = ""  # nothing is executed
    elif b in ("humaneval", "mbpp"):
        r = extract.score_code(text, problem)
        sandbox = r["sandbox"]  # which sandbox ran the tests: "bwrap", or "guard-only" when opted in
    else:
        raise ValueError(f"no scorer for benchmark {b!r}; add one to measure.runs.score_problem")
    return {"correct": bool(r["correct"]), "valid_chain": math.nan, "extracted": r["extracted"], "sandbox": sandbox}


def eval_problems(profile, task: str | None = None, n: int | None = None) -> list:
    """Held-out problems of one task (or of every evaluation.benchmarks entry): the test split of a
    synthetic task, or the first n of a real benchmark (n defaults to evaluation.n_prompts)."""
    from mrp_repro.runtime import data_dir
    from mrp_repro.tasks import benchmarks

    if task is None:
        return [p for t in profile.evaluation.benchmarks for p in eval_problems(profile, t, n)]
    n = n if n is not None else profile.evaluation.n_prompts
    if task in synthetic.TASKS:
        return synthetic.generate(task, "test", n or profile.data.n_eval or 200, profile.data.seed, profile.block_size)
    return benchmarks.load_benchmark(task, data_dir(profile), limit=n)


def settings_for(profile, head, modes: Sequence[str] = MODES) -> list[tuple[str, Policy]]:
    """(mode, policy) of every benchmarked setting of the given modes; the MRP settings only with a head."""
    bad = set(modes) - set(MODES)
    if bad:
        raise ValueError(f"unknown mode(s) {sorted(bad)}; valid: {', '.join(MODES)}")
    d = profile.decoding
    remask_taus = sorted({0.5, 0.3, *d.thresholds}, reverse=True)
    out: list[tuple[str, Policy]] = [("static", Static(1))]
    # with a head, dynamic(tau) at every remasking tau too: remask(tau) is paired with it (the remasking table)
    out += [("dynamic", Dynamic(t)) for t in (remask_taus if head is not None else d.thresholds)]
    if "ours" in d.algorithms:
        drafters = [dr for dr in DRAFTERS if dr != "mrp" or head is not None]
        out += [("speculative", Speculative(K, dr, head=head, verify=d.verify)) for K in d.speculative_k
                for dr in drafters]  # fmt: skip
    upstream = "upstream" in d.algorithms and head is not None
    if upstream and {"speculative", "dynamic", "remask"} & set(modes):
        # their static is the reference of their other settings (identical_to_static), decoded with them
        out += [("static", UpstreamStatic())]
    if upstream and "speculative" in modes:
        out += [("speculative", UpstreamSpeculative(K, head, d.upstream_draft_logits, d.upstream_sum_scale, d.verify))
                for K in d.speculative_k]  # fmt: skip
    if head is not None:  # direct steps 1/2 (the direct table) and every lookahead K (the lookahead table)
        out += [("direct", Direct(s, head=head)) for s in sorted({1, 2, *d.lookahead_k})]
    # The paper's lookahead K counts tokens beyond the backbone's own pick (its naive K = 1 row is below
    # static, its MRP K = 1 row equals direct step 1), so naive lookahead K reveals K + 1 tokens.
    out += [("naive", NaiveLookahead(k + 1)) for k in d.lookahead_k]
    if head is not None:
        for t in remask_taus:
            for rule in (r for r in REMASK_RULES if r in d.remask_rules):
                delta = {"delta": d.remask_delta, "logp-delta": d.remask_logp_delta}.get(rule)
                out.append(("remask", Remask(t, rule, delta=delta, head=head)))
        if upstream:  # the released code's remasking, paired with its own dynamic(tau)
            for t in remask_taus:
                out.append(("dynamic", UpstreamDynamic(t)))
                out += [("remask", UpstreamRemask(t, x, head=head)) for x in d.upstream_remask_deltas]
    return [(m, p) for m, p in out if m in modes]


def _setting_columns(mode: str, pol: Policy) -> dict:
    """The schema's setting columns of one policy (NaN / '' where the mode has no such parameter)."""
    K = {"speculative": lambda: pol.K, "direct": lambda: pol.steps, "naive": lambda: pol.k - 1}.get(mode)
    return {
        "algorithm": pol.algorithm,
        "mode": mode,
        "setting": pol.name,
        "K": float(K()) if K else math.nan,
        "threshold": float(pol.tau) if mode in ("dynamic", "remask") else math.nan,
        "rule": pol.rule if mode == "remask" else "",
        "delta": float(pol.delta) if mode == "remask" and getattr(pol, "delta", None) is not None else math.nan,
        "drafter": pol.drafter if mode == "speculative" else "",
        "verify": str(getattr(pol, "verify", "")) if mode == "speculative" else "",
    }


def batch_order(prompts: Sequence[Sequence[int]], batch_size: int) -> list[list[int]]:
    """The batches run_setting decodes: prompt indices sorted by (length, index), cut every batch_size.
    measure.sharded hands out exactly these batches, so a sharded grid decodes the same rows together."""
    order = sorted(range(len(prompts)), key=lambda i: (len(prompts[i]), i))
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def run_setting(backbone, problems: Sequence, mode: str, policy: Policy, batch_size: int, max_new_tokens: int,
                model: str, paper_model: str = "", progress: bool = False,
                inputs: str = "") -> pd.DataFrame:  # fmt: skip
    """Decode every problem with `policy`; one runs record per problem, in the input order (identical_to_static
    is left False: collect_runs fills it against the static run of the same problems).

    Batches are formed after sorting by prompt length (less padding); wall_s is the batch's wall time split
    evenly over its rows."""
    from mrp_repro.backbone import decode, encode_prompts

    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; valid: {', '.join(MODES)}")
    prompts = encode_prompts(backbone, problems)
    batches = batch_order(prompts, batch_size)
    if progress:
        from tqdm.auto import tqdm

        batches = tqdm(batches, desc=policy.name, leave=False, dynamic_ncols=True)
    setting = _setting_columns(mode, policy)
    rank = distributed.current().rank
    machine = machine_summary()
    rows: dict[int, dict] = {}
    for idx in batches:
        t0 = time.perf_counter()
        res = backbone.generate([prompts[i] for i in idx], policy, max_new_tokens)
        wall = (time.perf_counter() - t0) / len(idx)
        for j, i in enumerate(idx):
            p, s = problems[i], res.stats[j]
            text = decode(backbone, res.tokens[j])
            sc = score_problem(p, text)
            rows[i] = {
                "model": model, "paper_model": paper_model, "inputs": inputs, "machine": machine,
                "benchmark": p.benchmark,
                "problem_id": p.task_id,
                "prompt_index": i, **setting,
                "batch_size": batch_size, "correct": bool(sc["correct"]), "valid_chain": float(sc["valid_chain"]),
                "extracted": sc["extracted"], "sandbox": sc.get("sandbox", ""), "text": text, "tokens": s.tokens,
                "denoise_forwards": s.denoise_forwards, "commit_forwards": s.commit_forwards,
                "fused_commits": s.fused_commits, "mrp_forwards": s.mrp_forwards, "rounds": s.rounds,
                "drafted": s.drafted, "accepted": s.accepted, "revoked": s.revoked,
                "accept_lengths": " ".join(map(str, s.accept_lengths)), "wall_s": wall, "wall_rank": rank,
                "identical_to_static": False,
                **_upstream_columns(res, len(idx)),
            }  # fmt: skip
    return pd.DataFrame([rows[i] for i in range(len(problems))], columns=list(RUN_COLUMNS))


def _upstream_columns(res, rows: int) -> dict:
    """The upstream counter columns of one row of a batch of `rows`: the batch's counts / rows; NaN for ours."""
    batch = getattr(res, "batch", None)  # decoding.upstream.UpstreamResult
    if batch is None:
        return {c: math.nan for c in UPSTREAM_COUNTERS}
    return {c: getattr(batch, attr) / rows for c, attr in UPSTREAM_COUNTERS.items()}


def static_first(profile, head, settings, what: str) -> list[tuple[str, Policy]]:
    """`settings` (default settings_for(profile, head)) with the static settings first, one per algorithm: the
    reference every other setting of that algorithm compares with (identical_to_static). ValueError unless our
    static(1) is there and every algorithm has exactly one static."""
    settings = list(settings if settings is not None else settings_for(profile, head))
    static = [s for s in settings if s[0] == "static"]
    by_algo = [p.algorithm for _, p in static]
    if "static(1)" not in [p.name for _, p in static] or len(set(by_algo)) != len(by_algo) or (
        {p.algorithm for _, p in settings} != set(by_algo)
    ):
        raise ValueError(f"{what} needs our static(1) and exactly one static setting per algorithm (the reference "
                         "of identical_to_static)")  # fmt: skip
    return static + [s for s in settings if s[0] != "static"]


def identical_to_static(refs: dict, policy, text):
    """text (array) == the static output of policy's algorithm (refs: algorithm -> texts; the first call of an
    algorithm, its static, records them)."""
    ref = refs.setdefault(policy.algorithm, text)
    return text == ref


def decode_batch(backbone, problems: Sequence, indices: Sequence[int], settings, batch_size: int,
                 max_new_tokens: int, model: str, paper_model: str = "", inputs: str = "") -> pd.DataFrame:  # fmt: skip
    """One batch of a benchmark (`problems`, at positions `indices` of its evaluation list) decoded with every
    setting in turn, each algorithm's static(1) first (that algorithm's reference of identical_to_static). Every
    setting of a prompt runs back to back, so a slow stretch of the machine hits static and the others alike: their
    wall-clock ratios are paired (at batch 1 this is the speedup's measurement of record). collect_runs and
    measure.sharded decode through it."""
    frames, refs = [], {}
    for mode, pol in settings:
        df = run_setting(backbone, problems, mode, pol, batch_size, max_new_tokens, model, paper_model,
                         inputs=inputs)  # fmt: skip
        df["prompt_index"] = [indices[i] for i in df["prompt_index"]]
        df["identical_to_static"] = identical_to_static(refs, pol, df["text"].to_numpy())
        frames.append(df)
    out = pd.concat(frames, ignore_index=True)
    for c in ("valid_chain", "K", "threshold"):  # floats whatever the batch holds
        out[c] = out[c].astype(float)
    return out


def collect_runs(profile, backbone, head, n_prompts: int | None = None, benchmarks: Sequence[str] | None = None,
                 settings: Sequence[tuple[str, Policy]] | None = None, batch_size: int | None = None,
                 max_new_tokens: int | None = None, progress: bool = False) -> pd.DataFrame:  # fmt: skip
    """The runs frame: every setting (default settings_for(profile, head)) on the same problems of every
    benchmark (default evaluation.benchmarks), batch by batch (batch_order), each batch decoded with every setting
    in turn, static(1) first (decode_batch). Rows in (benchmark, setting, prompt_index) order."""
    from mrp_repro.backbone import encode_prompts

    d = profile.decoding
    bs, max_new = batch_size or d.batch_size, max_new_tokens or d.max_new_tokens
    settings = static_first(profile, head, settings, "collect_runs")
    rank = {p.name: i for i, (_, p) in enumerate(settings)}
    model = model_for_profile(profile)
    resolved = run_inputs.summary_for(profile)  # recorded by notebook 00, else resolved now
    frames = []
    for bench in benchmarks or profile.evaluation.benchmarks:
        problems = eval_problems(profile, bench, n_prompts)
        batches = batch_order(encode_prompts(backbone, problems), bs)
        if progress:
            from tqdm.auto import tqdm

            batches = tqdm(batches, desc=f"{bench} ({len(settings)} settings)", leave=False, dynamic_ncols=True)
        parts = [decode_batch(backbone, [problems[i] for i in idx], idx, settings, bs, max_new, model,
                              profile.paper.model, resolved) for idx in batches]  # fmt: skip
        df = pd.concat(parts, ignore_index=True)
        df = df.assign(_r=df["setting"].map(rank)).sort_values(["_r", "prompt_index"], kind="stable")
        frames.append(df.drop(columns="_r"))
        if progress:
            for name, g in frames[-1].groupby("setting", sort=False):
                tpf = g["tokens"].sum() / max(g["denoise_forwards"].sum(), 1)
                print(f"[runs] {bench} {name}: acc {100 * g['correct'].mean():.1f} tpf {tpf:.2f}", flush=True)
    out = pd.concat(frames, ignore_index=True)
    out["valid_chain"] = out["valid_chain"].astype(float)
    out["K"] = out["K"].astype(float)
    out["threshold"] = out["threshold"].astype(float)
    return out


def decode_events(backbone, policy, problems: list, max_new_tokens: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run one decoding policy on a few problems; returns (trace events, per-round accept lengths)."""
    from mrp_repro.backbone import encode_prompts

    bb = backbone
    res = bb.generate(encode_prompts(bb, problems), policy, max_new_tokens)
    trace = pd.DataFrame(res.trace, columns=["row", "block", "step", "kind", "pos", "token"])
    acc = [{"row": r, "round": i, "accept_length": a} for r, s in enumerate(res.stats)
           for i, a in enumerate(s.accept_lengths)]  # fmt: skip
    return trace, pd.DataFrame(acc, columns=["row", "round", "accept_length"])
