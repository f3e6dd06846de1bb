"""The campaign file's `workloads.fidelity`: the lossless check's settings (what runs it:
`campaign.run.measure.fidelity`)."""

from __future__ import annotations

from pydantic import Field

from campaign.campaignfile.base import Model, Prompts, Seed, Tokens


class FidelityWorkload(Model):
    """The lossless check: after its measured passes each arm answers a fixed set of
    prompts greedily (temperature 0, a fixed seed, one at a time, not streamed), and the
    candidate's texts are compared with the control's of the same pair; the control's own
    agreement (with the previous pair's control, or with itself on its boot in the first
    pair) is the reference (figures at workload `fidelity`, level `c1`)."""

    prompts_per_class: Prompts = Field(
        2, ge=1, description="Prompts taken from each agent-fixture class (the first N of "
        "its file; the shipped fixtures when no agentfix workload is defined).")
    output_tokens: Tokens = Field(
        256, ge=1, description="Tokens asked of every prompt (max_tokens, ignore_eos): "
        "enough to reach deep draft positions.")
    seed: Seed | None = Field(
        None, description="Sampling seed sent with every request (default: the "
        "preregistration seed).")
