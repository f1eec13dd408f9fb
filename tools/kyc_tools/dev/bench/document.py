"""The document-reading workload of ``kyc bench``, and its peer.

One request = one photographed document through ``document_ocr`` (decode,
detection, recognition, MRZ). Documents are rendered at run time from seeded
random identities (the renderer of the tests: DejaVu visual zone, OCR-B MRZ, the
real test portraits, the default degradations), and every reading is scored
against what was printed (:mod:`kyc_tools.dev.eval.document_cases`).

The peer is ``rapidocr-onnxruntime`` (the same PP-OCR model family, in process:
its own detector, orientation classifier and Chinese+Latin recogniser, with its
default settings, one document per call). It has no MRZ reader, so its text
lines go through the same ``parse_mrz`` as ours: the comparison is of the
reading, with the same MRZ search and correction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from kyc.local import LocalRepository
from kyc.pipeline.step import Request
from kyc_tools.dev.bench.measure import Outcome
from kyc_tools.dev.bench.models import onnx_threads
from kyc_tools.dev.bench.options import CLIENT_TIMEOUT_S, PeerUnavailableError
from kyc_tools.dev.eval.document_cases import DocumentCase, render_cases, score

PEER_PACKAGE = "rapidocr-onnxruntime"


def document_cases(count: int) -> list[DocumentCase]:
    """``count`` rendered documents (TD3 and TD1 in turn), at least 2."""
    from kyc_tools.assets.fetch import fetch_test_photos
    from kyc_tools.dev.synthetic.document import require_fonts

    require_fonts()
    photos = fetch_test_photos()
    portraits = [np.asarray(_rgb(photos[role])) for role in sorted(photos)
                 if role != "CREDITS"]
    return render_cases(max(2, count), portraits)


def _rgb(path: Path) -> Any:
    from PIL import Image

    with Image.open(path) as image:
        return image.convert("RGB")


class DocumentClient:
    """document_ocr, one document per request, cycling through ``cases``; each
    DOCUMENT scored against the printed MRZ (asyncio gRPC)."""

    def __init__(self, grpc_url: str, cases: Sequence[DocumentCase], offset: int = 0) -> None:
        import tritonclient.grpc as grpcclient
        import tritonclient.grpc.aio as aioclient

        from kyc_client.channel import as_channel

        self.grpc, self.cases, self.index = grpcclient, cases, offset
        self.channel = as_channel(grpc_url)  # with the client key found here
        self.client = self.channel.grpc_client(aioclient)

    async def next(self) -> Mapping[str, int]:
        import json

        case = self.cases[self.index % len(self.cases)]
        self.index += 1
        tensor = self.grpc.InferInput("IMAGE", [1, 1], "BYTES")
        tensor.set_data_from_numpy(np.array([[case.image]], dtype=np.object_))
        result = await self.client.infer(
            "document_ocr", [tensor], client_timeout=CLIENT_TIMEOUT_S,
            outputs=[self.grpc.InferRequestedOutput("DOCUMENT")], headers=self.channel.metadata)
        return score(json.loads(result.as_numpy("DOCUMENT")[0, 0]), case)

    async def close(self) -> None:
        await self.client.close()


class DocumentInProcess:
    """document_ocr without Triton: :class:`kyc.local.LocalRepository` runs the
    steps its config wires (ocr_preprocess, one ocr_det run over the batch's
    canvases, ocr_postprocess with ocr_rec called in process)."""

    def __init__(self, repository: Path) -> None:
        self.local = LocalRepository(repository)
        self.max_batch = self.local.repository.max_batch_size("document_ocr")
        self.local.step("document_ocr")

    @property
    def reader(self):
        """ocr_postprocess's DocumentReader (its ``recognise`` calls ocr_rec)."""
        return self.local.step("ocr_postprocess").reader

    def __call__(self, cases: Sequence[DocumentCase]) -> list[Outcome]:
        import json

        answers = self.local.run("document_ocr", [
            Request({"IMAGE": np.array([[c.image]], dtype=np.object_)}) for c in cases])
        return [a if isinstance(a, Exception) else score(json.loads(a["DOCUMENT"][0, 0]), case)
                for a, case in zip(answers, cases, strict=True)]

    def settings(self) -> dict[str, Any]:
        return {"onnx_intra_op_threads": onnx_threads(self.local)}


class RapidOcrPeer:
    """rapidocr-onnxruntime with its defaults, one document per call; its lines
    read by kyc's parse_mrz."""

    max_batch = 1

    def __init__(self, repository: Path) -> None:
        try:
            from rapidocr_onnxruntime import RapidOCR
        except ImportError as exc:
            raise PeerUnavailableError(f"{PEER_PACKAGE} is not installed ({exc.name} missing); "
                                  "`make test` installs it") from None
        self.engine = RapidOCR()
        self.today = date.today()

    def __call__(self, cases: Sequence[DocumentCase]) -> list[Outcome]:
        return [score(self.read(case.image), case) for case in cases]

    def read(self, image: bytes) -> dict[str, Any]:
        """DOCUMENT of one encoded page: RapidOCR's lines through kyc's parse_mrz."""
        from kyc.document.mrz import parse_mrz

        result, _ = self.engine(image)
        return parse_mrz([text for _, text, _ in result or []], self.today)

    def settings(self) -> dict[str, Any]:
        from importlib.metadata import version

        return {"package": f"{PEER_PACKAGE}=={version(PEER_PACKAGE)}",
                "onnx_intra_op_threads": "its default (-1: onnxruntime picks, all cores)"}


DOCUMENT_DESCRIPTION = ("one document = document_ocr (decode, text detection, recognition, "
                        "MRZ) on a rendered, photographed ID card or passport page, scored "
                        "against its printed MRZ")
PEER_DESCRIPTION = (f"{PEER_PACKAGE} in process (its own PP-OCRv4 det, cls and Chinese+Latin "
                    "rec, default settings), one document per call, on the same documents; "
                    "its lines read by kyc's parse_mrz")
