"""Moved to ``kyc_client.liveness`` (the client's own distribution, kyc-triton-client, in
client/); this name stays for code written before, and is that very module."""

import sys

from kyc_client import liveness

sys.modules[__name__] = liveness
