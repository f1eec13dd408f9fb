"""How a client reaches the server: its address, TLS, and headers sent on every call.

A server behind an authenticating TLS ingress (an API gateway, a service mesh) needs
both: ``ssl`` with the ingress's CA (``root_certificates``, a PEM file) and, say, an
``authorization`` header. The SDK, the liveness streams and ``kyc verify`` take a
:class:`Channel` wherever they take a ``host:port``.

``kyc serve`` answers inference only to calls that carry its client key (unless its
operator started it with ``--open-inference``): gRPC metadata
``triton-grpc-protocol-kyc-client-key`` (Triton prefixes its restricted protocols'
keys so), HTTP header ``kyc-client-key``. A plain ``host:port`` carries the key that
:func:`client_key` finds on this machine: ``KYC_CLIENT_KEY`` when set, else the key file
``kyc serve`` writes on first start (``~/.config/kyc/client.key``), so that a client on
the same machine as ``make serve`` needs no setting.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Channel:
    url: str = "localhost:8001"
    ssl: bool = False
    root_certificates: Path | None = None  # PEM; None with ssl: the system's CAs
    headers: tuple[tuple[str, str], ...] = ()  # gRPC metadata: lower-case names

    def grpc_client(self, module: Any) -> Any:
        """A ``module.InferenceServerClient`` (``tritonclient.grpc`` or its ``aio``)."""
        certificates = str(self.root_certificates) if self.root_certificates else None
        return module.InferenceServerClient(self.url, ssl=self.ssl,
                                            root_certificates=certificates)

    @property
    def metadata(self) -> dict[str, str] | None:
        """The headers as tritonclient's calls take them (None: none)."""
        return dict(self.headers) or None


# The server's inference key: the variable `kyc serve` and every client read it from,
# its name in Triton's restricted "inference" protocol (the HTTP header), and the gRPC
# metadata that carries it.
CLIENT_KEY_ENV = "KYC_CLIENT_KEY"
CLIENT_KEY_NAME = "kyc-client-key"
CLIENT_KEY_HEADER = f"triton-grpc-protocol-{CLIENT_KEY_NAME}"


def key_folder(env: Mapping[str, str] = os.environ) -> Path:
    """Where ``kyc serve`` keeps the keys it makes: ``$XDG_CONFIG_HOME/kyc``
    (``~/.config/kyc``)."""
    return Path(env.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "kyc"


def default_client_key_file(env: Mapping[str, str] = os.environ) -> Path:
    """The client key ``kyc serve`` makes on first start when ``KYC_CLIENT_KEY`` is unset
    (``~/.config/kyc/client.key``, readable by its owner only)."""
    return key_folder(env) / "client.key"


def client_key(env: Mapping[str, str] = os.environ) -> str | None:
    """The client key this machine's clients send: ``KYC_CLIENT_KEY`` when set, else the
    key file ``kyc serve`` made (:func:`default_client_key_file`), else None."""
    key = env.get(CLIENT_KEY_ENV, "").strip()
    if key:
        return key
    try:
        return default_client_key_file(env).read_text(encoding="ascii").strip() or None
    except (OSError, UnicodeDecodeError, RuntimeError):  # RuntimeError: no home folder
        return None


def client_key_headers(env: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The gRPC metadata carrying :func:`client_key` (``{}`` when there is none), for a
    raw ``tritonclient`` call: ``client.infer(..., headers=client_key_headers())``."""
    key = client_key(env)
    return {CLIENT_KEY_HEADER: key} if key else {}


def as_channel(target: str | Channel) -> Channel:
    """A plain ``host:port`` is a channel without TLS, carrying :func:`client_key`."""
    if isinstance(target, Channel):
        return target
    return Channel(target, headers=tuple(client_key_headers().items()))


def parse_header(text: str) -> tuple[str, str]:
    """``"Name: value"`` (curl's form) as a gRPC metadata pair; gRPC wants the name in
    lower case and refuses a pair without a name."""
    name, colon, value = text.partition(":")
    if not colon or not name.strip() or any(c.isspace() for c in name.strip()):
        raise ValueError(f"a header is 'name: value', not {text!r}")
    return name.strip().lower(), value.strip()
