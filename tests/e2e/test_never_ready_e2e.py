"""A candidate that never boots, for real (simulated lane, process backend, the CLI in a
subprocess): its server exits 2 on an unknown simulator knob that `check` cannot see
(the wrapper sets it), twice; the run stops at once (exit 3) saying to fix the file and
start anew, and every report format leads with the boot error."""

from __future__ import annotations

import json
from pathlib import Path

from campaign.sim.testing import free_port
from tests.e2e.test_run_e2e import (
    campaign_text,
    journal_events,
    lock_env,
    out,
    procs_of,
    run_cli,
    run_dir_of,
    write_campaign,
)

__all__ = ["out"]  # the fixture, imported from test_run_e2e

ERROR = "error: environment variable SPECAB_SIM_DEPHT: unknown knob 'depht'"
LEAD = f"depth7 never became ready (pair 1): server exited with code 2 while booting: {ERROR}"


def never_booting(port: int) -> str:
    """The e2e campaign with its candidate renamed depth7, whose wrapper exports a
    misspelled knob (E2E_BAD_KNOB set only for it)."""
    text = campaign_text(port)
    text = text.replace(
        f'command: [spec-ab, sim, serve, --port, "{port}"]',
        f"""command: [sh, -c, 'test -n "$E2E_BAD_KNOB" && export SPECAB_SIM_DEPHT=7; """
        f"""exec spec-ab sim serve --port {port}']""")
    return text.replace('  cand:\n    env:\n      SPECAB_SIM_DEPTH: "7"',
                        '  depth7:\n    env:\n      SPECAB_SIM_DEPTH: "7"\n'
                        '      E2E_BAD_KNOB: "1"')


def test_a_candidate_that_never_boots_stops_the_run_and_leads_every_report(
        tmp_path: Path, out: Path) -> None:
    path = write_campaign(tmp_path, never_booting(free_port()))
    # the boot check would find it before the run (tests/unit/run/test_run_bootcheck.py):
    # what is tested here is a run whose arm never became ready in its slot
    proc = run_cli("run", str(path), "--out", str(out), "--skip-boot-check",
                   env=lock_env(tmp_path))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert f"error: {LEAD}" in proc.stderr
    assert f"fix the campaign file and start a new run: `spec-ab run {path}`" in proc.stderr
    assert "`--resume` would boot it again" in proc.stderr
    run_dir = run_dir_of(out)
    assert not procs_of(run_dir)
    events = journal_events(run_dir)
    assert [e["event"] for e in events].count("slot_failed") == 2
    (launch,) = [e for e in events if e["event"] == "launch_error"]
    assert launch["error"] == ERROR and launch["arm"] == "depth7"

    for fmt in ("table", "markdown", "json", "html"):
        rep = run_cli("report", str(run_dir), "--format", fmt, env={"COLUMNS": "400"})
        assert rep.returncode == 0, rep.stdout + rep.stderr
        head = "\n".join(rep.stdout.splitlines()[:3])
        shown = LEAD.replace("'", "&#x27;") if fmt == "html" else LEAD
        assert shown in head, (fmt, head)
        assert "--resume" not in rep.stdout, fmt
    data = json.loads(run_cli("report", str(run_dir), "--format", "json").stdout)
    assert data["never_ready"] == LEAD
    assert data["never_ready_arms"] == [{"arm": "depth7", "pair": 1,
                                         "status": "exited with code 2", "error": ERROR}]
    assert "start a new run: spec-ab run" in data["settle"]
    table = run_cli("report", str(run_dir), env={"COLUMNS": "400"}).stdout
    assert "cannot be checked" not in table and "no-data" not in table.split(
        "Decision cells, in detail")[1]
    assert table.count("depth7: none of its") == 1
    assert len(table.splitlines()) < 40
