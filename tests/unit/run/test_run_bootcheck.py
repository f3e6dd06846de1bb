"""A new run boots each distinct launch once before its first measured pass (issue 39, 7:
`run` measured a whole control arm, 20-40 min on a GB300, before it found that the
candidate could not boot). A launch that does not become ready stops the run with the boot
check's message and exit 3, and nothing is measured or kept; `--skip-boot-check` skips
it, a resume never repeats it, and an external launch has nothing to boot. Fake servers
here (test_runner's); the real sim lane through the CLI at the end."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from campaign.errors import PreflightError
from campaign.run import runner
from campaign.run.checks.bootcheck import Boot
from campaign.run.guards import cleanup
from campaign.run.guards.cleanup import Scan
from tests.cli import invoke
from tests.unit.run.test_runner import CAMPAIGN, Script, _campaign, listener, make_rt

__all__ = ["listener"]  # the fixture, imported for pytest

GUARDS = runner.RunOptions(find_leftovers=lambda c: Scan(), preflight=lambda c: ([], []),
                           shown_as="c.yaml")


def _opts(**kw: object) -> runner.RunOptions:
    import dataclasses

    return dataclasses.replace(GUARDS, **kw)  # type: ignore[arg-type]


def test_a_launch_that_cannot_boot_stops_a_new_run_before_anything_is_measured(
        tmp_path: Path, listener: int) -> None:
    campaign = _campaign(tmp_path, CAMPAIGN)
    events: list[str] = []
    script = Script()
    # the candidate's launch exits while booting (the control's, the first slot's, boots
    # for its pair at once: not booted twice)
    rt = make_rt(tmp_path, listener, script, events, die_on_start=[True])
    booting: list[list[str]] = []
    booted: list[Boot] = []
    with pytest.raises(PreflightError) as info:
        runner.run_campaign(campaign, None, tmp_path / "results", rt,
                            opts=_opts(on_boot=booting.append, on_booted=booted.append))
    assert info.value.exit_code == 3
    text = str(info.value)
    assert text.startswith("boot check: 1 of 1 launch(es) did not become ready (cand); "
                           "nothing was measured"), text
    assert info.value.hint is not None and "spec-ab run c.yaml" in info.value.hint
    assert "--skip-boot-check" in info.value.hint
    assert script.calls == []  # not one pass
    assert events == ["start 0/cand", "stop 0/cand"]
    assert booting == [["cand"]]
    assert [b.ok for b in booted] == [False]
    assert booted[0].error is not None and "exited with code 1" in booted[0].error
    results = tmp_path / "results"
    assert not results.exists() or not any(results.iterdir())  # no run folder is left


def test_a_new_run_boots_each_launch_but_the_first_slots_once_then_measures(
        tmp_path: Path, listener: int) -> None:
    """The first slot's launch (the control's, order AB) boots at once for pair 1, before
    anything is measured: booting it twice would cost a large model's boot for nothing."""
    campaign = _campaign(tmp_path, CAMPAIGN)
    events: list[str] = []
    rt = make_rt(tmp_path, listener, Script(), events)
    result = runner.run_campaign(campaign, None, tmp_path / "results", rt, opts=GUARDS)
    assert result.complete
    assert events[:3] == ["start 0/cand", "stop 0/cand", "start 1/control"]
    assert not any(e.startswith("start 0/") for e in events[2:])


def test_skip_boot_check_measures_at_once(tmp_path: Path, listener: int) -> None:
    campaign = _campaign(tmp_path, CAMPAIGN)
    events: list[str] = []
    rt = make_rt(tmp_path, listener, Script(), events)
    result = runner.run_campaign(campaign, None, tmp_path / "results", rt,
                                 opts=_opts(boot_check=False))
    assert result.complete and events[0] == "start 1/control"


def test_a_resume_does_not_boot_check_again(tmp_path: Path, listener: int) -> None:
    from campaign.errors import Interrupted

    campaign = _campaign(tmp_path, CAMPAIGN)
    seen: list[Path] = []
    rt = make_rt(tmp_path, listener, Script(interrupt_at=3), [])
    with pytest.raises(Interrupted):
        runner.run_campaign(campaign, None, tmp_path / "results", rt,
                            opts=_opts(on_start=lambda s: seen.append(s.run_dir)))
    events: list[str] = []
    rt2 = make_rt(tmp_path, listener, Script(), events)
    store, frozen = runner.reopen_run(seen[0], rt2)
    result = runner.run_campaign(frozen, None, None, rt2, opts=_opts(resume=store))
    assert result.complete and events[0] == "start 1/control"


def test_an_external_launch_is_not_booted(tmp_path: Path, listener: int) -> None:
    text = CAMPAIGN.replace("""  backend: process
  command: [never-run]
  port: 1
""", f"""  backend: external
  base_url: http://127.0.0.1:{listener}
""")
    campaign = _campaign(tmp_path, text)
    events: list[str] = []
    booting: list[list[str]] = []
    rt = make_rt(tmp_path, listener, Script(), events)
    result = runner.run_campaign(campaign, None, tmp_path / "results", rt,
                                 opts=_opts(on_boot=booting.append))
    assert result.complete and booting == [] and events[0] == "start 1/control"


# ------------------------------------------------------------------ the CLI, real processes

FAILING = """\
name: never-boots
hypothesis: h
lane: never-boots-{port}
results_dir: results
preregistration:
  rule: bound
  sequential: {{max_pairs: 6, min_pairs: 2}}
  decision_cells: [{{workload: knee, level: c1}}]
server:
  backend: process
  command: ["{python}", -c, "import sys; print('error: no model here'); sys.exit(1)"]
  port: {port}
  readiness: {{poll_interval_s: 0.05, timeout_s: 10}}
arms:
  control: {{}}
  cand: {{env: {{X: "1"}}}}
workloads:
  model: m
  tokenizer: builtin:tokenizer
  knee: {{concurrency: [1], requests_per_level: 8}}
"""


@pytest.fixture()
def never_boots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from campaign.sim.testing import free_port

    monkeypatch.setattr(cleanup, "find_leftovers", lambda **kw: cleanup.Scan())
    monkeypatch.setenv("SPECAB_LOCK_DIR", str(tmp_path / "locks"))
    path = tmp_path / "c.yaml"
    path.write_text(FAILING.format(port=free_port(), python=sys.executable))
    return path


def test_cli_run_stops_at_the_boot_check_with_exit_3_and_no_folder(never_boots: Path) -> None:
    res = invoke("run", str(never_boots), "--skip-preflight")
    assert res.code == 3, res.output
    assert "✗ cand: failed after" in res.stdout and "control:" not in res.stdout
    assert "error: no model here" in res.stdout
    assert "boot check: 1 of 1 launch(es) did not become ready (cand)" in res.stderr
    assert "--skip-boot-check" in res.stderr
    results = never_boots.parent / "results"
    assert not results.exists() or not any(results.iterdir())


def test_cli_run_skip_boot_check_registers_and_boots_in_the_first_pair(
        never_boots: Path) -> None:
    res = invoke("run", str(never_boots), "--skip-preflight", "--skip-boot-check")
    assert res.code == 3, res.output
    assert "boot check" not in res.output
    assert "never became ready (pair 1)" in res.output
    assert any((never_boots.parent / "results").iterdir())


def test_cli_run_first_line_says_a_sequential_design(never_boots: Path) -> None:
    """Issue 39, 4: the first line of a sequential run says it is one."""
    res = invoke("run", str(never_boots), "--skip-preflight")
    first = res.stdout.splitlines()[0]
    assert "up to 6 pairs, looks from pair 2, may stop early" in first, res.stdout
