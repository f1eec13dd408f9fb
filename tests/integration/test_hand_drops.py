"""Shipping a model is dropping a numbered folder (issue 22), on a real `kyc serve`-style
server with its defaults (watch mode, 2 s quiet period, 2 s poll) while clients call
face_embedding and kyc_ensemble and liveness sessions of a person turning as asked run
one after another throughout: a slow copy, an rsync-style copy, every kind of broken
drop, a fix in place, a config edit, a new model, a rollback by deletion and a new
liveness_sequence with a session open. No request fails, every answer names the version
that gave it, and the server stays healthy."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from PIL import Image

from kyc_client.liveness import LivenessReply
from kyc_testing import (
    ECHO_CONFIG,
    Person,
    ensemble_inputs,
    liveness_step,
    play_moves,
    shipped_server,
    tiny_onnx,
    write_echo_version,
)
from kyc_tools.assets.fetch import fetch_test_photos
from kyc_tools.dev.bench.stats import process_memory
from kyc_tools.dev.synthetic.document import Degradation, random_identity, render_document
from kyc_tools.operator.server import TritonServer, is_ready
from live_publish import Load, load_inputs, rsync_like_copy, slow_copy, states, wait_refused

pytestmark = pytest.mark.integration


class SessionLoop(threading.Thread):
    """Liveness sessions one after another, frames paced like a camera's, each frame
    naming the version its START was answered by (as the SDK does)."""

    def __init__(self, url: str, person: Person, pace_s: float = 0.15) -> None:
        super().__init__(daemon=True)
        self.url, self.person, self.pace_s = url, person, pace_s
        self.stop = threading.Event()
        self.started: Counter[str] = Counter()
        self.live: Counter[str] = Counter()
        self.failures: list[str] = []
        self.open_version = ""  # the version of the session open now ("" between)

    def run(self) -> None:
        client = grpcclient.InferenceServerClient(self.url)
        n = 0
        try:
            while not self.stop.is_set():
                n += 1
                self._session(client, f"drops-{n}")
        finally:
            client.close()

    def _session(self, client, sid: str) -> None:
        start = liveness_step(client, sid, b"", start=True)
        if isinstance(start, Exception):
            self.failures.append(f"START: {start}")
            return
        version = start.model_version
        self.started[version] += 1
        self.open_version = version

        def send(frame: bytes, end: bool):
            time.sleep(self.pace_s)
            return liveness_step(client, sid, frame, end=end, model_version=version)

        replies = play_moves(send, self.person.performer(), start.status["challenge"]["next"])
        reply = replies[-1] if replies else start
        if isinstance(reply, Exception):
            self.failures.append(f"frame {len(replies) - 1} on version {version}: {reply}")
        self.open_version = ""
        if isinstance(reply, LivenessReply):
            if reply.is_live:
                self.live[version] += 1
            else:
                self.failures.append(f"not live on {version}: {reply.status.get('reasons')}")

    def wait_for(self, condition, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition(self):
            assert time.monotonic() < deadline, f"timed out waiting for {what}: {self.started}"
            time.sleep(0.1)


@pytest.fixture(scope="module")
def drops(tmp_path_factory):
    # the defaults of kyc serve
    with shipped_server(tmp_path_factory.mktemp("drops")) as (repo, server):
        yield repo, server


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@dataclasses.dataclass
class DropScene:
    """The server the folders are dropped into, its clients throughout, and how soon
    each drop was served."""

    repo: Path
    server: TritonServer
    client: grpcclient.InferenceServerClient
    embedding: Load
    kyc: Load
    sessions: SessionLoop
    served_after: dict[str, float] = dataclasses.field(default_factory=dict)
    memory: dict[str, dict] = dataclasses.field(default_factory=dict)

    @property
    def onnx(self) -> Path:
        return self.repo / "face_embedding" / "1" / "model.onnx"

    @property
    def loads(self) -> tuple[threading.Thread, ...]:
        return self.embedding, self.kyc, self.sessions


def clients_throughout(repo: Path, server: TritonServer) -> DropScene:
    """face_embedding and kyc_ensemble called back to back, liveness sessions one after
    another (not started yet)."""
    url = server.options.grpc_url
    photos = fetch_test_photos()
    rng = np.random.default_rng(22)
    portrait = np.asarray(Image.open(photos["person_a_1"]).convert("RGB"))
    document = render_document(random_identity(rng), "td3", portrait, Degradation(), rng)
    face, _ = load_inputs()
    kyc_inputs = ensemble_inputs(document.jpeg_bytes(), photos["person_a_2"].read_bytes())
    return DropScene(repo, server, grpcclient.InferenceServerClient(url),
                     Load(url, "face_embedding", [face], "EMBEDDING"),
                     Load(url, "kyc_ensemble", kyc_inputs, "REPORT"),
                     SessionLoop(url, Person(url)))


def drop_a_slow_copy_and_an_rsync_style_copy(scene: DropScene) -> None:
    repo, embedding = scene.repo, scene.embedding
    # 1. a slow copy of a large ONNX, written over about 4 s
    slow_copy(scene.onnx, repo / "face_embedding" / "2" / "model.onnx", 4.0)
    ended = time.monotonic()
    embedding.wait_for(lambda ld: ld.last_version == "2", 60, "version 2 (slow copy)")
    scene.served_after["slow copy"] = time.monotonic() - ended

    # 2. an rsync-style copy (temporary name, then renamed)
    (repo / "face_embedding" / "3").mkdir()
    rsync_like_copy(scene.onnx, repo / "face_embedding" / "3" / "model.onnx", 3.0)
    ended = time.monotonic()
    embedding.wait_for(lambda ld: ld.last_version == "3", 60, "version 3 (rsync-style)")
    scene.served_after["rsync-style copy"] = time.monotonic() - ended


def drop_broken_folders(scene: DropScene) -> None:
    repo, server = scene.repo, scene.server
    # 3. broken drops: each refused with its reason, the previous version serving
    truncated = repo / "face_embedding" / "4" / "model.onnx"
    truncated.parent.mkdir()
    truncated.write_bytes(scene.onnx.read_bytes()[:200_000])
    assert "not a valid ONNX model" in wait_refused(server, "face_embedding", 4)["reason"]
    tiny_onnx(repo / "face_embedding" / "5" / "model.onnx")  # tensors X, Y
    assert "FACE" in wait_refused(server, "face_embedding", 5)["reason"]
    (repo / "face_preprocess" / "2").mkdir()
    (repo / "face_preprocess" / "2" / "model.py").write_text(
        "import kyc_no_such_module  # fails at import\n")
    (repo / "face_preprocess" / "3").mkdir()
    (repo / "face_preprocess" / "3" / "model.py").write_text(
        "class TritonPythonModel:\n    def initialize(self, args):\n"
        "        raise RuntimeError('fails in initialize')\n")
    (repo / "face_preprocess" / "4").mkdir()  # a Python folder whose model.py never came
    (repo / "face_preprocess" / "4" / "README.txt").write_text("copy in progress\n")
    assert "kyc_no_such_module" in wait_refused(server, "face_preprocess", 2)["reason"]
    assert "fails in initialize" in wait_refused(server, "face_preprocess", 3)["reason"]
    assert "no model.py" in wait_refused(server, "face_preprocess", 4)["reason"]
    assert scene.embedding.last_version == "3"
    assert {v for v, s in states(server, "face_preprocess").items() if s == "READY"} == {"1"}


def fix_in_place_and_edit_a_config(scene: DropScene) -> None:
    repo, client = scene.repo, scene.client
    # 4. the truncated one fixed in place: taken without a restart
    shutil.copyfile(scene.onnx, repo / "face_embedding" / "4" / "model.onnx")
    ended = time.monotonic()
    scene.embedding.wait_for(lambda ld: ld.last_version == "4", 60,
                             "version 4 (fixed in place)")
    scene.served_after["fixed in place"] = time.monotonic() - ended

    # 5. a config edit (queue delay of the dynamic batcher)
    config = repo / "face_embedding" / "config.pbtxt"
    text = config.read_text()
    assert "max_queue_delay_microseconds: 2000" in text
    config.write_text(text.replace("max_queue_delay_microseconds: 2000",
                                   "max_queue_delay_microseconds: 2500"))
    wait_until(lambda: client.get_model_config("face_embedding", as_json=True)["config"]
               ["dynamic_batching"].get("max_queue_delay_microseconds") == "2500",
               60, "the edited config")


def add_a_model_and_roll_back_by_deletion(scene: DropScene) -> None:
    repo, server, embedding = scene.repo, scene.server, scene.embedding
    # 6. a whole new model
    (repo / "echo").mkdir()
    write_echo_version(repo / "echo" / "1", scale=2.0)
    (repo / "echo" / "config.pbtxt").write_text(ECHO_CONFIG)
    wait_until(lambda: states(server, "echo").get("1") == "READY", 60, "the new model")
    values = grpcclient.InferInput("IN", [1, 2], "FP32")
    values.set_data_from_numpy(np.array([[1.0, 2.0]], np.float32))
    assert scene.client.infer("echo", [values]).as_numpy("OUT").tolist() == [[2.0, 4.0]]

    # 7. rollback by deletion
    shutil.rmtree(repo / "face_embedding" / "4")
    deleted = time.monotonic()
    answered = embedding.versions["3"]
    embedding.wait_for(lambda ld: ld.last_version == "3" and ld.versions["3"] > answered,
                       60, "version 3 again")
    scene.served_after["rollback by deletion"] = time.monotonic() - deleted


def replace_liveness_sequence_with_a_session_open(scene: DropScene) -> None:
    repo, server, sessions = scene.repo, scene.server, scene.sessions
    # 8. a new liveness_sequence while a session is open on the old one
    sessions.wait_for(lambda s: s.open_version == "1", 60, "a session open on version 1")
    live_on_1 = sessions.live["1"]
    scene.memory["one liveness_sequence"] = process_memory(server.process.pid)
    shutil.copytree(repo / "liveness_sequence" / "1", repo / "liveness_sequence" / "2")
    sessions.wait_for(lambda s: s.started["2"] >= 1, 90, "a session on version 2")
    if states(server, "liveness_sequence").get("1") == "READY":
        scene.memory["two liveness_sequence"] = process_memory(server.process.pid)
    sessions.wait_for(lambda s: s.live["1"] > live_on_1, 90, "the open session to end")
    wait_until(lambda: states(server, "liveness_sequence").get("1") == "UNAVAILABLE", 90,
               "version 1 unloaded after its sessions")
    sessions.wait_for(lambda s: s.live["2"] >= 1, 90, "a session live on version 2")


def print_what_was_measured(scene: DropScene, repo_status: str) -> None:
    embedding, kyc, sessions = scene.embedding, scene.kyc, scene.sessions
    print("\nserved after the copy ended: "
          + ", ".join(f"{k} {v:.1f} s" for k, v in scene.served_after.items())
          + f"\nanswers: face_embedding {dict(embedding.versions)}, kyc_ensemble "
          f"{dict(kyc.versions)}, liveness sessions started {dict(sessions.started)} "
          f"live {dict(sessions.live)}"
          + "".join(f"\n{k}: server and stubs PSS {m['total_pss_mib']} MiB, {m['stub_processes']}"
                    " stubs, liveness_sequence stubs RSS " + str(round(sum(
                        s["rss_mib"] for s in m["stubs"]
                        if s["instance"].startswith("liveness_sequence")))) + " MiB"
                    for k, m in scene.memory.items())
          + f"\n{repo_status}")


def test_hand_dropped_folders_are_served_refused_or_rolled_back_without_a_failed_request(
    drops
):
    repo, server = drops
    scene = clients_throughout(repo, server)
    embedding, kyc, sessions = scene.embedding, scene.kyc, scene.sessions
    for load in scene.loads:
        load.start()
    try:
        embedding.wait_for(lambda ld: sum(ld.versions.values()) >= 5, 120, "first answers")
        kyc.wait_for(lambda ld: sum(ld.versions.values()) >= 1, 120, "first customer")
        drop_a_slow_copy_and_an_rsync_style_copy(scene)
        drop_broken_folders(scene)
        fix_in_place_and_edit_a_config(scene)
        add_a_model_and_roll_back_by_deletion(scene)
        replace_liveness_sequence_with_a_session_open(scene)
    finally:
        for load in scene.loads:
            load.stop.set()
        for load in scene.loads:
            load.join(timeout=120)
        scene.client.close()

    status = server.watcher.status()
    metrics = urllib.request.urlopen(
        f"http://127.0.0.1:{server.watcher.status_port}/metrics", timeout=5).read().decode()
    printed = subprocess.run([sys.executable, "-m", "kyc_tools.cli", "repo", "status", "--url",
                              f"127.0.0.1:{server.watcher.status_port}"],
                             capture_output=True, text=True, timeout=60)
    print_what_was_measured(scene, printed.stdout)
    assert embedding.failures == [] and kyc.failures == [] and sessions.failures == []
    assert {"1", "2", "3", "4"} <= set(embedding.versions) and "5" not in embedding.versions
    assert sessions.live["1"] >= 1 and sessions.live["2"] >= 1
    assert json.loads(kyc.last_output[0, 0])["decision"] in ("review", "reject", "approve")
    assert is_ready(server.options.http_url) and server.poll() is None
    # refusals: logged (the status holds the same lines), counted, printed
    assert 'kyc_repository_refusals_total{model="face_embedding",stage="check"} 2.0' in metrics
    assert 'kyc_repository_refusals_total{model="face_preprocess",stage="load"} 2.0' in metrics
    assert 'kyc_repository_versions_loaded_total{model="liveness_sequence"} 1.0' in metrics
    assert printed.returncode == 0, printed.stderr
    assert "REFUSED  face_embedding version 5" in printed.stdout
    assert "REFUSED  face_preprocess version 4" in printed.stdout
    assert [r["version"] for r in status["models"]["face_embedding"]["refused"]] == [5]
