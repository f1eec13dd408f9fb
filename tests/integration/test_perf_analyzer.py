"""NVIDIA's perf_analyzer 2.51.0 (make perf-analyzer) against the real server, from
real inputs: a BYTES image through face_preprocess, and whole customers through
kyc_ensemble (a rendered passport page, a selfie, no token)."""

from __future__ import annotations

import numpy as np
import pytest

from kyc_tools.dev.bench import perf_analyzer

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def installed():
    if not perf_analyzer.available():
        pytest.fail("perf_analyzer is not installed: make test installs it (make perf-analyzer)")
    return perf_analyzer.version()


def image(data: bytes) -> np.ndarray:
    return np.array([[data]], dtype=np.object_)


def test_it_is_the_servers_release(installed):
    assert installed == "2.51.0"


def test_it_measures_face_preprocess_from_real_photos(installed, server, tmp_path):
    from kyc_tools.dev.bench.models import face_photos

    inputs = perf_analyzer.write_input_data(tmp_path / "in.json",
                                            [{"IMAGE": image(p)} for p in face_photos()])
    level = perf_analyzer.measure("face_preprocess", server.options.grpc_url, 2, inputs,
                                  tmp_path / "out.csv", requests_per_window=6)
    assert level.concurrency == 2 and level.per_s > 0
    assert 0 < level.latency_ms["p50"] <= level.latency_ms["p99"]
    assert level.server_us["compute_infer"] > 0
    assert (tmp_path / "out.csv").read_text().startswith("Concurrency,Inferences/Second")


def test_it_measures_whole_customers_through_kyc_ensemble(installed, server, tmp_path):
    from kyc_tools.dev.bench.kyc import kyc_cases

    requests = [{"DOCUMENT_IMAGE": image(c.document), "SELFIE_IMAGE": image(c.selfie),
                 "LIVENESS_TOKEN": image(b"")} for c in kyc_cases(2)]
    inputs = perf_analyzer.write_input_data(tmp_path / "in.json", requests)
    level = perf_analyzer.measure("kyc_ensemble", server.options.grpc_url, 1, inputs,
                                  tmp_path / "out.csv", requests_per_window=2)
    assert level.per_s > 0 and level.latency_ms["p50"] > 0


def test_a_request_the_server_refuses_fails_the_run_with_its_words(installed, server,
                                                                  tmp_path):
    inputs = perf_analyzer.write_input_data(tmp_path / "in.json",
                                            [{"IMAGE": image(b"not an image")}])
    with pytest.raises(perf_analyzer.PerfAnalyzerError, match="exited"):
        perf_analyzer.measure("face_preprocess", server.options.grpc_url, 1, inputs,
                              tmp_path / "out.csv", requests_per_window=2)
