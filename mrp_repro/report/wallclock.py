"""Wall clock that can be trusted, or no verdict on it: repeated interleaved passes, three sanity checks, the gate.

    from mrp_repro.report import wallclock
    passes = wallclock.repeated_passes(P, bb, head)      # 05: R interleaved passes of the speed verdicts' settings
    checks = wallclock.checks_table(results)             # one row per (check, benchmark, algorithm, setting, batch)
    outs = wallclock.gate("speculative-speedup", outs, checks)   # report.claims: a failed check -> not measurable
    t = wallclock.with_weighted_forwards(table, runs, head_cost)  # + weighted_forwards, weighted_tpf

A speed verdict is only as good as the clock under it. On a shared 2-core CPU one pass of a grid can be slowed
several-fold while another setting runs at full speed (a committed backbone.md once timed static(1) at 118.5 tok/s
where modes.md timed the same decode, same batch size 32, at 2877: the two were collected at different moments).
Every speed verdict therefore passes three checks first, each declared here before looking at any result:

- ``ceiling``: a wall-clock speedup cannot beat its forward-count ceiling, tokens per backbone forward of the
  setting over static(1)'s on the same prompts (every verify charged as one forward, every head call free, so a
  generous bound; at batch 1 this is nfe_speedup, at a larger batch a batch costs the forwards of its longest
  row). Fails when the speedup's CI upper bound exceeds it by more than CEILING_SLACK.
- ``agreement``: two grids that time the same decode (same benchmark, algorithm, setting and batch size: never a
  batch-1 speedup against a batch-32 one) must give speedup CIs that overlap.
- ``repeatable``: the setting's speedup over static in PASSES repeated interleaved passes (each pass times every
  setting once, in a rotated order) must reproduce the grid's: the grid's CI overlaps the passes' range, and a
  direction the grid's CI shows (all above or all below 1) holds in every pass. With 5 passes the range
  [min, max] is a 94% interval for the median pass (1 - 2 / 2^5).

`gate` turns the verdict of a speed claim whose checks fail into NOT_MEASURABLE ("not measurable here"), naming the
failed check; the claim's numbers stay in its row.
"""

from __future__ import annotations

import math
import time

import pandas as pd

from mrp_repro.measure import stats

__all__ = ["PASSES", "CEILING_SLACK", "SPEED_CLAIMS", "CHECK_COLUMNS", "speed_settings", "repeated_passes",
           "pass_decodes", "pass_speedups", "checks_table", "gate", "with_weighted_forwards"]  # fmt: skip

#: interleaved passes per setting (the range of 5 is a 94% interval for the median pass)
PASSES = 5
#: prompts per benchmark in the repeated passes: a few at batch 1, one batch otherwise (the grid has them all)
PASS_PROMPTS_BATCH1 = 8
PASS_BATCHES = 1
#: a measured speedup may exceed its forward-count ceiling by this share (commit forwards cost a little less)
CEILING_SLACK = 0.05
#: the claims judged on wall clock -> the scopes of their rows that are (None: every row)
SPEED_CLAIMS = {"speculative-speedup": None, "direct-tradeoff": None, "remask-equal-speed": "wall_speedup",
                "direct-equal-speed": "wall_speedup"}  # fmt: skip
CHECK_COLUMNS = ["sanity_check", "benchmark", "algorithm", "setting", "batch_size", "speedup", "speedup_lo",
                 "speedup_hi", "check_reference", "check_passed", "check_detail"]  # fmt: skip


# ----------------------------------------------------------------------------- which settings a speed verdict reads


def _is_speed_setting(mode: str, algorithm: str, K, rule: str, threshold, batch_size: int) -> bool:
    """Settings a speed claim reads: at batch 1 speculative K = 3; at the decoding batch every frontier setting
    (static, dynamic), direct steps 1-2 and remask(τ, tau) in τ 0.5-0.9 (report.claims)."""
    if mode == "static":
        return True
    if batch_size == 1:
        return mode == "speculative" and K == 3
    return algorithm == "ours" and (
        mode == "dynamic" or (mode == "direct" and K in (1, 2))
        or (mode == "remask" and rule == "tau" and 0.5 - 1e-9 <= threshold <= 0.9 + 1e-9)
    )  # fmt: skip


def speed_settings(profile, head, batch_size: int) -> list:
    """(mode, policy) the speed verdicts read at `batch_size` (measure.runs.settings_for, filtered)."""
    from mrp_repro.measure.runs import settings_for

    out = []
    for mode, pol in settings_for(profile, head):
        c = _columns(mode, pol)
        if c["drafter"] in ("", "mrp", "sum") and _is_speed_setting(mode, c["algorithm"], c["K"], c["rule"],
                                                                      c["threshold"], batch_size):  # fmt: skip
            out.append((mode, pol))
    timed = {p.algorithm for m, p in out if m != "static"}
    return [(m, p) for m, p in out if m != "static" or p.algorithm in timed]  # a static only as a reference


def _columns(mode, pol) -> dict:
    from mrp_repro.measure.runs import _setting_columns

    return _setting_columns(mode, pol)


# ----------------------------------------------------------------------------- repeated interleaved passes


def _pass_prompts(profile, batch_size: int) -> int:
    """Prompts per benchmark of the passes at `batch_size`: PASS_PROMPTS_BATCH1 at batch 1, PASS_BATCHES batches
    otherwise, and never more than a quarter of the grid's prompts (evaluation.n_prompts; smoke: 1)."""
    want = PASS_PROMPTS_BATCH1 if batch_size == 1 else PASS_BATCHES * batch_size
    return min(want, max(1, (profile.evaluation.n_prompts or 200) // 4))


def repeated_passes(profile, backbone, head, batch_sizes=None, passes: int = PASSES, benchmarks=None,
                    n_prompts: int | None = None, max_new_tokens: int | None = None) -> pd.DataFrame:  # fmt: skip
    """Wall seconds of every speed setting (speed_settings) in `passes` interleaved passes, per benchmark and batch
    size (default 1 and the decoding batch): each pass decodes the same prompts (_pass_prompts) with every setting
    once, the order rotated by one each pass, so a slow stretch of the machine hits a different setting each time
    (n_prompts, max_new_tokens: smaller, for tests). One row per (benchmark, batch_size, setting, repeat), `slot`
    its place in the pass."""
    from mrp_repro.backbone import encode_prompts
    from mrp_repro.measure.runs import eval_problems

    sizes = batch_sizes or sorted({1, int(profile.decoding.batch_size)})
    max_new = max_new_tokens or profile.decoding.max_new_tokens
    rows = []
    for bs in sizes:
        settings = speed_settings(profile, head, bs)
        n = n_prompts or _pass_prompts(profile, bs)
        for bench in benchmarks or profile.evaluation.benchmarks:
            prompts = encode_prompts(backbone, eval_problems(profile, bench, n))[:n]
            order = sorted(range(len(prompts)), key=lambda i: (len(prompts[i]), i))  # as the grid: less padding
            batches = [[prompts[i] for i in order[j : j + bs]] for j in range(0, len(order), bs)]
            for _, pol in settings:  # warm-up: first calls allocate caches
                backbone.generate(batches[0], pol, max_new)
            for r in range(passes):
                k = r % len(settings)
                for slot, (mode, pol) in enumerate(settings[k:] + settings[:k]):
                    tokens, t0 = 0, time.perf_counter()
                    for b in batches:
                        tokens += sum(s.tokens for s in backbone.generate(b, pol, max_new).stats)
                    rows.append({"benchmark": bench, "batch_size": bs, "algorithm": pol.algorithm, "mode": mode,
                                 "setting": pol.name, "repeat": r, "slot": slot, "tokens": tokens,
                                 "wall_s": time.perf_counter() - t0})  # fmt: skip
    return pd.DataFrame(rows)


def pass_decodes(profile, head, passes: int = PASSES) -> dict:
    """Batch decodes (generate calls) of repeated_passes on `profile` against those of the grids it re-times
    (speculative_runs at batch 1, modes_runs at the decoding batch): the scheme's cost, counted without a clock."""
    from mrp_repro.measure.runs import settings_for
    from mrp_repro.report.grids import LATENCY_PROMPTS

    bs = int(profile.decoding.batch_size)
    n_bench = len(profile.evaluation.benchmarks)
    n_eval = profile.evaluation.n_prompts or 200
    extra = sum(passes * len(speed_settings(profile, head, b)) * -(-_pass_prompts(profile, b) // b)
                for b in sorted({1, bs})) * n_bench  # fmt: skip
    spec = len(settings_for(profile, head, ("static", "speculative"))) * min(LATENCY_PROMPTS, n_eval)
    modes = len(settings_for(profile, head)) * -(-n_eval // bs)
    return {"passes": extra, "grids": (spec + modes) * n_bench}


def pass_speedups(passes: pd.DataFrame) -> pd.DataFrame:
    """Per (benchmark, batch_size, algorithm, setting): the speedup over the same algorithm's static in each pass
    (tokens/s over static's tokens/s of that pass), summarized as median, min and max over the passes."""
    p = passes.assign(tps=passes["tokens"] / passes["wall_s"])
    keys = ["benchmark", "batch_size", "algorithm"]
    static = p[p["mode"] == "static"].set_index(keys + ["repeat"])["tps"]
    p["pass_speedup"] = [r.tps / static.get((r.benchmark, r.batch_size, r.algorithm, r.repeat), math.nan)
                         for r in p.itertuples()]  # fmt: skip
    g = p[p["mode"] != "static"].groupby(keys + ["setting"], sort=False)["pass_speedup"]
    return pd.DataFrame({"median": g.median(), "min": g.min(), "max": g.max(), "passes": g.size()}).reset_index()


# ----------------------------------------------------------------------------- the checks


def _grid_speedups(runs: pd.DataFrame, n_boot: int, ci: float, seed: int) -> pd.DataFrame:
    """Speedup over static with its paired CI and the forward-count ceiling (nfe_speedup), per speed setting."""
    rows = []
    for (bench, algo, bs), g in runs.groupby(["benchmark", "algorithm", "batch_size"], sort=False):
        s = g[g["mode"] == "static"].set_index("problem_id")
        if s.empty:
            continue
        s_fw = s["denoise_forwards"] + s["commit_forwards"]
        for (mode, name), h in g[g["mode"] != "static"].groupby(["mode", "setting"], sort=False):
            r0 = h.iloc[0]
            drafter = r0["drafter"] if isinstance(r0["drafter"], str) else ""
            rule = r0["rule"] if isinstance(r0["rule"], str) else ""
            if drafter not in ("", "mrp") or not _is_speed_setting(mode, algo, r0["K"], rule, r0["threshold"], int(bs)):
                continue
            h = h.set_index("problem_id")
            ids = h.index.intersection(s.index)
            h, st, fw = h.loc[ids], s.loc[ids], s_fw.loc[ids]
            x, lo, hi = stats.ratio_ci(h["tokens"], h["wall_s"], st["tokens"], st["wall_s"], n_boot, ci, seed)
            # a batch runs as many forwards as its longest row: the rows of one batch share one wall_s (the batch's
            # time split evenly), so static's wall_s names the batches, the same prompts in every setting
            batch = st["wall_s"]
            fw_m = (h["denoise_forwards"] + h["commit_forwards"]).groupby(batch).max().sum()
            ceil = (h["tokens"].sum() / fw_m) / (st["tokens"].sum() / fw.groupby(batch).max().sum())
            rows.append(dict(benchmark=bench, algorithm=algo, setting=name, batch_size=int(bs), speedup=x,
                             speedup_lo=lo, speedup_hi=hi, ceiling=float(ceil)))  # fmt: skip
    return pd.DataFrame(rows, columns=["benchmark", "algorithm", "setting", "batch_size", "speedup", "speedup_lo",
                                       "speedup_hi", "ceiling"])  # fmt: skip


def checks_table(results: dict, n_boot: int = 1000, ci: float = 0.95, seed: int = 0) -> pd.DataFrame:
    """Every sanity check of every speed setting in the grids of `results` (report.paper.load_results):
    speculative_runs, modes_runs, backbone_runs (agreement where two grids time the same decode at the same batch
    size) and wallclock_passes (repeatable). Columns CHECK_COLUMNS; `check_passed` False: a clock not to judge on."""
    grids = {n: results[n] for n in ("speculative_runs", "modes_runs", "backbone_runs") if n in results}
    speeds = {n: _grid_speedups(r, n_boot, ci, seed) for n, r in grids.items()}
    rows = []
    key = ["benchmark", "algorithm", "setting", "batch_size"]
    for name, sp in speeds.items():
        for r in sp.itertuples(index=False):
            bound = r.ceiling * (1 + CEILING_SLACK)
            rows.append(dict(sanity_check="ceiling", **{k: getattr(r, k) for k in key}, speedup=r.speedup,
                             speedup_lo=r.speedup_lo, speedup_hi=r.speedup_hi, check_reference=bound,
                             check_passed=bool(r.speedup_hi <= bound),
                             check_detail=f"{name}: CI upper bound {r.speedup_hi:.2f}× vs the forward-count ceiling "
                             f"{r.ceiling:.2f}× (+{CEILING_SLACK:.0%})"))  # fmt: skip
    names = list(speeds)
    for i, a in enumerate(names):  # two grids timing the same decode: same setting and batch size only
        for b in names[i + 1 :]:
            m = speeds[a].merge(speeds[b], on=key, suffixes=("_a", "_b"))
            for r in m.itertuples(index=False):
                overlap = r.speedup_lo_a <= r.speedup_hi_b and r.speedup_lo_b <= r.speedup_hi_a
                rows.append(dict(sanity_check="agreement", **{k: getattr(r, k) for k in key}, speedup=r.speedup_a,
                                 speedup_lo=r.speedup_lo_a, speedup_hi=r.speedup_hi_a, check_reference=r.speedup_b,
                                 check_passed=bool(overlap),
                                 check_detail=f"{a} {r.speedup_a:.2f}× [{r.speedup_lo_a:.2f}, {r.speedup_hi_a:.2f}] vs "
                                 f"{b} {r.speedup_b:.2f}× [{r.speedup_lo_b:.2f}, {r.speedup_hi_b:.2f}], batch "
                                 f"{r.batch_size}"))  # fmt: skip
    if "wallclock_passes" in results and len(results["wallclock_passes"]):
        ps = pass_speedups(results["wallclock_passes"])
        for name, sp in speeds.items():
            m = sp.merge(ps, on=key)
            for r in m.itertuples(index=False):
                overlap = r.speedup_lo <= r.max and r.min <= r.speedup_hi
                same_way = not (r.speedup_lo > 1 and r.min <= 1) and not (r.speedup_hi < 1 and r.max >= 1)
                rows.append(dict(sanity_check="repeatable", **{k: getattr(r, k) for k in key}, speedup=r.speedup,
                                 speedup_lo=r.speedup_lo, speedup_hi=r.speedup_hi, check_reference=r.median,
                                 check_passed=bool(overlap and same_way),
                                 check_detail=f"{name} {r.speedup:.2f}× [{r.speedup_lo:.2f}, {r.speedup_hi:.2f}] vs "
                                 f"{int(r.passes)} interleaved passes: median {r.median:.2f}×, range "
                                 f"[{r.min:.2f}, {r.max:.2f}]"))  # fmt: skip
    return pd.DataFrame(rows, columns=CHECK_COLUMNS)


# ----------------------------------------------------------------------------- the gate


def _scope_benchmark(scope: str) -> tuple[str, str | None]:
    """(benchmark, algorithm or None) of a claim row's scope ("synth-math", "synth-math, ours",
    "synth-code, equal wall_speedup")."""
    parts = [p.strip() for p in scope.split(",")]
    algo = parts[1] if len(parts) > 1 and parts[1] in ("ours", "upstream") else None
    return parts[0], algo


def _relevant(claim_id: str, bench: str, algo: str | None, checks: pd.DataFrame) -> pd.DataFrame:
    c = checks[checks["benchmark"] == bench]
    if claim_id == "speculative-speedup":  # batch 1, speculative K = 3 of that family
        k3 = c["setting"].str.contains("(3,", regex=False)
        return c[(c["batch_size"] == 1) & (c["algorithm"] == (algo or "ours")) & k3]
    c = c[(c["batch_size"] > 1) & (c["algorithm"] == "ours")]
    if claim_id == "direct-tradeoff":
        return c[c["setting"].isin(["direct(1)", "direct(2)"])]
    return c  # equal wall clock: the frontier and every compared setting


def gate(claim_id: str, outcomes: list, checks: pd.DataFrame | None) -> list:
    """`outcomes` of claim `claim_id` (report.verdicts.Outcome), with the verdict of each wall-clock row whose
    sanity checks (checks_table) fail replaced by NOT_MEASURABLE and the failed checks in its reason. Rows of other
    claims, TPF rows and rows without checks pass through unchanged."""
    from dataclasses import replace

    from mrp_repro.report.verdicts import NA, NOT_MEASURABLE

    if claim_id not in SPEED_CLAIMS or checks is None or not len(checks):
        return outcomes
    axis = SPEED_CLAIMS[claim_id]
    out = []
    for o in outcomes:
        if o.verdict == NA or (axis is not None and axis not in o.scope):
            out.append(o)
            continue
        bench, algo = _scope_benchmark(o.scope)
        bad = _relevant(claim_id, bench, algo, checks)
        bad = bad[~bad["check_passed"].astype(bool)]
        if bad.empty:
            out.append(o)
            continue
        named = "; ".join(f"{r.sanity_check} {r.setting}: {r.check_detail}" for r in bad.head(3).itertuples())
        more = f" (+{len(bad) - 3} more)" if len(bad) > 3 else ""
        out.append(replace(o, verdict=NOT_MEASURABLE,
                           reason=f"wall clock not measurable here ({o.verdict} before the checks): {named}{more}"))
    return out


# ----------------------------------------------------------------------------- weighted forwards


def with_weighted_forwards(table: pd.DataFrame, runs: pd.DataFrame, head_cost: float) -> pd.DataFrame:
    """`table` plus weighted_forwards (backbone forwards + head calls x head_cost, per prompt) and weighted_tpf
    (tokens per denoising forward with each head call charged head_cost forwards), from the runs it was built
    from. Rows are matched on benchmark, algorithm (when both have it) and setting; a speculative table (K, no
    setting) on its drafter's settings (default mrp); a direct table's baseline / mrp_stepK on static(1) /
    direct(K)."""
    r = runs.assign(_wf=runs["denoise_forwards"] + runs["commit_forwards"] + runs["mrp_forwards"] * head_cost,
                    _wd=runs["denoise_forwards"] + runs["mrp_forwards"] * head_cost)  # fmt: skip
    g = r.groupby(["benchmark", "algorithm", "setting"], sort=False)
    agg = pd.DataFrame({"weighted_forwards": g["_wf"].mean(), "weighted_tpf": g["tokens"].sum() / g["_wd"].sum()})
    agg = agg.reset_index()
    t = table.copy()
    if "setting" not in t and "K" in t:  # speculative_table: one drafter's rows by (algorithm, K)
        spec = r[(r["mode"] == "speculative") & r["drafter"].isin(["mrp", "sum"])]
        name = spec.drop_duplicates(["benchmark", "algorithm", "K"]).set_index(["benchmark", "algorithm", "K"])
        t["_setting"] = [name["setting"].get((b, a, float(k)), "") for b, a, k in zip(t["benchmark"], t["algorithm"],
                                                                                      t["K"], strict=True)]  # fmt: skip
    else:
        s = t["setting"].astype(str)
        t["_setting"] = s.where(~s.eq("baseline"), "static(1)").str.replace(r"^mrp_step(\d+)$", r"direct(\1)",
                                                                              regex=True)  # fmt: skip
    if "algorithm" not in t:
        t["_algo_drop"] = True
        t["algorithm"] = "ours"
    out = t.merge(agg.rename(columns={"setting": "_setting"}), on=["benchmark", "algorithm", "_setting"], how="left")
    out.index = t.index
    if "_algo_drop" in out:
        out = out.drop(columns=["_algo_drop", "algorithm"])
    out = out.drop(columns="_setting")
    # beside TPF where the table has it
    cols = [c for c in out.columns if c not in ("weighted_forwards", "weighted_tpf")]
    at = cols.index("tpf") + 1 if "tpf" in cols else len(cols)
    out = out[cols[:at] + ["weighted_tpf", "weighted_forwards"] + cols[at:]]
    out.attrs = table.attrs
    return out
