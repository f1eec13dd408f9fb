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
  (:mod:`kyc_tools.dev.bench.publish`).

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
import functools
import json
import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kyc.budgets import StepMap, queue_against_budget
from kyc_client.channel import as_channel
from kyc_tools.dev.bench.measure import (
    AsyncClient,
    InProcessRunner,
    Level,
    Measurement,
    StatsReader,
    first_sight_figures,
    level_figures,
    measure_batches,
    measure_level,
)
from kyc_tools.dev.bench.models import pipeline_steps
from kyc_tools.dev.bench.options import (
    CLIENT_TIMEOUT_S,
    READY_TIMEOUT_S,
    STOP_GRACE_S,
    BenchError,
    BenchOptions,
    PeerUnavailableError,
)
from kyc_tools.dev.bench.stats import model_stats, process_cpu_seconds, server_times, stats_reader
from kyc_tools.operator.procs import children, stub_instance
from kyc_tools.operator.server import (
    ServerError,
    ServerOptions,
    TritonServer,
    start_until_ready,
)
from kyc_tools.repo.graph.build import build_graph
from kyc_tools.repo.graph.derive import entry_models, step_map

log = logging.getLogger(__name__)


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
        self.channel = as_channel(grpc_url)  # with the client key found here
        self.client = self.channel.grpc_client(aioclient)
        self.index = offset

    async def next(self) -> Mapping[str, int]:
        array = self.payloads[self.index % len(self.payloads)]
        self.index += 1
        tensor = self.grpc.InferInput(self.input_name, list(array.shape),
                                      "BYTES" if array.dtype == np.object_ else
                                      self.grpc.np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        result = await self.client.infer(self.model, [tensor], client_timeout=CLIENT_TIMEOUT_S,
                                         outputs=[self.grpc.InferRequestedOutput(self.output)],
                                         headers=self.channel.metadata)
        if result.as_numpy(self.output) is None:
            raise BenchError(f"{self.model} answered without {self.output}")
        return {self.unit: 1}

    async def close(self) -> None:
        await self.client.close()


# -- scenarios -------------------------------------------------------------------------
@dataclass(frozen=True)
class Served:
    """A served scenario: clients of ``entry`` swept over ``levels``."""

    name: str
    description: str
    unit: str
    entry: str
    models: tuple[str, ...]  # whose statistics are read (entry first): Bench.models_of
    make_client: Callable[[str, int], AsyncClient]  # (grpc_url, client index)
    levels: tuple[int, ...]
    quality: Callable[[Mapping[str, int]], Mapping[str, Any]] | None = None
    # Stateless requests (inputs with a batch dimension of 1): then NVIDIA's perf_analyzer
    # is the load generator (kyc_tools.dev.bench.perf_analyzer), not make_client's loops.
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

        from kyc_tools.dev.bench import perf_analyzer

        steps = pipeline_steps(self.repository, scenario.entry)
        models = list(dict.fromkeys([scenario.entry, *steps, *scenario.models]))
        levels = []
        use_perf = (scenario.perf_inputs is not None and background is None
                    and perf_analyzer.available())
        if scenario.perf_inputs is not None and not use_perf:
            log.warning("%s: perf_analyzer is not installed (make perf-analyzer): the bench's "
                        "own clients load instead", name or scenario.name)
        checked: dict[str, int] = {}
        first_sight: list[float] = []  # seconds
        folder = Path(tempfile.mkdtemp(prefix="kyc-perf-"))
        data = folder / "input.json"  # written once, read by every level
        stats_client = aioclient.InferenceServerClient(self.grpc_url)
        try:
            if use_perf:  # perf_analyzer times the answers; the SDK client scores them, once
                checked, first_sight = await self._check_answers(scenario)
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
        generator = "perf_analyzer" if use_perf else "kyc_tools.dev.bench asyncio gRPC clients"
        result = {"description": scenario.description, "kind": "served", "unit": scenario.unit,
                  "models": models, "steps": steps, "load_generator": generator, **extra,
                  "levels": levels}
        if use_perf:  # what a level's latencies are: answers a client timed, these inputs
            result["inputs_cycled"] = len(scenario.perf_inputs or [])
            result["windows"] = perf_analyzer.WINDOWS_TEXT.format(
                self.options.window.min_requests)
        if checked:
            result["answers_checked"] = checked
        if first_sight:
            result["first_sight"] = first_sight_figures(first_sight, levels)
        self.scenarios[name or scenario.name] = result
        return result

    async def _check_answers(self, scenario: Served) -> tuple[dict[str, int], list[float]]:
        """Each of perf_analyzer's inputs sent once through the scenario's own client, one
        at a time, its answer scored (perf_analyzer only times answers): summed tallies,
        with ``requests`` and ``errors``; and each answer's latency in seconds, a customer
        the server sees for the first time, as a client's own request is."""
        client = scenario.make_client(self.grpc_url, 0)
        tallies: dict[str, int] = {"requests": 0, "errors": 0}
        latencies: list[float] = []
        try:
            for _ in scenario.perf_inputs or []:
                tallies["requests"] += 1
                start = time.perf_counter()
                try:
                    outcome = await client.next()
                except Exception:  # counted, as in a measured window
                    tallies["errors"] += 1
                    continue
                latencies.append(time.perf_counter() - start)
                for key, count in outcome.items():
                    tallies[key] = tallies.get(key, 0) + count
        finally:
            await client.close()
        return tallies, latencies

    async def _perf_level(self, scenario: Served, concurrency: int, stats: StatsReader,
                          data: Path) -> tuple[Level, dict[str, Any]]:
        """One level measured by perf_analyzer from the ``--input-data`` file ``data``,
        the statistics read around its run."""
        from kyc_tools.dev.bench import perf_analyzer

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

    def models_of(self, *entries: str) -> tuple[str, ...]:
        """The models whose statistics make up requests of ``entries``, derived from the
        served repository's graph (each entry first, then what it runs through)."""
        graph = build_graph(self.repository)
        return tuple(dict.fromkeys(m for entry in entries for m in entry_models(graph, entry)))

    @functools.cached_property
    def budget_steps(self) -> StepMap:
        """Each served model's step of the latency budgets (derived, kyc.budgets)."""
        return step_map(build_graph(self.repository))

    def _served_figures(self, figs: dict[str, Any], level: Level, scenario: Served,
                        steps: Sequence[str]) -> dict[str, Any]:
        figs["server_us"] = server_times(level.stats_before, level.stats_after, scenario.entry,
                                         steps)
        figs["model_stats"] = model_stats(level.stats_before, level.stats_after)
        figs["queue_vs_budget"] = queue_against_budget(figs["model_stats"], self.budget_steps)
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


# -- running it ------------------------------------------------------------------------
@contextlib.contextmanager
def running_server(repository: Path, log_file: Path) -> Iterator[TritonServer]:
    """A real server on free local ports over ``repository``, in explicit model-control
    mode (every model loaded at start) so that variants can be loaded; stopped on exit."""
    options = ServerOptions.on_free_ports(repository, model_control="explicit")
    server = TritonServer(options, log_file=log_file)
    try:
        try:
            start_until_ready(server, timeout_s=READY_TIMEOUT_S, stop_grace_s=STOP_GRACE_S)
        except ServerError as exc:  # its message ends with the server log's tail
            raise BenchError(str(exc)) from None
        yield server
    finally:
        server.stop(grace=STOP_GRACE_S)
