"""Smoke: every notebook runs through papermill on the `smoke` profile and writes its figures and tables.

Required in CI (not marked slow): the whole smoke sequence stays under a few minutes on 2 cores.
Outputs go to a temporary directory through MRP_REPRO_RUNS / MRP_REPRO_FIGURES.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mrp_repro.config import DEFAULT_PROFILE
from mrp_repro.reproduce import KERNEL, notebooks

ROOT = Path(__file__).resolve().parents[1]

#: files each notebook must write under figures/smoke/ (stems; figures get .png/.pdf, tables .md/.tex/.csv)
EXPECTED = {
    "00_environment": {"tables": ["environment", "profile"]},
    "01_backbone": {"tables": ["backbone"], "figures": ["backbone_curve"]},
    "02_trajectories": {"tables": ["trajectories"]},
    "03_adjacent_step_logits": {"tables": ["adjacent"], "figures": ["adjacent", "adjacent_relative"]},
    "04_train_mrp": {"tables": ["mrp_curve"], "figures": ["mrp_curve"]},
    "05_speculative": {
        "tables": ["speculative", "modes", "speculative_drafters", "speculative_throughput", "wallclock_checks",
                   "clock_record"],
        "figures": ["speculative", "speedup"],
    },
    "06_direct_lookahead": {
        "tables": ["direct", "lookahead", "matched_speed"],
        "figures": ["lookahead", "matched_speed"],
    },
    "07_remasking": {"tables": ["remasking", "remasking_by_rule", "controls"], "figures": ["remasking", "trajectory"]},
    "08_kernels": {"tables": ["kernels_gbps"], "files": ["kernels.csv", "kernels.png", "kernels.pdf"]},
    "09_claims": {"tables": ["claims_table"], "files": ["claims.md", "claims.csv"]},
    "10_ablations": {"tables": ["ablation_objective", "ablation_claims"], "figures": ["ablation_objective"]},
    "11_peers": {"tables": ["peers", "peers_aup"], "figures": ["peers"]},
}
#: notebook parameters of the smoke run that are sizes, not profile settings (10: one axis, one K and τ: the CI
#: budget; tests/test_ablations.py runs every axis)
SMOKE_PARAMS = {"10_ablations": {"axes": ["objective"], "Ks": [3], "taus": [0.5]}}


def test_the_makefile_reproduces_the_default_profile():
    """`make reproduce`, the notebooks (above) and the CLIs default to one profile, the one the README reports."""
    makefile = (ROOT / "Makefile").read_text()
    assert f"\nPROFILE ?= {DEFAULT_PROFILE}\n" in makefile
    assert f"profile `{DEFAULT_PROFILE}`" in (ROOT / "README.md").read_text()


def test_every_notebook_is_listed_and_clean():
    names = [nb.stem for nb in notebooks(opt_in=True)]
    assert names == sorted(EXPECTED), names
    assert "10_ablations" not in [nb.stem for nb in notebooks()]  # opt-in: make ablations, not make reproduce
    for nb in notebooks(opt_in=True):
        d = json.loads(nb.read_text())
        tagged = [c for c in d["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
        assert len(tagged) == 1 and f'profile = "{DEFAULT_PROFILE}"' in "".join(tagged[0]["source"]), nb.name
        for c in d["cells"]:
            if c["cell_type"] == "code":
                assert not c.get("outputs") and c.get("execution_count") is None, f"{nb.name}: committed with outputs"


@pytest.fixture(scope="session")
def kernel():
    from jupyter_client.kernelspec import KernelSpecManager

    if KERNEL not in KernelSpecManager().find_kernel_specs():
        subprocess.run([sys.executable, "-m", "ipykernel", "install", "--sys-prefix", "--name", KERNEL], check=True)
    return KERNEL


@pytest.fixture(scope="module")
def smoke_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("smoke")
    old = {k: os.environ.get(k) for k in ("MRP_REPRO_RUNS", "MRP_REPRO_FIGURES")}
    os.environ["MRP_REPRO_RUNS"] = str(root / "runs")
    os.environ["MRP_REPRO_FIGURES"] = str(root / "figures")
    yield root
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


#: (smoke root, notebook) -> its published copy: the notebooks this module has run in its smoke dirs
_SMOKE_RAN: dict[tuple[str, str], Path] = {}


def _run_smoke(name, kernel, root) -> Path:
    """Notebook `name` on smoke as `make reproduce` runs it, after every notebook before it that has not run yet in
    this module's smoke dirs (each once): a test owns the run it reads, in any order and alone (issue 28).
    -> the published executed copy."""
    from mrp_repro.config import load_profile
    from mrp_repro.reproduce import run_notebook

    for n in sorted(EXPECTED):
        if n > name:
            break
        if (str(root), n) in _SMOKE_RAN:
            continue
        env = {"MRP_REPRO_DEVICE": "cpu"}
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            nb = ROOT / "notebooks" / f"{n}.ipynb"
            _SMOKE_RAN[str(root), n] = run_notebook(nb, load_profile("smoke"), "smoke", kernel, SMOKE_PARAMS.get(n))
        finally:
            for k, v in old.items():
                os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    return _SMOKE_RAN[str(root), name]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_notebook_runs_on_smoke(name, kernel, smoke_dirs):
    nb = ROOT / "notebooks" / f"{name}.ipynb"
    published = _run_smoke(name, kernel, smoke_dirs)  # make reproduce's call, with the notebooks before it
    figs = smoke_dirs / "figures" / "smoke"
    exp = EXPECTED[name]
    files = [f"{s}.{e}" for s in exp.get("figures", []) for e in ("png", "pdf")]
    files += [f"{s}.{e}" for s in exp.get("tables", []) for e in ("md", "tex", "csv")]
    files += exp.get("files", [])
    for f in files:
        p = figs / f
        assert p.exists() and p.stat().st_size > 0, f"{name} did not write {p}"
    # the browsable executed copy beside the figures: outputs kept, small, no absolute repository path
    assert published == figs / "notebooks" / nb.name
    assert (smoke_dirs / "runs" / "smoke" / "notebooks" / nb.name).exists()
    text = published.read_text()
    cells = [c for c in json.loads(text)["cells"] if c["cell_type"] == "code"]
    assert any(c.get("outputs") for c in cells) and all(c.get("execution_count") for c in cells), name
    assert str(ROOT) not in text and published.stat().st_size < 2_000_000, (name, published.stat().st_size)
    # the commit it ran at: environment.md's (00 ran first), or HEAD now where a commit landed meanwhile (a shared tree)
    from mrp_repro.config import load_profile
    from mrp_repro.runtime import provenance

    stamp = json.loads(text)["metadata"]["mrp_repro"]["git_commit"]
    assert stamp in (_table_commit(figs), provenance(load_profile("smoke"), "cpu")["git_commit"]), name
    if exp.get("tables"):  # the glossary beside them defines every column of every table written so far
        from mrp_repro.report.tables import glossary_markdown, table_columns

        assert set(exp["tables"]) <= set(table_columns(figs)) and not glossary_markdown(figs)[1], name


def _table_commit(figs: Path) -> str:
    """The commit recorded in figures/<profile>/environment.csv (notebook 00: runtime.provenance)."""
    import csv

    with open(figs / "environment.csv", newline="") as f:
        return {r["key"]: r["value"] for r in csv.DictReader(f)}["git_commit"]


@pytest.mark.parametrize("profile", ["tiny", "chain16"])
def test_committed_notebooks_carry_the_tables_commit(profile):
    """Every executed notebook `make reproduce` runs (reproduce.notebooks(): 00-09) under the committed
    figures/<profile>/notebooks/ ran at the commit its tables record (environment.md's git_commit), from a clean tree:
    a figure regenerated alone at a later commit beside older tables shows here. The opt-in notebooks (10: `make
    ablations`, hours of head training) are their own run and are not held to it (README: what is from which run)."""
    from mrp_repro.reproduce import notebooks

    figs = ROOT / "figures" / profile
    commit = _table_commit(figs)
    names = [nb.stem for nb in notebooks()]
    found = {nb.stem for nb in (figs / "notebooks").glob("*.ipynb")}
    assert set(names) <= found <= set(EXPECTED), found  # every notebook make reproduce runs; opt-in ones if run
    stamps = {n: json.loads((figs / "notebooks" / f"{n}.ipynb").read_text())["metadata"].get("mrp_repro", {})
              for n in names}  # fmt: skip
    assert all(s.get("git_commit") == commit for s in stamps.values()), (commit, stamps)
    assert not any(s.get("git_dirty") for s in stamps.values()), stamps


# slow (make test-slow, once in CI): two torchrun ranks re-collect every grid; tests/test_ddp_grid.py checks the
# sharded grid's equality with one process in make test
@pytest.mark.slow
def test_reproduce_nproc_2_collects_the_same_grids_on_two_ranks(kernel, smoke_dirs):
    """`make reproduce NPROC=2` on the smoke run above: the heavy stages reuse the backbone, trajectories and head,
    collect every grid again on 2 torchrun ranks, and the merged files equal the notebooks' one-process ones but
    for the wall-clock columns; a notebook run afterwards reads them without collecting again."""
    import io

    import pandas as pd
    import papermill as pm

    from mrp_repro.config import load_profile
    from mrp_repro.measure.sharded import TIMING_COLUMNS
    from mrp_repro.report import grids, paper, peers, scaling
    from mrp_repro.reproduce import heavy_stages

    _run_smoke("09_claims", kernel, smoke_dirs)  # the one-process grids (01, 05-07; 09 the controls), if not yet
    P = load_profile("smoke")
    every = (*grids.GRIDS, peers.GRID)  # 07's peers grid too (report.peers: sharded the same way)
    one = {g: paper.result_path(P, g).read_text() for g in every}
    scaling.clear_grids(P, every)
    heavy_stages(P, "smoke", 2)
    for g in every:
        two = paper.result_path(P, g).read_text()
        a, b = (pd.read_csv(io.StringIO(t), dtype=str, keep_default_na=False) for t in (one[g], two))
        assert len(a) and set(a["extra_rows"]) != {""}, g  # every grid records extra_rows
        pd.testing.assert_frame_equal(a.drop(columns=list(TIMING_COLUMNS)), b.drop(columns=list(TIMING_COLUMNS)))
        assert set(b["wall_rank"]) == {"0", "1"}, g
    stamp = paper.result_path(P, "modes_runs").stat().st_mtime_ns
    nb = ROOT / "notebooks" / "06_direct_lookahead.ipynb"
    out = smoke_dirs / "runs" / "smoke" / "notebooks" / "06_after_nproc2.ipynb"
    pm.execute_notebook(str(nb), str(out), parameters={"profile": "smoke"}, kernel_name=kernel, cwd=str(nb.parent),
                        progress_bar=False)  # fmt: skip
    assert paper.result_path(P, "modes_runs").stat().st_mtime_ns == stamp  # read, not collected again


# ----------------------------------------------------------------------------- the SDAR path (sdar-mini)

#: sdar-mini at its smallest: one prompt per benchmark (all four: extraction and the sandbox run), one block,
#: one threshold / rule / K of each kind, one row at a time (so 05's latency grid is read from its modes grid:
#: grids.COVERED_BY). sdar-mini is the released-head profile (the shape of sdar-*-released): notebook 04 trains
#: nothing; it loads the released-format head (which 05-07 decode with), records its files' sha256 and measures its
#: held-out KL. The online training recipe on this backbone: tests/test_sdar_mini_online.py.
SDAR_CI = """extends: {base}
name: sdar-mini-ci
trajectories: {{n_prompts: 2, shard_size: 2}}
decoding: {{max_new_tokens: 16, batch_size: 1, thresholds: [0.5], lookahead_k: [1], speculative_k: [3],
           remask_rules: [tau]}}
evaluation: {{n_prompts: 1, bootstrap_samples: 20}}
"""
SDAR_EXPECTED = {
    **EXPECTED,
    "01_backbone": {"tables": ["backbone"]},
    "04_train_mrp": {"tables": ["mrp_head", "mrp_heldout"]},
    "10_ablations": {"tables": ["ablation_released"]},  # a released head: evaluated, never trained
}
#: notebook parameters that are sizes, not profile settings
SDAR_PARAMS = {"03_adjacent_step_logits": {"n_problems": 1, "max_distance": 2}, "05_speculative": {"n_latency": 1},
               "07_remasking": {"n_trace": 1},
               "10_ablations": {"Ks": [3], "taus": [0.5], "benchmarks": ["gsm8k"]}}  # fmt: skip


def _run_sdar(names, root, dtype):
    import papermill as pm

    prof = root / "sdar-mini-ci.yaml"
    prof.write_text(SDAR_CI.format(base=ROOT / "configs" / "sdar-mini.yaml"))
    env = {"MRP_REPRO_DEVICE": "cpu", "MRP_REPRO_DTYPE": dtype, "MRP_REPRO_RUNS": str(root / "runs"),
           "MRP_REPRO_FIGURES": str(root / "figures")}  # fmt: skip
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        for name in names:
            nb = ROOT / "notebooks" / f"{name}.ipynb"
            out = root / "runs" / "sdar-mini-ci" / "notebooks" / nb.name
            out.parent.mkdir(parents=True, exist_ok=True)
            t0 = time.perf_counter()
            pm.execute_notebook(str(nb), str(out), parameters={"profile": str(prof), **SDAR_PARAMS.get(name, {})},
                                kernel_name=KERNEL, cwd=str(nb.parent), progress_bar=False)  # fmt: skip
            print(f"sdar-mini-ci {dtype} {name}: {time.perf_counter() - t0:.1f}s")  # the budget: <= 3 min in all
            figs = root / "figures" / "sdar-mini-ci"
            exp = SDAR_EXPECTED[name]
            files = [f"{s}.{e}" for s in exp.get("figures", []) for e in ("png", "pdf")]
            files += [f"{s}.{e}" for s in exp.get("tables", []) for e in ("md", "tex", "csv")] + exp.get("files", [])
            for f in files:
                assert (figs / f).exists() and (figs / f).stat().st_size > 0, f"{name} ({dtype}) did not write {f}"
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    return root / "figures" / "sdar-mini-ci"


def _assert_released_run(root, figs):
    """No training step ran (no head, checkpoint, optimizer state or packed SFT written), the paper model is the
    declared one, and the provenance (environment, runs rows) carries the head's resolved revision and file sha256."""
    import hashlib

    import pandas as pd

    runs = root / "runs" / "sdar-mini-ci"
    made = sorted(p.name for p in runs.iterdir())
    assert not [n for n in made if n.startswith(("mrp-", "sft-packed-"))], made
    assert not list(runs.rglob("ckpt.pt")) and not list(runs.rglob("loss_curve.csv"))
    env = pd.read_csv(figs / "environment.csv").set_index("key")["value"]
    weights = root / "runs" / "sdar-mini" / "checkpoint" / "released-head" / "model.safetensors"
    assert env["head sha256 model.safetensors"] == hashlib.sha256(weights.read_bytes()).hexdigest()
    assert "head=runs/sdar-mini/checkpoint/released-head@local#" in env["inputs"]
    assert "requested None -> commit None" in env["head (mrp.pretrained)"]  # a local directory: no hub commit
    (rows_csv,) = runs.glob("results-*/modes_runs.csv")
    rows = pd.read_csv(rows_csv)
    assert set(rows["paper_model"]) == {"SDAR-1.7B"} and set(rows["inputs"]) == {env["inputs"]}
    held = pd.read_csv(figs / "mrp_heldout.csv")
    assert held["heldout_kl"].iloc[0] > 0 and held["heldout_uncorrected_kl"].iloc[0] > 0


# slow (make test-slow, once in CI: 150-280 s): make test keeps the SDAR path through tests/test_sdar_mini.py,
# test_released_mini.py and test_sdar_mini_online.py; this one runs every notebook on it
@pytest.mark.slow
def test_every_notebook_runs_the_sdar_path_on_sdar_mini(kernel, tmp_path):
    """The SDAR branches: a generated hub-format SDAR checkpoint, the Qwen tokenizer and chat template, the
    released-format head, every decoding mode on GSM8K / MATH500 / HumanEval / MBPP, the paper tables, claims."""
    figs = _run_sdar(sorted(SDAR_EXPECTED), tmp_path, "float32")
    import pandas as pd

    backbone = pd.read_csv(figs / "backbone.csv")
    assert set(backbone["benchmark"]) == {"gsm8k", "math500", "humaneval", "mbpp"}
    claims = pd.read_csv(figs / "claims.csv")
    assert len(claims) >= 10 and claims["verdict"].notna().all()
    head = pd.read_csv(figs / "mrp_head.csv").set_index("key")["value"]
    assert head["head layers"] == "3" and head["dtype"] == "torch.float32"
    _assert_released_run(tmp_path, figs)


# slow (make test-slow, once in CI): bf16 decoding of every mode is in make test through test_mrp_modes and
# test_lossless_bf16; this is the same through the notebooks on sdar-mini
@pytest.mark.slow
def test_sdar_mini_decodes_in_bf16(kernel, tmp_path):
    """MRP_REPRO_DTYPE=bfloat16 through the notebooks that load and decode: 04 (the released head in bf16, its
    held-out check; nothing trained) and 05 (every mode's grid: static, dynamic, speculative, direct, naive,
    remask). 01, 06 and 07 reload and tabulate what those wrote, as in fp32 (kept out: CI budget); 07's remasking
    trace in bf16, for every rule, is tests/test_mrp_modes.py::test_every_remask_rule_decodes_in_bf16_with_its_trace."""
    figs = _run_sdar(["04_train_mrp", "05_speculative"], tmp_path, "bfloat16")
    import pandas as pd

    from mrp_repro.measure.schema import MODES

    head = pd.read_csv(figs / "mrp_head.csv").set_index("key")["value"]
    assert head["dtype"] == "torch.bfloat16"
    modes = pd.read_csv(figs / "modes.csv")
    assert set(modes["mode"]) == set(MODES) and set(modes["benchmark"]) == {"gsm8k", "math500", "humaneval", "mbpp"}
    assert modes.loc[modes["mode"] == "speculative", "lossless"].all()  # token-identical to static in bf16
    runs = tmp_path / "runs" / "sdar-mini-ci"
    assert not [p.name for p in runs.iterdir() if p.name.startswith(("mrp-", "sft-packed-"))]  # nothing trained


def test_reproduce_names_the_failing_cell(tmp_path):
    from papermill.exceptions import PapermillExecutionError

    from mrp_repro.reproduce import failure_message

    e = PapermillExecutionError(3, 2, "x = 1 / 0", "ZeroDivisionError", "division by zero", [])
    msg = failure_message(Path("05_speculative.ipynb"), tmp_path / "out.ipynb", e, 1.0, "tiny")
    assert "05_speculative.ipynb" in msg and "cell 3" in msg and "ZeroDivisionError" in msg and "1 / 0" in msg
