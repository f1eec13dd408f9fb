"""Adding a model the documented way (docs/architecture.md, "Adding a model"): a toy
step declared once, and every list the tooling needs derived from it and the configs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from kyc.pipeline.contract import BLS, Contract, Use
from kyc.pipeline.modelconfig import Repository, config_dict
from kyc.pipeline.step import Request, StepContext
from kyc.pipeline.triton import resolve
from kyc_testing import (
    SHIPPED_REPOSITORY,
    ensemble_config,
    ensemble_step,
    model_config,
    write_model,
)
from kyc_tools.repo.config import load_config
from kyc_tools.repo.graph.build import build_graph
from kyc_tools.repo.graph.contracts import contract_mismatches
from kyc_tools.repo.graph.derive import entry_models, runs_through, step_map
from kyc_tools.repo.graph.draw import to_mermaid

# 1. the step: its settings and its CONTRACT, in an importable module (the serving
#    package in real life; a module of the test's own here)
TOY_STEP = '''
from dataclasses import dataclass

import numpy as np

from kyc.pipeline.contract import BLS, Contract, Use


@dataclass(frozen=True)
class ToySettings:
    detector_model: str = "face_detector"
    min_score: float = 0.5


class ToyStep:
    CONTRACT = Contract(settings=ToySettings, budget="face_match", inputs=("IMAGES",),
                        outputs=("FOUND",), uses={"detector_model": Use(BLS)})

    def __init__(self, detect, settings):
        self.detect, self.settings = detect, settings

    @classmethod
    def from_context(cls, context):
        settings = context.settings(ToySettings)
        return cls(context.callee(settings.detector_model, ["SCORES"]), settings)

    def run(self, requests):
        scores = self.detect({"IMAGES": np.concatenate([r.inputs["IMAGES"] for r in requests])})
        return [{"FOUND": (s.max(axis=-1, keepdims=True) >= self.settings.min_score)}
                for s in scores["SCORES"][:, None]]
'''

# 2. its config and its one-line glue file; 3. an ensemble that runs it (both with the
#    step's tensors)
TOY_INPUTS = {"IMAGES": ("FP32", [3, 4, 4])}
TOY_OUTPUTS = {"FOUND": ("BOOL", [1])}
TOY_CONFIG = model_config(
    "toy_quality", backend="python", inputs=TOY_INPUTS, outputs=TOY_OUTPUTS,
    more='parameters { key: "detector_model" value { string_value: "face_detector" } }\n')
TOY_GLUE = """
    from kyc.pipeline.triton import triton_model

    TritonPythonModel = triton_model("toy_step:ToyStep")
    """
TOY_ENSEMBLE = ensemble_config("toy_ensemble", inputs=TOY_INPUTS, outputs=TOY_OUTPUTS, steps=[
    ensemble_step("toy_quality", {"IMAGES": "IMAGES"}, {"FOUND": "FOUND"})])


@pytest.fixture
def repository(tmp_path, monkeypatch):
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "toy_step.py").write_text(TOY_STEP)
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    root = tmp_path / "repo"
    write_model(root, "toy_quality", TOY_CONFIG, TOY_GLUE)
    write_model(root, "toy_ensemble", TOY_ENSEMBLE)
    detector = (SHIPPED_REPOSITORY / "face_detector" / "config.pbtxt").read_text()
    write_model(root, "face_detector", detector)
    return root


def test_a_toy_step_declared_once_is_drawn_budgeted_and_listed_by_derivation(repository):
    graph = build_graph(repository)
    assert {(c.caller, c.callee, c.kind) for c in graph.calls} == {
        ("toy_quality", "face_detector", BLS)}
    assert entry_models(graph, "toy_ensemble") == ("toy_ensemble", "face_detector",
                                                   "toy_quality")
    assert runs_through(graph, ["toy_quality"]) == {"toy_quality", "face_detector"}
    steps = step_map(graph)
    assert steps.step_of == {"toy_quality": "face_match", "face_detector": "face_match"}
    assert steps.queue_timeout_us("toy_quality") == steps.queue_timeout_us("face_detector")
    assert contract_mismatches(graph, repository) == []
    assert "BLS detector_model" in to_mermaid(graph)


def test_a_config_that_breaks_its_steps_contract_is_named(repository):
    config = repository / "toy_quality" / "config.pbtxt"
    config.write_text(config.read_text().replace('"FOUND"', '"FACE_FOUND"')
                      + 'parameters { key: "crop_model" value { string_value: "x" } }\n')
    problems = contract_mismatches(build_graph(repository), repository)
    assert any("outputs ['FACE_FOUND'] != declared ['FOUND']" in p for p in problems), problems
    assert any("parameter crop_model names a model" in p for p in problems), problems


def test_the_toy_step_serves_through_the_same_adapter_as_the_shipped_ones(repository):
    seen = []

    def infer(model, inputs, outputs):
        seen.append((model, len(inputs["IMAGES"]), tuple(outputs)))
        return {"SCORES": np.array([[0.9], [0.1]], np.float32)}

    config = config_dict(load_config(repository / "toy_quality" / "config.pbtxt"))
    context = StepContext("toy_quality", "1", config, Repository(repository), infer,
                          in_server=False)
    step = resolve("toy_step:ToyStep")(context)
    images = np.zeros((1, 3, 4, 4), np.float32)
    answers = step.run([Request({"IMAGES": images}), Request({"IMAGES": images})])
    assert [bool(a["FOUND"][0]) for a in answers] == [True, False]
    assert seen == [("face_detector", 2, ("SCORES",))]


def test_every_shipped_python_models_config_agrees_with_its_steps_contract():
    graph = build_graph(SHIPPED_REPOSITORY)
    python = [m for m in graph.models if m.kind in ("python", "sequence")]
    assert python and all(m.step for m in python)
    assert contract_mismatches(graph, SHIPPED_REPOSITORY) == []


@dataclass(frozen=True)
class _Settings:
    a_model: str = ""


def test_a_contract_must_declare_a_use_for_every_model_setting():
    from kyc.pipeline.contract import contract_problems

    bare = Contract(settings=_Settings, budget="ocr", inputs=(), outputs=())
    assert contract_problems(bare) == ["setting a_model names a model but has no declared use"]
    extra = Contract(settings=_Settings, budget="ocr", inputs=(), outputs=(),
                     uses={"a_model": Use(BLS), "b_model": Use(BLS)})
    assert contract_problems(extra) == ["use b_model is no *_model setting"]

