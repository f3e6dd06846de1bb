"""The campaign file: valid files load and merge; malformed ones give one line per problem
naming the YAML path and line, table-driven from a valid base file."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest

from campaign.campaignfile import (
    DockerLaunch,
    ProcessLaunch,
    load_campaign,
    local_files,
    merge,
    missing_files,
    parse_volume,
)
from campaign.errors import SpecError
from campaign.run.checks.preflight import _files as preflight_files
from campaign.run.measure.manifest import bind_mount_hashes
from tests.runs import TESTS

DATA = TESTS / "data" / "campaigns"
BASE = (DATA / "base.yaml").read_text()

DOCKER_SERVER = """server:
  backend: docker
  image: spec-ab-sim:latest
  port: 18999
  ports: ["18999:8000"]
  volumes:
    - /tmp:/cache
  env:
    A: 1
"""


def write(tmp_path: Path, text: str) -> Path:
    for item in ("tok", "shell.jsonl", "patch.py"):
        src = DATA / item
        dst = tmp_path / item
        if src.is_dir():
            shutil.copytree(src, dst, dirs_exist_ok=True)
        else:
            shutil.copy(src, dst)
    path = tmp_path / "campaign.yaml"
    path.write_text(text)
    return path


def sub(old: str, new: str) -> str:
    assert old in BASE, old
    return BASE.replace(old, new, 1)


def docker_base() -> str:
    start = BASE.index("server:")
    end = BASE.index("arms:")
    return BASE[:start] + DOCKER_SERVER + BASE[end:]


def test_base_loads_and_merges(tmp_path: Path) -> None:
    c = load_campaign(write(tmp_path, BASE))
    assert c.arm_names == ["control", "depth7"]
    control, cand = c.launches["control"], c.launches["depth7"]
    assert isinstance(control, ProcessLaunch) and isinstance(cand, ProcessLaunch)
    assert control.env == {"SPECAB_SIM_DEPTH": "5"}  # YAML ints become env strings
    assert cand.env == {"SPECAB_SIM_DEPTH": "7"}  # maps merged, value replaced
    assert c.preregistration.metric_direction == "higher"
    assert c.workloads.knee is not None and c.workloads.knee.levels == ["c1", "c4"]


def test_merge_rules() -> None:
    base = {"env": {"A": "1", "B": "2"}, "volumes": ["a:/a"], "image": "x", "n": {"d": [1]}}
    over = {"env": {"B": "3"}, "volumes": ["b:/b"], "image": "y", "n": {"d": [2]}}
    assert merge(base, over) == {"env": {"A": "1", "B": "3"}, "volumes": ["a:/a", "b:/b"],
                                 "image": "y", "n": {"d": [1, 2]}}


def test_docker_arm_volumes_appended(tmp_path: Path) -> None:
    text = docker_base().replace("""  depth7:
    env:
      SPECAB_SIM_DEPTH: 7""", """  depth7:
    env:
      SPECAB_SIM_DEPTH: 7
    volumes:
      - patch.py:/opt/patch.py:ro""")
    c = load_campaign(write(tmp_path, text))
    cand = c.launches["depth7"]
    assert isinstance(cand, DockerLaunch)
    assert cand.volumes == ["/tmp:/cache", "patch.py:/opt/patch.py:ro"]
    assert cand.env == {"A": "1", "SPECAB_SIM_DEPTH": "7"}


@pytest.mark.parametrize("text, expected", [
    ("a:/b", ("a", "/b", None)),
    ("./x.py:/y.py:ro", ("./x.py", "/y.py", True)),
    ("cache:/root/.cache:rw", ("cache", "/root/.cache", False)),
])
def test_parse_volume(text: str, expected: tuple[str, str, bool | None]) -> None:
    v = parse_volume(text)
    assert (v.source, v.target, v.read_only) == expected


# Each case: (id, campaign text, substrings that must all appear in ONE problem line).
CASES: list[tuple[str, str, list[str]]] = [
    ("unknown-top-key", BASE + "extra_key: 1\n", ["extra_key", "unknown key", "(line 33)"]),
    ("typo-did-you-mean", sub("  margin: 0.10", "  margn: 0.10"),
     ["preregistration.margn", "did you mean 'margin'", "(line 6)"]),
    ("missing-name", sub("name: base\n", ""), ["name: required but missing"]),
    ("bad-name", sub("name: base", "name: Base Campaign"), ["name:", "(line 1)"]),
    ("margin-type", sub("margin: 0.10", "margin: lots"), ["preregistration.margin", "(line 6)"]),
    ("negative-margin", sub("margin: 0.10", "margin: -0.1"), ["preregistration.margin"]),
    ("bad-rule", sub("rule: point", "rule: bayes"), ["preregistration.rule", "(line 8)"]),
    ("bad-order", sub("order: AB", "order: BA"), ["preregistration.order", "(line 10)"]),
    ("zero-pairs", sub("pairs: 2", "pairs: 0"), ["preregistration.pairs", "(line 9)"]),
    ("abba-odd-pairs", sub("order: AB", "order: ABBA").replace("pairs: 2", "pairs: 3"),
     ["preregistration.pairs", "ABBA", "(line 9)"]),
    ("unknown-metric", sub("primary_metric: output_token_throughput",
                           "primary_metric: output_token_througput"),
     ["preregistration.primary_metric", "did you mean 'output_token_throughput'", "(line 5)"]),
    ("cell-level-not-measured", sub("level: c1}", "level: c2}"),
     ["decision_cells[0].level", "c2", "(line 12)"]),
    ("cell-bad-workload", sub("{workload: knee, level: c1}", "{workload: soak, level: c1}"),
     ["decision_cells[0].workload", "(line 12)"]),
    ("no-backend", sub("  backend: process\n", ""), ["server", "backend"]),
    ("bad-backend", sub("backend: process", "backend: k8s"),
     ["server", "backend must be one of"]),
    ("process-no-command", sub('  command: [spec-ab, sim, serve, --port, "18999"]\n', ""),
     ["server", "command: a process server needs a command"]),
    ("port-range", sub("  port: 18999", "  port: 99999"), ["server.port", "(line 16)"]),
    ("unknown-server-key", sub("  port: 18999", "  port: 18999\n  gpu: all"),
     ["server.gpu", "unknown key"]),
    ("no-control", sub("  control: {}\n", ""), ["arms", "control"]),
    ("only-control", sub("""  depth7:
    env:
      SPECAB_SIM_DEPTH: 7
""", ""), ["arms", "at least one candidate"]),
    ("arm-unknown-field", sub("  depth7:\n", "  depth7:\n    imagee: x\n"),
     ["arms.depth7.imagee", "not a field", "(line 22)"]),
    ("arm-env-not-map", sub("""    env:
      SPECAB_SIM_DEPTH: 7""", "    env: [a, b]"), ["arms.depth7.env", "(line 22)"]),
    ("arm-bad-name", sub("  depth7:", "  Depth 7:"), ["arms"]),
    ("no-workloads", BASE[:BASE.index("workloads:")], ["workloads: required but missing"]),
    ("no-measured-workload", sub("""  knee:
    concurrency: [1, 4]
    requests_per_level: 8
  agentfix:
    fixtures:
      shell: shell.jsonl
""", ""), ["workloads", "at least one measured workload"]),
    ("knee-zero-level", sub("concurrency: [1, 4]", "concurrency: [0, 4]"),
     ["workloads.knee.concurrency", "≥ 1"]),
    ("knee-repeat-level", sub("concurrency: [1, 4]", "concurrency: [4, 4]"),
     ["workloads.knee.concurrency", "repeat"]),
    ("knee-both-counts", sub("requests_per_level: 8", "requests_per_level: 8\n    duration_s: 30"),
     ["workloads.knee", "not both"]),
    ("knee-one-process-duration", sub("requests_per_level: 8",
                                      "duration_s: 30\n    one_process: true"),
     ["workloads.knee", "one_process needs request-bound levels"]),
    ("fixture-missing", sub("shell: shell.jsonl", "shell: nope.jsonl"),
     ["workloads.agentfix.fixtures.shell", "nope.jsonl does not exist", "(line 32)"]),
    ("tokenizer-missing", sub("tokenizer: tok", "tokenizer: tokz"),
     ["workloads.tokenizer", "does not exist", "(line 26)"]),
    # a YAML key may hold a newline; `re.match(...$)` let "shell\n" through as a class
    ("fixture-class-newline", sub("      shell: shell.jsonl", '      "shell\\n": shell.jsonl'),
     ["workloads.agentfix.fixtures", "class name 'shell\\n'"]),
    ("arm-name-newline", sub("  depth7:", '  "depth7\\n":'), ["arms", "arm name 'depth7\\n'"]),
    ("docker-port-newline", docker_base().replace('  ports: ["18999:8000"]',
                                                  '  ports: ["18999:8000\\n"]'),
     ["server.ports", "'18999:8000\\n' is not host:container"]),
    ("builtin-unknown", sub("shell: shell.jsonl", "shell: builtin:agentfix/shel"),
     ["workloads.agentfix.fixtures.shell", "builtin:agentfix/shel is not shipped",
      "builtin:agentfix/shell", "(line 32)"]),
    ("port-mismatch", sub('--port, "18999"]', '--port, "18998"]'),
     ["server.command[4]", "--port 18998 in the command", "port 18999", "(line 15)"]),
    ("port-mismatch-arm", sub("port: 18999", "port: 18999\n  args: [--port=18997]"),
     ["server.args[0]", "--port 18997"]),
    ("yaml-syntax", sub("lane: sim", "lane: [sim"), ["YAML", "line"]),
    ("duplicate-key", sub("lane: sim", "lane: sim\nlane: sim2"), ["YAML", "duplicate", "line"]),
    ("top-level-list", "- a\n- b\n", ["top level must be a mapping"]),
    ("empty-file", "", ["empty"]),
    ("bad-regex", BASE + "log_captures:\n  x: '(unclosed'\n", ["log_captures", "regex"]),
    ("guardrail-metric", sub("  decision_cells:", "  guardrails:\n    - {metric: ttft_p999}\n"
                             "  decision_cells:"),
     ["preregistration.guardrails[0].metric", "did you mean 'ttft_p99'"]),
    ("gates-negative-retries", sub("  decision_cells:", "  gates: {retries: -1}\n"
                                   "  decision_cells:"),
     ["preregistration.gates.retries", "(line 11)"]),
    ("drift-band-big", sub("drift_band: 0.03", "drift_band: 3"),
     ["preregistration.drift_band", "fraction"]),
    ("docker-missing-image", docker_base().replace("  image: spec-ab-sim:latest\n", ""),
     ["server.image: required but missing"]),
    ("docker-bad-volume", docker_base().replace("- /tmp:/cache", "- /tmp"),
     ["server.volumes", "host:container", "(line 18)"]),
    ("docker-ports-with-host-net", docker_base().replace('  ports: ["18999:8000"]',
                                                         '  ports: ["18999:8000"]\n'
                                                         '  network: host'),
     ["server", "network: host"]),
    ("docker-arm-volume-missing", docker_base().replace("""  depth7:
    env:""", """  depth7:
    volumes:
      - /tmp:/a
      - patches/x.py:/b.py:ro
    env:"""), ["arms.depth7.volumes[1]", "source patches/x.py does not exist", "(line 27)"]),
    ("docker-extra-needs-ready-kind", docker_base().replace("  env:\n    A: 1\n",
                                                            "  env:\n    A: 1\n"
                                                            "  extra_containers:\n"
                                                            "    - name: w\n"
                                                            "      image: x\n"
                                                            "      ready: {timeout_s: 5}\n"),
     ["server.extra_containers[0].ready", "exactly one"]),
]


@pytest.mark.parametrize("case_id, text, expected", CASES, ids=[c[0] for c in CASES])
def test_malformed(tmp_path: Path, case_id: str, text: str, expected: list[str]) -> None:
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        load_campaign(path)
    problems = info.value.problems
    assert any(all(s in p for s in expected) for p in problems), (
        f"{case_id}: no problem line contains {expected}; got:\n" + "\n".join(problems))
    assert info.value.exit_code == 2


def test_all_problems_reported_at_once(tmp_path: Path) -> None:
    text = sub("margin: 0.10", "margin: lots").replace("rule: point", "rule: bayes")
    with pytest.raises(SpecError) as info:
        load_campaign(write(tmp_path, text))
    assert len(info.value.problems) == 2


def test_missing_file() -> None:
    with pytest.raises(SpecError, match="file not found"):
        load_campaign(DATA / "does-not-exist.yaml")


def test_examples_validate(repo_root: Path) -> None:
    for path in sorted((repo_root / "examples").glob("*.yaml")):
        c = load_campaign(path)
        assert c.candidates, path


def test_templates_match_examples(repo_root: Path) -> None:
    """`spec-ab init` templates are the examples: shipped files are named `builtin:`, and
    the gb300 patches are written beside the template as they sit beside the example."""
    pairs = {"gb300": "gb300-dspark-onlinevc", "gb10-pair": "gb10-pair-depth"}
    for template, example in pairs.items():
        t = (repo_root / "campaign" / "templates" / f"{template}.yaml").read_text()
        e = (repo_root / "examples" / f"{example}.yaml").read_text()
        assert t == e, template
    # the load template is examples/sim-load.yaml below its own header
    t = (repo_root / "campaign" / "templates" / "load.yaml").read_text()
    e = (repo_root / "examples" / "sim-load.yaml").read_text()
    assert t.startswith("# CAMPAIGN_FILE: ") and e.startswith("# ")
    assert t[t.index("\nname: "):] == e[e.index("\nname: "):]
    shipped = repo_root / "campaign" / "templates" / "files" / "gb300" / "patches"
    for f in (repo_root / "examples" / "patches").rglob("*.py"):
        assert (shipped / f.relative_to(repo_root / "examples" / "patches")).read_bytes() == \
            f.read_bytes()


def test_the_sim_template_is_a_starting_point_with_the_demos_rule(
        repo_root: Path, tmp_path: Path) -> None:
    """`spec-ab init`'s sim template: its header names the file just written, it carries a
    commented depth arm and the knob list's pointer; otherwise it is the demo's campaign
    (the same rule, arms and workloads)."""
    from campaign.templates import write_template

    out = tmp_path / "mine.yaml"
    write_template("sim", out)
    text = out.read_text()
    assert text.startswith(f"# {out}: ") and f"spec-ab run {out}" in text
    assert "CAMPAIGN_FILE" not in text
    assert '  # depth7: {env: {SPECAB_SIM_DEPTH: "7"}}\n' in text
    assert "docs/simulator.md" in text and "KNOWN_VARIABLES" in text
    mine = load_campaign(out)
    demo = load_campaign(repo_root / "examples" / "sim-pair.yaml")
    assert mine.preregistration == demo.preregistration
    assert mine.arm_names == demo.arm_names and mine.workloads == demo.workloads
    out.write_text(text.replace("  # depth7:", "  depth7:"))
    assert load_campaign(out).arm_names == [*demo.arm_names, "depth7"]


def test_builtin_paths_resolve_to_shipped_files(tmp_path: Path) -> None:
    from campaign.campaignfile.builtin import BUILTIN_DIR, builtin_names, builtin_path

    assert builtin_path("fixtures/x") is None
    assert builtin_path("builtin:tokenizer") == BUILTIN_DIR / "tokenizer"
    assert builtin_path("builtin:agentfix/prose") == BUILTIN_DIR / "agentfix" / "prose.jsonl"
    assert builtin_path("builtin:agentfix/prose.jsonl") == builtin_path("builtin:agentfix/prose")
    assert not builtin_path("builtin:../../etc/passwd").exists()  # type: ignore[union-attr]
    assert "builtin:agentfix/tool_json" in builtin_names()
    path = write(tmp_path, sub("tokenizer: tok", "tokenizer: builtin:tokenizer").replace(
        "shell: shell.jsonl", "shell: builtin:agentfix/shell"))
    c = load_campaign(path)
    assert c.resolve(c.workloads.tokenizer) == BUILTIN_DIR / "tokenizer"
    assert c.workloads.agentfix is not None
    assert c.resolve(c.workloads.agentfix.fixtures["shell"]).is_file()
    assert missing_files(c) == []



# --------------------------------------------------------------------------- local files


def docker_with(volumes: list[str], *, arm_volumes: Sequence[str] = (), extra: str = "") -> str:
    """The docker base with these server volumes, depth7 volumes and extra YAML under server.
    (A bare `name:/x` is a named docker volume: local files are written `./name`.)"""
    text = docker_base().replace("  volumes:\n    - /tmp:/cache\n",
                                 "  volumes:\n" + "".join(f"    - {v}\n" for v in volumes)
                                 + extra)
    if arm_volumes:
        text = text.replace("  depth7:\n", "  depth7:\n    volumes:\n"
                            + "".join(f"      - {v}\n" for v in arm_volumes))
    return text


def test_local_files_name_every_local_path(tmp_path: Path) -> None:
    text = docker_with(["/tmp:/cache", "./patch.py:/opt/patch.py", "hf-cache:/root/.cache"],
                       arm_volumes=["./tok:/tok"])
    c = load_campaign(write(tmp_path, text))
    got = [(f.yaml_path, f.kind, f.declared, f.arm, f.must_be) for f in local_files(c)]
    assert got == [
        (("workloads", "tokenizer"), "tokenizer", "tok", None, "dir"),
        (("workloads", "agentfix", "fixtures", "shell"), "fixture", "shell.jsonl", None, "file"),
        (("server", "volumes", 0), "mount", "/tmp", "control", "any"),
        (("server", "volumes", 1), "mount", "./patch.py", "control", "any"),
        (("server", "volumes", 0), "mount", "/tmp", "depth7", "any"),
        (("server", "volumes", 1), "mount", "./patch.py", "depth7", "any"),
        (("arms", "depth7", "volumes", 0), "mount", "./tok", "depth7", "any"),
    ]  # the named volume hf-cache is not a local path
    assert local_files(c)[3].resolved == tmp_path / "patch.py"
    assert missing_files(c) == []


def test_missing_fixture_and_tokenizer_without_tokenizer_json(tmp_path: Path) -> None:
    c = load_campaign(write(tmp_path, BASE))
    (tmp_path / "shell.jsonl").unlink()
    (tmp_path / "tok" / "tokenizer.json").unlink()
    assert missing_files(c) == [
        (("workloads", "tokenizer"), "tok has no tokenizer.json"),
        (("workloads", "agentfix", "fixtures", "shell"), "fixture file shell.jsonl does not exist"),
    ]


def test_absolute_paths_are_left_to_the_preflight(tmp_path: Path) -> None:
    gone = tmp_path / "elsewhere" / "shell.jsonl"
    c = load_campaign(write(tmp_path, sub("shell: shell.jsonl", f"shell: {gone}")))
    assert missing_files(c, relative_only=True) == []
    assert missing_files(c) == [(("workloads", "agentfix", "fixtures", "shell"),
                                 f"fixture file {gone} does not exist")]
    (problem,) = preflight_files(c)
    assert problem.startswith("workloads.agentfix.fixtures.shell: fixture file ")
    assert "→ create it or fix the path" in problem


def test_missing_relative_mount_reported_once_at_its_yaml_path(tmp_path: Path) -> None:
    c = load_campaign(write(tmp_path, docker_with(["/tmp:/cache", "./patch.py:/p.py"],
                                                  arm_volumes=["./patch.py:/q.py"])))
    (tmp_path / "patch.py").unlink()
    assert missing_files(c) == [
        (("server", "volumes", 1), "source ./patch.py does not exist"),
        (("arms", "depth7", "volumes", 0), "source ./patch.py does not exist"),
    ]
    problems = preflight_files(c)
    assert problems[0] == (f"server.volumes[1]: source ./patch.py does not exist "
                           f"({tmp_path / 'patch.py'}) → create it or fix the volume")
    with pytest.raises(SpecError) as info:
        load_campaign(tmp_path / "campaign.yaml")
    assert any(p.startswith("server.volumes[1]: source ./patch.py does not exist (line ")
               for p in info.value.problems)


def test_mounts_on_a_remote_docker_host_are_skipped(tmp_path: Path) -> None:
    extra = ("  extra_containers:\n"
             "    - name: far\n      image: x\n      docker_host: ssh://spark2\n"
             "      volumes: [./nowhere/a.py:/a.py]\n"
             "    - name: near\n      image: x\n      volumes: [./patch.py:/p.py]\n")
    c = load_campaign(write(tmp_path, docker_with(["./missing/b.py:/b.py"], extra=extra)
                            .replace("  port: 18999\n", "  port: 18999\n"
                                     "  docker_host: ssh://spark1\n")))
    mounts = [(f.yaml_path, f.arm) for f in local_files(c) if f.kind == "mount"]
    assert mounts == [(("server", "extra_containers", 1, "volumes", 0), "control"),
                      (("server", "extra_containers", 1, "volumes", 0), "depth7")]
    assert missing_files(c) == []


def test_manifest_hashes_mounted_files(tmp_path: Path) -> None:
    c = load_campaign(write(tmp_path, docker_with(["/tmp:/cache"],
                                                  arm_volumes=["./patch.py:/p.py"])))
    digest = hashlib.sha256((tmp_path / "patch.py").read_bytes()).hexdigest()
    assert bind_mount_hashes(c) == {"control": {},
                                    "depth7": {str(tmp_path / "patch.py"): digest}}


def test_shipped_files_are_package_data(repo_root: Path) -> None:
    """Everything `builtin:` names and `spec-ab init` writes is installed with the package
    (pyproject package-data; `templates/__init__.py` is code, installed as the package's
    module), and fixtures/ at the top is the same folder."""
    import fnmatch
    import tomllib

    globs = tomllib.loads((repo_root / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]["campaign"]
    pkg = repo_root / "campaign"
    for folder in ("fixtures", "templates"):
        for f in (pkg / folder).rglob("*"):
            if f.is_file() and "__pycache__" not in f.parts and f != pkg / folder / "__init__.py":
                rel = f.relative_to(pkg).as_posix()
                assert any(fnmatch.fnmatch(rel, g) for g in globs), rel
    assert (repo_root / "fixtures").resolve() == (pkg / "fixtures").resolve()


# --------------------------------------------------------------------------- lanes

LANES = sub("lane: sim\n", """lanes:
  station-a:
    description: first box
    server: {port: 18801, command: [--port, "18801"], env: {SPECAB_SIM_SEED: 1}}
  station-b:
    server: {port: 18802, command: [--port, "18802"]}
""").replace('command: [spec-ab, sim, serve, --port, "18999"]', "command: [spec-ab, sim, serve]")


def test_lanes_merge_before_the_arms(tmp_path: Path) -> None:
    c = load_campaign(write(tmp_path, LANES))
    assert c.sharded and c.lane_names == ["station-a", "station-b"] and not c.lane_chosen
    a, b = c.for_lane("station-a"), c.for_lane("station-b")
    assert (a.lane, b.lane) == ("station-a", "station-b") and a.lane_chosen
    cand_a, cand_b = a.launches["depth7"], b.launches["depth7"]
    assert isinstance(cand_a, ProcessLaunch) and isinstance(cand_b, ProcessLaunch)
    assert cand_a.command == ["spec-ab", "sim", "serve", "--port", "18801"]
    assert (cand_a.port, cand_b.port) == (18801, 18802)
    # lane env merged under the arm's: the arm's depth wins, the lane's seed stays
    assert cand_a.env == {"SPECAB_SIM_DEPTH": "7", "SPECAB_SIM_SEED": "1"}
    assert cand_b.env == {"SPECAB_SIM_DEPTH": "7"}
    assert a.server.port == 18801 and b.launches["control"].env == {"SPECAB_SIM_DEPTH": "5"}
    # choosing at load time gives the same view
    assert load_campaign(write(tmp_path, LANES), lane="station-b").launches == b.launches


@pytest.mark.parametrize(("text", "lane", "expected"), [
    (LANES, "station-c", ["--lane station-c: not a lane", "station-a, station-b"]),
    (BASE, "other", ["--lane other: this campaign has no `lanes:`", "'sim'"]),
    (LANES.replace("lanes:\n", "lane: sim\nlanes:\n"), None, ["`lane: sim` and `lanes:`"]),
    (sub("lane: sim\n", ""), None, ["`lane:` is missing"]),
    (LANES.replace("station-b:", "Station B:"), None, ["lane name 'Station B'"]),
    (LANES.replace("server: {port: 18802,", "server: {gpus: all, port: 18802,"), None,
     ["lanes.station-b.server.gpus", "not a field a lane"]),
    (LANES.replace('command: [--port, "18802"]', 'command: [--port, "18803"]'), None,
     ["--port 18803", "18802", "on lane 'station-b'"]),
    (LANES.replace("{port: 18801,", "{port: 99999,"), None, ["lanes.station-a.server.port"]),
    # a whole command restated in a lane would be appended to the server's: refused
    (LANES.replace('command: [--port, "18802"]', 'command: [spec-ab, sim, serve, --port, '
                   '"18802"]'), None,
     ["lanes.station-b.server.command: starts with server.command's own program (spec-ab)",
      "under `args:`"]),
    (LANES.replace("  depth7:\n", "  depth7:\n    command: [spec-ab, sim, serve]\n"), None,
     ["arms.depth7.command: starts with server.command's own program"]),
])
def test_lane_problems(tmp_path: Path, text: str, lane: str | None,
                       expected: list[str]) -> None:
    with pytest.raises(SpecError) as exc:
        load_campaign(write(tmp_path, text), lane=lane)
    assert any(all(e in p for e in expected) for p in exc.value.problems), exc.value.problems


def test_the_one_lane_may_be_named(tmp_path: Path) -> None:
    c = load_campaign(write(tmp_path, BASE), lane="sim")
    assert c.lane == "sim" and not c.sharded and c.lane_names == ["sim"]


def test_every_launch_is_every_lane_until_one_is_chosen(tmp_path: Path) -> None:
    c = load_campaign(write(tmp_path, LANES))
    assert sorted(x.port for x in c.every_launch()) == [18801, 18801, 18802, 18802]
    assert {x.port for x in c.for_lane("station-b").every_launch()} == {18802}
