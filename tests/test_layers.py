"""cuflow's imports point one way: no cycle, no upward import, no import inside a function.

The layer order is written in docs/design.md; a module may import modules of
its own layer or below.  Imports inside functions are allowed only for
optional dependencies (CuPy, PyTorch, the compiled extensions ...), which an
``import cuflow`` on a CPU-only machine must not need.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "cuflow"

# lowest first; the first matching prefix gives a module's layer
LAYERS = [
    ("cuflow._errors", "cuflow._env", "cuflow._checks"),
    ("cuflow.raw_kernels",),
    ("cuflow.core._fastpath", "cuflow.core._darray", "cuflow.core._cupy_ufuncs",
     "cuflow.core._expr", "cuflow.core._ewgen", "cuflow.core._engine", "cuflow.core._docs"),
    ("cuflow.core._runtime",),
    ("cuflow.core._contract", "cuflow.core._streams"),
    ("cuflow.core._dispatch", "cuflow.core._info"),
    ("cuflow.core",),
    ("cuflow.memory", "cuflow.testing"),
    ("cuflow.graph", "cuflow.image", "cuflow.kernels", "cuflow.fusion"),
    ("cuflow.pipeline",),
    ("cuflow._instrument", "cuflow.debug", "cuflow._forward", "cuflow._info", "cuflow.dask"),
    ("cuflow.bench", "cuflow.__main__", "cuflow"),
]
OPTIONAL = ("cupy", "cupyx", "cupy_backends", "torch", "torchvision", "nvtx", "matplotlib",
            "cuda", "numba", "pytest", "IPython", "nbformat", "nbclient",
            "cuflow.core._ewlaunch", "cuflow.memory._hotpath")


def _modules():
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        parts = list(rel.parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        yield ".".join(parts), is_pkg, path


def _layer(mod: str) -> int:
    """The layer of the longest prefix in LAYERS that names ``mod`` or a package holding it."""
    hits = [(len(p), i) for i, prefixes in enumerate(LAYERS) for p in prefixes
            if mod == p or mod.startswith(p + ".")]
    assert hits, f"{mod} has no layer in LAYERS: add it (and to docs/design.md)"
    return max(hits)[1]


def test_layers_are_read_by_the_longest_prefix():
    assert _layer("cuflow._errors") == 0
    assert _layer("cuflow.core._runtime") == 3
    assert _layer("cuflow.core._statistical") == 6
    assert _layer("cuflow.memory._pool") == 7
    assert _layer("cuflow") == len(LAYERS) - 1


def _resolve(mod: str, is_pkg: bool, node: ast.ImportFrom, known: set[str]) -> list[str]:
    if node.level == 0:
        base = node.module or ""
    else:
        pkg = mod.split(".") if is_pkg else mod.split(".")[:-1]
        pkg = pkg[: len(pkg) - node.level + 1]
        base = ".".join(pkg + ([node.module] if node.module else []))
    # "from pkg import name" imports the submodule pkg.name where there is one, else pkg
    subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
    return subs if len(subs) == len(node.names) else [base, *subs]


def _imports():
    known = {m for m, _, _ in _modules()}
    edges, inner = [], []
    for mod, is_pkg, path in _modules():
        tree = ast.parse(path.read_text())
        top = set(id(n) for n in tree.body)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                targets = _resolve(mod, is_pkg, node, known)
            else:
                continue
            targets = [t for t in targets if t.startswith("cuflow")] or targets
            if id(node) not in top and not node.col_offset == 0:
                if not any(t == o or t.startswith(o + ".") for t in targets for o in OPTIONAL):
                    inner.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} imports "
                                 f"{targets[0]} inside a function")
            for t in targets:
                if t in known and t != mod:
                    edges.append((mod, t, node.lineno))
    return edges, inner


def test_no_import_inside_a_function_except_optional_dependencies():
    _, inner = _imports()
    assert inner == []


def test_no_upward_import():
    edges, _ = _imports()
    up = [f"{a} (layer {_layer(a)}) imports {b} (layer {_layer(b)}) at line {n}"
          for a, b, n in edges if _layer(b) > _layer(a)]
    assert up == []


def test_no_import_cycle():
    edges, _ = _imports()
    graph: dict[str, set[str]] = {}
    for a, b, _ in edges:
        graph.setdefault(a, set()).add(b)
    state: dict[str, int] = {}
    cycles = []

    def visit(m, stack):
        state[m] = 1
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                cycles.append(" -> ".join(stack[stack.index(n):] + [n]))
            elif n not in state:
                visit(n, stack + [n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert cycles == []


@pytest.mark.parametrize("mod", [m for m, _, _ in _modules()])
def test_every_module_has_a_layer(mod):
    _layer(mod)


def test_dst_errors_are_raised_by_the_output_contract_alone():
    """Every Dst*Error comes from core/_contract.py (the C fast path raises none: it hands
    every case it does not take back to the contract)."""
    found = []
    for mod, _, path in _modules():
        if mod in ("cuflow.core._contract", "cuflow._errors"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "").startswith("Dst"):
                found.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}")
    assert found == []
