"""kyc_decision's inputs for one customer, sealed and attested as the pipeline gives them,
with the custody key, the clock and the stand-in embedding the decision tests share."""

from __future__ import annotations

import json
import secrets
from datetime import date

import numpy as np

from kyc.document.step import DOCUMENT_ATTESTED, DOCUMENT_KIND
from kyc.face.step import ATTESTATION_KIND, ATTESTED
from kyc.pipeline.seal import Sealer
from kyc.pipeline.step import Request

TODAY = date(2026, 11, 22)
DOCUMENT = {
    "mrz": {"format": "TD3", "lines": [], "valid": True, "corrections": 0,
            "checks": {"document_number": True, "birth_date": True, "expiry_date": True,
                       "optional_data": True, "composite": True}},
    "fields": {"surname": "BERG", "given_names": "ANNA", "document_number": "X12045",
               "birth_date": "1990-05-01", "expiry_date": "2030-01-01"},
}


def text(value) -> np.ndarray:
    return np.array([[json.dumps(value).encode()]], dtype=np.object_)


CUSTODY = Sealer(secrets.token_bytes(32))
NOW = 1_800_000_000.0
IMAGES = {"DOC_": b"document image", "SELFIE_": b"selfie image"}


def sealed(arrays: dict, sealer: Sealer = CUSTODY, images: dict | None = None) -> dict:
    """``arrays`` with the seal and attestations the pipeline would have given them, for
    the client's ``images`` (by input prefix; default :data:`IMAGES`)."""
    from kyc.pipeline.seal import digest

    images = images or IMAGES
    ticket = (0, -1, -1)
    out = {**arrays, "ADMISSION": np.array([ticket], np.int64),
           "SEAL": np.array([[sealer.seal(ticket, NOW, images["DOC_"], images["SELFIE_"])
                              .encode()]], dtype=np.object_)}
    for prefix, image in images.items():
        if all(prefix + n in arrays for n in ATTESTED):
            out[prefix + "ATTESTATION"] = np.array([[sealer.attest(
                ATTESTATION_KIND, digest(image),
                {n: arrays[prefix + n][0] for n in ATTESTED}).encode()]], dtype=np.object_)
    if all(n in arrays for n in DOCUMENT_ATTESTED):
        out["DOCUMENT_ATTESTATION"] = np.array([[sealer.attest(
            DOCUMENT_KIND, digest(images["DOC_"]),
            {n: arrays[n][0] for n in DOCUMENT_ATTESTED}).encode()]], dtype=np.object_)
    return out


def request(images: dict | None = None, **changes) -> Request:
    """kyc_decision's inputs for one customer (batch of 1), as the pipeline seals and
    attests them: both faces found (the same face), a valid MRZ, no liveness token."""
    face = np.zeros((1, 112, 112, 3), np.uint8)
    arrays = {"DOC_FACE_FOUND": np.array([[True]]), "DOC_FACE": face,
              "DOC_NUM_FACES": np.array([[1]], np.int32), "DOC_QUALITY": text({}),
              "SELFIE_FACE_FOUND": np.array([[True]]), "SELFIE_FACE": face,
              "SELFIE_NUM_FACES": np.array([[1]], np.int32), "SELFIE_QUALITY": text({}),
              "DOCUMENT": text(DOCUMENT), "TEXT_LINES": text([]),
              "LIVENESS_TOKEN": np.array([[b""]], dtype=np.object_)}
    return Request(sealed({k: v for k, v in {**arrays, **changes}.items() if v is not None},
                          images=images))


def embed(faces: np.ndarray) -> np.ndarray:
    """A stand-in embedding: the unit vector of a face's first pixel's red value."""
    out = np.zeros((len(faces), 4), np.float32)
    out[np.arange(len(faces)), faces[:, 0, 0, 0].astype(int) % 4] = 1.0
    return out
