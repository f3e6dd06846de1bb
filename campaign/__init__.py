"""spec-ab: same-window A/B campaigns for speculative decoding on vLLM.

The package is organised one module per concept (see README "Architecture"):
spec (campaign file) → schedule → runner (servers, loadgen, metrics, store) → stats/verdict
→ report/plots; plan (decision quality) and sim (the simulated lane) stand beside them.
"""

__version__ = "0.1.0"

RESULTS_SCHEMA_VERSION = 3
"""Version of the results-directory layout written by `store` (bumped on any change of
file names, keys or columns; older versions are migrated in memory when read, newer ones
refused with how to upgrade). History and migrations: `campaign.results.registration`."""
