"""The run directory: written by `run`, read by `verdict`, `report` and `plan`.

`store` (the directory's writer and its typed reader), `journal` (the append-only event
log, the source of truth), `registration` (`preregistration.json`, the results schema
versions and their migrations), `pool` (the shards of a sharded campaign as one run).
"""
