"""Secrets never reach a file or the screen: the one place that decides what is secret.

A secret-looking environment name contains TOKEN, KEY, SECRET or PASSWORD (any case;
also PASSWD and CREDENTIAL). `TOKENIZERS_*` and `*_TOKENS` are counts and switches, not
credentials, and so is a per-token quantity (`DECODE_DELAY_PER_TOKEN_MS`,
`TOKEN_BUDGET`): TOKEN after PER_, or before a unit or a size (`_MS`, `_COUNT`, `_LIMIT`,
…). A campaign file may not hold the value of such a variable: it references the
runner's environment instead (`HF_TOKEN: ${HF_TOKEN}`), expanded only when the server is
launched, so the frozen campaign copy, the journal, the manifest, `check` and `--dry-run`
show the reference. Launch lines print secret variables as references (`-e HF_TOKEN`,
`HF_TOKEN="$HF_TOKEN"`), and `scrub` replaces the value of any secret-looking variable of
the runner's environment in text that is written or printed (a last guard).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping

SECRET_RE = re.compile(
    r"(?<!PER_)TOKEN(?!IZER|S|_(?:MS|US|S|SEC|COUNT|LEN|LENGTH|LIMIT|NUM|RATE|BUDGET|SIZE)"
    r"(?:_|$))|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
REDACTED = "<redacted>"
REFERENCE_RE = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
MIN_SCRUB_LEN = 6
"""Shorter values ("1", "false") are not looked for in text: they would mangle it."""


def is_secret(name: str) -> bool:
    return bool(SECRET_RE.search(name))


def reference(value: str) -> str | None:
    """The variable a `${NAME}` value refers to, else None."""
    m = REFERENCE_RE.match(value)
    return m.group(1) if m else None


def literal_secrets(env: Mapping[str, str]) -> list[str]:
    """Names of secret-looking variables given a literal value (not `${NAME}`, not empty)."""
    return [k for k, v in env.items() if is_secret(k) and v and reference(v) is None]


def redact(env: Mapping[str, str]) -> dict[str, str]:
    """`env` for a file or a screen: secret-looking values replaced, references kept."""
    return {k: (v if not is_secret(k) or reference(v) is not None or not v else REDACTED)
            for k, v in env.items()}


def expand(env: Mapping[str, str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """`env` as given to a server: `${NAME}` values read from the runner's environment
    (empty when unset). Only here does a secret's value appear."""
    source = os.environ if environ is None else environ
    out = {}
    for k, v in env.items():
        name = reference(v)
        out[k] = source.get(name, "") if name is not None else v
    return out


def shell_word(name: str, value: str) -> str:
    """`NAME=value` for a pasteable shell line; a secret or a reference as `NAME="$REF"`."""
    ref = reference(value)
    if ref is None and is_secret(name):
        ref = name
    return f'{name}="${ref}"' if ref is not None else f"{name}={shlex.quote(value)}"


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of the secret-looking variables of the runner's environment, longest first."""
    source = os.environ if environ is None else environ
    values = {v for k, v in source.items() if is_secret(k) and len(v) >= MIN_SCRUB_LEN}
    return sorted(values, key=len, reverse=True)


def scrub(text: str, environ: Mapping[str, str] | None = None) -> str:
    """`text` with every secret value of the runner's environment replaced by REDACTED."""
    for value in secret_values(environ):
        if value in text:
            text = text.replace(value, REDACTED)
    return text


__all__ = ["REDACTED", "SECRET_RE", "expand", "is_secret", "literal_secrets", "redact",
           "reference", "scrub", "secret_values", "shell_word"]
