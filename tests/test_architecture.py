"""The shape rules of docs/architecture.md, checked on the code itself.

- no import circle between modules;
- folders import only the folders below them (`ALLOWED`: the flow of a campaign, cli →
  plan / run / report → verdict → results / servers → campaignfile / sim → the ground floor;
  run also reads the simulator's knob list: the simulator is a server backend of a run);
- nothing imports the CLI, only the CLI imports the report package (a renderer);
- at most `MAX_GROUND` modules directly under `campaign/`;
- no module over `MAX_LINES` lines, no function over `MAX_FUNCTION_LINES` outside
  `LONG_FUNCTIONS` (each entry says why);
- docs/architecture.md names every folder and every ground-floor module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "campaign"
MAX_LINES = 600
MAX_FUNCTION_LINES = 80
MAX_GROUND = 10

GROUND = "ground"
ALLOWED: dict[str, set[str]] = {
    "cli": {"plan", "run", "report", "watch", "verdict", "results", "servers", "campaignfile",
            "sim", "templates", GROUND},
    "plan": {"verdict", "results", "campaignfile", GROUND},
    "run": {"verdict", "results", "servers", "campaignfile", "sim", GROUND},
    "report": {"verdict", "results", "campaignfile", GROUND},
    "watch": {"verdict", "results", "campaignfile", GROUND},
    "verdict": {"results", "campaignfile", GROUND},
    "results": {"campaignfile", GROUND},
    "servers": {"campaignfile", GROUND},
    "templates": {GROUND},
    "campaignfile": {GROUND},
    "sim": {GROUND},
    GROUND: {GROUND},
}
"""Folder → the folders it may import (besides itself): each arrow points down the flow."""

LONG_FUNCTIONS: dict[str, str] = {}
"""`module:function` → why it may exceed MAX_FUNCTION_LINES (keep this short)."""


def _module(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _unit(module: str) -> str:
    """The folder a module lives in (`campaign.verdict.rule` → verdict), or the ground floor
    for the modules directly under `campaign/` (and the package's face)."""
    parts = module.split(".")
    if module == "campaign.__main__":
        return "cli"  # `python -m campaign` is the CLI's entry
    if len(parts) >= 2 and (PKG / parts[1]).is_dir():
        return parts[1]
    return GROUND


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


def test_every_folder_imports_only_the_folders_below_it() -> None:
    folders = {p.name for p in PKG.iterdir() if (p / "__init__.py").exists()}
    assert folders <= set(ALLOWED), (
        f"folders missing from ALLOWED (give them a place in the flow): {folders - set(ALLOWED)}")
    upward = []
    for name, deps in _imports().items():
        here = _unit(name)
        for dep in deps:
            there = _unit(dep)
            if dep != "campaign" and there != here and there not in ALLOWED[here]:
                upward.append(f"{name} → {dep} ({here} may not import {there})")
    assert not upward, "imports against the flow:\n" + "\n".join(sorted(upward))


def test_the_table_itself_points_down() -> None:
    """ALLOWED has no circle between folders: the flow is a hierarchy."""
    order: list[str] = []
    seen: set[str] = set()

    def visit(unit: str, path: tuple[str, ...]) -> None:
        if unit in path:
            pytest.fail("folders import each other: " + " → ".join((*path, unit)))
        if unit in seen:
            return
        for below in ALLOWED[unit] - {unit}:
            visit(below, (*path, unit))
        seen.add(unit)
        order.append(unit)

    for unit in ALLOWED:
        visit(unit, ())


def test_nothing_imports_the_cli_and_only_the_cli_imports_the_report() -> None:
    for name, deps in _imports().items():
        if name.startswith(("campaign.report", "campaign.cli")) or name == "campaign.__main__":
            continue
        assert not any(d.startswith("campaign.cli") for d in deps), f"{name} imports the CLI"
        assert not any(d.startswith("campaign.report") for d in deps), (
            f"{name} imports the report package (a renderer)")


def test_few_modules_sit_on_the_ground_floor() -> None:
    ground = sorted(p.name for p in PKG.glob("*.py"))
    assert len(ground) <= MAX_GROUND, (
        f"{len(ground)} modules directly under campaign/ (at most {MAX_GROUND}): {ground}; "
        "give each a folder along the flow")


def test_no_module_is_over_600_lines() -> None:
    long = {str(p.relative_to(PKG.parent)): n for p in PKG.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def _long_functions() -> dict[str, int]:
    """`module:function` → lines, of every function over MAX_FUNCTION_LINES."""
    long = {}
    for path in PKG.rglob("*.py"):
        module = _module(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{module}:{node.name}"] = lines
    return long


def test_no_function_is_longer_than_a_reader_can_hold() -> None:
    long = [f"{key} ({n} lines)" for key, n in _long_functions().items()
            if key not in LONG_FUNCTIONS]
    assert not long, (f"functions over {MAX_FUNCTION_LINES} lines (split them, or add them "
                      "to LONG_FUNCTIONS with the reason): " + ", ".join(sorted(long)))


def test_the_allow_list_is_not_stale() -> None:
    stale = set(LONG_FUNCTIONS) - set(_long_functions())
    assert not stale, f"LONG_FUNCTIONS names functions that are short now: {sorted(stale)}"


def test_the_architecture_page_names_every_folder_and_ground_module() -> None:
    doc = (PKG.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = [p.name for p in PKG.glob("*.py")
               if p.stem not in ("__init__", "__main__") and f"`{p.name}`" not in doc]
    missing += [f"{p.name}/" for p in PKG.iterdir()
                if p.is_dir() and (p / "__init__.py").exists() and f"`{p.name}/`" not in doc]
    assert not missing, f"docs/architecture.md does not name: {missing}"


RUN = PKG / "run"
MAX_RUN_ENTRIES = 10
MAX_RUN_EDGES = 20


def _entries(folder: Path) -> list[str]:
    """A folder's entries: its modules (the face included) and its sub-folders."""
    return sorted(p.stem for p in folder.iterdir()
                  if (p.suffix == ".py") or (p / "__init__.py").exists())


def _entry_edges(folder: Path) -> set[tuple[str, str]]:
    """(entry, entry) for every import between two entries of `folder`."""
    prefix = _module(folder / "__init__.py") + "."
    edges = set()
    for name, deps in _imports().items():
        if not name.startswith(prefix):
            continue
        here = name[len(prefix):].split(".")[0]
        for dep in deps:
            if dep.startswith(prefix) and (there := dep[len(prefix):].split(".")[0]) != here:
                edges.add((here, there))
    return edges


def test_run_is_a_few_rooms_with_few_arrows_between_them() -> None:
    entries = _entries(RUN)
    assert len(entries) <= MAX_RUN_ENTRIES, (
        f"run/ holds {len(entries)} entries (at most {MAX_RUN_ENTRIES}): {entries}; "
        "put a new module in the room of what it does to one slot")
    edges = _entry_edges(RUN)
    assert len(edges) <= MAX_RUN_EDGES, (
        f"{len(edges)} import edges between run/'s entries (at most {MAX_RUN_EDGES}): "
        f"{sorted(edges)}")


@pytest.mark.parametrize("folder", sorted(
    p.parent.relative_to(PKG).as_posix() for p in PKG.rglob("__init__.py")))
def test_the_rooms_of_a_folder_point_one_way(folder: str) -> None:
    """No two entries of one folder import each other, directly or around a circle:
    inside a folder too, every arrow points down."""
    edges = _entry_edges(PKG / folder)
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    state: dict[str, int] = {}

    def visit(node: str, path: tuple[str, ...]) -> None:
        if node in path:
            pytest.fail(f"entries of {folder}/ import each other: " + " → ".join(
                (*path[path.index(node):], node)))
        if state.get(node):
            return
        for dep in sorted(graph.get(node, ())):
            visit(dep, (*path, node))
        state[node] = 1

    for node in sorted(graph):
        visit(node, ())


def test_every_package_face_names_each_of_its_modules() -> None:
    """Each package's `__init__` docstring names every module and sub-folder it holds
    (as `name`): a reader opening the folder learns what each entry is."""
    missing = []
    for init in sorted(PKG.rglob("__init__.py")):
        face = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        for name in _entries(init.parent):
            if name not in ("__init__", "__main__") and f"`{name}`" not in face \
                    and f"`{name}/`" not in face:
                missing.append(f"{init.parent.relative_to(PKG.parent)}: {name}")
    assert not missing, "package faces that do not name a module of theirs:\n" + "\n".join(
        missing)


SAME_NAME_OK = {"__init__", "__main__"}


def test_a_module_name_repeats_only_for_one_concept_seen_from_two_stages() -> None:
    """Two modules of one name in two folders are one concept at two stages (the
    sequential design registered, run, judged, planned and reported); each then names the
    others in its docstring. Anything else gets its own name."""
    by_name: dict[str, list[Path]] = {}
    for path in PKG.rglob("*.py"):
        if path.stem not in SAME_NAME_OK:
            by_name.setdefault(path.stem, []).append(path)
    unexplained = []
    for paths in by_name.values():
        if len(paths) < 2:
            continue
        for path in paths:
            doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
            for other in paths:
                if other != path and _module(other) not in doc:
                    unexplained.append(f"{_module(path)} does not name {_module(other)}")
    assert not unexplained, "module names that repeat across folders:\n" + "\n".join(
        unexplained)
