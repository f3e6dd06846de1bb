"""Acceptance model: content class of a prompt → per-position draft acceptance.

Acceptance differs hugely by what the model is asked to write (DESIGN.md: ~91% on shell,
~30% on prose at k = 5).  The simulated lane classifies each request's prompt text into
one of a few content classes and gives every draft position a conditional acceptance
probability  a_i = a · decay^i  (near-geometric survival: each position keeps about `a` of
the last, slightly less further out).  A class is configured by the rate vLLM would report
at k = 5, `(s_1 + … + s_5)/5` with s_i the survival to position i, because that is the
number people quote; `per_position_a` solves it back to `a`.

Classes: `shell`, `code`, `tool_json`, `structured`, `prose`, and `synthetic` (the
Shakespeare-sonnet text AIPerf generates for `--synthetic-input-tokens-mean`, which
overstates acceptance: 0.80 vs 0.43–0.47 on real text).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

CLASSES = ("shell", "code", "tool_json", "structured", "prose", "synthetic")

DEFAULT_RATES: dict[str, float] = {
    "shell": 0.91,
    "tool_json": 0.74,
    "structured": 0.68,
    "code": 0.62,
    "synthetic": 0.80,
    "prose": 0.30,
}
"""Reported acceptance rate at k = 5 per class (the configuration's ground truth)."""

DEFAULT_DECAY = 0.99
REFERENCE_DEPTH = 5


def survival(a: float, decay: float, k: int) -> list[float]:
    """Probability that drafts 0..k−1 are all accepted up to and including position i."""
    out: list[float] = []
    s = 1.0
    for i in range(k):
        s *= min(1.0, a * decay**i)
        out.append(s)
    return out


def reported_rate(a: float, decay: float, k: int) -> float:
    """The rate vLLM reports (accepted ÷ draft tokens) at depth k."""
    return sum(survival(a, decay, k)) / k


def per_position_a(rate: float, decay: float = DEFAULT_DECAY, k: int = REFERENCE_DEPTH) -> float:
    """Solve reported_rate(a, decay, k) = rate for a (bisection; monotone in a)."""
    if not 0.0 < rate < 1.0:
        raise ValueError(f"acceptance rate must be in (0, 1), got {rate}")
    lo, hi = 0.0, 1.0 / decay ** (k - 1) if decay < 1 else 1.0
    hi = min(hi, 1.5)
    for _ in range(80):
        mid = (lo + hi) / 2
        if reported_rate(mid, decay, k) < rate:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def sample_accepted(rng: random.Random, a: float, decay: float, verify: int) -> int:
    """Number of verified drafts accepted: the prefix before the first rejection."""
    n = 0
    while n < verify and rng.random() < a * decay**n:
        n += 1
    return n


# --- classification -------------------------------------------------------------------

_SHELL_CMD = re.compile(
    r"(?m)(^\s*[$#]\s+\S|\b(?:sudo|apt-get|apt|grep|sed|awk|chmod|chown|mkdir|rm -|ls -|"
    r"cd |cat |tail -|head -|find \.|xargs|systemctl|journalctl|docker|kubectl|git |curl |"
    r"wget|ssh |scp |tar -|pip install|export [A-Z_]+=|echo \$|bash|shell|terminal|"
    r"command line|one-liner)\b|\s\|\s|&&|2>&1|/dev/null|/etc/|/var/|/usr/)"
)
_CODE = re.compile(
    r"(?m)(\bdef \w+\(|\bclass \w+[(:]|\bimport \w+|\bfrom \w+(?:\.\w+)* import\b|\breturn\b|"
    r"\bfunction\b|\bconst \w+|\blet \w+|#include|\bpublic\b|\bvoid\b|=>|\bself\.|\bfn \w+|"
    r"\bstruct\b|\bpython\b|\bjavascript\b|\btypescript\b|\brust\b|\bfunction\b|\brefactor|"
    r"\bunit test|\bpytest\b|```|;\s*$|\{\s*$)"
)
_TOOL = re.compile(
    r"(\"(?:tool|tools|function|functions|arguments|parameters|tool_calls|name)\"\s*:|"
    r"\btool[_ ]call|\bfunction[_ ]call|\bcall the (?:tool|function)|\bJSON arguments|"
    r"\bavailable tools\b|\btools?:\s*\[)",
    re.IGNORECASE,
)
_STRUCT = re.compile(
    r"(\bYAML\b|\bCSV\b|\btable\b|\bschema\b|\bmarkdown table|\bkey: value|\bfields?\b|"
    r"\bcolumns?\b|\bformat(?:ted)? as\b|\bstructured\b|\bXML\b|\bJSON\b|\bcomma-separated|"
    r"^\s*[-\w]+:\s+\S|^\s*\|.*\|\s*$|^\s*-\s+\w+:)",
    re.IGNORECASE | re.MULTILINE,
)
_SONNET_WORDS = frozenset(
    "thou thee thy thine hath doth dost art thyself ere whilst shalt wilt o nor yet doth "
    "beauty beautys sweet fair fairest love loves lovst heart eyes mine thence hence "
    "doth upon self time thine youth truth verse praise".split()
)
_WORD = re.compile(r"[a-z']+")


def class_scores(text: str) -> dict[str, float]:
    """Evidence per class, normalised by the prompt's size so long prompts do not win."""
    lines = max(1, text.count("\n") + 1)
    size = max(1.0, len(text) / 200.0, lines / 3.0)
    words = _WORD.findall(text.lower())
    sonnet = sum(1 for w in words if w in _SONNET_WORDS) / max(1, len(words))
    return {
        "shell": len(_SHELL_CMD.findall(text)) / size,
        "code": len(_CODE.findall(text)) / size,
        "tool_json": 2.0 * len(_TOOL.findall(text)) / size,
        "structured": 0.8 * len(_STRUCT.findall(text)) / size,
        # Shakespeare's sonnets are ~15% these words; ordinary English ~2%.
        "synthetic": 40.0 * max(0.0, sonnet - 0.04),
        "prose": 0.5,
    }


def classify(text: str) -> str:
    """The content class of a prompt (the highest evidence; prose when nothing stands out)."""
    scores = class_scores(text)
    return max(CLASSES, key=lambda c: (scores[c], -CLASSES.index(c)))


def class_of_messages(texts: Sequence[str]) -> str:
    """Classify a chat by all its turns (a system prompt listing tools counts too)."""
    return classify("\n".join(texts))
