"""A normal campaign, whole: the sim template as `spec-ab init` writes it into an empty
folder (not the repository), `check`, `run`, `report` — real simulated servers, real AIPerf,
the real CLI — and every file of the results directory it leaves.

One pair (the template registers two; the second is the first again), on a free port: a
warm-up, a knee of three levels in one AIPerf process, two agent-fixture classes and the
lossless check per arm."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from campaign.results.store import load_run, rule_hash
from campaign.sim.testing import free_port
from tests.e2e.test_run_e2e import journal_events, procs_of
from tests.runs import ROOT

SPEC_AB = [sys.executable, "-m", "campaign"]


def test_sim_template_inits_runs_and_reports_in_an_empty_folder(tmp_path: Path) -> None:
    env = {**os.environ, "COLUMNS": "160",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}

    def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*SPEC_AB, *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=timeout)

    made = cli("init", "--template", "sim", "-o", "campaign.yaml")
    assert made.returncode == 0, made.stderr
    path = tmp_path / "campaign.yaml"
    text = path.read_text().replace("18767", str(free_port()))  # a free port here
    path.write_text(text)
    # the template as written passes its own check (its guardrail shown at no change)
    checked = cli("check", "campaign.yaml", timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "shows it within its limit" in checked.stdout
    # one pair of 32-request agent passes keeps the run short (what is tested is the
    # template's plumbing, not its design)
    assert "\n  pairs: 11\n" in text and "\n    requests: 128\n" in text
    path.write_text(text.replace("\n  pairs: 11\n", "\n  pairs: 1\n")
                    .replace("\n    requests: 128\n", "\n    requests: 32\n"))
    ran = cli("run", "campaign.yaml", "--skip-preflight", "--run-dir-file", "run_dir.txt",
              timeout=900)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    last = ran.stdout.strip().splitlines()[-1]
    assert last.startswith("run_dir=")
    run_dir = Path(last.removeprefix("run_dir="))
    assert (tmp_path / "run_dir.txt").read_text().strip() == str(run_dir)
    assert run_dir.parent == tmp_path / "results"
    assert "Decision:" in ran.stdout and f"spec-ab report {run_dir}" in ran.stdout
    # one pair adopts nothing whatever its guardrails: no guardrail is assessed
    assert "so no candidate would ever be adopted" not in ran.stderr
    # the live status knows the campaign: a total up front, what is left after each arm
    assert "in all (the estimate)" in ran.stdout and "to go" in ran.stdout
    assert not procs_of(run_dir)

    # every file of the results directory
    assert (run_dir / "campaign.yaml").read_text() == path.read_text()
    prereg = json.loads((run_dir / "preregistration.json").read_text())
    assert prereg["sha256"] == rule_hash(prereg["rule"])
    assert prereg["arms"] == ["control", "adaptive"]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["aiperf"].startswith("0.13") and manifest["python"]
    assert manifest["arm_env"]["adaptive"]["SPECAB_SIM_VERIFY"] == "adaptive"
    events = [e["event"] for e in journal_events(run_dir)]
    assert events[0] == "registered" and events[-1] == "finished"
    passes = ("warmup-1", "knee", "agentfix-prose", "agentfix-shell")
    for arm in ("control", "adaptive"):
        d = run_dir / "pairs" / "01" / arm
        assert "Application startup complete" in (d / "server.log").read_text()
        assert (d / "captures" / "spec_decoding.log").read_text().count("SpecDecoding") >= 1
        assert (d / "fidelity.jsonl").is_file()
        for name in passes:
            assert (d / "metrics" / f"{name}-before.prom").is_file()
            assert (d / "metrics" / f"{name}-after.prom").is_file()
            exports = list((d / "passes" / name).rglob("profile_export_aiperf.json"))
            assert exports, f"no AIPerf export for {arm}/{name}"
    data = load_run(run_dir)
    p = data.passes
    assert data.complete and p.valid.all()
    knee = p[(p.workload == "knee") & (p.metric == "output_token_throughput")]
    assert sorted(knee.level) == ["c1", "c1", "c16", "c16", "c4", "c4"]
    assert (knee.value > 0).all()
    acc = p[(p.metric == "acceptance_rate") & (p.workload == "agentfix") & (p.level == "shell")]
    assert len(acc) == 2 and acc.value.between(0.5, 1.0).all()  # shell accepts a lot

    reported = cli("report", str(run_dir), timeout=120)
    assert reported.returncode == 0, reported.stdout + reported.stderr
    assert "adopt" in reported.stdout or "keep-default" in reported.stdout
    doc = cli("report", str(run_dir), "--format", "json", timeout=120)
    assert doc.returncode == 0, doc.stderr
    assert json.loads(doc.stdout)["decision"] in ("adopt", "keep-default")
