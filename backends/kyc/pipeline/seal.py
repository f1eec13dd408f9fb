"""What the steps of ``kyc_ensemble`` hand each other, under the server's MAC: only the
pipeline gives verdicts.

Why. Triton serves every model of the repository to every client, the steps inside
an ensemble included. Called directly with embeddings of the caller's own face and a
DOCUMENT of its own writing, ``kyc_decision`` once answered ``approve`` for a made-up
surname (issue 35). A step cannot tell an ensemble's request from a client's (the
ensemble passes the client's request parameters on, and nothing else), so the steps
prove to each other what they computed, with a key the clients do not hold:

- ``kyc_intake``, which sees the client's images first, *seals* the request: its
  admission ticket, the time, a digest of each image, of the liveness token and of the
  ``kyc_application`` parameter (``SEAL``): a seal is worth nothing for another token
  or another application;
- each step that turns an image into what the decision reads *attests* it: a MAC over
  the image's digest and its outputs (``face_preprocess``: the aligned face, found,
  faces, quality; ``ocr_preprocess``: the canvas and scale; ``ocr_fields``: DOCUMENT and
  TEXT_LINES, from a canvas whose attestation it checked);
- ``kyc_decision`` computes the embeddings itself from the attested faces (an ONNX
  model cannot attest), and answers only when the seal holds and is fresh and every
  attestation names the image the seal names for it.

An attestation is a true statement about one computation: a client that calls
``face_preprocess`` itself gets one for its own image, which is worth nothing without
a seal naming that image. What stays open is said in SECURITY.md (the OCR map between
``ocr_preprocess`` and ``ocr_fields`` is not attested; ``kyc_intake`` and ``antifraud``
answer direct calls).

The key is derived from the liveness token key (HKDF-SHA256, its own label), so every
process that reads tokens holds it and nothing new is distributed. Without a token
key (unit tests, a step run alone) the steps attest nothing and ``kyc_decision``,
which needs the key anyway, refuses what is not attested.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from kyc.keys import TokenKeyError, derive_key, load_key
from kyc_client.verdict import DIGEST_BYTES, image_digest

SEAL_INPUT = "SEAL"  # the tensor a seal travels in
# a seal is refused past this age: longer than any request's time in the pipeline
# (the SLA is 8 s), short for a replay (kyc_decision's seal_max_age_s may change it)
SEAL_MAX_AGE_S = 60.0
SEAL_VERSION = "s2"
SEAL_FIELDS = 9  # version, ticket (3), time, document, selfie, token, application
ATTESTATION_VERSION = "a1"
NO_IMAGE = "-"  # a document read alone: no selfie, no token


class SealError(ValueError):
    """What a step received did not come through the pipeline (or was altered)."""


def digest(value: bytes | np.ndarray) -> str:
    """A hex digest of encoded bytes or of one row of a tensor (its dtype kind, shape
    and bytes; a TYPE_STRING row by its items' lengths and bytes)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return image_digest(value)  # as a client checks it against the signed verdict
    h = hashlib.sha256()
    array = np.asarray(value)
    h.update(f"{array.dtype.kind}{array.shape}".encode())
    if array.dtype == np.object_:
        for item in array.reshape(-1):
            data = item if isinstance(item, bytes) else str(item).encode()
            h.update(struct.pack("<Q", len(data)))
            h.update(data)
    else:
        h.update(np.ascontiguousarray(array).tobytes())
    return h.hexdigest()[: 2 * DIGEST_BYTES]


@dataclass(frozen=True)
class SealClaims:
    """What ``kyc_intake`` sealed for one row of a request."""

    ticket: tuple[int, int, int]  # the ADMISSION row (entry, slot, generation)
    issued_at: float  # Unix seconds
    document: str  # digest of DOCUMENT_IMAGE
    selfie: str  # digest of SELFIE_IMAGE, or NO_IMAGE
    token: str = NO_IMAGE  # digest of the LIVENESS_TOKEN's bytes, or NO_IMAGE (none sent)
    application: str = NO_IMAGE  # application_digest of the request's kyc_application


def application_digest(application: str | None) -> str:
    """What a seal holds of the request's ``kyc_application`` (None: none given)."""
    return digest(b"application\0" + (application or "").encode())


def optional_digest(value: bytes | None) -> str:
    return NO_IMAGE if value is None else digest(value)


class Sealer:
    """Seals and attestations under one key (:func:`pipeline_sealer`)."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    def _tag(self, *parts: str) -> str:
        message = "|".join(parts).encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()[: 2 * DIGEST_BYTES]

    def seal(self, ticket: tuple[int, int, int], issued_at: float, document: bytes,
             selfie: bytes | None, token: bytes | None = None,
             application: str | None = None) -> str:
        """The seal of one row: its ticket, ``issued_at``, its images, its liveness token
        (None: the request has none) and its ``kyc_application``."""
        fields = [SEAL_VERSION, *map(str, ticket), str(int(issued_at * 1000)),
                  digest(document), optional_digest(selfie), optional_digest(token),
                  application_digest(application)]
        return ".".join([*fields, self._tag(*fields)])

    def open_seal(self, seal: str, ticket: tuple[int, int, int], now: float,
                  max_age_s: float) -> SealClaims:
        """The claims of ``seal`` for the row holding ``ticket``; SealError when the MAC,
        the ticket or the age does not hold."""
        fields = seal.split(".")
        if len(fields) != SEAL_FIELDS + 1 or fields[0] != SEAL_VERSION:
            raise SealError("no seal of kyc_intake")
        if not hmac.compare_digest(fields[-1], self._tag(*fields[:-1])):
            raise SealError("the seal of kyc_intake does not hold")
        sealed = tuple(int(v) for v in fields[1:4])
        if sealed != tuple(int(v) for v in ticket):
            raise SealError("the seal names another admission ticket")
        issued = int(fields[4]) / 1000.0
        if not -5.0 <= now - issued <= max_age_s:
            raise SealError(f"the seal is older than {max_age_s:g} s")
        return SealClaims(sealed, issued, *fields[5:9])  # type: ignore[arg-type]

    def attest(self, kind: str, image: str, outputs: Mapping[str, np.ndarray]) -> str:
        """``image`` (a digest) -> ``outputs`` (one row each, by name), under the MAC."""
        return f"{ATTESTATION_VERSION}.{image}.{self._tag(*self._parts(kind, image, outputs))}"

    def attested_image(self, kind: str, attestation: str,
                       outputs: Mapping[str, np.ndarray]) -> str:
        """The digest of the image ``attestation`` says ``outputs`` came from; SealError
        when it is missing or does not hold for them."""
        image = attestation_image(attestation)
        if image is None:
            raise SealError(f"no attestation of the {kind} step")
        expected = self._tag(*self._parts(kind, image, outputs))
        if not hmac.compare_digest(attestation.rsplit(".", 1)[1], expected):
            raise SealError(f"the attestation of the {kind} step does not hold")
        return image

    @staticmethod
    def _parts(kind: str, image: str, outputs: Mapping[str, np.ndarray]) -> list[str]:
        return [ATTESTATION_VERSION, kind, image,
                *(f"{name}={digest(outputs[name])}" for name in sorted(outputs))]


def attestation_image(attestation: str) -> str | None:
    """The digest of the image ``attestation`` names, its MAC unchecked (None: not an
    attestation): for one this process made, or before :meth:`Sealer.attested_image`."""
    fields = attestation.split(".")
    return fields[1] if len(fields) == 3 and fields[0] == ATTESTATION_VERSION else None


def attestations(sealer: Sealer | None, kind: str, images: Sequence[str | None],
                 outputs: Mapping[str, np.ndarray], names: Sequence[str]) -> np.ndarray:
    """The ATTESTATION tensor of a step's answer: row k attests ``outputs``' row k
    (those ``names``) came from the image of digest ``images[k]``; "" where there is
    no sealer (no token key) or no image digest."""
    return np.array([[(sealer.attest(kind, image, {n: outputs[n][row] for n in names})
                       if sealer is not None and image is not None else "").encode()]
                     for row, image in enumerate(images)], dtype=np.object_)


SEAL_LABEL = b"kyc-pipeline-seal-v1"


def pipeline_sealer(environ: Mapping[str, str] | None) -> Sealer | None:
    """The server's sealer (its key from the token key), None where there is no key."""
    try:
        token_key = load_key(dict(environ) if environ is not None else None)
    except TokenKeyError:
        return None
    return Sealer(derive_key(token_key, SEAL_LABEL))


def text_of(array: np.ndarray, row: int = 0) -> str:
    """Row ``row`` of a TYPE_STRING tensor as text ("" when it is empty)."""
    flat = array.reshape(len(array), -1) if array.ndim else array.reshape(1, 1)
    value = flat[row][0] if flat.shape[1] else b""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
