"""The run directory: written by `run`, read by `verdict`, `report` and `plan`.

    `store`         the directory's writer and its typed reader
    `journal`       the append-only event log, the source of truth
    `chain`         the journal's hash chain: each line names the digest of the one before
    `damage`        what is wrong with a journal: said by a report, refused by a resume
    `signing`       a registration signed before the first boot (`--sign-key`)
    `registration`  `preregistration.json`, the results schema versions and their migrations
    `integrity`     the copies a run folder keeps of one fact, checked against each other
    `replayed`      the replayed schedules (rate levels, traces) against their registration
    `structure`     what a folder holds beyond its registration: named, never judged
    `passescsv`     passes.csv read back and checked against the journal
    `redos`         pairs measured again: which attempt counts, and why
    `bootfail`      arms that never became ready, the line a report leads with
    `running`       is a run still going? its last session and whether it is alive
    `pool`          the shards of a sharded campaign as one run
"""
