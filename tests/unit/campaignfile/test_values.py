"""The rules every value of a campaign file follows, whatever its field: numbers are finite,
whole numbers are written as such (and counts bounded), hosts are hosts (an IPv6 address
bare, bracketed in URLs). The bad inputs themselves go through the CLI in
tests/unit/cli/test_bad_inputs.py; here: that no field escapes the rules, and that what
was valid stays valid."""

from __future__ import annotations

import re
import types
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import pytest
from pydantic import BaseModel, ValidationError

from campaign.campaignfile import (
    Campaign,
    DockerLaunch,
    ExternalLaunch,
    LaneSpec,
    ProcessLaunch,
    format_yaml_path,
    load_campaign,
)
from campaign.campaignfile.base import MAX_REQUESTS, MAX_SEED, WholeNumber
from campaign.errors import SpecError
from tests.runs import ROOT

SIM_PAIR = (ROOT / "examples" / "sim-pair.yaml").read_text()
PAIRS = re.search(r"^  pairs: (\d+)\n", SIM_PAIR, re.M).group(0)  # type: ignore[union-attr]
"""The demo's registered pairs, its line."""


def _load(tmp_path: Path, old: str = "", new: str = "") -> Campaign:
    assert SIM_PAIR.count(old) == 1 or not old, old
    path = tmp_path / "c.yaml"
    path.write_text(SIM_PAIR.replace(old, new) if old else SIM_PAIR)
    return load_campaign(path)


def _models() -> list[type[BaseModel]]:
    """Every model a campaign file is validated with."""
    seen: list[type[BaseModel]] = []

    def visit(tp: Any) -> None:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            if tp in seen:
                return
            seen.append(tp)
            for f in tp.model_fields.values():
                visit(f.annotation)
            return
        for arg in get_args(tp):
            visit(arg)

    for root in (Campaign, ProcessLaunch, ExternalLaunch, DockerLaunch, LaneSpec):
        visit(root)
    return seen


def _whole(meta: Any) -> bool:
    return any(isinstance(getattr(getattr(m, "func", None), "__self__", None), WholeNumber)
               for m in meta)


def _bare_ints(tp: Any) -> bool:
    """Whether `int` appears in a type outside an Annotated carrying `WholeNumber`."""
    origin = get_origin(tp)
    if origin is Annotated:
        base, *meta = get_args(tp)
        return not _whole(meta) if base is int else _bare_ints(base)
    if tp is int:
        return True
    if origin in (Union, types.UnionType, list, dict, tuple):
        return any(_bare_ints(a) for a in get_args(tp))
    return False


def test_the_walk_finds_the_models() -> None:
    names = {m.__name__ for m in _models()}
    assert {"Preregistration", "Gates", "Guardrail", "Readiness", "KneeWorkload",
            "FidelityWorkload", "Sequential", "ExtraContainer", "ReadyCheck"} <= names


@pytest.mark.parametrize("model", _models(), ids=lambda m: m.__name__)
def test_every_field_follows_the_value_rules(model: type[BaseModel]) -> None:
    assert model.model_config.get("allow_inf_nan") is False
    for name, f in model.model_fields.items():
        # a field's own Annotated lands in its metadata
        bare = not _whole(f.metadata) if f.annotation is int else _bare_ints(f.annotation)
        assert not bare, f"{model.__name__}.{name}: a bare int"
        for m in f.metadata:
            assert getattr(m, "allow_inf_nan", None) is not True, f"{model.__name__}.{name}"


def test_numbers_written_as_text_are_read_as_before(tmp_path: Path) -> None:
    pairs = PAIRS.split()[1]
    c = _load(tmp_path, PAIRS, f'  pairs: "{pairs}"\n')
    assert c.preregistration.pairs == int(pairs)


@pytest.mark.parametrize(("old", "new"), [
    ("  seed: 7", "  seed: 0"),
    ("  seed: 7", f"  seed: {MAX_SEED}"),
    ("requests_per_level: 16", f"requests_per_level: {MAX_REQUESTS}"),
])
def test_the_bounds_themselves_are_accepted(tmp_path: Path, old: str, new: str) -> None:
    _load(tmp_path, old, new)


@pytest.mark.parametrize("host", ['"::1"', '"[::1]"'])
def test_an_ipv6_host_is_kept_bare_and_bracketed_in_urls(tmp_path: Path, host: str) -> None:
    c = _load(tmp_path, "  host: 127.0.0.1\n", f"  host: {host}\n")
    launch = c.launches["adaptive"]
    assert isinstance(launch, ProcessLaunch)
    assert launch.host == "::1"  # what sockets are given
    assert launch.base_url == "http://[::1]:18767"


def test_a_docker_ipv6_host_on_the_host_network_is_accepted() -> None:
    launch = DockerLaunch(backend="docker", image="x", host="::1", port=8000, network="host")
    assert launch.base_url == "http://[::1]:8000"


def test_names_and_addresses_are_hosts() -> None:
    for host in ("127.0.0.1", "localhost", "gpu-box.lan", "fd00::5"):
        assert ProcessLaunch(backend="process", command=["x"], host=host, port=1).host == host
    for bad in ("", "gpu box", "a/b", "[gpu]", "1:2:3:zz"):
        with pytest.raises(ValidationError):
            ProcessLaunch(backend="process", command=["x"], host=bad, port=1)


def test_an_external_url_with_a_bare_ipv6_address_is_refused() -> None:
    ok = ExternalLaunch(backend="external", base_url="http://[::1]:8000/")
    assert ok.base_url == "http://[::1]:8000"
    with pytest.raises(ValidationError, match=r"written in brackets, e.g. http://\[::1\]:8000"):
        ExternalLaunch(backend="external", base_url="http://::1:8000")


def test_a_relative_guardrail_on_error_rate_is_left_to_the_verdict(tmp_path: Path) -> None:
    """Only the primary metric is refused: the verdict compares error_rate by differences
    whatever the guardrail says (verdict.rule.ABSOLUTE_METRICS)."""
    c = _load(tmp_path, "max_worsening: 0.0, absolute: true}", "max_worsening: 0.0}")
    assert [g.metric for g in c.preregistration.guardrails][1] == "error_rate"


def test_odd_keys_are_quoted_in_yaml_paths() -> None:
    assert format_yaml_path(("arms", "depth7", "env", "A_B")) == "arms.depth7.env.A_B"
    assert format_yaml_path(("log_captures", "../x")) == 'log_captures["../x"]'
    assert format_yaml_path(("server", "env", "A=B")) == 'server.env["A=B"]'


@pytest.mark.parametrize("char", ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00a0"])
def test_an_invisible_character_in_a_key_is_shown_escaped(char: str) -> None:
    code = f"\\u{ord(char):04x}"
    assert format_yaml_path(("preregistration", f"margin{char}")) == (
        f'preregistration["margin{code}"]')
    assert format_yaml_path(("env", "é=1")) == 'env["é=1"]'  # a visible letter stays


def test_only_name_references_in_env(tmp_path: Path) -> None:
    """`${NAME}`, alone or inside a value, and `$` in other uses are accepted; a frozen
    copy read back for a report keeps an old `${NAME:-default}` readable."""
    seed = '    SPECAB_SIM_SEED: "7"'
    c = _load(tmp_path, seed, seed + "\n    P: '/opt/bin:${PATH}'\n    Q: '$HOME ${HOME}'"
              "\n    R: 'costs $5 {x}'")
    assert c.launches["control"].env["P"] == "/opt/bin:${PATH}"
    path = tmp_path / "old.yaml"
    path.write_text(SIM_PAIR.replace(seed, seed + "\n    FOO: '${BAR:-x}'"))
    assert load_campaign(path, check_files=False).server.env["FOO"] == "${BAR:-x}"


def test_a_nul_in_a_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        _load(tmp_path, "tokenizer: builtin:tokenizer", 'tokenizer: "tok\\0"')
    assert info.value.problems == [
        'workloads.tokenizer: "tok\\0" holds a NUL character (\\0): no argument, environment '
        "variable or file name can carry one; remove it (line 72)"]
