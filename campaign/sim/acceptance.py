"""Acceptance model: content class of a prompt → per-position draft acceptance.

Acceptance differs hugely by what the model is asked to write (docs/simulator.md: ~91% on shell,
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


# --- draws fixed by the request -------------------------------------------------------
#
# The engine does not draw acceptance from one shared stream: whether the draft at draft
# position i of a step that starts at output position p is accepted is decided by a uniform
# fixed by (request key, p, i), the key being the boot's seed, the prompt and how many
# times this boot has seen that prompt. Like greedy decoding on a real lane, the same
# requests replayed on a boot with the same seed accept the same drafts whatever the batch
# they share or the order they arrive in (an A/A pair differs by its drift alone), and an
# arm that verifies fewer drafts sees a prefix of the same outcomes (common random
# numbers for A/B). With a random seed the draws are as independent as before.

_MASK64 = (1 << 64) - 1


def _mix64(x: int) -> int:
    """SplitMix64's finaliser: a bijection of 64-bit integers that scatters every bit."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def keyed_uniform(key: int, position: int, slot: int) -> float:
    """A uniform draw in [0, 1) fixed by (key, position, slot)."""
    return (_mix64(key ^ _mix64((position << 8) | (slot & 0xFF))) >> 11) * 2.0**-53


def accepted_at(key: int, position: int, a: float, decay: float, verify: int) -> int:
    """Number of verified drafts accepted (the prefix before the first rejection), with
    the draws fixed by the request key and the output position the step starts at: draft i
    is accepted when keyed_uniform(key, position, i) < a·decay^i
    (and every draft before it was)."""
    n = 0
    while n < verify and keyed_uniform(key, position, n) < a * decay**n:
        n += 1
    return n


# --- classification -------------------------------------------------------------------
#
# A decision list on what the prompt asks the model to *write*, checked most specific first:
# text with no punctuation at all is AIPerf's synthetic corpus (Shakespeare, stripped);
# a tool schema means the answer is a JSON tool call; a fence tagged with a shell means
# shell, with a programming language means code; a terminal transcript or a request for a
# command means shell; any other fence means code; a demanded JSON/YAML/CSV shape means
# structured output; a programming language named with code words means code.

_TOOL = re.compile(
    r'"type"\s*:\s*"function"|"function"\s*:\s*\{|\b(?:call|use) (?:these|the following) '
    r"tools\b|\bavailable tools\b|\btool_calls?\b",
    re.IGNORECASE,
)
_FENCE = re.compile(r"```")
_CODE_FENCE = re.compile(r"```(?:python|py|go|rust|rs|ts|typescript|js|javascript|java|c|cpp|"
                         r"c\+\+|kotlin|swift|ruby)\b")
_SHELL_PROMPT = re.compile(r"(?m)^\s*\$ \S")
_SHELL_FENCE = re.compile(r"```(?:bash|sh|shell|zsh|console)\b")
_SHELL_INTENT = re.compile(
    r"\b(?:give|write|rewrite|what(?:'s| is)|need|show me|suggest|how do i)\b[^.?\n]{0,60}"
    r"\b(?:command|one-liner|pipeline|cron line|crontab|bash|shell|script|loop)\b",
    re.IGNORECASE,
)
_STRUCT = re.compile(
    r"\b(?i:return|output|produce|fill(?: in)?|respond with|answer in|emit|map|convert|as|"
    r"in this|into|in the following|extract|turn|summari[sz]e|exact(?:ly)?)\b"
    r"[^\n]{0,60}\b(?:JSON|YAML|CSV|XML|TOML)\b|\b(?:JSON|YAML|CSV) only\b|"
    r"\b(?:JSON|YAML) (?:array|object|list|mapping|document)\b"
)
_LANGUAGE = re.compile(r"\b(?:Python|Go|Rust|TypeScript|JavaScript|Java|C\+\+|C#|Kotlin|"
                       r"Swift|Ruby)\b")
_CODE_WORD = re.compile(r"\b(?:function|class|method|struct|implement|refactor|compile|"
                        r"unit test|handler|type hints?|signature)\b|`\w+\(", re.IGNORECASE)
_ARCHAIC = frozenset(
    ["thou", "thee", "thy", "thine", "hath", "doth", "dost", "thyself", "shalt", "wilt",
     "whilst", "canst", "hast", "art", "ere", "nay", "tis", "ay", "exeunt", "enter", "exit",
     "beautys", "lovst", "feedst", "makst", "mayst", "o", "lord", "sir", "good", "king"]
)
_WORD = re.compile(r"[A-Za-z']+")
_PUNCT = re.compile(r"[.,;:!?\"'(){}\[\]$|=<>/\\_`#*-]")


def _looks_synthetic(text: str) -> bool:
    """AIPerf's synthetic prompts: Shakespeare with all punctuation stripped (archaic words,
    speakers' names in capitals).  Real prompts of a dozen words always carry punctuation."""
    words = _WORD.findall(text)
    if len(words) < 8:
        return False
    if _PUNCT.search(text):
        return False
    marks = sum(1 for w in words if w.lower() in _ARCHAIC or (len(w) >= 3 and w.isupper()))
    return marks >= 1 or len(words) >= 12


def classify(text: str) -> str:
    """The content class of a prompt (see the decision list above); prose by default."""
    if _looks_synthetic(text):
        return "synthetic"
    if _TOOL.search(text):
        return "tool_json"
    if _SHELL_FENCE.search(text):
        return "shell"
    if _CODE_FENCE.search(text):
        return "code"
    if _SHELL_PROMPT.search(text) or _SHELL_INTENT.search(text):
        return "shell"
    if _FENCE.search(text):
        return "code"
    if _STRUCT.search(text):
        return "structured"
    if _LANGUAGE.search(text) and _CODE_WORD.search(text):
        return "code"
    return "prose"


def class_of_messages(texts: Sequence[str]) -> str:
    """Classify a chat by all its turns (a system prompt listing tools counts too)."""
    return classify("\n".join(texts))
