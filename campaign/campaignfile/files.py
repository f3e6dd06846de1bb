"""The local files and folders a campaign names, and which of them are missing.

One list serves every reader: the loader checks the relative ones when it reads the
file (and what the existing ones hold: `content_problems`), the preflight checks them
all before a run, the manifest hashes the bind-mounted files. A campaign names four
kinds of local path: the tokenizer folder, the agentfix fixture files, bind-mount sources
of docker containers and the working folder of a process server. Named docker volumes
and sources on a remote docker host (`docker_host` set on the server or on an extra
container) are not local and are left out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from campaign.campaignfile import sessions, trace
from campaign.campaignfile.base import shown
from campaign.campaignfile.builtin import BUILTIN_PREFIX, builtin_names
from campaign.campaignfile.launch import DockerLaunch, LaunchModel, ProcessLaunch, parse_volume
from campaign.campaignfile.models import Campaign, DriftFrom

YamlPath = tuple[str | int, ...]
Kind = Literal["tokenizer", "fixture", "trace", "sessions", "mount", "cwd"]
MustBe = Literal["file", "dir", "any"]

_WHAT: dict[Kind, str] = {
    "tokenizer": "tokenizer folder",
    "fixture": "fixture file",
    "trace": "trace file",
    "sessions": "sessions file",
    "mount": "source",
    "cwd": "folder",
}


@dataclass(frozen=True)
class LocalFile:
    """A local path named by the campaign file, where it is written and what it must be."""

    yaml_path: YamlPath
    """Where the path is written, e.g. ("arms", "depth7", "volumes", 1)."""
    kind: Kind
    declared: str
    """The path as written in the file."""
    resolved: Path
    """Absolute; relative paths resolve against the campaign's folder."""
    arm: str | None
    """The arm whose launch uses it; None for the workloads' files (every arm)."""
    must_be: MustBe


_PLAIN_KEY = re.compile(r"[\w-][\w.-]*")


def format_yaml_path(path: YamlPath) -> str:
    """("arms", "x", "volumes", 1) → `arms.x.volumes[1]`; a key that is not a plain word
    is quoted: `log_captures["../x"]`, an invisible character in it escaped
    (`preregistration["margin\\u200b"]`)."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.fullmatch(str(part)):
            out += ("." if out else "") + str(part)
        else:
            out += f"[{shown(json.dumps(str(part), ensure_ascii=False))}]"
    return out or "(top level)"


def local_files(
    campaign: Campaign, launches: Mapping[str, LaunchModel] | None = None
) -> list[LocalFile]:
    """Every local path the campaign names: workloads first, then each arm's launch.

    `launches` defaults to the campaign's merged launches (the loader passes the ones
    merged so far). A server volume appears once per arm that mounts it, at the same
    YAML path.
    """
    launches = campaign.launches if launches is None else launches
    wl = campaign.workloads
    out = [LocalFile(("workloads", "tokenizer"), "tokenizer", str(wl.tokenizer),
                     campaign.resolve(wl.tokenizer), None, "dir")]
    if wl.agentfix:
        for cls, file in wl.agentfix.fixtures.items():
            out.append(LocalFile(("workloads", "agentfix", "fixtures", cls), "fixture",
                                 str(file), campaign.resolve(file), None, "file"))
    if wl.rate and wl.rate.prompts is not None:
        out.append(LocalFile(("workloads", "rate", "prompts"), "fixture",
                             str(wl.rate.prompts), campaign.resolve(wl.rate.prompts), None,
                             "file"))
    if wl.trace:
        for name, file in wl.trace.files.items():
            out.append(LocalFile(("workloads", "trace", "files", name), "trace", str(file),
                                 campaign.resolve(file), None, "file"))
    if wl.sessions:
        for cls, file in wl.sessions.fixtures.items():
            out.append(LocalFile(("workloads", "sessions", "fixtures", cls), "sessions",
                                 str(file), campaign.resolve(file), None, "file"))
    for arm, launch in launches.items():
        if isinstance(launch, ProcessLaunch) and launch.cwd is not None:
            where = "arms" if "cwd" in campaign.arms[arm].overrides else "server"
            path: YamlPath = ("arms", arm, "cwd") if where == "arms" else ("server", "cwd")
            out.append(LocalFile(path, "cwd", str(launch.cwd), campaign.resolve(launch.cwd),
                                 arm, "dir"))
        if isinstance(launch, DockerLaunch):
            out.extend(_mounts(campaign, arm, launch))
    return out


def _mounts(campaign: Campaign, arm: str, launch: DockerLaunch) -> Iterator[LocalFile]:
    """Local bind-mount sources of an arm, each at the YAML path it was written at
    (the server's lists come first in a merged launch, the arm's own entries after)."""
    server = campaign.server
    n_volumes = len(server.volumes) if isinstance(server, DockerLaunch) else 0
    n_extras = len(server.extra_containers) if isinstance(server, DockerLaunch) else 0

    def own(key: str, i: int, n_base: int) -> YamlPath:
        return ("server", key, i) if i < n_base else ("arms", arm, key, i - n_base)

    entries: list[tuple[YamlPath, str, str | None]] = [
        (own("volumes", i, n_volumes), spec, launch.docker_host)
        for i, spec in enumerate(launch.volumes)
    ]
    for j, extra in enumerate(launch.extra_containers):
        base = own("extra_containers", j, n_extras)
        entries.extend(((*base, "volumes", i), spec, extra.docker_host)
                       for i, spec in enumerate(extra.volumes))
    for path, spec, host in entries:
        vol = parse_volume(spec)
        if vol.is_named or host is not None:
            continue
        yield LocalFile(path, "mount", vol.source, campaign.resolve(vol.source), arm, "any")


def _is(path: Path, must_be: MustBe) -> bool:
    if must_be == "file":
        return path.is_file()
    if must_be == "dir":
        return path.is_dir()
    return path.exists()


def problem(f: LocalFile) -> str | None:
    """What is wrong with one local path (naming it as written), or None."""
    if not _is(f.resolved, f.must_be):
        if f.declared.startswith(BUILTIN_PREFIX):
            return (f"{_WHAT[f.kind]} {f.declared} is not shipped with spec-ab "
                    f"(shipped: {', '.join(builtin_names())})")
        return f"{_WHAT[f.kind]} {f.declared} does not exist"
    if f.kind == "tokenizer" and not (f.resolved / "tokenizer.json").exists() and not (
        f.resolved / "tokenizer_config.json"
    ).exists():
        return f"{f.declared} has no tokenizer.json"
    return None


def file_problems(
    campaign: Campaign,
    launches: Mapping[str, LaunchModel] | None = None,
    *,
    relative_only: bool = False,
) -> list[tuple[LocalFile, str]]:
    """Each missing or wrong-kind local path with what is wrong, once per YAML path."""
    out: list[tuple[LocalFile, str]] = []
    seen: set[YamlPath] = set()
    for f in local_files(campaign, launches):
        if f.yaml_path in seen or (relative_only and Path(f.declared).is_absolute()):
            continue
        msg = problem(f)
        if msg is not None:
            seen.add(f.yaml_path)
            out.append((f, msg))
    return out


def missing_files(
    campaign: Campaign,
    launches: Mapping[str, LaunchModel] | None = None,
    *,
    relative_only: bool = False,
) -> list[tuple[YamlPath, str]]:
    """(YAML path, what is wrong) for each missing or wrong-kind local path.

    `relative_only` checks only paths written relative to the campaign file (what the
    loader checks; absolute paths belong to the machine and are left to the preflight).
    """
    return [(f.yaml_path, msg)
            for f, msg in file_problems(campaign, launches, relative_only=relative_only)]


FIXTURE_CHECK_BYTES = 64 << 20
"""A fixture is read this far for its check (AIPerf reads it all; a bigger file is rare)."""


def fixture_problem(path: Path) -> str | None:
    """What makes an existing file unusable as an AIPerf `single_turn` fixture, or None:
    it must be UTF-8 JSONL, one object per line with a `text` string (or `texts`)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(FIXTURE_CHECK_BYTES)
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(raw) - 4:  # not just a character cut at the read limit
            return f"is not UTF-8 text (byte {exc.start})"
        text = raw[:exc.start].decode("utf-8")
    lines = text.splitlines()
    if len(raw) == FIXTURE_CHECK_BYTES and lines:
        lines = lines[:-1]  # the last one may be cut at the read limit
    how = 'AIPerf single_turn JSONL: one {"text": "..."} object per line'
    seen = 0
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        seen += 1
        try:
            doc = json.loads(line)
        except json.JSONDecodeError:
            return f"line {n} is not JSON ({how})"
        if not isinstance(doc, dict):
            return f"line {n} is not a JSON object ({how})"
        texts = doc.get("texts")
        if not isinstance(doc.get("text"), str) and not (
                isinstance(texts, list) and texts and all(isinstance(t, str) for t in texts)):
            return f"line {n} has no text field ({how})"
    if not seen:
        return f"is empty ({how})"
    return None


def content_problems(campaign: Campaign, launches: Mapping[str, LaunchModel] | None = None
                     ) -> list[tuple[YamlPath, str]]:
    """(YAML path, what is wrong) for files that exist but cannot serve: fixtures that are
    not AIPerf JSONL, traces that cannot be replayed (`trace.file_problem`), an A/A run
    folder that is not one, a results folder that is a file."""
    out: list[tuple[YamlPath, str]] = []
    for f in local_files(campaign, launches):
        if f.kind == "fixture" and f.resolved.is_file():
            msg = fixture_problem(f.resolved)
            if msg:
                out.append((f.yaml_path, f"fixture file {f.declared} {msg}"))
        if f.kind == "trace" and f.resolved.is_file():
            msg = trace.file_problem(f.resolved)
            if msg:
                out.append((f.yaml_path, f"trace file {msg}"))
        if f.kind == "sessions" and f.resolved.is_file():
            msg = sessions.file_problem(f.resolved)
            if msg:
                out.append((f.yaml_path, f"sessions file {msg}"))
    results = campaign.resolve(campaign.results_dir)
    if results.exists() and not results.is_dir():
        out.append((("results_dir",), f"{campaign.results_dir} is a file, not a folder"))
    band = campaign.preregistration.drift_band
    if isinstance(band, DriftFrom):
        msg = _drift_from_problem(campaign, band)
        if msg:
            out.append((("preregistration", "drift_band", "from"), msg))
    return out


def _drift_from_problem(campaign: Campaign, band: DriftFrom) -> str | None:
    """What makes `drift_band: {from: RUN}` not an A/A run's folder, or None. The band
    itself is measured by `aa.checked_drift_band` (check and run, before anything is
    registered): measuring needs the verdict, a layer above this one."""
    run = campaign.resolve(band.from_)
    if not run.exists():
        return f"results folder {band.from_} does not exist"
    if not run.is_dir():
        return f"{band.from_} is a file, not a results folder of an A/A run"
    if not (run / "preregistration.json").is_file():
        return f"{band.from_} is not a spec-ab results folder (no preregistration.json)"
    return None
