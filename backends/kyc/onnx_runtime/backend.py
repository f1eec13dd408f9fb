"""The local ``onnxruntime`` backend: serves ``model.onnx`` on the CPU, with onnxruntime
or, where the config names that CPU accelerator, OpenVINO (:mod:`kyc.onnx_runtime.openvino`).

The Triton server in the ``nvidia-pytriton`` wheel has only the Python backend.
This module is the logic of a *Python-based backend* named ``onnxruntime``
(glue: ``kyc/onnx_runtime/local_backends/onnxruntime/model.py``), so a config with
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
import time
from collections.abc import Mapping, Sequence

import numpy as np

from kyc.onnx_runtime.openvino import OpenVinoSession
from kyc.onnx_runtime.sessions import ConfiguredSession, SlicedSession
from kyc.onnx_runtime.settings import ONNXRUNTIME, OPENVINO, OnnxModelSettings
from kyc.pipeline.modelconfig import instance_count
from kyc.pipeline.step import Request, RequestError, StepContext, StepError

log = logging.getLogger(__name__)


def make_session(settings: OnnxModelSettings) -> SlicedSession:
    """The model's CPU session: OpenVINO where its config names that accelerator, else
    onnxruntime, configured for a shared, small machine."""
    if settings.cpu_accelerator == OPENVINO:
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
    backend, and the ONNX models of :mod:`kyc.local`)."""

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
