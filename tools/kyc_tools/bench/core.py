"""``kyc bench``: the served pipeline against its limit, its variants and its peers.

One run on one machine, side by side (absolute times on shared machines are
noisy; the goals are ratios and percentiles of one run):

- ``kyc_ensemble`` end to end, served, concurrency swept (1, 2, 4, 8, 16);
- ``kyc_in_process``: the same ONNX files and the same kyc code in this process
  with onnxruntime, no Triton, in batches of min(concurrency, max batch): the
  limit no server can beat (``served_vs_inprocess_throughput``);
- ``face_embedding`` and ``ocr_rec`` alone with their shipped dynamic batching and
  with it removed: the variant is loaded through the model-control API (the bench's
  server runs in explicit mode) with an override config, then the shipped one is
  loaded back (``dynamic_batching_speedup``: face_embedding at concurrency 16);
- ``liveness_sequence``: N concurrent sessions streaming frames, per-frame latency,
  alone and while ``document_ocr`` clients load the same server;
- ``document_ocr`` against the peer ``rapidocr-onnxruntime`` in process, on the
  same rendered documents: latency and MRZ exact-match rate;
- the server's memory: resident (and proportional) set of tritonserver and its
  stub processes after the load scenarios;
- ``publish``: the first request to face_embedding and ocr_rec after ``kyc repo
  publish`` of a new version, with and without ``model_warmup``
  (:mod:`kyc_tools.bench.publish`).

Each concurrency level is one closed loop of asyncio gRPC clients: a warm-up
(at least one answer per client), then a fixed window in which answered requests
count, while Triton's statistics API gives each model's queue and compute times
over the same window. Inputs are generated from the real test photos and the
document renderer, never noise. Only counts, rates, shapes and timings are
reported: never image content, texts, tokens or embeddings.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import math
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from kyc.budgets import queue_against_budget
from kyc_tools.bench.procmem import resident_union_mib
from kyc_tools.repo.config import load_config
from kyc_tools.repo.publish import precompile_python_models
from kyc_tools.runtime.procs import children, process_tree, stub_instance
from kyc_tools.runtime.server import ServerError, ServerOptions, TritonServer

log = logging.getLogger(__name__)

DEFAULT_REPOSITORY = Path("model_repository")
READY_TIMEOUT_S = 180.0
STOP_GRACE_S = 10.0
CLIENT_TIMEOUT_S = 120.0
DRAIN_TIMEOUT_S = 60.0  # how long a level's clients may take to finish after it
LEVELS = (1, 2, 4, 8, 16)
STAGES = ("queue", "compute_input", "compute_infer", "compute_output")

# Scenario groups, in the order they run; each has the levels of a quick run.
GROUPS = ("kyc", "batching", "liveness", "document", "publish")
# "publish" sends one request at a time (first request after a version switch).
QUICK_LEVELS = {"kyc": (1, 2, 4), "batching": (1, 4, 16), "liveness": (1, 8),
                "document": (1,), "publish": (1,)}
FULL_LEVELS = {"kyc": LEVELS, "batching": LEVELS, "liveness": LEVELS, "document": (1, 2, 4),
               "publish": (1,)}
BATCHING_SPEEDUP_LEVEL = 16
LIVENESS_GOAL_SESSIONS = 8
OCR_LOAD_CLIENTS = 2


class BenchError(RuntimeError):
    """The benchmark could not run (missing weights, server did not start...)."""


class PeerUnavailableError(RuntimeError):
    """A peer that is not installed here (``make test`` installs the peers)."""


@dataclass(frozen=True)
class Window:
    """How long one concurrency level runs: a warm-up of at least ``warmup_s`` and
    one answer per client, then a window of at least ``window_s`` and
    ``min_requests`` answers; each phase ends after ``max_s`` whatever happened."""

    warmup_s: float = 3.0
    window_s: float = 10.0
    min_requests: int = 20
    max_s: float = 60.0


QUICK_WINDOW = Window(warmup_s=0.5, window_s=2.5, min_requests=4, max_s=20.0)


@dataclass(frozen=True)
class BenchOptions:
    model_repository: Path = DEFAULT_REPOSITORY
    quick: bool = False
    window: Window = Window()
    groups: tuple[str, ...] = ()  # empty: all of GROUPS
    levels: tuple[int, ...] = ()  # empty: each group's own
    url: str | None = None  # a running server (gRPC host:port) instead of our own
    admin_key: str | None = None  # of that server's model-repository API

    @classmethod
    def for_run(cls, *, quick: bool, model_repository: Path = DEFAULT_REPOSITORY,
                groups: Sequence[str] = (), levels: Sequence[int] = (),
                window_s: float | None = None, url: str | None = None,
                admin_key: str | None = None) -> BenchOptions:
        window = QUICK_WINDOW if quick else Window()
        if window_s is not None:
            window = dataclasses.replace(window, window_s=window_s)
        unknown = sorted(set(groups) - set(GROUPS))
        if unknown:
            raise BenchError(f"unknown scenario group(s) {', '.join(unknown)}; "
                             f"known: {', '.join(GROUPS)}")
        return cls(model_repository=model_repository, quick=quick, window=window,
                   groups=tuple(g for g in GROUPS if not groups or g in groups),
                   levels=tuple(sorted(set(levels))), url=url, admin_key=admin_key)

    def levels_of(self, group: str) -> tuple[int, ...]:
        if self.levels:
            return self.levels
        return (QUICK_LEVELS if self.quick else FULL_LEVELS)[group]

    def runs(self, group: str) -> bool:
        return not self.groups or group in self.groups


# -- the model repository copy -------------------------------------------------------
def _skipped(name: str) -> bool:
    """Staging folders, locks and bytecode caches stay out of the copy."""
    return name.startswith(".") or name == "__pycache__"


def copy_repository(src: Path, dest: Path, models: Iterable[str] | None = None) -> Path:
    """A cheap copy of a model repository: ``config.pbtxt`` files copied (editable),
    every other file hard-linked (copied across file systems); ``models`` limits the
    copy to those model folders. Python files are precompiled in the copy (see
    :func:`precompile_python_models`)."""
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
                _link(Path(root) / name, target / name)


def _link(src: Path, dest: Path) -> None:
    """A hard link (a regular file, which the live copy and `kyc repo publish` take: they
    refuse symbolic links), or a copy across file systems."""
    try:
        os.link(src, dest)
    except OSError:
        shutil.copyfile(src, dest)


def max_batch_size(repository: Path, model: str) -> int:
    return int(load_config(repository / model / "config.pbtxt").max_batch_size)


def pipeline_steps(repository: Path, model: str) -> list[str]:
    """The models whose queue and compute times make up one request of ``model``:
    the model itself, or an ensemble's steps (nested ensembles expanded). Models a
    Python model calls through BLS are inside their caller's compute time."""
    config = load_config(repository / model / "config.pbtxt")
    if config.platform != "ensemble":
        return [model]
    steps: list[str] = []
    for step in config.ensemble_scheduling.step:
        steps += [m for m in pipeline_steps(repository, step.model_name) if m not in steps]
    return steps


def check_weights(repository: Path, models: Iterable[str]) -> None:
    """Every model but an ensemble has its files (an ensemble has none)."""
    missing = [m for m in sorted(models)
               if load_config(repository / m / "config.pbtxt").platform != "ensemble"
               and not list((repository / m).glob("[0-9]*/model.*"))]
    if missing:
        raise BenchError(f"no model files for {', '.join(missing)} in {repository}: "
                         "run `make setup`")


# -- measurement ---------------------------------------------------------------------
# An answered request's tallies (e.g. {"faces_found": 1}), summed over the window;
# or what went wrong.
Outcome = Mapping[str, int] | Exception


class AsyncClient(Protocol):
    """One closed-loop client: ``next()`` sends one request and returns its tallies."""

    async def next(self) -> Mapping[str, int]: ...

    async def close(self) -> None: ...


class InProcessRunner(Protocol):
    """A path without Triton: a batch of payloads in, one outcome each out."""

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
                    "request failed: %s", type(outcome).__name__)
            return
        self.latencies_s.append(latency_s)
        for key, value in outcome.items():
            self.tallies[key] = self.tallies.get(key, 0) + int(value)


StatsReader = Callable[[], Awaitable[dict[str, dict[str, int]]]]


@dataclass
class Level:
    """One measured concurrency level: the window, and the statistics around it."""

    measurement: Measurement
    stats_before: dict[str, dict[str, int]] = field(default_factory=dict)
    stats_after: dict[str, dict[str, int]] = field(default_factory=dict)
    background: Measurement | None = None  # requests of a concurrent load, if any


async def _phase(until: Callable[[float], bool], max_s: float,
                 tasks: Sequence[asyncio.Task]) -> float:
    started = time.perf_counter()
    while True:
        elapsed = time.perf_counter() - started
        if until(elapsed) or elapsed >= max_s:
            return elapsed
        failed = [t for t in tasks if t.done() and t.exception() is not None]
        if failed:
            raise failed[0].exception()  # type: ignore[misc]
        await asyncio.sleep(0.02)


async def measure_level(make_client: Callable[[int], AsyncClient], concurrency: int,
                        window: Window, stats: StatsReader | None = None,
                        background: Sequence[AsyncClient] = ()) -> Level:
    """``concurrency`` closed-loop clients: warm-up, then the measured window, with
    ``stats`` read at both ends of it. ``background`` clients load the server during
    the whole level; their answers in the window are counted apart."""
    clients = [make_client(k) for k in range(concurrency)]
    measurement = Measurement(concurrency=concurrency)
    load = Measurement(concurrency=len(background)) if background else None
    answered = [0] * (len(clients) + len(background))
    counting = False
    stopping = False

    async def loop(k: int, client: AsyncClient, into: Measurement | None) -> None:
        while not stopping:
            started = time.perf_counter()
            try:
                outcome: Outcome = await client.next()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # counted; the load goes on
                outcome = exc
            answered[k] += 1
            if counting and into is not None:
                into.record(outcome, time.perf_counter() - started)

    tasks = [asyncio.create_task(loop(k, c, measurement)) for k, c in enumerate(clients)]
    tasks += [asyncio.create_task(loop(len(clients) + k, c, load))
              for k, c in enumerate(background)]
    level = Level(measurement, background=load)
    try:
        await _phase(lambda t: t >= window.warmup_s and min(answered) > 0, window.max_s,
                     tasks)
        if stats is not None:
            level.stats_before = await stats()
        counting = True
        # The window also holds at least one answer of the background load (a
        # document can take longer than a quick window).
        measurement.seconds = await _phase(
            lambda t: t >= window.window_s and measurement.requests >= window.min_requests
            and (load is None or load.requests > 0), window.max_s, tasks)
        counting = False
        if load is not None:
            load.seconds = measurement.seconds
        if stats is not None:
            level.stats_after = await stats()
    finally:
        # Drain: every client finishes the request it has in flight. A request
        # cancelled here would go on running in the server during the next level
        # (and a cancelled ensemble request was seen to keep an unloaded model's
        # stub alive). Cancelled only past DRAIN_TIMEOUT_S.
        stopping = True
        _, pending = await asyncio.wait(tasks, timeout=DRAIN_TIMEOUT_S)
        for task in pending:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if pending:
            log.warning("%d clients still waiting %.0f s after the window: cancelled",
                        len(pending), DRAIN_TIMEOUT_S)
        for client in [*clients, *background]:
            with contextlib.suppress(Exception):
                await client.close()
    return level


def measure_batches(runner: InProcessRunner, payloads: Sequence[Any], concurrency: int,
                    window: Window) -> Measurement:
    """In process: batches of min(concurrency, max batch), as if that many clients
    waited on a perfect batcher, each answered when its batch is done; a warm-up
    batch, then batches until the window is over."""
    size = max(1, min(concurrency, runner.max_batch))
    counter = 0

    def batch() -> list[Any]:
        nonlocal counter
        chosen = [payloads[(counter + i) % len(payloads)] for i in range(size)]
        counter += size
        return chosen

    def run(into: Measurement | None) -> None:
        chosen = batch()
        started = time.perf_counter()
        try:
            outcomes = runner(chosen)
        except Exception as exc:  # the whole batch failed
            outcomes = [exc] * len(chosen)
        elapsed = time.perf_counter() - started
        if into is not None:
            for outcome in outcomes:
                into.record(outcome, elapsed)

    warm_started = time.perf_counter()
    while True:
        run(None)
        if time.perf_counter() - warm_started >= min(window.warmup_s, window.max_s):
            break
    measurement = Measurement(concurrency=concurrency)
    started = time.perf_counter()
    while True:
        run(measurement)
        elapsed = time.perf_counter() - started
        if (elapsed >= window.window_s and measurement.requests >= window.min_requests) \
                or elapsed >= window.max_s:
            break
    measurement.seconds = time.perf_counter() - started
    return measurement


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100, linear interpolation); NaN for no values."""
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else math.nan


def latency_ms(latencies_s: Sequence[float]) -> dict[str, float | None]:
    """p50/p90/p95/p99 and the mean in milliseconds; None when nothing was answered."""
    if not latencies_s:
        return {"p50": None, "p90": None, "p95": None, "p99": None, "avg": None}
    figs: dict[str, float | None] = {f"p{q}": round(percentile(latencies_s, q) * 1e3, 2)
                                     for q in (50, 90, 95, 99)}
    figs["avg"] = round(float(np.mean(latencies_s)) * 1e3, 2)
    return figs


def level_figures(measurement: Measurement) -> dict[str, Any]:
    """The reported figures of one window: ``per_s`` counts answered requests only."""
    done = len(measurement.latencies_s)
    return {
        "concurrency": measurement.concurrency,
        "per_s": round(done / measurement.seconds, 3) if measurement.seconds > 0 else 0.0,
        "latency_ms": latency_ms(measurement.latencies_s),
        "requests": measurement.requests,
        "errors": measurement.errors,
        "seconds": round(measurement.seconds, 3),
        **measurement.tallies,
    }


# -- statistics API ------------------------------------------------------------------
def stats_totals(stats: Mapping[str, Any]) -> dict[str, int]:
    """Cumulative counters of a model (summed over its versions) from
    ``get_inference_statistics(..., as_json=True)``: executions, inferences,
    successful requests, and each stage's count and nanoseconds."""
    totals = {"executions": 0, "inferences": 0, "requests": 0}
    totals |= {f"{s}_{k}": 0 for s in STAGES for k in ("count", "ns")}
    for entry in stats.get("model_stats", []):
        totals["executions"] += int(entry.get("execution_count", 0))
        totals["inferences"] += int(entry.get("inference_count", 0))
        inference = entry.get("inference_stats", {})
        totals["requests"] += int(inference.get("success", {}).get("count", 0))
        for stage in STAGES:
            totals[f"{stage}_count"] += int(inference.get(stage, {}).get("count", 0))
            totals[f"{stage}_ns"] += int(inference.get(stage, {}).get("ns", 0))
    return totals


def model_stats(before: Mapping[str, Mapping[str, int]], after: Mapping[str, Mapping[str, int]]
                ) -> dict[str, dict[str, Any]]:
    """Per model over a window: requests, executions, inferences, and each stage's
    mean time per request in microseconds (None when it had none)."""
    figs: dict[str, dict[str, Any]] = {}
    for model in after:
        delta = {k: after[model][k] - before.get(model, {}).get(k, 0) for k in after[model]}
        if min(delta.values()) < 0:
            log.warning("%s: statistics went back (the model was reloaded?)", model)
        row: dict[str, Any] = {k: delta[k] for k in ("requests", "executions", "inferences")}
        for stage in STAGES:
            count = delta[f"{stage}_count"]
            row[f"{stage}_us"] = round(delta[f"{stage}_ns"] / count / 1e3, 1) if count > 0 \
                else None
        figs[model] = row
    return figs


def server_times(before: Mapping[str, Mapping[str, int]], after: Mapping[str, Mapping[str, int]],
                 entry: str, steps: Sequence[str]) -> dict[str, float] | None:
    """Each stage's time per ``entry`` request, summed over its pipeline steps
    (microseconds): what perf_analyzer reports as Server Queue / Compute *."""
    if entry not in after or not all(s in after for s in steps):
        return None
    requests = after[entry]["requests"] - before.get(entry, {}).get("requests", 0)
    if requests <= 0:
        return None
    return {stage: round(sum(after[s][f"{stage}_ns"] - before.get(s, {}).get(f"{stage}_ns", 0)
                             for s in steps) / requests / 1e3, 1) for stage in STAGES}


def stats_reader(client: Any, models: Sequence[str]) -> StatsReader:
    """Reads the cumulative counters of ``models`` with an aio gRPC client."""

    async def read() -> dict[str, dict[str, int]]:
        return {m: stats_totals(await client.get_inference_statistics(
            model_name=m, as_json=True, client_timeout=CLIENT_TIMEOUT_S)) for m in models}

    return read


# -- clients ---------------------------------------------------------------------------
class TensorClient:
    """One model, one input tensor per request, cycling through ``payloads``
    (arrays with a batch dimension of 1); tallies ``{unit: 1}``."""

    def __init__(self, grpc_url: str, model: str, input_name: str, payloads: Sequence[np.ndarray],
                 output: str, unit: str, offset: int = 0) -> None:
        import tritonclient.grpc as grpcclient
        import tritonclient.grpc.aio as aioclient

        self.grpc, self.model, self.input_name = grpcclient, model, input_name
        self.payloads, self.output, self.unit = payloads, output, unit
        self.client = aioclient.InferenceServerClient(grpc_url)
        self.index = offset

    async def next(self) -> Mapping[str, int]:
        array = self.payloads[self.index % len(self.payloads)]
        self.index += 1
        tensor = self.grpc.InferInput(self.input_name, list(array.shape),
                                      "BYTES" if array.dtype == np.object_ else
                                      self.grpc.np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        result = await self.client.infer(self.model, [tensor], client_timeout=CLIENT_TIMEOUT_S,
                                         outputs=[self.grpc.InferRequestedOutput(self.output)])
        if result.as_numpy(self.output) is None:
            raise BenchError(f"{self.model} answered without {self.output}")
        return {self.unit: 1}

    async def close(self) -> None:
        await self.client.close()


# -- the face path ---------------------------------------------------------------------
def face_photos(count: int = 0) -> list[bytes]:
    """The real test portraits, encoded (the manifest's photos, CREDITS left out); all
    of them whatever ``count``: requests cycle through them."""
    from kyc_tools.assets.fetch import fetch_test_photos

    photos = fetch_test_photos()
    return [photos[role].read_bytes() for role in sorted(photos) if role != "CREDITS"]


def onnx_session(repository: Path, model: str) -> Any:
    """``model``'s onnxruntime session as the served Python-based backend makes it."""
    from kyc.pipeline.local import LocalRepository

    return LocalRepository(repository).step(model).runner.session


def onnx_threads(local: Any) -> dict[str, int]:
    """The intra-op threads of every ONNX model a LocalRepository has built."""
    from kyc.onnx_backend import OnnxStep

    return {name: step.runner.settings.intra_op_threads
            for name, step in sorted(local.built().items()) if isinstance(step, OnnxStep)}


# -- scenarios -------------------------------------------------------------------------
@dataclass(frozen=True)
class Served:
    """A served scenario: clients of ``entry`` swept over ``levels``."""

    name: str
    description: str
    unit: str
    entry: str
    models: tuple[str, ...]  # whose statistics are read (entry first)
    make_client: Callable[[str, int], AsyncClient]  # (grpc_url, client index)
    levels: tuple[int, ...]
    quality: Callable[[Mapping[str, int]], Mapping[str, Any]] | None = None
    # Stateless requests (inputs with a batch dimension of 1): then NVIDIA's perf_analyzer
    # is the load generator (kyc_tools.bench.perf_analyzer), not make_client's loops.
    perf_inputs: Sequence[Mapping[str, np.ndarray]] | None = None


@dataclass
class Bench:
    """The state of one run: the server, its admin key, the results so far."""

    options: BenchOptions
    grpc_url: str
    admin_key: str | None
    repository: Path
    scenarios: dict[str, dict[str, Any]] = field(default_factory=dict)
    shipped: dict[str, dict[str, Any]] = field(default_factory=dict)  # model configs
    # Figures that are not concurrency sweeps, added to the report as they are:
    # "first_request_after_publish", "batching_ceiling_in_process".
    extra: dict[str, Any] = field(default_factory=dict)
    server_pid: int | None = None  # the bench's own server: its memory is measured
    memory: dict[str, Any] = field(default_factory=dict)

    async def sweep(self, scenario: Served, background: Callable[[], Sequence[AsyncClient]]
                    | None = None, name: str | None = None, extra: Mapping[str, Any] = {}
                    ) -> dict[str, Any]:
        import tritonclient.grpc.aio as aioclient

        from kyc_tools.bench import perf_analyzer

        steps = pipeline_steps(self.repository, scenario.entry)
        models = list(dict.fromkeys([scenario.entry, *steps, *scenario.models]))
        levels = []
        use_perf = (scenario.perf_inputs is not None and background is None
                    and perf_analyzer.available())
        if scenario.perf_inputs is not None and not use_perf:
            log.warning("%s: perf_analyzer is not installed (make perf-analyzer): the bench's "
                        "own clients load instead", name or scenario.name)
        checked: dict[str, int] = {}
        folder = Path(tempfile.mkdtemp(prefix="kyc-perf-"))
        data = folder / "input.json"  # written once, read by every level
        stats_client = aioclient.InferenceServerClient(self.grpc_url)
        try:
            if use_perf:  # perf_analyzer times the answers; the SDK client scores them, once
                checked = await self._check_answers(scenario)
                perf_analyzer.write_input_data(data, scenario.perf_inputs or [])
            for concurrency in scenario.levels:
                log.info("%s: concurrency %d", name or scenario.name, concurrency)
                if use_perf:
                    cpu = process_cpu_seconds(self.server_pid) if self.server_pid else None
                    level, figs = await self._perf_level(
                        scenario, concurrency, stats_reader(stats_client, models), data)
                    if scenario.quality is not None:
                        figs |= scenario.quality(checked)
                    if cpu is not None and figs["requests"] > 0:
                        used = process_cpu_seconds(self.server_pid or 0) - cpu
                        figs["server_cpu_s_per_request"] = round(used / figs["requests"], 3)
                    levels.append(self._served_figures(figs, level, scenario, steps))
                    continue
                level = await measure_level(
                    lambda k: scenario.make_client(self.grpc_url, k), concurrency,
                    self.options.window, stats_reader(stats_client, models),
                    background() if background else ())
                figs = level_figures(level.measurement)
                if scenario.quality is not None:
                    figs |= scenario.quality(level.measurement.tallies)
                self._served_figures(figs, level, scenario, steps)
                if level.background is not None:
                    figs["background"] = level_figures(level.background)
                levels.append(figs)
        finally:
            await stats_client.close()
            shutil.rmtree(folder, ignore_errors=True)
        generator = "perf_analyzer" if use_perf else "kyc_tools.bench asyncio gRPC clients"
        result = {"description": scenario.description, "kind": "served", "unit": scenario.unit,
                  "models": models, "steps": steps, "load_generator": generator, **extra,
                  "levels": levels}
        if checked:
            result["answers_checked"] = checked
        self.scenarios[name or scenario.name] = result
        return result

    async def _check_answers(self, scenario: Served) -> dict[str, int]:
        """Each of perf_analyzer's inputs sent once through the scenario's own client,
        its answer scored (perf_analyzer only times answers): summed tallies, and
        ``requests`` and ``errors``."""
        client = scenario.make_client(self.grpc_url, 0)
        tallies: dict[str, int] = {"requests": 0, "errors": 0}
        try:
            for _ in scenario.perf_inputs or []:
                tallies["requests"] += 1
                try:
                    outcome = await client.next()
                except Exception:  # counted, as in a measured window
                    tallies["errors"] += 1
                    continue
                for key, count in outcome.items():
                    tallies[key] = tallies.get(key, 0) + count
        finally:
            await client.close()
        return tallies

    async def _perf_level(self, scenario: Served, concurrency: int, stats: StatsReader,
                          data: Path) -> tuple[Level, dict[str, Any]]:
        """One level measured by perf_analyzer from the ``--input-data`` file ``data``,
        the statistics read around its run."""
        from kyc_tools.bench import perf_analyzer

        csv_file = data.with_name(f"c{concurrency}.csv")
        level = Level(Measurement(concurrency=concurrency))
        level.stats_before = await stats()
        measured = await asyncio.to_thread(
            perf_analyzer.measure, scenario.entry, self.grpc_url, concurrency, data, csv_file,
            self.options.window.min_requests)
        level.stats_after = await stats()
        figs = measured.figures()
        figs["perf_analyzer_csv"] = csv_file.read_text()
        entry_before = level.stats_before.get(scenario.entry, {}).get("requests", 0)
        figs["requests"] = level.stats_after.get(scenario.entry, {}).get("requests",
                                                                         0) - entry_before
        return level, figs

    @staticmethod
    def _served_figures(figs: dict[str, Any], level: Level, scenario: Served,
                        steps: Sequence[str]) -> dict[str, Any]:
        figs["server_us"] = server_times(level.stats_before, level.stats_after, scenario.entry,
                                         steps)
        figs["model_stats"] = model_stats(level.stats_before, level.stats_after)
        figs["queue_vs_budget"] = queue_against_budget(figs["model_stats"])
        return figs

    def in_process(self, name: str, description: str, unit: str,
                   factory: Callable[[Path], InProcessRunner], payloads: Sequence[Any],
                   levels: Sequence[int], kind: str = "in_process",
                   quality: Callable[[Mapping[str, int]], Mapping[str, Any]] | None = None
                   ) -> dict[str, Any]:
        try:
            runner = factory(self.options.model_repository)
        except PeerUnavailableError as exc:
            log.warning("%s skipped: %s", name, exc)
            self.scenarios[name] = {"description": description, "kind": kind, "unit": unit,
                                    "skipped": str(exc)}
            return self.scenarios[name]
        rows = []
        for concurrency in levels:
            log.info("%s: concurrency %d", name, concurrency)
            measurement = measure_batches(runner, payloads, concurrency, self.options.window)
            figs = level_figures(measurement)
            if quality is not None:
                figs |= quality(measurement.tallies)
            figs["batch_size"] = max(1, min(concurrency, runner.max_batch))
            figs["server_us"], figs["model_stats"] = None, {}
            rows.append(figs)
        self.scenarios[name] = {"description": description, "kind": kind, "unit": unit,
                                **runner.settings(), "levels": rows}
        return self.scenarios[name]

    # -- model control ----------------------------------------------------------
    @property
    def admin_headers(self) -> dict[str, str] | None:
        """gRPC headers for the model-control API: a restricted protocol
        (--grpc-restricted-protocol) takes its key here."""
        return {"triton-grpc-protocol-admin-key": self.admin_key} if self.admin_key else None

    def load_variant(self, model: str, batching: bool) -> None:
        """Reload ``model`` with its shipped config, or with that config less its
        ``dynamic_batching`` (an override config through the model-control API)."""
        import tritonclient.grpc as grpcclient

        headers = self.admin_headers
        client = grpcclient.InferenceServerClient(self.grpc_url)
        stubs_before = self.stubs_of(model)
        try:
            # The config as first served; loaded back as an override too (a plain
            # load of unchanged files keeps the override it was last given).
            config = self.shipped.setdefault(
                model, client.get_model_config(model, as_json=True)["config"])
            config = dict(config)
            if not batching:
                config.pop("dynamic_batching", None)
            client.load_model(model, config=json.dumps(config), headers=headers,
                              client_timeout=CLIENT_TIMEOUT_S)
            loaded = client.get_model_config(model, as_json=True)["config"]
        except Exception as exc:  # InferenceServerException: say what it means here
            raise BenchError(f"could not load {model} with dynamic batching "
                             f"{'on' if batching else 'off'} through the model-control API "
                             f"(the server must run in explicit mode, with the "
                             f"model-repository API open to this admin key): {exc}") from None
        finally:
            client.close()
        if ("dynamic_batching" in loaded) != batching:
            raise BenchError(f"{model} did not load with dynamic batching "
                             f"{'on' if batching else 'off'}")
        self.wait_for_old_stubs(model, stubs_before)

    def stubs_of(self, model: str) -> int:
        """How many stub processes serve instances of ``model`` (0 with --url)."""
        if self.server_pid is None:
            return 0
        prefix = f"{model}_"  # instances are named "<model>_<group>_<index>"
        instances = (stub_instance(pid) for pid in children(self.server_pid))
        return sum(1 for name in instances if name.startswith(prefix)
                   and name[len(prefix):].replace("_", "").isdigit())

    def wait_for_old_stubs(self, model: str, expected: int, timeout_s: float = 30.0) -> None:
        """After a reload, wait until the old instances' stubs have exited, so that the
        next scenario and the memory figure do not count them."""
        deadline = time.monotonic() + timeout_s
        while self.stubs_of(model) > expected:
            if time.monotonic() > deadline:
                log.warning("%s: %d stub processes %.0f s after a reload (expected %d)",
                            model, self.stubs_of(model), timeout_s, expected)
                return
            time.sleep(0.2)


# -- server memory ---------------------------------------------------------------------
def _kib(path: Path, key: str) -> int:
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1])
    return 0


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its child processes (the server and its
    Python stubs), from /proc; 0 for processes gone."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for each in (pid, *children(pid)):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


def process_memory(pid: int) -> dict[str, Any]:
    """Resident (RSS) and proportional (PSS: shared pages divided among their users)
    memory of ``pid`` and all its descendants (Triton's Python stubs), in MiB."""
    tree = process_tree(pid)
    rows = [{"pid": p, "name": (Path(f"/proc/{p}/comm").read_text().strip()
                                if Path(f"/proc/{p}/comm").exists() else "?"),
             "rss": _kib(Path(f"/proc/{p}/status"), "VmRSS"),
             "pss": _kib(Path(f"/proc/{p}/smaps_rollup"), "Pss")} for p in tree]
    server = next(r for r in rows if r["pid"] == pid)
    stubs = [r for r in rows if r["pid"] != pid]
    return {
        "server_rss_mib": round(server["rss"] / 1024, 1),
        "stubs_rss_mib": round(sum(r["rss"] for r in stubs) / 1024, 1),
        "total_rss_mib": round(sum(r["rss"] for r in rows) / 1024, 1),
        "total_pss_mib": round(sum(r["pss"] for r in rows) / 1024, 1),
        # Distinct pages: shared libraries and tensor shared memory counted once.
        "resident_mib": resident_union_mib(r["pid"] for r in rows),
        "stub_processes": len(stubs),
        "stubs": sorted(({"instance": stub_instance(r["pid"]),
                          "rss_mib": round(r["rss"] / 1024, 1),
                          "pss_mib": round(r["pss"] / 1024, 1)} for r in stubs),
                        key=lambda r: -r["rss_mib"]),
    }


# -- running it ------------------------------------------------------------------------
@contextlib.contextmanager
def running_server(repository: Path, log_file: Path) -> Iterator[TritonServer]:
    """A real server on free local ports over ``repository``, in explicit model-control
    mode (every model loaded at start) so that variants can be loaded; stopped on exit."""
    options = ServerOptions.on_free_ports(repository, model_control="explicit")
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


# -- the report ----------------------------------------------------------------------
COMPARED = (
    "served: a real Triton server (Python-based onnxruntime backend on CPU, each ONNX "
    "model on the CPU runtime its config names: OpenVINO, or onnxruntime) in explicit "
    "model-control mode, closed loops per concurrency level: NVIDIA's perf_analyzer "
    "2.51.0 for the stateless scenarios (kyc_ensemble, document_ocr, the batching models: "
    "its count windows and CSV; each input also sent once through the SDK to score the "
    "answers), asyncio gRPC clients for liveness (they answer the random challenge) and "
    "background load, answers counted over a fixed window after a warm-up; "
    "in process: the same kyc code "
    "and ONNX files without Triton, on the same CPU runtimes and thread settings, "
    "batches of min(concurrency, max_batch_size); batching off: the model reloaded "
    "through the model-control API with its config less dynamic_batching; peers: other "
    "software in process, one request at a time, with its own defaults"
)
QUALITY_KEYS = ("mrz_exact_rate", "fields_exact_rate", "field_accuracy", "valid_rate")
GOALS = {
    # name: (target, "min" (value >= target) or "max" (value <= target), what)
    # The targets are issue 24's raised goals (docs/performance.md says where they stand).
    "served_vs_inprocess_throughput": (0.95, "min", "best kyc_ensemble throughput / best "
                                                   "kyc_in_process throughput"),
    # dynamic_batching_speedup (on / off) stays a top-level figure; its old goal (>= 1.5)
    # is retired: onnxruntime's own batching ceiling on these cores is about 1.0-1.4x.
    # What batching is judged by: how much of that ceiling the server delivers.
    "batching_gain_vs_ceiling": (0.95, "min", "face_embedding's served gain from dynamic "
                                              "batching at concurrency 16 (on / off) over "
                                              "onnxruntime's in-process ceiling (batch 16 "
                                              "vs 1), same run"),
    "kyc_ensemble_p95_ms_at_1": (500.0, "max", "kyc_ensemble p95 latency, one client"),
    "kyc_ensemble_best_per_s": (2.0, "min", "kyc_ensemble's best throughput over the "
                                            "concurrency levels, customers per second"),
    "liveness_p95_ms_at_8": (150.0, "max", "liveness per-frame p95 latency, 8 sessions"),
    "document_latency_vs_peer": (0.5, "max", "document_ocr p50 latency / the peer's, one "
                                             "document at a time"),
    "document_mrz_exact_minus_peer": (0.0, "min", "our MRZ exact-match rate minus the peer's"),
    "server_memory_resident_mib": (2048.0, "max", "resident memory of tritonserver and its "
                                                  "stubs after the load scenarios, MiB: "
                                                  "distinct pages (shared ones once), or the "
                                                  "sum of RSS where pagemap is not readable"),
}


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator <= 0 \
            or not math.isfinite(numerator) or not math.isfinite(denominator):
        return None
    return round(numerator / denominator, 3)


def machine() -> dict[str, Any]:
    """The machine, and how busy it is (other work on it skews the figures)."""
    return {"cpu_count": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "load_average_1m": round(os.getloadavg()[0], 2)}


def _levels(scenarios: Mapping[str, Mapping[str, Any]], name: str) -> list[Mapping[str, Any]]:
    return list(scenarios.get(name, {}).get("levels", []))


def best_rate(scenarios: Mapping[str, Mapping[str, Any]], name: str) -> float | None:
    rates = [row["per_s"] for row in _levels(scenarios, name)]
    return max(rates) if rates else None


def at_level(scenarios: Mapping[str, Mapping[str, Any]], name: str, concurrency: int
             ) -> Mapping[str, Any] | None:
    return next((row for row in _levels(scenarios, name) if row["concurrency"] == concurrency),
                None)


def _latency(row: Mapping[str, Any] | None, key: str) -> float | None:
    return None if row is None else row["latency_ms"][key]


def headline(scenarios: Mapping[str, Mapping[str, Any]], memory: Mapping[str, Any],
             extra: Mapping[str, Any] | None = None) -> dict[str, float | None]:
    """Each goal's measured value (None where its scenarios did not run)."""
    on = at_level(scenarios, "face_embedding_batching_on", BATCHING_SPEEDUP_LEVEL)
    off = at_level(scenarios, "face_embedding_batching_off", BATCHING_SPEEDUP_LEVEL)
    speedup = ratio(on and on["per_s"], off and off["per_s"])
    ceiling = ((extra or {}).get("batching_ceiling_in_process") or {}).get(
        "face_embedding", {}).get("ceiling")
    ours = at_level(scenarios, "document_ocr", 1)
    peer = at_level(scenarios, "document_peer_rapidocr", 1)
    exact = None
    if ours is not None and peer is not None and "mrz_exact_rate" in ours \
            and "mrz_exact_rate" in peer:
        exact = round(ours["mrz_exact_rate"] - peer["mrz_exact_rate"], 3)
    return {
        "served_vs_inprocess_throughput": ratio(best_rate(scenarios, "kyc_ensemble"),
                                                best_rate(scenarios, "kyc_in_process")),
        "dynamic_batching_speedup": speedup,
        "batching_gain_vs_ceiling": ratio(speedup, ceiling),
        "cpu_seconds_per_customer": (at_level(scenarios, "kyc_ensemble", 1) or {}).get(
            "server_cpu_s_per_request"),
        "kyc_ensemble_p95_ms_at_1": _latency(at_level(scenarios, "kyc_ensemble", 1), "p95"),
        "kyc_ensemble_best_per_s": best_rate(scenarios, "kyc_ensemble"),
        "liveness_p95_ms_at_8": _latency(at_level(scenarios, "liveness_sequence",
                                                  LIVENESS_GOAL_SESSIONS), "p95"),
        "document_latency_vs_peer": ratio(_latency(ours, "p50"), _latency(peer, "p50")),
        "document_mrz_exact_minus_peer": exact,
        "server_memory_resident_mib": memory.get("resident_mib") or memory.get("total_rss_mib"),
    }


def goals(values: Mapping[str, float | None]) -> dict[str, dict[str, Any]]:
    out = {}
    for name, (target, sense, what) in GOALS.items():
        value = values.get(name)
        met = None if value is None else (value >= target if sense == "min" else value <= target)
        out[name] = {"value": value, "target": target,
                     "sense": ">=" if sense == "min" else "<=", "met": met, "what": what}
    return out


def document_reading(scenarios: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Ours and the peer's document reading at concurrency 1, side by side."""
    table: dict[str, dict[str, Any]] = {}
    for name in ("document_ocr", "document_peer_rapidocr"):
        if name not in scenarios:
            continue
        if "skipped" in scenarios[name]:
            table[name] = {"skipped": scenarios[name]["skipped"]}
            continue
        row = at_level(scenarios, name, 1)
        if row is not None:
            table[name] = {**{k: row[k] for k in QUALITY_KEYS if k in row},
                           "per_s": row["per_s"], "p50_ms": row["latency_ms"]["p50"],
                           "p95_ms": row["latency_ms"]["p95"], "documents": row["requests"]}
    return table


def summarize(scenarios: Mapping[str, Mapping[str, Any]], options: BenchOptions,
              started_at: datetime, host: Mapping[str, Any],
              memory: Mapping[str, Any] | None = None,
              extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The JSON report: the contract's two ratios at the top, every goal with its
    measured value, the scenarios level by level, the server's memory."""
    memory = dict(memory or {})
    values = headline(scenarios, memory, extra)
    report = {
        "served_vs_inprocess_throughput": values["served_vs_inprocess_throughput"],
        "dynamic_batching_speedup": values["dynamic_batching_speedup"],
        # reported, no target: tritonserver's and its stubs' CPU seconds per customer at
        # concurrency 1 (perf_analyzer's whole run of that level, warm-up included)
        "cpu_seconds_per_customer": values["cpu_seconds_per_customer"],
        "goals": goals(values),
        "compared": COMPARED,
        "scenarios": {name: dict(figs) for name, figs in scenarios.items()},
        "server_memory": memory,
        "settings": {"window": dataclasses.asdict(options.window),
                     "groups": list(options.groups or GROUPS),
                     "levels": {g: list(options.levels_of(g)) for g in GROUPS},
                     "url": options.url},
        "machine": dict(host),
        "quick": options.quick,
        "started_at": started_at.isoformat(timespec="seconds"),
    }
    documents = document_reading(scenarios)
    if documents:
        report["document_reading"] = documents
    report.update(extra or {})
    return report


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def format_table(report: Mapping[str, Any]) -> str:
    """A short human-readable table of the report."""
    lines = [f"{'scenario':<36} {'conc':>4} {'per s':>8} {'p50 ms':>8} {'p95 ms':>8} "
             f"{'p99 ms':>8} {'errors':>6}"]
    for name, figs in report["scenarios"].items():
        if "skipped" in figs:
            lines.append(f"{name:<36} skipped: {figs['skipped']}")
            continue
        for row in figs["levels"]:
            lat = [_ms(row["latency_ms"][p]) for p in ("p50", "p95", "p99")]
            lines.append(f"{name:<36} {row['concurrency']:>4} {row['per_s']:>8.2f} "
                         f"{lat[0]:>8} {lat[1]:>8} {lat[2]:>8} {row['errors']:>6}  "
                         f"({figs['unit']})")
    memory = report.get("server_memory", {})
    if "total_rss_mib" in memory:
        lines.append(f"server memory: {memory.get('resident_mib')} MiB resident "
                     f"(distinct pages), {memory['total_rss_mib']} MiB RSS summed "
                     f"({memory['total_pss_mib']} MiB proportional), "
                     f"{memory['stub_processes']} stub processes")
    if report.get("cpu_seconds_per_customer") is not None:
        lines.append(f"server CPU per customer (kyc_ensemble, one client): "
                     f"{report['cpu_seconds_per_customer']} s")
    for model, figs in report.get("batching_ceiling_in_process", {}).items():
        lines.append(f"batching ceiling in process, {model}: {figs['ceiling']}x "
                     f"({figs['ms_per_item_batch_1']} ms per item at batch 1, "
                     f"{figs['ms_per_item_batch_16']} at batch 16)")
    for model, figs in report.get("first_request_after_publish", {}).items():
        if model == "skipped":
            lines.append(f"first request after publish: skipped: {figs}")
            continue
        lines.append(f"first request after publish, {model}: "
                     f"{figs['with_warmup']['first_ms']} ms with model_warmup, "
                     f"{figs['without_warmup']['first_ms']} ms without "
                     f"(steady {figs['steady_ms']} ms)")
    for name, goal in report["goals"].items():
        verdict = {True: "met", False: "NOT met", None: "not measured"}[goal["met"]]
        lines.append(f"{name:<36} {goal['value']!s:>10} (goal {goal['sense']} "
                     f"{goal['target']}): {verdict}")
    lines.append(f"compared: {report['compared']}")
    return "\n".join(lines)


def total_errors(report: Mapping[str, Any]) -> int:
    return sum(row["errors"] + row.get("background", {}).get("errors", 0)
               for figs in report["scenarios"].values() for row in figs.get("levels", []))


def write_json(report: Mapping[str, Any], path: Path) -> None:
    path.write_text(json.dumps(report, indent=2, allow_nan=False) + "\n", encoding="utf-8")
