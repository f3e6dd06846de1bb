"""Secrets never reach a file or the screen: the one place that decides what is secret.

A secret-looking environment name contains TOKEN, KEY, SECRET or PASSWORD (any case;
also PASSWD and CREDENTIAL), unless it ends in `_FILE`, `_DIR` or `_PATH` (where a secret
is kept is a path). `TOKENIZERS_*` and `*_TOKENS` are counts and switches, not
credentials, and so is a per-token quantity (`DECODE_DELAY_PER_TOKEN_MS`,
`TOKEN_BUDGET`): TOKEN after PER_, or before a unit or a size (`_MS`, `_COUNT`, `_LIMIT`,
…). A campaign file may not hold the value of such a variable: it references the
runner's environment instead (`HF_TOKEN: ${HF_TOKEN}`), expanded only when the server is
launched, so the frozen campaign copy, the journal, the manifest, `check` and `--dry-run`
show the reference. Launch lines print secret variables as references (`-e HF_TOKEN`,
`HF_TOKEN="$HF_TOKEN"`), and `scrub` replaces the secret values (`secret_variables`: every
variable a launch reads in a secret position, whatever its length, and the runner's
secret-looking variables from `MIN_SCRUB_LEN` characters on) in free text that is written
or printed: log lines, error messages, command lines, a record's free-text fields
(`scrub_fields`). It never touches a record's structured fields (arms, metrics, numbers,
paths: a value that happens to equal one would change what was measured), nor a
measurement file (`scrub_tree`); a secret value equal to an arm, a metric or a path of
the run is refused at start instead (`campaignfile.checks.secret_collisions`).

The same holds for every other form a secret takes in a campaign file: a literal value
after a secret-looking flag in `args` or a command (`--hf-token hf_x`, `--api-key=abc`),
an assignment or an `Authorization: Bearer` header in a shell command, a well-known token
shape anywhere (`hf_…`, `sk-…`, `ghp_…`), a password in a URL's userinfo. Each is refused
with the fix (`${HF_TOKEN}`); `${NAME}` inside args and URLs is expanded from the runner's
environment only at launch (`expand_text`, `expand_argv`). `redact_url` hides a URL's
password in any text, and `scrub` applies it.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Collection, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from campaign.textfiles import atomic_write

SECRET_RE = re.compile(
    r"(?<!PER_)TOKEN(?!IZER|S|_(?:MS|US|S|SEC|COUNT|LEN|LENGTH|LIMIT|NUM|RATE|BUDGET|SIZE)"
    r"(?:_|$))|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
REDACTED = "<redacted>"
REFERENCE_RE = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
EMBEDDED_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
TOKEN_SHAPES = {
    "a Hugging Face token (hf_…)": re.compile(r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{30,}"),
    "an API key (sk-…)": re.compile(r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_-]{20,}"),
    "a GitHub token (ghp_…)": re.compile(
        r"(?<![A-Za-z0-9])(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"),
    "a Slack token (xox…)": re.compile(r"(?<![A-Za-z0-9])xox[abposr]-[A-Za-z0-9-]{10,}"),
    "an AWS access key (AKIA…)": re.compile(r"(?<![A-Za-z0-9])AKIA[0-9A-Z]{16}(?![0-9A-Z])"),
}
"""Well-known credential shapes, refused wherever they appear in a command."""
URL_USERINFO_RE = re.compile(
    r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^\s/@:'\"<>]*):(?P<pw>[^\s/@'\"<>]+)@")
"""A URL's `user:password@` (the password up to the '@' that ends the userinfo)."""
NOT_SECRET_FLAG_RE = re.compile(r"(?:FILE|_PATH|_DIR|_MODE|_NAME|_ID|_IDS|_TYPE)$")
"""A flag that names a file or a mode (`--ssl-keyfile`, `--tokenizer-mode`) holds no secret."""
SHELL_REF_RE = re.compile(r"^\$(?:\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)$")
MIN_SCRUB_LEN = 6
"""Shorter values ("1", "false") are not looked for in text: they would mangle it."""


NOT_SECRET_NAME_RE = re.compile(r"_(?:FILE|PATH|DIR)$", re.IGNORECASE)
"""A variable that names where a secret is kept (`SSH_KEY_DIR`, `HF_TOKEN_FILE`) holds a
path, not the secret: neither refused as a literal nor scrubbed from text (a folder the run
reads from would turn into `<redacted>` in every message naming it)."""


def is_secret(name: str) -> bool:
    return bool(SECRET_RE.search(name)) and not NOT_SECRET_NAME_RE.search(name)


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
    return {k: expand_text(v, environ) for k, v in env.items()}


def references(text: str) -> list[str]:
    """The variables every `${NAME}` in `text` refers to, in order."""
    return EMBEDDED_RE.findall(text)


def unexpanded_references(text: str) -> list[str]:
    """Each `${…}` in `text` that is not `${NAME}` (`${BAR:-x}`, `${1}`, an unclosed
    `${BAR`): `expand_text` leaves it as written."""
    found = []
    for m in re.finditer(r"\$\{", text):
        if not EMBEDDED_RE.match(text, m.start()):
            end = text.find("}", m.start())
            found.append(text[m.start():] if end < 0 else text[m.start():end + 1])
    return found


def expand_text(text: str, environ: Mapping[str, str] | None = None) -> str:
    """`text` with every `${NAME}` read from the runner's environment (empty when unset):
    an arg (`--api-key=${API_KEY}`), a URL (`http://u:${PW}@host`), an env value. Only at
    launch or connect time."""
    source = os.environ if environ is None else environ
    return EMBEDDED_RE.sub(lambda m: source.get(m.group(1), ""), text)


def expand_argv(argv: Iterable[str], environ: Mapping[str, str] | None = None) -> list[str]:
    """An argv as given to a server: each word's `${NAME}` expanded (`expand_text`)."""
    return [expand_text(word, environ) for word in argv]


def shell_word(name: str, value: str) -> str:
    """`NAME=value` for a pasteable shell line; a secret or a reference as `NAME="$REF"`."""
    ref = reference(value)
    if ref is None and is_secret(name):
        ref = name
    return f'{name}="${ref}"' if ref is not None else f"{name}={shlex.quote(value)}"


def shell_join(argv: Iterable[str]) -> str:
    """`shlex.join`, but a word holding `${NAME}` in double quotes, so a pasted line reads
    the variable from the shell (`--hf-token "${HF_TOKEN}"`)."""
    def one(word: str) -> str:
        if EMBEDDED_RE.search(word) and re.fullmatch(r'[^"\\`$]*', EMBEDDED_RE.sub("", word)):
            return f'"{word}"'
        return shlex.quote(word)
    return " ".join(one(w) for w in argv)


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of the secret-looking variables of the runner's environment (from
    `MIN_SCRUB_LEN` characters on), longest first."""
    source = os.environ if environ is None else environ
    values = {v for k, v in source.items() if is_secret(k) and len(v) >= MIN_SCRUB_LEN}
    return sorted(values, key=len, reverse=True)


VARIABLE_RE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
BEARER_RE = re.compile(r"(?i)authorization:\s*(?:bearer|basic|token)\s+(\S+)")


def _variables(text: str) -> list[str]:
    """Every variable `text` reads: `${NAME}` (spec-ab expands it) or `$NAME` (a shell)."""
    return [a or b for a, b in VARIABLE_RE.findall(text)]


def _after_secret_flags(words: list[str]) -> list[str]:
    """The variables given to a secret-looking flag (`--api-key ${A}`, `--token=$A`)."""
    found: list[str] = []
    for i, word in enumerate(words):
        if flag_variable(word) is None:
            continue
        if "=" in word:
            found += _variables(word.split("=", 1)[1])
        elif i + 1 < len(words) and not words[i + 1].startswith("-"):
            found += _variables(words[i + 1])
    return found


def _text_references(text: str) -> list[str]:
    """The secret references of one string: a secret-looking `${NAME}`, a URL's userinfo,
    and in a shell command a secret flag's value, a secret assignment, a credential header."""
    found = [n for n in references(text) if is_secret(n)]
    for m in URL_USERINFO_RE.finditer(text):
        found += _variables(f"{m.group('user')}:{m.group('pw')}")
    if " " in text.strip():
        try:
            words = shlex.split(text)
        except ValueError:
            words = text.split()
        found += _after_secret_flags(words)
        for word in words:
            assign = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", word, re.DOTALL)
            if assign and is_secret(assign.group(1)):
                found += _variables(assign.group(2))
        for m in BEARER_RE.finditer(text):
            found += _variables(m.group(1))
    return found


def secret_references(tree: object) -> list[str]:
    """The variables a launch (its dump: mappings, lists, strings) reads in a secret
    position: the value of a secret-looking name (`DB_PASSWORD: ${PW}`), the word after a
    secret-looking flag (`--api-key ${K}`), a URL's userinfo (`http://u:${PW}@h`), a
    shell command's secret assignment or `Authorization:` header, and any secret-looking
    `${NAME}`. A reference elsewhere (`--model ${MODEL_DIR}`) is no secret."""
    found: list[str] = []
    if isinstance(tree, str):
        found += _text_references(tree)
    elif isinstance(tree, Mapping):
        for key, value in tree.items():
            if is_secret(str(key)) and isinstance(value, str):
                found += _variables(value)
            found += secret_references(value)
    elif isinstance(tree, list | tuple):
        if all(isinstance(w, str) for w in tree):
            found += _after_secret_flags(list(tree))
        for value in tree:
            found += secret_references(value)
    return list(dict.fromkeys(found))


def secret_variables(trees: Iterable[object] = (),
                     environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Name → value of every variable whose value is scrubbed: the runner's secret-looking
    variables (from `MIN_SCRUB_LEN` characters on: shorter ones, "1" or "false", would
    mangle text), and every variable `trees` (launch dumps) reads in a secret position
    (`secret_references`), whatever its length (not empty)."""
    source = os.environ if environ is None else environ
    found = {k: v for k, v in source.items() if is_secret(k) and len(v) >= MIN_SCRUB_LEN}
    for tree in trees:
        for name in secret_references(tree):
            if value := source.get(name, ""):
                found[name] = value
    return found


def known_values(trees: Iterable[object] = (),
                 environ: Mapping[str, str] | None = None) -> list[str]:
    """Every value a secret can have here (`secret_variables`), longest first."""
    return sorted(set(secret_variables(trees, environ).values()), key=len, reverse=True)


def launch_values(launch: object, environ: Mapping[str, str] | None = None) -> list[str]:
    """`known_values` of one launch (a pydantic model, or its dump): the runner's secret
    values and what the launch's secret references expand to."""
    dump = launch.model_dump(mode="json") if hasattr(launch, "model_dump") else launch
    return known_values([dump], environ)


def redact_url(text: str) -> str:
    """`text` with the password of every URL's userinfo replaced (`http://u:<redacted>@h`);
    a `${NAME}` reference in its place is kept (it is no secret)."""
    def one(m: re.Match[str]) -> str:
        pw = m.group("pw")
        if pw == REDACTED or REFERENCE_RE.match(pw):
            return m.group(0)
        return f"{m.group('scheme')}{m.group('user')}:{REDACTED}@"
    return URL_USERINFO_RE.sub(one, text) if "@" in text else text


def scrub(text: str, environ: Mapping[str, str] | None = None,
          values: Iterable[str] | None = None) -> str:
    """`text` with every secret value replaced by REDACTED (those of the runner's
    environment, or `values` when given: `known_values`), and URL passwords redacted."""
    for value in (secret_values(environ) if values is None else values):
        if value and value in text:
            text = text.replace(value, REDACTED)
    return redact_url(text)


def scrub_file(path: Path, values: Iterable[str]) -> bool:
    """Rewrite `path` (atomically, same mode) with `scrub` applied, only when it holds a
    secret; whether it did. A file that is not there is left alone."""
    try:
        data = path.read_bytes()
    except (FileNotFoundError, IsADirectoryError):
        return False
    text = data.decode("utf-8", errors="surrogateescape")
    clean = scrub(text, values=list(values))
    if clean == text:
        return False
    atomic_write(path, clean.encode("utf-8", errors="surrogateescape"),
                 mode=path.stat().st_mode & 0o7777)
    return True


FREE_TEXT_SUFFIXES = (".log", ".command", ".txt")
"""Files of an arm's folder that are free text (server logs, AIPerf's own logs, command
lines): scrubbed of every value. Every other file (AIPerf's exports, scrapes, fidelity
answers) holds measurements: only a URL's password is redacted in it."""


def scrub_tree(folder: Path, values: Iterable[str]) -> list[Path]:
    """`scrub_file` on every file under `folder`, of `values` in free text
    (`FREE_TEXT_SUFFIXES`), of URL passwords alone elsewhere; the files rewritten."""
    kept = list(values)
    if not folder.is_dir():
        return []
    return [p for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()
            and scrub_file(p, kept if p.name.endswith(FREE_TEXT_SUFFIXES) else ())]


def scrub_fields(tree: Any, fields: Collection[str], values: Iterable[str] | None = None,
                 *, inside: bool = False) -> Any:
    """`tree` (a record: mappings, lists, scalars) with `scrub` applied to the strings
    under a key in `fields` (free text: a reason, an error, log lines), at any depth, and
    every other value as it is: arms, metrics, numbers and paths are never touched."""
    kept = secret_values() if values is None else list(values)
    if isinstance(tree, str):
        return scrub(tree, values=kept) if inside else tree
    if isinstance(tree, Mapping):
        return {k: scrub_fields(v, fields, kept, inside=inside or k in fields)
                for k, v in tree.items()}
    if isinstance(tree, list | tuple):
        return [scrub_fields(v, fields, kept, inside=inside) for v in tree]
    return tree


# ---------------------------------------------------------------- literal secrets refused

def flag_variable(flag: str) -> str | None:
    """The variable a secret-looking flag's value belongs in (`--hf-token` → HF_TOKEN),
    None when the flag is not secret-looking (`--max-num-batched-tokens`, `--ssl-keyfile`)."""
    if not flag.startswith("-") or flag in ("-", "--"):
        return None
    name = flag.lstrip("-").split("=", 1)[0].upper().replace("-", "_")
    if not re.fullmatch(r"[A-Z0-9_.]+", name) or NOT_SECRET_FLAG_RE.search(name):
        return None
    return name.replace(".", "_") if is_secret(name) else None


def _literal(value: str) -> bool:
    """A value that is neither empty nor a reference (`${NAME}`, or `$NAME` in a shell)."""
    return bool(value) and not REFERENCE_RE.match(value) and not SHELL_REF_RE.match(value)


def token_shapes(text: str) -> Iterator[str]:
    """What well-known token shapes `text` holds (`TOKEN_SHAPES` names)."""
    for what, rx in TOKEN_SHAPES.items():
        if rx.search(text):
            yield what


def _flag_problems(words: list[str]) -> list[str]:
    """A secret-looking flag followed by a literal value (or `=value`), with the fix."""
    found: list[str] = []
    for i, word in enumerate(words):
        var = flag_variable(word)
        if var is None:
            continue
        flag = word.split("=", 1)[0]
        if "=" in word:
            value, fix = word.split("=", 1)[1], f"{flag}=${{{var}}}"
        else:
            nxt = words[i + 1] if i + 1 < len(words) else ""
            value = "" if nxt.startswith("-") else nxt
            fix = f"{flag} ${{{var}}}"
        if _literal(value):
            found.append(f"{flag} is given a literal value: a secret does not belong in the "
                         f"campaign file (it is frozen into every results folder); reference "
                         f"the runner's environment instead: {fix}")
    return found


def argv_problems(words: list[str]) -> list[str]:
    """Literal secrets in an argv: a secret-looking flag with a literal value, a token
    shape in any word, and in a word that is a shell command (`sh -c '…'`) what
    `shell_problems` finds. One message each, with the fix; never the value."""
    found = _flag_problems(words)
    for i, word in enumerate(words):
        found += [f"word {i + 1} holds {what}: reference the runner's environment instead, "
                  "e.g. ${HF_TOKEN}" for what in token_shapes(word)]
        if " " in word.strip():
            found += shell_problems(word)
    return list(dict.fromkeys(found))


def shell_problems(command: str) -> list[str]:
    """Literal secrets in a shell command: `--token abc`, `HF_TOKEN=abc cmd`,
    `Authorization: Bearer abc`, a token shape. `$NAME` / `${NAME}` are references."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    found = _flag_problems(words)
    for word in words:
        assign = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", word, re.DOTALL)
        if assign and is_secret(assign.group(1)) and _literal(assign.group(2)):
            name = assign.group(1)
            found.append(f"{name}= is given a literal value: reference the runner's "
                         f"environment instead: {name}=\"${{{name}}}\"")
        bearer = re.search(r"(?i)(?:authorization:\s*(?:bearer|basic|token)|^bearer)\s+(\S+)",
                           word)
        if bearer and _literal(bearer.group(1)):
            found.append("an Authorization header holds a literal credential: reference the "
                         "runner's environment instead: \"Authorization: Bearer ${HF_TOKEN}\"")
    found += [f"the command holds {what}: reference the runner's environment instead, "
              "e.g. ${HF_TOKEN}" for what in token_shapes(command)]
    return list(dict.fromkeys(found))


def url_problems(url: str) -> list[str]:
    """A literal password in a URL's userinfo, with the fix."""
    found = []
    for m in URL_USERINFO_RE.finditer(url):
        if _literal(m.group("pw")) and m.group("pw") != REDACTED:
            found.append(f"a URL holds a password in its userinfo: reference the runner's "
                         f"environment instead, expanded at connect time: "
                         f"{m.group('scheme')}{m.group('user')}:${{PASSWORD}}@…")
    return found


def unset_references(tree: object, environ: Mapping[str, str] | None = None,
                     path: str = "") -> list[tuple[str, str]]:
    """(field path, variable) of every `${NAME}` in a launch's dumped fields whose
    variable the runner's environment does not set."""
    source = os.environ if environ is None else environ
    if isinstance(tree, str):
        return [(path, n) for n in references(tree) if n not in source]
    if isinstance(tree, Mapping):
        return [hit for k, v in tree.items()
                for hit in unset_references(v, source, f"{path}.{k}" if path else str(k))]
    if isinstance(tree, list | tuple):
        return [hit for i, v in enumerate(tree)
                for hit in unset_references(v, source, f"{path}[{i}]")]
    return []


__all__ = ["REDACTED", "SECRET_RE", "argv_problems", "expand", "expand_argv", "expand_text",
           "flag_variable", "is_secret", "known_values", "launch_values", "literal_secrets",
           "redact", "redact_url", "reference", "references", "scrub", "scrub_fields",
           "scrub_file", "scrub_tree", "secret_references", "secret_values",
           "secret_variables", "shell_join", "shell_problems", "shell_word",
           "token_shapes", "unexpanded_references", "unset_references", "url_problems"]
