"""A sequential design for real: `examples/sim-sequential.yaml` (up to 12 pairs, a look
after each from the 3rd, p99 TTFT within +25%) on the simulated lane with real AIPerf and
the real CLI, at the example's registered design.

To keep the night short the copies keep only the decision pass (agent-fixture prose, the
example's 200 requests at 4 streams; no warm-up: the simulated lane has nothing to warm),
at the example's own time scale (a faster one shrinks the latencies until a loaded host's
jitter moves the TTFT guardrail). Issue "Guardrails that protect", on real campaigns:

- a candidate about +30% faster (every step 1.45× faster, its prefill 24× dearer) whose
  p99 TTFT is about +130% worse is not adopted, and the report says why in its first lines
  (measured on a quiet host: +29.6%, p99 TTFT +128.3%, the night stopped at pair 3). At a
  prefill 16× dearer (+34.5%, p99 TTFT +58% to +62%) it was the issue's "about +50%", but
  a CI host's p99 jitter kept that campaign going to its 12th pair: 907 s of the suite's
  longest test; the edge of the promise (2× the limit) is measured through the verdict
  instead, by scripts/guardrail-rates (docs/verdict.md);
- the same speed-up without the dearer prefill (every step 1.45× faster) stops with ADOPT on
  a quiet host (measured: +44.7%, adopted at pair 6, every guardrail shown), and on a
  loaded one adopts or says its guardrail is unresolved, never broken;
- an A/A copy (the candidate is the control's launch) adopts nothing and breaks no
  guardrail.

The example registers an SLO (ttft 40 ms, itl 8 ms): the slow-first-token night also shows
its shares measured from each pass's own requests."""

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

# verdicts on measured speed; a campaign may run the design's 12 pairs (~40 s an arm under
# load): beyond the suite's 600 s default
pytestmark = [pytest.mark.timing, pytest.mark.timeout(1800)]

EXAMPLE = ROOT / "examples" / "sim-sequential.yaml"


FASTER = {"SPECAB_SIM_EFFECT": "1.45"}
"""About +45% decode throughput on prose at 4 streams, TTFT better (the step times are
divided by 1.45, the first token's too)."""
SLOW_FIRST_TOKEN = {"SPECAB_SIM_EFFECT": "1.45", "SPECAB_SIM_COST_PREFILL_MS_PER_TOKEN": "1.2"}
"""About +30% decode throughput (the dearer prefill slows the steps it is in) with p99
TTFT about +130% (measured: +128.3% over 3 pairs)."""


def _campaign(tmp_path: Path, *, aa: bool = False, env: dict[str, str] | None = None) -> Path:
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
    elif env is not None:
        doc["arms"]["adaptive"] = {"description": "a changed launch", "env": env}
    path = tmp_path / "campaign.yaml"
    with path.open("w") as fh:
        yaml.dump(doc, fh)
    return path  # builtin: fixtures resolve wherever the copy lives


def _run(tmp_path: Path, path: Path) -> tuple[Path, dict[str, Any]]:
    out = tmp_path / "results"
    run = subprocess.run([sys.executable, "-m", "campaign", "run", str(path), "--out", str(out)],
                         capture_output=True, text=True, timeout=1700, check=False, cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    run_dir = Path(run.stdout.strip().splitlines()[-1].split("=", 1)[1])
    rep = subprocess.run([sys.executable, "-m", "campaign", "report", str(run_dir),
                          "--format", "json"], capture_output=True, text=True, timeout=300,
                         check=False)
    assert rep.returncode in (0, 4), rep.stderr
    return run_dir, json.loads(rep.stdout)


def test_a_faster_candidate_adopts_or_says_its_guardrail_is_unresolved(
        tmp_path: Path) -> None:
    """On a quiet host it adopts (measured: +44.7% at 1.45×, adopted at pair 6 with every
    guardrail shown). A loaded CI host moves a pass's p99 by tens of percent (a CI run of
    this test measured +51.6% at pair 2 for a candidate whose TTFT is no worse): then the
    +25% guardrail may stay unresolved to max_pairs, and the verdict must say so — never
    adopt without it, never call it broken."""
    run_dir, doc = _run(tmp_path, _campaign(tmp_path, env=FASTER))
    (cand,) = doc["candidates"]
    seq = cand["sequential"]
    own = [g for g in doc["guardrails"] if g["role"] == "guardrail"]
    assert not any(g["state"] == "broken" for g in own), own
    if doc["decision"] != "adopt":
        assert doc["reason"] == "guardrail-unresolved", doc["reasons"]
        assert doc["reasons"][0].startswith("look "), doc["reasons"]
        assert any("ttft_p99 at agentfix prose" in r for r in doc["reasons"][:3])
        return
    # adopted at a look, the last one (pair 12) included: a loaded CI host ran this night
    # to its 12th pair, and the look there adopted with every guardrail shown
    assert seq["state"] == "adopt" and 3 <= seq["stopped_at"] <= 12, seq
    # every guardrail shown within its limit at the look that adopts
    assert all(g["state"] == "holds" for g in own)
    events = jr.read_journal(run_dir)
    looks = jr.looks_of(events)
    # a look after every pair from the 3rd up to the stop, none skipped or added
    assert sorted(looks) == list(range(3, seq["stopped_at"] + 1))
    assert looks[seq["stopped_at"]]["stop"] is True
    assert [lk["pairs"] for lk in seq["looks"]] == sorted(looks)
    started = {ev["pair"] for ev in jr.of_kind(events, "pair_start")}
    assert max(started) == seq["stopped_at"]  # nothing measured after the stop
    (finished,) = jr.of_kind(events, "finished")
    assert finished["complete"] is True and finished["stopped_after"] == seq["stopped_at"]


def test_the_same_candidate_with_a_slow_first_token_is_not_adopted(tmp_path: Path) -> None:
    _, doc = _run(tmp_path, _campaign(tmp_path, env=SLOW_FIRST_TOKEN))
    assert doc["decision"] == "keep-default", doc["reasons"]
    assert doc["reason"] in ("guardrail", "guardrail-unresolved"), doc["reasons"]
    (cand,) = doc["candidates"]
    assert cand["sequential"]["state"] in ("keep-default", "inconclusive")
    # the first lines say why: the guardrail, its estimate and bound
    assert "ttft_p99 at agentfix prose" in " ".join(doc["reasons"][:2]), doc["reasons"]
    (g,) = [g for g in doc["guardrails"] if g["role"] == "guardrail"
            and g["metric"] == "ttft_p99"]
    assert g["stops"] and g["change"] > 0.15, g
    # the registered SLO (ttft 40 ms, itl 8 ms): measured from each pass's own requests
    ttft = _cell(doc, "ttft_slo_attainment")
    assert 0 <= ttft["candidate"] < ttft["control"] <= 1, ttft  # its first token is later
    assert ttft["kind"] == "absolute", ttft  # a share: its change in points
    share, goodput = _cell(doc, "slo_attainment"), _cell(doc, "goodput")
    assert share["candidate"] <= ttft["candidate"] and goodput["control"] > 0, (share, goodput)


def _cell(doc: dict[str, Any], metric: str) -> dict[str, Any]:
    (cell,) = [c for c in doc["cells"] if c["metric"] == metric
               and (c["workload"], c["level"]) == ("agentfix", "prose")]
    return cell


def test_an_aa_copy_never_adopts_and_breaks_no_guardrail(tmp_path: Path) -> None:
    _, doc = _run(tmp_path, _campaign(tmp_path, aa=True))
    assert doc["decision"] == "keep-default", doc["reasons"]
    (cand,) = doc["candidates"]
    assert cand["sequential"]["state"] in ("keep-default", "inconclusive")
    assert not any(g["state"] == "broken" for g in doc["guardrails"]), doc["guardrails"]
