"""Measuring: `spec-ab run` boots, measures and stops every arm of every pair.

`runner` orchestrates (the lane lock first, then leftovers, preflight, registration, and
every slot: a server up to ready, warm-up, the measured passes between two `/metrics`
scrapes, stop); the other modules are its parts: `passes` (an arm's passes as AIPerf
plans), `loadgen` (AIPerf as a subprocess), `metrics` and `serverwatch` (what a running
server says), `readiness`, `preflight`, `cleanup`, `lanelock`, `manifest`, `progress` and
`checkview` (what a run and `spec-ab check` print), `stopping` (Ctrl-C).
"""
