"""The passes of one arm, as load-generator plans: warm-ups, the knee sweep, one
agent-fixture pass per content class. Pure; shared by the runner and `--dry-run`."""

from __future__ import annotations

from dataclasses import dataclass

from campaign.campaignfile import Campaign
from campaign.run.loadgen import PassPlan


@dataclass(frozen=True)
class ArmPass:
    plan: PassPlan
    workload: str
    """`warmup`, `knee` or `agentfix`."""
    level_labels: tuple[str, ...]
    """Level of each concurrency of the plan (`c1`, `c4`, … or the content class)."""
    spec_level: str
    """Level the pass's spec-decode figures are filed under (`all` for a knee sweep)."""

    @property
    def measured(self) -> bool:
        return self.workload != "warmup"


def arm_passes(campaign: Campaign, arm: str, base_url: str) -> list[ArmPass]:
    wl = campaign.workloads
    gates = campaign.preregistration.gates
    seed = campaign.preregistration.seed
    tokenizer = campaign.resolve(wl.tokenizer)
    common = dict(base_url=base_url, model=wl.model, tokenizer=tokenizer,
                  endpoint_type=wl.endpoint_type, streaming=wl.streaming,
                  timeout_s=gates.pass_timeout_s)
    out: list[ArmPass] = []
    for i, w in enumerate(campaign.warmups(arm), start=1):
        plan = PassPlan(name=f"warmup-{i}", kind="warmup", concurrency=(w.concurrency,),
                        requests_per_level=w.requests, duration_s=None,
                        input_tokens=w.input_tokens, output_tokens=w.output_tokens,
                        input_file=None, seed=seed + 1000 + i, **common)  # type: ignore[arg-type]
        out.append(ArmPass(plan, "warmup", (f"c{w.concurrency}",), "all"))
    if wl.knee:
        k = wl.knee
        reqs = {k.requests_at(c) for c in k.concurrency}
        # AIPerf sweeps concurrency in one invocation with one request count; keep the
        # largest so the top level gets enough requests.
        per_level = None if k.duration_s else max(r for r in reqs if r is not None)
        plan = PassPlan(name="knee", kind="knee", concurrency=tuple(k.concurrency),
                        requests_per_level=per_level, duration_s=k.duration_s,
                        input_tokens=k.input_tokens, output_tokens=k.output_tokens,
                        input_file=None, seed=seed, **common)  # type: ignore[arg-type]
        out.append(ArmPass(plan, "knee", tuple(k.levels), "all"))
    if wl.agentfix:
        a = wl.agentfix
        for cls, file in a.fixtures.items():
            plan = PassPlan(name=f"agentfix-{cls}", kind="agentfix",
                            concurrency=(a.concurrency,), requests_per_level=a.requests,
                            duration_s=None, input_tokens=None, output_tokens=a.output_tokens,
                            input_file=campaign.resolve(file), seed=seed,
                            **common)  # type: ignore[arg-type]
            out.append(ArmPass(plan, "agentfix", (cls,), cls))
    return out
