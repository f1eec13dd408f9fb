"""The repository run in this process: the same steps, the ONNX models on the CPU
runtime their configs name (OpenVINO or onnxruntime), the ensembles composed from
their configs.

:class:`LocalRepository` is what the bench measures as its in-process limit and what
tests use to run a pipeline without a server. Nothing is retyped here: a Python
model's step is the one its ``model.py`` names (:func:`kyc.pipeline.triton.served_step`,
the one rule, which the model graph follows too), an ONNX model is
:class:`kyc.onnx_runtime.backend.OnnxStep` over its latest version, and an ensemble
runs its ``ensemble_scheduling`` steps in data order with their
``input_map``/``output_map``. A step's "BLS call" is a direct call of the callee here.
Requests go to a model in groups of at most its ``max_batch_size`` rows, as the dynamic
batcher would form them; a request that a step answers with an error leaves the
ensemble with that error, as served.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from kyc.pipeline.modelconfig import Repository, config_dict
from kyc.pipeline.step import Answer, Arrays, CallError, Request, Step, StepContext
from kyc.pipeline.triton import public_message, resolve, served_step


def _rows(request: Request) -> int:
    return int(next(iter(request.inputs.values())).shape[0]) if request.inputs else 1


def batches(requests: Sequence[Request], max_batch: int) -> list[list[int]]:
    """Indices of ``requests`` grouped in order, at most ``max_batch`` rows a group
    (a request larger than that alone); ``max_batch`` 0: one group."""
    if max_batch <= 0:
        return [list(range(len(requests)))] if requests else []
    groups: list[list[int]] = []
    rows = 0
    for i, request in enumerate(requests):
        size = _rows(request)
        if not groups or rows + size > max_batch:
            groups.append([])
            rows = 0
        groups[-1].append(i)
        rows += size
    return groups


class LocalEnsemble:
    """An ensemble config's steps, run in data order over a batch of requests."""

    def __init__(self, config, models: LocalRepository) -> None:
        self.models = models
        self.outputs = [o.name for o in config.output]
        self.steps = [(s.model_name, dict(s.input_map), dict(s.output_map))
                      for s in config.ensemble_scheduling.step]
        known = {i.name for i in config.input}
        self.order: list[tuple[str, dict[str, str], dict[str, str]]] = []
        pending = list(self.steps)
        while pending:  # a step runs once every tensor it reads exists
            ready = [s for s in pending if set(s[1].values()) <= known]
            if not ready:
                raise ValueError(f"{config.name}: steps wait for tensors nobody produces")
            for step in ready:
                self.order.append(step)
                known |= set(step[2].values())
                pending.remove(step)

    def run(self, requests: Sequence[Request]) -> list[Answer]:
        tensors: list[dict[str, np.ndarray]] = [dict(r.inputs) for r in requests]
        errors: list[Exception | None] = [None] * len(requests)
        for model, input_map, output_map in self.order:
            live = [i for i, e in enumerate(errors) if e is None]
            answers = self.models.run(model, [  # each step sees the client's parameters
                Request({inner: tensors[i][outer] for inner, outer in input_map.items()},
                        parameters=requests[i].parameters)
                for i in live])
            for i, answer in zip(live, answers, strict=True):
                if isinstance(answer, Exception):
                    errors[i] = answer
                    continue
                for inner, outer in output_map.items():
                    tensors[i][outer] = answer[inner]
        return [e if e is not None else {n: t[n] for n in self.outputs}
                for e, t in zip(errors, tensors, strict=True)]


class LocalRepository:
    """Every model of a repository, built on first use and run in this process."""

    def __init__(self, root: Path, environ: Mapping[str, str] | None = None) -> None:
        self.repository = Repository(root)
        self.environ = environ
        self._steps: dict[str, Step] = {}

    def built(self) -> dict[str, Step]:
        """The steps built so far, by model."""
        return dict(self._steps)

    def step(self, model: str) -> Step:
        if model not in self._steps:
            self._steps[model] = self._build(model)
        return self._steps[model]

    def context(self, model: str) -> StepContext:
        """What ``model``'s step is built from here (its latest version)."""
        config = self.repository.config(model)
        version = self.repository.latest_version(model)
        return StepContext(model, version.name, config_dict(config), self.repository,
                           self.infer, in_server=False, environ=self.environ)

    def _build(self, model: str) -> Step:
        from kyc.onnx_runtime.backend import OnnxStep

        config = self.repository.config(model)
        if config.platform == "ensemble":
            return LocalEnsemble(config, self)
        context = self.context(model)
        if config.backend == "python":
            return resolve(served_step(context.own_dir / context.version, config))(context)
        if config.platform == "onnxruntime_onnx" or config.backend == "onnxruntime":
            return OnnxStep.from_context(context)
        raise ValueError(f"{model}: no local runtime for {config.platform or config.backend}")

    def run(self, model: str, requests: Sequence[Request]) -> list[Answer]:
        """One answer per request, as ``model`` would answer them served."""
        step = self.step(model)
        answers: list[Answer] = [RuntimeError("no answer")] * len(requests)
        for group in batches(requests, self.repository.max_batch_size(model)):
            try:
                got = step.run([requests[i] for i in group])
            except Exception as exc:  # the step failed this batch
                got = [exc] * len(group)
            for i, answer in zip(group, got, strict=True):
                answers[i] = answer
        return answers

    def infer(self, model: str, inputs: Mapping[str, np.ndarray],
              outputs: Sequence[str]) -> Arrays:
        """One call of ``model``, as a BLS call is made when served (raises CallError)."""
        (answer,) = self.run(model, [Request(dict(inputs))])
        if isinstance(answer, Exception):
            raise CallError(f"{model} failed: {public_message(model, answer)}")
        return {name: answer[name] for name in outputs}
