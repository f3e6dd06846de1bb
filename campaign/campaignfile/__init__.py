"""The campaign file: its models, `load_campaign(path)` and the local files it names.

    `base`        the strict frozen `Model`, `CONTROL`, `NAME_RE`, the value types
    `launch`      how a server starts: process, external and docker launches, volumes
    `models`      rule, arms, `Campaign`, the arm merge rule
    `workloads`   warm-ups, knee, agent fixtures, rate levels; requests per cell
                  (`Workloads.requests_in`)
    `trace`       `workloads.trace`: the lab's traces, their files checked and summarised
    `sessions`    `workloads.sessions`: multi-turn agent sessions by class, files checked
    `slo`         `preregistration.slo`: the latency bounds SLO attainment counts against
    `gates`       when a pass counts as valid (`preregistration.gates`)
    `fidelity`    the fidelity workload and its guardrail, as registered
    `sequential`  `preregistration.sequential`: a sequential design and the pairs it looks at
    `files`       which local files and folders a campaign names, which are missing, what
                  the existing ones must hold
    `loader`      YAML → `Campaign` (load → merge → check), one `SpecError` line per problem
    `problems`    pydantic's errors in the file's words (YAML path + line)
    `checks`      the cross-field checks (files, ports, levels, pairs)
    `yamlread`    YAML with size and alias limits
    `builtin`     files shipped with spec-ab (`builtin:` paths)
    `schedule`    the slot order a campaign implies (AB, ABBA, random; per lane)
    `duration`    the night's estimated length
    `reference`   docs/campaign-file.md, generated from the models

Import from here: `from campaign.campaignfile import Campaign, load_campaign, DockerLaunch`.
"""

from campaign.campaignfile.base import CONTROL, NAME_RE, Model
from campaign.campaignfile.fidelity import FidelityWorkload
from campaign.campaignfile.files import (
    LocalFile,
    file_problems,
    format_yaml_path,
    local_files,
    missing_files,
)
from campaign.campaignfile.launch import (
    LAUNCH_ADAPTER,
    DockerLaunch,
    Env,
    ExternalLaunch,
    ExtraContainer,
    Gpus,
    Launch,
    LaunchModel,
    ProcessLaunch,
    Readiness,
    ReadyCheck,
    Volume,
    parse_volume,
)
from campaign.campaignfile.loader import load_campaign
from campaign.campaignfile.models import (
    ARM_OWN_FIELDS,
    FIXTURE_CLASSES,
    AgentfixWorkload,
    ArmSpec,
    Campaign,
    DecisionCell,
    DriftFrom,
    Gates,
    Guardrail,
    KneeWorkload,
    LaneSpec,
    Preregistration,
    WarmupPass,
    Workloads,
    merge,
)
from campaign.campaignfile.sequential import Sequential

__all__ = [
    "ARM_OWN_FIELDS",
    "CONTROL",
    "FIXTURE_CLASSES",
    "LAUNCH_ADAPTER",
    "NAME_RE",
    "AgentfixWorkload",
    "ArmSpec",
    "Campaign",
    "DecisionCell",
    "DockerLaunch",
    "DriftFrom",
    "Env",
    "ExternalLaunch",
    "ExtraContainer",
    "FidelityWorkload",
    "Gates",
    "Gpus",
    "Guardrail",
    "KneeWorkload",
    "LaneSpec",
    "Launch",
    "LaunchModel",
    "LocalFile",
    "Model",
    "Preregistration",
    "ProcessLaunch",
    "Readiness",
    "ReadyCheck",
    "Sequential",
    "Volume",
    "WarmupPass",
    "Workloads",
    "file_problems",
    "format_yaml_path",
    "load_campaign",
    "local_files",
    "merge",
    "missing_files",
    "parse_volume",
]
