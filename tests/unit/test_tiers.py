"""The suite's own rules (tests/conftest.py, tests/unit/conftest.py): a test outside the
e2e tier over its time budget fails with its name; the unit tier refuses a child that
serves or measures; each test runs in a lane-lock folder and leftover scope of its own."""

from __future__ import annotations

import os
import sys

import pytest

from campaign.markers import SCOPE_ENV
from tests.runs import ROOT
from tests.unit.guard import serving_child

PY = sys.executable


@pytest.mark.parametrize(("argv", "serves"), [
    (["/venv/bin/aiperf", "profile", "--model", "m"], True),
    ([PY, "-m", "aiperf", "profile"], True),
    (["/venv/bin/aiperf", "--version"], False),
    (["aiperf", "config", "validate", "c.yaml"], False),
    ([PY, "-m", "campaign.sim", "serve", "--port", "1"], True),
    (["spec-ab", "sim", "serve"], True),
    ([PY, "-m", "campaign", "run", "c.yaml"], True),
    ([PY, "-m", "campaign", "run", "c.yaml", "--dry-run"], False),
    ([PY, "-m", "campaign", "-q", "check", "c.yaml", "--boot"], True),
    ([PY, "-m", "campaign", "check", "c.yaml"], False),
    ([PY, "-m", "campaign", "report", "RUN"], False),
    (["docker", "run", "img"], True),
    (["/usr/sbin/sshd", "-D"], True),
    (["ssh-keygen", "-Y", "sign"], False),
    (["/tmp/x/fake-aiperf", "profile"], False),
], ids=lambda v: " ".join(v) if isinstance(v, list) else str(v))
def test_the_unit_tier_knows_a_serving_child(argv: list[str], serves: bool) -> None:
    assert (serving_child(argv) is not None) is serves


def test_a_unit_test_that_starts_a_server_fails_with_where_it_belongs() -> None:
    """The command lines read as the simulated lane, but would start nothing that stays:
    were the guard off, the test fails without leaving a server on a port."""
    import subprocess

    with pytest.raises(AssertionError, match="belongs in tests/integration"):
        subprocess.Popen([PY, "-c", "pass", "-m", "campaign.sim", "serve", "--port", "1"])
    with pytest.raises(AssertionError, match="belongs in tests/integration"):
        subprocess.run(["bash", "-c", "exit 0; exec spec-ab sim serve --port 1"],
                       check=False)


def test_a_unit_test_is_guarded_whatever_ran_before_it(monkeypatch: pytest.MonkeyPatch
                                                      ) -> None:
    """A session given a unit folder's test, then a root-level test, then another unit test
    (an order in which a conftest's autouse fixture was not applied to the last one, so it
    could start a server) still guards every unit test."""
    import subprocess

    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    last = ("tests/unit/test_tiers.py::"
            "test_a_unit_test_that_starts_a_server_fails_with_where_it_belongs")
    out = subprocess.run(
        [PY, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "-n", "0",
         "--setup-show", "-q", "tests/unit/scripts/test_ci_examples.py::"
         "test_example_files_parse_and_name_the_lane", "tests/test_architecture.py::"
         "test_no_import_circle", last],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False).stdout
    (line,) = [ln for ln in out.splitlines() if ln.strip().startswith(last)]
    assert "_unit_guard" in line, out
    (arch,) = [ln for ln in out.splitlines() if "test_architecture.py::" in ln]
    assert "_unit_guard" in arch  # requested everywhere, installed under tests/unit only


def test_a_test_over_its_budget_fails_with_its_name(pytester: pytest.Pytester,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside the e2e tier a test over the budget fails, named, though its body passed; the
    budget is read when the suite starts (here 0.5 s, for a test of 1 s)."""
    monkeypatch.setenv("SPECAB_TEST_BUDGET_S", "0.5")
    pytester.makeconftest("from tests.conftest import *  # noqa: F403\n"
                          "from tests.conftest import pytest_collection_modifyitems, "
                          "pytest_runtest_makereport, pytest_runtest_protocol  # noqa: F401\n")
    pytester.makepyfile(test_slow="import time\n\ndef test_slow():\n    time.sleep(1)\n\n"
                                  "def test_quick():\n    pass\n")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # this checkout's `tests`, not a wheel's
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*test_slow.py::test_slow took 1 s, over the 0 s*"])


SEEN: set[str] = set()


@pytest.mark.parametrize("n", [1, 2])
def test_each_test_has_its_own_lock_folder_and_leftover_scope(
        tmp_path_factory: pytest.TempPathFactory, n: int) -> None:
    """Unit tests too: a unit test whose command scans for leftovers (an in-process
    `spec-ab run`) must not see an e2e test's orphaned server on another worker."""
    locks = os.environ["SPECAB_LOCK_DIR"]
    assert locks.startswith(str(tmp_path_factory.getbasetemp()))
    scope = os.environ[SCOPE_ENV]
    assert scope.startswith("test-") and scope not in SEEN
    SEEN.add(scope)


def test_an_e2e_test_that_judges_no_speed_yields_the_cpu(pytester: pytest.Pytester,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Root (CI): an e2e test not marked `timing` runs niced, and so does what it starts; a
    `timing` one and a budgeted one (unit) run at 0, also right after a niced one."""
    if os.geteuid() != 0:
        pytest.skip("only root can lower a niceness again (CI runs as root)")
    pytester.makeconftest("from tests.conftest import pytest_runtest_setup  # noqa: F401\n")
    pytester.makepyfile(test_nice="""
import os, subprocess, sys
import pytest

def nice():
    return os.getpriority(os.PRIO_PROCESS, 0)

@pytest.mark.e2e
def test_a_yields():
    child = subprocess.run([sys.executable, "-c", "import os; print(os.nice(0))"],
                           capture_output=True, text=True, check=True)
    assert nice() == 8 and child.stdout.strip() == "8"

@pytest.mark.e2e
@pytest.mark.timing
def test_b_timing():
    assert nice() == 0

@pytest.mark.unit
def test_c_budgeted():
    assert nice() == 0
""")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider",
                                           "-o", "markers=e2e\ntiming\nunit")
    result.assert_outcomes(passed=3)


def test_a_group_runs_on_one_worker(pytester: pytest.Pytester,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """`--dist loadgroup` keeps an `xdist_group` on one worker (the gb10 tests share root's
    ssh config; a module fixture's run is built once): the marker the conftest adds counts
    as much as one written in the module."""
    pytester.makeconftest("from tests.conftest import pytest_collection_modifyitems  "
                          "# noqa: F401\n")
    pytester.makepyfile(test_group="""
import os
import pytest

pytestmark = pytest.mark.gb10

@pytest.mark.parametrize("i", range(6))
def test_gb10(i):
    with open("workers.txt", "a") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")

@pytest.mark.xdist_group("written")
@pytest.mark.parametrize("i", range(6))
def test_written(i):
    with open("written.txt", "a") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
""")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    result = pytester.runpytest_subprocess("-n", "3", "--dist", "loadgroup", "-p",
                                           "no:randomly", "-o", "markers=gb10")
    result.assert_outcomes(passed=12)
    for name in ("workers.txt", "written.txt"):
        workers = (pytester.path / name).read_text().split()
        assert len(workers) == 6 and len(set(workers)) == 1, (name, workers)
