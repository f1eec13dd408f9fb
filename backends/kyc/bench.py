"""``kyc bench``: throughput and latency of the served models against the same work in process.

Each registered :class:`Workload` (now: the face path) is measured three ways,
one after the other on a shared machine:

- served with the shipped configs (dynamic batching on), on a real Triton server;
- served with the ``dynamic_batching`` blocks removed from its models' configs;
- in this process without Triton: the same Python code and ONNX files, the same
  onnxruntime thread settings as the served ONNX models, in batches of up to the
  entry model's ``max_batch_size``.

Each served variant gets its own server (started in turn, never two at once) over
a temporary copy of the repository: configs copied so that they can be edited,
everything else symlinked. Load comes from ``concurrency`` closed-loop clients,
each with its own gRPC client; a warm-up round precedes every measured window.
Statistics-API counts (executions vs inferences) over the measured window show
whether batching happened. Only counts, shapes and timings are reported: never
image content or embeddings.
"""

from __future__ import annotations

import compileall
import contextlib
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

from kyc.repo.config import load_config, parse_config
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

    @classmethod
    def for_run(cls, *, quick: bool, model_repository: Path = DEFAULT_REPOSITORY,
                requests: int | None = None, concurrency: int | None = None) -> BenchOptions:
        """The defaults of a full or a ``--quick`` run, with explicit values on top."""
        base = cls(requests=48, concurrency=4, warmup_requests=8) if quick else cls()
        return cls(
            model_repository=model_repository,
            requests=requests or base.requests,
            concurrency=concurrency or base.concurrency,
            warmup_requests=max(base.warmup_requests, 2 * (concurrency or base.concurrency)),
            quick=quick,
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
    compileall.compile_dir(str(dest), quiet=1)
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
Outcome = bool | Exception  # True: a face went through the whole path; False: no face


class ServedClient(Protocol):
    """One client's path through the served models; one instance per thread."""

    def __call__(self, payload: bytes) -> bool: ...

    def close(self) -> None: ...


class InProcessRunner(Protocol):
    """The same path without Triton: a batch of payloads in, one outcome each out."""

    max_batch: int

    def __call__(self, payloads: Sequence[bytes]) -> list[Outcome]: ...

    def settings(self) -> dict[str, Any]: ...


@dataclass
class Measurement:
    """Raw results of one measured window."""

    concurrency: int
    seconds: float = 0.0
    latencies_s: list[float] = field(default_factory=list)
    errors: int = 0
    found: int = 0

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
        self.found += int(outcome)


def drive_clients(make_client: Callable[[], ServedClient], payloads: Sequence[bytes],
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


def drive_batches(runner: InProcessRunner, payloads: Sequence[bytes], requests: int,
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


def figures(measurement: Measurement) -> dict[str, Any]:
    """The reported figures of one measured window."""
    done = len(measurement.latencies_s)
    return {
        "faces_per_s": round(done / measurement.seconds, 3) if measurement.seconds > 0 else 0.0,
        "latency_ms": latency_ms(measurement.latencies_s),
        "requests": measurement.requests,
        "errors": measurement.errors,
        "faces_found": measurement.found,
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
    ``in_process(repository)`` builds the Triton-free runner.
    """

    name: str
    description: str
    models: tuple[str, ...]
    payloads: Callable[[], list[bytes]]
    served: Callable[[str], ServedClient]
    in_process: Callable[[Path], InProcessRunner]


# -- the face path ---------------------------------------------------------------------
FACE_MODELS = ("face_preprocess", "face_detector", "face_embedding")
DETECTOR_OUTPUTS = ("LOC", "SCORES", "LANDMARKS")


def face_photos() -> list[bytes]:
    """The real test portraits, encoded (the manifest's photos, CREDITS left out)."""
    from kyc_export.fetch import fetch_test_photos

    photos = fetch_test_photos()
    return [photos[role].read_bytes() for role in sorted(photos) if role != "CREDITS"]


class FaceServedClient:
    """face_preprocess, then face_embedding on its FACE when a face was found."""

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

    def __call__(self, payload: bytes) -> bool:
        image = np.array([[payload]], dtype=np.object_)
        pre = self._infer("face_preprocess", "IMAGE", image, "BYTES", ("FACE", "FACE_FOUND"))
        if not bool(pre.as_numpy("FACE_FOUND")[0, 0]):
            return False
        out = self._infer("face_embedding", "FACE", pre.as_numpy("FACE"), "UINT8", ("EMBEDDING",))
        embedding = out.as_numpy("EMBEDDING")
        if embedding is None or embedding.shape[0] != 1:
            raise BenchError("face_embedding answered without one EMBEDDING")
        return True

    def close(self) -> None:
        self.client.close()


def _onnx_model(repository: Path, model: str) -> tuple[Any, Any]:
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

        config = load_config(repository / "face_preprocess" / "config.pbtxt")
        face = from_parameters(FaceSettings, {k: v.string_value
                                              for k, v in config.parameters.items()})
        self.max_batch = int(config.max_batch_size)
        self.detector_name = face.detector_model
        self.detector_settings, self.detector = _onnx_model(repository, face.detector_model)
        self.embedding_settings, self.embedding = _onnx_model(repository, "face_embedding")
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
        return [r if isinstance(r, Exception) else bool(r.found) for r in results]

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


WORKLOADS: dict[str, Callable[[], Workload]] = {"face": _face_workload}


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


def measure_served(workload: Workload, grpc_url: str, payloads: Sequence[bytes],
                   options: BenchOptions) -> dict[str, Any]:
    """Warm up, then the measured window with statistics-API deltas."""
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
    return {**figures(measurement), "model_counts": count_deltas(before, after)}


def measure_in_process(workload: Workload, payloads: Sequence[bytes],
                       options: BenchOptions) -> dict[str, Any]:
    runner = workload.in_process(options.model_repository)
    drive_batches(runner, payloads, options.warmup_requests, options.concurrency)
    measurement = drive_batches(runner, payloads, options.requests, options.concurrency)
    return {**figures(measurement), "batch_size": min(options.concurrency, runner.max_batch),
            **runner.settings()}


def describe(workload: Workload, variant: str) -> str:
    return f"{workload.description}; {VARIANTS[variant]}"


def run_served_variant(variant: str, workloads: Sequence[Workload],
                       payloads: Mapping[str, Sequence[bytes]], options: BenchOptions,
                       workdir: Path) -> dict[str, dict[str, Any]]:
    """One server over a fresh repository copy; every workload measured on it."""
    models = sorted({m for w in workloads for m in w.models})
    repository = copy_repository(options.model_repository, workdir / variant / "models", models)
    if variant == VARIANT_OFF:
        disable_dynamic_batching(repository, models)
    results = {}
    with running_server(repository, workdir / f"{variant}.log") as server:
        for workload in workloads:
            log.info("%s_%s: %d requests, concurrency %d", workload.name, variant,
                     options.requests, options.concurrency)
            figures_ = measure_served(workload, server.options.grpc_url,
                                      payloads[workload.name], options)
            results[f"{workload.name}_{variant}"] = {"description": describe(workload, variant),
                                                     **figures_}
    return results


def run_in_process(workloads: Sequence[Workload], payloads: Mapping[str, Sequence[bytes]],
                   options: BenchOptions) -> dict[str, dict[str, Any]]:
    results = {}
    for workload in workloads:
        log.info("%s_%s: %d requests, concurrency %d", workload.name, VARIANT_IN_PROCESS,
                 options.requests, options.concurrency)
        results[f"{workload.name}_{VARIANT_IN_PROCESS}"] = {
            "description": describe(workload, VARIANT_IN_PROCESS),
            **measure_in_process(workload, payloads[workload.name], options),
        }
    return results


def check_weights(repository: Path, models: Iterable[str]) -> None:
    missing = [m for m in sorted(models) if not list((repository / m).glob("[0-9]*/model.*"))]
    if missing:
        raise BenchError(f"no model files for {', '.join(missing)} in {repository}: "
                         "run `make setup`")


# -- the report ----------------------------------------------------------------------
COMPARED = (
    "served: real Triton server (Python-based onnxruntime backend on CPU), concurrent gRPC "
    "clients, shipped configs vs the same without dynamic_batching; in process: the same "
    "kyc.face code and ONNX files without Triton, onnxruntime with the served models' "
    "thread settings, batches of min(concurrency, max_batch_size)"
)


def ratio(numerator: float, denominator: float) -> float | None:
    if denominator <= 0 or not math.isfinite(numerator) or not math.isfinite(denominator):
        return None
    return round(numerator / denominator, 3)


def machine() -> dict[str, Any]:
    """The machine, and how busy it is (other work on it skews the figures)."""
    return {"cpu_count": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "load_average_1m": round(os.getloadavg()[0], 2)}


def summarize(scenarios: Mapping[str, Mapping[str, Any]], options: BenchOptions,
              started_at: datetime, host: Mapping[str, Any],
              workload: str = PRIMARY_WORKLOAD) -> dict[str, Any]:
    """The JSON report; the top-level ratios are those of ``workload``."""

    def rate(variant: str) -> float:
        return float(scenarios[f"{workload}_{variant}"]["faces_per_s"])

    return {
        "served_vs_inprocess_throughput": ratio(rate(VARIANT_ON), rate(VARIANT_IN_PROCESS)),
        "dynamic_batching_speedup": ratio(rate(VARIANT_ON), rate(VARIANT_OFF)),
        "compared": COMPARED,
        "scenarios": {name: dict(figs) for name, figs in scenarios.items()},
        "settings": {"requests": options.requests, "concurrency": options.concurrency,
                     "warmup_requests": options.warmup_requests},
        "machine": dict(host),
        "quick": options.quick,
        "started_at": started_at.isoformat(timespec="seconds"),
    }


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def format_table(report: Mapping[str, Any]) -> str:
    """A short human-readable table of the report."""
    lines = [f"{'scenario':<28} {'faces/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} "
             f"{'errors':>6}"]
    for name, figs in report["scenarios"].items():
        lat = [_ms(figs["latency_ms"][p]) for p in ("p50", "p95", "p99")]
        lines.append(f"{name:<28} {figs['faces_per_s']:>8.2f} {lat[0]:>8} {lat[1]:>8} "
                     f"{lat[2]:>8} {figs['errors']:>6}")
        for model, counts in figs.get("model_counts", {}).items():
            lines.append(f"  {model:<26} {counts['inference_count']} inferences in "
                         f"{counts['execution_count']} executions")
    lines += [
        f"served (batching on) / in process: {report['served_vs_inprocess_throughput']}",
        f"dynamic batching on / off:         {report['dynamic_batching_speedup']}",
        f"compared: {report['compared']}",
    ]
    return "\n".join(lines)


def write_json(report: Mapping[str, Any], path: Path) -> None:
    path.write_text(json.dumps(report, indent=2, allow_nan=False) + "\n", encoding="utf-8")


def run_bench(options: BenchOptions) -> dict[str, Any]:
    """Every workload in every scenario, in turn; the report (see :func:`summarize`)."""
    started_at, host = datetime.now(timezone.utc), machine()
    workloads = [make() for make in WORKLOADS.values()]
    check_weights(options.model_repository, {m for w in workloads for m in w.models})
    payloads = {w.name: w.payloads() for w in workloads}
    scenarios: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="kyc-bench-") as tmp:
        for variant in (VARIANT_ON, VARIANT_OFF):
            scenarios |= run_served_variant(variant, workloads, payloads, options, Path(tmp))
    scenarios |= run_in_process(workloads, payloads, options)
    return summarize(scenarios, options, started_at, host)
