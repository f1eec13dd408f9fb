"""``kyc_decision``'s chain of custody: its inputs came through ``kyc_ensemble``.

Every request is checked before anything of it is read (:mod:`kyc.pipeline.seal`):
``kyc_intake``'s seal holds for the row's admission ticket and is fresh; it names the
liveness token that arrived and the request's ``kyc_application`` (a seal and its
attestations replayed with another token or for another application are worth
nothing); the document face, the selfie face and the document's reading each carry
an attestation that holds for what arrived and names the image the seal names for
it. A request that fails any of it is answered INVALID_ARG "did not come through
kyc_ensemble" and gives back no ticket, so neither a verdict nor another customer's
place can be forged.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from kyc.document.step import DOCUMENT_ATTESTED, DOCUMENT_KIND
from kyc.face.step import ATTESTATION_KIND as FACE_KIND
from kyc.face.step import ATTESTED as FACE_ATTESTED
from kyc.intake import TOKEN_INPUT
from kyc.pipeline.seal import (
    NO_IMAGE,
    SealClaims,
    Sealer,
    SealError,
    application_digest,
    digest,
    text_of,
)
from kyc.pipeline.step import RequestError, encoded_items

# decision input prefix (before face_preprocess's output names) -> the image the seal
# names for it
FACES = {"DOC_": "document", "SELFIE_": "selfie"}
CUSTODY_INPUTS = ("SEAL", "ADMISSION", "DOC_ATTESTATION", "SELFIE_ATTESTATION",
                  "DOCUMENT_ATTESTATION")
NOT_THROUGH = "the inputs did not come through kyc_ensemble"


def _row(arrays: Mapping[str, np.ndarray], name: str) -> np.ndarray:
    array = arrays[name]
    if len(array) != 1:
        raise SealError(f"{name} holds {len(array)} rows, one is expected")
    return array[0]


def check_custody(sealer: Sealer, arrays: Mapping[str, np.ndarray], now: float,
                  max_age_s: float, application: str | None) -> SealClaims:
    """The seal's claims when every input of this request is the pipeline's, for its
    token and ``application``; RequestError saying it is not, else."""
    try:
        missing = [name for name in (*CUSTODY_INPUTS, TOKEN_INPUT) if name not in arrays]
        if missing:
            raise SealError(f"missing {', '.join(missing)}")
        claims = sealer.open_seal(text_of(arrays["SEAL"]), tuple(_row(arrays, "ADMISSION")),
                                  now, max_age_s)
        if claims.token != digest(token_bytes(arrays)):
            raise SealError("the seal names another liveness token")
        if claims.application != application_digest(application):
            raise SealError("the seal names another kyc_application")
        for prefix, image in FACES.items():
            outputs = {name: _row(arrays, prefix + name) for name in FACE_ATTESTED}
            attested = sealer.attested_image(FACE_KIND, text_of(arrays[prefix + "ATTESTATION"]),
                                             outputs)
            _same(attested, getattr(claims, image), f"the {image} face")
        outputs = {name: _row(arrays, name) for name in DOCUMENT_ATTESTED}
        attested = sealer.attested_image(DOCUMENT_KIND, text_of(arrays["DOCUMENT_ATTESTATION"]),
                                         outputs)
        _same(attested, claims.document, "the document's reading")
    except (SealError, KeyError, ValueError) as exc:
        raise RequestError(f"{NOT_THROUGH} ({exc})") from None
    return claims


def token_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    """The request's liveness token (b"": none), read as kyc_intake read it to seal it."""
    tokens = encoded_items(arrays, TOKEN_INPUT)
    if len(tokens) != 1:
        raise SealError(f"{TOKEN_INPUT} holds {len(tokens)} rows, one is expected")
    return tokens[0]


def _same(attested: str, sealed: str, what: str) -> None:
    if sealed == NO_IMAGE or attested != sealed:
        raise SealError(f"{what} is not of the images kyc_intake sealed")
