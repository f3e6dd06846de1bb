"""Measuring: `spec-ab run` boots, measures and stops every slot of every pair.

A slot is one arm's turn in one pair: its server booted, warmed up, measured and stopped.

    `runner`      the night: lock, leftovers, preflight, registration, every slot in order
    `sequential`  a registered sequential design followed by the runner: a look after a pair
    `interrupt`   Ctrl-C and SIGTERM: the first stops gracefully, the second at once
    `runtime`     the runner's edges (server factory, pass runner, clocks) and the cancel check
    `progress`    the live display on a terminal, plain lines in a CI log
    `guards/`     what keeps a night honest: the lane lock, leftovers, the port
    `slot/`       one slot from boot to stop: readiness, the server's health, launch errors
    `measure/`    the passes of a slot: AIPerf, the knee, counters, records, fidelity
    `checks/`     what `spec-ab check` finds before the night: preflight, launches, boots

Arrows point down this list: `runner` uses every room, `slot/` uses `measure/` and
`guards/`, `checks/` uses the rooms it checks; `measure/` and `guards/` use no other room.
"""
