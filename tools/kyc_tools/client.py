"""Moved to ``kyc_client.sdk`` (the client's own distribution, kyc-triton-client, in
client/); this name stays for code written before, and is that very module."""

import sys

from kyc_client import sdk

sys.modules[__name__] = sdk
