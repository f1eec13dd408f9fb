"""``kyc bench``: throughput and latency of the served models against the same work in process.

Each registered :class:`Workload` (the face path; document reading) is measured
three ways, one after the other on a shared machine:

- served with the shipped configs (dynamic batching on), on a real Triton server;
- served with the ``dynamic_batching`` blocks removed from its models' configs;
- in this process without Triton: the same Python code and ONNX files, the same
  onnxruntime thread settings as the served ONNX models, in batches of up to the
  entry model's ``max_batch_size``;

and against its peers, where it has any: other software doing the same work in
process (document reading: ``rapidocr-onnxruntime``, installed by ``make test``,
reported as skipped where it is not installed). Workloads that can be right or
wrong (documents) are scored against what was printed, in every scenario.

Each served variant gets its own server (started in turn, never two at once) over
a temporary copy of the repository: configs copied so that they can be edited,
everything else symlinked. Load comes from ``concurrency`` closed-loop clients,
each with its own gRPC client; a warm-up round precedes every measured window.
Statistics-API counts (executions vs inferences) over the measured window show
whether batching happened. The served entry model is also timed alone, one
request at a time. Only counts, rates, shapes and timings are reported: never
image content, texts or embeddings.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import logging
import math
import os
import platform
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from kyc.repo.config import load_config, model_parameters, parse_config
from kyc.repo.publish import precompile_python_models
from kyc.runtime.server import ServerError, ServerOptions, TritonServer, free_port

log = logging.getLogger(__name__)

DEFAULT_REPOSITORY = Path("model_repository")
# Nothing changes in the copy while it is served.
POLL_SECS = 3600
READY_TIMEOUT_S = 180.0
STOP_GRACE_S = 10.0
CLIENT_TIMEOUT_S = 60.0
SETTLE_TIMEOUT_S = 2.0

VARIANT_ON = "served_batching_on"
VARIANT_OFF = "served_batching_off"
VARIANT_IN_PROCESS = "in_process"
VARIANTS = {
    VARIANT_ON: "served by Triton, shipped configs (dynamic batching on)",
    VARIANT_OFF: "served by Triton, dynamic_batching removed from the models' configs",
    VARIANT_IN_PROCESS: "in process without Triton, batches of min(concurrency, max batch)",
}
PEER_PREFIX = "peer_"
PRIMARY_WORKLOAD = "face"


class BenchError(RuntimeError):
    """The benchmark could not run (missing weights, server did not start...)."""


@dataclass(frozen=True)
class BenchOptions:
    """What to run. ``requests`` and ``concurrency`` apply to every scenario."""

    model_repository: Path = DEFAULT_REPOSITORY
    requests: int = 320
    concurrency: int = 8
    warmup_requests: int = 32
    quick: bool = False
    workloads: tuple[str, ...] = ()  # names of WORKLOADS; empty: all of them

    @classmethod
    def for_run(cls, *, quick: bool, model_repository: Path = DEFAULT_REPOSITORY,
                requests: int | None = None, concurrency: int | None = None,
                workloads: Sequence[str] = ()) -> BenchOptions:
        """The defaults of a full or a ``--quick`` run, with explicit values on top."""
        base = cls(requests=48, concurrency=4, warmup_requests=8) if quick else cls()
        return cls(
            model_repository=model_repository,
            requests=requests or base.requests,
            concurrency=concurrency or base.concurrency,
            warmup_requests=max(base.warmup_requests, 2 * (concurrency or base.concurrency)),
            quick=quick,
            workloads=tuple(workloads),
        )

    def scaled(self, cost: float) -> BenchOptions:
        """The options of a workload whose request costs ``cost`` face requests: fewer
        requests, never fewer than one per client."""
        if cost <= 1:
            return self
        return dataclasses.replace(
            self,
            requests=max(self.concurrency, math.ceil(self.requests / cost)),
            warmup_requests=max(self.concurrency, math.ceil(self.warmup_requests / cost)),
        )


# -- the model repository copy -------------------------------------------------------
def _skipped(name: str) -> bool:
    """Staging folders, locks and bytecode caches stay out of the copy."""
    return name.startswith(".") or name == "__pycache__"


def copy_repository(src: Path, dest: Path, models: Iterable[str] | None = None) -> Path:
    """A cheap copy of a model repository: ``config.pbtxt`` files copied (editable),
    every other file symlinked. ``models`` limits the copy to those model folders.

    Python files are precompiled in the copy: a stub that writes ``__pycache__``
    into a version folder on its first import makes a poll-mode server reload
    that model once, seconds after it is ready, which resets its statistics.
    """
    wanted = None if models is None else set(models)
    dest.mkdir(parents=True)
    for model_dir in sorted(p for p in src.resolve().iterdir() if p.is_dir()):
        if not _skipped(model_dir.name) and (wanted is None or model_dir.name in wanted):
            _mirror(model_dir, dest / model_dir.name)
    precompile_python_models(dest)
    return dest


def _mirror(src_dir: Path, dest_dir: Path) -> None:
    for root, dirs, files in os.walk(src_dir):
        dirs[:] = [d for d in dirs if not _skipped(d)]
        target = dest_dir / Path(root).relative_to(src_dir)
        target.mkdir(parents=True, exist_ok=True)
        for name in files:
            if _skipped(name):
                continue
            if name == "config.pbtxt":
                shutil.copyfile(Path(root) / name, target / name)
            else:
                os.symlink(Path(root) / name, target / name)


# -- configs without dynamic batching ------------------------------------------------
_COMMENT_OR_STRING = re.compile(r"#[^\n]*|\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*'")
_DYNAMIC_BATCHING = re.compile(r"\bdynamic_batching\s*:?\s*\{")


def _mask(text: str) -> str:
    """``text`` with comments and string literals blanked out (same length)."""
    return _COMMENT_OR_STRING.sub(lambda m: " " * len(m.group()), text)


def _closing_brace(masked: str, opening: int) -> int:
    depth = 0
    for i in range(opening, len(masked)):
        if masked[i] == "{":
            depth += 1
        elif masked[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    raise ValueError("unbalanced braces in the dynamic_batching block")


def _whole_lines(text: str, start: int, end: int) -> tuple[int, int]:
    """Widen [start, end) to whole lines when nothing else shares them."""
    line_start = text.rfind("\n", 0, start) + 1
    if not text[line_start:start].strip():
        start = line_start
    line_end = text.find("\n", end)
    line_end = len(text) if line_end < 0 else line_end + 1
    if not text[end:line_end].strip():
        end = line_end
    return start, end


def remove_dynamic_batching(text: str) -> str:
    """The config text without its top-level ``dynamic_batching { ... }`` block.

    Comments and string values are left alone, nested blocks (priority levels,
    queue policies) go with the block. Only ``{}`` delimiters are understood.
    """
    masked = _mask(text)
    spans = []
    for match in _DYNAMIC_BATCHING.finditer(masked):
        prefix = masked[: match.start()]
        if prefix.count("{") == prefix.count("}"):
            closing = _closing_brace(masked, match.end() - 1)
            spans.append(_whole_lines(text, match.start(), closing + 1))
    for start, end in reversed(spans):
        text = text[:start] + text[end:]
    return text


def disable_dynamic_batching(repository: Path, models: Iterable[str]) -> None:
    """Rewrite the copied configs of ``models`` without dynamic batching (checked)."""
    for model in models:
        path = repository / model / "config.pbtxt"
        try:
            text = remove_dynamic_batching(path.read_text(encoding="utf-8"))
            left = parse_config(text).HasField("dynamic_batching")
        except ValueError as exc:  # ConfigError is one too
            raise BenchError(f"{model}: config without dynamic_batching: {exc}") from None
        if left:
            raise BenchError(f"{model}: could not remove dynamic_batching from its config")
        path.write_text(text, encoding="utf-8")


# -- load and measurement ------------------------------------------------------------
# An answered request's tallies (e.g. {"faces_found": 1}), summed over the window;
# or what went wrong.
Outcome = Mapping[str, int] | Exception


class ServedClient(Protocol):
    """One client's path through the served models; one instance per thread."""

    def __call__(self, payload: Any) -> Mapping[str, int]: ...

    def close(self) -> None: ...


class InProcessRunner(Protocol):
    """The same path without Triton: a batch of payloads in, one outcome each out."""

    max_batch: int

    def __call__(self, payloads: Sequence[Any]) -> list[Outcome]: ...

    def settings(self) -> dict[str, Any]: ...


@dataclass
class Measurement:
    """Raw results of one measured window."""

    concurrency: int
    seconds: float = 0.0
    latencies_s: list[float] = field(default_factory=list)
    errors: int = 0
    tallies: dict[str, int] = field(default_factory=dict)

    @property
    def requests(self) -> int:
        return len(self.latencies_s) + self.errors

    def record(self, outcome: Outcome, latency_s: float) -> None:
        if isinstance(outcome, Exception):
            self.errors += 1
            log.log(logging.WARNING if self.errors <= 3 else logging.DEBUG,
                    "request failed: %s", outcome)
            return
        self.latencies_s.append(latency_s)
        for key, value in outcome.items():
            self.tallies[key] = self.tallies.get(key, 0) + int(value)


def drive_clients(make_client: Callable[[], ServedClient], payloads: Sequence[Any],
                  requests: int, concurrency: int) -> Measurement:
    """``requests`` requests from ``concurrency`` closed-loop clients (threads)."""
    measurement = Measurement(concurrency=concurrency)
    counter = itertools.count()
    lock = threading.Lock()

    def client_loop() -> None:
        client = make_client()
        try:
            while (i := next(counter)) < requests:
                started = time.perf_counter()
                try:
                    outcome: Outcome = client(payloads[i % len(payloads)])
                except Exception as exc:  # counted, the load goes on
                    outcome = exc
                with lock:
                    measurement.record(outcome, time.perf_counter() - started)
        finally:
            client.close()

    threads = [threading.Thread(target=client_loop, name=f"bench-client-{k}")
               for k in range(concurrency)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    measurement.seconds = time.perf_counter() - started
    return measurement


def drive_batches(runner: InProcessRunner, payloads: Sequence[Any], requests: int,
                  concurrency: int) -> Measurement:
    """``requests`` payloads in batches of min(concurrency, max batch): as if that
    many clients waited on a perfect batcher, each answered when its batch is done."""
    measurement = Measurement(concurrency=concurrency)
    size = max(1, min(concurrency, runner.max_batch))
    started = time.perf_counter()
    for first in range(0, requests, size):
        batch = [payloads[i % len(payloads)] for i in range(first, min(first + size, requests))]
        batch_started = time.perf_counter()
        try:
            outcomes = runner(batch)
        except Exception as exc:  # the whole batch failed
            outcomes = [exc] * len(batch)
        elapsed = time.perf_counter() - batch_started
        for outcome in outcomes:
            measurement.record(outcome, elapsed)
    measurement.seconds = time.perf_counter() - started
    return measurement


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100, linear interpolation); NaN for no values."""
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else math.nan


def latency_ms(latencies_s: Sequence[float]) -> dict[str, float | None]:
    """p50/p95/p99 in milliseconds; None when no request was answered."""
    return {f"p{q}": round(percentile(latencies_s, q) * 1e3, 2) if latencies_s else None
            for q in (50, 95, 99)}


def figures(measurement: Measurement, unit: str = "faces",
            quality: Callable[[Mapping[str, int]], Mapping[str, Any]] | None = None
            ) -> dict[str, Any]:
    """The reported figures of one measured window: ``<unit>_per_s`` counts answered
    requests only; the tallies, and the rates ``quality`` makes of them."""
    done = len(measurement.latencies_s)
    return {
        "unit": unit,
        f"{unit}_per_s": round(done / measurement.seconds, 3) if measurement.seconds > 0 else 0.0,
        "latency_ms": latency_ms(measurement.latencies_s),
        "requests": measurement.requests,
        "errors": measurement.errors,
        **measurement.tallies,
        **(quality(measurement.tallies) if quality else {}),
        "concurrency": measurement.concurrency,
        "seconds": round(measurement.seconds, 3),
    }


# -- statistics API ------------------------------------------------------------------
Counts = dict[str, dict[str, int]]


def stats_counts(stats: Mapping[str, Any]) -> dict[str, int]:
    """execution_count and inference_count of a model (summed over its versions)
    from ``get_inference_statistics(..., as_json=True)``."""
    entries = stats.get("model_stats", [])
    return {key: sum(int(e.get(key, 0)) for e in entries)
            for key in ("execution_count", "inference_count")}


def count_deltas(before: Counts, after: Counts) -> Counts:
    deltas = {model: {key: after[model][key] - before[model][key] for key in after[model]}
              for model in after}
    for model, counts in deltas.items():
        if min(counts.values()) < 0:
            log.warning("%s: statistics went back (the model was reloaded?)", model)
    return deltas


def read_counts(client: Any, models: Sequence[str]) -> Counts:
    return {m: stats_counts(client.get_inference_statistics(
        model_name=m, as_json=True, client_timeout=CLIENT_TIMEOUT_S)) for m in models}


def settled_counts(client: Any, models: Sequence[str]) -> Counts:
    """Counts once two readings agree: statistics land just after the responses."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    counts = read_counts(client, models)
    while time.monotonic() < deadline:
        time.sleep(0.1)
        again = read_counts(client, models)
        if again == counts:
            break
        counts = again
    return counts


# -- workloads -----------------------------------------------------------------------
@dataclass(frozen=True)
class Workload:
    """A path through the models, runnable served and in process.

    ``models``: the served models it uses (their configs lose dynamic batching in
    the "off" variant); ``served(grpc_url)`` makes one client's runner;
    ``in_process(repository)`` builds the Triton-free runner; ``peers``: other
    software doing the same work in process, by name (a factory raising
    :class:`PeerUnavailableError` is reported as skipped). ``cost``: one request's work
    in face requests (a workload runs ``requests / cost`` requests); ``unit``
    names what a request carries; ``quality`` turns summed tallies into rates.
    """

    name: str
    description: str
    models: tuple[str, ...]
    payloads: Callable[[int], list[Any]]  # at most this many distinct payloads
    served: Callable[[str], ServedClient]
    in_process: Callable[[Path], InProcessRunner] | None  # None: served only
    unit: str = "faces"
    cost: float = 1.0
    quality: Callable[[Mapping[str, int]], Mapping[str, Any]] | None = None
    peers: Mapping[str, tuple[str, Callable[[Path], InProcessRunner]]] = field(
        default_factory=dict)  # name -> (description, factory)


class PeerUnavailableError(RuntimeError):
    """A peer that is not installed here (``make test`` installs the peers)."""


class GrpcModels:
    """A gRPC client of the served models; one per client thread."""

    def __init__(self, grpc_url: str) -> None:
        import tritonclient.grpc as grpcclient

        self.grpc = grpcclient
        self.client = grpcclient.InferenceServerClient(grpc_url)

    def _infer(self, model: str, name: str, array: np.ndarray, datatype: str,
               outputs: Sequence[str]) -> Any:
        tensor = self.grpc.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        return self.client.infer(model, [tensor], client_timeout=CLIENT_TIMEOUT_S,
                                 outputs=[self.grpc.InferRequestedOutput(o) for o in outputs])

    def close(self) -> None:
        self.client.close()


def max_batch_size(repository: Path, model: str) -> int:
    return int(load_config(repository / model / "config.pbtxt").max_batch_size)


# -- the face path ---------------------------------------------------------------------
FACE_MODELS = ("face_preprocess", "face_detector", "face_embedding")
DETECTOR_OUTPUTS = ("LOC", "SCORES", "LANDMARKS")


def face_photos(count: int = 0) -> list[bytes]:
    """The real test portraits, encoded (the manifest's photos, CREDITS left out); all
    of them whatever ``count``: requests cycle through them."""
    from kyc_export.fetch import fetch_test_photos

    photos = fetch_test_photos()
    return [photos[role].read_bytes() for role in sorted(photos) if role != "CREDITS"]


class FaceServedClient(GrpcModels):
    """face_preprocess, then face_embedding on its FACE when a face was found."""

    def __call__(self, payload: bytes) -> Mapping[str, int]:
        image = np.array([[payload]], dtype=np.object_)
        pre = self._infer("face_preprocess", "IMAGE", image, "BYTES", ("FACE", "FACE_FOUND"))
        if not bool(pre.as_numpy("FACE_FOUND")[0, 0]):
            return {"faces_found": 0}
        out = self._infer("face_embedding", "FACE", pre.as_numpy("FACE"), "UINT8", ("EMBEDDING",))
        embedding = out.as_numpy("EMBEDDING")
        if embedding is None or embedding.shape[0] != 1:
            raise BenchError("face_embedding answered without one EMBEDDING")
        return {"faces_found": 1}


def onnx_model(repository: Path, model: str) -> tuple[Any, Any]:
    """(settings, session) as the served Python-based onnxruntime backend makes them."""
    from google.protobuf import json_format

    from kyc.onnx_backend import OnnxModelSettings, make_session
    from kyc.triton_glue import instance_count

    # The JSON form of the config, as Triton hands it to ``initialize``.
    config = json_format.MessageToDict(load_config(repository / model / "config.pbtxt"),
                                       preserving_proto_field_name=True)
    versions = sorted((p.name for p in (repository / model).iterdir() if p.name.isdigit()),
                      key=int)
    settings = OnnxModelSettings.from_config(config, repository / model, versions[-1],
                                             instance_count(config))
    return settings, make_session(settings)


class FaceInProcess:
    """FacePreprocessor over an onnxruntime detector session, then the embedding session."""

    def __init__(self, repository: Path) -> None:
        from kyc.face.preprocess import FacePreprocessor, FaceSettings
        from kyc.settings import from_parameters

        face = from_parameters(FaceSettings, model_parameters(repository, "face_preprocess"))
        self.max_batch = max_batch_size(repository, "face_preprocess")
        self.detector_name = face.detector_model
        self.detector_settings, self.detector = onnx_model(repository, face.detector_model)
        self.embedding_settings, self.embedding = onnx_model(repository, "face_embedding")
        self.preprocessor = FacePreprocessor(face, self._detect)

    def _detect(self, batch: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        loc, scores, landmarks = self.detector.run(list(DETECTOR_OUTPUTS), {"IMAGES": batch})
        return loc, scores, landmarks

    def __call__(self, payloads: Sequence[bytes]) -> list[Outcome]:
        results = self.preprocessor.run(payloads)
        found = [i for i, r in enumerate(results)
                 if not isinstance(r, Exception) and r.found]
        if found:
            faces = np.stack([results[i].face for i in found])  # type: ignore[union-attr]
            (embeddings,) = self.embedding.run(["EMBEDDING"], {"FACE": faces})
            if embeddings.shape[0] != len(found):
                raise BenchError("face_embedding gave not one EMBEDDING per face")
        return [r if isinstance(r, Exception) else {"faces_found": int(r.found)}
                for r in results]

    def settings(self) -> dict[str, Any]:
        return {"onnx_intra_op_threads": {
            self.detector_name: self.detector_settings.intra_op_threads,
            "face_embedding": self.embedding_settings.intra_op_threads}}


def _face_workload() -> Workload:
    return Workload(
        name="face",
        description="one face = face_preprocess (decode, detect, align) then face_embedding "
                    "on its FACE",
        models=FACE_MODELS,
        payloads=face_photos,
        served=FaceServedClient,
        in_process=FaceInProcess,
    )


def _document_workload() -> Workload:
    from kyc.bench_document import document_workload

    return document_workload()


def _kyc_workload() -> Workload:
    from kyc.bench_kyc import kyc_workload

    return kyc_workload()


WORKLOADS: dict[str, Callable[[], Workload]] = {"face": _face_workload,
                                                "document": _document_workload,
                                                "kyc": _kyc_workload}


# -- scenarios -----------------------------------------------------------------------
@contextlib.contextmanager
def running_server(repository: Path, log_file: Path) -> Iterator[TritonServer]:
    """A real server on free local ports over ``repository``; stopped on exit."""
    options = ServerOptions(repository, http_port=free_port(), grpc_port=free_port(),
                            metrics_port=free_port(), address="127.0.0.1", poll_secs=POLL_SECS)
    server = TritonServer(options, log_file=log_file)
    try:
        server.start()
        try:
            server.wait_ready(timeout=READY_TIMEOUT_S)
        except ServerError as exc:
            tail = log_file.read_text(errors="replace")[-2000:] if log_file.exists() else ""
            raise BenchError(f"{exc}\n--- server log tail ---\n{tail}") from None
        yield server
    finally:
        server.stop(grace=STOP_GRACE_S)


def measure_served(workload: Workload, grpc_url: str, payloads: Sequence[Any],
                   options: BenchOptions, alone: bool = False) -> dict[str, Any]:
    """Warm up, then the measured window with statistics-API deltas; with ``alone``,
    then a window of one request at a time (the latency a lone user sees)."""
    import tritonclient.grpc as grpcclient

    def make_client() -> ServedClient:
        return workload.served(grpc_url)

    drive_clients(make_client, payloads, options.warmup_requests, options.concurrency)
    stats = grpcclient.InferenceServerClient(grpc_url)
    try:
        before = settled_counts(stats, workload.models)
        measurement = drive_clients(make_client, payloads, options.requests, options.concurrency)
        after = settled_counts(stats, workload.models)
    finally:
        stats.close()
    result = {**figures(measurement, workload.unit, workload.quality),
              "model_counts": count_deltas(before, after)}
    if alone:
        single = drive_clients(make_client, payloads, alone_requests(options), 1)
        result["alone"] = {"requests": single.requests, "errors": single.errors,
                           "latency_ms": latency_ms(single.latencies_s)}
    return result


def alone_requests(options: BenchOptions) -> int:
    return max(2, options.requests // 4)


def measure_in_process(runner: InProcessRunner, workload: Workload, payloads: Sequence[Any],
                       options: BenchOptions) -> dict[str, Any]:
    drive_batches(runner, payloads, options.warmup_requests, options.concurrency)
    measurement = drive_batches(runner, payloads, options.requests, options.concurrency)
    return {**figures(measurement, workload.unit, workload.quality),
            "batch_size": min(options.concurrency, runner.max_batch), **runner.settings()}


def describe(workload: Workload, variant: str) -> str:
    return f"{workload.description}; {VARIANTS[variant]}"


def run_served_variant(variant: str, workloads: Sequence[Workload],
                       payloads: Mapping[str, Sequence[Any]], options: BenchOptions,
                       workdir: Path) -> dict[str, dict[str, Any]]:
    """One server over a fresh repository copy; every workload measured on it."""
    models = sorted({m for w in workloads for m in w.models})
    repository = copy_repository(options.model_repository, workdir / variant / "models", models)
    if variant == VARIANT_OFF:
        disable_dynamic_batching(repository, models)
    results = {}
    with running_server(repository, workdir / f"{variant}.log") as server:
        for workload in workloads:
            scaled = options.scaled(workload.cost)
            log.info("%s_%s: %d requests, concurrency %d", workload.name, variant,
                     scaled.requests, scaled.concurrency)
            figures_ = measure_served(workload, server.options.grpc_url,
                                      payloads[workload.name], scaled,
                                      alone=variant == VARIANT_ON)
            results[f"{workload.name}_{variant}"] = {"description": describe(workload, variant),
                                                     **figures_}
    return results


def run_in_process(workloads: Sequence[Workload], payloads: Mapping[str, Sequence[Any]],
                   options: BenchOptions) -> dict[str, dict[str, Any]]:
    """Each workload in process, then its peers (skipped where not installed)."""
    results: dict[str, dict[str, Any]] = {}
    for workload in workloads:
        scaled = options.scaled(workload.cost)
        runs = [] if workload.in_process is None else [
            (VARIANT_IN_PROCESS, describe(workload, VARIANT_IN_PROCESS), workload.in_process)]
        runs += [(PEER_PREFIX + name, description, factory)
                 for name, (description, factory) in workload.peers.items()]
        for variant, description, factory in runs:
            name = f"{workload.name}_{variant}"
            log.info("%s: %d requests, concurrency %d", name, scaled.requests,
                     scaled.concurrency)
            try:
                runner = factory(options.model_repository)
            except PeerUnavailableError as exc:
                log.warning("%s skipped: %s", name, exc)
                results[name] = {"description": description, "skipped": str(exc)}
                continue
            results[name] = {"description": description,
                             **measure_in_process(runner, workload, payloads[workload.name],
                                                  scaled)}
    return results


def check_weights(repository: Path, models: Iterable[str]) -> None:
    """Every model but an ensemble has its files (an ensemble has none)."""
    missing = [m for m in sorted(models)
               if load_config(repository / m / "config.pbtxt").platform != "ensemble"
               and not list((repository / m).glob("[0-9]*/model.*"))]
    if missing:
        raise BenchError(f"no model files for {', '.join(missing)} in {repository}: "
                         "run `make setup`")


# -- the report ----------------------------------------------------------------------
COMPARED = (
    "served: real Triton server (Python-based onnxruntime backend on CPU), concurrent gRPC "
    "clients, shipped configs vs the same without dynamic_batching, and the entry model "
    "alone (one request at a time); in process: the same kyc code and ONNX files without "
    "Triton, onnxruntime with the served models' thread settings, batches of "
    "min(concurrency, max_batch_size); peers: other software in process, one request at a "
    "time, with its own defaults"
)
QUALITY_KEYS = ("mrz_exact_rate", "fields_exact_rate", "field_accuracy", "valid_rate")


def ratio(numerator: float, denominator: float) -> float | None:
    if denominator <= 0 or not math.isfinite(numerator) or not math.isfinite(denominator):
        return None
    return round(numerator / denominator, 3)


def machine() -> dict[str, Any]:
    """The machine, and how busy it is (other work on it skews the figures)."""
    return {"cpu_count": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "load_average_1m": round(os.getloadavg()[0], 2)}


def rate_of(figs: Mapping[str, Any]) -> float | None:
    """Requests per second of a measured scenario; None for a skipped one."""
    unit = figs.get("unit")
    return None if unit is None else float(figs[f"{unit}_per_s"])


def side_by_side(scenarios: Mapping[str, Mapping[str, Any]], workload: str
                 ) -> dict[str, dict[str, Any]]:
    """The headline figures of a workload's scenarios, peers included."""
    table = {}
    for name, figs in scenarios.items():
        if not name.startswith(f"{workload}_"):
            continue
        if "skipped" in figs:
            table[name] = {"skipped": figs["skipped"]}
            continue
        row = {key: figs[key] for key in QUALITY_KEYS if key in figs}
        row["per_s"] = rate_of(figs)
        row["p50_ms"] = figs["latency_ms"]["p50"]
        row["concurrency"] = figs["concurrency"]
        if "alone" in figs:
            row["alone_p50_ms"] = figs["alone"]["latency_ms"]["p50"]
        elif figs.get("batch_size") == 1:  # one request at a time already
            row["alone_p50_ms"] = row["p50_ms"]
        table[name] = row
    return table


def summarize(scenarios: Mapping[str, Mapping[str, Any]], options: BenchOptions,
              started_at: datetime, host: Mapping[str, Any],
              workload: str = PRIMARY_WORKLOAD) -> dict[str, Any]:
    """The JSON report; the top-level ratios are those of ``workload`` (null when it
    was not run); ``document_reading`` puts ours and the peer's side by side."""

    def ratio_of(numerator: str, denominator: str) -> float | None:
        top = scenarios.get(f"{workload}_{numerator}", {})
        bottom = scenarios.get(f"{workload}_{denominator}", {})
        if rate_of(top) is None or rate_of(bottom) is None:
            return None
        return ratio(rate_of(top), rate_of(bottom))  # type: ignore[arg-type]

    report = {
        "served_vs_inprocess_throughput": ratio_of(VARIANT_ON, VARIANT_IN_PROCESS),
        "dynamic_batching_speedup": ratio_of(VARIANT_ON, VARIANT_OFF),
        "compared": COMPARED,
        "scenarios": {name: dict(figs) for name, figs in scenarios.items()},
        "settings": {"requests": options.requests, "concurrency": options.concurrency,
                     "warmup_requests": options.warmup_requests},
        "machine": dict(host),
        "quick": options.quick,
        "started_at": started_at.isoformat(timespec="seconds"),
    }
    documents = side_by_side(scenarios, "document")
    if documents:
        report["document_reading"] = documents
    return report


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def format_table(report: Mapping[str, Any]) -> str:
    """A short human-readable table of the report."""
    lines = [f"{'scenario':<32} {'per s':>8} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} "
             f"{'errors':>6}"]
    for name, figs in report["scenarios"].items():
        if "skipped" in figs:
            lines.append(f"{name:<32} skipped: {figs['skipped']}")
            continue
        lat = [_ms(figs["latency_ms"][p]) for p in ("p50", "p95", "p99")]
        lines.append(f"{name:<32} {rate_of(figs):>8.2f} {lat[0]:>8} {lat[1]:>8} "
                     f"{lat[2]:>8} {figs['errors']:>6}  ({figs['unit']})")
        if "alone" in figs:
            lines.append(f"  alone, one request at a time: p50 "
                         f"{_ms(figs['alone']['latency_ms']['p50'])} ms")
        for model, counts in figs.get("model_counts", {}).items():
            lines.append(f"  {model:<30} {counts['inference_count']} inferences in "
                         f"{counts['execution_count']} executions")
    if report.get("document_reading"):
        lines.append(f"{'document reading':<32} {'MRZ exact':>9} {'fields':>7} "
                     f"{'field acc':>9} {'docs/s':>7} {'p50 ms':>8} {'alone p50':>9}")
        for name, row in report["document_reading"].items():
            if "skipped" in row:
                continue
            lines.append(f"{name:<32} {_share(row.get('mrz_exact_rate')):>9} "
                         f"{_share(row.get('fields_exact_rate')):>7} "
                         f"{_share(row.get('field_accuracy')):>9} {row['per_s']:>7.2f} "
                         f"{_ms(row['p50_ms']):>8} {_ms(row.get('alone_p50_ms')):>9}")
    lines += [
        f"served (batching on) / in process: {report['served_vs_inprocess_throughput']}",
        f"dynamic batching on / off:         {report['dynamic_batching_speedup']}",
        f"compared: {report['compared']}",
    ]
    return "\n".join(lines)


def write_json(report: Mapping[str, Any], path: Path) -> None:
    path.write_text(json.dumps(report, indent=2, allow_nan=False) + "\n", encoding="utf-8")


def selected_workloads(names: Sequence[str]) -> list[Workload]:
    unknown = sorted(set(names) - set(WORKLOADS))
    if unknown:
        raise BenchError(f"unknown workload(s) {', '.join(unknown)}; "
                         f"known: {', '.join(WORKLOADS)}")
    return [make() for name, make in WORKLOADS.items() if not names or name in names]


def run_bench(options: BenchOptions) -> dict[str, Any]:
    """Every workload in every scenario, in turn; the report (see :func:`summarize`)."""
    started_at, host = datetime.now(timezone.utc), machine()
    workloads = selected_workloads(options.workloads)
    check_weights(options.model_repository, {m for w in workloads for m in w.models})
    payloads = {w.name: w.payloads(options.scaled(w.cost).requests) for w in workloads}
    scenarios: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="kyc-bench-") as tmp:
        for variant in (VARIANT_ON, VARIANT_OFF):
            scenarios |= run_served_variant(variant, workloads, payloads, options, Path(tmp))
    scenarios |= run_in_process(workloads, payloads, options)
    return summarize(scenarios, options, started_at, host)
