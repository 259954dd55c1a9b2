"""The shape of the code, read with ``ast`` (nothing is imported): no module of the loader
or the experiments over 500 lines, no import circle among them (imports inside functions
count: they run), and imports that point one way: the load path (``jit_tools/*.py``,
``builder/``, ``swap/``) never imports a tool (``jit_tools/tools/``) or the public module,
and the public module ``jit_loader`` imports a tool only inside the function that offers
it (a tool is paid for when it is used)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 500
TOOLS = "jit_tools.tools"


def module_files() -> dict[str, Path]:
    files = [ROOT / "jit_loader.py", *sorted((ROOT / "jit_tools").rglob("*.py")),
             *sorted((ROOT / "experiments").rglob("*.py"))]
    out = {}
    for path in files:
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = module_files()


def _resolve(name: str) -> str | None:
    """The module of ours that importing ``name`` runs (a name inside a module: the module)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports(module: str) -> list[tuple[str, bool]]:
    """(module of ours imported, at the top level) for every import statement of ``module``."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    top = {id(node) for node in tree.body}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([base] if base else [])])
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                     for alias in node.names]
        else:
            continue
        for name in names:
            target = _resolve(name)
            if target is not None and target != module:
                out.append((target, id(node) in top))
    return out


def graph() -> dict[str, set[str]]:
    return {m: {t for t, _ in imports(m)} for m in MODULES}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def load_path(module: str) -> bool:
    return module.startswith("jit_tools") and not module.startswith(TOOLS)


def test_no_module_is_over_500_lines():
    long = {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_no_import_circle():
    found = circles(graph())
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_load_path_imports_no_tool_and_the_public_module_only_lazily():
    upward = {f"{m} -> {t}" for m in MODULES if load_path(m)
              for t, _top in imports(m) if t.startswith(TOOLS) or t == "jit_loader"}
    upward |= {f"jit_loader -> {t} at import" for t, top in imports("jit_loader")
               if top and t.startswith(TOOLS)}
    assert not upward, f"upward imports: {sorted(upward)}"


@pytest.mark.parametrize("edges, expected", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": set(), "c": {"b"}}, []),
])
def test_circles_are_found(edges, expected):
    assert circles(edges) == expected


def test_lazy_and_relative_imports_are_edges(tmp_path, monkeypatch):
    """An import inside a function is an edge, and ``from . import x`` names the module."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from pkg import b\n")
    (pkg / "b.py").write_text("from . import a\n")
    files = {"pkg": pkg / "__init__.py", "pkg.a": pkg / "a.py", "pkg.b": pkg / "b.py"}
    monkeypatch.setitem(globals(), "MODULES", files)
    assert imports("pkg.a") == [("pkg.b", False)]
    assert imports("pkg.b") == [("pkg.a", True)]
    assert circles(graph()) == [["pkg.a", "pkg.b"]]
