"""`spec-ab try`: the campaign it generates from its options (loaded through the same
`load_campaign` as `spec-ab run`), the file it registers for a night, the pairs that fit
its time limit, and every bad combination of options refused with one message, exit 2,
before anything starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from campaign.campaignfile import ExternalLaunch, ProcessLaunch, load_campaign
from campaign.cli import tryout
from campaign.errors import UsageError
from tests.cli import invoke


def _port() -> int:
    return 45678


def _load(doc: dict[str, Any], tmp_path: Path, name: str = "c.yaml") -> Any:
    path = tmp_path / name
    path.write_text(tryout.dump(doc, "a test"), encoding="utf-8")
    return load_campaign(path)


def _doc(tmp_path: Path, **kw: Any) -> tuple[dict[str, Any], Any]:
    args = tryout.TryArgs(**kw)
    launch = tryout.launches(args, _port)
    doc = tryout.campaign_doc(args, launch, 3)
    return doc, _load(doc, tmp_path)


def test_no_launch_is_the_simulated_lane_against_adaptive_verification(tmp_path: Path) -> None:
    _, campaign = _doc(tmp_path)
    assert campaign.arm_names == ["control", "candidate"]
    control, candidate = campaign.launches["control"], campaign.launches["candidate"]
    assert isinstance(control, ProcessLaunch) and isinstance(candidate, ProcessLaunch)
    assert control.command[:3] == ["spec-ab", "sim", "serve"] and control.port == 45678
    assert "SPECAB_SIM_VERIFY" not in control.env
    assert candidate.env["SPECAB_SIM_VERIFY"] == "adaptive"
    assert candidate.env["SPECAB_SIM_TIME_SCALE"] == "8"  # the demo's lane
    pre = campaign.preregistration
    assert pre.sequential is not None and pre.sequential.max_pairs == 3
    assert pre.sequential.min_pairs == 2 and pre.rule == "bound" and pre.margin == 0.10
    assert [(c.workload, c.level) for c in pre.decision_cells] == [("agentfix", "prose")]
    fixtures = campaign.workloads.agentfix.fixtures
    assert sorted(fixtures) == ["prose", "shell"]  # the demo's classes
    assert campaign.workloads.knee is None and campaign.workloads.warmup == []
    assert campaign.lane == "sim-try"
    assert "SPECAB_SIM_VERIFY=adaptive" in campaign.hypothesis


def test_an_env_difference_alone_is_the_candidate_on_the_simulated_lane(tmp_path: Path) -> None:
    _, campaign = _doc(tmp_path, candidate_env=("SPECAB_SIM_DEPTH=7",), margin=0.05)
    candidate = campaign.launches["candidate"]
    assert candidate.env["SPECAB_SIM_DEPTH"] == "7"
    assert "SPECAB_SIM_VERIFY" not in candidate.env  # not the default candidate then
    assert campaign.preregistration.margin == 0.05


def test_two_commands_share_their_program_and_keep_their_own_words(tmp_path: Path) -> None:
    _, campaign = _doc(
        tmp_path, control="vllm serve Qwen/Qwen3-0.6B --port 8011",
        candidate="vllm serve Qwen/Qwen3-0.6B --port 8011 --speculative-config '{\"n\": 3}'",
        control_env=("VLLM_A=1",), model="Qwen/Qwen3-0.6B")
    control, candidate = campaign.launches["control"], campaign.launches["candidate"]
    assert [*control.command, *control.args] == ["vllm", "serve", "Qwen/Qwen3-0.6B",
                                                  "--port", "8011"]
    assert [*candidate.command, *candidate.args] == [
        "vllm", "serve", "Qwen/Qwen3-0.6B", "--port", "8011", "--speculative-config",
        '{"n": 3}']
    assert control.port == candidate.port == 8011
    assert control.env == {"VLLM_A": "1"} and candidate.env == {}  # the control's own
    assert control.cwd == Path.cwd()  # your relative paths, not a temporary folder's
    assert campaign.workloads.model == "Qwen/Qwen3-0.6B"
    assert campaign.workloads.warmup  # a real server is warmed up
    assert campaign.lane == "try"


def test_a_command_without_a_port_listens_on_vllms(tmp_path: Path) -> None:
    _, campaign = _doc(tmp_path, control="vllm serve M", candidate_env=("VLLM_B=1",),
                       model="M")
    assert campaign.launches["control"].port == 8000
    assert campaign.launches["candidate"].env == {"VLLM_B": "1"}


def test_two_running_servers_are_external_arms(tmp_path: Path) -> None:
    _, campaign = _doc(tmp_path, control_url="http://127.0.0.1:8000/",
                       candidate_url="http://127.0.0.1:8001", model="M")
    control, candidate = campaign.launches["control"], campaign.launches["candidate"]
    assert isinstance(control, ExternalLaunch) and isinstance(candidate, ExternalLaunch)
    assert (control.base_url, candidate.base_url) == ("http://127.0.0.1:8000",
                                                      "http://127.0.0.1:8001")


def test_the_file_to_register_is_the_same_campaign_for_a_night(tmp_path: Path) -> None:
    doc, tried = _doc(tmp_path)
    night = _load(tryout.night_doc(doc), tmp_path, "night.yaml")
    assert night.preregistration.sequential.max_pairs == tryout.NIGHT_MAX_PAIRS
    assert night.arm_names == tried.arm_names
    assert night.launches["candidate"].env == tried.launches["candidate"].env
    assert night.preregistration.guardrails == tried.preregistration.guardrails
    assert night.workloads == tried.workloads
    assert doc["preregistration"]["sequential"]["max_pairs"] == 3  # the look's own unchanged


@pytest.mark.parametrize(("limit", "pair_s", "pairs"), [
    (300, 61, 2), (600, 61, 5), (3600, 10, 64)])
def test_the_pairs_that_fit_in_the_time_limit(limit: float, pair_s: float, pairs: int) -> None:
    assert tryout.pairs_within(limit, pair_s) == pairs


def test_a_time_limit_shorter_than_two_pairs_says_what_would_fit() -> None:
    with pytest.raises(UsageError) as exc:
        tryout.pairs_within(120, 61)
    assert "a verdict needs at least 2 pairs" in str(exc.value)
    assert "--time-limit 3m46s or more" in str(exc.value)  # 2 × (61 s × 1.8 + 3 s)


@pytest.mark.parametrize(("text", "seconds"), [
    ("5m", 300), ("90s", 90), ("90", 90), ("1h30m", 5400), ("2.5m", 150)])
def test_time_limits_read_as_people_write_them(text: str, seconds: float) -> None:
    assert tryout.parse_duration(text) == seconds


BAD = [
    (["--candidate", "vllm serve M"], "--candidate needs --control"),
    (["--control", "vllm serve M"], "--control alone compares nothing"),
    (["--control", "vllm serve M", "--candidate", "vllm serve M"], "are the same launch"),
    (["--control", "vllm serve M", "--candidate-env", "X=1"], "--model: name the model"),
    (["--control", "vllm serve M --port 1", "--candidate", "vllm serve M --port 2",
      "--model", "M"], "listen on different ports (1, 2)"),
    (["--control", "vllm serve 'M", "--candidate-env", "X=1"], "not a command line"),
    (["--candidate-env", "SPECAB_SIM_VERIFY"], "--candidate-env SPECAB_SIM_VERIFY: write "
     "NAME=VALUE"),
    (["--control-env", "SPECAB_SIM_VERIFY=adaptive", "--candidate-env",
      "SPECAB_SIM_VERIFY=adaptive"], "the candidate's environment is the control's"),
    (["--candidate-env", "SPECAB_SIM_DEPHT=7"], "SPECAB_SIM_DEPHT"),
    (["--control-url", "http://127.0.0.1:8000"], "give both --control-url and --candidate-url"),
    (["--control-url", "localhost:8000", "--candidate-url", "http://h:1", "--model", "M"],
     "--control-url localhost:8000: not an http(s) URL"),
    (["--control-url", "http://a:1", "--candidate-url", "http://b:1", "--control", "x"],
     "do not go with --control/--candidate commands"),
    (["--time-limit", "soon"], "--time-limit soon: not a duration"),
    (["--time-limit", "0s"], "above zero"),
    (["--time-limit", "1m"], "a verdict needs at least 2 pairs"),
    (["--margin", "lots"], "--margin lots"),
    (["--model", "M"], "the simulated lane serves deepseek-v4.1-flash-sim"),
]


@pytest.mark.parametrize(("argv", "message"), BAD, ids=[m for _, m in BAD])
def test_bad_options_get_one_message_and_exit_2(argv: list[str], message: str,
                                                tmp_path: Path) -> None:
    result = invoke("try", *argv, "--out", str(tmp_path / "results"))
    assert result.code == 2, result.output
    assert message in result.stderr, result.stderr
    assert result.stderr.count("error:") == 1 and "Traceback" not in result.output
    assert not (tmp_path / "results").exists()  # nothing started, nothing written


def test_out_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    result = invoke("try", "--out", str(tmp_path / "f"))
    assert result.code == 2 and "is a file, not a folder" in result.stderr


def test_dry_run_prints_the_exploratory_campaign_and_starts_nothing(tmp_path: Path) -> None:
    result = invoke("try", "--dry-run", "--candidate-env", "SPECAB_SIM_DEPTH=7",
                    "--time-limit", "10m", "--out", str(tmp_path / "results"))
    assert result.code == 0, result.output
    assert result.stdout.startswith("# Generated by `spec-ab try`: an EXPLORATORY look, not "
                                    "pre-registered.")
    assert "SPECAB_SIM_DEPTH: '7'" in result.stdout
    assert "max_pairs: 5" in result.stdout  # 10 minutes at ~113 s a pair
    path = tmp_path / "printed.yaml"
    path.write_text(result.stdout, encoding="utf-8")
    assert load_campaign(path).preregistration.sequential is not None
    assert not (tmp_path / "results").exists()


def test_a_look_the_time_limit_ends_says_so_and_still_writes_the_file_to_register(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner is stopped at the time limit (as Ctrl-C stops it): the look ends with
    what it has, exit 4, marked exploratory, and the file to register is written."""
    from campaign.errors import Interrupted
    from campaign.run import runner
    from campaign.run.measure import manifest

    monkeypatch.setattr(manifest, "collect", lambda campaign: {})
    monkeypatch.setattr(tryout, "pairs_within", lambda limit, pair_s: 2)

    def run_campaign(campaign: Any, text: bytes, out_root: Path, rt: Any, opts: Any) -> Any:
        store = runner.start_run(campaign, text, out_root, rt)
        opts.on_start(store)
        assert rt.cancel.wait(30), "the time limit never stopped the runner"
        raise Interrupted("interrupted; everything measured so far is kept")

    monkeypatch.setattr(runner, "run_campaign", run_campaign)
    said: list[str] = []
    tried = tryout.run_try(tryout.TryArgs(time_limit_s=0.5), tmp_path / "results",
                           tryout.Hooks(say=said.append, note=said.append),
                           free_port=_port)
    assert tried.code == 4
    assert any(s.startswith("run directory: ") for s in said)
    assert tried.lines[0] == ("*** EXPLORATORY, not pre-registered: spec-ab try, an "
                              "afternoon look ***")
    assert "the time limit (1s) ended the look before the design decided" in tried.lines[1]
    assert tried.registered == tried.run_dir.parent / f"{tried.run_dir.name}.registered.yaml"
    night = load_campaign(tried.registered)
    assert night.name == "try-night" and night.preregistration.sequential is not None
    assert night.preregistration.sequential.max_pairs == tryout.NIGHT_MAX_PAIRS
    assert f"          spec-ab check {tried.registered}" in tried.lines
