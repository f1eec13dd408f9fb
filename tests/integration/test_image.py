"""The production image, for real: kyc-triton:cpu (the repository's Dockerfile built by
`make image-cpu` on the CPU stand-in base) run in a real Docker engine as users run it,
`docker run --network host --shm-size=2g -e KYC_ADMIN_KEY=... -e KYC_TOKEN_KEY=...
-e KYC_CLIENT_KEY=... kyc-triton:cpu [kyc serve options]`, on free loopback ports; the
clients here send the client key as the operator's would (KYC_CLIENT_KEY).

`make test` builds the image first and sets KYC_IMAGE_TESTS=required, so that a missing
image or engine fails here; a plain `pytest` without them skips this module.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from kyc_client.channel import CLIENT_KEY_ENV, CLIENT_KEY_HEADER
from kyc_customers import document, token_of, verify
from kyc_testing import SHIPPED_REPOSITORY, ensemble_inputs, searchable
from kyc_tools.assets.fetch import fetch_test_photos
from kyc_tools.cli import main
from kyc_tools.dev.synthetic.document import random_identity
from kyc_tools.operator.server import ServerOptions, free_port, is_ready, repository_index
from live_publish import load_inputs

pytestmark = pytest.mark.integration

IMAGE = os.environ.get("KYC_TEST_IMAGE", "kyc-triton:cpu")
STOP_GRACE_S = 30  # docker stop -t: past it Docker kills (exit code 137)
# README's production run and deploy/kubernetes: read-only, no capabilities, uid 1000
HARDENED = ("--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL",
            "--security-opt", "no-new-privileges", "--user", "1000:1000")
# The containers' client key (production refuses to start without one); the SDK, kyc
# verify and kyc web of these tests read it from KYC_CLIENT_KEY, as an operator's do.
CLIENT_KEY = secrets.token_hex(24)


@pytest.fixture(scope="module", autouse=True)
def client_key_here():
    with mock.patch.dict(os.environ, {CLIENT_KEY_ENV: CLIENT_KEY}):
        yield CLIENT_KEY


class KeyedClient:
    """A gRPC client of a container that sends the client key with every inference call,
    as the operator's backend does; the rest as tritonclient's."""

    def __init__(self, url: str) -> None:
        self.raw = grpcclient.InferenceServerClient(url)

    def infer(self, *args, **kwargs):
        return self.raw.infer(*args, headers={CLIENT_KEY_HEADER: CLIENT_KEY}, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.raw, name)


def docker(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout,
                          check=check)


def require_image() -> None:
    required = os.environ.get("KYC_IMAGE_TESTS") == "required"
    problem = None
    if shutil.which("docker") is None:
        problem = "no docker client"
    elif docker("info", check=False, timeout=30).returncode != 0:
        problem = "no Docker engine answers (scripts/docker-engine.sh start)"
    elif docker("image", "inspect", IMAGE, check=False).returncode != 0:
        problem = f"no image {IMAGE}: run `make image-cpu`"
    if problem:
        (pytest.fail if required else pytest.skip)(problem)


def token_key() -> str:
    """A liveness token key as production wants it: base64 of 32 random bytes."""
    return base64.b64encode(secrets.token_bytes(32)).decode()


def http(url: str, method: str = "GET", key: str | None = None) -> int:
    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None,
                                     headers={"admin-key": key} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


@contextlib.contextmanager
def running(*docker_options: str) -> Iterator[SimpleNamespace]:
    """A container of the image on free loopback ports, with the keys production needs,
    as the README runs it (plus ``docker_options``); removed on exit."""
    options = ServerOptions.on_free_ports(Path("/models"))
    admin_key = secrets.token_urlsafe(24)
    status_port = free_port()
    name = f"kyc-test-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    docker("run", "-d", "--name", name, "--network", "host", "--shm-size=2g",
           "-e", f"KYC_ADMIN_KEY={admin_key}", "-e", f"KYC_TOKEN_KEY={token_key()}",
           "-e", f"KYC_CLIENT_KEY={CLIENT_KEY}", *docker_options,
           IMAGE, "--http-port", str(options.http_port), "--grpc-port", str(options.grpc_port),
           "--metrics-port", str(options.metrics_port), "--host", options.address,
           "--status-port", str(status_port))
    try:
        deadline = started + 180
        while not is_ready(options.http_url, timeout=1):
            state = json.loads(docker("inspect", "--format", "{{json .State}}", name).stdout)
            if not state["Running"] or time.monotonic() > deadline:
                logs = docker("logs", "--tail", "40", name, check=False)
                pytest.fail(f"the container did not become ready ({state['Status']}):\n"
                            f"{logs.stdout}{logs.stderr}")
            time.sleep(0.5)
        print(f"\n{IMAGE} {' '.join(docker_options)}: ready "
              f"{time.monotonic() - started:.1f} s after docker run")
        grpc = KeyedClient(options.grpc_url)
        yield SimpleNamespace(name=name, options=options, admin_key=admin_key, client=grpc,
                              status_port=status_port, sent={"text": [], "images": []})
        grpc.close()
    finally:
        docker("rm", "-f", name, check=False)


@pytest.fixture(scope="module")
def container():
    require_image()
    with running() as one:
        yield one


@pytest.fixture(scope="module")
def photos():
    return fetch_test_photos()


def sent_document(container, photos, seed: int, **kinds) -> bytes:
    """test_kyc_ensemble's document; its identity's personal data is remembered."""
    identity = random_identity(np.random.default_rng(seed), expired=kinds.get("expired", False))
    container.sent["text"] += searchable(identity.surname, identity.given_names,
                                         identity.document_number)
    doc = document(photos, seed, **kinds)
    container.sent["images"].append(doc)
    return doc


def test_every_model_of_the_repository_is_ready(container):
    index = repository_index(container.options.http_url, container.admin_key)
    expected = sorted(p.parent.name for p in SHIPPED_REPOSITORY.glob("*/config.pbtxt"))
    assert sorted(m["name"] for m in index) == expected
    assert {m["name"]: m["state"] for m in index} == dict.fromkeys(expected, "READY")


def test_the_server_and_its_python_stubs_run_as_uid_1000_not_root(container):
    top = docker("top", container.name, "-o", "pid,uid,comm").stdout.splitlines()[1:]
    processes = [line.split(None, 2)[1:] for line in top if line.strip()]
    assert {"tritonserver", "triton_python_b"} <= {comm.strip() for _, comm in processes}
    assert {uid for uid, _ in processes} == {"1000"}, processes


def test_the_model_repository_api_refuses_a_request_without_the_admin_key(container):
    base = f"http://{container.options.http_url}"
    assert http(f"{base}/v2/repository/index", "POST") == 403
    assert http(f"{base}/v2/repository/index", "POST", key="wrong-" + container.admin_key) == 403
    assert http(f"{base}/v2/repository/index", "POST", key=container.admin_key) == 200
    assert http(f"{base}/v2/health/ready") == 200  # health stays open


def test_inference_answers_only_calls_carrying_the_client_key(container, photos):
    inputs = ensemble_inputs(sent_document(container, photos, 7),
                             photos["person_a_2"].read_bytes())
    with pytest.raises(Exception) as refused:
        container.client.raw.infer("kyc_ensemble", inputs)
    assert "UNAVAILABLE" in str(refused.value.status())
    assert "expecting header 'triton-grpc-protocol-kyc-client-key'" in refused.value.message()
    assert verify(container.client, sent_document(container, photos, 8),
                  photos["person_a_2"].read_bytes())["decision"] == "review"


def test_kyc_ensemble_reviews_and_rejects_as_on_the_local_server(
    container, photos, server, client
):
    selfie, impostor = photos["person_a_2"].read_bytes(), photos["impostor_2"].read_bytes()
    container.sent["images"] += [selfie, impostor]
    token = token_of(container, container.client, photos, "person_a_2")
    container.sent["text"].append(token.decode()[5:45])
    doc = sent_document(container, photos, 1)

    live = verify(container.client, doc, selfie, token)
    reviewed = verify(container.client, doc, selfie)
    rejected = verify(container.client, sent_document(container, photos, 2), impostor)

    # every check passed; no passive anti-spoofing model is shipped: a person reviews
    assert live["decision"] == "review", live
    assert live["reasons"] == ["liveness_without_passive_pad"], live
    assert reviewed["decision"] == "review" and reviewed["reasons"] == ["liveness_missing"]
    assert rejected["decision"] == "reject" and "face_mismatch" in rejected["reasons"]
    local = verify(client, doc, selfie)  # the session's `kyc serve` on the host
    assert local["decision"] == reviewed["decision"] and local["reasons"] == reviewed["reasons"]
    for name, score in local["_scores"].items():
        assert reviewed["_scores"][name] == pytest.approx(score, abs=1e-4), name


def test_a_bad_image_gets_its_own_clean_error_and_the_container_stays_healthy(
    container, photos
):
    doc = sent_document(container, photos, 3)
    selfie = photos["person_a_2"].read_bytes()
    inputs = ensemble_inputs(doc[: len(doc) // 2], selfie)

    with pytest.raises(Exception) as refused:
        container.client.infer("kyc_ensemble", inputs)

    assert "INVALID_ARGUMENT" in str(refused.value.status())
    assert "DOCUMENT_IMAGE: the JPEG image cannot be decoded" in refused.value.message()
    assert verify(container.client, doc, selfie)["decision"] == "review"
    assert is_ready(container.options.http_url)


def test_kyc_verify_on_the_host_reaches_a_decision_against_the_container(
    container, tmp_path, capsys
):
    assert main(["samples", "--out", str(tmp_path)]) == 0
    capsys.readouterr()

    code = main(["verify", "--url", container.options.grpc_url,
                 "--document", str(tmp_path / "document.jpg"),
                 "--selfie", str(tmp_path / "selfie.jpg"),
                 "--demo-frames-from", str(tmp_path / "selfie.jpg")])

    report = json.loads(capsys.readouterr().out)
    assert code == 3 and report["reasons"] == ["liveness_without_passive_pad"], report
    container.sent["images"] += [(tmp_path / n).read_bytes() for n in ("document.jpg",
                                                                        "selfie.jpg")]


def test_the_images_healthcheck_reports_healthy(container):
    """The image's own HEALTHCHECK (every 15 s), on the port given after the image name."""
    deadline = time.monotonic() + 90
    while True:
        health = json.loads(docker("inspect", "--format", "{{json .State.Health}}",
                                   container.name).stdout)
        if health["Status"] != "starting" or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert health["Status"] == "healthy", health["Log"][-3:]
    assert health["Log"][-1]["ExitCode"] == 0


def test_a_version_dropped_into_models_is_served_and_a_broken_one_refused(container):
    """The literal workflow inside the image: copy a version folder into /models by hand
    (here as root inside the container; a mounted volume in production)."""
    def status() -> str:
        return docker("exec", container.name, "kyc", "repo", "status", "--url",
                      f"127.0.0.1:{container.status_port}").stdout

    docker("exec", "-u", "0", container.name, "sh", "-c",
           "mkdir /models/face_preprocess/5 && echo copying > /models/face_preprocess/5/notes.txt"
           " && cp -r /models/face_embedding/1 /models/face_embedding/2")
    deadline = time.monotonic() + 90
    while "face_embedding: serving 2" not in status():
        assert time.monotonic() < deadline, status()
        time.sleep(1)
    printed = status()
    assert "REFUSED  face_preprocess version 5" in printed and "no model.py" in printed
    face = container.client.infer("face_embedding", [load_inputs()[0]])
    assert face.get_response().model_version == "2"
    assert is_ready(container.options.http_url)


def test_docker_stop_answers_the_request_in_flight_and_exits_0_within_the_grace(
    container, photos
):
    doc, selfie = sent_document(container, photos, 4), photos["person_a_2"].read_bytes()
    answer: dict = {}

    def in_flight():
        try:
            answer["report"] = verify(container.client, doc, selfie)
        except Exception as exc:  # reported by the assertion below
            answer["error"] = exc

    request = threading.Thread(target=in_flight)
    request.start()
    time.sleep(0.3)  # sent: kyc_ensemble takes about a second here
    docker("stop", "-t", str(STOP_GRACE_S), container.name, timeout=STOP_GRACE_S + 30)
    request.join(timeout=60)

    state = json.loads(docker("inspect", "--format", "{{json .State}}", container.name).stdout)
    assert state["ExitCode"] == 0, state  # 137 would mean killed after the grace period
    assert answer.get("report", {}).get("decision") == "review", (
        answer, answer.get("error") and answer["error"].message())
    assert "kyc serve: stopped" in docker("logs", container.name).stderr


def test_no_personal_data_in_docker_logs(container):
    result = docker("logs", container.name)
    raw = (result.stdout + result.stderr).encode()
    text = raw.decode(errors="replace")
    assert "kyc_ensemble" in text and "kyc serve: stopped" in text  # the whole life is there
    for secret in container.sent["text"]:
        assert secret not in text, f"{secret[:4]}... appears in docker logs"
    for magic in (b"\xff\xd8\xff", b"\x89PNG", b"/9j/", b"iVBORw0KGgo"):
        assert magic not in raw
    for image in container.sent["images"]:
        assert image[200:224].hex().encode() not in raw
    assert container.admin_key not in text and CLIENT_KEY not in text


@pytest.fixture(scope="module")
def strict():
    """The image as deploy/kubernetes runs it: read-only root file system with /tmp an
    emptyDir, every capability dropped, no privilege escalation; /models is then read-only
    too. Its own container: `container` is stopped by the docker stop test."""
    require_image()
    with running(*HARDENED) as one:
        yield one


def test_it_serves_read_only_without_capabilities_as_the_kubernetes_pods_run_it(strict, photos):
    doc = document(photos, 5)
    report = verify(strict.client, doc, photos["person_a_2"].read_bytes())
    assert report["decision"] == "review" and report["reasons"] == ["liveness_missing"]


@pytest.mark.parametrize("missing", ["KYC_ADMIN_KEY", CLIENT_KEY_ENV])
def test_without_kyc_admin_key_or_kyc_client_key_the_image_exits_at_once_naming_it(missing):
    require_image()
    keys = {"KYC_ADMIN_KEY": secrets.token_urlsafe(24), CLIENT_KEY_ENV: CLIENT_KEY}
    given = [arg for name, value in keys.items() if name != missing
             for arg in ("-e", f"{name}={value}")]
    result = docker("run", "--rm", "--network", "none", "-e", f"KYC_TOKEN_KEY={token_key()}",
                    *given, IMAGE, check=False, timeout=60)

    assert result.returncode != 0
    assert f"set {missing}" in result.stderr
    assert "READY" not in result.stdout + result.stderr


def test_the_image_serves_the_capture_page_read_only_as_deploy_web_runs_it(strict, photos):
    """deploy/kubernetes/components/web: the same image, `kyc web` as its command, read
    only, no capabilities; the page and its verify endpoint reach the container's Triton."""
    port = free_port()
    name = f"kyc-web-{uuid.uuid4().hex[:8]}"
    docker("run", "-d", "--name", name, "--network", "host", "--read-only", "--tmpfs", "/tmp",
           "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--entrypoint", "kyc",
           "-e", f"KYC_CLIENT_KEY={CLIENT_KEY}",
           IMAGE, "web", "--url", strict.options.grpc_url, "--port", str(port))
    try:
        page = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 60
        while True:
            try:
                if http(page + "healthz") == 200:
                    break
            except OSError:  # not listening yet
                pass
            assert time.monotonic() < deadline, docker("logs", name, check=False).stderr
            time.sleep(0.3)
        with urllib.request.urlopen(page, timeout=10) as response:
            assert b'data-kyc-state="camera"' in response.read()
            assert response.headers["content-security-policy"].startswith("default-src")
        body = json.dumps({"document": base64.b64encode(document(photos, 6)).decode(),
                           "selfie": base64.b64encode(
                               photos["person_a_2"].read_bytes()).decode()}).encode()
        request = urllib.request.Request(page + "api/verify", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:
            answer = json.loads(response.read())
        assert answer["decision"] == "review"
        assert [r["code"] for r in answer["reasons"]] == ["liveness_not_confirmed"]
        assert set(answer) == {"decision", "text", "reasons"}  # no score, no report
    finally:
        docker("rm", "-f", name, check=False)
