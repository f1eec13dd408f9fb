"""The scenario groups of ``kyc bench`` (see :mod:`kyc_tools.dev.bench.core`), each on the bench's
server: ``kyc`` (end to end, served and in process), ``batching`` (face_embedding
and ocr_rec with dynamic batching on and off), ``liveness`` (sessions, alone and
under an OCR load), ``document`` (document_ocr against the OCR peer) and ``publish``
(the first request after ``kyc repo publish`` of a new version); and the driver,
:func:`run_bench`, that runs the selected groups on one server and makes the report.

Every input is generated from the real test photos and the document renderer.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from kyc_tools.dev.bench.core import Bench, Served, TensorClient, running_server
from kyc_tools.dev.bench.models import check_weights, copy_repository, face_photos, onnx_session
from kyc_tools.dev.bench.options import (
    BATCHING_SPEEDUP_LEVEL,
    GROUPS,
    LIVENESS_GOAL_SESSIONS,
    OCR_LOAD_CLIENTS,
    BenchOptions,
)
from kyc_tools.dev.bench.stats import process_memory
from kyc_tools.dev.bench.summary import machine, summarize

log = logging.getLogger(__name__)

REC_WIDTH = 320  # ocr_rec's usual crop width: one shape, so that requests can be batched


# The customers and documents each served scenario cycles through, the same in a quick
# run as in a full one: a quick run has shorter windows, never other customers (issue 48).
KYC_CUSTOMERS = 8
DOCUMENTS = 16


# -- kyc: end to end ---------------------------------------------------------------------
class KycClient:
    """kyc_ensemble through the SDK's asyncio client, cycling through the cases."""

    def __init__(self, grpc_url: str, cases: Sequence[Any], offset: int = 0) -> None:
        from kyc_client.sdk import AsyncKycClient

        self.client, self.cases, self.index = AsyncKycClient(grpc_url), cases, offset

    async def next(self) -> Mapping[str, int]:
        case = self.cases[self.index % len(self.cases)]
        self.index += 1
        from kyc_tools.dev.bench.kyc import tally

        return tally(await self.client.verify(case.document, case.selfie))

    async def close(self) -> None:
        await self.client.close()


async def run_kyc(bench: Bench) -> None:
    from kyc_tools.dev.bench.kyc import (
        KYC_DESCRIPTION,
        KycInProcess,
        case_inputs,
        kyc_cases,
    )

    cases = kyc_cases(KYC_CUSTOMERS)
    levels = bench.options.levels_of("kyc")
    await bench.sweep(Served("kyc_ensemble", KYC_DESCRIPTION, "requests", "kyc_ensemble",
                             bench.models_of("kyc_ensemble"),
                             lambda url, k: KycClient(url, cases, k), levels,
                             perf_inputs=[case_inputs(c) for c in cases]))
    bench.in_process("kyc_in_process", f"{KYC_DESCRIPTION}; in process without Triton, the "
                     "same kyc code and ONNX files, batches of min(concurrency, max batch)",
                     "requests", KycInProcess, cases, levels)


# -- batching: one model with dynamic batching on and off --------------------------------
def aligned_faces(grpc_url: str) -> list[np.ndarray]:
    """face_preprocess's FACE of every real test photo: [1, 112, 112, 3] uint8 each."""
    import tritonclient.grpc as grpcclient

    from kyc_client.channel import as_channel

    channel = as_channel(grpc_url)  # with the client key found here
    client = channel.grpc_client(grpcclient)
    faces = []
    try:
        for photo in face_photos():
            tensor = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
            tensor.set_data_from_numpy(np.array([[photo]], dtype=np.object_))
            result = client.infer("face_preprocess", [tensor], headers=channel.metadata)
            if bool(result.as_numpy("FACE_FOUND")[0, 0]):
                faces.append(result.as_numpy("FACE"))
    finally:
        client.close()
    if not faces:
        raise RuntimeError("face_preprocess found no face in the test photos")
    return faces


def text_line_crops(repository: Path, documents: int) -> list[np.ndarray]:
    """The text-line crops the document reader gives ocr_rec on rendered documents,
    each cut or padded to REC_WIDTH: [1, 48, REC_WIDTH, 3] uint8 each."""
    from kyc.document.lines import PAD_VALUE
    from kyc_tools.dev.bench.document import DocumentInProcess, document_cases

    runner = DocumentInProcess(repository)
    crops: list[np.ndarray] = []
    recognise = runner.reader.recognise

    def capture(batch: np.ndarray) -> np.ndarray:
        for image in batch:
            crop = np.full((image.shape[0], REC_WIDTH, 3), PAD_VALUE, dtype=np.uint8)
            width = min(REC_WIDTH, image.shape[1])
            crop[:, :width] = image[:, :width]
            crops.append(crop[None])
        return recognise(batch)

    runner.reader.recognise = capture
    runner(document_cases(documents))
    return crops


async def run_batching(bench: Bench) -> None:
    levels = bench.options.levels_of("batching")
    if BATCHING_SPEEDUP_LEVEL not in levels:
        log.warning("dynamic_batching_speedup is taken at concurrency %d, not swept here",
                    BATCHING_SPEEDUP_LEVEL)
    faces = aligned_faces(bench.grpc_url)
    crops = text_line_crops(bench.repository, 2)
    targets = (
        ("face_embedding", "FACE", faces, "EMBEDDING", "faces",
         "one aligned face (face_preprocess's FACE of a real photo) -> face_embedding"),
        ("ocr_rec", "IMAGES", crops, "PROBS", "lines",
         f"one text-line crop (48x{REC_WIDTH}, cut from rendered documents by the "
         "document reader) -> ocr_rec"),
    )
    for model, name, payloads, output, unit, description in targets:
        for batching in (True, False):
            bench.load_variant(model, batching)
            variant = "on" if batching else "off"

            def make(url: str, k: int, model: str = model, name: str = name,
                     payloads: Sequence[np.ndarray] = payloads, output: str = output,
                     unit: str = unit) -> TensorClient:
                return TensorClient(url, model, name, payloads, output, unit, offset=k)

            how = "shipped config" if batching else (
                "shipped config less dynamic_batching, loaded through the model-control API")
            await bench.sweep(Served(f"{model}_batching_{variant}",
                                     f"{description}; dynamic batching {variant} ({how})",
                                     unit, model, (model,), make, levels,
                                     perf_inputs=[{name: p} for p in payloads]))
        bench.load_variant(model, True)
        ceiling = bench.extra.setdefault("batching_ceiling_in_process", {})
        ceiling[model] = batching_ceiling(bench.repository, model, name, payloads)


def batching_ceiling(repository: Path, model: str, name: str, payloads: Sequence[np.ndarray],
                     repeats: int = 5) -> dict[str, Any]:
    """What batching can buy at most: onnxruntime alone, in this process, with the
    served model's settings, per item at batch 1 and at batch BATCHING_SPEEDUP_LEVEL
    (median of ``repeats`` runs after one discarded). No server, no queue: on a CPU
    the ceiling of ``dynamic_batching_speedup`` is about their ratio."""
    import statistics
    import time

    session = onnx_session(repository, model)
    rows = [payloads[k % len(payloads)] for k in range(BATCHING_SPEEDUP_LEVEL)]

    def per_item(batch: np.ndarray) -> float:
        session.run(None, {name: batch})
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            session.run(None, {name: batch})
            times.append(time.perf_counter() - started)
        return statistics.median(times) * 1e3 / len(batch)

    one, many = per_item(rows[0]), per_item(np.concatenate(rows))
    return {"ms_per_item_batch_1": round(one, 2),
            f"ms_per_item_batch_{BATCHING_SPEEDUP_LEVEL}": round(many, 2),
            "ceiling": round(one / many, 3)}


# -- liveness ------------------------------------------------------------------------------
async def run_liveness(bench: Bench) -> None:
    from kyc_tools.dev.bench.document import DocumentClient, document_cases
    from kyc_tools.dev.bench.liveness import LIVENESS_DESCRIPTION, LivenessBenchClient, MoveLibrary

    moves = MoveLibrary.build(bench.grpc_url)
    levels = bench.options.levels_of("liveness")
    scenario = Served("liveness_sequence", LIVENESS_DESCRIPTION, "frames", "liveness_sequence",
                      bench.models_of("liveness_sequence"),
                      lambda url, k: LivenessBenchClient(url, moves, k), levels)
    await bench.sweep(scenario)
    documents = document_cases(4)
    await bench.sweep(
        Served(scenario.name, scenario.description, scenario.unit, scenario.entry,
               bench.models_of("liveness_sequence", "document_ocr"), scenario.make_client,
               (LIVENESS_GOAL_SESSIONS,)),
        background=lambda: [DocumentClient(bench.grpc_url, documents, k)
                            for k in range(OCR_LOAD_CLIENTS)],
        name="liveness_sequence_under_ocr_load",
        extra={"load": f"{OCR_LOAD_CLIENTS} document_ocr clients in closed loops on the same "
                       "server during the whole level (their answers: 'background')"})


# -- document reading against the peer ---------------------------------------------------
async def run_document(bench: Bench) -> None:
    from kyc_tools.dev.bench.document import (
        DOCUMENT_DESCRIPTION,
        PEER_DESCRIPTION,
        DocumentClient,
        RapidOcrPeer,
        document_cases,
    )
    from kyc_tools.dev.eval.document_cases import rates

    cases = document_cases(DOCUMENTS)
    await bench.sweep(Served("document_ocr", DOCUMENT_DESCRIPTION, "documents", "document_ocr",
                             bench.models_of("document_ocr"),
                             lambda url, k: DocumentClient(url, cases, k),
                             bench.options.levels_of("document"), quality=rates,
                             perf_inputs=[{"IMAGE": np.array([[c.image]], dtype=np.object_)}
                                          for c in cases]))
    bench.in_process("document_peer_rapidocr", PEER_DESCRIPTION, "documents", RapidOcrPeer,
                     cases, (1,), kind="peer", quality=rates)


# -- the first request after a version switch ---------------------------------------------
PUBLISH_MODELS = ("face_embedding", "ocr_rec")


async def run_publish(bench: Bench) -> None:
    from kyc_tools.dev.bench.publish import first_request_after_publish

    if bench.options.url is not None:
        bench.extra["first_request_after_publish"] = {"skipped": (
            "publishing needs the bench's own server and repository copy (not with --url)")}
        return
    face = aligned_faces(bench.grpc_url)[0]
    crop = text_line_crops(bench.repository, 1)[0]
    inputs = {"face_embedding": ("FACE", face, "EMBEDDING"),
              "ocr_rec": ("IMAGES", crop, "PROBS")}
    figures = bench.extra.setdefault("first_request_after_publish", {})
    for model in PUBLISH_MODELS:
        name, payload, output = inputs[model]
        figures[model] = first_request_after_publish(bench, model, name, payload, output)


# -- running them ----------------------------------------------------------------------
RUNS: dict[str, Callable[[Bench], Awaitable[None]]] = {
    "kyc": run_kyc, "batching": run_batching, "liveness": run_liveness,
    "document": run_document, "publish": run_publish,
}


async def run_groups(bench: Bench) -> None:
    for group in GROUPS:
        if group == "publish" and bench.server_pid is not None:
            # Before the version switches: they restart stubs, which would hide what
            # the load grew.
            bench.memory = process_memory(bench.server_pid)
        if bench.options.runs(group):
            await RUNS[group](bench)
    if not bench.memory and bench.server_pid is not None:
        bench.memory = process_memory(bench.server_pid)


def run_bench(options: BenchOptions) -> dict[str, Any]:
    """Every selected scenario group in turn on one server; the report."""
    started_at, host = datetime.now(timezone.utc), machine()
    check_weights(options.model_repository, [p.parent.name for p in
                                             options.model_repository.glob("*/config.pbtxt")])
    memory: dict[str, Any] = {}
    if options.url is not None:
        bench = Bench(options, options.url, options.admin_key, options.model_repository)
        asyncio.run(run_groups(bench))
        memory = {"skipped": "the server was not started by the bench (--url)"}
    else:
        with tempfile.TemporaryDirectory(prefix="kyc-bench-") as tmp:
            repository = copy_repository(options.model_repository, Path(tmp) / "models")
            admission_off(repository)
            with running_server(repository, Path(tmp) / "tritonserver.log") as server:
                assert server.process is not None
                bench = Bench(options, server.options.grpc_url, server.admin_key, repository,
                              server_pid=server.process.pid)
                asyncio.run(run_groups(bench))
                memory = bench.memory
    report = summarize(bench.scenarios, options, started_at, host, memory, bench.extra)
    report["settings"]["load_generators"] = load_generators(bench.scenarios)
    report["settings"]["admission_control"] = ADMISSION_NOTE if options.url is None else (
        "as the server at --url is configured")
    return report


ADMISSION_NOTE = ("off in the bench's copy of the repository: the bench measures what the "
                  "server can carry up to concurrency 16; kyc_intake's admission control "
                  "(on in the shipped config) would refuse the customers past its limit, "
                  "which tests/integration/test_admission.py measures")


def admission_off(repository: Path) -> None:
    """kyc_intake's ``admission`` parameter set to false in the bench's copy."""
    from kyc_tools.repo.config_edit import edit_config

    path = repository / "kyc_intake" / "config.pbtxt"
    if not path.is_file():
        return

    def change(config) -> None:
        config.parameters["admission"].string_value = "false"

    path.write_text(edit_config(path.read_text(), change))


def load_generators(scenarios: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Which load generator measured each served scenario, and perf_analyzer's version."""
    from kyc_tools.dev.bench import perf_analyzer

    used = {name: figs["load_generator"] for name, figs in scenarios.items()
            if "load_generator" in figs}
    version = perf_analyzer.version() if "perf_analyzer" in used.values() else None
    return {"perf_analyzer": version, "scenarios": used}
