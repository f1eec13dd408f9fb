"""A user's 512-d ArcFace replaces the 128-d SFace in a live poll-mode server."""

from __future__ import annotations

import threading
import time
from collections import Counter

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from kyc_export import arcface
from kyc_testing import SHIPPED_REPOSITORY, copy_tree, require_weights, start_server
from kyc_tools.repo.check import check_repository

pytestmark = pytest.mark.integration


class Calls(threading.Thread):
    """Calls face_embedding back to back; records (version, embedding size) and failures."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.seen: Counter[tuple[str, int]] = Counter()
        self.failures: list[str] = []

    def run(self) -> None:
        faces = np.random.default_rng(0).integers(0, 255, (2, 112, 112, 3), np.uint8)
        face = grpcclient.InferInput("FACE", list(faces.shape), "UINT8")
        face.set_data_from_numpy(faces)
        client = grpcclient.InferenceServerClient(self.url)
        try:
            while not self.stop.is_set():
                try:
                    result = client.infer("face_embedding", [face], client_timeout=30)
                except Exception as exc:  # every failure is a test failure
                    self.failures.append(str(exc))
                    continue
                embedding = result.as_numpy("EMBEDDING")
                norms = np.linalg.norm(embedding, axis=1)
                if not np.allclose(norms, 1.0, atol=1e-4):
                    self.failures.append(f"norms {norms}")
                self.seen[(result.get_response().model_version, embedding.shape[1])] += 1
        finally:
            client.close()

    def wait_for(self, key: tuple[str, int], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.seen[key] < 3:
            assert time.monotonic() < deadline, f"no answers from {key}; seen {self.seen}"
            time.sleep(0.1)


def test_publishing_a_512_d_arcface_moves_traffic_over_without_a_failed_request(tmp_path):
    require_weights()
    repo = tmp_path / "repo"
    repo.mkdir()
    copy_tree(SHIPPED_REPOSITORY / "face_embedding", repo / "face_embedding")
    exported = arcface.export_arcface(arcface.random_backbone("r18", seed=0), "r18")
    server = start_server(repo, tmp_path / "server.log", poll_secs=1)
    calls = Calls(server.options.grpc_url)
    calls.start()
    try:
        calls.wait_for(("1", 128), 60)

        published = arcface.publish_arcface(repo, exported.model, match_threshold=0.3)

        assert published.version == 2
        calls.wait_for(("2", 512), 60)
        before = sum(calls.seen.values())
        time.sleep(2)  # two more poll cycles: the old version stays unloaded
        assert sum(calls.seen.values()) > before
    finally:
        calls.stop.set()
        calls.join(timeout=30)
        server.stop()
    assert calls.failures == []
    assert set(calls.seen) == {("1", 128), ("2", 512)}
    assert check_repository(repo) == []
