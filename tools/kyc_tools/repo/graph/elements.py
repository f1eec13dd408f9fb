"""What a model graph is made of: its models (by kind), the steps of its ensembles, the
tensors that flow between them, the calls of the Python models and what names no model."""

from __future__ import annotations

from dataclasses import dataclass

# Kinds of model nodes (and of the other nodes, for their style).
ENSEMBLE = "ensemble"
PYTHON = "python"
ONNX = "onnx"
TENSORRT = "tensorrt"
SEQUENCE = "sequence"
OTHER = "other"
STEP = "step"
OUTPUTS = "outputs"
CLIENT = "client"

KIND_LABELS = {
    ENSEMBLE: "ensemble",
    PYTHON: "python step",
    ONNX: "onnx model",
    TENSORRT: "tensorrt model",
    SEQUENCE: "sequence-batched model",
    OTHER: "model",
}


@dataclass(frozen=True)
class Model:
    name: str
    kind: str  # ENSEMBLE, PYTHON, ONNX, TENSORRT, SEQUENCE or OTHER
    runtime: str  # "backend python", "platform onnxruntime_onnx": what the config names
    max_batch_size: int
    inputs: tuple[str, ...]  # sorted
    outputs: tuple[str, ...]  # sorted
    sequence_controls: tuple[str, ...] = ()  # its START and END control inputs
    step: str | None = None  # a Python model's step class, "module:Class" (its glue file)


@dataclass(frozen=True)
class Step:
    ensemble: str
    index: int  # from 1, in the order of ensemble_scheduling.step
    model: str
    version: int  # -1: the latest


@dataclass(frozen=True)
class Flow:
    """Tensors of an ensemble from one producer to one consumer.

    ``source`` 0: the ensemble's inputs; ``target`` 0: the ensemble's outputs; else
    a step's :attr:`Step.index`. ``tensors``: the ensemble's names of them.
    """

    ensemble: str
    source: int
    target: int
    tensors: tuple[str, ...]


@dataclass(frozen=True)
class Call:
    """``caller`` uses ``callee``: by BLS or for its settings, as ``parameter`` says
    (``face_model.detector_model``: the callee named by the parameters of the model
    that ``face_model`` names)."""

    caller: str
    callee: str
    kind: str  # BLS or SETTINGS
    parameter: str
    budget: str | None = None  # the budget step the callee's work counts to (None: caller's)


@dataclass(frozen=True)
class Unresolved:
    """A reference to no model of the repository: ``model``'s ``where`` (a
    ``*_model`` parameter, or an ensemble's ``step 2``) names ``value``."""

    model: str
    where: str
    value: str


@dataclass(frozen=True)
class Graph:
    name: str  # the repository folder's name
    models: tuple[Model, ...]  # by name
    steps: tuple[Step, ...]  # by ensemble, then index
    flows: tuple[Flow, ...]  # sorted
    calls: tuple[Call, ...]  # sorted
    clients: tuple[str, ...]  # the models clients call directly, by name
    unresolved: tuple[Unresolved, ...] = ()

    def model(self, name: str) -> Model:
        for model in self.models:
            if model.name == name:
                return model
        raise KeyError(name)

    def ensemble_steps(self, ensemble: str) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if s.ensemble == ensemble)
