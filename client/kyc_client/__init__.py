"""The KYC server's client: verify a customer (``kyc_ensemble``), stream a liveness
session (``liveness_sequence``), check the signed verdict, reach the server over TLS
with its client key. Only ``tritonclient[grpc]`` and ``cryptography``: none of the
models' runtimes.

    from kyc_client import KycClient, verify_verdict

The modules: :mod:`kyc_client.sdk` (the clients and their errors),
:mod:`kyc_client.liveness` (frame streaming), :mod:`kyc_client.channel` (address, TLS,
keys), :mod:`kyc_client.verdict` (the verdict's format and its check).
"""

from kyc_client.channel import Channel, client_key_headers
from kyc_client.liveness import LivenessCapture, LivenessReply
from kyc_client.sdk import (
    NO_RETRY,
    AsyncKycClient,
    KycAuthError,
    KycClient,
    KycError,
    KycInputError,
    KycServerError,
    KycTimeoutError,
    KycUnavailableError,
    LivenessSession,
    RetryPolicy,
    Verification,
)
from kyc_client.verdict import VerdictError, load_public_key, verify_verdict

__all__ = [
    "NO_RETRY",
    "AsyncKycClient",
    "Channel",
    "KycAuthError",
    "KycClient",
    "KycError",
    "KycInputError",
    "KycServerError",
    "KycTimeoutError",
    "KycUnavailableError",
    "LivenessCapture",
    "LivenessReply",
    "LivenessSession",
    "RetryPolicy",
    "VerdictError",
    "Verification",
    "client_key_headers",
    "load_public_key",
    "verify_verdict",
]
