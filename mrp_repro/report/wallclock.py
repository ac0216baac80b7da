"""Wall clock that can be trusted, or no verdict on it: repeated interleaved passes, three sanity checks, the gate,
one measurement of record per decode.

    from mrp_repro.report import wallclock
    passes = wallclock.repeated_passes(P, bb, head)      # 05: R interleaved passes of the speed verdicts' settings
    checks = wallclock.checks_table(results)             # a row per (check, grid, benchmark, algorithm, setting, batch)
    outs = wallclock.gate("speculative-speedup", outs, checks)   # report.claims: a failed check -> not measurable
    record = wallclock.record_table(results, checks)     # one row per decode: the measurement of record and its gate
    t = wallclock.mark_clock(table, "modes_runs", record)  # + clock_gate, clock_record; other grids' numbers replaced
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
  setting once, in a rotated order). Three parts, none of which a noisier clock makes easier to pass:
  *agree*: the median pass (stats.median_pass) lies within the grid's prompt CI widened by REPEAT_TOL on each side
  (the passes time fewer prompts, REPEAT_TOL allows their mix; this does not widen with the passes' spread);
  *direction*: a direction the grid's prompt CI shows (all above or all below 1) holds in every pass and on the
  clock-inclusive CI. The clock-inclusive CI (stats.clock_ci) adds the passes' spread (one pass about the median
  pass, passes resampled) to the prompt CI (prompts resampled) in quadrature on the log scale: passes that spread
  more widen it, so a direction is harder to keep, never easier. (The check it replaces asked the grid's CI to
  overlap the passes' [min, max], which is easier the noisier the passes.)

`gate` turns the verdict of a speed claim whose checks fail into NOT_MEASURABLE ("not measurable here"), naming the
failed check; the claim's numbers stay in its row.

One number per decode. A decode (benchmark, algorithm, setting, batch size) timed by several grids (static(1) at
the decoding batch is in backbone_runs, modes_runs and controls_runs) has one measurement of record: the grid first
in RECORD_ORDER that decodes it (record_table, written as clock_record.md), its tokens/s, its speedup with the prompt
and the clock-inclusive CI, and its gate (`clock_gate`: passed, failed: <checks>, unchecked: not re-timed by the
passes, or reference for static). mark_clock gives every table that shows a wall-clock number the columns
`clock_gate` and `clock_record` (the grid the numbers are from) and replaces a number timed by another grid with the
record's, so no decode shows two speeds.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd

from mrp_repro.measure import stats

__all__ = ["PASSES", "CEILING_SLACK", "REPEAT_TOL", "SPEED_CLAIMS", "CHECK_COLUMNS", "RECORD_ORDER", "RECORD_COLUMNS",
           "WALL_COLUMNS", "speed_settings", "pass_prompts", "repeated_passes", "pass_decodes", "pass_speedups",
           "pass_values", "repeatable", "checks_table", "gate", "record_table", "record_of", "mark_clock",
           "with_weighted_forwards"]  # fmt: skip

#: interleaved passes per setting (the range of 5 is a 94% interval for the median pass)
PASSES = 5
#: prompts per benchmark in the repeated passes: a few at batch 1, one batch otherwise (the grid has them all)
PASS_PROMPTS_BATCH1 = 8
PASS_BATCHES = 1
#: a measured speedup may exceed its forward-count ceiling by this share (commit forwards cost a little less)
CEILING_SLACK = 0.05
#: repeatable: the median pass may lie this share outside the grid's prompt CI (the passes time fewer prompts)
REPEAT_TOL = 0.10
#: the claims judged on wall clock -> the scopes of their rows that are (None: every row)
SPEED_CLAIMS = {"speculative-speedup": None, "direct-tradeoff": None, "remask-equal-speed": "wall_speedup",
                "direct-equal-speed": "wall_speedup"}  # fmt: skip
CHECK_COLUMNS = ["sanity_check", "grid", "benchmark", "algorithm", "setting", "batch_size", "speedup", "speedup_lo",
                 "speedup_hi", "speedup_clock", "speedup_clock_lo", "speedup_clock_hi", "check_reference",
                 "check_passed", "check_detail"]  # fmt: skip
#: the grids that time decodes, in the order that picks a decode's measurement of record (the first that has it at
#: its batch size): the latency grid at batch 1, then the grid of every mode, the controls, the backbone's
RECORD_ORDER = ("speculative_runs", "modes_runs", "controls_runs", "backbone_runs")
RECORD_COLUMNS = ["benchmark", "algorithm", "setting", "batch_size", "clock_record", "clock_grids", "n", "tokens_per_s",
                  "speedup", "speedup_lo", "speedup_hi", "speedup_clock", "speedup_clock_lo", "speedup_clock_hi",
                  "passes", "clock_gate"]  # fmt: skip
#: columns that show a wall-clock number (with their _lo / _hi): mark_clock marks every row that has one
WALL_COLUMNS = ("tokens_per_s", "speedup", "throughput_speedup")


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


def pass_prompts(profile, batch_size: int) -> int:
    """Prompts per benchmark of the passes at `batch_size`: PASS_PROMPTS_BATCH1 at batch 1, PASS_BATCHES batches
    otherwise, and never more than a quarter of the grid's prompts (evaluation.n_prompts; smoke: 1)."""
    want = PASS_PROMPTS_BATCH1 if batch_size == 1 else PASS_BATCHES * batch_size
    return min(want, max(1, (profile.evaluation.n_prompts or 200) // 4))


def repeated_passes(profile, backbone, head, batch_sizes=None, passes: int = PASSES, benchmarks=None,
                    n_prompts: int | None = None, max_new_tokens: int | None = None) -> pd.DataFrame:  # fmt: skip
    """Wall seconds of every speed setting (speed_settings) in `passes` interleaved passes, per benchmark and batch
    size (default 1 and the decoding batch): each pass decodes the same prompts (pass_prompts) with every setting
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
        n = n_prompts or pass_prompts(profile, bs)
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
    extra = sum(passes * len(speed_settings(profile, head, b)) * -(-pass_prompts(profile, b) // b)
                for b in sorted({1, bs})) * n_bench  # fmt: skip
    spec = len(settings_for(profile, head, ("static", "speculative"))) * min(LATENCY_PROMPTS, n_eval)
    modes = len(settings_for(profile, head)) * -(-n_eval // bs)
    return {"passes": extra, "grids": (spec + modes) * n_bench}


def _pass_frame(passes: pd.DataFrame) -> pd.DataFrame:
    """The passes' non-static rows with `pass_speedup`: tokens/s over the same algorithm's static in that pass."""
    p = passes.assign(tps=passes["tokens"] / passes["wall_s"])
    keys = ["benchmark", "batch_size", "algorithm"]
    static = p[p["mode"] == "static"].set_index(keys + ["repeat"])["tps"]
    p["pass_speedup"] = [r.tps / static.get((r.benchmark, r.batch_size, r.algorithm, r.repeat), math.nan)
                         for r in p.itertuples()]  # fmt: skip
    return p[p["mode"] != "static"]


def pass_speedups(passes: pd.DataFrame) -> pd.DataFrame:
    """Per (benchmark, batch_size, algorithm, setting): the speedup over the same algorithm's static in each pass
    (tokens/s over static's tokens/s of that pass), summarized as the median pass (stats.median_pass: an actual pass,
    the lower median for an even count), min and max over the passes."""
    keys = ["benchmark", "batch_size", "algorithm"]
    g = _pass_frame(passes).groupby(keys + ["setting"], sort=False)["pass_speedup"]
    return pd.DataFrame({"median": g.agg(stats.median_pass), "min": g.min(), "max": g.max(),
                         "passes": g.size()}).reset_index()  # fmt: skip


def pass_values(passes: pd.DataFrame) -> dict:
    """(benchmark, algorithm, setting, batch_size) -> the per-pass speedups (an array, in pass order)."""
    p = _pass_frame(passes).sort_values("repeat", kind="stable")
    return {(b, a, s, int(bs)): g["pass_speedup"].to_numpy(float)
            for (b, a, s, bs), g in p.groupby(["benchmark", "algorithm", "setting", "batch_size"], sort=False)}


def repeatable(speedup: float, lo: float, hi: float, pass_speedup, n_boot: int = 1000, ci: float = 0.95,
               seed: int = 0, tol: float = REPEAT_TOL) -> dict:  # fmt: skip
    """The repeatable check of one grid speedup (`speedup` [`lo`, `hi`], its prompt CI) against its repeated passes
    (`pass_speedup`, one per pass): {passed, agree, direction, median, min, max, passes, clock_lo, clock_hi, why}.
    agree: the median pass within [lo / (1 + tol), hi * (1 + tol)]; direction: a direction the prompt CI shows
    holds in every pass and on the clock-inclusive CI (clock_lo, clock_hi: stats.clock_ci). No part of it is easier
    to pass for passes that lie further from the median pass (tests/test_clock_gate.py)."""
    v = np.asarray(pass_speedup, dtype=float)
    v = v[np.isfinite(v)]
    med = stats.median_pass(v)
    c_lo, c_hi = stats.clock_ci(speedup, lo, hi, v, n_boot, ci, seed)
    out = dict(median=med, min=float(v.min()) if v.size else math.nan, max=float(v.max()) if v.size else math.nan,
               passes=int(v.size), clock_lo=c_lo, clock_hi=c_hi)  # fmt: skip
    if v.size < 2 or not math.isfinite(med):
        return {**out, "passed": False, "agree": False, "direction": False, "why": f"{v.size} pass(es): no clock"}
    agree = lo / (1 + tol) <= med <= hi * (1 + tol)
    if lo > 1:
        direction = bool((v > 1).all() and c_lo > 1)
    elif hi < 1:
        direction = bool((v < 1).all() and c_hi < 1)
    else:
        direction = True  # the grid shows no direction: nothing for the passes to keep
    why = []
    if not agree:
        why.append(f"the median pass {med:.2f}× is outside the grid's CI ±{tol:.0%}")
    if not direction:
        side = "above" if lo > 1 else "below"
        why.append(f"the grid's CI is {side} 1 but a pass or the clock-inclusive CI [{c_lo:.2f}, {c_hi:.2f}] is not")
    return {**out, "passed": bool(agree and direction), "agree": bool(agree), "direction": direction,
            "why": "; ".join(why)}


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
    size) and wallclock_passes (repeatable, with the clock-inclusive CI speedup_clock_lo / _hi). Columns
    CHECK_COLUMNS (`grid`: the grid whose speedup the row checks); `check_passed` False: a clock not to judge on."""
    grids = {n: results[n] for n in ("speculative_runs", "modes_runs", "controls_runs", "backbone_runs")
             if n in results}  # fmt: skip
    speeds = {n: _grid_speedups(r, n_boot, ci, seed) for n, r in grids.items()}
    rows = []
    key = ["benchmark", "algorithm", "setting", "batch_size"]
    for name, sp in speeds.items():
        for r in sp.itertuples(index=False):
            bound = r.ceiling * (1 + CEILING_SLACK)
            rows.append(dict(sanity_check="ceiling", grid=name, **{k: getattr(r, k) for k in key}, speedup=r.speedup,
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
                rows.append(dict(sanity_check="agreement", grid=a, **{k: getattr(r, k) for k in key},
                                 speedup=r.speedup_a, speedup_lo=r.speedup_lo_a, speedup_hi=r.speedup_hi_a,
                                 check_reference=r.speedup_b,
                                 check_passed=bool(overlap),
                                 check_detail=f"{a} {r.speedup_a:.2f}× [{r.speedup_lo_a:.2f}, {r.speedup_hi_a:.2f}] vs "
                                 f"{b} {r.speedup_b:.2f}× [{r.speedup_lo_b:.2f}, {r.speedup_hi_b:.2f}], batch "
                                 f"{r.batch_size}"))  # fmt: skip
    if "wallclock_passes" in results and len(results["wallclock_passes"]):
        values = pass_values(results["wallclock_passes"])
        for name, sp in speeds.items():
            for r in sp.itertuples(index=False):
                v = values.get((r.benchmark, r.algorithm, r.setting, int(r.batch_size)))
                if v is None:
                    continue
                c = repeatable(r.speedup, r.speedup_lo, r.speedup_hi, v, n_boot, ci, seed)
                detail = (f"{name} {r.speedup:.2f}× [{r.speedup_lo:.2f}, {r.speedup_hi:.2f}], with the clock "
                          f"[{c['clock_lo']:.2f}, {c['clock_hi']:.2f}], vs {c['passes']} interleaved passes: median "
                          f"{c['median']:.2f}×, range [{c['min']:.2f}, {c['max']:.2f}]")  # fmt: skip
                rows.append(dict(sanity_check="repeatable", grid=name, **{k: getattr(r, k) for k in key},
                                 speedup=r.speedup, speedup_lo=r.speedup_lo, speedup_hi=r.speedup_hi,
                                 speedup_clock=r.speedup, speedup_clock_lo=c["clock_lo"],
                                 speedup_clock_hi=c["clock_hi"], check_reference=c["median"],
                                 check_passed=c["passed"], check_detail=detail + (f": {c['why']}" if c["why"] else "")))
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


# ----------------------------------------------------------------------------- one measurement of record per decode


def _decode_rows(runs: pd.DataFrame, grid: str, n_boot: int, ci: float, seed: int) -> list[dict]:
    """Every timed decode of one grid: tokens/s and the speedup over the same algorithm's static at the same batch
    size with its prompt CI (the oracle drafter, whose picks cost forwards nobody runs, is not timed)."""
    rows = []
    for (bench, algo, bs), g in runs.groupby(["benchmark", "algorithm", "batch_size"], sort=False):
        s = g[g["mode"] == "static"].set_index("problem_id")
        for (mode, name), h in g.groupby(["mode", "setting"], sort=False):
            drafter = h["drafter"].iloc[0] if "drafter" in h else ""
            if isinstance(drafter, str) and drafter == "oracle":
                continue
            wall = float(h["wall_s"].sum())
            row = dict(benchmark=bench, algorithm=algo, setting=name, batch_size=int(bs), clock_record=grid,
                       n=len(h), tokens_per_s=float(h["tokens"].sum()) / wall if wall > 0 else math.nan,
                       mode=mode)  # fmt: skip
            if mode == "static":
                row.update(speedup=1.0, speedup_lo=1.0, speedup_hi=1.0)
            elif not s.empty:
                h = h.set_index("problem_id")
                ids = h.index.intersection(s.index)
                x, lo, hi = stats.ratio_ci(h.loc[ids, "tokens"], h.loc[ids, "wall_s"], s.loc[ids, "tokens"],
                                           s.loc[ids, "wall_s"], n_boot, ci, seed)  # fmt: skip
                row.update(speedup=x, speedup_lo=lo, speedup_hi=hi)
            rows.append(row)
    return rows


def _gate_of(key: tuple, grid: str, checks: pd.DataFrame | None) -> tuple[str, bool]:
    """(clock_gate, re-timed) of decode `key` timed of record by `grid`: every check of it (its ceiling and
    repeatable check in that grid, agreement with any other grid), passed only when all ran and passed and the
    passes re-timed it."""
    if checks is None or not len(checks):
        return "unchecked: no sanity checks", False
    b, a, s, bs = key
    c = checks[(checks["benchmark"] == b) & (checks["algorithm"] == a) & (checks["setting"] == s)
               & (checks["batch_size"].astype(int) == bs)]  # fmt: skip
    mine = c[(c["sanity_check"] == "agreement") | (c["grid"] == grid)]
    failed = sorted(set(mine.loc[~mine["check_passed"].astype(bool), "sanity_check"]))
    retimed = bool((mine["sanity_check"] == "repeatable").any())
    if failed:
        return "failed: " + ", ".join(failed), retimed
    if not retimed:
        return "unchecked: not re-timed by the passes", False
    return "passed", True


def record_table(results: dict, checks: pd.DataFrame | None = None, n_boot: int = 1000, ci: float = 0.95,
                 seed: int = 0) -> pd.DataFrame:  # fmt: skip
    """One row per decode (benchmark, algorithm, setting, batch size) timed in the grids of `results`: its
    measurement of record (the grid first in RECORD_ORDER that decodes it: `clock_record`; every grid that times it:
    `clock_grids`), tokens/s, speedup over static with the prompt CI and the clock-inclusive CI (stats.clock_ci on the
    repeated passes, where they re-timed it; else the prompt CI), the passes and `clock_gate` (checks_table's checks
    of that decode: passed, failed: <checks>, unchecked, or reference for static). Columns RECORD_COLUMNS."""
    values = pass_values(results["wallclock_passes"]) if len(results.get("wallclock_passes", ())) else {}
    out: dict[tuple, dict] = {}
    for grid in RECORD_ORDER:
        if grid not in results or not len(results[grid]):
            continue
        for r in _decode_rows(results[grid], grid, n_boot, ci, seed):
            key = (r["benchmark"], r["algorithm"], r["setting"], r["batch_size"])
            if key in out:
                out[key]["clock_grids"] += f", {grid}"
                continue
            r["clock_grids"] = grid
            v = values.get(key, np.array([]))
            r["passes"] = int(v.size)
            r["speedup_clock"] = r.get("speedup", math.nan)
            r["speedup_clock_lo"], r["speedup_clock_hi"] = stats.clock_ci(
                r["speedup_clock"], r.get("speedup_lo", math.nan), r.get("speedup_hi", math.nan), v, n_boot, ci, seed)
            if r.pop("mode") == "static":
                r["clock_gate"] = "reference"
            else:
                r["clock_gate"], _ = _gate_of(key, grid, checks)
            out[key] = r
    return pd.DataFrame(list(out.values()), columns=RECORD_COLUMNS)


def record_of(results: dict, n_boot: int = 1000, ci: float = 0.95, seed: int = 0) -> pd.DataFrame:
    """record_table of `results` (report.paper.load_results) with their sanity checks when the repeated passes
    (notebook 05) are among them; without the passes every gate reads unchecked."""
    checks = checks_table(results, n_boot, ci, seed) if len(results.get("wallclock_passes", ())) else None
    return record_table(results, checks, n_boot, ci, seed)


def _row_settings(table: pd.DataFrame, runs: pd.DataFrame | None) -> pd.Series:
    """The runs setting each row of a table is about: its `setting`; a direct table's baseline / mrp_stepK as
    static(1) / direct(K); a speculative table (K, no setting) its drafter's speculative(K, ...) setting (from
    `runs`, drafter mrp or sum)."""
    if "setting" not in table and "K" in table:
        if runs is None:
            raise ValueError("a speculative table (K, no setting) needs the runs it was built from")
        spec = runs[(runs["mode"] == "speculative") & runs["drafter"].isin(["mrp", "sum"])]
        name = spec.drop_duplicates(["benchmark", "algorithm", "K"]).set_index(["benchmark", "algorithm", "K"])
        algo = table["algorithm"] if "algorithm" in table else pd.Series("ours", index=table.index)
        return pd.Series([name["setting"].get((b, a, float(k)), "") for b, a, k in zip(table["benchmark"], algo,
                          table["K"], strict=True)], index=table.index)  # fmt: skip
    s = table["setting"].astype(str)
    return s.where(~s.eq("baseline"), "static(1)").str.replace(r"^mrp_step(\d+)$", r"direct(\1)", regex=True)


def _is_nan(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def mark_clock(table: pd.DataFrame, grid: str, record: pd.DataFrame | None = None, runs: pd.DataFrame | None = None,
               batch_size: int | None = None, refer_to: str | None = None) -> pd.DataFrame:  # fmt: skip
    """`table` (built from grid `grid`, e.g. "modes_runs") with `clock_gate` and `clock_record` on every row that
    shows a wall-clock number (WALL_COLUMNS, or matched_speed's wall_speedup axis). With `record` (record_table):
    each such row's gate, and where another grid holds the decode's measurement of record, that grid's numbers in
    place of this one's (tokens_per_s, speedup, throughput_speedup); throughput_speedup_lo / _hi become the
    clock-inclusive CI where the passes re-timed the decode. With `refer_to` instead (a grid that decodes every
    decode of this table, and is not built yet): the wall-clock numbers blank, `clock_record` naming it. With
    neither: clock_gate `unchecked`. The batch size: `batch_size`, else the runs' (one)."""
    t = table.copy()
    wall = [c for c in WALL_COLUMNS if c in t]
    is_wall = t[wall].notna().any(axis=1) if wall else pd.Series(False, index=t.index)
    if "axis" in t and "speed" in t:  # matched_speed: its wall-clock rows are those on the wall_speedup axis
        is_wall |= t["axis"].astype(str).eq("wall_speedup") & t["speed"].notna()
    gate_col = pd.Series("", index=t.index, dtype=object)
    rec_col = pd.Series("", index=t.index, dtype=object)
    if refer_to is not None:
        gate_col[is_wall] = f"of record in {refer_to}"
        rec_col[is_wall] = refer_to
        for c in wall:
            for col in (c, f"{c}_lo", f"{c}_hi"):
                if col in t:
                    t.loc[is_wall, col] = math.nan
    elif record is None or not len(record):
        gate_col[is_wall] = "unchecked: no measurement of record"
        rec_col[is_wall] = grid
    else:
        if batch_size is None:
            if runs is None or runs["batch_size"].nunique() != 1:
                raise ValueError("mark_clock: give batch_size, or the runs of one batch size the table was built from")
            batch_size = int(runs["batch_size"].iloc[0])
        settings = _row_settings(t, runs)
        algo = t["algorithm"] if "algorithm" in t else pd.Series("ours", index=t.index)
        rec = record.set_index(["benchmark", "algorithm", "setting", "batch_size"])
        for i in t.index[is_wall]:
            key = (t.at[i, "benchmark"], algo[i], settings[i], int(batch_size))
            if key not in rec.index:
                gate_col[i], rec_col[i] = "unchecked: no measurement of record", grid
                continue
            r = rec.loc[key]
            gate_col[i], rec_col[i] = r["clock_gate"], r["clock_record"]
            other = r["clock_record"] != grid
            if other and "tokens_per_s" in t:
                t.at[i, "tokens_per_s"] = r["tokens_per_s"]
            if other and "speedup" in t:
                t.at[i, "speedup"] = r["speedup"]
            if "throughput_speedup" in t:
                if other:
                    t.at[i, "throughput_speedup"] = r["speedup"]
                lo, hi = (r["speedup_clock_lo"], r["speedup_clock_hi"]) if r["passes"] >= 2 else (r["speedup_lo"],
                                                                                                  r["speedup_hi"])
                if (other or r["passes"] >= 2) and "throughput_speedup_lo" in t and not _is_nan(lo):
                    t.at[i, "throughput_speedup_lo"], t.at[i, "throughput_speedup_hi"] = lo, hi
    t["clock_gate"] = gate_col
    t["clock_record"] = rec_col
    t.attrs = table.attrs
    return t


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
    t["_setting"] = _row_settings(t, r)
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
