"""The seeded request schedule of an open-loop level (`workloads.rate`), and the run's copy
of a lab's trace (`workloads.trace`): the files AIPerf replays on both arms of every pair
(`replay`), written once per run.

A rate level is not AIPerf's `--request-rate` generator: spec-ab draws the arrival times
itself, numpy's `default_rng(seed + level index)` — `poisson`: exponential gaps of mean
1/rate; `constant`: 1/rate apart; `gamma`: gaps of shape `smoothness` and scale
1/(rate · smoothness) — and the prompts too: `input_tokens` single-token words of the
campaign's tokenizer (`sim.vocab`: a space and lowercase letters, each encoding back to one
token, so a prompt tokenises to exactly `input_tokens`), or, with `rate.prompts`, texts of
an agent fixture drawn in a seeded order (the content class the drafts meet). The level is
written as AIPerf's `mooncake_trace` JSONL (one line per request: `{"timestamp": <ms>,
"text_input": "...", "output_length": N}`) under the run folder
(`schedules/rate-r4.jsonl`); its sha256 goes to the journal's `registered` line, and each
pass journals the sha256 of the file it replayed.
So both arms of every pair receive byte-identical schedules and inputs by construction. A
trace is copied the same way (`schedules/trace-<name>.jsonl`): its timestamps × its
`time_scale`, and a line that gives only `input_length` gets a prompt of that many words
drawn from the seed (AIPerf would synthesise one itself; written here, it is in the file
whose hash is recorded). A resumed run derives each file again and refuses a folder whose
file differs.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from campaign.campaignfile import Campaign
from campaign.campaignfile.workloads import RateWorkload
from campaign.errors import ResultsError
from campaign.sim.vocab import Vocab
from campaign.textfiles import atomic_write

FOLDER = "schedules"
"""The run folder's subfolder of schedules."""


@dataclass(frozen=True)
class Schedule:
    """One level's request schedule as the bytes AIPerf replays."""

    name: str
    """The file's stem and the pass's name: `rate-r4`."""
    level: str
    text: str
    timestamps_ms: tuple[int, ...]

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    @property
    def offered_rate(self) -> float:
        """The schedule's own rate (req/s): (n − 1) over its span; a one-request schedule's
        is 0."""
        span_s = (self.timestamps_ms[-1] - self.timestamps_ms[0]) / 1000.0
        return (len(self.timestamps_ms) - 1) / span_s if span_s > 0 else 0.0

    def path(self, run_dir: Path) -> Path:
        return level_path(run_dir, self.name)


def level_path(run_dir: Path, name: str) -> Path:
    """Where the run keeps the schedule `name` (`rate-r4`)."""
    return run_dir / FOLDER / f"{name}.jsonl"


def arrivals(rate: float, n: int, arrival: str, smoothness: float | None,
             seed: int) -> np.ndarray:
    """`n` arrival times (s, from 0, non-decreasing) at `rate` req/s."""
    rng = np.random.default_rng(seed)
    if arrival == "constant":
        gaps = np.full(n, 1.0 / rate)
    elif arrival == "gamma":
        shape = 1.0 if smoothness is None else smoothness
        gaps = rng.gamma(shape, 1.0 / (rate * shape), n)
    else:
        gaps = rng.exponential(1.0 / rate, n)
    gaps[0] = 0.0  # the first request opens the level
    return np.cumsum(gaps)


def prompts(words: tuple[str, ...], n: int, tokens: int, seed: int) -> list[str]:
    """`n` prompts of `tokens` single-token words each, drawn from `words`."""
    rng = np.random.default_rng([seed, 1])
    picks = rng.integers(0, len(words), size=(n, tokens))
    return ["".join(words[i] for i in row) for row in picks]


def drawn_texts(texts: tuple[str, ...], n: int, seed: int) -> list[str]:
    """`n` prompts drawn from a fixture's `texts` (with replacement, a seeded order)."""
    rng = np.random.default_rng([seed, 2])
    return [texts[i] for i in rng.integers(0, len(texts), size=n)]


def fixture_texts(path: Path) -> tuple[str, ...]:
    """The texts of an AIPerf single_turn JSONL (`text`, or each of `texts`), in order."""
    out: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            doc = json.loads(line)
            out += [doc["text"]] if isinstance(doc.get("text"), str) else list(doc["texts"])
    return tuple(out)


def level_schedule(rate: RateWorkload, index: int, seed: int,
                   words: tuple[str, ...], texts: tuple[str, ...] = ()) -> Schedule:
    """The schedule of `rate`'s level number `index` (0-based, in rate order): word
    prompts, or prompts drawn from `texts` (`rate.prompts`) when given."""
    level = rate.levels[index]
    n = rate.requests_at(level)
    times = arrivals(rate.rates[index], n, rate.arrival, rate.smoothness, seed + index)
    stamps = tuple(round(float(t) * 1000.0) for t in times)
    said = (drawn_texts(texts, n, seed + index) if texts
            else prompts(words, n, rate.input_tokens, seed + index))
    lines = [json.dumps({"timestamp": ts, "text_input": text,
                         "output_length": rate.output_tokens})
             for ts, text in zip(stamps, said, strict=True)]
    return Schedule(f"rate-{level}", level, "\n".join(lines) + "\n", stamps)


def rate_schedules(campaign: Campaign) -> list[Schedule]:
    """Every rate level's schedule of the campaign ([] without `workloads.rate`)."""
    rate = campaign.workloads.rate
    if rate is None:
        return []
    words = Vocab.load(campaign.resolve(campaign.workloads.tokenizer)).words
    seed = campaign.preregistration.seed
    texts = (fixture_texts(campaign.resolve(rate.prompts)) if rate.prompts is not None
             else ())
    return [level_schedule(rate, i, seed, words, texts) for i in range(len(rate.levels))]


def trace_schedule(name: str, source: Path, time_scale: float, seed: int,
                   words: tuple[str, ...]) -> Schedule:
    """The run's copy of trace `name` (`workloads.trace`): each line's timestamp ×
    `time_scale`, its `text_input` (a line giving only `input_length` gets a prompt of that
    many words, drawn from `seed`) and its `output_length`; nothing else of the line."""
    docs = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines()
            if line.strip()]
    lines: list[str] = []
    stamps: list[int] = []
    for i, doc in enumerate(docs):
        text = doc.get("text_input")
        if not isinstance(text, str) or not text:
            text = prompts(words, 1, int(doc["input_length"]), seed + 7919 * (i + 1))[0]
        ts = round(float(doc["timestamp"]) * time_scale)
        stamps.append(ts)
        lines.append(json.dumps({"timestamp": ts, "text_input": text,
                                 "output_length": int(doc["output_length"])}))
    return Schedule(f"trace-{name}", name, "\n".join(lines) + "\n", tuple(stamps))


def all_schedules(campaign: Campaign) -> list[Schedule]:
    """Every schedule a run replays: the rate levels', then each trace's copy."""
    out = rate_schedules(campaign)
    t = campaign.workloads.trace
    if t is not None:
        words = Vocab.load(campaign.resolve(campaign.workloads.tokenizer)).words
        seed = campaign.preregistration.seed
        out += [trace_schedule(name, campaign.resolve(file), t.time_scale, seed + 1000 + i,
                               words) for i, (name, file) in enumerate(t.files.items())]
    return out


def write_schedules(run_dir: Path, campaign: Campaign) -> dict[str, str]:
    """Write each schedule under `run_dir/schedules/` (a file already there, from the run's
    first session, must hold the same bytes: `ResultsError` otherwise). Returns name →
    sha256."""
    out: dict[str, str] = {}
    for s in all_schedules(campaign):
        path = s.path(run_dir)
        if path.exists():
            if path.read_bytes() != s.text.encode("utf-8"):
                raise ResultsError(
                    f"{path}: the schedule was changed after registration (it no longer "
                    "holds the bytes the campaign's seed derives), so later pairs would not "
                    "receive the load the earlier ones did",
                    hint="restore the file, or start a new run")
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, s.text, overwrite=False)
        out[s.name] = s.sha256
    return out
