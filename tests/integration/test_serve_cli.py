"""`kyc serve` as a user runs it: ready banner, clean stop on signals, its own cleanup."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from kyc.keys import create_key_file
from kyc_client.channel import CLIENT_KEY_ENV, CLIENT_KEY_HEADER, as_channel
from kyc_testing import (
    KYC,
    SHIPPED_REPOSITORY,
    ServeProcess,
    build_tiny_repository,
    require_weights,
    write_echo_version,
)
from kyc_tools.cli import main
from kyc_tools.dev.synthetic.liveness import encode
from kyc_tools.operator.procs import children, is_running, stub_instance
from kyc_tools.operator.server import free_port, is_ready

pytestmark = pytest.mark.integration

@pytest.fixture
def repository(tmp_path):
    return build_tiny_repository(tmp_path / "repo")


@pytest.fixture
def serve(repository, tmp_path):
    """`kyc serve` on the tiny repository, ready; stopped (SIGTERM, then kill) afterwards."""
    process = ServeProcess(repository, tmp_path)
    try:
        process.wait_for_line("ready in")
        yield process
    finally:
        process.close()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_serve_prints_where_it_listens_and_stops_cleanly_on_a_signal(serve, signum):
    banner = "".join(serve.out) + "".join(
        serve.wait_for_line(k) for k in ("HTTP", "gRPC", "metrics", "models"))
    assert f"http://127.0.0.1:{serve.ports['http']}" in banner
    assert f"127.0.0.1:{serve.ports['grpc']}" in banner
    assert f"http://127.0.0.1:{serve.ports['metrics']}/metrics" in banner
    assert "double:1 READY" in banner and "echo:1 READY" in banner
    assert is_ready(serve.http_url)
    assert serve.shm_regions(), "the Python backend should hold shared memory while serving"
    serve.proc.send_signal(signum)
    assert serve.proc.wait(timeout=60) == 0
    assert "stopped" in serve.proc.stderr.read()
    assert serve.shm_regions() == []
    assert not is_ready(serve.http_url)


def test_serve_exits_with_an_error_and_cleans_up_when_the_server_is_killed(serve):
    os.kill(serve.server_pid(), signal.SIGKILL)
    assert serve.proc.wait(timeout=60) != 0
    assert "tritonserver stopped on its own" in serve.proc.stderr.read()
    assert serve.shm_regions() == []


def test_serve_stops_with_exit_code_3_when_a_python_stub_dies(serve):
    """Triton 2.51 neither restarts a dead stub nor stops reporting ready: kyc serve
    stops the whole server so that its supervisor restarts it."""
    (stub,) = [pid for pid in children(serve.server_pid()) if stub_instance(pid) == "echo_0"]
    os.kill(stub, signal.SIGKILL)
    assert serve.proc.wait(timeout=60) == 3
    assert "the Python stub of echo died" in serve.proc.stderr.read()
    assert serve.shm_regions() == []


def test_the_server_does_not_outlive_a_killed_kyc_serve(serve):
    server_pid = serve.server_pid()
    serve.proc.kill()
    serve.proc.wait(timeout=10)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and Path(f"/proc/{server_pid}").exists():
        time.sleep(0.2)
    assert not Path(f"/proc/{server_pid}").exists() or \
        "Z" in Path(f"/proc/{server_pid}/stat").read_text().split()[2]


@pytest.fixture
def serve_unwatched(repository, tmp_path):
    """`kyc serve --no-watch`: Triton polls the repository itself."""
    process = ServeProcess(repository, tmp_path, "--no-watch")
    try:
        process.wait_for_line("ready in")
        yield process
    finally:
        process.close()


def test_a_server_wedged_by_a_half_copied_version_does_not_outlive_a_killed_kyc_serve(
    serve_unwatched, repository
):
    """A Python version folder seen without its model.py wedges Triton 2.51's poller
    (with --no-watch it sees one), and the wedged server ignores SIGTERM (measured): the
    launcher's death must kill it."""
    serve = serve_unwatched
    server_pid = serve.server_pid()
    stubs = [pid for pid in children(server_pid) if stub_instance(pid) != "?"]
    assert stubs
    half = repository / "echo" / "2"
    half.mkdir()
    (half / "notes.txt").write_text("a copy in progress\n")
    time.sleep(5)  # two poll cycles: the poller is wedged on echo/2
    serve.proc.kill()
    serve.proc.wait(timeout=10)
    deadline = time.monotonic() + 15
    alive = [server_pid, *stubs]
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if is_running(pid)]
        time.sleep(0.2)
    for pid in alive:  # do not leave them to the next tests
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert alive == [], f"left running after kyc serve was killed: {alive}"



def test_serve_no_watch_refuses_to_start_on_a_repository_that_would_wedge_the_server(
    repository, tmp_path
):
    (repository / "echo" / "2").mkdir()  # a version folder without model.py
    result = subprocess.run([*KYC, "serve", "--no-watch", "--model-repository",
                             str(repository), "--http-port", str(free_port())],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "echo/2/model.py: missing" in result.stderr
    assert "not starting" in result.stderr


def test_serve_starts_on_the_sound_versions_and_says_what_it_refused(repository, tmp_path):
    """Watched (the default), a half-copied folder present at start is refused, the
    version before it serves, and `kyc repo status` names the refusal."""
    (repository / "echo" / "2").mkdir()  # a version folder without model.py
    process = ServeProcess(repository, tmp_path)
    try:
        process.wait_for_line("1 refused at start")
        # the refusal is printed before Triton has loaded version 1: wait for it
        deadline = time.monotonic() + 60
        while True:
            status = subprocess.run([*KYC, "repo", "status", "--url",
                                     f"127.0.0.1:{process.ports['status']}"],
                                    capture_output=True, text=True, timeout=60)
            assert status.returncode == 0, status.stderr
            if "echo: serving 1" in status.stdout or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert "echo: serving 1" in status.stdout
        assert "REFUSED  echo version 2" in status.stdout and "no model.py" in status.stdout
        write_echo_version(repository / "echo" / "2", scale=2.0)  # the copy completes
        deadline = time.monotonic() + 60
        while "echo: serving 2" not in subprocess.run(
                [*KYC, "repo", "status", "--url", f"127.0.0.1:{process.ports['status']}"],
                capture_output=True, text=True, timeout=60).stdout:
            assert time.monotonic() < deadline, "echo version 2 never served"
            time.sleep(0.5)
    finally:
        process.close()
    assert process.proc.returncode == 0


def test_serve_refuses_to_start_when_a_model_has_no_sound_version(repository, tmp_path):
    (repository / "echo" / "1" / "model.py").unlink()
    result = subprocess.run([*KYC, "serve", "--model-repository", str(repository),
                             "--http-port", str(free_port()), "--status-port", str(free_port())],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "echo: new model refused: no version folder passes the check" in result.stderr
    assert "cannot be served: not starting" in result.stderr


# -- production mode -------------------------------------------------------------------
ADMIN_KEY = "a-long-enough-admin-key-1234"
CLIENT_KEY = "a-client-key-of-24-chars"


@pytest.fixture
def keys(tmp_path):
    """The environment of a production server: an admin key, a token key file and a client
    key; no key file of this machine's (a folder of its own)."""
    token_file = create_key_file(tmp_path / "token.key")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KYC_")}
    return {**env, "KYC_ADMIN_KEY": ADMIN_KEY, "KYC_TOKEN_KEY_FILE": str(token_file),
            CLIENT_KEY_ENV: CLIENT_KEY, "XDG_CONFIG_HOME": str(tmp_path / "config")}


@pytest.mark.parametrize(("drop", "override", "message"), [
    ("KYC_ADMIN_KEY", {}, "no model-repository API key"),
    (None, {"KYC_ADMIN_KEY": "short"}, "shorter than 16 characters"),
    ("KYC_TOKEN_KEY_FILE", {}, "no liveness token key"),
    (CLIENT_KEY_ENV, {}, "no client key: set KYC_CLIENT_KEY"),
])
def test_production_refuses_to_start_without_each_key(repository, keys, drop, override, message):
    env = {k: v for k, v in {**keys, **override}.items() if k != drop}
    for how, extra_env in ((["--production"], {}), ([], {"KYC_PRODUCTION": "1"})):
        result = subprocess.run([*KYC, "serve", "--model-repository", str(repository),
                                 "--http-port", str(free_port()), *how],
                                capture_output=True, text=True, timeout=60,
                                env={**env, **extra_env})
        assert result.returncode == 1
        assert message in result.stderr
        assert "ready in" not in result.stdout


def _http(url: str, method: str = "GET", key: str | None = None, body: bytes = b"") -> int:
    headers = {"admin-key": key} if key else {}
    request = urllib.request.Request(url, data=body if method == "POST" else None,
                                     method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_production_locks_repository_and_shared_memory_apis_and_serves_inference(
    repository, tmp_path, keys
):
    process = ServeProcess(repository, tmp_path, "--production", env=keys)
    try:
        banner = process.wait_for_line("production:")
        assert "shared-memory" in banner and "model-repository" in banner
        base = f"http://{process.http_url}/v2"
        register = json.dumps({"key": "/kyc_probe", "offset": 0, "byte_size": 64}).encode()
        for method, path, body in (
            ("POST", "/repository/index", b"{}"),
            ("POST", "/repository/models/echo/unload", b"{}"),
            ("GET", "/systemsharedmemory/status", b""),
            ("POST", "/systemsharedmemory/region/probe/register", register),
            ("GET", "/logging", b""),
            ("GET", "/trace/setting", b""),
        ):
            assert _http(base + path, method, body=body) == 403, path
            assert _http(base + path, method, body=body, key="wrong-" + ADMIN_KEY) == 403, path
        assert _http(base + "/repository/index", "POST", key=ADMIN_KEY, body=b"{}") == 200
        assert _http(base + "/systemsharedmemory/status", key=ADMIN_KEY) == 200
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{process.ports['grpc']}")
        try:
            with pytest.raises(InferenceServerException, match="admin-key"):
                client.get_system_shared_memory_status()
            assert client.get_system_shared_memory_status(
                headers={"triton-grpc-protocol-admin-key": ADMIN_KEY}) \
                is not None
            assert _infer_pipe(client, headers={CLIENT_KEY_HEADER: CLIENT_KEY}) == [[2.0, 4.0]]
        finally:
            client.close()
        assert _http(base + "/health/ready") == 200
    finally:
        process.close()


def test_development_locks_shared_memory_trace_and_logging_with_a_key_file_only_its_owner_reads(
    repository, tmp_path
):
    env = {k: v for k, v in os.environ.items() if k != "KYC_ADMIN_KEY"}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    process = ServeProcess(repository, tmp_path, env=env)
    try:
        banner = process.wait_for_line("APIs need the admin key")
        key_file = tmp_path / "config" / "kyc" / "admin.key"
        assert "shared-memory,trace,logging" in banner and str(key_file) in banner
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        base = f"http://{process.http_url}/v2"
        for path in ("/systemsharedmemory/status", "/logging", "/trace/setting"):
            assert _http(base + path) == 403, path
        assert _http(base + "/systemsharedmemory/status", key=key_file.read_text().strip()) == 200
        assert _http(base + "/models/echo/ready") == 200  # tools that only infer: unchanged
    finally:
        process.close()


def _infer_pipe(client, **kwargs) -> list:
    values = grpcclient.InferInput("VALUES", [1, 2], "FP32")
    values.set_data_from_numpy(np.array([[1.0, 2.0]], np.float32))
    return client.infer("pipe", [values], **kwargs).as_numpy("RESULT").tolist()


def test_a_client_key_locks_inference_of_every_model_and_nothing_else(repository, tmp_path):
    process = ServeProcess(repository, tmp_path, env={CLIENT_KEY_ENV: CLIENT_KEY})
    try:
        assert "needs the client key" in process.wait_for_line("inference ")
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{process.ports['grpc']}")
        try:
            for headers in (None, {CLIENT_KEY_HEADER: "x" + CLIENT_KEY}, {"kyc-client-key":
                                                                           CLIENT_KEY}):
                with pytest.raises(InferenceServerException, match="kyc-client-key"):
                    _infer_pipe(client, headers=headers)
            assert _infer_pipe(client, headers={CLIENT_KEY_HEADER: CLIENT_KEY}) == [[2.0, 4.0]]
            # what the kyc SDK, kyc verify and kyc web build from the same variable
            with mock.patch.dict(os.environ, {CLIENT_KEY_ENV: CLIENT_KEY}):
                channel = as_channel(f"127.0.0.1:{process.ports['grpc']}")
            assert _infer_pipe(client, headers=channel.metadata) == [[2.0, 4.0]]
            assert client.is_server_ready() and client.get_model_metadata("pipe").name == "pipe"
        finally:
            client.close()
        infer = f"http://{process.http_url}/v2/models/pipe/infer"
        body = json.dumps({"inputs": [{"name": "VALUES", "shape": [1, 2], "datatype": "FP32",
                                       "data": [1.0, 2.0]}]}).encode()
        for headers, status in (({}, 403), ({"kyc-client-key": "x" + CLIENT_KEY}, 403),
                                ({"kyc-client-key": CLIENT_KEY}, 200)):
            request = urllib.request.Request(infer, data=body, method="POST", headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    assert (response.status, status) == (200, 200)
            except urllib.error.HTTPError as exc:
                assert exc.code == status
        assert _http(f"http://{process.http_url}/v2/health/ready") == 200  # probes: no key
    finally:
        process.close()


# What tritonserver 2.51 answers a gRPC inference call without the client key (measured;
# the same with a wrong key): UNAVAILABLE, as it answers a request shed under overload.
NO_KEY = "This protocol is restricted, expecting header 'triton-grpc-protocol-kyc-client-key'"


def _newcomer(tmp_path: Path, home: str) -> dict[str, str]:
    """The environment of someone who sets nothing: no KYC_ variable, a config folder of
    its own (``~/.config`` stands for ``home``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KYC_")}
    return {**env, "XDG_CONFIG_HOME": str(tmp_path / home)}


def _intake_without_a_key(grpc_url: str) -> InferenceServerException:
    """The attack: kyc_intake called straight, a good image and no key (it took an
    admission place, and a seal, from a newcomer's server before)."""
    image = np.full((64, 64, 3), 128, np.uint8)
    document = grpcclient.InferInput("DOCUMENT_IMAGE", [1, 1], "BYTES")
    document.set_data_from_numpy(np.array([[encode(image, 90)]], dtype=object))
    client = grpcclient.InferenceServerClient(grpc_url)
    try:
        with pytest.raises(InferenceServerException) as refused:
            client.infer("kyc_intake", [document])
    finally:
        client.close()
    return refused.value


def test_a_newcomers_kyc_serve_refuses_inference_without_the_key_its_clients_find(tmp_path):
    """`make serve` then `kyc verify`, as the README's quick start runs them, with nothing
    set: the second finds the key the first made; a call without it is refused before any
    model runs, and the SDK says why instead of retrying."""
    require_weights()
    assert main(["samples", "--out", str(tmp_path / "samples")]) == 0
    process = ServeProcess(SHIPPED_REPOSITORY, tmp_path, env=_newcomer(tmp_path, "config"))
    try:
        line = process.wait_for_line("inference ", timeout=300)
        key_file = tmp_path / "config" / "kyc" / "client.key"
        assert f"needs the client key (kyc-client-key header), from {key_file}" in line
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        key = key_file.read_text().strip()
        process.wait_for_line("Press Ctrl-C")
        grpc_url = f"127.0.0.1:{process.ports['grpc']}"
        refused = _intake_without_a_key(grpc_url)
        assert (str(refused.status()), refused.message()) == ("StatusCode.UNAVAILABLE", NO_KEY)
        runs = {home: subprocess.run(
            [*KYC, "verify", "--url", grpc_url, "--document", str(tmp_path / "samples" /
             "document.jpg"), "--selfie", str(tmp_path / "samples" / "selfie.jpg")],
            env=_newcomer(tmp_path, home), capture_output=True, text=True, timeout=300)
            for home in ("config", "elsewhere")}
    finally:
        process.close()
    assert runs["config"].returncode == 3, runs["config"].stderr  # review: no liveness
    assert runs["elsewhere"].returncode == 1
    assert "KycAuthError: the server needs its client key" in runs["elsewhere"].stderr
    assert key not in "".join(process.out) + process.proc.stderr.read()  # where, never what


def test_production_opened_by_name_serves_inference_without_a_key_and_says_so(
    repository, tmp_path, keys
):
    env = {k: v for k, v in keys.items() if k != CLIENT_KEY_ENV}
    process = ServeProcess(repository, tmp_path, "--production", "--open-inference", env=env)
    try:
        line = process.wait_for_line("inference ")
        assert "open to every caller (--open-inference): the operator's choice" in line
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{process.ports['grpc']}")
        try:
            assert _infer_pipe(client) == [[2.0, 4.0]]
        finally:
            client.close()
    finally:
        process.close()
    assert not (tmp_path / "config" / "kyc" / "client.key").exists()


@pytest.mark.parametrize("key", ["short-key", "a-key-that-is-long=enough"])
def test_serve_refuses_a_client_key_it_could_not_pass_on_whole(repository, key):
    result = subprocess.run([*KYC, "serve", "--model-repository", str(repository),
                             "--http-port", str(free_port())], capture_output=True, text=True,
                            timeout=60, env={**os.environ, CLIENT_KEY_ENV: key})
    assert result.returncode == 1 and CLIENT_KEY_ENV in result.stderr
    assert "ready in" not in result.stdout
