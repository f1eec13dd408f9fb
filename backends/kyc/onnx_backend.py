"""The local ``onnxruntime`` backend: serves ``model.onnx`` on the CPU, with onnxruntime
or, where the config names that CPU accelerator, OpenVINO (:mod:`kyc.openvino_session`).

The Triton server in the ``nvidia-pytriton`` wheel has only the Python backend.
This module is the logic of a *Python-based backend* named ``onnxruntime``
(glue: ``kyc/local_backends/onnxruntime/model.py``), so a config with
``platform: "onnxruntime_onnx"`` loads unchanged here and on the real
onnxruntime backend of the GPU image.

Batching follows gather -> one run -> scatter: the requests of one
``execute`` are grouped by the shape of their inputs past the batch dimension
(requests of one model usually share it), each group is concatenated and run
once, and the outputs are split back per request. A group whose run fails
answers its own requests with an error; the other groups are still answered.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kyc.dtypes import numpy_dtype
from kyc.pipeline.modelconfig import instance_count
from kyc.pipeline.step import Request, RequestError, StepContext, StepError

log = logging.getLogger(__name__)

# The CPU runtimes: onnxruntime's own provider, or the configs' "openvino" accelerator
# (the `openvino` package here; onnxruntime's OpenVINO provider in the NGC image).
ONNXRUNTIME, OPENVINO = "onnxruntime", "openvino"
# Set to "onnxruntime" (kyc serve --cpu-runtime), the stubs ignore the configs' CPU
# accelerators: the same configs measured on either runtime (kyc bench --compare).
CPU_RUNTIME_ENV = "KYC_CPU_RUNTIME"


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: np.dtype
    dims: tuple[int, ...]


@dataclass(frozen=True)
class OnnxModelSettings:
    """Settings read once from the model config (defaults live here only)."""

    model_file: Path
    max_batch_size: int
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    intra_op_threads: int
    inter_op_threads: int
    # The real onnxruntime backend's memory parameters, same names and values:
    # ``enable_mem_arena`` / ``enable_mem_pattern`` ("0"/"1") and
    # ``memory.enable_memory_arena_shrinkage`` (e.g. "cpu:0": the arena returns
    # what a run grew after the run; a run-options entry in onnxruntime).
    enable_mem_arena: bool = True
    enable_mem_pattern: bool = True
    arena_shrinkage: str = ""
    # Local backend only (the real backend shrinks after every run): with
    # ``arena_shrinkage``, only runs of more than this many batch items shrink the
    # arena after them. A shrunk arena is grown again by the next run, page by page:
    # measured here, +35-40 ms and 28,000 page faults per ocr_det page, +30% per
    # face_detector call. Runs up to this size then allocate nothing after the first,
    # and the arena holds at most what one of them needs. 0: every run shrinks it.
    arena_shrink_above_batch: int = 0
    # Local backend only: a batch of more than this many items runs in slices of at
    # most this many, so that the arena never grows past the mark one slice needs
    # (the warm-up's) and no run need shrink it: its size no longer depends on which
    # batches came by last. 0: every batch in one run.
    max_run_batch: int = 0
    # Local backend only (the real backend ignores the key): the stub's CPU niceness,
    # 0-19. A step that may wait (OCR) yields the cores to a step that must not
    # (liveness frames) when both run, and still gets every core when alone.
    cpu_nice: int = 0
    # The config's CPU execution accelerator, as the real backend reads it
    # (optimization.execution_accelerators.cpu_execution_accelerator, its first name:
    # "openvino") and its parameters; "": onnxruntime's own CPU provider. Set
    # KYC_CPU_RUNTIME=onnxruntime to run every model on onnxruntime alone.
    cpu_accelerator: str = ""
    accelerator_parameters: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_config(
        cls, config: Mapping, model_dir: Path, version: str, instance_count: int = 1,
        env: Mapping[str, str] = os.environ,
    ) -> OnnxModelSettings:
        params = {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}
        filename = config.get("default_model_filename") or "model.onnx"
        # Like the real backend: threads from `parameters`; else share the cores
        # among the instances so that several stubs do not oversubscribe them.
        default_threads = max(1, (os.cpu_count() or 1) // max(1, instance_count))
        return cls(
            model_file=model_dir / version / filename,
            max_batch_size=int(config.get("max_batch_size", 0)),
            inputs=tuple(_spec(t) for t in config.get("input", [])),
            outputs=tuple(_spec(t) for t in config.get("output", [])),
            intra_op_threads=int(params.get("intra_op_thread_count") or default_threads),
            inter_op_threads=int(params.get("inter_op_thread_count") or 1),
            enable_mem_arena=_flag(params.get("enable_mem_arena"), True),
            enable_mem_pattern=_flag(params.get("enable_mem_pattern"), True),
            arena_shrinkage=params.get("memory.enable_memory_arena_shrinkage", ""),
            arena_shrink_above_batch=_count(params.get("arena_shrink_above_batch"),
                                            "arena_shrink_above_batch"),
            max_run_batch=_count(params.get("max_run_batch"), "max_run_batch"),
            cpu_nice=_nice(params.get("cpu_nice")),
            **_cpu_accelerator(config, env),
        )


def _cpu_accelerator(config: Mapping, env: Mapping[str, str]) -> dict:
    """The first CPU execution accelerator of ``config`` (name and parameters), unless
    ``KYC_CPU_RUNTIME`` says onnxruntime."""
    runtime = env.get(CPU_RUNTIME_ENV, "").strip()
    if runtime not in ("", ONNXRUNTIME):
        raise ValueError(f"{CPU_RUNTIME_ENV} is {runtime!r}: '{ONNXRUNTIME}' or unset (the "
                         "configs' own accelerators)")
    accelerators = (config.get("optimization", {}).get("execution_accelerators", {})
                    .get("cpu_execution_accelerator", []))
    if runtime == ONNXRUNTIME or not accelerators:
        return {}
    first = accelerators[0]
    if first.get("name") != OPENVINO:
        raise ValueError(f"unknown CPU execution accelerator {first.get('name')!r}: the local "
                         f"backend knows '{OPENVINO}'")
    return {"cpu_accelerator": OPENVINO,
            "accelerator_parameters": tuple(sorted(first.get("parameters", {}).items()))}


def _nice(value: str | None) -> int:
    nice = int(value or 0)
    if not 0 <= nice <= 19:
        raise ValueError(f"cpu_nice must be 0-19, got {nice}")
    return nice


def _count(value: str | None, name: str) -> int:
    count = int(value or 0)
    if count < 0:
        raise ValueError(f"{name} must be 0 or more, got {count}")
    return count


def _flag(value: str | None, default: bool) -> bool:
    if value is None or value == "":
        return default
    if value.strip().lower() in ("1", "true"):
        return True
    if value.strip().lower() in ("0", "false"):
        return False
    raise ValueError(f"expected 0/1 or true/false, got {value!r}")


def _spec(tensor: Mapping) -> TensorSpec:
    return TensorSpec(
        name=tensor["name"],
        dtype=numpy_dtype(tensor["data_type"]),
        dims=tuple(int(d) for d in tensor.get("dims", [])),
    )


def _rows(feeds: Mapping[str, np.ndarray]) -> int:
    """A run's batch: the first dimension of its largest batched feed."""
    return max((a.shape[0] for a in feeds.values() if np.ndim(a)), default=0)


class SlicedSession:
    """A session that runs a batch of more than ``max_run_batch`` items in slices
    (``_run`` runs one), so the server and the bench's in-process limit run it alike."""

    max_run_batch = 0

    def run(self, output_names, feeds):
        batch = _rows(feeds)
        if not self.max_run_batch or batch <= self.max_run_batch:
            return self._run(output_names, feeds)
        slices = [self._run(output_names, {name: a[start:start + self.max_run_batch]
                                           for name, a in feeds.items()})
                  for start in range(0, batch, self.max_run_batch)]
        return [np.concatenate(parts, axis=0) for parts in zip(*slices, strict=True)]

    def _run(self, output_names, feeds):
        raise NotImplementedError


class ConfiguredSession(SlicedSession):
    """An onnxruntime session with the model's run options (arena shrinkage, after runs
    of more than ``shrink_above_batch`` items)."""

    def __init__(self, session, run_options=None, shrink_above_batch: int = 0,
                 max_run_batch: int = 0) -> None:
        self.session = session
        self.run_options = run_options
        self.shrink_above_batch = shrink_above_batch
        self.max_run_batch = max_run_batch

    def _run(self, output_names, feeds):
        options = self.run_options
        if options is not None and self.shrink_above_batch and \
                _rows(feeds) <= self.shrink_above_batch:
            options = None
        return self.session.run(output_names, feeds, options)

    def get_inputs(self):
        return self.session.get_inputs()

    def get_outputs(self):
        return self.session.get_outputs()


def make_session(settings: OnnxModelSettings) -> SlicedSession:
    """The model's CPU session: OpenVINO where its config names that accelerator, else
    onnxruntime, configured for a shared, small machine."""
    if settings.cpu_accelerator == OPENVINO:
        from kyc.openvino_session import OpenVinoSession

        return OpenVinoSession(settings)
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = settings.intra_op_threads
    opts.inter_op_num_threads = settings.inter_op_threads
    # Idle worker threads must not spin: several stubs share few cores.
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
    opts.enable_cpu_mem_arena = settings.enable_mem_arena
    opts.enable_mem_pattern = settings.enable_mem_pattern
    run_options = None
    if settings.arena_shrinkage:
        run_options = ort.RunOptions()
        run_options.add_run_config_entry(
            "memory.enable_memory_arena_shrinkage", settings.arena_shrinkage
        )
    session = ort.InferenceSession(
        str(settings.model_file), sess_options=opts, providers=["CPUExecutionProvider"]
    )
    return ConfiguredSession(session, run_options, settings.arena_shrink_above_batch,
                             settings.max_run_batch)


Result = dict[str, np.ndarray] | Exception


class OnnxBatchRunner:
    """Gather -> one session run per input-shape group -> scatter."""

    def __init__(self, settings: OnnxModelSettings, session) -> None:
        self.settings = settings
        self.session = session
        self.output_names = [o.name for o in settings.outputs]
        graph_inputs = {i.name for i in session.get_inputs()}
        self.input_names = [i.name for i in settings.inputs if i.name in graph_inputs]

    def _prepare(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        feeds = {}
        batched = self.settings.max_batch_size > 0
        batch = None
        for spec in self.settings.inputs:
            if spec.name not in self.input_names:
                continue
            if spec.name not in inputs:
                raise RequestError(f"missing input '{spec.name}'")
            array = inputs[spec.name]
            if spec.dtype == np.object_:
                array = _decode_strings(spec.name, array)
            elif array.dtype != spec.dtype:
                raise RequestError(
                    f"input '{spec.name}' has type {array.dtype}, expected {spec.dtype}"
                )
            if batched:
                if array.ndim != len(spec.dims) + 1:
                    raise RequestError(
                        f"input '{spec.name}' has shape {list(array.shape)}, expected "
                        f"[batch, {', '.join(map(str, spec.dims))}]"
                    )
                if batch is None:
                    batch = array.shape[0]
                elif array.shape[0] != batch:
                    raise RequestError("inputs disagree on the batch size")
            feeds[spec.name] = array
        return feeds

    def run(self, requests: Sequence[Mapping[str, np.ndarray]]) -> list[Result]:
        """One result per request: a dict of outputs, or the exception to report."""
        results: list[Result | None] = [None] * len(requests)
        prepared: dict[int, dict[str, np.ndarray]] = {}
        for i, inputs in enumerate(requests):
            try:
                prepared[i] = self._prepare(inputs)
            except RequestError as exc:
                results[i] = exc
        if self.settings.max_batch_size > 0:
            groups: dict[tuple, list[int]] = {}
            for i, feeds in prepared.items():
                key = tuple((n, a.shape[1:]) for n, a in sorted(feeds.items()))
                groups.setdefault(key, []).append(i)
            for members in groups.values():
                self._run_group(members, prepared, results)
        else:
            for i in prepared:
                self._run_group([i], prepared, results, concatenate=False)
        return [r if r is not None else StepError("no result") for r in results]

    def _run_group(
        self,
        members: list[int],
        prepared: dict[int, dict[str, np.ndarray]],
        results: list[Result | None],
        concatenate: bool = True,
    ) -> None:
        started = time.perf_counter()
        if concatenate and len(members) > 1:  # one shape per group: they concatenate
            feeds = {
                name: np.concatenate([prepared[i][name] for i in members], axis=0)
                for name in prepared[members[0]]
            }
        else:
            feeds = prepared[members[0]]
        try:
            outputs = self.session.run(self.output_names, feeds)
        except Exception as exc:  # a failed run answers only this group
            # The runtime's text (its nodes, its source files) stays in the log: the
            # caller is told its shapes, which the run could not take.
            shapes = ", ".join(f"{n} {list(a.shape)}" for n, a in sorted(feeds.items()))
            log.warning("onnxruntime run failed for %d requests (%s): %s", len(members),
                        shapes, exc)
            for i in members:
                results[i] = StepError(f"onnxruntime failed on {shapes}: the model cannot "
                                       "run on inputs of these shapes (the server log says why)")
            return
        arrays = [
            np.asarray(out, dtype=spec.dtype)
            for out, spec in zip(outputs, self.settings.outputs, strict=True)
        ]
        if not concatenate or len(members) == 1:
            results[members[0]] = dict(zip(self.output_names, arrays, strict=True))
        else:
            sizes = [_batch_size(prepared[i]) for i in members]
            total = sum(sizes)
            if any(a.shape[:1] != (total,) for a in arrays):
                err = StepError("model outputs do not have one row per batch item")
                for i in members:
                    results[i] = err
                return
            bounds = np.cumsum(sizes)[:-1]
            pieces = [np.split(a, bounds, axis=0) for a in arrays]
            for k, i in enumerate(members):
                results[i] = {name: pieces[j][k] for j, name in enumerate(self.output_names)}
        log.debug(
            "ran %d requests in one batch in %.1f ms",
            len(members),
            (time.perf_counter() - started) * 1e3,
        )


def _batch_size(feeds: Mapping[str, np.ndarray]) -> int:
    return int(next(iter(feeds.values())).shape[0])


def _decode_strings(name: str, array: np.ndarray) -> np.ndarray:
    """BYTES tensors arrive as bytes; ONNX string tensors need str."""
    try:
        flat = [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in array.ravel()]
    except UnicodeDecodeError:
        raise RequestError(f"input '{name}' is not valid UTF-8") from None
    return np.array(flat, dtype=np.object_).reshape(array.shape)


class OnnxStep:
    """A model file served with onnxruntime, as a step (the local ``onnxruntime``
    backend, and the ONNX models of :mod:`kyc.pipeline.local`)."""

    def __init__(self, runner: OnnxBatchRunner) -> None:
        self.runner = runner

    @classmethod
    def from_context(cls, context: StepContext) -> OnnxStep:
        config = context.config
        settings = OnnxModelSettings.from_config(
            config, context.own_dir, context.version, instance_count(config))
        if settings.cpu_nice and context.in_server:
            from kyc.priority import lower_cpu_priority

            # Before the session: its thread pool inherits the niceness.
            lower_cpu_priority(settings.cpu_nice)
        step = cls(OnnxBatchRunner(settings, make_session(settings)))
        log.info("%s: serving %s with %s on CPU (%d threads, nice %d)",
                 context.model, settings.model_file.name,
                 settings.cpu_accelerator or ONNXRUNTIME, settings.intra_op_threads,
                 settings.cpu_nice)
        return step

    def run(self, requests: Sequence[Request]) -> list[Result]:
        return self.runner.run([r.inputs for r in requests])
