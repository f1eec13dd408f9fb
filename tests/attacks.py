"""The security review's attacks on a real server, as helpers the tests repeat (and
that measure what each attack gets): each one speaks raw gRPC, as an attacker would."""

from __future__ import annotations

import io
import threading
import time

import numpy as np
import tritonclient.grpc as grpcclient
from PIL import Image
from tritonclient.utils import InferenceServerException


def tiny_jpeg(side: int = 64) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (side, side), (200, 200, 190)).save(buffer, "JPEG")
    return buffer.getvalue()


def _input(name: str, array: np.ndarray, dtype: str) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), dtype)
    tensor.set_data_from_numpy(array)
    return tensor


def _outputs(result, names) -> dict[str, np.ndarray]:
    return {name: result.as_numpy(name) for name in names}


def give_back_once(client: grpcclient.InferenceServerClient, image: bytes, attested: bool,
                   headers: dict | None = None) -> bool:
    """One ticket of document_ocr taken from kyc_intake for ``image`` and handed straight
    back through ocr_postprocess with its seal and a blank map (no ocr_det): with the
    canvas ocr_preprocess attests for it when ``attested``. False when shed."""
    page = np.array([[image]], dtype=np.object_)
    try:
        taken = _outputs(client.infer("kyc_intake", [_input("DOCUMENT_IMAGE", page, "BYTES")],
                                      headers=headers), ("ADMISSION", "SEAL"))
    except InferenceServerException:
        return False
    inputs = {"CANVAS": np.zeros((1, 32, 32, 3), np.uint8), "SCALE": np.ones((1, 2), np.float32)}
    if attested:
        made = client.infer("ocr_preprocess", [_input("IMAGE", page, "BYTES")], headers=headers)
        inputs = _outputs(made, ("CANVAS", "SCALE"))
        inputs["CANVAS_ATTESTATION"] = made.as_numpy("ATTESTATION")
    inputs["PROB_MAP"] = np.zeros(inputs["CANVAS"].shape[:3], np.float32)
    kinds = {"CANVAS": "UINT8", "SCALE": "FP32", "PROB_MAP": "FP32", "ADMISSION": "INT64",
             "SEAL": "BYTES", "CANVAS_ATTESTATION": "BYTES"}
    client.infer("ocr_postprocess", [_input(name, array, kinds[name]) for name, array in
                                     {**inputs, **taken}.items()], headers=headers)
    return True


def give_back_attack(url: str, seconds: float, attested: bool = False, threads: int = 8,
                     headers: dict | None = None) -> int:
    """The review's attack on admission: ``threads`` callers taking tickets and handing
    them straight back, for ``seconds``; how many went round."""
    image, rounds, end = tiny_jpeg(), [0], time.monotonic() + seconds

    def caller() -> None:
        client = grpcclient.InferenceServerClient(url)
        try:
            while time.monotonic() < end:
                rounds[0] += give_back_once(client, image, attested, headers)
        finally:
            client.close()

    workers = [threading.Thread(target=caller, daemon=True) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(seconds + 30)
    return rounds[0]
