"""The passes of a slot and what they yield (`campaign.run`'s measuring room).

    `passes`       an arm's passes as AIPerf plans, and whether a pass counts
    `loadgen`      AIPerf as a subprocess: command lines, a bounded run, its exports
    `phases`       a knee's levels in one AIPerf process
    `pacing`       a closed-loop pass's cap and ticker: no core spun waiting for a slot
    `levelchecks`  why a level's numbers cannot be used
    `levelcut`     a multi-level pass's server counters cut at its level boundaries
    `metrics`      vLLM /metrics snapshots, deltas and the spec-decode figures
    `records`      a level's per-request records and the sampling error of its statistics
    `arrivals`     a rate level's seeded schedule: arrival times and prompts, as a file
    `replay`       the AIPerf command line that replays a schedule file at its timestamps
    `sending`      how the load generator kept a replayed schedule (offered, achieved, lag)
    `turns`        per-turn figures of a sessions pass
    `fidelity`     the lossless pass: is the candidate still the same model?
    `manifest`     what a run was measured with: versions, host, GPUs, file hashes
"""
