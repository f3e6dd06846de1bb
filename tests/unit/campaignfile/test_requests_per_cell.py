"""Requests per cell: `workloads.agentfix.requests` per content class and
`workloads.knee.requests_per_level` per level (an int, or a mapping with `"*"` the default),
so a guardrail's cell can be given the requests its tail needs while the decision cell keeps
fewer (issue 36, item 2). Checked through the real command line (`spec-ab check`,
`spec-ab plan`) and the one accessor every consumer asks (`Workloads.requests_in`).

The showable numbers compared here are `verdict.showable`'s normal approximation of the
verdict's own non-inferiority test (its error rates: one-sided α = 1 − confidence = 5% for
showing a guardrail within its limit, power 80% for the resolvable worsening); `spec-ab
plan` simulates the verdict itself."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from campaign.campaignfile import duration, load_campaign
from campaign.campaignfile.checks import thin_tails
from campaign.plan.guards import requests_per_pass
from tests.cli import invoke
from tests.runs import ROOT

DEMO = (ROOT / "examples" / "sim-pair.yaml").read_text()
GUARD_SHELL = ("    - {metric: ttft_p99, max_worsening: 0.25}\n",
               "    - {metric: ttft_p99, max_worsening: 0.25, workload: agentfix, "
               "level: shell}\n")
"""The p99 guardrail on the shell class, outside the decision cell (prose)."""


def _campaign(tmp_path: Path, *edits: tuple[str, str], pairs: int = 4) -> Path:
    text = re.sub(r"\n  pairs: \d+\n", f"\n  pairs: {pairs}\n", DEMO)
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def _agentfix(requests: str) -> tuple[str, str]:
    return ("    requests: 128\n", f"    requests: {requests}\n")


def _check(path: Path) -> tuple[int, str]:
    result = invoke("check", str(path), "--skip-preflight")
    return result.code, result.output


def _shown(output: str) -> tuple[float, float]:
    """(P(shown within the limit at no true change), smallest limit shown 80% of the time)
    of the one ttft_p99 guardrail, as `spec-ab check` prints them (percent)."""
    text = " ".join(output.split())
    m = re.search(r"guardrail ttft_p99 \(limit \+25%\): .*? shows it within its limit "
                  r"(\d+)% of the time at no true change .*? the smallest limit it shows "
                  r"80% of the time is \+(\d+)%", text)
    assert m, text
    return float(m.group(1)), float(m.group(2))


# --------------------------------------------------------------------------- the schema


def test_a_mapping_gives_each_class_its_count_and_star_the_rest(tmp_path: Path) -> None:
    campaign = load_campaign(_campaign(tmp_path, _agentfix('{"*": 32, shell: 400}')))
    wl = campaign.workloads
    assert (wl.requests_in("agentfix", "prose"), wl.requests_in("agentfix", "shell")) == (32,
                                                                                          400)
    assert wl.requests_in("knee", "c16") == 16  # an int: every level
    assert wl.requests_in("agentfix", "code") is None  # not a class of this campaign


@pytest.mark.parametrize("requests, said", [
    ("{shell: 400}", "workloads.agentfix.requests: class prose has no count"),
    ('{"*": 32, shel: 400}', "workloads.agentfix.requests: 'shel' is not a class of "
                              "fixtures"),
])
def test_check_refuses_a_mapping_that_misses_or_invents_a_class(
        tmp_path: Path, requests: str, said: str) -> None:
    code, out = _check(_campaign(tmp_path, _agentfix(requests)))
    text = " ".join(out.split())
    assert code == 2 and said in text, text
    assert "Traceback" not in out


def test_knee_levels_of_their_own_need_one_process(tmp_path: Path) -> None:
    """AIPerf's sweep sends one request count to every level: different counts per level
    need the knee's levels as phases of one process (`one_process: true`)."""
    per_level = ("    requests_per_level: 16\n", "    requests_per_level: {\"*\": 16, "
                 "c16: 400}\n")
    campaign = load_campaign(_campaign(tmp_path / "one", per_level))
    assert [campaign.workloads.requests_in("knee", c) for c in ("c1", "c4", "c16")] == [
        16, 16, 400]
    sweep = ("    one_process: true", "    one_process: false")
    code, out = _check(_campaign(tmp_path / "sweep", per_level, sweep))
    text = " ".join(out.split())
    assert code == 2 and "workloads.knee" in text and "one_process: true" in text, text
    for bad, said in (("{c1: 16, c4: 16}", "level c16 has no count"),
                      ("{\"*\": 16, c8: 400}", "'c8' is not a level of concurrency")):
        code, out = _check(_campaign(tmp_path / bad[:3], ("    requests_per_level: 16\n",
                                                          f"    requests_per_level: {bad}\n")))
        text = " ".join(out.split())
        assert code == 2 and f"workloads.knee.requests_per_level: {said}" in text, text


def test_the_same_count_everywhere_still_runs_as_a_sweep(tmp_path: Path) -> None:
    campaign = load_campaign(_campaign(tmp_path, ("    requests_per_level: 16\n",
                                                  "    requests_per_level: {\"*\": 16}\n"),
                                       ("    one_process: true", "    one_process: false")))
    assert campaign.workloads.requests_in("knee", "c4") == 16


# --------------------------------------------------------------------------- consumers


def test_check_shows_a_guardrail_with_more_requests_better(tmp_path: Path) -> None:
    """The guardrail on shell at 4 pairs: 32 requests per pass (as prose, the decision
    cell) against 400 of its own. More requests, a smaller sampling error: `check`'s
    P(shown within the limit | no change) rises and the smallest limit it resolves falls."""
    few_code, few = _check(_campaign(tmp_path / "few", GUARD_SHELL, _agentfix("32")))
    many_code, many = _check(_campaign(tmp_path / "many", GUARD_SHELL,
                                       _agentfix('{"*": 32, shell: 400}')))
    shown_few, smallest_few = _shown(few)
    shown_many, smallest_many = _shown(many)
    assert many_code == 0, many
    assert "(4 pairs, 400 requests per pass)" in " ".join(many.split())
    assert shown_many > shown_few + 10 and smallest_many < smallest_few - 5
    # the unshowable one is refused and names the cell's own field as a fix
    assert few_code == 2 and "workloads.agentfix.requests.shell" in " ".join(few.split())


def test_plan_models_the_guardrail_on_its_own_requests(tmp_path: Path) -> None:
    path = _campaign(tmp_path, GUARD_SHELL, _agentfix('{"*": 32, shell: 400}'))
    campaign = load_campaign(path)
    assert requests_per_pass(campaign, [("agentfix", "shell")]) == 400
    assert requests_per_pass(campaign, [("agentfix", "prose"), ("agentfix", "shell")]) == 32
    result = invoke("plan", str(path), "-f", "json", "--sims", "200", seconds=120)
    assert result.code == 0, result.output
    rows = json.loads(result.stdout)["table"]
    noise = [g["noise"] for row in rows for g in row.get("guardrails", [])
             if g.get("metric") == "ttft_p99"]
    assert noise and {n["requests"] for n in noise} == {400.0}


def test_thin_tails_are_judged_per_cell_and_name_its_field(tmp_path: Path) -> None:
    """A p99 everywhere (`at: all`): shell with 400 requests has a p99 of its own, prose
    with 32 has not; the knee's 16 per level neither."""
    everywhere = ("    - {metric: ttft_p99, max_worsening: 0.25}\n",
                  "    - {metric: ttft_p99, max_worsening: 0.25, at: all}\n")
    campaign = load_campaign(_campaign(tmp_path, everywhere,
                                       _agentfix('{"*": 32, shell: 400}')))
    thin = thin_tails(campaign)
    assert [(t.workload, t.requests) for t in thin] == [("knee", 16), ("agentfix", 32)]
    said = thin[1].text()
    assert "at agentfix prose:" in said and "workloads.agentfix.requests.prose" in said
    assert "shell" not in said


def test_the_estimate_counts_each_class_at_its_own_requests(tmp_path: Path) -> None:
    """Decode time of the agentfix passes at 100 tok/s × 8 (the sim's time scale) per
    stream, 4 streams, 96 output tokens: 368 more shell requests are 92 more waves of
    96 / 800 s each, per arm."""
    base = duration.estimate(load_campaign(_campaign(tmp_path / "a", _agentfix("32"))))
    more = duration.estimate(load_campaign(_campaign(tmp_path / "b",
                                                     _agentfix('{"*": 32, shell: 400}'))))
    for arm, seconds in base.per_arm_s.items():
        assert more.per_arm_s[arm] - seconds == pytest.approx(92 * 96 / 800)
