"""`spec-ab plan`: what a campaign's pre-registered rule will decide, before the night.

    `campaign`    the whole plan of one campaign: the table, the recommendation, the rest
    `kernel`      Monte Carlo rates, the rule as arrays, the flags' tests vectorised
    `simulate`    simulated campaigns under a noise model: draws, decisions, adoption rates
    `noiserun`    the primary's noise read from a run (`--noise`; capacity at SLO from its
                  rate levels)
    `guards`      guardrails in the plan, on their own noise
    `sequential`  a sequential design with its guardrails, beside the rule alone and the
                  fixed design
    `lanes`       a sharded campaign as `spec-ab report` pools it
    `exact`       simulated campaigns re-judged by `verdict.judge_run`: any disagreement fails
    `render`      the terminal table and the JSON document

A Monte Carlo of the campaign's exact rule under a noise model (`campaign.verdict.noise`). For
1…N pairs (N = max(8, the registered pairs), `--pairs N` overrides) it simulates thousands
of campaigns per pair count — every candidate, every decision cell, the campaign's arm
order, invalid passes — judges each one, and prints P(adopt) at true effects 0, half the
margin (m/2), the margin (m) and 1.5× the margin (1.5m), plus `--effect` when it is another
number. One scale: an effect is the change of the metric itself, so for a lower-is-better
primary metric "+15%" means a 15% reduction (`rule.better_d`).

It recommends the fewest pairs that adopt a true 1.5m at least 90% of the time and a true
m/2 at most 5% of the time (Monte Carlo point estimates), or says that no count up to N
does, and what would (the other rule, every invalid pass redone, a quieter lane, more
pairs).

What is modelled, under the same noise model:

- every candidate: with k candidates each has its own boots and passes and shares the
  control's boot and pass within a pair; all are at the same true effect, and the campaign
  adopts when any candidate adopts under the corrected bar (`Rule.bar_d(k)`,
  `Rule.ci_alpha(k)`). Beside it, the campaign-level false-adopt at m/2 of the same
  campaign with one candidate (k = 3 when the campaign has one: what a third arm would
  do) — the correction promises no higher;
- invalid passes (`--invalid-rate`, default 2%, after retries, taken as the lane's
  faults): each arm's pass of each decision cell is invalid independently; as `spec-ab
  run` does, the lowest pair with an invalid pass is measured again whole at the end of
  the slots, up to the registered `gates.redo_budget` pairs (a redo can itself be
  invalid); a decision cell still short of its pre-registered pairs cannot adopt
  (inconclusive), so P(adopt) includes that loss (the share lost is printed);
- the `window-drift` gate: a decision cell whose control moved across the window beyond
  the limit and its noise cannot adopt (as in `verdict`);
- guardrails on their own noise (`plan.guards`): each relative guardrail at the cells
  `spec-ab report` checks it at (its `at`, the decision cells by default) and at its
  deterioration cells (every other configured cell of its metric), its passes drawn with
  the sampling error they record (`log_se`, inflated for a tail quantile from few
  requests) and the lane's pass-to-pass noise of that metric, judged by the verdict's test
  (shown within its limit at α, broken at α ÷ k, k every check of a candidate; the noise
  beyond sampling pooled over the metric's cells from the verdict's prior). P(adopt)
  includes them at no true change of the guardrail metrics (`adopt_rule_only`: the rule
  alone); per guardrail the plan prints P(it stops adoption | no change) and P(it lets
  through a candidate truly 2× its limit worse), family-wise over its cells. The noise
  comes from `--noise RUN_DIR` (or the campaign's A/A run) or is assumed and labelled so.
  Absolute guardrails (a failure share) are not simulated: both arms are taken to fail no
  request; nor are fidelity guardrails, relative or absolute: the verdict judges them
  against the control's own agreement with no pair-to-pair noise, and the plan takes the
  candidate to be lossless (they hold);
- the noise flags of `verdict` (the same χ² and z tests at `rule.flag_alpha`: the family's
  5% over decision cells × candidates × flags in play): their false-alarm rate on an A/A
  lane (this noise, no effect, no trend) and their power: `high-variance` at a true pair
  sd 2× the rule's assumed one, `window-drift` at a true window drift of 3× the band.

Exactness. The rule is the one `campaign.verdict.judge` applies to real runs. Calling it once per
simulated campaign is too slow, so the counting is vectorised with numpy (`adopts`,
`decide`, `flag_rates`, `guards.guard_states`): the same comparisons, with the same epsilon, on
arrays. Every plan then re-judges a sample of its simulated campaigns through
`verdict.judge_run` itself (candidates, invalid passes, window-drift gate, flags, and
every registered guardrail in its cells with its simulated values, `log_se` and request
counts, under the rule with its guardrails; each guardrail's state at 2× its limit too)
with the rule's `pairs` set to the simulated count, and refuses to print (a bug, exit 1)
if a single decision or guardrail state differs. The
lanes rows are cross-checked the same way: with two or more lanes on the pooled `RunTable`
`spec-ab report` would build (every lane's pairs in start order, `RunTable.lanes`, each
lane's own slots, invalid passes) under the pooled rule (`RuleSpec.pooled`: pairs × L);
the one-lane row as a plain run (the table's registered row without guardrails).

`--rule point|ci` plans under the other rule: exploratory, marked so.

JSON (`--format json`) keys:

- `campaign`, `decision_cells`, `candidates` (k), `order`, `registered_pairs` (a sharded
  campaign's pooled over its lanes: pairs per lane × `pooled_lanes`, as `report RUN_A
  RUN_B` judges it; the table's and the recommendation's `pairs` count pooled pairs too,
  the recommendation's `pairs_per_lane` what each lane registers);
- `rule`: `registered` and `used` (point|ci), `exploratory` (bool), `text`, `margin`,
  `band`, `confidence`, `direction`;
- `noise`: `boot_sd`, `pass_sd`, `window_drift`, `pair_sd`, `source`;
- `invalid_rate`, `sims`, `seed`, `exact_checked`;
- `effects`: [{`name` ("0", "m/2", "m", "1.5m", "effect"), `effect` (change of the metric as
  a fraction, better-signed)}];
- `table`: one row per pair count (every one up to 16, then sparse:
  `campaign.table_pairs`), {`pairs`, `adopt`: {effect name: rate},
  `lost_to_invalid`: rate (some decision cell short of its pairs, for the first
  candidate), `meets`: bool, `adopt_rule_only`: {effect name: rate} (without the guardrails),
  `false_adopt_half_margin`: {`single`: rate, `campaign`: rate, `candidates`},
  `guardrails`: [{`metric`, `limit`, `cells`: ["workload level"], `deterioration_cells`,
  `alpha_each` (the worse-side bound's one-sided level, α ÷ k), `unclear_stops` (always
  true), `break_at_0`: rate (broken at some cell, no true change), `stops_at_0`: rate
  (stops adoption, no true change: not shown within its limit, or broken), `passes_at_2x`:
  rate (does not stop adoption, truly 2× the limit worse), `hold_at_2x`, `hold_at_0`: rate
  (shown within at every own cell), `noise`: {`log_se`, `requests`, `inflation`,
  `boot_sd`, `band`, `prior_extra`, `measured`, `source`}}], `flags`: {`high_variance_false_alarm`,
  `window_drift_false_alarm`, `any_false_alarm`, `high_variance_power`,
  `window_drift_power`: rate or null (one pair: no test)}};
- `recommendation`: {`pairs` (int or null), `power_at` (1.5m as a fraction), `power_min`,
  `false_at` (m/2), `false_max`, `wall_s`, `alternatives`: [{`change`, `pairs`}]};
- `orders`: AB vs ABBA under a linear drift: [{`order`, `pairs`, `bias`, `null`,
  `at_effect`}], `order_drift`; `wall_s_per_pair` (one lane's); `notes`;
- `lanes`: [{`lanes` (L), `pairs_total` (registered pairs × L), `night_s` (one lane's
  wall time), `false_adopt_half_margin`: rate, `power_at_1_5m`: rate, `campaign` (bool:
  the campaign's own number of lanes), `sims`, `exact_checked` (int: this row's
  simulated campaigns re-judged by `verdict.judge_run`, all agreeing — pooled with two or
  more lanes)}] for L in 1, 2, 4 and the campaign's own.

- a sequential design (`plan.sequential`): `sequential`, one entry per true effect (0,
  m/2, m, 1.5m, 2m): {`name`, `effect`, `adopt`, `keep_default`, `inconclusive`,
  `expected_pairs`, `p90_pairs`, `expected_night_s` (the design with its relative
  guardrails at no true change), `guardrail_stops` (P(the guardrails are why it does not
  adopt)), `rule_only`: {the same six, the rule alone}, `fixed_adopt`}; and
  `sequential_design`: {`max_pairs`, `pair_sd`, `sims`, `fixed_pairs`,
  `recommended_max_pairs` (with the guardrails), `recommended_max_pairs_rule_only`,
  `guardrails_modelled`, `guardrails`: [{`metric`, `limit`, `cells`,
  `deterioration_cells`, `alpha_each`, `alpha_shown`, `break_at_0`, `stops_at_0`,
  `passes_at_2x` (rates, the candidate truly at 1.5m), `noise`}], `judge_run_checked`,
  `judge_run_checked_guardrails`, `judge_run_disagree`, `looks`, `exact_boundaries`,
  `power`, `alpha`}.

A rate is {`p`, `lo`, `hi`, `k`, `n`}: k of n simulated campaigns with a 95%
Clopper–Pearson interval (the Monte Carlo's own uncertainty).
"""

from __future__ import annotations

from campaign.plan.campaign import (
    Alternative,
    GuardrailRow,
    OrderRow,
    PairRow,
    PlanResult,
    alternatives,
    noise_for,
    plan_campaign,
    recommend,
)
from campaign.plan.exact import (
    exact_adopts,
    exact_judge,
)
from campaign.plan.kernel import (
    DEFAULT_INVALID_RATE,
    EFFECTS,
    EXACT_SAMPLE,
    FALSE_AT,
    FALSE_MAX,
    GUARDRAIL_VIOLATION,
    HV_POWER_AT,
    MAX_SEARCH_SIMS,
    MIN_TABLE_PAIRS,
    MORE_PAIRS,
    MULTI_CANDIDATES,
    PAIR_STEPS,
    POWER_AT,
    POWER_MIN,
    WD_POWER_AT,
    Rate,
    RuleName,
    RuleSpec,
    adopts,
    count_interval,
    flag_alpha,
    high_variance_flags,
    lanes_disagree_flags,
    lanes_disagree_p,
    rate_of,
    rule_spec,
    window_drift_flags,
)
from campaign.plan.lanes import (
    LANE_COUNTS,
    LaneRow,
    decide_lanes,
    lane_counts,
    lane_rates,
    lane_rows,
    simulate_lanes,
)
from campaign.plan.render import (
    plan_json,
    print_plan,
)
from campaign.plan.simulate import (
    Draws,
    FlagRates,
    adopt_rate,
    campaign_rates,
    decide,
    drift_offsets,
    effect_d,
    exact_guardrail_holds,
    flag_draws,
    flag_rates,
    flags_of,
    guardrail_holds,
    guardrail_log_ratios,
    pairs_for_power,
    pooled_lane_of,
    schedule_slots,
    simulate,
    simulate_arms,
)

__all__ = [
    "DEFAULT_INVALID_RATE",
    "EFFECTS",
    "EXACT_SAMPLE",
    "FALSE_AT",
    "FALSE_MAX",
    "GUARDRAIL_VIOLATION",
    "HV_POWER_AT",
    "LANE_COUNTS",
    "MAX_SEARCH_SIMS",
    "MIN_TABLE_PAIRS",
    "MORE_PAIRS",
    "MULTI_CANDIDATES",
    "PAIR_STEPS",
    "POWER_AT",
    "POWER_MIN",
    "WD_POWER_AT",
    "Alternative",
    "Draws",
    "FlagRates",
    "GuardrailRow",
    "LaneRow",
    "OrderRow",
    "PairRow",
    "PlanResult",
    "Rate",
    "RuleName",
    "RuleSpec",
    "adopt_rate",
    "adopts",
    "alternatives",
    "campaign_rates",
    "count_interval",
    "decide",
    "decide_lanes",
    "drift_offsets",
    "effect_d",
    "exact_adopts",
    "exact_guardrail_holds",
    "exact_judge",
    "flag_alpha",
    "flag_draws",
    "flag_rates",
    "flags_of",
    "guardrail_holds",
    "guardrail_log_ratios",
    "high_variance_flags",
    "lane_counts",
    "lane_rates",
    "lane_rows",
    "lanes_disagree_flags",
    "lanes_disagree_p",
    "noise_for",
    "pairs_for_power",
    "plan_campaign",
    "plan_json",
    "pooled_lane_of",
    "print_plan",
    "rate_of",
    "recommend",
    "rule_spec",
    "schedule_slots",
    "simulate",
    "simulate_arms",
    "simulate_lanes",
    "window_drift_flags",
]
