"""How a verdict is judged: measured rows and the registered rule in, verdicts out.

`tidy` (which rows count, with `capacity`: a rate sweep's capacity at SLO per pair and
arm, added to the table there) → `stats` (paired log ratios) → `judge` (each cell, then the run)
with `rule` (the rule and its labels), `flags` (the noise tests and gates of a cell),
`guardrails`, `reasons` (the words), `decide` (a candidate's decision), `outcome` (the
typed results); `aa` (the A/A drift band) and `noise` (the lane's noise model) measure the
lane the rule is judged against; `guardstats` (a guardrail's tests on plain numbers) and
`sampling` (a pass's sampling error from its own requests) serve `guardrails`, and
`showable` (whether a registered design can show each guardrail within its limit, before
any run: `check` refuses one it cannot) states them in advance;
`boundaries` (the group-sequential bounds) and `sequential` (the verdict at every look)
judge a sequential design. Pure but for `aa` and `noise`, which read a run directory.
"""
