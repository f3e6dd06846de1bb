"""A sequential design for real: `examples/sim-sequential.yaml` (up to 6 pairs, a look
after each from the 2nd) on the simulated lane with real AIPerf and the real CLI.

To keep the night short the copies keep only the decision pass (agent-fixture prose, the
demo's 32 requests at 4 streams; no warm-up: the simulated lane has nothing to warm), at
the example's own time scale (a faster one shrinks the latencies until a loaded host's
jitter moves the TTFT guardrail). The
demo's candidate (adaptive verification, +25% there) must stop with ADOPT before its 6th
pair; an A/A copy (the candidate is the control's launch) must not adopt."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from campaign.results import journal as jr
from campaign.sim.testing import free_port
from tests.runs import ROOT

pytestmark = pytest.mark.timing  # verdicts on measured speed

EXAMPLE = ROOT / "examples" / "sim-sequential.yaml"


def _campaign(tmp_path: Path, *, aa: bool) -> Path:
    yaml = YAML()
    doc: Any = yaml.load(EXAMPLE.read_text())
    port = free_port()
    server = doc["server"]
    server["command"] = ["spec-ab", "sim", "serve", "--host", "127.0.0.1", "--port", str(port)]
    server["port"] = port
    doc["lane"] = f"seq-{port}"
    del doc["workloads"]["knee"]
    doc["workloads"]["warmup"] = []
    del doc["workloads"]["agentfix"]["fixtures"]["shell"]
    if aa:
        doc["arms"]["adaptive"] = {"description": "the control's launch (A/A)"}
    path = tmp_path / "campaign.yaml"
    with path.open("w") as fh:
        yaml.dump(doc, fh)
    return path  # builtin: fixtures resolve wherever the copy lives


def _run(tmp_path: Path, path: Path) -> tuple[Path, dict[str, Any]]:
    out = tmp_path / "results"
    run = subprocess.run([sys.executable, "-m", "campaign", "run", str(path), "--out", str(out)],
                         capture_output=True, text=True, timeout=1500, check=False, cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    run_dir = Path(run.stdout.strip().splitlines()[-1].split("=", 1)[1])
    rep = subprocess.run([sys.executable, "-m", "campaign", "report", str(run_dir),
                          "--format", "json"], capture_output=True, text=True, timeout=300,
                         check=False)
    assert rep.returncode in (0, 4), rep.stderr
    return run_dir, json.loads(rep.stdout)


def test_the_demo_candidate_stops_with_adopt_before_its_sixth_pair(tmp_path: Path) -> None:
    run_dir, doc = _run(tmp_path, _campaign(tmp_path, aa=False))
    assert doc["decision"] == "adopt", doc["reasons"]
    (cand,) = doc["candidates"]
    seq = cand["sequential"]
    assert seq["state"] == "adopt" and seq["stopped_at"] < 6
    events = jr.read_journal(run_dir)
    looks = jr.looks_of(events)
    # a look after every pair from the 2nd up to the stop, none skipped or added
    assert sorted(looks) == list(range(2, seq["stopped_at"] + 1))
    assert looks[seq["stopped_at"]]["stop"] is True
    assert [lk["pairs"] for lk in seq["looks"]] == sorted(looks)
    started = {ev["pair"] for ev in jr.of_kind(events, "pair_start")}
    assert max(started) == seq["stopped_at"]  # nothing measured after the stop
    (finished,) = jr.of_kind(events, "finished")
    assert finished["complete"] is True and finished["stopped_after"] == seq["stopped_at"]


def test_an_aa_copy_never_adopts(tmp_path: Path) -> None:
    _, doc = _run(tmp_path, _campaign(tmp_path, aa=True))
    assert doc["decision"] == "keep-default", doc["reasons"]
    (cand,) = doc["candidates"]
    assert cand["sequential"]["state"] in ("keep-default", "inconclusive")
