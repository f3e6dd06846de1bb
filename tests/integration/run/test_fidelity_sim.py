"""The fidelity pass's requests against the simulated lane's own faults (a real server, real
sockets, real httpx timeouts): a server that dies after 2 of 5 prompts, or hangs after 2,
gives a pass that is invalid, never a figure; a hung server costs the pass its time, not
that time for every prompt. Short: 16 output tokens, time scale 50, a 3 s pass."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from campaign.run.measure import fidelity as fd
from campaign.sim.testing import running_sim, sim_env
from tests.unit.run.test_fidelity_send import _campaign

ITEMS = [(f"p-{i}", f"Say something about {i}.") for i in range(5)]


def _env(**faults: object) -> dict[str, str]:
    return sim_env(model="the-model", time_scale=50, seed=1, drift_sigma=0, **faults)


def test_a_server_that_dies_after_two_prompts_is_an_invalid_pass(tmp_path: Path) -> None:
    campaign = _campaign(tmp_path, endpoint="chat")
    with running_sim(env=_env(die_after_requests=2)) as sim, httpx.Client() as client:
        out = fd.send(client, sim.base_url, campaign, ITEMS, 20.0)
    assert [("text" in o) for o in out] == [True, True, False, False, False]
    check = fd.judge([out], 1.0, 20.0, None)
    assert not check.valid and check.fault("cand") == "own"
    assert check.problems[0].startswith("3 of 5 fidelity prompts got no answer (first: p-2")


def test_a_server_that_hangs_costs_the_pass_its_time_not_each_request(tmp_path: Path) -> None:
    campaign = _campaign(tmp_path, endpoint="chat")
    with running_sim(env=_env(hang_after_requests=2)) as sim, httpx.Client() as client:
        t0 = time.monotonic()
        out = fd.send(client, sim.base_url, campaign, ITEMS, 3.0)
        took = time.monotonic() - t0
    assert took < 3.0 + 1.0, took  # one 3 s budget, not 3 s for each of 3 hung prompts
    assert [("text" in o) for o in out[:2]] == [True, True]
    assert out[2]["error"].startswith("ReadTimeout")
    assert [o["error"] for o in out[3:]] == [fd.NOT_ASKED] * 2
    check = fd.judge([out], took, 3.0, None)
    assert not check.valid and check.fault("control") == "lane"
