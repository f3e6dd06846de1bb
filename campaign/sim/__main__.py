"""`python -m campaign.sim [serve options]`: the same as `spec-ab sim serve`."""

from __future__ import annotations

import sys

from campaign.sim.cli import main

if __name__ == "__main__":
    sys.exit(main())
