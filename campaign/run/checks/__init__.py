"""What `spec-ab check` finds before the night (`campaign.run`'s checking room).

    `preflight`    checks that start nothing: is this machine ready for the campaign?
    `launchcheck`  what would fail at boot, found without booting
    `vllmargs`     a vLLM launch's flags and environment against the engine's own parser
    `vllmengine`   which launch starts vLLM, and its parser as data (one per engine)
    `vllmdump`     run by an engine's own Python: vLLM's flags and variables as JSON
    `bootcheck`    `spec-ab check --boot`: every distinct launch booted once, up to ready
    `checkview`    what `spec-ab check` and `spec-ab run --dry-run` print
"""
