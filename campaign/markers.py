"""How a run marks everything it starts, spelled once.

Containers carry labels (`LABEL_*`), process-backend children carry environment
variables (`*_ENV`, set by `marked_children`). `spec-ab clean` reads the same names to
find what a dead runner left behind, so every writer and reader imports them from here.
A leaf module: it imports nothing from `campaign`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

# ------------------------------------------------------------------ container labels

LABEL_RUN = "spec-ab.run"
"""The run id."""
LABEL_PAIR = "spec-ab.pair"
LABEL_ARM = "spec-ab.arm"
LABEL_ROLE = "spec-ab.role"
"""`server`, or an extra container's name."""
LABEL_LAUNCH = "spec-ab.launch"
"""One id per arm launch: stop() removes everything carrying it."""
LABEL_PID = "spec-ab.pid"
"""The runner's pid."""
LABEL_PID_START = "spec-ab.pid-start"
"""The runner's start time (pids are reused)."""
LABEL_HOST = "spec-ab.runner-host"
"""The host the runner runs on."""
LABEL_LANE = "spec-ab.lane"
"""The campaign's lane (a leftover of another lane does not hold this one)."""
LABEL_SCOPE = "spec-ab.scope"
"""The runner's `SPECAB_SCOPE`, when it has one (`SCOPE_ENV`)."""

# ------------------------------------------------------------------ environment markers

RUN_ENV = "SPECAB_RUN_ID"
RUNNER_PID_ENV = "SPECAB_RUNNER_PID"
"""Every child a run starts carries these in its environment (`spec-ab clean` finds the
ones whose runner is gone)."""
ARM_ENV = "SPECAB_ARM"
PAIR_ENV = "SPECAB_PAIR"
LANE_ENV = "SPECAB_LANE"
SCOPE_ENV = "SPECAB_SCOPE"
"""A namespace for leftovers on a machine whose runs share no GPU (parallel CI jobs on the
simulated lane, a test suite): a runner with `SPECAB_SCOPE` set judges, and `spec-ab clean`
removes, only the leftovers carrying the same value (children inherit it; containers get
`LABEL_SCOPE`). Unset, the default, every leftover on the machine counts."""
TMPDIR_PREFIX = "spec-ab-aiperf-"
"""AIPerf's private TMPDIR is `<tmp>/spec-ab-aiperf-<runner pid>-<random>`: a runner killed
with SIGKILL cannot remove it, `spec-ab clean` does once that pid is gone."""


def scope() -> str:
    """This process's leftover scope (`SCOPE_ENV`): "" when unset, i.e. the whole machine."""
    return os.environ.get(SCOPE_ENV, "")


def run_labels(run_id: str, pair: int | str, arm: str) -> dict[str, str]:
    """The labels naming one arm of one pair of a run."""
    return {LABEL_RUN: run_id, LABEL_PAIR: str(pair), LABEL_ARM: arm}


@contextmanager
def marked_children(run_id: str, lane: str) -> Iterator[None]:
    """Every child started inside (servers, AIPerf and its workers) inherits the run id,
    the lane and this pid in its environment, so `spec-ab clean` can find what a crashed
    runner (SIGKILL, power loss) left behind, and say whose it is."""
    saved = {k: os.environ.get(k) for k in (RUN_ENV, RUNNER_PID_ENV, LANE_ENV)}
    os.environ[RUN_ENV] = run_id
    os.environ[RUNNER_PID_ENV] = str(os.getpid())
    os.environ[LANE_ENV] = lane
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


__all__ = [
    "ARM_ENV",
    "LABEL_ARM",
    "LABEL_HOST",
    "LABEL_LANE",
    "LABEL_LAUNCH",
    "LABEL_PAIR",
    "LABEL_PID",
    "LABEL_PID_START",
    "LABEL_ROLE",
    "LABEL_RUN",
    "LABEL_SCOPE",
    "LANE_ENV",
    "PAIR_ENV",
    "RUNNER_PID_ENV",
    "RUN_ENV",
    "SCOPE_ENV",
    "TMPDIR_PREFIX",
    "marked_children",
    "run_labels",
    "scope",
]
