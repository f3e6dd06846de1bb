"""What `campaign/` imports is what pyproject.toml declares.

Two checks, each shown able to fail:

- deptry compares every import of `campaign/` with `[project].dependencies`: an import
  that arrives only through another package's pins (prometheus_client through AIPerf,
  requests through docker) is a finding, as is a declared package nothing imports.
- An environment holding only the declared dependencies and what they require (their
  packages linked into an empty folder, run with `python -I -S`, so nothing of this
  virtual environment's dev tools is on the path) imports every module of `campaign/`.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]


def _deptry(project: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("deptry", path=str(Path(sys.executable).parent)) or shutil.which("deptry")
    assert exe, "deptry is a dev dependency: scripts/setup installs it"
    return subprocess.run([exe, "--no-ansi", "campaign"], cwd=project, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"})


def test_every_import_of_campaign_is_a_declared_dependency() -> None:
    result = _deptry(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_an_import_that_only_arrives_through_another_pin_is_found(tmp_path: Path) -> None:
    """The same check on a copy whose pyproject.toml drops prometheus-client: the import in
    campaign/ that only AIPerf's pin brings is named."""
    text = (ROOT / "pyproject.toml").read_text()
    lines = [ln for ln in text.splitlines(keepends=True) if '"prometheus-client' not in ln]
    assert len(lines) < len(text.splitlines())
    (tmp_path / "pyproject.toml").write_text("".join(lines))
    (tmp_path / "campaign").symlink_to(ROOT / "campaign")
    result = _deptry(tmp_path)
    assert result.returncode == 1
    assert "DEP003 'prometheus_client' imported but it is a transitive dependency" in (
        result.stdout + result.stderr)


# --------------------------------------------------------------------------- a fresh env


def _declared() -> list[Requirement]:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in meta["dependencies"]]


def _closure(roots: list[Requirement]) -> set[str]:
    """The installed distributions the declared requirements need, transitively (markers
    evaluated for this Python; an extra only where it is asked for)."""
    seen: set[str] = set()
    todo = [(r, frozenset(r.extras)) for r in roots]
    while todo:
        req, extras = todo.pop()
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        seen.add(name)
        for raw in md.distribution(req.name).requires or []:
            sub = Requirement(raw)
            if sub.marker is not None and not any(
                    sub.marker.evaluate({"extra": e}) for e in (*extras, "")):
                continue
            todo.append((sub, frozenset(sub.extras)))
    return seen


def _fresh_site(dists: set[str], into: Path) -> Path:
    """A folder holding links to the top-level packages, modules and metadata
    (`*.dist-info`) of `dists` only."""
    site = into / "site"
    site.mkdir()
    for dist in md.distributions():
        if canonicalize_name(dist.metadata["Name"]) not in dists:
            continue
        base = Path(str(dist.locate_file("")))
        for f in dist.files or []:
            top = f.parts[0]
            if top in ("..", "__pycache__") or top.endswith(".data"):
                continue
            if not (site / top).exists() and (base / top).exists():
                (site / top).symlink_to(base / top)
    return site


IMPORT_ALL = """
import importlib, pkgutil, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import campaign
failed = []
for mod in pkgutil.walk_packages(campaign.__path__, "campaign."):
    if mod.name.endswith("__main__"):
        continue  # running it is not importing it
    try:
        importlib.import_module(mod.name)
    except Exception as exc:
        failed.append(f"{mod.name}: {type(exc).__name__}: {exc}")
print("\\n".join(failed))
sys.exit(1 if failed else 0)
"""


def _import_everything(site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-I", "-S", "-c", IMPORT_ALL, str(site), str(ROOT)],
                          capture_output=True, text=True, timeout=300, cwd=site)


@pytest.mark.xdist_group("fresh-env")
def test_only_the_declared_dependencies_import_every_module(tmp_path: Path) -> None:
    dists = _closure(_declared())
    assert not dists & {"deptry", "statsmodels", "xpyd-sim", "ruff", "mypy"}  # dev tools
    result = _import_everything(_fresh_site(dists, tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.xdist_group("fresh-env")
def test_a_module_whose_dependency_is_not_declared_fails_to_import(tmp_path: Path) -> None:
    """The same environment without ruamel.yaml: the modules reading YAML are named."""
    dists = _closure([r for r in _declared() if canonicalize_name(r.name) != "ruamel-yaml"])
    dists.discard("ruamel-yaml")
    result = _import_everything(_fresh_site(dists, tmp_path))
    assert result.returncode == 1
    assert "campaign.campaignfile: ModuleNotFoundError: No module named 'ruamel'" in (
        result.stdout.splitlines())
