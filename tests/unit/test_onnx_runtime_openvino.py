"""The local backend's "openvino" CPU accelerator: the config names it, the openvino
package runs the ONNX file, answers as onnxruntime does; KYC_CPU_RUNTIME=onnxruntime
takes every model back to onnxruntime without touching a config."""

from __future__ import annotations

import numpy as np
import pytest

from kyc.onnx_runtime.backend import OnnxBatchRunner, make_session
from kyc.onnx_runtime.openvino import OpenVinoSession, compile_properties
from kyc.onnx_runtime.sessions import ConfiguredSession
from kyc.onnx_runtime.settings import OnnxModelSettings

CONFIG = {
    "name": "m",
    "max_batch_size": 8,
    "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [-1]}],
    "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [-1]}],
}


def accelerated(*accelerators: dict, **params) -> dict:
    return dict(CONFIG, parameters={k: {"string_value": v} for k, v in params.items()},
                optimization={"execution_accelerators": {
                    "gpu_execution_accelerator": [{"name": "tensorrt"}],
                    "cpu_execution_accelerator": list(accelerators)}})


OPENVINO = {"name": "openvino"}


def settings_of(config, tmp_path, env=None) -> OnnxModelSettings:
    return OnnxModelSettings.from_config(config, tmp_path, "1", env=env or {})


def test_a_config_naming_openvino_runs_on_openvino_and_answers_as_onnxruntime(
        tmp_path, onnx_factory):
    onnx_factory(tmp_path / "1" / "model.onnx", shape=("batch", "width"), op="Mul")
    session = make_session(settings_of(accelerated(OPENVINO), tmp_path))
    assert isinstance(session, OpenVinoSession) and session.precision == "f32"
    plain = make_session(settings_of(CONFIG, tmp_path))
    assert isinstance(plain, ConfiguredSession)
    x = np.linspace(-3, 3, 5 * 4, dtype=np.float32).reshape(5, 4)
    (ov_y,), (ort_y,) = session.run(["Y"], {"X": x}), plain.run(["Y"], {"X": x})
    np.testing.assert_allclose(ov_y, ort_y, rtol=1e-6)
    (every,) = session.run(None, {"X": x})  # no names: every output, as onnxruntime
    np.testing.assert_allclose(every, ort_y, rtol=1e-6)
    # the batch runner gathers and scatters over it as over onnxruntime
    runner = OnnxBatchRunner(settings_of(accelerated(OPENVINO), tmp_path), session)
    first, second = runner.run([{"X": x[:2]}, {"X": x[2:]}])
    np.testing.assert_allclose(np.concatenate([first["Y"], second["Y"]]), ort_y, rtol=1e-6)


def test_max_run_batch_slices_openvino_runs_too(tmp_path, onnx_factory):
    onnx_factory(tmp_path / "1" / "model.onnx", shape=("batch", "width"))
    session = make_session(settings_of(accelerated(OPENVINO, max_run_batch="2"), tmp_path))
    seen, run = [], session._run
    session._run = lambda names, feeds: seen.append(len(feeds["X"])) or run(names, feeds)
    (y,) = session.run(["Y"], {"X": np.ones((5, 3), np.float32)})
    assert seen == [2, 2, 1] and y.shape == (5, 3) and float(y.sum()) == 30.0


def test_kyc_cpu_runtime_onnxruntime_ignores_the_configs_accelerator(tmp_path, onnx_factory):
    onnx_factory(tmp_path / "1" / "model.onnx", shape=("batch", "width"))
    settings = settings_of(accelerated(OPENVINO), tmp_path, {"KYC_CPU_RUNTIME": "onnxruntime"})
    assert settings.cpu_accelerator == ""
    assert isinstance(make_session(settings), ConfiguredSession)
    with pytest.raises(ValueError, match="KYC_CPU_RUNTIME is 'tensorrt'"):
        settings_of(accelerated(OPENVINO), tmp_path, {"KYC_CPU_RUNTIME": "tensorrt"})


def test_an_unknown_accelerator_or_parameter_or_precision_is_refused_at_load(tmp_path):
    with pytest.raises(ValueError, match="unknown CPU execution accelerator 'dnnl'"):
        settings_of(accelerated({"name": "dnnl"}), tmp_path)
    for parameters, message in (({"device": "GPU"}, "unknown openvino accelerator"),
                                ({"precision_mode": "INT4"}, "one of FP32, BF16")):
        settings = settings_of(accelerated(dict(OPENVINO, parameters=parameters)), tmp_path)
        with pytest.raises(ValueError, match=message):
            compile_properties(settings, ["FP32", "INT8"])


def test_bf16_where_the_cpu_has_it_fp32_elsewhere_one_unpinned_stream_of_the_threads(
        tmp_path, caplog):
    config = accelerated(dict(OPENVINO, parameters={"precision_mode": "bf16"}),
                         intra_op_thread_count="3")
    properties = compile_properties(settings_of(config, tmp_path), ["FP32", "BF16", "INT8"])
    assert properties == {"INFERENCE_PRECISION_HINT": "bf16", "INFERENCE_NUM_THREADS": 3,
                          "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY",
                          "ENABLE_CPU_PINNING": False}
    fallback = compile_properties(settings_of(config, tmp_path), ["FP32", "INT8"])
    assert fallback["INFERENCE_PRECISION_HINT"] == "f32"
    assert "precision_mode BF16 asked, but this CPU offers FP32, INT8: FP32" in caplog.text
