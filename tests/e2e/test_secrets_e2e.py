"""No planted secret, in any form, reaches a file of the results folder or an output.

Eight planted secrets on the simulated lane, through the real command line (`python -m
campaign` in a subprocess): a literal `--hf-token` and `--api-key` in `args` are refused,
the same through `${NAME}` references are accepted; a `user:pass@` base_url of an external
server is refused, with `${NAME}` accepted; a token in a `start_hook` is refused; the
runner's environment holds `HF_ENDPOINT` with a password in its userinfo, `HF_TOKEN` and
`API_KEY`; the server prints `HF_TOKEN`'s value (and the other argument's) into its log.
After `check`, `run --dry-run` and a real one-pair run, every file under the results folder
is read (bytes) and no planted value is in any of them, nor in stdout/stderr.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from campaign.sim.testing import free_port
from tests.runs import ROOT

SPEC_AB = [sys.executable, "-m", "campaign"]


def cli(*args: str, env: dict[str, str], timeout: float = 300
        ) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*SPEC_AB, *args], capture_output=True, timeout=timeout, cwd=ROOT,
                          env=env, check=False)


def campaign(port: int, *, args: str, server_extra: str = "") -> str:
    fix = ROOT / "fixtures"
    # The server proves it got the expanded values ($2 and $4 are the arguments after
    # `sh`), prints them into its log, then becomes the simulator.
    script = (f'echo "booting: token $HF_TOKEN, args $2 $4"; '
              f'test "$2" = "$E2E_EXPECT_HF" && test "$4" = "$E2E_EXPECT_VAL" && '
              f"exec spec-ab sim serve --port {port}")
    return f"""
name: secrets
hypothesis: test
lane: secrets-{port}
preregistration:
  pairs: 1
  decision_cells: [{{workload: knee, level: c1}}]
  gates: {{retries: 0, pair_retries: 0, min_completed_requests: 2, pass_timeout_s: 120,
          min_output_tokens: 10}}
server:
  backend: process
  command: [sh, -c, '{script}', sh]
  args: {args}
  port: {port}
  env:
    SPECAB_SIM_MODEL: e2e-model
    SPECAB_SIM_TIME_SCALE: "40"
    SPECAB_SIM_SEED: "1"
    HF_TOKEN: ${{HF_TOKEN}}{server_extra}
  readiness: {{timeout_s: 30}}
arms:
  control: {{}}
  cand:
    env:
      SPECAB_SIM_DEPTH: "7"
workloads:
  model: e2e-model
  tokenizer: {fix}/tokenizer
  warmup: []
  knee:
    concurrency: [1]
    input_tokens: 32
    output_tokens: 16
    requests_per_level: 4
log_captures:
  boot: "booting"
"""


def external(port: int, *, base_url: str, hook: str = "true") -> str:
    fix = ROOT / "fixtures"
    return f"""
name: secrets-external
hypothesis: test
lane: secrets-ext-{port}
preregistration:
  pairs: 1
  decision_cells: [{{workload: knee, level: c1}}]
server:
  backend: external
  base_url: "{base_url}"
  start_hook: "{hook}"
arms:
  control: {{}}
  cand: {{}}
workloads:
  model: e2e-model
  tokenizer: {fix}/tokenizer
  knee: {{concurrency: [1], input_tokens: 32, output_tokens: 16, requests_per_level: 4}}
"""


def leaks(folder: Path, planted: dict[str, str]) -> list[str]:
    return [f"{p.relative_to(folder)}: {what}" for p in sorted(folder.rglob("*"))
            if p.is_file() for what, value in planted.items()
            if value.encode() in p.read_bytes()]


def test_eight_planted_secrets_reach_no_file_and_no_output(tmp_path: Path) -> None:
    hf = "hf_" + uuid.uuid4().hex  # hf_ + 32 alnum: a Hugging Face token's shape
    key = "key-" + uuid.uuid4().hex
    val = "val-" + uuid.uuid4().hex  # read through ${E2E_APIVAL}: no secret-looking name
    pw = "pw-" + uuid.uuid4().hex
    mirror_pw = "mpw-" + uuid.uuid4().hex
    hook_token = "tok-" + uuid.uuid4().hex
    planted = {"HF_TOKEN": hf, "API_KEY": key, "E2E_APIVAL": val, "url password": pw,
               "HF_ENDPOINT password": mirror_pw, "start_hook token": hook_token}
    env = {**os.environ, "SPECAB_LOCK_DIR": str(tmp_path / "locks"), "HF_TOKEN": hf,
           "API_KEY": key, "E2E_APIVAL": val, "E2E_PW": pw,
           "HF_ENDPOINT": f"https://mirror:{mirror_pw}@mirror.example",
           "E2E_EXPECT_HF": hf, "E2E_EXPECT_VAL": val}
    outputs: list[bytes] = []
    port = free_port()

    def refused(text: str, fix: str, line: int) -> None:
        path = tmp_path / f"refused-{uuid.uuid4().hex[:6]}.yaml"
        path.write_text(text)
        for args in (["check", str(path), "--no-preflight"], ["run", str(path), "--dry-run"]):
            proc = cli(*args, env=env)
            message = proc.stderr.decode()
            assert proc.returncode == 2, proc.stdout + proc.stderr
            assert fix in message and f"(line {line})" in message, message
            outputs.append(proc.stdout + proc.stderr)

    # 1, 2: literal values after --hf-token and --api-key are refused, with the fix
    refused(campaign(port, args=f"[--hf-token, {hf}, --api-key, x]"),
            "--hf-token ${HF_TOKEN}", 13)
    refused(campaign(port, args=f'[--hf-token, "${{HF_TOKEN}}", "--api-key={key}"]'),
            "--api-key=${API_KEY}", 13)
    # 4: a password in an external server's URL; 6: a token in a start_hook
    refused(external(port, base_url=f"http://bob:{pw}@127.0.0.1:{port}"),
            "http://bob:${PASSWORD}@", 10)
    refused(external(port, base_url=f"http://127.0.0.1:{port}",
                     hook=f"launch-server --token {hook_token}"), "--token ${TOKEN}", 11)
    # 5: the URL's password as a reference is accepted (check and dry run)
    ok = tmp_path / "external.yaml"
    ok.write_text(external(port, base_url=f"http://bob:${{E2E_PW}}@127.0.0.1:{port}"))
    for args in (["check", str(ok), "--no-preflight"], ["run", str(ok), "--dry-run"]):
        proc = cli(*args, env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert b"http://bob:${E2E_PW}@127.0.0.1" in proc.stdout
        outputs.append(proc.stdout + proc.stderr)

    # 3, 7, 8: references in args accepted and expanded at launch; the run for real
    good = tmp_path / "campaign.yaml"
    good.write_text(campaign(port, args='[--hf-token, "${HF_TOKEN}", --api-key, '
                                        '"${E2E_APIVAL}"]'))
    out = tmp_path / "results"
    for args in (["check", str(good), "--no-preflight"], ["run", str(good), "--dry-run"]):
        proc = cli(*args, env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert b'--hf-token "${HF_TOKEN}" --api-key "${E2E_APIVAL}"' in proc.stdout
        outputs.append(proc.stdout + proc.stderr)
    proc = cli("run", str(good), "--out", str(out), env=env)
    outputs.append(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = next(d for d in out.iterdir() if d.is_dir())
    log = (run_dir / "pairs" / "01" / "control" / "server.log").read_text()
    # the server started: it was given the expanded values, and printed them (scrubbed)
    assert "booting: token <redacted>, args <redacted> <redacted>" in log
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["runner_env"]["HF_ENDPOINT"] == "https://mirror:<redacted>@mirror.example"
    assert manifest["runner_env"]["HF_TOKEN"] == "<not recorded>"
    launches = [json.loads(line).get("launch") for line in
                (run_dir / "journal.jsonl").read_text().splitlines()]
    assert any('--hf-token "${HF_TOKEN}"' in str(x) for x in launches if x)
    assert "${E2E_APIVAL}" in (run_dir / "campaign.yaml").read_text()

    assert leaks(run_dir, planted) == []
    assert [what for what, value in planted.items()
            if any(value.encode() in o for o in outputs)] == []


def test_an_unset_reference_is_a_warning_at_check(tmp_path: Path) -> None:
    port = free_port()
    path = tmp_path / "campaign.yaml"
    path.write_text(campaign(port, args='[--hf-token, "${HF_TOKEN}", --api-key, '
                                        '"${E2E_UNSET_VALUE}"]'))
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "E2E_UNSET_VALUE")}
    proc = cli("check", str(path), "--no-preflight", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    err = proc.stderr.decode()
    assert ("warning: arm cand: args[3] references ${E2E_UNSET_VALUE}, which is not set "
            "in this environment") in err
    assert "warning: arm control: env.HF_TOKEN references ${HF_TOKEN}" in err
    assert "warning: arm control: args[1] references ${HF_TOKEN}" in err
