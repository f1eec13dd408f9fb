"""Hot updates of the real repository while customers keep coming and liveness
sessions are open: `kyc repo publish` of an ONNX model, a Python model and a broken
version, into a poll-mode server serving kyc_ensemble."""

from __future__ import annotations

import json
import shutil
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from PIL import Image

from kyc_client.liveness import LivenessReply, bytes_input
from kyc_testing import (
    SHIPPED_REPOSITORY,
    Person,
    ensemble_inputs,
    liveness_step,
    play_moves,
    shipped_server,
)
from kyc_tools.assets.fetch import fetch_test_photos
from kyc_tools.dev.synthetic.document import Degradation, random_identity, render_document
from kyc_tools.operator.procs import stub_files
from live_publish import Load, kyc_publish, republish, states

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    root = tmp_path_factory.mktemp("hot")
    with shipped_server(root, poll_secs=1) as (repo, server):
        yield repo, server, root


@pytest.fixture(scope="module")
def person():
    photos = fetch_test_photos()
    return photos, np.asarray(Image.open(photos["person_a_2"]).convert("RGB"))


def wait_state(server, model: str, version: str, state: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while states(server, model).get(version) != state:
        assert time.monotonic() < deadline, (model, states(server, model))
        time.sleep(0.3)


def stubs(server) -> int:
    from kyc_tools.dev.bench.stats import process_memory

    return process_memory(server.process.pid)["stub_processes"]


def wait_stubs(server, expected: int, timeout: float = 120) -> int:
    deadline = time.monotonic() + timeout
    while stubs(server) != expected and time.monotonic() < deadline:
        time.sleep(0.5)
    return stubs(server)


def stub_versions(server) -> list[str]:
    """<model>/<version>/model.py of each live stub: which version a stub left behind
    serves (CI once had one face_preprocess stub too many)."""
    return sorted("/".join(path.parts[-3:]) for path in stub_files(server.process.pid))


def test_publishing_onnx_python_and_broken_versions_under_kyc_load_fails_no_request(
    live, person, tmp_path
):
    repo, server, _ = live
    photos, _ = person
    rng = np.random.default_rng(3)
    portrait = np.asarray(Image.open(photos["person_a_1"]).convert("RGB"))
    document = render_document(random_identity(rng), "td3", portrait, Degradation(), rng)
    selfie = photos["person_a_2"].read_bytes()
    url = server.options.grpc_url
    kyc = Load(url, "kyc_ensemble", ensemble_inputs(document.jpeg_bytes(), selfie), "REPORT")
    face = Load(url, "face_preprocess", [bytes_input("IMAGE", selfie)], "FACE_FOUND")
    before = stubs(server)
    for load in (kyc, face):
        load.start()
    try:
        for load in (kyc, face):
            load.wait_for(lambda ld: sum(ld.versions.values()) >= 2, 120, "first answers")
        # ONNX: face_embedding, the same weights as version 2
        published = republish(repo, "face_embedding")
        assert published.returncode == 0 and published.stdout.strip() == "2", published.stderr
        wait_state(server, "face_embedding", "2", "READY")
        # Python: face_preprocess's model.py as version 2
        src = tmp_path / "face_preprocess_v2"
        shutil.copytree(SHIPPED_REPOSITORY / "face_preprocess" / "1", src,
                        ignore=shutil.ignore_patterns("__pycache__"))
        published = kyc_publish(repo, "face_preprocess", src)
        assert published.returncode == 0 and published.stdout.strip() == "2", published.stderr
        face.wait_for(lambda ld: ld.last_version == "2", 120, "face_preprocess version 2")
        # broken: a model.py that fails in initialize, forced in; version 2 keeps serving
        broken = tmp_path / "broken"
        broken.mkdir()
        (broken / "model.py").write_text(
            "class TritonPythonModel:\n    def initialize(self, args):\n"
            "        raise RuntimeError('broken on purpose')\n")
        forced = kyc_publish(repo, "face_preprocess", broken, "--force")
        assert forced.returncode == 0 and forced.stdout.strip() == "3", forced.stderr
        wait_state(server, "face_preprocess", "3", "UNAVAILABLE")
        served = face.versions["2"], sum(kyc.versions.values())
        time.sleep(4)  # several poll cycles with the broken version in place
        assert face.versions["2"] > served[0] and sum(kyc.versions.values()) > served[1]
        assert face.last_version == "2"
    finally:
        for load in (kyc, face):
            load.stop.set()
            load.join(timeout=60)
    sent = {"kyc_ensemble": sum(kyc.versions.values()),
            "face_preprocess": sum(face.versions.values())}
    print(f"\nhot update: answered {sent}, failed kyc {len(kyc.failures)} "
          f"face {len(face.failures)}")
    assert kyc.failures == [] and face.failures == []
    assert json.loads(kyc.last_output[0, 0])["decision"] in ("review", "reject", "approve")
    assert "3" not in face.versions
    # the old versions' stubs are gone: as many stubs as before the updates
    assert wait_stubs(server, before) == before, stub_versions(server)


@pytest.mark.parametrize("model", ["face_embedding", "liveness_sequence"])
def test_open_liveness_sessions_end_live_across_a_publish(live, model):
    """Sessions of a person really turning as asked all end live when a new version is
    published mid-session, liveness_sequence's own included: each session stays on the
    version its START was answered by (the SDK names it in every frame), which kyc
    serve keeps loaded until its sessions end, while new sessions start on the new one."""
    repo, server, _ = live
    client = grpcclient.InferenceServerClient(server.options.grpc_url)
    person_a = Person(server.options.grpc_url)
    sessions, pinned = {}, {}
    for k in range(3):
        sid = f"hot-{model}-{k}"
        reply = liveness_step(client, sid, b"", start=True)
        assert isinstance(reply, LivenessReply), reply
        pinned[sid] = reply.model_version
        perform = person_a.performer()
        for frame in perform(None) + perform(reply.status["challenge"]["next"]):  # move 1
            reply = liveness_step(client, sid, frame, model_version=pinned[sid])
            assert isinstance(reply, LivenessReply), reply
        progress = reply.status["progress"]
        assert progress["moves_done"] == 1, progress
        sessions[sid] = (perform, progress["next"])
    current = max(int(v) for v, s in states(server, model).items() if s == "READY")
    published = republish(repo, model)
    assert published.returncode == 0, published.stderr
    wait_state(server, model, str(current + 1), "READY")
    if model == "liveness_sequence":  # the old version still serves its sessions
        assert states(server, model)[str(current)] == "READY"
        newer = liveness_step(client, f"hot-{model}-new", b"", start=True)
        assert isinstance(newer, LivenessReply) and newer.model_version == str(current + 1)
        liveness_step(client, f"hot-{model}-new", b"", end=True, model_version=str(current + 1))
    outcomes = {}
    for sid, (perform, move) in sessions.items():  # the other moves, each as told

        def send(frame: bytes, end: bool, sid=sid):
            return liveness_step(client, sid, frame, end=end, model_version=pinned[sid])

        outcomes[sid] = play_moves(send, perform, move, done=1)[-1]
    client.close()
    print(f"\n{model} published mid-session:",
          {sid: (o.message()[:120] if isinstance(o, Exception) else
                 ("live" if o.is_live else f"not live {o.status.get('reasons')}"))
           for sid, o in outcomes.items()})
    for outcome in outcomes.values():
        assert isinstance(outcome, LivenessReply), outcome
        assert outcome.is_live, outcome.status.get("reasons")
    # once its sessions are over, the old version is unloaded
    wait_state(server, model, str(current), "UNAVAILABLE")


def test_a_token_spent_before_kyc_decision_is_republished_stays_spent(live):
    """The ledger of spent tokens outlives a reload of kyc_decision (kyc.decision.ledger:
    a folder of the server's in /dev/shm), and the verdict names the version that served
    it, not the newest on disk."""
    from kyc_customers import document, token_of, verify

    repo, server, _ = live
    photos = fetch_test_photos()
    client = grpcclient.InferenceServerClient(server.options.grpc_url)
    selfie = photos["person_a_2"].read_bytes()
    try:
        token = token_of(server, client, photos, "person_a_2", application="app-7")
        first = verify(client, document(photos, 11), selfie, token, application="app-7")
        assert first["reasons"] == ["liveness_without_passive_pad"], first
        current = first["models"]["kyc_decision"]
        published = republish(repo, "kyc_decision")
        assert published.returncode == 0, published.stderr
        wait_state(server, "kyc_decision", str(current + 1), "READY")
        wait_state(server, "kyc_decision", str(current), "UNAVAILABLE")
        again = verify(client, document(photos, 12), selfie, token, application="app-7")
    finally:
        client.close()
    assert again["decision"] == "reject" and again["reasons"] == ["liveness_token_reused"], again
    assert again["models"]["kyc_decision"] == current + 1
