"""The local `onnxruntime` backend: gather -> one run -> scatter, errors per request."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto

import fake_triton
from fake_triton import FakeTensor
from kyc.onnx_runtime.backend import OnnxBatchRunner, RequestError, make_session
from kyc.onnx_runtime.settings import OnnxModelSettings

CONFIG = {
    "name": "m",
    "max_batch_size": 8,
    "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [-1]}],
    "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [-1]}],
}


class CountingSession:
    """Wraps an onnxruntime session and records each run's batch shapes."""

    def __init__(self, session):
        self.session = session
        self.calls: list[dict[str, tuple]] = []

    def get_inputs(self):
        return self.session.get_inputs()

    def run(self, names, feeds):
        self.calls.append({k: v.shape for k, v in feeds.items()})
        return self.session.run(names, feeds)


@pytest.fixture
def runner(tmp_path, onnx_factory):
    onnx_factory(tmp_path / "1" / "model.onnx", shape=("batch", "width"))
    settings = OnnxModelSettings.from_config(CONFIG, tmp_path, "1")
    return OnnxBatchRunner(settings, CountingSession(make_session(settings)))


def test_requests_of_one_shape_are_served_by_a_single_run(runner):
    requests = [{"X": np.full((n, 3), n, dtype=np.float32)} for n in (1, 2, 3)]
    results = runner.run(requests)
    assert runner.session.calls == [{"X": (6, 3)}]
    for request, result in zip(requests, results, strict=True):
        np.testing.assert_array_equal(result["Y"], request["X"] * 2)


def test_requests_of_different_shapes_run_once_per_shape_and_keep_their_order(runner):
    requests = [
        {"X": np.ones((1, 3), np.float32)},
        {"X": np.ones((1, 5), np.float32) * 2},
        {"X": np.ones((2, 3), np.float32) * 3},
    ]
    results = runner.run(requests)
    assert sorted(c["X"] for c in runner.session.calls) == [(1, 5), (3, 3)]
    assert [r["Y"].shape for r in results] == [(1, 3), (1, 5), (2, 3)]
    np.testing.assert_array_equal(results[2]["Y"], np.full((2, 3), 6, np.float32))


def test_a_request_with_the_wrong_dtype_gets_its_own_error_and_the_rest_are_answered(runner):
    results = runner.run([
        {"X": np.ones((1, 3), np.float64)},
        {"X": np.ones((1, 3), np.float32)},
    ])
    assert isinstance(results[0], RequestError)
    assert "float64" in str(results[0])
    np.testing.assert_array_equal(results[1]["Y"], np.full((1, 3), 2, np.float32))


def test_a_missing_input_is_reported_per_request(runner):
    results = runner.run([{}, {"X": np.ones((1, 2), np.float32)}])
    assert str(results[0]) == "missing input 'X'"
    assert results[1]["Y"].shape == (1, 2)


def test_a_failing_run_fails_only_its_own_group(runner):
    class FailsOnWidth5(CountingSession):
        def run(self, names, feeds):
            if feeds["X"].shape[1] == 5:
                raise RuntimeError("boom")
            return super().run(names, feeds)

    runner.session = FailsOnWidth5(runner.session.session)
    results = runner.run([{"X": np.ones((1, 5), np.float32)}, {"X": np.ones((1, 3), np.float32)}])
    assert isinstance(results[0], RuntimeError)
    assert str(results[0]).startswith("onnxruntime failed on X [1, 5]: ")
    assert "boom" not in str(results[0])  # the runtime's own text stays in the server log
    assert results[1]["Y"].shape == (1, 3)


def test_settings_read_thread_counts_from_config_parameters(tmp_path):
    config = dict(CONFIG, parameters={"intra_op_thread_count": {"string_value": "3"}})
    settings = OnnxModelSettings.from_config(config, tmp_path, "4")
    assert settings.intra_op_threads == 3
    assert settings.model_file == tmp_path / "4" / "model.onnx"


def test_memory_parameters_use_the_real_backends_names_and_reach_the_session(tmp_path):
    params = {"enable_mem_pattern": {"string_value": "0"},
              "memory.enable_memory_arena_shrinkage": {"string_value": "cpu:0"}}
    settings = OnnxModelSettings.from_config(dict(CONFIG, parameters=params), tmp_path, "1")
    assert (settings.enable_mem_arena, settings.enable_mem_pattern) == (True, False)
    assert settings.arena_shrinkage == "cpu:0"
    defaults = OnnxModelSettings.from_config(CONFIG, tmp_path, "1")
    assert (defaults.enable_mem_arena, defaults.enable_mem_pattern, defaults.arena_shrinkage) \
        == (True, True, "")
    with pytest.raises(ValueError, match="0/1"):
        OnnxModelSettings.from_config(
            dict(CONFIG, parameters={"enable_mem_arena": {"string_value": "maybe"}}), tmp_path, "1")


def test_a_session_with_arena_shrinkage_runs_with_those_run_options(tmp_path, onnx_factory):
    onnx_factory(tmp_path / "1" / "model.onnx", shape=("batch", "width"))
    params = {"memory.enable_memory_arena_shrinkage": {"string_value": "cpu:0"}}
    settings = OnnxModelSettings.from_config(dict(CONFIG, parameters=params), tmp_path, "1")
    session = make_session(settings)
    assert session.run_options.get_run_config_entry(
        "memory.enable_memory_arena_shrinkage") == "cpu:0"
    results = OnnxBatchRunner(settings, session).run([{"X": np.ones((2, 3), np.float32)}])
    assert results[0]["Y"].shape == (2, 3)
    assert make_session(OnnxModelSettings.from_config(CONFIG, tmp_path, "1")).run_options is None


def test_only_runs_larger_than_the_threshold_shrink_the_arena(tmp_path, onnx_factory):
    onnx_factory(tmp_path / "1" / "model.onnx", shape=("batch", "width"))
    params = {"memory.enable_memory_arena_shrinkage": {"string_value": "cpu:0"},
              "arena_shrink_above_batch": {"string_value": "2"}}
    settings = OnnxModelSettings.from_config(dict(CONFIG, parameters=params), tmp_path, "1")
    assert settings.arena_shrink_above_batch == 2
    session = make_session(settings)
    real, seen = session.session, []

    class Recording:
        def run(self, names, feeds, options):
            seen.append(options)
            return real.run(names, feeds, options)

    session.session = Recording()
    for batch in (1, 2, 3):
        session.run(["Y"], {"X": np.ones((batch, 3), np.float32)})
    assert seen[:2] == [None, None] and seen[2] is session.run_options
    with pytest.raises(ValueError, match="arena_shrink_above_batch must be 0 or more"):
        OnnxModelSettings.from_config(
            dict(CONFIG, parameters={"arena_shrink_above_batch": {"string_value": "-1"}}),
            tmp_path, "1")


def test_a_batch_larger_than_max_run_batch_runs_in_slices_and_answers_as_one(
        tmp_path, onnx_factory):
    onnx_factory(tmp_path / "1" / "model.onnx", shape=("batch", "width"))
    params = {"max_run_batch": {"string_value": "3"}}
    settings = OnnxModelSettings.from_config(dict(CONFIG, parameters=params), tmp_path, "1")
    session = make_session(settings)
    real, seen = session.session, []

    class Recording:
        def run(self, names, feeds, options):
            seen.append(feeds["X"].shape[0])
            return real.run(names, feeds, options)

    session.session = Recording()
    x = np.arange(7 * 2, dtype=np.float32).reshape(7, 2)
    (whole,) = session.run(["Y"], {"X": x})
    assert seen == [3, 3, 1]
    np.testing.assert_array_equal(whole, real.run(["Y"], {"X": x})[0])
    session.run(["Y"], {"X": x[:3]})
    assert seen[3:] == [3]
    with pytest.raises(ValueError, match="max_run_batch must be 0 or more"):
        OnnxModelSettings.from_config(
            dict(CONFIG, parameters={"max_run_batch": {"string_value": "-2"}}), tmp_path, "1")


def test_settings_honour_default_model_filename(tmp_path):
    settings = OnnxModelSettings.from_config(
        dict(CONFIG, default_model_filename="net.onnx"), tmp_path, "1"
    )
    assert settings.model_file.name == "net.onnx"


def test_unbatched_models_run_each_request_as_it_is(tmp_path, onnx_factory):
    onnx_factory(tmp_path / "1" / "model.onnx", shape=(2,))
    config = dict(CONFIG, max_batch_size=0)
    config["input"] = [{"name": "X", "data_type": "TYPE_FP32", "dims": [2]}]
    settings = OnnxModelSettings.from_config(config, tmp_path, "1")
    runner = OnnxBatchRunner(settings, make_session(settings))
    results = runner.run([{"X": np.array([1, 2], np.float32)}, {"X": np.array([3, 4], np.float32)}])
    np.testing.assert_array_equal(results[1]["Y"], [6, 8])


# -- the TritonPythonModel glue with a stand-in for triton_python_backend_utils ----------
@pytest.fixture
def fake_pb_utils(monkeypatch):
    return fake_triton.install(monkeypatch)


def test_triton_model_answers_each_request_with_outputs_or_an_invalid_arg_error(
    tmp_path: Path, onnx_factory, fake_pb_utils
):
    from kyc.onnx_runtime.backend import OnnxStep
    from kyc.pipeline.triton import triton_model

    served_model = triton_model(OnnxStep.from_context)
    onnx_factory(tmp_path / "1" / "model.onnx", shape=("batch", "width"))
    model = served_model()
    model.initialize({
        "model_config": json.dumps(CONFIG),
        "model_repository": str(tmp_path),
        "model_version": "1",
        "model_name": "m",
    })
    good = {"X": FakeTensor("X", np.ones((2, 4), np.float32))}
    bad = {"X": FakeTensor("X", np.ones((2, 4), np.int32))}
    responses = model.execute([good, bad, good])
    assert len(responses) == 3
    assert responses[0].error() is None
    (tensor,) = responses[0].output_tensors
    assert tensor.name == "Y"
    np.testing.assert_array_equal(tensor.as_numpy(), np.full((2, 4), 2, np.float32))
    assert responses[1].error().code == "INVALID_ARG"
    assert "int32" in responses[1].error().message()
    assert responses[2].error() is None


def test_string_inputs_are_decoded_for_onnx_and_bad_utf8_is_refused(tmp_path, onnx_factory):
    onnx_factory(tmp_path / "1" / "model.onnx", elem_type=TensorProto.STRING, shape=("batch",),
                 op="Identity")
    config = {
        "max_batch_size": 4,
        "input": [{"name": "X", "data_type": "TYPE_STRING", "dims": []}],
        "output": [{"name": "Y", "data_type": "TYPE_STRING", "dims": []}],
    }
    settings = OnnxModelSettings.from_config(config, tmp_path, "1")
    runner = OnnxBatchRunner(settings, make_session(settings))
    results = runner.run([
        {"X": np.array([b"abc"], dtype=object)},
        {"X": np.array([b"\xff\xfe"], dtype=object)},
    ])
    assert results[0]["Y"].tolist() == ["abc"]
    assert str(results[1]) == "input 'X' is not valid UTF-8"
