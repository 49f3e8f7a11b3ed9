"""The packages import in layers, with no circles (docs/architecture.md draws them).

Every import statement counts, those inside functions too (they run when the function does);
only ``if TYPE_CHECKING:`` blocks, which never run, are left out. ``from package import name``
counts as an import of the module the package takes ``name`` from, so a package's
``__init__`` that re-exports its modules' names is not itself a node of every circle.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("dtensor", "simpg", "opdb_tests", "benchmarks")


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


MODULES = _modules()


def _runtime_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Import statements anywhere in the module but under ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _known(name: str) -> str | None:
    """The innermost module of ours that importing ``name`` names (None: not ours)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _base(module: str, node: ast.ImportFrom) -> str:
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    if not node.level:
        return node.module or ""
    parts = package.split(".")[:len(package.split(".")) - node.level + 1]
    return ".".join(parts + ([node.module] if node.module else []))


def _graph() -> dict[str, set[str]]:
    trees = {m: ast.parse(p.read_text(), str(p)) for m, p in MODULES.items()}
    # what each package __init__ re-exports: name -> the module it comes from
    exports: dict[str, dict[str, str]] = defaultdict(dict)
    for m, tree in trees.items():
        if MODULES[m].name == "__init__.py":
            for node in tree.body:
                if isinstance(node, ast.ImportFrom):
                    base = _base(m, node)
                    for alias in node.names:
                        source = _known(f"{base}.{alias.name}") or _known(base)
                        if source:
                            exports[m][alias.asname or alias.name] = source

    def target(base: str, name: str) -> str | None:
        if f"{base}.{name}" in MODULES:
            return f"{base}.{name}"
        return exports.get(base, {}).get(name, base)

    edges: dict[str, set[str]] = defaultdict(set)
    for m, tree in trees.items():
        for node in _runtime_imports(tree):
            if isinstance(node, ast.Import):
                names = [_known(a.name) for a in node.names]
            else:
                base = _known(_base(m, node))
                if base is None:
                    continue
                names = [target(base, a.name) if MODULES[base].name == "__init__.py" else base
                         for a in node.names]
            edges[m].update(n for n in names if n and n != m)
    return edges


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    nodes = sorted(set(edges) | {t for ts in edges.values() for t in ts})
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def _explain(edges: dict[str, set[str]], circles: list[list[str]]) -> str:
    lines = []
    for circle in circles:
        lines.append("circle: " + ", ".join(circle))
        lines += [f"  {a} -> {b}" for a in circle for b in sorted(edges[a]) if b in circle]
    return "\n".join(lines)


def _collapse(edges: dict[str, set[str]], group: dict[str, str]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for a, targets in edges.items():
        out[group[a]].update(group[b] for b in targets if group[b] != group[a])
    return out


EDGES = _graph()


def test_no_module_imports_itself_back():
    circles = _circles(EDGES)
    assert not circles, "import circles (all imports, function-level too):\n" + _explain(
        EDGES, circles)


def test_the_top_level_packages_form_no_circle():
    by_package = _collapse(EDGES, {m: m.split(".")[0] for m in MODULES})
    circles = _circles(by_package)
    assert not circles, _explain(by_package, circles)


def test_dtensor_subpackages_form_no_circle():
    # a subpackage (dtensor.dispatch, dtensor.parallel, ...) is one node; root modules are
    # their own nodes
    def group(m: str) -> str:
        parts = m.split(".")
        return ".".join(parts[:2]) if parts[0] == "dtensor" else parts[0]

    by_subpackage = _collapse(EDGES, {m: group(m) for m in MODULES})
    circles = _circles({k: v for k, v in by_subpackage.items() if k.startswith("dtensor")})
    assert not circles, _explain(by_subpackage, circles)


@pytest.mark.parametrize("lower, upper", [
    ("simpg", "dtensor"),  # simpg simulates process groups; it knows no DTensor
    ("dtensor", "simpg"), ("dtensor", "opdb_tests"), ("dtensor", "benchmarks"),
    ("simpg", "opdb_tests"), ("simpg", "benchmarks"), ("opdb_tests", "benchmarks"),
])
def test_a_lower_package_never_imports_a_higher_one(lower, upper):
    wrong = sorted(f"{a} -> {b}" for a, targets in EDGES.items() if a.split(".")[0] == lower
                   for b in targets if b.split(".")[0] == upper)
    assert not wrong, f"{lower} imports {upper}:\n" + "\n".join(wrong)


def test_the_walker_sees_a_circle():
    # the check itself can fail: a made-up pair of modules importing each other
    assert _circles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert _circles({"a": {"b"}, "b": set()}) == []
