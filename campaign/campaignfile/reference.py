"""The campaign-file reference, generated from the pydantic models' own descriptions.

docs/campaign-file.md carries this text between `<!-- reference:start -->` and
`<!-- reference:end -->`; a test fails when they drift apart, and
`python -m campaign.campaignfile.reference --write` refreshes it.
"""

from __future__ import annotations

import sys
import types
import typing
from pathlib import Path

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from campaign import campaignfile as spec
from campaign.campaignfile.sessions import SessionsWorkload
from campaign.campaignfile.slo import Slo
from campaign.campaignfile.trace import TraceWorkload
from campaign.campaignfile.workloads import RateWorkload

SECTIONS: list[tuple[str, type[BaseModel]]] = [
    ("top level", spec.Campaign),
    ("preregistration", spec.Preregistration),
    ("preregistration.gates", spec.Gates),
    ("preregistration.sequential", spec.Sequential),
    ("preregistration.slo", Slo),
    ("preregistration.decision_cells[]", spec.DecisionCell),
    ("preregistration.guardrails[]", spec.Guardrail),
    ("server (backend: process)", spec.ProcessLaunch),
    ("server (backend: docker)", spec.DockerLaunch),
    ("server.extra_containers[] (docker)", spec.ExtraContainer),
    ("server.extra_containers[].ready", spec.ReadyCheck),
    ("server (backend: external)", spec.ExternalLaunch),
    ("server.readiness", spec.Readiness),
    ("arms.<name>", spec.ArmSpec),
    ("lanes.<name>", spec.LaneSpec),
    ("workloads", spec.Workloads),
    ("workloads.warmup[]", spec.WarmupPass),
    ("workloads.knee", spec.KneeWorkload),
    ("workloads.agentfix", spec.AgentfixWorkload),
    ("workloads.rate", RateWorkload),
    ("workloads.trace", TraceWorkload),
    ("workloads.sessions", SessionsWorkload),
    ("workloads.fidelity", spec.FidelityWorkload),
]

START = "<!-- reference:start -->"
END = "<!-- reference:end -->"


def _type_name(annotation: object) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(_type_name(a) for a in args)
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin in (list, tuple):
        return f"list of {_type_name(args[0])}" if args else "list"
    if origin is dict:
        return f"map of {_type_name(args[1])}" if len(args) == 2 else "map"
    if annotation is type(None):
        return "null"
    name = getattr(annotation, "__name__", str(annotation))
    return {"str": "string", "int": "integer", "float": "number", "bool": "boolean",
            "Path": "path", "DriftFrom": "`{from: RUN_DIR}`"}.get(name, name)


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "**required**"
    if info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
        if isinstance(value, BaseModel):
            return "(see below)"
        if isinstance(value, list) and value and isinstance(value[0], BaseModel):
            return "; ".join(str(v.model_dump(exclude_defaults=True)) for v in value)
        return f"`{value}`"
    if info.is_required():  # no default and no factory
        return ""
    return f"`{info.default}`"


def reference() -> str:
    out: list[str] = []
    for title, model in SECTIONS:
        out.append(f"#### `{title}`\n")
        doc = (model.__doc__ or "").strip().splitlines()
        if doc:
            out.append(" ".join(line.strip() for line in doc if line.strip()) + "\n")
        out.append("| key | type | default | meaning |")
        out.append("|---|---|---|---|")
        for name, info in model.model_fields.items():
            if model is spec.ArmSpec and name == "overrides":
                out.append("| *any server key* | as in `server` | | overrides: lists appended, "
                           "maps merged, scalars replaced |")
                continue
            key = info.alias or name
            desc = (info.description or "").replace("|", "\\|")
            out.append(f"| `{key}` | {_type_name(info.annotation)} | {_default(info)} | {desc} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def splice(readme: str) -> str:
    if START not in readme or END not in readme:
        raise ValueError("docs/campaign-file.md has no reference markers")
    head, rest = readme.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{reference()}{END}{tail}"


DOC = Path(__file__).resolve().parents[2] / "docs" / "campaign-file.md"
"""Where the reference lives (between the markers)."""


def main() -> None:
    readme = DOC
    if "--write" in sys.argv:
        readme.write_text(splice(readme.read_text()))
        print(f"updated {readme}")
    else:
        sys.stdout.write(reference())


if __name__ == "__main__":
    main()
