"""kyc.pipeline: the step shape, the one Triton adapter and the in-process runtime.

The adapter is driven with the stand-in for triton_python_backend_utils (glue only);
that the served models work is shown against a real server in tests/integration.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import fake_triton
from fake_triton import FakeError, FakeTensor
from kyc.local import LocalRepository, batches
from kyc.pipeline.modelconfig import Repository
from kyc.pipeline.step import (
    Callee,
    Request,
    RequestError,
    StepContext,
    StepError,
    UnavailableError,
    run_valid,
)
from kyc.pipeline.triton import triton_model
from kyc_testing import (
    SHIPPED_REPOSITORY,
    ensemble_config,
    ensemble_step,
    model_config,
    write_model,
)

ROOT = Path(__file__).resolve().parents[2]


def test_a_callee_splits_a_batch_only_past_the_callees_max_batch_size_and_keeps_the_order():
    calls = []

    def infer(model, inputs, outputs):
        calls.append(len(inputs["X"]))
        return {"Y": inputs["X"] * 2}

    callee = Callee("m", ("Y",), 4, infer)
    out = callee({"X": np.arange(10)})
    assert calls == [4, 4, 2]
    np.testing.assert_array_equal(out["Y"], np.arange(10) * 2)
    calls.clear()
    callee({"X": np.arange(4)})
    assert calls == [4]


def test_a_callee_reads_its_batch_size_and_outputs_from_the_callees_config():
    context = StepContext("face_preprocess", "1", {}, Repository(SHIPPED_REPOSITORY),
                          infer=lambda *a: {})
    detector = context.callee("face_detector")
    assert detector.max_batch == Repository(SHIPPED_REPOSITORY).max_batch_size("face_detector")
    assert detector.outputs == ("LOC", "SCORES", "LANDMARKS")


class Echo:
    """A step answering each request by what its input asks for."""

    def __init__(self) -> None:
        self.seen: list = []

    def run(self, requests):
        self.seen.append(requests)
        answers = []
        for request in requests:
            what = request.inputs["X"].reshape(-1)[0]
            answers.append({
                0: {"Y": request.inputs["X"]},
                1: RequestError("X: bad input"),
                2: UnavailableError("busy, retry"),
                3: StepError("the callee failed: its message"),
                4: KeyError("Anna Berg, 1990-05-01"),  # personal data in an exception text
            }[int(what)])
        return answers


CONFIG = {"name": "echo", "max_batch_size": 8,
          "input": [{"name": "X", "data_type": "TYPE_INT32", "dims": ["1"]}],
          "output": [{"name": "Y", "data_type": "TYPE_INT32", "dims": ["1"]}]}


def served(monkeypatch, tmp_path, step, config=CONFIG):
    fake_triton.install(monkeypatch)
    model = triton_model(lambda context: step)()
    model.initialize({"model_config": json.dumps(config), "model_name": "echo",
                      "model_version": "1", "model_repository": str(tmp_path / "echo")})
    return model


def x(value: int) -> dict:
    return {"X": FakeTensor("X", np.array([[value]], np.int32))}


def test_the_adapter_answers_each_request_with_its_status_and_a_message_that_may_be_told(
        monkeypatch, tmp_path, caplog):
    model = served(monkeypatch, tmp_path, Echo())
    with caplog.at_level(logging.INFO):
        ok, bad, busy, failed, secret = model.execute([x(0), x(1), x(2), x(3), x(4)])
    assert ok.error() is None and ok.outputs()["Y"].tolist() == [[0]]
    assert (bad.error().code, bad.error().message()) == (FakeError.INVALID_ARG, "X: bad input")
    assert (busy.error().code, busy.error().message()) == (FakeError.UNAVAILABLE, "busy, retry")
    assert failed.error().code == FakeError.INTERNAL
    assert failed.error().message() == "the callee failed: its message"
    assert secret.error().code == FakeError.INTERNAL
    assert secret.error().message() == "echo failed: KeyError"
    assert "Anna" not in caplog.text and "1990" not in caplog.text
    assert "a request failed: KeyError" in caplog.text  # its type, for the operator
    assert "5 requests, 4 answered with an error" in caplog.text


def test_a_step_that_raises_answers_every_request_and_nothing_raises_out_of_execute(
        monkeypatch, tmp_path, caplog):
    class Broken:
        def run(self, requests):
            raise MemoryError

    with caplog.at_level(logging.INFO):
        responses = served(monkeypatch, tmp_path, Broken()).execute([x(0), x(0)])
    assert [r.error().message() for r in responses] == ["echo failed: MemoryError"] * 2
    assert "MemoryError (test_pipeline.py:" in caplog.text  # and where it was raised


def test_the_adapter_gives_the_step_the_control_inputs_and_the_sequence_id(monkeypatch,
                                                                           tmp_path):
    step = Echo()
    config = {**CONFIG, "sequence_batching": {"control_input": [{"name": "START"}]}}
    model = served(monkeypatch, tmp_path, step, config)

    class SequenceRequest(dict):
        def correlation_id(self):
            return 42

    request = SequenceRequest(x(0), START=FakeTensor("START", np.array([[1]], np.int32)))
    model.execute([request])
    (seen,) = step.seen[0]
    assert set(seen.inputs) == {"X", "START"} and seen.correlation_id == 42


def test_a_second_model_call_runs_over_the_items_left_standing_and_puts_each_result_back():
    refused = RequestError("no")
    assert run_valid([1, refused, 3], lambda got: [10 * x for x in got]) == [10, refused, 30]
    assert run_valid([refused], lambda got: []) == [refused]


@pytest.mark.parametrize("extra", [-1, 1])
def test_a_second_model_call_answering_another_count_fails_the_batch(extra):
    """No result can be paired with its item: one too few or one too many."""
    with pytest.raises(StepError, match="answered 3 results for the 2 items"
                       if extra > 0 else "answered 1 results for the 2 items"):
        run_valid([1, RequestError("no"), 3], lambda got: list(range(len(got) + extra)))


@pytest.mark.parametrize(("policy", "served"), [
    ("", "3"), ("version_policy { latest { num_versions: 2 } }", "3"),
    ("version_policy { specific { versions: [1] } }", "1"),
    ("version_policy { all { } }", "3")])
def test_a_models_version_here_is_the_newest_its_version_policy_serves(tmp_path, policy,
                                                                       served):
    """The one rule of the in-process runtime, the steps that read another model's files
    and the model graph: Triton's, not the highest folder."""
    model = tmp_path / "m"
    for version in ("1", "3", "10x"):
        (model / version).mkdir(parents=True)
    (model / "config.pbtxt").write_text(f'name: "m"\nbackend: "python"\n{policy}\n')
    assert Repository(tmp_path).latest_version("m").name == served


def test_a_model_whose_policy_serves_none_of_its_folders_has_no_version_here(tmp_path):
    (tmp_path / "m" / "2").mkdir(parents=True)
    (tmp_path / "m" / "config.pbtxt").write_text(
        'name: "m"\nbackend: "python"\nversion_policy { specific { versions: [1] } }\n')
    with pytest.raises(FileNotFoundError, match=r"no version of m .* its version_policy serves"):
        Repository(tmp_path).latest_version("m")


def test_requests_are_grouped_in_order_up_to_the_models_max_batch_size():
    rows = [Request({"X": np.zeros((n, 1))}) for n in (3, 3, 2, 9, 1)]
    assert batches(rows, 8) == [[0, 1, 2], [3], [4]]
    assert batches(rows, 0) == [[0, 1, 2, 3, 4]]


ADD_ONE = """
    import numpy as np
    from kyc.pipeline.step import RequestError
    from kyc.pipeline.triton import triton_model

    class AddOne:
        calls = []

        def run(self, requests):
            AddOne.calls.append(len(requests))
            return [RequestError("negative") if (r.inputs["A"] < 0).any()
                    else {"B": r.inputs["A"] + 1} for r in requests]

    TritonPythonModel = triton_model(lambda context: AddOne())
"""


def test_an_ensemble_runs_its_steps_in_data_order_and_a_failed_step_ends_only_its_request(
        tmp_path):
    for name in ("first", "second"):
        config = model_config(name, backend="python", inputs={"A": ("INT32", [1])},
                              outputs={"B": ("INT32", [1])})
        write_model(tmp_path, name, config, ADD_ONE)
    # the config lists the second step first: the runtime follows the tensors
    write_model(tmp_path, "pipe", ensemble_config(
        "pipe", inputs={"IN": ("INT32", [1])}, outputs={"OUT": ("INT32", [1])}, steps=[
            ensemble_step("second", {"A": "middle"}, {"B": "OUT"}),
            ensemble_step("first", {"A": "IN"}, {"B": "middle"})]))
    local = LocalRepository(tmp_path)
    good, bad = local.run("pipe", [Request({"IN": np.array([[1]], np.int32)}),
                                   Request({"IN": np.array([[-5]], np.int32)})])
    assert good["OUT"].tolist() == [[3]]
    assert isinstance(bad, RequestError) and str(bad) == "negative"
    assert local.infer("first", {"A": np.array([[1]], np.int32)}, ["B"])["B"].tolist() == [[2]]


def test_serving_code_loads_neither_the_grpc_client_nor_the_tooling():
    """Every Python model of the shipped repository initialized as its stub would be
    (model.py imported, the step built), in a fresh interpreter."""
    script = textwrap.dedent(f"""
        import os, sys
        sys.path[:0] = [{str(ROOT / "tests")!r}]
        os.environ["KYC_TOKEN_KEY"] = "A" * 43 + "="
        import pytest
        import fake_triton
        from pathlib import Path
        repository = Path({str(SHIPPED_REPOSITORY)!r})
        mp = pytest.MonkeyPatch()
        fake_triton.install(mp)
        import tempfile
        import kyc.decision.ledger, kyc.intake.admission as admission
        shm = Path(tempfile.mkdtemp())  # the ledger and the admission state: not /dev/shm
        mp.setattr(kyc.decision.ledger, "SHM_DIR", shm)
        mp.setattr(admission, "SHM_DIR", shm)
        for name in ("face_preprocess", "kyc_intake", "ocr_preprocess", "ocr_postprocess",
                     "kyc_decision", "liveness_sequence"):
            fake_triton.served(repository, name)
        bad = ("grpc", "tritonclient.grpc", "tritonclient.http", "matplotlib", "kyc_tools",
               "kyc_export", "watchdog", "prometheus_client")
        # model_config_pb2 alone is loaded, under its name (kyc.pipeline.modelconfig)
        loaded = set(sys.modules) - {{"tritonclient.grpc.model_config_pb2"}}
        print(sorted(m for m in loaded if m in bad or m.startswith(tuple(b + "." for b in bad))))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
