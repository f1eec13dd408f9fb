"""Moved to ``kyc_client.channel`` (the client's own distribution, kyc-triton-client, in
client/); this name stays for code written before, and is that very module."""

import sys

from kyc_client import channel

sys.modules[__name__] = channel
