"""The package's import graph, built from the source with `ast` (module-level imports and
those inside functions alike): no cycle, and each layer imports only those below it."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pipeline"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """module -> the pipeline modules it imports (a `from pkg import name` of a submodule
    counts as importing that submodule); not those under `if TYPE_CHECKING:`, which never
    run."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    compiled = {module_name(p) for p in PACKAGE.rglob("*.pyx")}  # imported, never importing
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        tree = ast.parse(path.read_text(), str(path))
        for_checkers = {id(inner) for node in ast.walk(tree) if isinstance(node, ast.If)
                        and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
                        for inner in ast.walk(node)}
        for node in ast.walk(tree):
            if id(node) in for_checkers:
                continue
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name in modules)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]
                                    + ([base] if base else []))
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    found.add(sub if sub in modules or sub in compiled else base)
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_package_has_no_import_cycle() -> None:
    assert cycles(import_graph()) == []


def test_the_graph_sees_lazy_imports_and_finds_a_cycle() -> None:
    """The check can fail: an import inside a function counts, and two modules importing
    each other are one cycle."""
    graph = import_graph()
    assert "pipeline.engines.polars_engine" in graph["pipeline.engines"]  # lazy, in load_engine
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}) == [
        ["a", "b", "c"]]


def test_every_role_package_name_in_all_resolves() -> None:
    """pipeline.io's role packages name their entry points in `__all__`, loaded lazily:
    each must be found in the module it is said to be in."""
    import importlib

    for role in ("inputs", "outputs", "read", "store"):
        package = importlib.import_module(f"pipeline.io.{role}")
        assert package.__all__, role
        for name in package.__all__:
            assert getattr(package, name) is not None, (role, name)


def test_the_packages_lazy_names_are_imported_for_type_checkers() -> None:
    """`from pipeline import evaluate_batch, BatchResult, SnimError` (the documented import)
    resolves at run time through `__getattr__`, which a type checker sees as Any: every lazy
    name is also imported under `if TYPE_CHECKING:`, from the module that defines it, as an
    explicit re-export (`X as X`), so that mypy checks the calls (before: none was)."""
    import pipeline

    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    typed = {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.If) and isinstance(node.test, ast.Name)
                and node.test.id == "TYPE_CHECKING"):
            for imported in node.body:
                assert isinstance(imported, ast.ImportFrom), ast.dump(imported)
                for alias in imported.names:
                    assert alias.asname == alias.name, alias.name  # an explicit re-export
                    typed[alias.name] = imported.module
    assert typed == {name: f"pipeline.{module}" for name, module in pipeline._EXPORTS.items()}
