"""The passive anti-spoofing slot, wired end to end with a RANDOM MiniFASNetV2.

No trained anti-spoofing weights exist here: a seeded random network is published
with `kyc models antispoof publish` into a copy of the face models and
liveness_sequence, only to show that the slot is wired (the crop reaches the model,
its REAL probability reaches the verdict). Its scores mean nothing.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from kyc_testing import (
    PROJECT_ROOT,
    SHIPPED_REPOSITORY,
    Person,
    copy_tree,
    live_session,
    models_for,
    require_weights,
    start_server,
)
from kyc_tools.repo.config import model_parameters

pytestmark = pytest.mark.integration

# kyc_intake: the owner of the client image limits the face path reads
MODELS = models_for("liveness_sequence")


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    pytest.importorskip("torch")
    require_weights()
    root = tmp_path_factory.mktemp("antispoof") / "models"
    for model in MODELS:
        copy_tree(SHIPPED_REPOSITORY / model, root / model)
    result = subprocess.run(
        [sys.executable, "-m", "kyc_tools.cli", "models", "antispoof", "publish",
         "--random-init", "3",
         "--arch", "MiniFASNetV2", "--scale", "2.7", "--repository", str(root)],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "1" and "max|diff|" in result.stderr
    return root


def test_publishing_creates_the_model_and_switches_liveness_to_it(repository):
    assert (repository / "face_antispoof" / "1" / "model.onnx").is_file()
    parameters = model_parameters(repository, "liveness_sequence")
    assert parameters["antispoof_model"] == "face_antispoof"
    assert parameters["antispoof_scale"] == "2.7" and parameters["antispoof_size"] == "80"
    shipped = model_parameters(SHIPPED_REPOSITORY, "liveness_sequence")
    assert shipped["antispoof_model"] == ""  # the shipped repository is untouched


def test_a_session_reports_the_passive_pad_score_when_a_model_is_configured(repository):
    server = start_server(repository, repository.parent / "tritonserver.log")
    try:
        url = server.options.grpc_url
        replies = live_session(url, Person(url, "person_a_2"))
    finally:
        server.stop()
    for reply in replies:
        assert not isinstance(reply, Exception), reply
    start, end = replies[0], replies[-1]
    assert start.status["challenge"]["passive_pad"] == "configured"
    assert isinstance(end.status["checks"]["passive_pad"], bool)
    assert 0.0 <= end.status["figures"]["pad_score"] <= 1.0
    # the random network decides nothing real: the verdict follows its check either way
    assert end.is_live == end.status["checks"]["passive_pad"], end.status
    assert end.status["checks"]["relief"] is True
