"""Idle liveness sessions are evicted, and the count of held sessions goes back to zero;
past ``max_sessions`` a START is refused as UNAVAILABLE (a capacity condition).

A server of its own over a copy of the face models and liveness_sequence whose
config is shortened: one instance, Triton drops a sequence idle for 1.5 s, the
model evicts state idle for 2 s and holds at most 5 sessions.
"""

from __future__ import annotations

import re
import time
import uuid

import pytest
import tritonclient.grpc as grpcclient

from kyc_testing import (
    SHIPPED_REPOSITORY,
    copy_tree,
    liveness_step,
    models_for,
    require_weights,
    start_server,
)
from kyc_tools.dev.synthetic.liveness import encode
from kyc_tools.repo.config_edit import set_string_parameter

pytestmark = pytest.mark.integration

# kyc_intake: the owner of the client image limits the face path reads
MODELS = models_for("liveness_sequence")
MAX_SESSIONS = 5


@pytest.fixture(scope="module")
def short_lived(tmp_path_factory):
    require_weights()
    root = tmp_path_factory.mktemp("eviction") / "models"
    for model in MODELS:
        copy_tree(SHIPPED_REPOSITORY / model, root / model)
    config = root / "liveness_sequence" / "config.pbtxt"
    # One instance: the session counts and max_sessions are each instance's own.
    text = re.sub(r"instance_group \[ \{ count: \d+", "instance_group [ { count: 1",
                  config.read_text())
    text = set_string_parameter(text, "idle_ttl_s", "2")
    text = set_string_parameter(text, "max_sessions", str(MAX_SESSIONS))
    text = re.sub(r"max_sequence_idle_microseconds: \d+", "max_sequence_idle_microseconds: "
                  "1500000", text)
    config.unlink()
    config.write_text(text)
    server = start_server(root, root.parent / "tritonserver.log")
    client = grpcclient.InferenceServerClient(server.options.grpc_url)
    yield client
    client.close()
    server.stop()


def test_idle_sessions_are_evicted_and_the_held_count_returns_to_zero(short_lived):
    import numpy as np

    frame = encode(np.full((120, 160, 3), 128, np.uint8), 90)
    idle = [uuid.uuid4().hex for _ in range(3)]
    for sid in idle:
        assert liveness_step(short_lived, sid, start=True).status["state"] == "started"
        assert liveness_step(short_lived, sid, frame).status["frame"]["face_found"] is False
    fourth = liveness_step(short_lived, "fourth", start=True)
    assert fourth.status["sessions"]["live"] == 4
    time.sleep(3)
    fresh = liveness_step(short_lived, "fresh", start=True)
    assert fresh.status["sessions"] == {"live": 1, "evicted_idle": 4}
    late = liveness_step(short_lived, idle[0], frame)
    assert isinstance(late, Exception) and "START" in str(late)
    done = liveness_step(short_lived, "fresh", frame, end=True)
    assert done.status["state"] == "done" and done.status["sessions"]["live"] == 0
    assert not done.is_live and "challenge_not_completed" in done.status["reasons"]


def test_past_max_sessions_a_start_is_unavailable_and_the_others_go_on(short_lived):
    time.sleep(3)  # sessions of other tests evicted
    sids = [uuid.uuid4().hex for _ in range(MAX_SESSIONS)]
    for sid in sids:
        assert liveness_step(short_lived, sid, start=True).status["state"] == "started"
    refused = liveness_step(short_lived, uuid.uuid4().hex, start=True)
    assert isinstance(refused, grpcclient.InferenceServerException)
    assert "UNAVAILABLE" in str(refused.status()), refused
    assert f"{MAX_SESSIONS} liveness sessions are live" in refused.message()
    for sid in sids:  # the held sessions still answer, and end
        done = liveness_step(short_lived, sid, end=True)
        assert not isinstance(done, Exception) and done.status["state"] == "done"
    assert liveness_step(short_lived, uuid.uuid4().hex, start=True).status["state"] == "started"
