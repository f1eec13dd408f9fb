"""NVIDIA's perf_analyzer as the load generator of ``kyc bench``'s stateless scenarios.

perf_analyzer 2.51.0 (the server's release, ``make perf-analyzer``) drives a model with
``--concurrency-range C:C`` closed-loop clients, from real inputs written in its
``--input-data`` JSON, and writes its own CSV (``-f``): throughput, the server's
queue and compute times, and client latency percentiles. This module writes the
inputs, runs it once per concurrency level and reads the CSV back; the bench keeps
its own loops only where perf_analyzer cannot do the job (scored answers, the
liveness challenge, the in-process limit: see kyc_tools.dev.bench.scenarios).

BYTES tensors in ``--input-data``: ``b64`` is the *serialized* tensor, a 4-byte
little-endian length before each element's bytes (plain base64 of a file is read as a
length and fails with "incomplete string data"); other types: base64 of the raw
array.
"""

from __future__ import annotations

import base64
import csv
import json
import os
import re
import shutil
import struct
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

NAME = "perf_analyzer"
PERCENTILES = (50, 90, 95, 99)


class PerfAnalyzerError(RuntimeError):
    """perf_analyzer is missing or failed; the message says what to do or what it said."""


def executable() -> str:
    """This environment's perf_analyzer (``make perf-analyzer``), else the PATH's."""
    beside = Path(sys.prefix) / "bin" / NAME
    found = str(beside) if beside.is_file() else shutil.which(NAME)
    if not found:
        raise PerfAnalyzerError(f"{NAME} is not installed: run `make perf-analyzer`")
    return found


def available() -> bool:
    """Whether perf_analyzer is installed here (else the bench's own clients load)."""
    try:
        executable()
    except PerfAnalyzerError:
        return False
    return True


def version() -> str:
    """``2.51.0``: what ``perf_analyzer --version`` says."""
    done = subprocess.run([executable(), "--version"], capture_output=True, text=True,
                          timeout=30)
    found = re.search(r"Version\s+([\w.]+)", done.stdout + done.stderr)
    if not found:
        raise PerfAnalyzerError(f"{NAME} --version said: {(done.stdout + done.stderr)[:200]}")
    return found.group(1)


def tensor_entry(array: np.ndarray) -> dict:
    """One tensor of one request in ``--input-data`` form; ``array`` without the batch
    dimension (bytes elements for BYTES)."""
    if array.dtype == np.object_:
        data = b"".join(struct.pack("<I", len(v)) + v for v in
                        (x if isinstance(x, bytes) else str(x).encode() for x in array.ravel()))
    else:
        data = np.ascontiguousarray(array).tobytes()
    return {"b64": base64.b64encode(data).decode(), "shape": list(array.shape)}


def write_input_data(path: Path, requests: Sequence[Mapping[str, np.ndarray]]) -> Path:
    """The requests' inputs (arrays WITH a batch dimension of 1, as a client sends
    them) as an ``--input-data`` file; perf_analyzer cycles through them."""
    steps = [{name: tensor_entry(array[0]) for name, array in request.items()}
             for request in requests]
    path.write_text(json.dumps({"data": steps}))
    return path


@dataclass(frozen=True)
class PerfLevel:
    """One concurrency level as perf_analyzer measured it (its CSV row)."""

    concurrency: int
    per_s: float
    latency_ms: dict[str, float]  # p50, p90, p95, p99 of the client's latencies
    server_us: dict[str, float]  # the entry model's queue and compute times per request

    def figures(self) -> dict:
        return {"concurrency": self.concurrency, "per_s": round(self.per_s, 3),
                "latency_ms": self.latency_ms, "errors": 0,
                "perf_analyzer_server_us": self.server_us}


def read_csv(path: Path) -> list[PerfLevel]:
    """perf_analyzer's ``-f`` CSV (times in microseconds) as PerfLevels."""
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    levels = []
    for row in rows:
        levels.append(PerfLevel(
            concurrency=int(row["Concurrency"]),
            per_s=float(row["Inferences/Second"]),
            latency_ms={f"p{p}": round(float(row[f"p{p} latency"]) / 1e3, 1)
                        for p in PERCENTILES},
            server_us={key: float(row[column]) for key, column in (
                ("queue", "Server Queue"), ("compute_input", "Server Compute Input"),
                ("compute_infer", "Server Compute Infer"),
                ("compute_output", "Server Compute Output"))}))
    return levels


TRIALS = 3  # windows per level, reported together
# What a level of a report measured, for its reader: WINDOWS_TEXT.format(requests_per_window).
WINDOWS_TEXT = (f"{TRIALS} count windows of at least {{}} answers (or one per client), each "
                "answer timed from its send to its answer by perf_analyzer's gRPC client")


def command(model: str, grpc_url: str, concurrency: int, input_data: Path, csv_file: Path,
            requests_per_window: int) -> list[str]:
    """One level: ``concurrency`` clients, windows of ``requests_per_window`` answers
    (count windows: a slow pipeline still gets whole requests), 3 of them, reported
    together: any 3 count as stable (a stability percentage of 100 still failed on
    kyc_ensemble's 1-s customers, 2 per window); the bench does not retry. The client
    key found here goes as gRPC metadata (``-H``: perf_analyzer 2.51 sends it on gRPC
    too, whatever its help says; it is on the command line, as it is on tritonserver's)."""
    from kyc_client.channel import as_channel

    headers = [arg for name, value in as_channel(grpc_url).headers
               for arg in ("-H", f"{name}:{value}")]
    return [executable(), "-m", model, "-u", grpc_url, "-i", "grpc", *headers,
            "--input-data", str(input_data), "--concurrency-range", f"{concurrency}:{concurrency}",
            "--measurement-mode", "count_windows",
            "--measurement-request-count", str(max(requests_per_window, concurrency)),
            "--max-trials", str(TRIALS), "--stability-percentage", "1000", "-f", str(csv_file)]


def measure(model: str, grpc_url: str, concurrency: int, input_data: Path, csv_file: Path,
            requests_per_window: int, timeout_s: float = 600.0) -> PerfLevel:
    """Run perf_analyzer for one level; its CSV stays at ``csv_file``."""
    argv = command(model, grpc_url, concurrency, input_data, csv_file, requests_per_window)
    env = dict(os.environ)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        raise PerfAnalyzerError(f"{NAME} on {model} at concurrency {concurrency}: no result "
                                f"in {timeout_s:.0f} s") from None
    if done.returncode != 0 or not csv_file.is_file():
        tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
        raise PerfAnalyzerError(f"{NAME} on {model} at concurrency {concurrency} exited "
                                f"{done.returncode}: {' | '.join(tail)}")
    (level,) = read_csv(csv_file)
    return level
