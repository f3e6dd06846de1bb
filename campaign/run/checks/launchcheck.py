"""What would fail at boot, found before the night without booting anything:

- a `SPECAB_SIM_*` variable the simulator does not know (its list:
  `campaign.sim.config.KNOWN_VARIABLES`) in any launch (server, arm, lane): a problem;
- a vLLM launch's flags that vLLM's own parser refuses (`vllmargs`, from the engine's
  dump: `vllmengine`): a problem, in the parser's words;
- a `VLLM_*` variable this vLLM does not read: a warning naming the closest one (a
  patched file may read a name of its own).

Problems are campaign-file problems (exit 2), one line each with the YAML path and line;
`spec-ab check` and `spec-ab run` refuse them before anything is registered.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from campaign.campaignfile import Campaign, ExternalLaunch, format_yaml_path
from campaign.campaignfile.yamlread import line_of, read_yaml
from campaign.errors import SpecError
from campaign.run.checks.vllmargs import check_argv, unknown_env
from campaign.run.checks.vllmengine import EngineError, Engines, Target
from campaign.sim.config import ENV_PREFIX as SIM_PREFIX
from campaign.sim.config import KNOWN_VARIABLES, knob_value_problem

Path_ = tuple[str | int, ...]


@dataclass
class Findings:
    """What the launch checks found: problems (exit 2), warnings, and facts to show."""

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)

    def add(self, kind: str, line: str) -> None:
        items: list[str] = getattr(self, kind)
        if line not in items:
            items.append(line)


class _Places:
    """Where a launch's value was written (arm, lane or server) and on which line."""

    def __init__(self, campaign: Campaign) -> None:
        self.campaign = campaign
        self.tree: Any = None
        if campaign.source is not None:
            try:
                self.tree = read_yaml(campaign.source)
            except SpecError:
                self.tree = None

    def line(self, path: Path_, message: str) -> str:
        ln = line_of(self.tree, path) if self.tree is not None else None
        return f"{format_yaml_path(path)}: {message}" + (f" (line {ln})" if ln else "")

    def _layers(self, arm: str) -> list[tuple[Path_, dict[str, Any]]]:
        """The sources of an arm's launch, the most specific first."""
        c = self.campaign
        layers: list[tuple[Path_, dict[str, Any]]] = [(("arms", arm), c.arms[arm].overrides)]
        if c.sharded and c.lane in c.lanes:
            layers.append((("lanes", c.lane, "server"), c.lanes[c.lane].server))
        server = c.server.model_dump(mode="json", exclude_defaults=True)
        layers.append((("server",), server))
        return layers

    def env(self, arm: str, name: str) -> Path_:
        for where, layer in self._layers(arm):
            if name in (layer.get("env") or {}):
                return (*where, "env", name)
        return ("server", "env", name)

    def word(self, arm: str, word: str | None) -> Path_:
        """The first place, most specific first, whose command or args hold `word`."""
        for where, layer in self._layers(arm):
            for key in ("args", "command", "entrypoint"):
                values = layer.get(key) or []
                if word is not None and word in values:
                    return (*where, key, values.index(word))
        return ("arms", arm) if arm != "control" else ("server",)


def knob_problems(campaign: Campaign) -> list[str]:
    """Unknown `SPECAB_SIM_*` names and values the simulator refuses
    (`sim.config.knob_value_problem`) in every launch, on every lane, each once."""
    out: list[str] = []
    views = ([campaign] if campaign.lane_chosen
             else [campaign.for_lane(name) for name in campaign.lane_names])
    for view in views:
        places = _Places(view)
        for arm, launch in view.launches.items():
            for name, raw in launch.env.items():
                if not name.startswith(SIM_PREFIX):
                    continue
                if _known_knob(name):
                    bad = "" if "${" in raw else knob_value_problem(name, raw)
                    line = places.line(places.env(arm, name), (
                        f"{name}={raw!r}: {bad}; `spec-ab sim serve` would exit at boot "
                        "(knobs and their values: docs/simulator.md)")) if bad else ""
                    if line and line not in out:
                        out.append(line)
                    continue
                close = difflib.get_close_matches(name, KNOWN_VARIABLES, n=1, cutoff=0.6)
                hint = f" (did you mean {close[0]}?)" if close else ""
                what = ("not a knob of the simulated lane" + hint + "; `spec-ab sim serve` "
                        "would exit at boot (knobs: docs/simulator.md)")
                if isinstance(launch, ExternalLaunch):
                    what += ", given to the start hook"
                line = places.line(places.env(arm, name), what)
                if line not in out:
                    out.append(line)
    return out


def _known_knob(name: str) -> bool:
    """As the simulator reads it: the part after the prefix in any case."""
    return SIM_PREFIX + name[len(SIM_PREFIX):].upper() in KNOWN_VARIABLES


def engine_findings(campaign: Campaign, engines: Engines) -> Findings:
    """vLLM's own parser on every vLLM launch of this lane (`campaign` with a lane chosen)."""
    found = Findings()
    places = _Places(campaign)
    refused: dict[str, list[str]] = {}
    checked: dict[tuple[str, str, Path], list[str]] = {}
    unread: dict[str, list[str]] = {}
    for arm, launch in campaign.launches.items():
        try:
            target = engines.target(launch, campaign.base_dir)
            if target is None:
                continue
            dump, cache, _ = engines.dump(target)
        except EngineError as exc:
            unread.setdefault(str(exc), []).append(arm)
            continue
        _check_target(found, refused, places, arm, target, dump, launch.env)
        engine = (str(dump.get("vllm_version")), target.engine, cache)
        checked.setdefault(engine, []).append(arm)
    for reason, arms in unread.items():
        found.add("warnings", f"{_arms(arms)}: vLLM's flags not checked: {reason}")
    for (version, where, cache), arms in checked.items():
        found.add("facts", f"vLLM {version} of {where}: flags of {', '.join(arms)} checked by "
                  f"its own parser (its dump: {cache})")
    for line, arms in refused.items():
        every = len(arms) == len(campaign.launches) or line.startswith("arms.")
        found.add("problems", line if every else f"{line} [{_arms(arms)}]")
    return found


def _arms(arms: list[str]) -> str:
    return f"arm{'s' if len(arms) > 1 else ''} {', '.join(arms)}"


def _check_target(found: Findings, refused: dict[str, list[str]], places: _Places, arm: str,
                  target: Target, dump: dict[str, Any], env: dict[str, str]) -> None:
    version = dump.get("vllm_version", "?")
    result = check_argv(dump, target.flags, target.entry)
    if result.refused is not None:
        line = places.line(places.word(arm, result.word),
                           f"vLLM {version} refuses the flags: {result.refused}")
        refused.setdefault(line, []).append(arm)
    for note in result.notes:
        found.add("warnings", places.line(places.word(arm, result.word), note))
    for name, close in unknown_env(dump, env).items():
        hint = f" (closest: {close})" if close else ""
        found.add("warnings", places.line(
            places.env(arm, name), f"vLLM {version} does not read {name}{hint}; fine only "
            "if a patched file reads it"))


def check_launches(campaign: Campaign, engines: Engines | None) -> Findings:
    """Every launch check: the simulator's knobs on every lane; vLLM's flags when a lane
    is chosen (its engine is on this machine) and `engines` is given."""
    found = Findings(problems=knob_problems(campaign))
    if engines is not None and campaign.lane_chosen:
        more = engine_findings(campaign, engines)
        found.problems += more.problems
        found.warnings += more.warnings
        found.facts += more.facts
    return found


def refuse(found: Findings, shown_as: str) -> None:
    """Raise the findings' problems as one SpecError (exit 2), if any."""
    if found.problems:
        raise SpecError(shown_as, found.problems)
