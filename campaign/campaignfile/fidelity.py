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
    pair) is the reference (figures at workload `fidelity`, level `c1`). It is a pass like
    any other: a request that fails or times out, the pass over `gates.pass_timeout_s`
    (which bounds the whole pass, all its requests), or a server dead or unhealthy after it
    makes it invalid — retried (`gates.retries`), then the pair redone (the control's: the
    lane's fault) or left invalid (the candidate's own); only valid answers are compared,
    and only a valid control's are ever a reference."""

    prompts_per_class: Prompts = Field(
        2, ge=1, description="Prompts taken from each agent-fixture class (the first N of "
        "its file; the shipped fixtures when no agentfix workload is defined).")
    output_tokens: Tokens = Field(
        256, ge=1, description="Tokens asked of every prompt (max_tokens, ignore_eos): "
        "enough to reach deep draft positions.")
    seed: Seed | None = Field(
        None, description="Sampling seed sent with every request (default: the "
        "preregistration seed).")
