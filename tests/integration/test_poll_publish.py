"""Publishing new versions into a live poll-mode server while clients keep calling it."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from kyc_testing import (
    SHIPPED_REPOSITORY,
    build_publish_repository,
    start_server,
    write_echo_version,
)

pytestmark = pytest.mark.integration


class Load(threading.Thread):
    """Sends requests back to back and records every outcome."""

    def __init__(self, url: str, model: str, inputs: list[grpcclient.InferInput], output: str):
        super().__init__(daemon=True)
        self.url, self.model, self.inputs, self.output = url, model, inputs, output
        self.stop = threading.Event()
        self.versions: Counter[str] = Counter()
        self.failures: list[str] = []
        self.last_output: np.ndarray | None = None
        self.last_version = ""

    def run(self) -> None:
        client = grpcclient.InferenceServerClient(self.url)
        try:
            while not self.stop.is_set():
                try:
                    result = client.infer(self.model, self.inputs, client_timeout=30)
                except Exception as exc:  # every failure is a test failure
                    self.failures.append(str(exc))
                    continue
                self.last_version = result.get_response().model_version
                self.last_output = result.as_numpy(self.output)
                self.versions[self.last_version] += 1
        finally:
            client.close()

    def wait_for(self, condition, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition(self):
                return
            time.sleep(0.1)
        raise AssertionError(f"{self.model}: timed out waiting for {what}; seen {self.versions}")


def kyc_publish(repo: Path, model: str, src: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kyc_tools.cli", "repo", "publish", model, str(src),
         "--repository", str(repo), *extra],
        capture_output=True, text=True, timeout=120,
    )


def load_inputs() -> tuple[grpcclient.InferInput, grpcclient.InferInput]:
    """A face for face_embedding and a pair of values for echo."""
    face = grpcclient.InferInput("FACE", [1, 112, 112, 3], "UINT8")
    face.set_data_from_numpy(np.random.default_rng(0).integers(0, 255, (1, 112, 112, 3), np.uint8))
    values = grpcclient.InferInput("IN", [1, 2], "FP32")
    values.set_data_from_numpy(np.array([[1.0, 2.0]], np.float32))
    return face, values


def states(server, model: str) -> dict[str, str]:
    return {m.get("version", ""): m.get("state", "") for m in server.index()
            if m["name"] == model}


@pytest.fixture
def live_repository(tmp_path):
    """face_embedding (real weights, ONNX) and a Python model, served in poll mode."""
    repo = build_publish_repository(tmp_path / "repo")
    server = start_server(repo, tmp_path / "server.log", poll_secs=1)
    yield repo, server
    server.stop()


def test_publishing_under_load_serves_new_versions_and_never_a_broken_one(
    live_repository, tmp_path
):
    repo, server = live_repository
    face, values = load_inputs()
    embedding_load = Load(server.options.grpc_url, "face_embedding", [face], "EMBEDDING")
    echo_load = Load(server.options.grpc_url, "echo", [values], "OUT")
    for load in (embedding_load, echo_load):
        load.start()
    try:
        for load in (embedding_load, echo_load):
            load.wait_for(lambda ld: sum(ld.versions.values()) >= 10, 60, "first answers")

        # A new ONNX version: the same weights, published as version 2.
        published = kyc_publish(repo, "face_embedding", SHIPPED_REPOSITORY / "face_embedding" / "1")
        assert published.returncode == 0, published.stderr
        assert published.stdout.strip() == "2"
        embedding_load.wait_for(lambda ld: ld.last_version == "2", 60, "version 2")

        # A new Python version that answers differently (x3 instead of x1).
        src = write_echo_version(tmp_path / "echo_v2", scale=3.0)
        published = kyc_publish(repo, "echo", src)
        assert published.returncode == 0, published.stderr
        echo_load.wait_for(
            lambda ld: ld.last_version == "2" and ld.last_output is not None
            and ld.last_output.tolist() == [[3.0, 6.0]],
            60, "echo version 2 answering x3",
        )
        assert (repo / "echo" / "2" / "__pycache__").is_dir()

        # A broken version is refused by the check: nothing reaches the server.
        broken = tmp_path / "broken"
        broken.mkdir()
        (broken / "model.onnx").write_bytes(b"\x08\x07 this is not an ONNX model")
        refused = kyc_publish(repo, "face_embedding", broken)
        assert refused.returncode == 1
        assert "face_embedding/3/model.onnx: not a valid ONNX model" in refused.stderr
        assert not (repo / "face_embedding" / "3").exists()

        # Forced in, kyc serve's watcher refuses it all the same (the same check):
        # Triton never sees it and version 2 keeps serving.
        forced = kyc_publish(repo, "face_embedding", broken, "--force")
        assert forced.returncode == 0 and forced.stdout.strip() == "3"
        deadline = time.monotonic() + 30
        while not server.watcher.status()["models"]["face_embedding"]["refused"]:
            assert time.monotonic() < deadline, server.watcher.status()["models"]
            time.sleep(0.5)
        refusal = server.watcher.status()["models"]["face_embedding"]["refused"][0]
        assert refusal["version"] == 3 and "not a valid ONNX model" in refusal["reason"]
        assert "3" not in states(server, "face_embedding")
        answered = embedding_load.versions["2"]
        time.sleep(3)  # several poll cycles with the broken version in place
        assert embedding_load.versions["2"] > answered
        assert embedding_load.last_version == "2"
    finally:
        for load in (embedding_load, echo_load):
            load.stop.set()
            load.join(timeout=30)
    assert embedding_load.failures == []
    assert echo_load.failures == []
    assert "3" not in embedding_load.versions
    assert server.poll() is None
