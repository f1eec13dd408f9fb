"""kyc_decision's inputs for one customer, sealed and attested as the pipeline gives them,
with the custody key, the clock and the stand-in embedding the decision tests share."""

from __future__ import annotations

import json
import secrets
from datetime import date

import numpy as np

from kyc.document.step import DOCUMENT_ATTESTED, DOCUMENT_KIND
from kyc.face.match import FaceThresholds
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


def sealed(arrays: dict, sealer: Sealer = CUSTODY, images: dict | None = None,
           application: str | None = None) -> dict:
    """``arrays`` with the seal and attestations the pipeline would have given them, for
    the client's ``images`` (by input prefix; default :data:`IMAGES`), the token in
    ``arrays`` and the request's ``application``."""
    from kyc.pipeline.seal import digest

    images = images or IMAGES
    ticket = (0, -1, -1)
    token = arrays["LIVENESS_TOKEN"].reshape(-1)[0] if "LIVENESS_TOKEN" in arrays else None
    out = {**arrays, "ADMISSION": np.array([ticket], np.int64),
           "SEAL": np.array([[sealer.seal(ticket, NOW, images["DOC_"], images["SELFIE_"],
                                          token, application).encode()]], dtype=np.object_)}
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


# The page's visual zone as read: the MRZ's surname and document number printed
VISUAL_LINES = [{"text": "Surname/Nom BERG", "confidence": 0.95},
                {"text": "Passport No. X12045", "confidence": 0.93}]


def request(images: dict | None = None, application: str | None = None,
            sealer: Sealer = CUSTODY, **changes) -> Request:
    """kyc_decision's inputs for one customer (batch of 1), as the pipeline seals and
    attests them: both faces found (the same face), a valid MRZ whose surname and number
    the visual zone shows, no liveness token; sent with ``application``."""
    face = np.zeros((1, 112, 112, 3), np.uint8)
    arrays = {"DOC_FACE_FOUND": np.array([[True]]), "DOC_FACE": face,
              "DOC_NUM_FACES": np.array([[1]], np.int32), "DOC_QUALITY": text({}),
              "SELFIE_FACE_FOUND": np.array([[True]]), "SELFIE_FACE": face,
              "SELFIE_NUM_FACES": np.array([[1]], np.int32), "SELFIE_QUALITY": text({}),
              "DOCUMENT": text(DOCUMENT), "TEXT_LINES": text(VISUAL_LINES),
              "LIVENESS_TOKEN": np.array([[b""]], dtype=np.object_)}
    params = {} if application is None else {"kyc_application": application}
    return Request(sealed({k: v for k, v in {**arrays, **changes}.items() if v is not None},
                          sealer, images=images, application=application), parameters=params)


def embed(faces: np.ndarray) -> np.ndarray:
    """A stand-in embedding: the unit vector of a face's first pixel's red value."""
    out = np.zeros((len(faces), 4), np.float32)
    out[np.arange(len(faces)), faces[:, 0, 0, 0].astype(int) % 4] = 1.0
    return out


class TicketsBack:
    """Stands in for kyc_decision's TicketReturns: the ticket rows it was given back,
    each with whether it teaches the admission limit."""

    def __init__(self) -> None:
        self.rows: list = []
        self.times: list[float] = []  # when each give-back was made, as the step said

    def give_back(self, rows, now: float) -> None:
        self.rows.extend(rows)
        self.times.append(now)


def decision_step(key: bytes, settings=None, *, ledger_began: float = NOW - 60,
                  clock: float = NOW + 1, score=None, embedder=None, **options):
    """kyc_decision's step over ``embedder`` (default: the stand-in embedding), antifraud
    answering ``score`` (default 0), the custody key, the token key ``key``, a ledger
    that began ``ledger_began`` and the time ``clock``."""
    from kyc.decision.ledger import MemoryLedger
    from kyc.decision.policy import DecisionSettings
    from kyc.decision.step import DecisionStep
    from kyc.liveness.token import TokenSealer

    return DecisionStep(settings or DecisionSettings(), FaceThresholds(0.363, 0.363),
                        TokenSealer(key),
                        score or (lambda f: np.zeros((len(f), 1), np.float32)),
                        embedder or embed, CUSTODY,
                        today=lambda: TODAY, clock=lambda: clock,
                        ledger=MemoryLedger(lambda: ledger_began), **options)


def live_token(key: bytes, application: str | None, issued_at: float = NOW,
               face: bool = True, score: float = 0.97) -> np.ndarray:
    """A LIVENESS_TOKEN tensor of a live session with passive PAD, bound to
    ``application``, carrying the stand-in embedding of a zero face (or none)."""
    from kyc.liveness.token import LivenessClaims, TokenSealer

    embedding = embed(np.zeros((1, 112, 112, 3), np.uint8))[0] if face else None
    claims = LivenessClaims("s1", True, score, issued_at, issued_at + 120, ("left", "right"),
                            embedding, {"passive_pad": True}, application, secrets.token_hex(16))
    return np.array([[TokenSealer(key).seal(claims)]], dtype=np.object_)
