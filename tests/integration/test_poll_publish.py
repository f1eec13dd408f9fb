"""Publishing new versions into a live poll-mode server while clients keep calling it."""

from __future__ import annotations

import time

import pytest

from kyc_testing import build_publish_repository, start_server, write_echo_version
from live_publish import kyc_publish, publish_loads, republish, states

pytestmark = pytest.mark.integration


@pytest.fixture
def live_repository(tmp_path):
    """face_embedding (real weights, ONNX) and a Python model, served in poll mode."""
    repo = build_publish_repository(tmp_path / "repo")
    server = start_server(repo, tmp_path / "server.log", poll_secs=1)
    yield repo, server
    server.stop()


def publish_a_new_onnx_and_a_new_python_version(repo, embedding_load, echo_load, tmp_path):
    """Both published under load and answering: face_embedding 2 (the same weights) and
    echo 2 (x3 instead of x1)."""
    # A new ONNX version: the same weights, published as version 2.
    published = republish(repo, "face_embedding")
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


def publish_a_broken_version_refused_and_forced(repo, server, embedding_load, tmp_path):
    """A broken face_embedding 3: refused by the check, and forced in, refused by the
    watcher while version 2 keeps serving."""
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


def test_publishing_under_load_serves_new_versions_and_never_a_broken_one(
    live_repository, tmp_path
):
    repo, server = live_repository
    embedding_load, echo_load = publish_loads(server.options.grpc_url)
    for load in (embedding_load, echo_load):
        load.start()
    try:
        for load in (embedding_load, echo_load):
            load.wait_for(lambda ld: sum(ld.versions.values()) >= 10, 60, "first answers")
        publish_a_new_onnx_and_a_new_python_version(repo, embedding_load, echo_load, tmp_path)
        publish_a_broken_version_refused_and_forced(repo, server, embedding_load, tmp_path)
    finally:
        for load in (embedding_load, echo_load):
            load.stop.set()
            load.join(timeout=30)
    assert embedding_load.failures == []
    assert echo_load.failures == []
    assert "3" not in embedding_load.versions
    assert server.poll() is None
