"""Files shipped with spec-ab that a campaign can name as `builtin:NAME`: the tokenizer of
the simulated lane, the agent-fixture prompts, agent sessions and a short bursty trace
(package data, installed with spec-ab)."""

from __future__ import annotations

from pathlib import Path

BUILTIN_PREFIX = "builtin:"
BUILTIN_DIR = Path(__file__).resolve().parent.parent / "fixtures"
"""Files shipped inside the package (installed with spec-ab, editable or not): the
tokenizer of the simulated lane and the agent-fixture prompts."""


def builtin_names() -> list[str]:
    """What `builtin:` can name: `builtin:tokenizer`, `builtin:agentfix/<class>`,
    `builtin:sessions/<class>`, `builtin:traces/<name>`."""
    names = ["builtin:tokenizer"]
    names += sorted(f"builtin:{folder}/{p.stem}" for folder in ("agentfix", "sessions", "traces")
                    for p in (BUILTIN_DIR / folder).glob("*.jsonl"))
    return names


def builtin_path(path: Path | str) -> Path | None:
    """The shipped file a `builtin:NAME` path names (`builtin:tokenizer`,
    `builtin:agentfix/prose`, `.jsonl` optional), or None for any other path.

    An unknown name resolves to a path that does not exist, reported like any missing
    file (with the list of shipped names)."""
    text = str(path)
    if not text.startswith(BUILTIN_PREFIX):
        return None
    name = text[len(BUILTIN_PREFIX):].strip().strip("/")
    target = (BUILTIN_DIR / name).resolve()
    if not target.is_relative_to(BUILTIN_DIR):  # `builtin:../x` names nothing shipped
        return BUILTIN_DIR / "-"
    if name.startswith(("agentfix/", "sessions/", "traces/")) and not target.suffix:
        target = target.with_suffix(".jsonl")
    return target
