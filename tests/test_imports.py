"""The import graph of mrp_repro (every module's imports, from the AST): no cycles; measure/ never imports report/."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "mrp_repro"


def _module(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """mrp_repro modules `path` imports, anywhere in the file (function-level imports count too)."""
    me = _module(path)
    pkg = me if path.name == "__init__.py" else me.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(pkg.split(".")[: len(pkg.split(".")) - node.level + 1] + ([base] if base else []))
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for n in names:
            while n and n not in modules:  # `from mrp_repro.report import paper` -> mrp_repro.report.paper
                n = n.rsplit(".", 1)[0] if "." in n else ""
            if n and n != me:
                out.add(n)
    return out


def _graph() -> dict[str, set[str]]:
    files = sorted(PKG.rglob("*.py"))
    modules = {_module(f) for f in files}
    return {_module(f): _imports(f, modules) for f in files}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if m.startswith(n + ".") or n.startswith(m + "."):
                continue  # a package and its own submodules (``__init__`` re-exports) are one unit
            if state.get(m) == 1:
                return stack[stack.index(m) :] + [m]
            if m not in state and (c := visit(m)):
                return c
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (c := visit(n)):
            return c
    return None


def test_graph_is_found():
    g = _graph()
    assert "mrp_repro.report.paper" in g["mrp_repro.report.claims"]
    assert "mrp_repro.measure.schema" in g["mrp_repro.measure.runs"]


def test_no_import_cycles():
    c = _cycle(_graph())
    assert c is None, " -> ".join(c)


def test_cycle_detector_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_measure_never_imports_report():
    bad = {m: sorted(i for i in deps if i.startswith("mrp_repro.report"))
           for m, deps in _graph().items() if m.startswith("mrp_repro.measure")}  # fmt: skip
    assert not any(bad.values()), {m: d for m, d in bad.items() if d}


# The data flow, bottom to top: a module imports only from its own floor or the floors below it.
FLOORS = [
    ("config", "runtime", "errors", "integrity", "cli", "model", "checkpoint", "tokenizer", "kernels", "tasks",
     "decoding", "mrp", "trajectories", "trajectory_store", "backbone", "released", "sdar_mini", "inputs", "paper_data",
     "distributed", "published"),
    ("training",),
    ("measure", "methods"),
    ("stages", "publish"),
    ("report",),
    ("reproduce", "gpu_check"),
]  # fmt: skip


def _floor(module: str) -> int:
    top = module.split(".")[1] if module.count(".") else ""
    for i, names in enumerate(FLOORS):
        if top in names:
            return i
    raise AssertionError(f"{module}: not on any floor; add it to FLOORS")


def test_no_module_imports_from_a_floor_above_it():
    g = {m: d for m, d in _graph().items() if m != "mrp_repro"}
    bad = {m: sorted(d for d in deps if d != "mrp_repro" and _floor(d) > _floor(m)) for m, deps in g.items()}
    assert not any(bad.values()), {m: d for m, d in bad.items() if d}
