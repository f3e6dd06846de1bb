"""`preregistration.sequential`: a registered sequential design (stop when decided).

The runner looks after each pair (or each ABBA block of two pairs) from `min_pairs` on,
judges the registered rule on what is measured, and stops when the design's boundary is
crossed; `max_pairs` is the most pairs the night may spend (it is the campaign's `pairs`).
How the boundary is computed and why it keeps its error rates: docs/verdict.md, "Stop when
decided".

The sequential design is one concept at five stages; here it is registered. It is also
followed by the runner (`campaign.run.sequential`), judged (`campaign.verdict.sequential`),
planned (`campaign.plan.sequential`), reported (`campaign.report.sequential`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from campaign.campaignfile.base import Int, Model


class Sequential(Model):
    """Look after each pair (or block) and stop when the answer is clear."""

    max_pairs: Int = Field(ge=2, le=64, description="The most pairs the night spends; the "
                           "campaign's `pairs` follows it.")
    min_pairs: Int = Field(2, ge=2, description="No look before this many pairs (a t "
                           "statistic needs two).")
    look: Literal["pair", "block"] = Field(
        "pair", description="`pair`: look after every pair; `block`: after every second "
        "pair (an ABBA block), so that every look is balanced (`min_pairs` and `max_pairs` "
        "even).")
    power: float = Field(0.90, gt=0.5, lt=1, description="P(adopt) at 1.5 × the margin the "
                         "design is powered for; 1 − power is the futility boundary's error "
                         "(keep-default although the change is that large).")

    @model_validator(mode="after")
    def _consistent(self) -> Sequential:
        if self.min_pairs > self.max_pairs:
            raise ValueError(f"min_pairs {self.min_pairs} is above max_pairs {self.max_pairs}")
        return self

    def pairs_for(self, rule: str, pairs: int | None) -> int:
        """The campaign's `pairs` under this design (max_pairs), refusing a rule it cannot
        be put on and a `pairs` that says otherwise."""
        problem = self.rule_problem(rule)
        if problem is not None:
            raise ValueError(problem)
        if pairs is not None and pairs != self.max_pairs:
            raise ValueError(f"pairs {pairs} and sequential.max_pairs {self.max_pairs} "
                             "differ: give max_pairs only")
        return self.max_pairs

    @staticmethod
    def rule_problem(rule: str) -> str | None:
        """Why this design cannot be put on `rule` (what `check` and `plan --rule` say),
        or None."""
        if rule == "bound":
            return None
        return (f"a sequential design needs rule bound, not {rule}: its looks stop on the "
                "bound rule's boundaries; use rule bound, or drop `sequential:` for a fixed "
                f"number of pairs under rule {rule}")

    def block_problems(self) -> dict[str, str]:
        """`look: block` looks after every second pair: a `min_pairs` or `max_pairs` that
        is odd falls inside a block (field → what to write instead)."""
        if self.look != "block":
            return {}
        out = {}
        if self.min_pairs % 2:
            out["min_pairs"] = (
                f"min_pairs {self.min_pairs} is odd, but look: block looks after whole blocks "
                f"of two pairs, so the first look would be at {self.min_pairs + 1} pairs: "
                f"write min_pairs: {self.min_pairs + 1} (or look: pair)")
        if self.max_pairs % 2:
            out["max_pairs"] = (
                f"max_pairs {self.max_pairs} is odd, but look: block looks after whole blocks "
                f"of two pairs, so the last look would be at half a block: write max_pairs: "
                f"{self.max_pairs - 1} or {self.max_pairs + 1} (or look: pair)")
        return out

    @property
    def step(self) -> int:
        return 2 if self.look == "block" else 1

    def schedule(self) -> tuple[int, ...]:
        """The pair counts the design looks at: every pair (or second pair) from min_pairs,
        and always at max_pairs."""
        due = [p for p in range(self.min_pairs, self.max_pairs + 1) if p % self.step == 0]
        if not due or due[-1] != self.max_pairs:
            due.append(self.max_pairs)
        return tuple(due)

    @property
    def max_looks(self) -> int:
        return len(self.schedule())
