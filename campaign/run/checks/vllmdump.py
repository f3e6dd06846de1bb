"""Run by an engine's own Python, never imported by spec-ab: vLLM's server flags and
environment variables as one JSON object on stdout, offline, without a model or a GPU.

`campaign.run.checks.vllmengine` sends this file's text to the interpreter of a process launch
(`python -`) or into a docker image (`python3 -c`), once per engine, and caches what it
prints. It needs only the standard library and vLLM itself, and works with vLLM ≥ 0.6
(the parser moved from `vllm.entrypoints.openai.cli_args` to
`vllm.entrypoints.launchers.cli_args` in 0.32). Building the parser imports torch (10-20 s);
the environment variables come from `vllm/envs.py` loaded by path (0.2 s, no torch).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import io
import json
import pathlib
import sys
import time
from typing import Any

FORMAT = 1
"""The layout of the JSON below; a cached dump of another format is introspected again."""
MARKER = "SPEC-AB-VLLM-DUMP "
"""The line carrying the JSON starts with this (vLLM may print its own lines)."""


def _env_names() -> list[str]:
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("vllm is not installed for this Python")
    root = pathlib.Path(next(iter(spec.submodule_search_locations)))
    envs_spec = importlib.util.spec_from_file_location("_spec_ab_vllm_envs", root / "envs.py")
    if envs_spec is None or envs_spec.loader is None:
        raise ImportError(f"no envs.py in {root}")
    module = importlib.util.module_from_spec(envs_spec)
    envs_spec.loader.exec_module(module)
    return sorted(module.environment_variables)


def _first(*names: str) -> Any:
    """The first of `module:attribute` names that imports."""
    for name in names:
        module, attr = name.split(":")
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError):
            continue
    raise ImportError("none of " + ", ".join(names))


def _parser() -> argparse.ArgumentParser:
    flexible = _first("vllm.utils.argparse_utils:FlexibleArgumentParser",
                      "vllm.utils:FlexibleArgumentParser")
    make = _first("vllm.entrypoints.launchers.cli_args:make_arg_parser",
                  "vllm.entrypoints.openai.cli_args:make_arg_parser")
    parser: argparse.ArgumentParser = make(flexible(prog="vllm serve"))
    return parser


def _action(action: argparse.Action) -> dict[str, Any]:
    """One argument as plain data: its option strings (none: a positional), how many
    values it takes, and its choices when the parser compares them as written."""
    nargs = action.nargs if isinstance(action.nargs, int | str) or action.nargs is None else "?"
    choices = None
    if action.choices is not None and action.type in (None, str):
        listed = list(action.choices)
        if all(isinstance(c, str) for c in listed):
            choices = listed
    return {"options": list(action.option_strings), "dest": action.dest, "nargs": nargs,
            "choices": choices}


def dump() -> dict[str, Any]:
    start = time.perf_counter()
    env_vars = _env_names()
    with contextlib.redirect_stdout(io.StringIO()):
        version = str(getattr(importlib.import_module("vllm"), "__version__", "unknown"))
        parser = _parser()
    actions = [a for a in parser._actions if a.dest != "help"]
    options = [a for a in actions if a.option_strings]
    return {
        "format": FORMAT,
        "vllm_version": version,
        "python": sys.version.split()[0],
        "options": sorted({o for a in options for o in a.option_strings}),
        "takes_value": sorted({o for a in options if a.nargs != 0 for o in a.option_strings}),
        "boolean_optional": sorted(a.option_strings[0] for a in options
                                   if isinstance(a, argparse.BooleanOptionalAction)),
        "actions": [_action(a) for a in actions],
        "env_vars": env_vars,
        "seconds": round(time.perf_counter() - start, 2),
    }


if __name__ == "__main__":
    print(MARKER + json.dumps(dump()), flush=True)
