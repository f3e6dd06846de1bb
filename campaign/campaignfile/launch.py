"""How an arm's server is started: the process, external and docker launch models.

`Launch` is the tagged union (on `backend`) that `server:` and each merged arm validate
against; `parse_volume` reads a `host:container[:ro|rw]` volume.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    Field,
    TypeAdapter,
    ValidationInfo,
    field_validator,
    model_validator,
)

from campaign import secrets
from campaign.campaignfile.base import (
    NAME_RE,
    READ_BACK,
    Int,
    Model,
    check_regex,
    close_hint,
    invisible,
    shown,
)


class Readiness(Model):
    """How the runner decides a server is ready: port, health, model list, one request."""

    health_path: str = Field("/health", description="GET path that answers 200 when ready.")
    models_path: str = Field("/v1/models", description="GET path listing the served models.")
    probe_request: bool = Field(
        True, description="Send one 1-token completion before declaring ready."
    )
    timeout_s: float = Field(900, gt=0, description="Boot timeout (seconds).")
    poll_interval_s: float = Field(
        0.05, gt=0, le=10, description="Polling interval while booting (seconds)."
    )
    expected_boot_s: float | None = Field(
        None, ge=0, description="How long this server usually takes to become ready "
        "(seconds), for the duration estimate; default by backend (docker 420 s, process "
        "5 s), and learned from the lane's earlier runs once there are some.")

    @field_validator("health_path", "models_path")
    @classmethod
    def _a_path(cls, v: str) -> str:
        if "://" in v:
            raise ValueError(f"'{v}' is a URL: give the path alone ({urlsplit(v).path or '/'})")
        if not v.startswith("/"):
            raise ValueError(f"'{v}' must start with '/': write /{v}")
        if re.search(r"\s", v):
            raise ValueError(f"'{v}' holds a space: write the path as the URL has it (%20)")
        return v


class Volume(Model):
    """A parsed `host:container[:ro|rw]` volume."""

    source: str
    target: str
    read_only: bool | None = None
    """None: files read-only, directories and named volumes read-write."""

    @property
    def is_named(self) -> bool:
        return "/" not in self.source and not self.source.startswith(".")

    def spec(self) -> str:
        mode = "" if self.read_only is None else (":ro" if self.read_only else ":rw")
        return f"{self.source}:{self.target}{mode}"


def parse_volume(text: str) -> Volume:
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1]:
        raise ValueError(f"'{text}' is not host:container[:ro|rw]")
    read_only: bool | None = None
    if len(parts) == 3:
        if parts[2] not in ("ro", "rw"):
            raise ValueError(f"'{text}': mode must be ro or rw, not '{parts[2]}'")
        read_only = parts[2] == "ro"
    if not parts[1].startswith("/"):
        raise ValueError(f"'{text}': container path '{parts[1]}' must be absolute")
    return Volume(source=parts[0], target=parts[1], read_only=read_only)


def _volumes(v: list[str]) -> list[str]:
    for item in v:
        parse_volume(item)
    return v


def _env_name(name: str) -> str:
    if not name:
        raise ValueError("an environment variable needs a name (this one is empty)")
    if hidden := invisible(name):  # the server would get a variable no one can type
        meant = "".join(c for c in name if c not in hidden)
        raise ValueError(f"'{shown(name)}' is not an environment variable name"
                         + close_hint(name, [meant]))
    if "=" in name:
        raise ValueError(f"'{name}' is not an environment variable name: it contains '=', "
                         "which separates a name from its value in the environment; rename "
                         "the variable")
    return name


# READ_BACK (base): the validation context key of a frozen copy read back, not a campaign
# about to run.


def _env_value(value: str, info: ValidationInfo) -> str:
    """Only `${NAME}` is expanded (`secrets.expand`): any other `${…}` (a shell default,
    `${BAR:-x}`) would reach the server as written."""
    bad = secrets.unexpanded_references(value)
    if bad and not (info.context or {}).get(READ_BACK):
        name = re.match(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", bad[0])
        fix = (f"write ${{{name.group(1)}}} and set {name.group(1)} in the runner's environment"
               if name else
               "write the value itself, or ${NAME} for a variable of the runner's environment")
        raise ValueError(f"'{bad[0]}' is not expanded: only ${{NAME}} is (a variable name "
                         "alone: no default, no other shell syntax), so the server would get "
                         f"the text as written; {fix}")
    return value


Env = dict[Annotated[str, AfterValidator(_env_name)], Annotated[str, AfterValidator(_env_value)]]
ENV_REFS = ("; `${NAME}` (alone or inside a value) is read from the runner's environment at "
            "launch, and only that form: `${NAME:-default}` or other shell syntax is refused.")


def _env_as_strings(cls: Any, v: Any, info: ValidationInfo) -> Any:
    """YAML writes `FOO: 1` and `BAR: true`; the environment only holds strings. A secret's
    value is refused (except when a frozen copy is read back for a report: `READ_BACK`)."""
    if isinstance(v, Mapping):
        env = {str(k): _scalar_str(x) for k, x in v.items()}
        literal = secrets.literal_secrets({k: x for k, x in env.items() if isinstance(x, str)})
        if literal and not (info.context or {}).get(READ_BACK):
            names = ", ".join(literal)
            raise ValueError(
                f"{names}: a secret's value does not belong in the campaign file (it is "
                f"frozen into every results folder); reference the runner's environment "
                f"instead: {literal[0]}: ${{{literal[0]}}}")
        urls = [p for x in env.values() if isinstance(x, str) for p in secrets.url_problems(x)]
        if urls and not (info.context or {}).get(READ_BACK):
            raise ValueError(urls[0])
        return env
    return v


def _refuse(problems: list[str], info: ValidationInfo) -> None:
    if problems and not (info.context or {}).get(READ_BACK):
        raise ValueError("; ".join(problems))


def _no_literal_argv(cls: Any, v: Any, info: ValidationInfo) -> Any:
    """A command or args list: no literal value after a secret-looking flag, no token shape
    (`secrets.argv_problems`); `${NAME}` is expanded at launch."""
    if isinstance(v, list) and all(isinstance(w, str) for w in v):
        _refuse(secrets.argv_problems(v), info)
    return v


def _no_literal_shell(cls: Any, v: Any, info: ValidationInfo) -> Any:
    """A shell command: no literal secret (`secrets.shell_problems`)."""
    if isinstance(v, str):
        _refuse(secrets.shell_problems(v) + secrets.url_problems(v), info)
    return v


def _no_url_password(cls: Any, v: Any, info: ValidationInfo) -> Any:
    """A URL: no literal password in its userinfo (`${NAME}` is expanded at connect time)."""
    if isinstance(v, str):
        _refuse(secrets.url_problems(v), info)
    return v


def _scalar_str(x: Any) -> Any:
    if isinstance(x, bool):
        return "1" if x else "0"
    if isinstance(x, int | float):
        return str(x)
    return x


def _ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def _yaml_host(host: str) -> str:
    return f'"{host}"' if ":" in host else host


def _port_inside(given: str, host: str, port: object) -> str:
    return (f"'{given}' has a port in it: give the host alone (host: {_yaml_host(host)}) and "
            f"the port under `port:` (port: {port})")


def check_host(v: str) -> str:
    """A host name or IP address the runner connects to; an IPv6 address is kept bare
    (`[::1]` is read as `::1`; `url_host` brackets it in URLs). A port or a URL is refused."""
    bracketed = re.fullmatch(r"\[([^\]]*)\](?::(\d*))?", v)
    if bracketed:
        inner, port = bracketed.groups()
        if not _ipv6(inner):
            raise ValueError(f"'{v}': brackets hold an IPv6 address, e.g. [::1]")
        if port is not None:
            raise ValueError(_port_inside(v, inner, port))
        return inner
    if "://" in v:
        host = urlsplit(v).hostname or ""
        port = re.search(r":(\d+)(?:/|$)", v.split("://", 1)[1])
        also = f" and the port under `port:` (port: {port.group(1)})" if port else ""
        raise ValueError(f"'{v}' is a URL: give the host alone (host: {_yaml_host(host)}){also}")
    if _ipv6(v):
        return v
    if v.count(":") == 1:
        host, port_text = v.split(":")
        raise ValueError(_port_inside(v, host, port_text))
    if not v or ":" in v or re.search(r"[\s/\\@?#]", v):
        raise ValueError(f"'{v}' is not a host name or IP address (e.g. 127.0.0.1, localhost, "
                         "gpu-box.lan or ::1)")
    return v


def url_host(host: str) -> str:
    """A host as a URL writes it: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host else host


class _LaunchBase(Model):
    readiness: Readiness = Field(default_factory=Readiness, description="Readiness checks.")
    env: Env = Field(default_factory=dict,
                     description="Environment variables of the server" + ENV_REFS)
    command: list[str] = Field(default_factory=list, description="Command (argv list).")
    args: list[str] = Field(
        default_factory=list, description="Arguments appended to `command` (arms append more); a "
        "secret only as `${NAME}` (`--hf-token ${HF_TOKEN}`), expanded at launch."
    )

    _env_ok = field_validator("env", mode="before")(_env_as_strings)
    _argv_ok = field_validator("command", "args", mode="after")(_no_literal_argv)

    @property
    def argv(self) -> list[str]:
        return [*self.command, *self.args]


class ProcessLaunch(_LaunchBase):
    """A server started as a local command in its own process group."""

    backend: Literal["process"] = Field(description="`process`: a local command.")
    cwd: Path | None = Field(None, description="Working directory (default: campaign's).")
    host: str = Field("127.0.0.1", description="Host the server listens on (an IPv6 "
                      "address bare, `::1`).")
    port: Int = Field(ge=1, le=65535, description="Port the server listens on.")
    stop_timeout_s: float = Field(15, gt=0, description="Grace period before SIGKILL.")

    _host_ok = field_validator("host")(check_host)

    @model_validator(mode="after")
    def _needs_command(self) -> ProcessLaunch:
        if not self.command:
            raise ValueError("command: a process server needs a command")
        return self

    @property
    def base_url(self) -> str:
        return f"http://{url_host(self.host)}:{self.port}"


class ExternalLaunch(Model):
    """A server that is already running (or started by your own hook commands)."""

    backend: Literal["external"] = Field(description="`external`: a running URL.")
    base_url: str = Field(description="http://host:port of the OpenAI-compatible server; a "
                          "password only as a reference, `http://user:${PASSWORD}@host:port` "
                          "(expanded at connect time, redacted in every file).")
    start_hook: str | None = Field(
        None, description="Shell command run to start the arm (a secret only as `$NAME`).")
    stop_hook: str | None = Field(None, description="Shell command run to stop the arm.")
    hook_timeout_s: float = Field(600, gt=0, description="Time limit of a hook (seconds).")
    env: Env = Field(default_factory=dict,
                     description="Environment given to the hooks" + ENV_REFS)
    _env_ok = field_validator("env", mode="before")(_env_as_strings)
    args: list[str] = Field(
        default_factory=list, description="Extra words appended to the start hook."
    )
    readiness: Readiness = Field(default_factory=Readiness, description="Readiness checks.")
    _argv_ok = field_validator("args", mode="after")(_no_literal_argv)
    _hooks_ok = field_validator("start_hook", "stop_hook", mode="after")(_no_literal_shell)
    _url_ok = field_validator("base_url", mode="after")(_no_url_password)

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not re.match(r"^https?://[^/\s]+", v):
            raise ValueError(f"'{v}' is not an http(s) URL")
        try:
            _ = urlsplit(v).port
        except ValueError:
            raise ValueError(f"'{v}': what follows the host's last ':' is not a port; an IPv6 "
                             "address is written in brackets, e.g. http://[::1]:8000") from None
        return v.rstrip("/")


class ReadyCheck(Model):
    """How an extra container shows it is ready."""

    log_regex: str | None = Field(None, description="Ready when a log line matches this.")
    command: list[str] | None = Field(None, description="Ready when this exec exits 0.")
    timeout_s: float = Field(300, gt=0, description="How long to wait (seconds).")

    @model_validator(mode="after")
    def _one(self) -> ReadyCheck:
        if (self.log_regex is None) == (self.command is None):
            raise ValueError("give exactly one of log_regex or command")
        if self.log_regex is not None:
            check_regex(self.log_regex)
        return self

    _argv_ok = field_validator("command", mode="after")(_no_literal_argv)


Gpus = Literal["all"] | list[Int] | None


class _ContainerBase(Model):
    image: str = Field(description="Image reference (must be present locally unless pull).")
    entrypoint: list[str] | None = Field(None, description="Entrypoint override.")
    command: list[str] = Field(default_factory=list, description="Container command (argv).")
    args: list[str] = Field(
        default_factory=list, description="Arguments appended to `command` (arms append more); a "
        "secret only as `${NAME}` (`--hf-token ${HF_TOKEN}`), expanded at launch."
    )
    env: Env = Field(default_factory=dict, description="Environment variables" + ENV_REFS)
    volumes: list[str] = Field(
        default_factory=list,
        description="`host:container[:ro|rw]`; bind-mounted files are read-only by default.",
    )
    network: str | None = Field(None, description="`host`, or a docker network name.")
    gpus: Gpus = Field(None, description="`all`, or a list of device ids.")
    ipc: str | None = Field(None, description="IPC mode, e.g. `host`.")
    shm_size: str | None = Field(None, description="Shared memory size, e.g. `16g`.")
    ulimits: dict[str, Int] = Field(default_factory=dict, description="e.g. {memlock: -1}.")
    docker_host: str | None = Field(
        None, description="Docker daemon of this container, e.g. `ssh://spark2` (None: local)."
    )

    _volumes_ok = field_validator("volumes")(_volumes)
    _env_ok = field_validator("env", mode="before")(_env_as_strings)
    _argv_ok = field_validator("entrypoint", "command", "args", mode="after")(_no_literal_argv)

    @property
    def argv(self) -> list[str]:
        return [*self.command, *self.args]


class ExtraContainer(_ContainerBase):
    """A container started before the server (e.g. a Ray worker on a second node)."""

    name: str = Field(pattern=NAME_RE, description="Short name, unique within the arm.")
    ready: ReadyCheck | None = Field(None, description="Readiness of this container.")


class DockerLaunch(_ContainerBase):
    """A server started as a container through the docker SDK."""

    backend: Literal["docker"] = Field(description="`docker`: containers.")
    host: str = Field("127.0.0.1", description="Host where the runner reaches the server "
                      "(an IPv6 address bare, e.g. `fd00::5`; `::1` only with `network: host`).")
    port: Int = Field(ge=1, le=65535, description="Host port the runner talks to.")
    ports: list[str] = Field(
        default_factory=list, description="Published ports `host:container` (not with host "
        "network)."
    )
    pull: bool = Field(False, description="Pull the image if missing (default: refuse).")
    stop_timeout_s: float = Field(60, gt=0, description="Graceful stop timeout (seconds).")
    extra_containers: list[ExtraContainer] = Field(
        default_factory=list, description="Started in order before the server, stopped after."
    )
    readiness: Readiness = Field(default_factory=Readiness, description="Readiness checks.")

    _host_ok = field_validator("host")(check_host)

    @field_validator("host")
    @classmethod
    def _published_host(cls, v: str, info: ValidationInfo) -> str:
        """Docker publishes a loopback host's port on 127.0.0.1 (`servers.docker.plan`):
        an IPv6 loopback host would never see it."""
        loopback = _ipv6(v) and ipaddress.IPv6Address(v).is_loopback
        if loopback and info.data.get("network") != "host":
            raise ValueError(f"'{v}': docker publishes a loopback host's port on 127.0.0.1 "
                             f"(IPv4), where the runner would not find it at [{v}]; use host: "
                             "127.0.0.1, or network: host")
        return v

    @field_validator("ports")
    @classmethod
    def _ports(cls, v: list[str]) -> list[str]:
        for p in v:
            if not re.fullmatch(r"(\d+\.\d+\.\d+\.\d+:)?\d+:\d+(/tcp|/udp)?", p):
                raise ValueError(f"{p!r} is not host:container")
        return v

    @model_validator(mode="after")
    def _network(self) -> DockerLaunch:
        if self.network == "host" and self.ports:
            raise ValueError("ports cannot be published with network: host")
        names = [c.name for c in self.extra_containers]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"extra container names repeat: {', '.join(sorted(dup))}")
        return self

    @property
    def base_url(self) -> str:
        return f"http://{url_host(self.host)}:{self.port}"


Launch = Annotated[ProcessLaunch | ExternalLaunch | DockerLaunch, Field(discriminator="backend")]
LAUNCH_ADAPTER: TypeAdapter[ProcessLaunch | ExternalLaunch | DockerLaunch] = TypeAdapter(Launch)
LaunchModel = ProcessLaunch | ExternalLaunch | DockerLaunch
