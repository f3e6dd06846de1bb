"""vLLM's flags checked with its own parser, rebuilt from a real dump (vLLM 0.32.0,
tests/data/vllm), and the engine cache: one introspection per engine, by its identity."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from campaign.campaignfile import DockerLaunch, ProcessLaunch
from campaign.run.checks import vllmdump
from campaign.run.checks.vllmargs import check_argv, rewrite, unknown_env
from campaign.run.checks.vllmengine import (
    EngineError,
    Engines,
    default_cache_dir,
    find_entry,
    parse_dump,
    script_interpreter,
)
from tests.runs import TESTS

DUMP: dict[str, Any] = json.loads((TESTS / "data" / "vllm" / "dump-0.32.0-cpu.json").read_text())


# --------------------------------------------------------------------------- the parser


@pytest.mark.parametrize("argv", [
    ["--model", "/m", "--max-model-len", "2048"],
    ["--max_model_len=2048", "--port", "8000"],           # `_` for `-`, `--flag=value`
    ["--max-model", "2048"],                               # an unambiguous abbreviation
    ["-O3"], ["-O", "3"], ["-tp", "2"],                    # short aliases, -O rewritten
    ["--enable-prefix-caching"], ["--no-enable-prefix-caching"],
    ["--speculative-config.method", "ngram", "--speculative-config.num_speculative_tokens",
     "4"],                                                 # dotted JSON keys
    ["--speculative-config", '{"method": "ngram"}', "--dtype", "bfloat16"],
    ["--model=/models/Qwen2.5-7B", "--served-model-name", "a", "b"],   # nargs +
])
def test_what_vllm_accepts_is_accepted(argv: list[str]) -> None:
    result = check_argv(DUMP, argv, "api_server")
    assert result.refused is None and not result.notes, result


@pytest.mark.parametrize(("argv", "message", "word"), [
    (["--max-modle-len", "2048"], "unrecognized arguments: --max-modle-len", "--max-modle-len"),
    (["--bogus=1", "--port", "8000"], "unrecognized arguments: --bogus=1", "--bogus=1"),
    (["--max-num", "4"], "ambiguous option: --max-num could match --max-num-batched-tokens",
     "--max-num"),
    (["--dtype", "fp7"], "argument --dtype: invalid choice: 'fp7'", "--dtype"),
    (["--max-model-len"], "argument --max-model-len: expected one argument",
     "--max-model-len"),
    (["--no-disable-log-stats"], "unrecognized arguments: --no-disable-log-stats",
     "--no-disable-log-stats"),                            # a plain store_true has no --no-
    (["--help"], "prints vLLM's help and exits", "--help"),
])
def test_what_vllm_refuses_is_refused_in_its_own_words(argv: list[str], message: str,
                                                       word: str) -> None:
    result = check_argv(DUMP, argv, "api_server")
    assert result.refused is not None and message in result.refused, result
    assert result.word == word


def test_a_stray_value_is_a_note_on_the_api_server_and_the_model_on_serve() -> None:
    """`--enforce-eager true`: the OpenAI server's positional `model_tag` swallows `true`
    and ignores it (what vLLM 0.32 does); under `vllm serve` a positional is the model."""
    stray = check_argv(DUMP, ["--enforce-eager", "true"], "api_server")
    assert stray.refused is None and stray.word == "true"
    assert "after --enforce-eager" in stray.notes[0] and "ignores" in stray.notes[0]
    assert check_argv(DUMP, ["/models/m", "--enforce-eager"], "serve").notes == []
    two = check_argv(DUMP, ["/models/m", "extra"], "serve")
    assert two.refused == "unrecognized arguments: extra"


def test_rewrite_is_vllms_own() -> None:
    assert rewrite(["--max_model_len=2_048", "-O3", "-O", "2", "--a.b", "1", "--c.d=2",
                    "--model=/x.y", "--x_y.z", "3"]) == [
        "--max-model-len=2_048", "--optimization-level", "3", "--optimization-level", "2",
        "--model=/x.y", "--a", "{}", "--c", "{}", "--x-y", "{}"]


def test_unknown_vllm_variables_name_the_closest() -> None:
    found = unknown_env(DUMP, {"VLLM_CPU_KVCACHE_SPAC": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
                               "VLLM_DSPARK_ONLINE_VC": "1", "HF_HUB_OFFLINE": "1"})
    assert found == {"VLLM_CPU_KVCACHE_SPAC": "VLLM_CPU_KVCACHE_SPACE",
                     "VLLM_DSPARK_ONLINE_VC": None}


# --------------------------------------------------------------------------- which launch


@pytest.mark.parametrize(("words", "expected"), [
    (["python", "-m", "vllm.entrypoints.openai.api_server", "--port", "1"],
     ("api_server", 3, 0)),
    (["numactl", "-C", "0", "/v/bin/python3.11", "-u", "-m",
      "vllm.entrypoints.openai.api_server"], ("api_server", 7, 3)),
    (["/v/bin/vllm", "serve", "/models/m", "--port", "1"], ("serve", 2, None)),
    (["python3", "-m", "vllm.entrypoints.cli.main", "serve", "m"], ("serve", 4, 0)),
    (["spec-ab", "sim", "serve", "--port", "1"], None),
    (["python", "-m", "vllm.entrypoints.api_server"], None),   # the old demo server
])
def test_find_entry(words: list[str], expected: Any) -> None:
    assert find_entry(words) == expected


def test_script_interpreter(tmp_path: Path) -> None:
    plain = tmp_path / "vllm"
    plain.write_text("#!/opt/venv/bin/python3.12\nimport sys\n")
    assert script_interpreter(plain) == Path("/opt/venv/bin/python3.12")
    long = tmp_path / "long" / "vllm"
    long.parent.mkdir()
    long.write_text("#!/bin/sh\n'''exec' \"/very/long/venv/bin/python\" \"$0\" \"$@\"\n' '''\n")
    assert script_interpreter(long) == Path("/very/long/venv/bin/python")


def test_cache_dir_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "spec-ab" / "engines"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "spec-ab" / "engines"


# --------------------------------------------------------------------------- the engine cache


class FakePython:
    """`subprocess.run` of an interpreter with vLLM: the identity script answers at once,
    the dump script prints DUMP behind vLLM-like noise. Counts the dumps."""

    def __init__(self, version: str = "vllm 0.32.0", fail: str | None = None) -> None:
        self.version = version
        self.fail = fail
        self.dumps = 0
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], *, input: str,
                 **kw: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        assert argv[1:] == ["-"] and kw["env"]["HF_HUB_OFFLINE"] == "1"
        if "packages_distributions" in input:
            out = json.dumps({"version": self.version, "folder": "/v/vllm"})
            return subprocess.CompletedProcess(argv, 0, out + "\n", "")
        self.dumps += 1
        assert input == Path(vllmdump.__file__).read_text()
        if self.fail:
            return subprocess.CompletedProcess(argv, 1, "", f"Traceback\n{self.fail}\n")
        return subprocess.CompletedProcess(
            argv, 0, "INFO loading\n" + vllmdump.MARKER + json.dumps(DUMP) + "\n", "")


def process_launch(tmp_path: Path, *args: str) -> ProcessLaunch:
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True, exist_ok=True)
    python.write_text("")
    python.chmod(0o755)
    return ProcessLaunch(backend="process", port=8000, command=[
        str(python), "-m", "vllm.entrypoints.openai.api_server", *args])


def test_one_introspection_per_engine_then_the_cache(tmp_path: Path) -> None:
    fake = FakePython()
    launch = process_launch(tmp_path, "--port", "8000")
    first = Engines(run=fake, cache_dir=tmp_path / "cache")
    target = first.target(launch, tmp_path)
    assert target is not None and target.flags == ["--port", "8000"]
    dump, path, fresh = first.dump(target)
    assert fresh and dump["vllm_version"] == "0.32.0" and path.parent == tmp_path / "cache"
    assert first.dump(target)[2] is False and fake.dumps == 1  # same engine, same check
    again = Engines(run=fake, cache_dir=tmp_path / "cache")    # the next `spec-ab check`
    assert again.dump(target)[0] == dump and fake.dumps == 1
    newer = Engines(run=FakePython(version="vllm 0.33.0"), cache_dir=tmp_path / "cache")
    assert newer.dump(target)[2] is True  # another vLLM in the same interpreter: its own


def test_a_damaged_cache_is_introspected_again(tmp_path: Path) -> None:
    fake = FakePython()
    launch = process_launch(tmp_path)
    engines = Engines(run=fake, cache_dir=tmp_path / "cache")
    target = engines.target(launch, tmp_path)
    assert target is not None
    _, path, _ = engines.dump(target)
    path.write_text("{not json")
    assert Engines(run=fake, cache_dir=tmp_path / "cache").dump(target)[2] is True
    assert fake.dumps == 2 and json.loads(path.read_text())["dump"]["format"] == vllmdump.FORMAT


def test_a_failed_introspection_is_an_engine_error(tmp_path: Path) -> None:
    engines = Engines(run=FakePython(fail="ModuleNotFoundError: No module named 'torch'"),
                      cache_dir=tmp_path / "cache")
    target = engines.target(process_launch(tmp_path), tmp_path)
    assert target is not None
    with pytest.raises(EngineError, match="exited with code 1: ModuleNotFoundError"):
        engines.dump(target)
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").iterdir())
    with pytest.raises(EngineError, match="printed no dump"):
        parse_dump("just noise\n")


def test_a_missing_interpreter_is_an_engine_error(tmp_path: Path) -> None:
    launch = ProcessLaunch(backend="process", port=8000, command=[
        str(tmp_path / "nope" / "python"), "-m", "vllm.entrypoints.openai.api_server"])
    with pytest.raises(EngineError, match="cannot find the Python"):
        Engines(run=FakePython()).target(launch, tmp_path)


# --------------------------------------------------------------------------- docker


class FakeContainer:
    def __init__(self, owner: FakeDocker, kwargs: dict[str, Any]) -> None:
        self.owner, self.kwargs, self.removed = owner, kwargs, False

    def start(self) -> None:
        self.owner.started += 1

    def wait(self, timeout: float) -> dict[str, int]:
        return {"StatusCode": 0}

    def logs(self, stdout: bool, stderr: bool) -> bytes:
        return (vllmdump.MARKER + json.dumps(DUMP) + "\n").encode() if stdout else b""

    def remove(self, force: bool) -> None:
        self.removed = True


class FakeImage:
    def __init__(self, image_id: str, entrypoint: list[str]) -> None:
        self.id = image_id
        self.attrs = {"Config": {"Entrypoint": entrypoint, "Cmd": []}}


class FakeDocker:
    """A docker client whose images are `{name: (id, entrypoint)}`."""

    def __init__(self, images: dict[str, tuple[str, list[str]]]) -> None:
        self.known = images
        self.started = 0
        self.created: list[FakeContainer] = []
        self.images = self
        self.containers = self

    def get(self, name: str) -> FakeImage:
        from docker.errors import ImageNotFound

        if name not in self.known:
            raise ImageNotFound(name)
        return FakeImage(*self.known[name])

    def create(self, image: str, **kwargs: Any) -> FakeContainer:
        c = FakeContainer(self, {"image": image, **kwargs})
        self.created.append(c)
        return c


def test_docker_dump_runs_in_the_image_offline_once_per_image_id(tmp_path: Path) -> None:
    client = FakeDocker({"lab/dspark:v3": ("sha256:abc", ["vllm", "serve"]),
                         "spec-ab-sim:latest": ("sha256:def", ["spec-ab", "sim", "serve"])})
    launch = DockerLaunch(backend="docker", image="lab/dspark:v3", port=8000,
                          command=["/models/m", "--max-modle-len", "9"])
    engines = Engines(client_factory=lambda host: client, cache_dir=tmp_path / "cache")
    target = engines.target(launch, tmp_path)  # no `vllm` in the name: its entrypoint says
    assert target is not None and target.entry == "serve"
    assert target.flags == ["/models/m", "--max-modle-len", "9"]
    _, _, fresh = engines.dump(target)
    assert fresh and client.started == 1
    made = client.created[0]
    assert made.kwargs["entrypoint"] == ["python3"] and made.kwargs["network_mode"] == "none"
    assert made.kwargs["command"][0] == "-c" and made.removed
    later = Engines(client_factory=lambda host: client, cache_dir=tmp_path / "cache")
    assert later.dump(target)[2] is False and client.started == 1
    sim = DockerLaunch(backend="docker", image="spec-ab-sim:latest", port=8000)
    assert engines.target(sim, tmp_path) is None


def test_an_absent_vllm_image_is_an_engine_error_and_others_are_left_alone(
        tmp_path: Path) -> None:
    engines = Engines(client_factory=lambda host: FakeDocker({}), cache_dir=tmp_path)
    with pytest.raises(EngineError, match="not present"):
        engines.target(DockerLaunch(backend="docker", image="vllm/vllm-openai:v9", port=1),
                       tmp_path)
    assert engines.target(DockerLaunch(backend="docker", image="mine:1", port=1),
                          tmp_path) is None


def test_an_unreachable_engine_is_an_engine_error(tmp_path: Path) -> None:
    def unreachable(host: str | None) -> Any:
        raise OSError("connect to host 10.0.0.2 port 22: Connection refused")

    engines = Engines(client_factory=unreachable, cache_dir=tmp_path)
    launch = DockerLaunch(backend="docker", image="vllm/vllm-openai:v9", port=1,
                          docker_host="ssh://spark2")
    with pytest.raises(EngineError, match="Connection refused"):
        engines.target(launch, tmp_path)
