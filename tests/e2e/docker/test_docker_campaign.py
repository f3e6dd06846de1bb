"""`spec-ab run` of a docker campaign on the offline sim image, through the real CLI in a
subprocess: two pairs end to end, Ctrl-C in the middle, and `--dry-run`'s docker lines.

The campaign is tests/docker/sim-docker-pair.yaml (candidate = an env var + a patched
file bind-mounted over a file in the image), made smaller and given a free port here.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from campaign.markers import LABEL_RUN
from tests.runs import ROOT, SIM_IMAGE, free_port

pytestmark = pytest.mark.docker

TEMPLATE = ROOT / "tests" / "docker" / "sim-docker-pair.yaml"
SPEC_AB = [sys.executable, "-m", "campaign"]




def _campaign(tmp_path: Path, *, name: str, knee_levels: list[int], pass_timeout: float = 180,
              boot_delay: str = "0.5") -> Path:
    """The template with a free port, absolute paths and smaller passes."""
    yaml = YAML()
    data = yaml.load(TEMPLATE.read_text())
    port = free_port()
    data["name"] = name
    data["lane"] = f"sim-docker-{name}"
    server = data["server"]
    server["port"] = port
    server["ports"] = [f"{port}:8000"]
    server["env"]["SPECAB_SIM_BOOT_DELAY"] = boot_delay
    patch = TEMPLATE.parent / "patches" / "overrides.yaml"
    volumes = data["arms"]["patched"]["volumes"]
    volumes[0] = f"{patch}:{volumes[0].split(':', 1)[1]}"
    data["workloads"]["tokenizer"] = str(ROOT / "fixtures" / "tokenizer")
    data["workloads"]["warmup"] = []
    data["workloads"]["knee"]["concurrency"] = knee_levels
    data["preregistration"]["gates"]["pass_timeout_s"] = pass_timeout
    buf = io.StringIO()
    yaml.dump(data, buf)
    path = tmp_path / "campaign.yaml"
    path.write_text(buf.getvalue())
    return path


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "SPECAB_LOCK_DIR": str(tmp_path / "locks")}


def _containers_of(engine: Any, name: str) -> list[Any]:
    return [c for c in engine.containers.list(all=True, filters={"label": LABEL_RUN},
                                                 ignore_removed=True)
            if name in c.labels.get(LABEL_RUN, "")]


def _remove(engine: Any, name: str) -> None:
    for c in _containers_of(engine, name):
        c.remove(force=True)


def test_two_pair_docker_campaign_end_to_end(engine: Any, tmp_path: Path) -> None:
    name = f"dk-e2e-{uuid.uuid4().hex[:6]}"
    campaign = _campaign(tmp_path, name=name, knee_levels=[1])
    out = tmp_path / "results"
    try:
        proc = subprocess.run([*SPEC_AB, "run", str(campaign), "--out", str(out)],
                              capture_output=True, text=True, timeout=600, cwd=ROOT,
                              env=_env(tmp_path), check=False)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert _containers_of(engine, name) == []
    finally:
        _remove(engine, name)
    (run_dir,) = [d for d in out.iterdir() if d.is_dir()]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    servers = manifest["servers"]
    assert sorted(servers) == ["01/control", "01/patched", "02/control", "02/patched"]
    image_id = engine.images.get(SIM_IMAGE).id
    for facts in servers.values():
        assert facts["backend"] == "docker"
        assert facts["containers"][0]["image_id"] == image_id
    (mount,) = servers["01/patched"]["bind_mounts"]
    patch = TEMPLATE.parent / "patches" / "overrides.yaml"
    assert mount["sha256"] == hashlib.sha256(patch.read_bytes()).hexdigest()
    assert mount["read_only"] is True
    # The candidate really ran patched: its own log says so, the control's does not.
    patched_log = (run_dir / "pairs" / "01" / "patched" / "server.log").read_text()
    control_log = (run_dir / "pairs" / "01" / "control" / "server.log").read_text()
    assert '"effect": 1.25' in patched_log and '"verify": "adaptive"' in patched_log
    assert '"effect"' not in control_log
    report = subprocess.run([*SPEC_AB, "report", str(run_dir), "--format", "json"],
                            capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
    assert report.returncode == 0, report.stderr
    verdict = json.loads(report.stdout)
    (cell,) = [c for c in verdict["cells"] if (c["workload"], c["level"], c["metric"])
               == ("knee", "c1", "output_token_throughput")]
    # Both pairs complete. (The verdict itself is not asserted: on a shared 2-core runner
    # the sim's timing noise can swamp its ground-truth effect of +25%.)
    assert len(cell["pairs"]) == 2
    assert verdict["decision"] in ("adopt", "keep-default")


def test_ctrl_c_during_a_docker_campaign_leaves_no_container(
    engine: Any, tmp_path: Path
) -> None:
    name = f"dk-int-{uuid.uuid4().hex[:6]}"
    campaign = _campaign(tmp_path, name=name, knee_levels=[1, 4], boot_delay="5")
    out = tmp_path / "results"
    proc = subprocess.Popen([*SPEC_AB, "run", str(campaign), "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT,
                            env=_env(tmp_path), start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not any(c.status == "running" for c in _containers_of(engine, name)):
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
            assert time.monotonic() < deadline, "no container started"
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        output, _ = proc.communicate(timeout=120)
        assert proc.returncode == 130, output.decode()[-3000:]
        assert _containers_of(engine, name) == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        _remove(engine, name)


def test_dry_run_prints_docker_run_lines(engine: Any, tmp_path: Path) -> None:
    campaign = _campaign(tmp_path, name="dk-dry", knee_levels=[1])
    proc = subprocess.run([*SPEC_AB, "run", str(campaign), "--dry-run"], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, env=_env(tmp_path), check=False)
    assert proc.returncode == 0, proc.stderr
    lines = [x for x in proc.stdout.splitlines() if "docker run -d" in x]
    assert any(":ro" in x and "SPECAB_SIM_VERIFY=adaptive" in x for x in lines), proc.stdout
    assert _containers_of(engine, "dk-dry") == []
