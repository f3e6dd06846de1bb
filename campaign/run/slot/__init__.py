"""One slot: an arm's turn in one pair, from boot to stop (`campaign.run`'s slot room).

    `lifecycle`    boot, ready, warm-up, the measured passes between scrapes, stop
    `readiness`    port open, /health, /v1/models, one answered request
    `serverwatch`  what a running server says beside the load: scrapes, health, its log
    `launcherror`  a launch that fails the same way twice: the arm's own fault, said once
"""
