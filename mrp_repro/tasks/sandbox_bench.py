"""Scoring throughput: programs per second, bubblewrap sandbox vs the guard-only path.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python -m mrp_repro.tasks.sandbox_bench [--n 60]``.
The same ``n`` small programs (a function and its asserts, half of them failing, as in
HumanEval / MBPP scoring) run one after another through ``run_program`` in each mode;
a markdown table goes to stdout.  Both modes use the same runner and limits; the
difference is bwrap's namespace and mount setup.
"""

from __future__ import annotations

import argparse
import time

from mrp_repro.tasks.sandbox import run_program


def programs(n: int) -> list[tuple[str, str, bool]]:
    """``n`` (code, tests, should_pass) triples; every second one is wrong."""
    out = []
    for i in range(n):
        wrong = i % 2 == 1
        code = f"def f(x):\n    return sorted(x)[::-1][:{i % 5 + 1}]{' + [0]' if wrong else ''}\n"
        tests = "\n".join(
            f"assert f({list(range(j, j + 7))}) == {sorted(range(j, j + 7), reverse=True)[: i % 5 + 1]}"
            for j in range(3)
        )
        out.append((code, tests + "\n", not wrong))
    return out


def measure(kind: str, progs: list[tuple[str, str, bool]]) -> tuple[float, int]:
    t0 = time.perf_counter()
    right = 0
    for code, tests, should_pass in progs:
        r = run_program(code, tests=tests, timeout_s=10, sandbox=kind)
        right += r.passed == should_pass
    return time.perf_counter() - t0, right


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=60, help="programs per mode (default 60)")
    args = ap.parse_args(argv)
    progs = programs(args.n)
    run_program("pass\n", sandbox="bwrap")  # warm the page cache for both paths
    rows = []
    for kind in ("guard-only", "bwrap"):
        elapsed, right = measure(kind, progs)
        rows.append((kind, elapsed, right))
    base = rows[0][1] / len(progs)
    print("| sandbox | programs | verdicts right | total s | ms / program | programs / s | cost vs guard-only |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for kind, elapsed, right in rows:
        per = elapsed / len(progs)
        cells = (kind, len(progs), right, f"{elapsed:.2f}", f"{1000 * per:.1f}", f"{1 / per:.1f}", f"{per / base:.2f}x")
        print("| " + " | ".join(map(str, cells)) + " |")


if __name__ == "__main__":
    from mrp_repro.cli import run_cli

    run_cli(main)  # a user error, Ctrl-C or a full disk is one error: line
