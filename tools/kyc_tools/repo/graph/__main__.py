"""``python -m kyc_tools.repo.graph``: the same as ``kyc repo graph``."""

import sys

from kyc_tools.repo.graph.cli import main

if __name__ == "__main__":
    sys.exit(main())
