"""kyc_tools.dev.bench.perf_analyzer: the --input-data it writes and the CSV it reads.

perf_analyzer itself runs against a real server in tests/integration/test_bench_cli.py
and test_perf_analyzer.py.
"""

from __future__ import annotations

import base64
import json
import struct

import numpy as np

from kyc_tools.dev.bench import perf_analyzer

CSV = ("Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,"
       "Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,"
       "p50 latency,p90 latency,p95 latency,p99 latency\n"
       "4,78.2331,12,1285,9995,67,38406,488,2,49834,55083,57078,68552\n")


def test_a_bytes_tensor_is_written_serialized_with_each_elements_length():
    entry = perf_analyzer.tensor_entry(np.array([b"jpeg", b""], dtype=np.object_))
    raw = base64.b64decode(entry["b64"])
    assert raw == struct.pack("<I", 4) + b"jpeg" + struct.pack("<I", 0)
    assert entry["shape"] == [2]


def test_a_numeric_tensor_is_written_as_its_raw_bytes_without_the_batch_dimension(tmp_path):
    face = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(1, 2, 3, 3)
    path = perf_analyzer.write_input_data(tmp_path / "in.json", [{"FACE": face}, {"FACE": face}])
    data = json.loads(path.read_text())["data"]
    assert len(data) == 2 and data[0]["FACE"]["shape"] == [2, 3, 3]
    assert base64.b64decode(data[0]["FACE"]["b64"]) == face[0].tobytes()


def test_its_csv_gives_throughput_percentiles_in_ms_and_the_server_stages(tmp_path):
    path = tmp_path / "out.csv"
    path.write_text(CSV)
    (level,) = perf_analyzer.read_csv(path)
    assert (level.concurrency, level.per_s) == (4, 78.2331)
    assert level.latency_ms == {"p50": 49.8, "p90": 55.1, "p95": 57.1, "p99": 68.6}
    assert level.server_us["queue"] == 9995 and level.server_us["compute_infer"] == 38406
    assert level.figures()["errors"] == 0


def test_one_level_is_count_windows_of_whole_requests_at_one_concurrency(tmp_path,
                                                                         monkeypatch):
    monkeypatch.setattr(perf_analyzer, "executable", lambda: "/x/perf_analyzer")
    argv = perf_analyzer.command("kyc_ensemble", "127.0.0.1:8001", 2, tmp_path / "in.json",
                                 tmp_path / "out.csv", requests_per_window=4)
    assert argv[:3] == ["/x/perf_analyzer", "-m", "kyc_ensemble"]
    joined = " ".join(argv)
    assert "--concurrency-range 2:2" in joined and "-i grpc" in joined
    assert "--measurement-mode count_windows --measurement-request-count 4" in joined
