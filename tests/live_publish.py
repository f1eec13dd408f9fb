"""Publishing into a live server while clients keep calling it: the load that records
every answer, `kyc repo publish`, copies written as people and rsync write them, and
the watcher's refusals."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

from kyc_testing import SHIPPED_REPOSITORY

CHUNK = 1 << 20


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


def republish(repo: Path, model: str) -> subprocess.CompletedProcess:
    """`kyc repo publish` of ``model``'s shipped version 1 into ``repo``: the same files
    as a new version."""
    return kyc_publish(repo, model, SHIPPED_REPOSITORY / model / "1")


def load_inputs() -> tuple[grpcclient.InferInput, grpcclient.InferInput]:
    """A face for face_embedding and a pair of values for echo."""
    face = grpcclient.InferInput("FACE", [1, 112, 112, 3], "UINT8")
    face.set_data_from_numpy(np.random.default_rng(0).integers(0, 255, (1, 112, 112, 3), np.uint8))
    values = grpcclient.InferInput("IN", [1, 2], "FP32")
    values.set_data_from_numpy(np.array([[1.0, 2.0]], np.float32))
    return face, values


def publish_loads(url: str) -> tuple[Load, Load]:
    """Loads on the two models of a publish repository
    (kyc_testing.build_publish_repository): face_embedding's and echo's (not started)."""
    face, values = load_inputs()
    return Load(url, "face_embedding", [face], "EMBEDDING"), Load(url, "echo", [values], "OUT")


def states(server, model: str) -> dict[str, str]:
    return {m.get("version", ""): m.get("state", "") for m in server.index()
            if m["name"] == model}


def slow_copy(src: Path, dest: Path, seconds: float) -> None:
    """Write ``dest`` from ``src`` in chunks over about ``seconds`` (a slow network copy)."""
    data = src.read_bytes()
    chunks = max(1, len(data) // CHUNK)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest, "wb") as out:
        for k in range(0, len(data), CHUNK):
            out.write(data[k:k + CHUNK])
            out.flush()
            time.sleep(seconds / chunks)


def rsync_like_copy(src: Path, dest: Path, seconds: float) -> None:
    """What rsync does: the file is written as ``.<name>.<6 random characters>`` in the
    destination folder, then renamed to its name, with the source's mtime."""
    temp = dest.parent / f".{dest.name}.Xy12Ab"
    slow_copy(src, temp, seconds)
    shutil.copystat(src, temp)
    temp.rename(dest)


def refusals(server, model: str) -> list[dict]:
    return server.watcher.status()["models"].get(model, {}).get("refused", [])


def wait_refused(server, model: str, version: int, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        found = [r for r in refusals(server, model) if r["version"] == version]
        if found:
            return found[0]
        assert time.monotonic() < deadline, server.watcher.status()["models"][model]
        time.sleep(0.2)
