"""The shape rules of docs/architecture.md, checked on the code itself: no import circle,
nothing imports the CLI, only the CLI imports the report package, no module over 600
lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "campaign"
MAX_LINES = 600


def _module(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports() -> dict[str, set[str]]:
    """module → the campaign modules it imports (module level and inside functions)."""
    modules = {_module(p): p for p in PKG.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                base = node.module
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    deps.add(full if full in modules else base)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
        graph[name] = {d for d in deps if d in modules and d != name}
    return graph


def test_no_import_circle() -> None:
    graph = _imports()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if dep == "campaign" or node.startswith(dep + "."):
                continue  # a package's face and its own children
            if state.get(dep) == 1:
                cycle = [*stack[stack.index(dep):], dep]
                pytest.fail("import circle: " + " → ".join(cycle))
            if state.get(dep) is None:
                visit(dep)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_nothing_imports_the_cli_and_only_the_cli_imports_the_report() -> None:
    for name, deps in _imports().items():
        if name.startswith("campaign.report") or name in ("campaign.cli", "campaign.__main__"):
            continue
        assert "campaign.cli" not in deps, f"{name} imports the CLI"
        assert not any(d.startswith("campaign.report") for d in deps), (
            f"{name} imports the report package (a renderer)")


def test_no_module_is_over_600_lines() -> None:
    long = {str(p.relative_to(PKG.parent)): n for p in PKG.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_the_architecture_page_names_every_module() -> None:
    doc = (PKG.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = [p.name for p in PKG.glob("*.py")
               if p.stem not in ("__init__", "__main__") and f"`{p.name}`" not in doc]
    missing += [f"{p.name}/" for p in PKG.iterdir()
                if p.is_dir() and (p / "__init__.py").exists() and f"`{p.name}/`" not in doc]
    assert not missing, f"docs/architecture.md does not name: {missing}"
