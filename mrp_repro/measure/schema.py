"""The runs schema and the tables' glossary: every column of a runs frame or a written table, defined once, here.

    from mrp_repro.measure.schema import RUN_COLUMNS, require
    require(runs, ["benchmark", "mode", "correct"], "speculative_table")   # KeyError naming what is missing
    define("nfe_speedup")                       # a table column's unit and how it is computed (TABLE_COLUMNS)
    require_defined(df.columns, "speculative")  # ValueError naming undefined columns (tables.save_table calls it)

Every runs frame comes from `mrp_repro.measure.runs.collect_runs` (the one producer) and every table,
figure and claim reads these columns by exact name; there is no alias map and no guessing. The names are
the paper's vocabulary (METHOD.md): a *mode* is a decoding family, a *setting* one parametrised policy.

Every column of a written table is defined here too (TABLE_COLUMNS, or a runs column): tables.save_table refuses
a table with an undefined column, and writes figures/<profile>/COLUMNS.md, the glossary of the tables there.
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

__all__ = ["RUN_COLUMNS", "MODES", "ALGORITHMS", "CLOCK_TRUSTED", "UPSTREAM_COUNTERS", "SETTING_KEYS",
           "TABLE_COLUMNS", "TABLE_AGGREGATES", "require", "empty_runs", "define", "undefined_columns",
           "require_defined"]

#: column -> definition, in the order collect_runs writes them
RUN_COLUMNS: dict[str, str] = {
    "model": "the model: SDAR-1.7B/4B/8B where the profile's numbers compare with the paper's (paper.comparable), "
    "else the profile name (tiny, smoke, sdar-mini)",
    "paper_model": "the paper model this run is compared with (the profile's paper.model): every paper value "
    "beside a row is this model's, blank where the paper does not report it",
    "inputs": "the resolved hub inputs the row was decoded with (mrp_repro.inputs.summary): per model input "
    "`backbone|head=<source>@<commit, else the requested revision, else local>#<12 hex of the sha256 over its files' "
    "sha256s>`, `;`-joined; each file's sha256 in runs/<profile>/inputs-<profile hash>.json; empty for a scratch "
    "backbone without a released head",
    "machine": "the CPU numerics the row was decoded with (runtime.machine_summary): platform, torch's CPU capability "
    "(the SIMD width of its kernels: AVX512, AVX2, DEFAULT), the BLAS, torch's threads, and any variable holding the "
    "instruction set down (docs/portability.md); on a GPU the same, of the host",
    "benchmark": "our benchmark: synth-math, synth-code, gsm8k, math500, humaneval, mbpp",
    "problem_id": "the problem's id within its benchmark (Problem.task_id)",
    "prompt_index": "the problem's position in the benchmark's evaluation list (0-based)",
    "algorithm": "whose algorithm decoded the row, one of ALGORITHMS: ours (mrp_repro.decoding.engine, mrp_modes) "
    "or upstream (mrp_repro.decoding.upstream: the released code's round, layout, length and counters; "
    "docs/upstream.md) or peer (a published method of another paper on our engine, verify path and accounting: "
    "decoding.peers_spiffy, peers_wino; its reference of identical_to_static: peer_static(1), static(1) in that "
    "family, mrp_repro.methods.PeerStatic). Rows of two algorithms are never pooled: every setting key includes it",
    "mode": "the decoding mode, one of MODES",
    "setting": "the policy's name, unique per decoding setting, e.g. static(1), speculative(3,mrp)",
    "method": "the decoding method the row is about: in a grid decoded from the registry (peers_runs, report.peers) "
    "and its tables, the method's declaration in mrp_repro.methods (e.g. speculative-mrp, spiffy, wino), blank in "
    "the grids decoded from measure.runs.settings_for and on peers_runs' peer_static(1) (collect_runs' reference of "
    "the peer rows, methods.PeerStatic); in the lookahead table naive_mtp (mode naive: K + 1 tokens from one "
    "forward's uncorrected logits) or mrp (mode direct: K MRP head steps after the backbone's pick)",
    "K": "speculative: draft length (a draft graph, decoding.peers_spiffy: D, its nodes, the candidate blocks one "
    "verify holds); direct: MRP steps (= lookahead K); naive: lookahead K, i.e. tokens revealed per forward beyond "
    "the backbone's own pick (the policy reveals K + 1). NaN otherwise",
    "threshold": "confidence threshold tau of dynamic and remask; NaN otherwise",
    "rule": "remask rule (tau, delta, loo, sequential, logp-delta; upstream remasking: delta; the WINO peer: wino, "
    "decoding.peers_wino); '' otherwise",
    "delta": "remask: the second threshold of the revocation rule: delta of the delta rules (ours: delta, "
    "logp-delta; upstream: the veto |C[p, token]| > delta, decoding.upstream_remask); wino: τ2, an earlier reveal "
    "whose shadow (leave-one-out) probability is below it is re-masked; NaN otherwise",
    "drafter": "speculative drafter (mrp, oracle, naive; a draft graph's kind, decoding.peers_spiffy: calibrated, "
    "offline on held-out prompts, or chain; mrp-tree, decoding.mrp_tree: MRP's chain plus the head's runner-up at "
    "its first draft, K its verify rows); '' otherwise",
    "verify": "speculative verify path (the policy's `verify` attribute); '' otherwise",
    "batch_size": "rows decoded together (1: latency regime, else the throughput regime)",
    "correct": "the output scores correct (bool)",
    "valid_chain": "synthetic tasks: the output's reasoning chain is valid (0/1); NaN for real benchmarks",
    "extracted": "the answer the scorer extracted from the output",
    "sandbox": "which sandbox scored a code row ('' for math and synthetic rows)",
    "text": "the decoded output",
    "tokens": "generated tokens (cut at EOS)",
    "denoise_forwards": "backbone forwards inside the denoising loop (TPF's denominator)",
    "commit_forwards": "backbone forwards that commit a finished block to the KV cache (upstream's accounting)",
    "fused_commits": "commits of commit_forwards written inside a forward the row needed anyway "
    "(decoding.fuse_commit; 0 otherwise): the forwards actually run are denoise + commit - fused",
    "mrp_forwards": "MRP head calls",
    "rounds": "speculative verify rounds",
    "drafted": "speculative draft tokens proposed",
    "accepted": "speculative draft tokens accepted",
    "revoked": "remasking: revealed tokens revoked (ours) or proposals vetoed before they were written (upstream: "
    "their num_residual_vetoed, summed over rows)",
    "accept_lengths": "speculative: drafts accepted per round, space-separated (a string: survives CSV)",
    "extra_rows": "block-rows the row's counted denoising forwards processed beyond one block each "
    "(decoding.engine.RowStats.extra_rows: a verify of M candidate blocks M - 1, WINO's shadow block 1): what a wide "
    "forward costs beyond the one denoise_forwards counts (measure.runs.run_setting; blank in a grid stored before "
    "it was recorded)",
    "wall_s": "the batch's wall seconds split evenly over its rows",
    "wall_rank": "the torch.distributed rank whose clock measured wall_s (0 in one process); compare wall times "
    "within a rank only: every setting of one prompt is decoded on the same rank (measure.sharded)",
    "resumed_from": "the earlier process that decoded the row, when the grid was resumed: a grid killed mid-way keeps "
    "every batch it finished (measure.runs.collect_runs' partial directory; report.grids: <result>.partial/) and its "
    "rerun decodes only the rest; a kept row names who decoded it, `<12 hex of the commit>[-dirty] pid <pid> on "
    "<host> at <UTC time its batch was written>`. '' (blank in a CSV) on rows decoded by the process that returned the "
    "frame (a stored grid's <name>.csv.provenance.json), and on a torchrun grid's rows (measure.sharded). In "
    "peers_runs a row read from modes_runs, which decodes the same setting on the same prompts and batch size "
    "(report.peers.held_rows), reads `modes_runs: ` and that row's own value, its wall_s put on the peers grid's clock "
    "by the two grids' static(1). Its wall_s "
    "was measured by that process's clock: every setting of a batch shares one value, so paired ratios within a "
    "batch hold; pooled wall times compare only between rows of one value",
    "identical_to_static": "tokens identical to the static setting's output of the same algorithm on the same prompt "
    "(ours: static(1), upstream: upstream_static(1)) (bool)",
    # upstream's own counters (decoding.upstream.UpstreamCounters): per batch as the released code counts them,
    # split evenly over the batch's rows like wall_s (summed over rows: the batches' counts); NaN on ours rows
    "upstream_denoise_forwards": "upstream: their num_target_fwd_denoising (seed + verify forwards; static: block "
    "forwards) of the row's batch / its rows. Their TPF = sum(tokens) / sum(upstream_denoise_forwards)",
    "upstream_total_forwards": "upstream: their num_target_fwd_total (prefill + denoising + store-KV) / rows",
    "upstream_mrp_forwards": "upstream: their num_mrp_fwd_denoising (K - 1 head calls per round) / rows",
    "upstream_rounds": "upstream: their num_spec_rounds / rows",
    "upstream_drafted": "upstream: their num_drafts_proposed (valid drafts summed over rows) / rows",
    "upstream_accepted": "upstream: their num_drafts_accepted (the batch's accepted prefix, one scalar per round; "
    "the bonus excluded, the stale first draft included) / rows",
    "upstream_bonus": "upstream: their num_bonus_tokens (rows given the bonus pick, summed over rounds) / rows",
    "upstream_stalled_blocks": "upstream: blocks ended at a fixed point where their loop would never end "
    "(a [MASK] pick; decoding.upstream) / rows",
}

#: decoding algorithms (the `algorithm` column)
ALGORITHMS = ("ours", "upstream", "peer")

#: the upstream counter columns and the decoding.upstream.UpstreamCounters value each holds (per row)
UPSTREAM_COUNTERS = {
    "upstream_denoise_forwards": "denoise_forwards", "upstream_total_forwards": "total_forwards",
    "upstream_mrp_forwards": "mrp_forwards", "upstream_rounds": "spec_rounds", "upstream_drafted": "drafts_proposed",
    "upstream_accepted": "drafts_accepted", "upstream_bonus": "bonus_tokens",
    "upstream_stalled_blocks": "stalled_blocks",
}  # fmt: skip

#: the clock_gate values of a wall-clock number one may read as measured; plots mark every other gate
CLOCK_TRUSTED = ("passed", "reference")

#: decoding families (the `mode` column)
MODES = ("static", "dynamic", "speculative", "direct", "naive", "remask")

#: the columns that identify one decoding setting of one model on one benchmark
SETTING_KEYS = ["model", "benchmark", "algorithm", "mode", "setting", "K", "threshold", "rule", "delta", "drafter",
                "verify", "batch_size"]


def require(df: pd.DataFrame, columns: Iterable[str], what: str) -> pd.DataFrame:
    """`df` itself, or KeyError naming the columns `what` needs and `df` lacks (build it with collect_runs)."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise KeyError(
            f"{what} needs column(s) {', '.join(missing)}; the frame has {', '.join(map(str, df.columns)) or 'none'}"
            " (a runs frame comes from mrp_repro.measure.runs.collect_runs)"
        )
    return df


def empty_runs() -> pd.DataFrame:
    """A runs frame with every column and no rows."""
    return pd.DataFrame(columns=list(RUN_COLUMNS))


# ----------------------------------------------------------------------------- the tables' glossary

#: every column a written table may hold that is not a runs column: column -> unit; how it is computed. A runs
#: column shown in a table keeps its RUN_COLUMNS meaning (TABLE_AGGREGATES says how a table aggregates it).
#: Two systematic families need no entry: ``<m>_lo`` / ``<m>_hi`` (the CI bounds of a defined metric m) and
#: ``paper_<m>`` (the paper's m for paper_model); see define().
TABLE_COLUMNS: dict[str, str] = {
    # ---- the backbone's regime with no head (report.regime, issue 34's targets)
    "regime_statistic": "a regime statistic of the backbone alone (report.regime.REGIME_STATISTICS: static and "
    "dynamic(tau) accuracy, naive MTP, answer length, the no-head and oracle drafters' TPF at K = 3)",
    "regime_value": "the statistic's value (accuracy in %, drops in points, TPF in tokens per forward); with "
    "regime_value_lo / _hi its 95% bootstrap CI over prompts where it has one",
    "regime_target": "issue 34's target for the statistic ('–' where it has none)",
    "regime_check": "'met', or 'missed by' the shortfall in the statistic's unit; blank for the paper's rows",
    # ---- ablations (report.ablations, defaults K = 3, 5 and τ = 0.5, 0.7) and the seed spread (report.variance)
    "ablation": "the ablated design choice: depth, objective, k_steps, train_source, init (or released)",
    "label": "the head on this axis ('paper:' the paper's choice, 'ours:' the profile's)",
    "heldout_kl_step1": "held-out mean KL(B‖A+C) per still-masked slot after one reveal (nats; the head's "
    "training metrics; direct objective: KL(B‖C)); blank for released heads",
    "heldout_baseline_kl_step1": "held-out mean KL(B‖A), the uncorrected baseline, on the same slots (nats)",
    "heldout_kl_ratio": "heldout_kl_step1 / heldout_baseline_kl_step1 (below 1: the head beats the baseline)",
    "head_train_s": "the head's training wall seconds (its metrics.json train_time_s)",
    "family": "whose decoding method (mrp_repro.methods.FAMILIES): ours, upstream (the released code) or peer (a "
    "published method of another paper on our engine); in the ablation tables the families of its speculative "
    "columns, space-separated: ours (tpf_share_k*) and upstream (upstream_tpf_share_k*)",
    "tpf_share_k3": "TPF of speculative(3, mrp) over that of speculative(3, oracle) on the same prompts (tokens per "
    "denoising forward, pooled); CI: bootstrap over prompts",
    "tpf_share_k5": "TPF of speculative(5, mrp) over that of speculative(5, oracle) on the same prompts (tokens per "
    "denoising forward, pooled); CI: bootstrap over prompts",
    "upstream_tpf_share_k3": "TPF of the released code's upstream_speculative(3, …) over that of speculative(3, "
    "oracle) on the same prompts (pooled); CI: bootstrap over prompts",
    "upstream_tpf_share_k5": "TPF of the released code's upstream_speculative(5, …) over that of speculative(5, "
    "oracle) on the same prompts (pooled); CI: bootstrap over prompts",
    "direct_step1_accuracy": "accuracy of direct mode, MRP step 1 (%, CI over prompts)",
    "direct_step2_accuracy": "accuracy of direct mode, MRP step 2 (%, CI over prompts)",
    "remask_recovery_tau50": "100 × (acc remask(0.5, tau) − acc dynamic(0.5)) / (acc static − acc dynamic(0.5)), "
    "same prompts; blank when dynamic(0.5) loses nothing; paired bootstrap CI",
    "dynamic_loss_tau50": "acc static − acc dynamic(0.5) in points: the loss the recovery divides",
    "remask_recovery_tau70": "100 × (acc remask(0.7, tau) − acc dynamic(0.7)) / (acc static − acc dynamic(0.7)), "
    "same prompts; blank when dynamic(0.7) loses nothing; paired bootstrap CI",
    "dynamic_loss_tau70": "acc static − acc dynamic(0.7) in points: the loss the recovery divides",
    "comparison": "which heads against which",
    "headline": "the headline number (HEADLINES in mrp_repro/report/variance.py)",
    "seed_kind": "head seeds (heads on the published backbone) or backbone seeds (backbone, trajectories, head); "
    "variance_claims also has all seeds (the published run, then both kinds' other seeds)",
    "n_seeds": "seeds run of this kind (the published one included)",
    "seeds": "the seeds, space-separated",
    "published": "the value of the profile's own seed (the published backbone and head)",
    "published_lo": "its bootstrap CI over prompts, low end (blank where the number has no per-prompt CI)",
    "published_hi": "its bootstrap CI over prompts, high end",
    "seed_mean": "the mean over the seeds of this kind",
    "seed_std": "their standard deviation (ddof 1)",
    "seed_min": "the smallest seed value",
    "seed_max": "the largest seed value",
    "ci_covers_seeds": "every seed's value lies inside the published bootstrap CI (blank without a CI)",
    "seed": "the profile seed of this run (head seeds: the head's; backbone seeds: the whole pipeline's)",
    "seed_value": "this seed's value",
    "seed_value_lo": "its bootstrap CI over prompts, low end (blank where the number has none)",
    "seed_value_hi": "its bootstrap CI over prompts, high end",
    "seed_prompts": "prompts per task the seed was decoded on (variance --n; evaluation.n_prompts without it)",
    "computed_at": "the commit (12 hex; +dirty: with uncommitted code) of the run that computed the row: a seed "
    "kept from an earlier run (report.variance_store) names it",
    "profile_hash": "the profile's hash (its recipe) the row was computed under: a kept seed must match the profile's "
    "current one",
    # ---- the decoding tables (paper.*_table, stats.summarize, cost model)
    "n": "count: the sample the row is over: prompts (decoding tables), positions (adjacent), rows N of the "
    "[N, V] logits (kernels)",
    "accuracy": "percent of the row's prompts whose output scores correct (mean of `correct` x 100); "
    "its CI: percentile bootstrap over prompts (evaluation.bootstrap_samples resamples, evaluation.ci)",
    "static_accuracy": "percent: accuracy of static(1) on the same benchmark and prompts",
    "baseline_accuracy": "percent: accuracy of dynamic(τ) without remasking at the row's threshold, on the "
    "prompts the remask row was paired with",
    "mrp_remask_accuracy": "percent: accuracy of remask(τ, rule) with the MRP head at the row's threshold",
    "gain": "percentage points: paired mean over prompts of correct(remask) - correct(dynamic) x 100 "
    "(mrp_remask_accuracy - baseline_accuracy on the same prompts); CI: paired bootstrap",
    "gain_p": "probability in [0, 1]: two-sided paired bootstrap test of gain = 0, 2 x the smaller share of "
    "bootstrap means of the paired differences on either side of 0 (stats.paired_diff); not a multiple-test "
    "correction",
    "tpf": "tokens per denoising forward: sum of tokens / sum of denoise_forwards over the row's prompts "
    "(commits not counted)",
    "static_tpf": "tokens per denoising forward of static(1) on the same prompts (1.0 when every step reveals one)",
    "backbone_forwards": "backbone forwards per prompt (mean of denoise_forwards + commit_forwards)",
    "tokens_per_s": "tokens per wall second: sum of tokens / sum of wall_s over the row's prompts",
    "speedup": "x: wall-clock speedup over static(1): the setting's tokens per second over static(1)'s, same "
    "model, benchmark and batch size (stats.summarize, pooled over the prompts); speed.csv: static(1)'s median "
    "pass seconds over this setting's, same engine and batch_size (same tokens: lossless)",
    "throughput_speedup": "x: wall-clock speedup over static(1) with a CI: (tokens / wall_s) of the setting over "
    "static(1)'s on the same prompts, paired bootstrap over prompts (stats.ratio_ci); the point is the same "
    "ratio as speedup",
    "nfe_speedup": "x: backbone-forward speedup over static(1): (tokens / backbone forwards) of the setting over "
    "static(1)'s on the same prompts, denoise + commit forwards counted, MRP head calls not (the number of "
    "function evaluations; a clock-free bound on the wall-clock speedup); CI: paired bootstrap",
    "identical_share": "fraction in [0, 1] of the row's prompts whose output is token-identical to static(1)'s "
    "(mean of identical_to_static; 1.0 = lossless on every prompt)",
    "lossless": "bool, static and speculative rows only: every output of the row token-identical to static(1)'s "
    "on the same prompt (the mode's guarantee, checked); blank for the lossy modes (dynamic, direct, naive, "
    "remask), whose outputs may equal static's by chance (see identical_share)",
    "upstream_tpf": "tokens per backbone forward as the released code counts it (upstream rows only): tokens summed "
    "over a batch's rows per batched denoising forward, pooled over the setting's batches; NaN on ours rows "
    "(docs/upstream.md). A batch-summed count: in a table decoded B rows at a time (modes, controls, "
    "speculative_throughput: decoding.batch_size) it is about B x the per-row tpf beside it; equal to tpf's "
    "accounting at batch 1 (speculative, speculative_drafters), where the paper's TPF is read",
    "tpf_share_of_oracle": "ratio in [0, 1]: the speculative drafter's TPF over the oracle drafter's TPF at the "
    "same K on the same prompts (the oracle drafts the backbone's own future picks: the ceiling); blank "
    "off speculative",
    "mean_accept": "drafts accepted per verify round, mean over every round of the row (from accept_lengths); "
    "blank off speculative",
    "verify_cost": "ratio: wall time of one packed K-candidate verify forward over one forward_block, at the row's "
    "batch size (measure.cost.cost_model, median of interleaved repeats)",
    "head_cost": "ratio: wall time of one MRP head step (lm_head and pick included) over one forward_block "
    "(measure.cost.cost_model); 0 for drafters that call no head (oracle, naive)",
    "predicted_speedup": "x: the cost model's speedup over static(1): static forwards / (forwards - rounds + "
    "rounds x verify_cost + head calls x head_cost), forwards counting seeds and commits",
    "ceiling_speedup": "x: predicted_speedup at the oracle's TPF (every draft accepted) with the same verify_cost "
    "and head_cost (report.shapes.ceiling_speedup)",
    "weighted_forwards": "byte-weighted forwards per prompt: backbone forwards (denoise + commit) + MRP head calls "
    "x head_cost, the run's measured cost of one head call in backbone forwards at the table's batch size "
    "(measure.cost.run_cost_model; report.wallclock.with_weighted_forwards)",
    "weighted_tpf": "tokens per byte-weighted denoising forward: sum of tokens / sum of (denoise_forwards + "
    "mrp_forwards x head_cost); equals tpf where no head is called",
    "sanity_check": "the wall-clock sanity check (report.wallclock): ceiling (the speedup's CI upper bound within "
    "CEILING_SLACK of its forward-count ceiling: nfe_speedup at batch 1, each batch's longest row above), agreement "
    "(two grids timing the same decode at the same batch size give overlapping speedup CIs), repeatable (the median "
    "repeated interleaved pass within the grid's prompt CI widened by REPEAT_TOL, and a direction the grid's CI shows "
    "held by every pass and by the clock-inclusive CI: no part of it easier to pass for noisier passes; a table "
    "computed before issue 35, see the commit that computed it, checked instead that the grid's CI meets the passes' "
    "range)",
    "check_reference": "x: what the speedup is checked against: the ceiling with its slack (ceiling), the other "
    "grid's speedup (agreement), the passes' median speedup (repeatable: the median pass, stats.median_pass)",
    "check_passed": "bool: the sanity check holds; a speed verdict reading a failed one is 'not measurable here'",
    "check_detail": "the check's numbers in words: which grid, the CI, the bound or the other measurement",
    "grid": "the decoding grid (runs frame) the row's numbers come from: backbone_runs, speculative_runs, modes_runs, "
    "controls_runs (report.grids); in the quick check's time table also total (every grid summed, with the fixed "
    "load time)",
    "speedup_clock": "x: the wall-clock speedup with a CI that holds the clock's noise: the prompt CI (prompts "
    "resampled) and the repeated interleaved passes' spread (one pass about the median pass, passes resampled) added "
    "in quadrature on the log scale (measure.stats.clock_ci); the prompt CI alone where the passes did not re-time "
    "the decode",
    "clock_gate": "the wall-clock gate of the row's decode (report.wallclock.record_table): passed (its ceiling, "
    "agreement and repeatable checks ran and held), failed: <the checks that failed> (do not judge on this number), "
    "unchecked: <why> (not re-timed by the repeated passes: no gate), reference (static, the 1x of every speedup), "
    "of record in <grid> (the number is blank here: see clock_record.md); blank: the row shows no wall-clock number",
    "clock_record": "the grid whose timing the row's wall-clock numbers are: the decode's one measurement of record "
    "(the first of report.wallclock.RECORD_ORDER that decodes it, clock_record.md); a table built from another grid "
    "shows the record's numbers, not its own",
    "clock_grids": "every grid that times the decode, the measurement of record first",
    # ---- the peers table (report.peers)
    "aup": "accuracy under parallelism (report.peers.aup, after d3LLM): the area under accuracy x W(accuracy) "
    "against charged_tpf over the method's settings, W(y) = min(exp(-3 (1 - y / aup_best_accuracy)), 1); from 0 "
    "to the first setting a rectangle, then trapezoids",
    "aup_settings": "the method's settings with a reported charged_tpf that its aup integrates over",
    "aup_best_accuracy": "the task's best accuracy over every method of the peers table: W's reference",
    "charged_tpf": "tokens per charged forward: sum of tokens / sum of (denoise_forwards + mrp_forwards x head_cost "
    "+ extra_rows x row_cost): every method charged its measured head calls and the block-rows of its wide forwards; "
    "head_cost and row_cost (one extra block-row of a verify, (verify_cost[K] - 1) / (K - 1) at the largest "
    "speculative K) from the run's cost model at the table's batch size (measure.cost.run_cost_model), named "
    "under the table; equals weighted_tpf where no forward is wider than one block",
    "reference": "what the method claims to reproduce token for token (mrp_repro.methods, Method.lossless): "
    "static(1) or dynamic(τ), decoded in the same grid; blank for a method that claims none",
    "reference_identical": "fraction in [0, 1] of the row's prompts whose output is token-identical to its "
    "reference's on the same prompt; blank without a reference. A lossless method below 1 fails its claim: its "
    "speed columns are blank",
    "passes": "repeated interleaved passes that re-timed the decode (report.wallclock.repeated_passes); 0: none",
    "lookahead_k": "tokens revealed per backbone forward beyond the backbone's own pick (the runs column K of "
    "modes naive and direct; settings naive_mtp(K), direct(K))",
    "paper_benchmark": "the paper benchmark our benchmark stands for (paper.BENCHMARK_MAP): the paper_* values "
    "beside a row are for paper_model on paper_benchmark",
    # ---- speed.csv (report.speed, one row per benchmark x batch_size x engine x setting)
    "engine": "speed: upstream (every block commit its own forward) or fused (decoding.fuse_commit: the commit "
    "rides in the next block's first forward)",
    "forwards": "speed: backbone forwards actually run over the pass (upstream: denoise + commit; fused: "
    "denoise + commit - fused_commits), summed over the benchmark's prompts",
    "t_forward_ms": "milliseconds of one forward_block at the row's batch size (the cost model's unit)",
    "s_block": "seconds of one instrumented pass inside forward_block (denoising forwards)",
    "s_fused": "seconds of one instrumented pass inside commit_and_forward (fused commit + denoising forward)",
    "s_verify": "seconds of one instrumented pass inside forward_candidates (packed speculative verifies)",
    "s_commit": "seconds of one instrumented pass inside commit_block and prefill (KV-cache commits)",
    "s_head_step": "seconds of one instrumented pass inside the MRP head's step (drafting)",
    "s_head_commit": "seconds of one instrumented pass inside the MRP head's commit (its KV cache)",
    "s_outside": "seconds of one instrumented pass outside every model call (Python, picks, bookkeeping): the "
    "pass's wall time minus the s_* above",
    "target": "speed targets: issue 14's target, as text (report.speed.TARGETS)",
    "value": "the value of the row's key, target or item (text in key/value tables; a number in the speed targets "
    "and gpu_check, in its unit)",
    "section": "gpu_check: the part of the check the row belongs to (kernels, mismatch, engine, ...)",
    "item": "gpu_check: what the row measures",
    "unit": "gpu_check: the unit of the row's value (ms, forwards, rows, ...)",
    "met": "bool: the target's value passes its rule",
    "forward_ms": "milliseconds of one forward_block (batch 1 unless the table says otherwise)",
    "step_total_ms": "milliseconds of one whole MRP head step with lm_head and the draft pick, batch 1",
    "embed_ms": "milliseconds of the head step's token embedding",
    "eh_proj_ms": "milliseconds of the head step's input projection (enorm, hnorm, concat, eh_proj)",
    "rope_mask_ms": "milliseconds of the head step's rotary tables and attention mask",
    "layers_ms": "milliseconds of the head step's decoder layer(s)",
    "norm_ms": "milliseconds of the head step's final norm",
    "lm_head_ms": "milliseconds of lm_head over the block's hidden states",
    "pick_ms": "milliseconds of the draft pick (draft_pick) over the block's logits",
    "step_forwards": "ratio: step_total_ms / forward_ms, one head step in forwards (the head_cost of this "
    "breakdown)",
    # ---- drafters.csv, shapes.csv
    "variant": "the profile overrides the head was trained with, key=value,... (profile: the profile's own head)",
    "tpf_mrp": "TPF of speculative(K, mrp) with the variant's head",
    "tpf_oracle": "TPF of speculative(K, oracle): the ceiling",
    "tpf_naive": "TPF of speculative(K, naive): drafts from the backbone's own uncorrected logits, no head",
    "heldout_pick_acc": "fraction: held-out block states whose most confident masked slot under A + C is the "
    "backbone's own next pick (A: the backbone's logits, C: the head's residual)",
    "heldout_pick_acc_uncorrected": "fraction: the same as heldout_pick_acc under A alone (no head)",
    "heldout_kl": "nats: held-out KL(B ‖ A + C), B the backbone's logits one step later, mean over masked "
    "positions",
    "head": "mrp_heldout: the released head checked (mrp.pretrained: hub id[@revision] or directory)",
    "data_sha256": "mrp_heldout: sha256 of the held-out records read (which sequences the KL is over)",
    "sequences": "mrp_heldout: packed held-out sequences the released head's KL is measured on",
    "seq_len": "mrp_heldout: tokens per packed sequence (mrp_training.seq_len)",
    "heldout_slots": "mrp_heldout: masked slots (positions with a next-step target) the held-out KL averages over",
    "ratio": "mrp_heldout: heldout_kl / heldout_uncorrected_kl (below 1: A + C is closer to the next step than A)",
    "heldout_uncorrected_kl": "nats: held-out KL(B ‖ A), the residual the head must explain (no head)",
    "train_loss": "nats: the MRP training loss at the step (KL(B ‖ A + C) on the training batch)",
    "step": "training step (optimizer updates)",
    "shape": "the profile overrides of the backbone shape (report.shapes), key=value,... (profile: as it is)",
    "block_size": "tokens per block",
    "num_layers": "backbone decoder layers",
    "hidden_size": "backbone hidden width",
    "params_m": "backbone parameters, millions",
    "train_step_s": "seconds per backbone training step (median after the first)",
    "train_min": "minutes of the whole backbone training: train_step_s x backbone_training.steps / 60",
    "head_flop_share": "ratio: the head's linear multiply-adds (lm_head included) over the backbone's",
    "oracle_tpf": "TPF of the oracle drafter at K on one block: block_size / forwards (report.shapes.oracle_block)",
    "oracle_head_steps": "head steps per block of the oracle's loop at K",
    # ---- adjacent.csv (measure.adjacent)
    "subset": "positions: all masked positions, or conf<0.99 (the current step's top probability < 0.99)",
    "distance": "denoising steps between the two logits compared (step s and s + distance, same block)",
    "kl_mean": "nats: mean over positions of KL(softmax(logits at s + d) ‖ softmax(logits at s))",
    "kl_median": "nats: median over positions of the same KL",
    "top1_agreement": "fraction of positions whose greedy token is the same at steps s and s + d",
    "n_positions": "count: positions pooled into the row",
    "kl_null_median": "nats: the null of relative_kl: median over positions of KL between two masked positions' "
    "logits of the same block state (measure.adjacent)",
    "relative_kl": "ratio: median adjacent-step KL over kl_null_median (measure.adjacent.relative_kl); far below 1: "
    "adjacent steps closer than two positions of one state; CI: bootstrap over positions",
    # ---- matched speed (report.pareto: remask and direct against the dynamic-τ frontier)
    "axis": "matched speed: the speed axis of the row, tpf, weighted_tpf (head calls charged at their measured "
    "cost; when the run has a cost model) or wall_speedup (report.pareto.AXIS_LABELS)",
    "speed": "matched speed: the setting's speed on the row's axis (TPF, or tokens/s over static(1)'s)",
    "dynamic_accuracy": "percent: the dynamic frontier's accuracy at the setting's speed (report.pareto.frontier: "
    "static(1) and every dynamic(τ), Pareto points joined by lines; blank beyond the fastest)",
    "margin": "percentage points: accuracy - dynamic_accuracy at equal speed; CI: paired bootstrap over prompts, "
    "the frontier recomputed in each replicate",
    "at_equal_speed": "matched speed verdict: beats (margin CI above 0), worse (below 0), tie (holds 0), beyond "
    "(faster than every dynamic setting)",
    "frontier_gap": "matched speed: accuracy points between the two Pareto points of the frontier segment the "
    "setting is compared on (0 on a point or at or below the slowest; blank beyond the fastest and on frontier rows); "
    "above decoding.frontier_max_gap, at_equal_speed reads gap: not compared (report.pareto.GAP)",
    "frontier_segment": "matched speed: the two frontier settings whose segment the setting is compared on",
    # ---- kernels
    "op": "the kernel's operation: confidence, residual_confidence, residual_kl_fwd, residual_kl_fwd_bwd",
    "vocab": "vocabulary size V of the [N, V] logits",
    "dtype": "the logits' dtype",
    "device": "the device timed (cpu, cuda)",
    "impl": "the implementation: triton (the kernel), torch (the PyTorch reference), torch.compile (the "
    "reference compiled)",
    "time_ms": "milliseconds per call, median of the repeats; blank when not measured (see note)",
    "bytes_read": "bytes of [N, V] traffic the op cannot avoid (kernels.bench._bytes)",
    "gbps": "GB/s: bytes_read / time_ms (achieved read bandwidth)",
    "note": "a remark on the row: kernels, why it was not measured ('cpu: reference only': Triton needs CUDA; compile "
    "not requested); gpu_check, the raw measurement behind a ratio",
    "torch": "GB/s of the PyTorch reference (kernels_gbps: gbps pivoted by impl)",
    "torch.compile": "GB/s of the reference under torch.compile; blank when not compiled",
    "triton": "GB/s of the Triton kernel; blank off CUDA",
    "check": "the correctness check's case (kernel, N, dtype, input)",
    "max_abs_err": "the largest absolute difference from the float64 reference",
    "atol": "the absolute tolerance of the check",
    "ok": "bool: every element within atol + rtol x |reference|",
    # ---- key/value tables, trajectories, grid scaling
    "key": "the entry's name (environment: provenance; profile: a setting's dotted path; mrp_head: a property)",
    "source": "trajectories: the collection source (gt, gt-multi, self); claims: where the paper states the claim; "
    "mrp_heldout: the data the released head's held-out KL is measured on",
    "rows": "count: records (trajectories: block states collected from the source; grid_scaling: runs rows of the "
    "grids)",
    "shards": "count: files the source's trajectories are stored in",
    "artifact": "the stage artifact's directory under runs/",
    "nproc": "torchrun ranks",
    "decode_s": "seconds of decoding on the busiest rank (its shards only)",
    "identical_to_1": "bool: every grid cell equals the one-rank run's",
    "nproc_speedup": "x: wall_s at 1 rank over wall_s at nproc ranks (torchrun start-up included)",
    "decode_nproc_speedup": "x: decode_s at 1 rank over decode_s at nproc ranks",
    "efficiency": "fraction: decode_nproc_speedup / nproc (1.0: perfect scaling)",
    # ---- claims (report.claims)
    "id": "the claim's short name",
    "claim": "the paper's claim, in words",
    "paper": "the paper's number for the claim, as text",
    "ours": "our number for the claim, as text",
    "verdict": "holds / holds in direction; size not compared / holds in direction, not in size / not shown / does "
    "not hold / not measured (report.verdicts.VERDICTS), by the claim's stated rule",
    "seed_verdicts": "the claim's verdict on each seed run of the row, `seed: verdict`; `head s` / `backbone s` name "
    "the kind in all-seeds rows, the published seed stands alone",
    "verdict_across_seeds": "the weakest verdict over the seeds measured (report.variance.robust_verdict); in "
    "claims.md with its reason and seeds; blank: not judged across seeds",
    "robust": "True when the claim holds (or holds in direction) on every seed measured, at least two; blank: not "
    "judged across seeds",
    "robust_reason": "on how many of the measured seeds the claim holds",
    "reason": "why the verdict follows from the numbers",
    "table": "the table the claim reads",
    "column": "the column(s) of that table the claim reads",
    "measured": "how we measure the claim, in words (the statistic and the runs it reads)",
    "verdict_rule": "the direction or threshold that decides the verdict, in words",
    "scope": "claims: what one verdict row covers (a benchmark, a setting; blank: the whole claim)",
    "extension": "claims: bool, the row lies beyond the paper's grid (e.g. τ = 0.3) and is not folded into the "
    "paper's claim",
    "statistic": "claims: what we compute, from which measurement of record",
    "null": "claims: the comparison or null the statistic must beat",
    "paper_number": "claims: which of the paper's numbers (the declared paper model's) stands beside ours",
    "tolerance": "claims: the tolerance of a sized claim on a comparable profile; – otherwise",
    "group": "claims: the tally group the row counts in (report.claims.GROUPS): paper (the paper's claims, the "
    "headline), implementation (checks true by construction under exact verification), package (our own claims)",
    "control": "claims: the no-MRP control beside an MRP verdict and MRP minus (or over) it with its paired CI "
    "(report.claims_controls); blank for claims without MRP in them",
    "control_verdict": "claims: holds (MRP beats its no-MRP control: CI clear of the null), not shown, does not hold "
    "(the control is better), not measured; blank: no control",
    "other_control": "claims: the no-MRP controls beside the control of record (MTP without a head for direct mode, "
    "the head-free vetoes for remasking), MRP minus each with its paired CI; beating them alone never makes a verdict "
    "hold, failing one makes a holding verdict not shown (report.claims_controls)",
    "other_control_verdict": "claims: other_control's verdict, as control_verdict's",
    "control_across_seeds": "claims: the weakest control_verdict over every seed run (report.variance), with the "
    "seeds; blank: not judged across seeds",
    "other_control_across_seeds": "claims: the weakest other_control_verdict over every seed run, with the seeds",
    "seed_control_verdicts": "the control-of-record verdict on each seed run of the row, `seed: verdict`",
    "seed_other_control_verdicts": "the other controls' verdict on each seed run of the row, `seed: verdict`",
    "heldout_baseline_kl": "nats: held-out KL(B ‖ A), the uncorrected baseline of heldout_kl on the same slots",
    "chosen_by_rule": "variance_heads: True for the head seed report.variance.PUBLISHED_HEAD_RULE chooses (the median "
    "held-out KL ratio, from training alone, before any decoding)",
    "published_head": "variance_heads: True for the profile's own seed, the published head",
    "declared": "claims: the claim's statistic, null and control in one line, fixed in report/claims.py before the "
    "numbers (version control)",
    "stat": "claims: the statistic the row's check computed, in the words of its `declared` text",
    "stat_null": "claims: the null the row's check compared with, in the words of its `declared` text",
    # ---- the quick check (report.quickcheck: quickcheck_expected, quickcheck_time; issue 36). Its other columns
    # (table, benchmark, setting, paper, tolerance, n, batch_size, grid) are defined above; `low` / `high` are the two
    # ends of its estimate (quickcheck.SCENARIOS: a one-call verify and the shorter answers, a loop verify and the
    # longer ones; the inputs: quickcheck.ASSUMED)
    "metric": "quick check: the measured quantity a cell compares with the paper (accuracy, throughput_speedup, gain)",
    "ci_width": "quick check: points, this subset's 95% CI width for an accuracy at the paper's value, 2 x 1.96 x "
    "sqrt(p (1 - p) / n) (a gain: of a difference of two independent accuracies, an upper bound); blank for a speedup",
    "prompts": "quick check: prompts the grid decodes per setting, over the profile's benchmarks",
    "batches": "quick check: batches the grid decodes per setting (total: summed over the settings)",
    "forwards_low": "quick check: backbone calls of the setting's decodes at the low end of the estimate (a one-call "
    "verify, the shorter answers)",
    "forwards_high": "quick check: backbone calls of the setting's decodes at the high end of the estimate (a loop "
    "verify, the longer answers)",
    "head_calls_low": "quick check: MRP head calls of the setting's decodes at the low end of the estimate",
    "head_calls_high": "quick check: MRP head calls of the setting's decodes at the high end of the estimate",
    "minutes_low": "quick check: estimated minutes of the setting's decodes at the low end (quickcheck.ASSUMED; total: "
    "with the fixed load time)",
    "minutes_high": "quick check: estimated minutes of the setting's decodes at the high end (quickcheck.ASSUMED; "
    "total: with the fixed load time)",
}

#: runs columns that tables show aggregated over the row's prompts: column -> how (the quantity: RUN_COLUMNS)
TABLE_AGGREGATES: dict[str, str] = {
    "valid_chain": "percent of the row's prompts with a valid chain (mean x 100); blank for real benchmarks",
    "mrp_forwards": "per prompt mean (decoding tables); speed.csv: total over the benchmark's prompts in one pass",
    "revoked": "per prompt mean: tokens revoked by remasking, 0 off remask",
    "extra_rows": "per prompt mean",
    "rounds": "speed.csv: total verify rounds over the benchmark's prompts in one pass",
    "tokens": "speed.csv: total generated tokens over the benchmark's prompts in one pass",
    "denoise_forwards": "speed.csv: total over the benchmark's prompts in one pass",
    "wall_s": "speed.csv: median seconds of one pass over the benchmark's prompts (of --repeats interleaved); "
    "grid_scaling: seconds of the whole torchrun",
}


def define(column: str) -> str | None:
    """The glossary entry of a table column (unit; how computed), or None when the schema does not define it.

    Lookup order: TABLE_COLUMNS; RUN_COLUMNS (with TABLE_AGGREGATES' note); ``<m>_lo`` / ``<m>_hi`` of a defined
    m; ``paper_<m>`` of a defined m."""
    column = str(column)
    if column in TABLE_COLUMNS:
        return TABLE_COLUMNS[column]
    if column in RUN_COLUMNS:
        agg = TABLE_AGGREGATES.get(column)
        return RUN_COLUMNS[column] + (f"; in a table: {agg}" if agg else "") + " (a runs column)"
    for suffix, bound in (("_lo", "lower"), ("_hi", "upper")):
        base = column.removesuffix(suffix)
        if base != column and define(base) is not None:
            return (f"the {bound} bound of {base}'s confidence interval (evaluation.ci, bootstrap over prompts), "
                    f"in {base}'s unit")
    base = column.removeprefix("paper_")
    if base != column and define(base) is not None:
        return (f"the paper's {base} for paper_model on paper_benchmark at the row's setting (mrp_repro/paper_data/), "
                "blank where the paper does not report it")
    return None


def undefined_columns(columns: Iterable[str]) -> list[str]:
    """The columns the glossary does not define, in order."""
    return [str(c) for c in columns if define(c) is None]


def require_defined(columns: Iterable[str], table: str) -> None:
    """ValueError naming every column of `table` without a glossary entry (and where to add it)."""
    missing = undefined_columns(columns)
    if missing:
        raise ValueError(
            f"table {table!r} has column(s) {', '.join(missing)} without a definition; define each once in "
            "mrp_repro/measure/schema.py TABLE_COLUMNS (unit; how it is computed), or rename it to a defined column"
        )
