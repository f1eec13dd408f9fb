"""``python -m kyc_tools.cli``: the ``kyc`` command."""

from __future__ import annotations

import sys

from kyc_tools.cli import main

if __name__ == "__main__":
    sys.exit(main())
