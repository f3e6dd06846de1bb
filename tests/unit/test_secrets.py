"""`campaign.secrets`: each helper that keeps a secret, in any form, out of files and
screens (the end-to-end test is tests/unit/cli/test_secrets_everywhere.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from campaign import secrets
from campaign.campaignfile import ExternalLaunch
from campaign.run.measure import manifest
from campaign.run.slot.serverwatch import captures_after
from campaign.servers.docker.launchplan import ContainerPlan, create_kwargs, docker_run_line
from campaign.servers.external import ExternalServer
from campaign.servers.process import ProcessServer
from campaign.servers.protocol import ArmContext

HF = "hf_" + "a1" * 17


@pytest.mark.parametrize(("flag", "variable"), [
    ("--hf-token", "HF_TOKEN"), ("--api-key=x", "API_KEY"), ("--token", "TOKEN"),
    ("-password", "PASSWORD"), ("--max-num-batched-tokens", None), ("--tokenizer", None),
    ("--ssl-keyfile", None), ("--tokenizer-mode", None), ("--model", None), ("serve", None),
    ("--eos-token-id", None), ("--api-key-file", None),
])
def test_flag_variable(flag: str, variable: str | None) -> None:
    assert secrets.flag_variable(flag) == variable


@pytest.mark.parametrize(("argv", "fix"), [
    (["--hf-token", "abc"], "--hf-token ${HF_TOKEN}"),
    (["--api-key=abc"], "--api-key=${API_KEY}"),
    (["--token", "abc", "--port", "1"], "--token ${TOKEN}"),
    (["--model", HF], "holds a Hugging Face token"),
    (["--x", "sk-" + "b" * 30], "holds an API key"),
    (["--x", "ghp_" + "c" * 36], "holds a GitHub token"),
    (["sh", "-c", "exec serve --api-key abcdef"], "--api-key ${API_KEY}"),
])
def test_argv_problems_refuse_literals_with_the_fix(argv: list[str], fix: str) -> None:
    found = secrets.argv_problems(argv)
    assert found and fix in found[0]
    assert not any("abcdef" in p or HF in p for p in found)  # never the value


@pytest.mark.parametrize("argv", [
    ["--hf-token", "${HF_TOKEN}"], ["--api-key=${API_KEY}"], ["--hf-token"],
    ["--hf-token", "--port", "8000"], ["--max-num-batched-tokens", "8192"],
    ["--ssl-keyfile", "/etc/key.pem"], ["--speculative-config", '{"num_speculative_tokens": 5}'],
    ["sh", "-c", 'exec serve --api-key "$API_KEY"'],
])
def test_argv_problems_accept_references_and_non_secrets(argv: list[str]) -> None:
    assert secrets.argv_problems(argv) == []


@pytest.mark.parametrize(("command", "fix"), [
    ("start-server --token abcdef", "--token ${TOKEN}"),
    ("HF_TOKEN=abcdef vllm serve m", 'HF_TOKEN="${HF_TOKEN}"'),
    ("export API_KEY=abcdef; run", 'API_KEY="${API_KEY}"'),
    ("curl -H 'Authorization: Bearer abcdef' http://x", "Authorization: Bearer ${HF_TOKEN}"),
    ("curl -H 'authorization: basic dXNlcjpwdw==' http://x", "Authorization: Bearer"),
    (f"ssh box 'HF_HOME=/x run {HF}'", "Hugging Face token"),
])
def test_shell_problems_refuse_literals(command: str, fix: str) -> None:
    found = secrets.shell_problems(command)
    assert found and any(fix in p for p in found), found


@pytest.mark.parametrize("command", [
    'start-server --token "$TOKEN"', "HF_TOKEN=$HF_TOKEN vllm serve m",
    'curl -H "Authorization: Bearer ${HF_TOKEN}" http://x', "docker compose up -d",
    "run --max-num-batched-tokens 8192 'unbalanced", "echo 'basic checks passed'",
])
def test_shell_problems_accept_references(command: str) -> None:
    assert secrets.shell_problems(command) == []


def test_expand_text_and_argv() -> None:
    env = {"A": "1", "PW": "s3cret"}
    assert secrets.expand_text("http://u:${PW}@h:${A}/${UNSET}", env) == "http://u:s3cret@h:1/"
    assert secrets.expand_argv(["--api-key=${PW}", "${A}", "$A"], env) == [
        "--api-key=s3cret", "1", "$A"]
    assert secrets.expand({"K": "${PW}", "U": "x${A}"}, env) == {"K": "s3cret", "U": "x1"}
    assert secrets.references("a ${X} b ${Y_2}") == ["X", "Y_2"]


def test_redact_url_hides_passwords_and_keeps_references() -> None:
    text = ("HF_ENDPOINT=https://u:p4ss@mirror/x and http://a:b@h:1, "
            "http://u:${PW}@h, http://host/no-userinfo, mail a@b.c")
    assert secrets.redact_url(text) == (
        "HF_ENDPOINT=https://u:<redacted>@mirror/x and http://a:<redacted>@h:1, "
        "http://u:${PW}@h, http://host/no-userinfo, mail a@b.c")
    assert secrets.scrub("x https://u:pw@h", environ={}) == "x https://u:<redacted>@h"


def test_url_problems() -> None:
    assert "http://bob:${PASSWORD}@" in secrets.url_problems("http://bob:pw@h:1")[0]
    assert secrets.url_problems("http://bob:${PW}@h") == []
    assert secrets.url_problems("http://h:8000") == []


def test_known_values_and_scrub_file(tmp_path: Path) -> None:
    environ = {"HF_TOKEN": "tokenvalue", "MY_ARG": "argvalue-long", "SHORT": "ab",
               "OTHER": "not-referenced"}
    values = secrets.known_values([["--api-key", "${MY_ARG}", "--x", "${SHORT}"]], environ)
    assert values == ["argvalue-long", "tokenvalue"]  # SHORT: in no secret position
    log = tmp_path / "server.log"
    log.write_bytes(b"a tokenvalue b argvalue-long c http://u:pw@h \xff not-referenced\n")
    log.chmod(0o640)
    assert secrets.scrub_file(log, values)
    assert log.read_bytes() == (b"a <redacted> b <redacted> c http://u:<redacted>@h \xff "
                                b"not-referenced\n")
    assert log.stat().st_mode & 0o777 == 0o640
    assert not secrets.scrub_file(log, values)  # clean: not rewritten
    assert not secrets.scrub_file(tmp_path / "absent.log", values)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "x.log").write_text("k tokenvalue")
    (tmp_path / "sub" / "x.json").write_text('{"k": "tokenvalue"}')  # a measurement
    assert secrets.scrub_tree(tmp_path, values) == [tmp_path / "sub" / "x.log"]


def test_unset_references() -> None:
    tree: dict[str, Any] = {"args": ["--hf-token", "${HF_TOKEN}"], "env": {"K": "${SET}"},
                            "base_url": "http://u:${PW}@h", "port": 1}
    assert secrets.unset_references(tree, {"SET": "1"}) == [
        ("args[1]", "HF_TOKEN"), ("base_url", "PW")]


def test_shell_join_double_quotes_references() -> None:
    line = secrets.shell_join(["serve", "--hf-token", "${HF_TOKEN}", "--api-key=${K}", "a b",
                               "$(rm) ${X}"])
    assert line == ('serve --hf-token "${HF_TOKEN}" "--api-key=${K}" \'a b\' '
                    "'$(rm) ${X}'")


def test_runner_env_keeps_only_allowed_values() -> None:
    env = manifest.runner_env({
        "CUDA_VISIBLE_DEVICES": "0,1", "HF_HUB_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "INFO",
        "VLLM_API_KEY": "k", "HF_TOKEN": "hf_x", "HF_ENDPOINT": "https://u:p@mirror",
        "HF_SOMETHING_NEW": "x", "SPECAB_LOCK_DIR": "/l", "PATH": "/bin"})
    assert env == {
        "CUDA_VISIBLE_DEVICES": "0,1", "HF_ENDPOINT": "https://u:<redacted>@mirror",
        "HF_HUB_OFFLINE": "1", "HF_SOMETHING_NEW": "<not recorded>",
        "HF_TOKEN": "<not recorded>", "SPECAB_LOCK_DIR": "/l",
        "VLLM_API_KEY": "<not recorded>", "VLLM_LOGGING_LEVEL": "INFO"}


def _ctx(tmp_path: Path) -> ArmContext:
    return ArmContext(run_id="r", pair=1, arm="a", log_path=tmp_path / "server.log",
                      campaign_dir=tmp_path, labels={})


def test_the_process_backend_expands_args_only_at_launch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from campaign.campaignfile import ProcessLaunch

    monkeypatch.setenv("E2E_VAL", "expanded")
    launch = ProcessLaunch(backend="process", command=["serve"], port=1,
                           args=["--api-key", "${E2E_VAL}"])
    seen: list[list[str]] = []

    def popen(argv: list[str], **kw: object) -> Any:
        seen.append(argv)
        raise OSError("not really")

    server = ProcessServer(launch, _ctx(tmp_path), popen=popen)
    with pytest.raises(Exception, match="not really"):
        server.start()
    assert seen == [["serve", "--api-key", "expanded"]]
    assert "${E2E_VAL}" in server.describe()[0] and server.facts()["argv"][-1] == "${E2E_VAL}"


def test_docker_expands_the_command_only_for_the_engine(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("E2E_VAL", "expanded")
    plan = ContainerPlan(role="server", name="n", image="img", entrypoint=None,
                         command=["serve", "--hf-token", "${E2E_VAL}"], env={}, mounts=[],
                         network=None, ports=[], gpus=None, ipc=None, shm_size=None,
                         ulimits={}, labels={}, docker_host=None)
    assert create_kwargs(plan)["command"] == ["serve", "--hf-token", "expanded"]
    assert '--hf-token "${E2E_VAL}"' in docker_run_line(plan)


def test_external_url_expanded_at_connect_time(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("E2E_PW", "pw-value")
    launch = ExternalLaunch(backend="external", base_url="http://bob:${E2E_PW}@127.0.0.1:9")
    server = ExternalServer(launch, _ctx(tmp_path))
    assert server.base_url == "http://bob:pw-value@127.0.0.1:9"
    assert "pw-value" not in " ".join(server.describe()) + str(server.facts())


def test_an_arm_folder_is_scrubbed_when_the_arm_ends(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from campaign.campaignfile import load_campaign

    monkeypatch.setenv("E2E_VAL", "value-from-env")
    src = Path(__file__).resolve().parents[2] / "examples" / "sim-pair.yaml"
    text = src.read_text().replace(
        '"18767"]', '"18767", --api-key, "${E2E_VAL}"]')
    (tmp_path / "c.yaml").write_text(text)
    campaign = load_campaign(tmp_path / "c.yaml")
    arm_dir = tmp_path / "pairs" / "01" / "control"
    arm_dir.mkdir(parents=True)
    crashed = tmp_path / "pairs" / "01" / "adaptive" / "server.log"
    crashed.parent.mkdir()
    crashed.write_text("left by a killed runner: value-from-env\n")
    log = arm_dir / "server.log"
    with pytest.raises(KeyboardInterrupt), captures_after(campaign, log, arm_dir):
        assert "<redacted>" in crashed.read_text()  # scrubbed when the pair runs again
        log.write_text("args: value-from-env, url http://u:pw@h\n")
        (arm_dir / "passes").mkdir()
        (arm_dir / "passes" / "x.json").write_text('{"url": "http://u:pw@h"}')
        raise KeyboardInterrupt
    assert log.read_text() == "args: <redacted>, url http://u:<redacted>@h\n"
    assert "pw@" not in (arm_dir / "passes" / "x.json").read_text()


def test_a_quoted_log_tail_is_scrubbed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A boot failure quotes the server's last lines before the arm's end scrubs the file:
    they are scrubbed of the runner's secrets and of the launch's `${NAME}` values."""
    from campaign.campaignfile import ProcessLaunch

    monkeypatch.setenv("E2E_VAL", "value-from-env")
    monkeypatch.setenv("HF_TOKEN", "hf-token-value")
    launch = ProcessLaunch(backend="process", command=["serve"], port=1,
                           args=["--api-key", "${E2E_VAL}"])
    server = ProcessServer(launch, _ctx(tmp_path))
    (tmp_path / "server.log").write_text("got value-from-env and hf-token-value\n")
    assert server.logs() == ["got <redacted> and <redacted>"]


def test_scrub_file_is_atomic_and_durable(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A scrubbed log is written to a temp file, fsynced, renamed over the old one: a crash
    (here the rename failing) leaves the old file whole and no temp file behind."""
    log = tmp_path / "server.log"
    log.write_text("a tokenvalue b\n")
    log.chmod(0o640)
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    real_replace = os.replace

    def crash(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        secrets.scrub_file(log, ["tokenvalue"])
    assert log.read_text() == "a tokenvalue b\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["server.log"]
    monkeypatch.setattr(os, "replace", real_replace)
    synced.clear()
    assert secrets.scrub_file(log, ["tokenvalue"])
    assert synced and log.read_text() == "a <redacted> b\n"
    assert log.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["server.log"]


# ------------------------------------------------ issue 37: what the scrubber may touch


def test_a_referenced_secret_is_scrubbed_whatever_its_length(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 5-character `${DB_PASSWORD}` the server prints is scrubbed from its log lines; a
    reference in no secret position (`--model ${MODEL_DIR}`) is no secret, and an
    unreferenced secret-looking variable is looked for from `MIN_SCRUB_LEN` on."""
    from campaign.campaignfile import ProcessLaunch

    monkeypatch.setenv("DB_PASSWORD", "pw123")
    monkeypatch.setenv("PIN", "4711")
    monkeypatch.setenv("MODEL_DIR", "/models/m1")
    monkeypatch.setenv("OTHER_SECRET", "abc")  # shorter than MIN_SCRUB_LEN, unreferenced
    launch = ProcessLaunch(backend="process", command=["serve"], port=1,
                           args=["--model", "${MODEL_DIR}", "--api-key=${PIN}"],
                           env={"DB_PASSWORD": "${DB_PASSWORD}"})
    server = ProcessServer(launch, _ctx(tmp_path))
    (tmp_path / "server.log").write_text("db pw123, pin 4711, model /models/m1, abc\n")
    assert server.logs() == ["db <redacted>, pin <redacted>, model /models/m1, abc"]


@pytest.mark.parametrize(("tree", "names"), [
    ({"env": {"DB_PASSWORD": "${A}", "PLAIN": "${B}"}}, ["A"]),
    (["--api-key", "${A}", "--model", "${B}"], ["A"]),
    (["--hf-token=${A}", "${MY_TOKEN}"], ["A", "MY_TOKEN"]),
    ("http://${U}:${A}@host:1/${B}", ["U", "A"]),
    ("curl -H 'Authorization: Bearer ${A}' http://x/${B}", ["A"]),
    ("API_KEY=$A B=$B serve --token \"$C\"", ["A", "C"]),
])
def test_secret_references_are_those_in_a_secret_position(tree: Any, names: list[str]
                                                          ) -> None:
    assert sorted(secrets.secret_references(tree)) == sorted(names)


def test_a_variable_naming_where_a_secret_is_kept_is_no_secret() -> None:
    """`SSH_KEY_DIR`, `HF_TOKEN_FILE`, `TLS_KEY_PATH` hold paths: a campaign may give them
    literally, and their values are not scrubbed (a folder the run reads from would read
    `<redacted>` in every message); the secret itself stays one."""
    for name in ("SSH_KEY_DIR", "HF_TOKEN_FILE", "TLS_KEY_PATH", "ssl_keyfile_dir"):
        assert not secrets.is_secret(name), name
    assert secrets.is_secret("HF_TOKEN") and secrets.is_secret("SSH_KEY")
    assert secrets.literal_secrets({"SSL_KEY_FILE": "/etc/k.pem", "API_KEY": "abc"}) == [
        "API_KEY"]
    environ = {"SSH_KEY_DIR": "/lab/campaign", "HF_TOKEN": "hf_value_1"}
    assert secrets.known_values((), environ) == ["hf_value_1"]
    assert secrets.scrub("read /lab/campaign with hf_value_1", environ=environ) == (
        "read /lab/campaign with <redacted>")


def test_structured_fields_are_never_scrubbed_free_text_is() -> None:
    environ = {"LAB_SECRET": "control", "LAB_PASSWORD": "/lab/campaign"}
    record = {"arm": "control", "base_dir": "/lab/campaign", "value": 1.5,
              "reason": "control died in /lab/campaign", "problems": ["control: slow"],
              "rows": [{"arm": "control", "reason": "control cut"}]}
    values = secrets.known_values((), environ)
    assert secrets.scrub_fields(record, {"reason", "problems"}, values) == {
        "arm": "control", "base_dir": "/lab/campaign", "value": 1.5,
        "reason": "<redacted> died in <redacted>", "problems": ["<redacted>: slow"],
        "rows": [{"arm": "control", "reason": "<redacted> cut"}]}


def test_the_journal_keeps_its_structured_fields_whatever_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A secret-looking variable holding the campaign's folder, or an arm's name, leaves
    `base_dir`, arms and rows as they are; free text is scrubbed."""
    from campaign.results import journal as jr

    monkeypatch.setenv("LAB_PASSWORD", str(tmp_path))
    monkeypatch.setenv("LAB_SECRET", "control")
    path = tmp_path / jr.FILE_NAME
    jr.append(path, "registered", "t0", base_dir=str(tmp_path), campaign_path="c.yaml")
    jr.append(path, "pair_invalid", "t1", pair=1, pair_attempt=1,
              reason="control: server died", fault="lane")
    jr.append(path, "pass", "t2", arm="control", name="knee", problems=["control slow"],
              rows=[{"arm": "control", "metric": "ttft_p50", "value": 1.0, "reason": ""}])
    first, invalid, done = [json.loads(line) for line in path.read_text().splitlines()]
    assert first["base_dir"] == str(tmp_path)
    assert invalid["reason"] == "<redacted>: server died"
    assert done["arm"] == "control" and done["rows"][0]["arm"] == "control"
    assert done["problems"] == ["<redacted> slow"]
    assert json.loads(jr.dumps({"base_dir": str(tmp_path), "error": f"in {tmp_path}"})) == {
        "base_dir": str(tmp_path), "error": "in <redacted>"}


def test_an_arm_folder_scrub_leaves_measurements_alone(tmp_path: Path) -> None:
    """Logs are scrubbed of the values; AIPerf's exports and the scrapes only of URL
    passwords (a value that is a number would change a measurement)."""
    (tmp_path / "passes" / "knee").mkdir(parents=True)
    export = tmp_path / "passes" / "knee" / "profile_export.jsonl"
    export.write_text('{"url": "http://u:pw@h", "ttft": 4711.0}\n')
    log = tmp_path / "server.log"
    log.write_text("pin 4711\n")
    assert secrets.scrub_tree(tmp_path, ["4711"]) == [export, log]
    assert export.read_text() == '{"url": "http://u:<redacted>@h", "ttft": 4711.0}\n'
    assert log.read_text() == "pin <redacted>\n"
