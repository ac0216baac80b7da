"""measure.runs.collect_runs resumes a killed grid from its partial directory: only the missing batches are decoded,
the frame equals an uninterrupted one but for the clock (wall_s, resumed_from), a batch of another spec or a damaged
file is never read, and report.grids keeps <result>.partial/ until the grid is stored."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import torch

from mrp_repro.measure import runs as runs_mod
from mrp_repro.measure.runs import PARTIAL_FORMAT, collect_runs, partial_path, read_partial, settings_for, write_partial
from mrp_repro.stages import random_backbone

#: the columns a resumed frame may differ in from an uninterrupted one: the clock, and whose clock it was
CLOCK = ["wall_s", "resumed_from"]
#: 5 prompts per benchmark at batch 2: batches of 2, 2, 1; smoke's two benchmarks: 6 batches
N_PROMPTS, BS, MAX_NEW = 5, 2, 12
BATCHES = 6
MODES = ("static", "dynamic", "speculative")
BENCHES = ("synth-math", "synth-code")  # smoke's evaluation.benchmarks


@pytest.fixture(scope="module")
def rb():
    from mrp_repro.config import load_profile

    return random_backbone(load_profile("smoke"), std=0.5)


def grid(rb, **over) -> dict:
    """collect_runs' arguments of the test grid (4 settings, 6 batches), with `over` changed."""
    kw = dict(n_prompts=N_PROMPTS, settings=settings_for(rb.profile, None, MODES), batch_size=BS,
              max_new_tokens=MAX_NEW)  # fmt: skip
    return {**kw, **over}


@pytest.fixture(scope="module")
def reference(rb, tmp_path_factory):
    """The uninterrupted grid, no partial directory (under a temporary runs root)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MRP_REPRO_RUNS", str(tmp_path_factory.mktemp("runs")))
        return collect_runs(rb.profile, rb, None, **grid(rb))


class Interrupted(Exception):
    pass


def counting(monkeypatch, fail_at: int | None = None) -> list:
    """decode_batch counted (one (benchmark, prompt indices) per call); raises Interrupted at call `fail_at`."""
    calls, real = [], runs_mod.decode_batch

    def wrapped(backbone, problems, indices, *a, **k):
        calls.append((problems[0].benchmark, tuple(int(i) for i in indices)))
        if fail_at is not None and len(calls) == fail_at:
            raise Interrupted
        return real(backbone, problems, indices, *a, **k)

    monkeypatch.setattr(runs_mod, "decode_batch", wrapped)
    return calls


def same_but_clock(got: pd.DataFrame, want: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(got.drop(columns=CLOCK), want.drop(columns=CLOCK))


def batch_files(d: Path) -> list[str]:
    return sorted(f.name for f in d.iterdir() if not f.name.startswith("."))


def test_an_interrupted_grid_decodes_only_the_rest(rb, reference, tmp_runs, monkeypatch, capsys):
    """Raised from inside the 5th batch (synth-code's second): 4 batches kept; the rerun decodes the other 2, counts
    the kept ones as done on its progress bar, and returns the uninterrupted frame, row order included, the kept
    rows naming the process that decoded them."""
    part = tmp_runs / "grid.partial"
    calls = counting(monkeypatch, fail_at=5)
    with pytest.raises(Interrupted):
        collect_runs(rb.profile, rb, None, partial=part, **grid(rb))
    assert len(calls) == 5 and batch_files(part) == ["synth-code-00000.json", "synth-math-00000.json",
                                                     "synth-math-00001.json", "synth-math-00002.json"]  # fmt: skip
    capsys.readouterr()
    first = calls[:4]
    calls = counting(monkeypatch)
    got = collect_runs(rb.profile, rb, None, partial=part, progress=True, **grid(rb))
    assert len(calls) == BATCHES - 4 and not set(calls) & set(first) and {b for b, _ in calls} == {"synth-code"}
    same_but_clock(got, reference)
    kept = {(b, i) for b, idx in first for i in idx}
    resumed = got[got["resumed_from"] != ""]
    assert set(zip(resumed["benchmark"], resumed["prompt_index"], strict=True)) == kept and len(kept) == 5 + 2
    assert len(resumed) == len(kept) * 4  # every setting of a kept batch
    assert resumed["resumed_from"].str.fullmatch(r"\S+ pid \d+ on \S+ at \S+").all()
    out = capsys.readouterr()
    assert "synth-math: 3 of 3 batches resumed" in out.out and "synth-code: 1 of 3 batches resumed" in out.out
    bars = [seg for seg in out.err.replace("\n", "\r").split("\r") if "settings)" in seg]  # tqdm's refreshes
    shown = {b: [seg.split("|")[-1].split()[0] for seg in bars if seg.startswith(f"{b} (")] for b in BENCHES}
    # each bar starts at its kept batches, counted as done (later refreshes depend on the clock: tqdm's mininterval)
    assert {b: v[0] for b, v in shown.items()} == {"synth-math": "3/3", "synth-code": "1/3"}, bars
    # a third run decodes nothing
    calls = counting(monkeypatch)
    same_but_clock(collect_runs(rb.profile, rb, None, partial=part, **grid(rb)), reference)
    assert calls == []


CHILD = """
import os, signal, sys
import torch
torch.set_num_threads(1)
from mrp_repro.config import load_profile
from mrp_repro.measure import runs
from mrp_repro.stages import random_backbone

where, at, part = sys.argv[1], int(sys.argv[2]), sys.argv[3]
P = load_profile("smoke")
bb = random_backbone(P, std=0.5)
n = [0]
if where == "decode":  # killed while decoding batch `at`
    real = runs.decode_batch
    def decode_batch(*a, **k):
        n[0] += 1
        if n[0] == at:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*a, **k)
    runs.decode_batch = decode_batch
else:  # killed while writing batch `at`: its bytes written to the temporary file, not yet renamed into place
    real_fsync = os.fsync
    def fsync(fd):
        if os.readlink(f"/proc/self/fd/{{fd}}").startswith(part):  # a partial batch's temporary file
            n[0] += 1
            if n[0] == at:
                os.kill(os.getpid(), signal.SIGKILL)
        return real_fsync(fd)
    os.fsync = fsync
runs.collect_runs(P, bb, None, {n_prompts}, None, runs.settings_for(P, None, {modes}), batch_size={bs},
                  max_new_tokens={max_new}, partial=part)
print("not killed")
"""


@pytest.mark.parametrize("where", ["decode", "write"])
def test_a_grid_killed_with_sigkill_resumes(rb, reference, tmp_runs, monkeypatch, where):
    """A real kill -9 of a process mid-grid (while decoding batch 3, or between writing batch 3's file and renaming
    it): the rerun in another process decodes only the batches not finished, ignores and removes the half-written
    temporary, and returns the uninterrupted frame."""
    part = tmp_runs / "grid.partial"
    code = textwrap.dedent(CHILD).format(n_prompts=N_PROMPTS, modes=MODES, bs=BS, max_new=MAX_NEW)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    r = subprocess.run([sys.executable, "-c", code, where, "3", str(part)], env=env, capture_output=True, text=True,
                       timeout=600)  # fmt: skip
    assert r.returncode == -signal.SIGKILL, r.stdout + r.stderr
    assert batch_files(part) == ["synth-math-00000.json", "synth-math-00001.json"]
    temps = [f for f in part.iterdir() if f.suffix == ".tmp"]
    assert len(temps) == (1 if where == "write" else 0)
    calls = counting(monkeypatch)
    got = collect_runs(rb.profile, rb, None, partial=part, **grid(rb))
    assert len(calls) == BATCHES - 2
    same_but_clock(got, reference)
    assert (got["resumed_from"] != "").sum() == 4 * 4  # 2 batches of 2 prompts, 4 settings
    assert not [f for f in part.iterdir() if f.suffix == ".tmp"] and len(batch_files(part)) == BATCHES


@pytest.mark.parametrize("change", ["max_new_tokens", "settings", "batch_size", "prompts", "backbone", "profile"])
def test_a_partial_batch_of_another_spec_is_not_used(rb, tmp_runs, monkeypatch, capsys, change):
    """Every batch of a finished grid is in the directory; a grid of another spec decodes every one of its own (and
    says why it read none of those files), and its rows are its own."""
    from dataclasses import replace

    part = tmp_runs / "grid.partial"
    collect_runs(rb.profile, rb, None, partial=part, **grid(rb))
    assert len(batch_files(part)) == BATCHES
    bb, over = rb, {}
    if change == "max_new_tokens":
        over = dict(max_new_tokens=MAX_NEW + 4)
    elif change == "settings":
        over = dict(settings=settings_for(rb.profile, None, ("static", "speculative")))
    elif change == "batch_size":
        over = dict(batch_size=3)
    elif change == "prompts":  # other problems (the synthetic test split of another seed)
        bb = replace(rb, profile=rb.profile.replace({"data.seed": rb.profile.data.seed + 1}))
    elif change == "backbone":
        bb = random_backbone(rb.profile, std=0.5, seed=1)
    elif change == "profile":  # a decoding option the backbone's generate reads
        bb = replace(rb, profile=rb.profile.replace({"decoding.fuse_commit": True}))
    kw = grid(bb, **over)
    per_bench = -(-N_PROMPTS // kw["batch_size"])
    capsys.readouterr()
    calls = counting(monkeypatch)
    got = collect_runs(bb.profile, bb, None, partial=part, **kw)
    assert len(calls) == 2 * per_bench and (got["resumed_from"] == "").all()
    err = capsys.readouterr().err
    assert f"not resuming {per_bench} partial batch file(s) of synth-math" in err and "another grid spec" in err
    same_but_clock(got, collect_runs(bb.profile, bb, None, **kw))  # its own rows: what it decodes with no directory
    calls = counting(monkeypatch)
    collect_runs(bb.profile, bb, None, partial=part, **kw)  # its batches replaced the others: all reused now
    assert calls == []


def test_the_key_covers_the_head_and_every_part_of_the_spec(rb):
    """grid_record / batch_key: another head, profile hash, settings order, size, inputs, batch position or prompt is
    another key."""
    from mrp_repro.mrp import MRPHead

    P, s = rb.profile, settings_for(rb.profile, None, MODES)
    heads = [MRPHead(rb.model.config, 1, "residual").init_weights("normal", 0.3, torch.Generator().manual_seed(i))
             for i in (0, 1)]  # fmt: skip
    base = dict(profile=P, backbone=rb, head=heads[0], settings=s, batch_size=2, max_new_tokens=12, inputs="")
    variants = [base, {**base, "head": heads[1]}, {**base, "head": None}, {**base, "profile": P.replace({"seed": 7})},
                {**base, "settings": s[:1] + s[1:][::-1]}, {**base, "batch_size": 3}, {**base, "max_new_tokens": 13},
                {**base, "inputs": "backbone=x@y#z"}]  # fmt: skip
    probs = runs_mod.eval_problems(P, "synth-math", 2)
    keys = {runs_mod.batch_key(runs_mod.grid_record(**v), "synth-math", 0, [0, 1], probs, [[5, 6], [7]])
            for v in variants}  # fmt: skip
    g = runs_mod.grid_record(**base)
    keys |= {runs_mod.batch_key(g, "synth-code", 0, [0, 1], probs, [[5, 6], [7]]),
             runs_mod.batch_key(g, "synth-math", 1, [0, 1], probs, [[5, 6], [7]]),
             runs_mod.batch_key(g, "synth-math", 0, [1, 0], probs, [[5, 6], [7]]),
             runs_mod.batch_key(g, "synth-math", 0, [0, 1], probs[::-1], [[5, 6], [7]]),
             runs_mod.batch_key(g, "synth-math", 0, [0, 1], probs, [[5, 6], [8]])}  # fmt: skip
    assert len(keys) == len(variants) + 5
    assert runs_mod.batch_key(g, "synth-math", 0, [0, 1], probs, [[5, 6], [7]]) == runs_mod.batch_key(
        runs_mod.grid_record(**base), "synth-math", 0, [0, 1], probs, [[5, 6], [7]])


def _cut(f: Path) -> None:
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


def _flip(f: Path) -> None:  # one digit of the rows changed: still valid JSON
    b = bytearray(f.read_bytes())
    j = next(k for k in range(b.index(b'"data":'), len(b)) if chr(b[k]).isdigit())
    b[j] = ord("1") if b[j] != ord("1") else ord("2")
    f.write_bytes(bytes(b))


def _header(f: Path) -> None:  # the header line cut: not JSON
    b = f.read_bytes()
    f.write_bytes(b[:10] + b[b.index(b"\n") :])


def _foreign(f: Path) -> None:  # a JSON file of something else
    f.write_text('{"format": "something else", "rows": 1}\n{}')


def _empty(f: Path) -> None:
    f.write_bytes(b"")


@pytest.mark.parametrize("damage", [_cut, _flip, _header, _foreign, _empty], ids=lambda f: f.__name__.strip("_"))
def test_a_damaged_partial_file_is_named_and_its_batch_decoded_again(rb, reference, tmp_runs, monkeypatch, capsys,
                                                                     damage):  # fmt: skip
    """A batch file cut short, with a byte changed, an unreadable header, of another format or empty: one line on
    stderr names it, only that batch is decoded again (and rewritten), and the frame is the uninterrupted one."""
    part = tmp_runs / "grid.partial"
    collect_runs(rb.profile, rb, None, partial=part, **grid(rb))
    bad = partial_path(part, "synth-code", 1)
    damage(bad)
    capsys.readouterr()
    calls = counting(monkeypatch)
    got = collect_runs(rb.profile, rb, None, partial=part, **grid(rb))
    assert len(calls) == 1
    same_but_clock(got, reference)
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("runs:")]
    assert len(err) == 1 and f"not resuming {bad}: it " in err[0] and err[0].endswith("its batch is decoded again")
    df, head, why = read_partial(bad, head_key(bad))
    assert why is None and head["format"] == PARTIAL_FORMAT and len(df) == len(calls[0]) * 4  # rewritten whole


def head_key(f: Path) -> str:
    import json

    return json.loads(f.read_bytes().partition(b"\n")[0])["key"]


def test_partial_rows_read_back_exactly(rb, tmp_path):
    """write_partial / read_partial: the same frame, dtypes and every cell (NaN, '', None, floats to the bit), for a
    batch of every mode of both algorithms (a head's settings, upstream's counters)."""
    from mrp_repro.mrp import MRPHead

    P = rb.profile
    head = MRPHead(rb.model.config, 1, "residual").init_weights("normal", 0.3, torch.Generator().manual_seed(0))
    settings = runs_mod.static_first(P, head, settings_for(P, head, ("static", "speculative", "remask", "dynamic")),
                                     "test")  # fmt: skip
    probs = runs_mod.eval_problems(P, "synth-code", 2)
    df = runs_mod.decode_batch(rb, probs, [3, 7], settings, 2, 8, "smoke", "SDAR-8B")
    assert df["upstream_rounds"].notna().any() and df["upstream_rounds"].isna().any() and (df["rule"] == "").any()
    f = write_partial(tmp_path / "b.json", df, "k" * 24, decoded_by="me")
    got, head_rec, why = read_partial(f, "k" * 24)
    assert why is None and head_rec["decoded_by"] == "me" and head_rec["rows"] == len(df)
    pd.testing.assert_frame_equal(got, df, check_exact=True)
    assert read_partial(f, "j" * 24)[2].startswith("is of another grid spec")


def test_grids_runs_resumes_from_its_partial_directory_and_removes_it(rb, tmp_runs, monkeypatch):
    """report.grids.runs collects a grid with <result>.partial/ beside its result file: interrupted, the directory
    holds the finished batches; the rerun decodes the rest, stores the grid (equal to one uninterrupted
    collect_runs but for the clock) and removes the directory."""
    import io
    from dataclasses import replace

    from mrp_repro.report import grids, paper

    P = rb.profile.replace({"decoding.batch_size": 2, "evaluation.n_prompts": 3, "decoding.max_new_tokens": 16})
    bb = replace(rb, profile=P)
    part = paper.results_dir(P) / "backbone_runs.partial"
    calls = counting(monkeypatch, fail_at=3)  # 3 prompts at batch 2: 2 batches per benchmark; synth-math's kept
    with pytest.raises(Interrupted):
        grids.runs(P, bb, None, "backbone_runs")
    assert len(calls) == 3 and len(batch_files(part)) == 2 and not paper.result_path(P, "backbone_runs").exists()
    calls = counting(monkeypatch)
    got = grids.runs(P, bb, None, "backbone_runs")
    assert len(calls) == 2 and not part.exists() and paper.result_path(P, "backbone_runs").exists()
    assert got["resumed_from"].notna().sum() == 3 * len(grids.grid_spec(P, None, "backbone_runs")["settings"])
    apart = collect_runs(P, bb, None, **grids.grid_spec(P, None, "backbone_runs"))
    as_text = lambda df: pd.read_csv(io.StringIO(df.drop(columns=CLOCK).to_csv(index=False)), dtype=str,  # noqa: E731
                                     keep_default_na=False)  # fmt: skip
    pd.testing.assert_frame_equal(as_text(got), as_text(apart))
    calls = counting(monkeypatch)
    grids.runs(P, bb, None, "backbone_runs")  # stored: nothing decoded, no directory made
    assert calls == [] and not part.exists()


def test_a_grid_resolves_the_profiles_inputs_once(rb, reference, monkeypatch, tmp_path):
    """The profile's inputs (inputs.summary_for: hub commits, file bytes) are resolved once per grid, by the stage,
    and received by the measurement loop (issue 37): collect_runs and the sharded path resolve them once for all their
    batches, and not at all when the stage passes them; the rows are the same either way."""
    from mrp_repro import inputs as run_inputs
    from mrp_repro.measure.sharded import collect_runs_sharded

    monkeypatch.setenv("MRP_REPRO_RUNS", str(tmp_path / "runs"))
    calls, real = [], run_inputs.summary_for

    def counted(profile):
        calls.append(profile.name)
        return real(profile)

    monkeypatch.setattr(run_inputs, "summary_for", counted)
    decoded = counting(monkeypatch)
    got = collect_runs(rb.profile, rb, None, **grid(rb))
    assert len(decoded) == 6 and calls == ["smoke"]  # six batches, one resolution
    resolved = real(rb.profile)
    calls.clear()
    passed = collect_runs(rb.profile, rb, None, inputs=resolved, **grid(rb))
    assert calls == []
    same_but_clock(got, reference)
    same_but_clock(passed, reference)
    out = collect_runs_sharded(rb.profile, rb, None, tmp_path / "shards", tmp_path / "grid.csv", **grid(rb))
    assert out is not None and calls == ["smoke"]  # the key and every shard's rows: one resolution
    calls.clear()
    collect_runs_sharded(rb.profile, rb, None, tmp_path / "shards2", tmp_path / "grid2.csv", inputs=resolved,
                         **grid(rb))  # fmt: skip
    assert calls == []
