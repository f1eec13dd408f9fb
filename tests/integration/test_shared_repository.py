"""The Kubernetes repository strategy on one machine: a repository seeded once onto a
"shared volume" (`kyc repo seed`, as the init containers do), two replicas polling
it as deploy/ runs them (watch mode with --watch-polling: NFS raises no inotify event
for another machine's writes), and ONE `kyc repo publish`, then one hand copy written
slowly onto the volume, then a broken one, reaching both while they serve, with no
failed request."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kyc_testing import build_publish_repository, start_server, write_echo_version
from live_publish import kyc_publish, publish_loads, republish, rsync_like_copy, wait_refused

pytestmark = pytest.mark.integration


@pytest.fixture
def image_repository(tmp_path):
    """What the image carries in /models: face_embedding (ONNX) and a Python model."""
    return build_publish_repository(tmp_path / "image" / "models")


def seed(src, dest) -> str:
    command = [sys.executable, "-m", "kyc_tools.cli", "repo", "seed", str(src), str(dest)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_one_publish_reaches_every_replica_of_the_shared_volume_without_a_failed_request(
        image_repository, tmp_path):
    volume = tmp_path / "volume" / "models"
    assert seed(image_repository, volume).startswith("seeded")
    assert "left as it is" in seed(image_repository, volume)  # the second pod's init
    replicas = [start_server(volume, tmp_path / f"replica-{n}.log", poll_secs=1,
                             watch_polling=True) for n in range(2)]
    loads = [load for r in replicas for load in publish_loads(r.options.grpc_url)]
    for load in loads:
        load.start()
    try:
        for load in loads:
            load.wait_for(lambda ld: sum(ld.versions.values()) >= 5, 60, "first answers")
        published = republish(volume, "face_embedding")
        assert published.returncode == 0 and published.stdout.strip() == "2", published.stderr
        published = kyc_publish(volume, "echo", write_echo_version(tmp_path / "v2", scale=3.0))
        assert published.returncode == 0 and published.stdout.strip() == "2", published.stderr
        for load in loads:
            load.wait_for(lambda ld: ld.last_version == "2", 90, "version 2 on every replica")
        for load in loads[1::2]:
            load.wait_for(lambda ld: ld.last_output is not None
                          and ld.last_output.tolist() == [[3.0, 6.0]], 30, "echo v2 answers")
        # a hand copy written slowly onto the volume: each replica waits for the end
        onnx = volume / "face_embedding" / "1" / "model.onnx"
        (volume / "face_embedding" / "3").mkdir()
        rsync_like_copy(onnx, volume / "face_embedding" / "3" / "model.onnx", 3.0)
        for load in loads[0::2]:
            load.wait_for(lambda ld: ld.last_version == "3", 90, "a hand copy on every replica")
        # a broken one: refused by every replica, version 3 serving on
        (volume / "face_embedding" / "4").mkdir()
        (volume / "face_embedding" / "4" / "model.onnx").write_bytes(onnx.read_bytes()[:1000])
        for replica in replicas:
            assert "not a valid ONNX" in wait_refused(replica, "face_embedding", 4)["reason"]
    finally:
        for load in loads:
            load.stop.set()
        for load in loads:
            load.join(timeout=60)
        for replica in replicas:
            replica.stop()
    print({f"replica-{i // 2} {load.model}": dict(load.versions) for i, load in enumerate(loads)})
    assert [load.failures for load in loads] == [[], [], [], []]
    assert all(load.versions["1"] > 0 and load.versions["2"] > 0 for load in loads)
    assert all(load.versions["3"] > 0 and "4" not in load.versions for load in loads[0::2])
