"""The KYC server's client: verify a customer (``kyc_ensemble``), stream a liveness
session (``liveness_sequence``), check the signed verdict, reach the server over TLS
with its client key. Only ``tritonclient[grpc]`` and ``cryptography``: none of the
models' runtimes.

    from kyc_client import KycClient, verify_verdict

The modules: :mod:`kyc_client.sdk` (the clients and their errors),
:mod:`kyc_client.liveness` (frame streaming), :mod:`kyc_client.channel` (address, TLS,
keys), :mod:`kyc_client.verdict` (the verdict's format and its check).
"""

import importlib
from typing import Any

# Each public name and the module that declares it, imported when first asked for: the
# server imports kyc_client.verdict alone (the verdict's format), and must not load the
# gRPC client with it.
_HOMES = {
    "Channel": "channel", "client_key_headers": "channel",
    "LivenessCapture": "liveness", "LivenessReply": "liveness",
    "NO_RETRY": "sdk", "AsyncKycClient": "sdk", "KycAuthError": "sdk", "KycClient": "sdk",
    "KycError": "sdk", "KycInputError": "sdk", "KycServerError": "sdk",
    "KycTimeoutError": "sdk", "KycUnavailableError": "sdk", "LivenessSession": "sdk",
    "RetryPolicy": "sdk", "Verification": "sdk",
    "VerdictError": "verdict", "load_public_key": "verdict", "verify_verdict": "verdict",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'kyc_client' has no attribute {name!r}")
    return getattr(importlib.import_module(f"kyc_client.{_HOMES[name]}"), name)


def __dir__() -> list[str]:
    return [*globals(), *__all__]
