"""kyc_ensemble's customers end to end: a document rendered with a real photo in its
portrait area, a liveness token from a real session, and the verdict the server gives
them (the report, with its decision and scores)."""

from __future__ import annotations

import dataclasses
import json
from datetime import date, timedelta

import numpy as np
from PIL import Image

from kyc_testing import Person, ensemble_inputs, live_session
from kyc_tools.dev.synthetic.document import (
    Degradation,
    alter_mrz_digit,
    random_identity,
    render_document,
)


def rgb(path) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGB"))


def document(photos, seed: int, *, expired: bool = False, forged: bool = False,
             underage: bool = False, printed: bool = True) -> bytes:
    rng = np.random.default_rng(seed)
    identity = random_identity(rng, expired=expired)
    if underage:
        identity = dataclasses.replace(identity, birth_date=date.today() - timedelta(days=15 * 365))
    portrait = rgb(photos["person_a_1"])
    lines = None
    if forged:
        genuine = render_document(identity, "td3", None, None, rng)
        lines, _ = alter_mrz_digit(list(genuine.mrz_lines), rng)
    return render_document(identity, "td3", portrait, Degradation(), rng,
                           mrz_lines=lines, printed=printed).jpeg_bytes()


def token_of(server, client, photos, role: str, application: str | None = None) -> bytes:
    replies = live_session(server.options.grpc_url, Person(server.options.grpc_url, role),
                           application=application)
    end = replies[-1]
    assert not isinstance(end, Exception) and end.is_live, end
    return end.token


def verify(client, doc: bytes, selfie: bytes, token: bytes = b"",
           application: str | None = None) -> dict:
    result = client.infer("kyc_ensemble", ensemble_inputs(doc, selfie, token),
                          parameters={"kyc_application": application} if application else None)
    report = json.loads(result.as_numpy("REPORT")[0, 0])
    assert result.as_numpy("DECISION")[0, 0].decode() == report["decision"]
    report["_scores"] = {k: float(result.as_numpy(k)[0, 0])
                         for k in ("FACE_MATCH_SCORE", "LIVENESS_SCORE", "FRAUD_SCORE")}
    return report
