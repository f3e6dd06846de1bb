"""spec-ab: same-window A/B campaigns for speculative decoding on vLLM.

The folders follow a campaign's flow (docs/architecture.md), each importing only the ones
below it:

    `cli/`           the `spec-ab` command: parse, call one core function, render, exit code
    `plan/`          what the registered rule will decide, by Monte Carlo, before the night
    `run/`           the night: boot, measure and stop every slot of every pair
    `report/`        verdicts as a table, Markdown, JSON and HTML with plots
    `watch/`         many nights' control arms per lane, watched for lasting changes
    `verdict/`       measured rows and the registered rule in, verdicts out
    `results/`       the run folder: journal, registration, passes.csv, pooled shards
    `servers/`       the server backends: process, external, docker
    `campaignfile/`  the campaign file: models, loading, the files it names
    `sim/`           the simulated lane (`spec-ab sim serve`)
    `templates/`     the campaign files `spec-ab init` writes

and the ground floor every folder may use: `catalog` (the metrics a pass yields), `errors`
(expected failures and their exit codes), `fmt` (how numbers read), `markers` (how a run
labels what it starts), `procgroup` (stopping a process group), `secrets` (what never
reaches a file or the screen), `textfiles` (atomic writes and file primitives).
"""

__version__ = "0.1.0"

RESULTS_SCHEMA_VERSION = 3
"""Version of the results-directory layout written by `store` (bumped on any change of
file names, keys or columns; older versions are migrated in memory when read, newer ones
refused with how to upgrade). History and migrations: `campaign.results.registration`."""
