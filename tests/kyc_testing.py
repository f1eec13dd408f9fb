"""Helpers shared by the tests: tiny real ONNX/Python models and repositories."""

from __future__ import annotations

import contextlib
import functools
import os
import queue
import secrets
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from unittest import mock

import onnx
import pytest
import tritonclient.grpc as grpcclient
from onnx import TensorProto, helper

from kyc_client.channel import CLIENT_KEY_ENV
from kyc_client.liveness import MOVE_TRIES, LivenessReply, bytes_input, frame_input
from kyc_client.sdk import DEFAULT_RETRY
from kyc_tools.operator.server import (
    SHM_DIR,
    ServerOptions,
    TritonServer,
    free_port,
    free_ports,
    start_until_ready,
)

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SHIPPED_REPOSITORY = PROJECT_ROOT / "model_repository"


def tiny_onnx(
    path: Path,
    *,
    input_name: str = "X",
    output_name: str = "Y",
    elem_type: int = TensorProto.FLOAT,
    shape: tuple = ("batch", 2),
    op: str = "Add",
) -> Path:
    """An ONNX model computing Y = X + X (X * X with op="Mul", X with op="Identity")."""
    x = helper.make_tensor_value_info(input_name, elem_type, list(shape))
    y = helper.make_tensor_value_info(output_name, elem_type, list(shape))
    operands = [input_name] if op == "Identity" else [input_name, input_name]
    graph = helper.make_graph([helper.make_node(op, operands, [output_name])], "tiny", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def model_config(name: str, *, inputs: dict[str, tuple[str, list[int]]],
                 outputs: dict[str, tuple[str, list[int]]], platform: str = "",
                 backend: str = "", max_batch_size: int = 8, more: str = "") -> str:
    """A model's config.pbtxt as a person writes it: ``platform`` or ``backend``;
    ``inputs`` and ``outputs`` map each tensor's name to its type and dims
    (``{"X": ("FP32", [2])}``), one line each; ``more`` (dedented) after them."""
    runs_on = f'platform: "{platform}"' if platform else f'backend: "{backend}"'
    return (f'name: "{name}"\n{runs_on}\nmax_batch_size: {max_batch_size}\n'
            f"{_tensors('input', inputs)}{_tensors('output', outputs)}{textwrap.dedent(more)}")


def _tensors(kind: str, tensors: dict[str, tuple[str, list[int]]]) -> str:
    listed = ", ".join(f'{{ name: "{name}" data_type: TYPE_{dtype} dims: [ '
                       f'{", ".join(map(str, dims))} ] }}'
                       for name, (dtype, dims) in tensors.items())
    return f"{kind} [ {listed} ]\n"


def ensemble_config(name: str, *, inputs: dict[str, tuple[str, list[int]]],
                    outputs: dict[str, tuple[str, list[int]]], steps: list[str],
                    max_batch_size: int = 8) -> str:
    """An ensemble's config.pbtxt (see :func:`model_config`) running ``steps``
    (:func:`ensemble_step`), in that order."""
    scheduling = "ensemble_scheduling {\n  step [\n    " + ",\n    ".join(steps) + "\n  ]\n}\n"
    return model_config(name, platform="ensemble", inputs=inputs, outputs=outputs,
                        max_batch_size=max_batch_size, more=scheduling)


def ensemble_step(model: str, inputs: dict[str, str], outputs: dict[str, str],
                  version: int = -1) -> str:
    """One step of an ensemble: ``inputs`` maps each of ``model``'s inputs to the
    ensemble tensor it reads, ``outputs`` each of its outputs to the tensor it writes."""
    maps = [f'input_map {{ key: "{key}" value: "{value}" }}' for key, value in inputs.items()]
    maps += [f'output_map {{ key: "{key}" value: "{value}" }}' for key, value in outputs.items()]
    return f'{{ model_name: "{model}" model_version: {version}\n      {" ".join(maps)} }}'


DOUBLE_CONFIG = model_config(
    "double", platform="onnxruntime_onnx", inputs={"X": ("FP32", [2])},
    outputs={"Y": ("FP32", [2])}, more="dynamic_batching { max_queue_delay_microseconds: 1000 }\n")

ECHO_CONFIG = model_config("echo", backend="python", inputs={"IN": ("FP32", [2])},
                           outputs={"OUT": ("FP32", [2])})

ECHO_MODEL = '''
import numpy as np
import triton_python_backend_utils as pb_utils

SCALE = {scale}


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x * SCALE)]))
        return out
'''

PIPE_CONFIG = ensemble_config(
    "pipe", inputs={"VALUES": ("FP32", [2])}, outputs={"RESULT": ("FP32", [2])}, steps=[
        ensemble_step("double", {"X": "VALUES"}, {"Y": "doubled"}),
        ensemble_step("echo", {"IN": "doubled"}, {"OUT": "RESULT"})])


# What a dropped model folder must not hold (kyc_tools.repo.safe_copy), each put into a folder.
UNSAFE_ENTRIES: dict[str, Callable[[Path], None]] = {
    "symlink to /etc": lambda folder: (folder / "etc").symlink_to("/etc"),
    "fifo": lambda folder: os.mkfifo(folder / "pipe"),
}


def write_echo_version(version_dir: Path, scale: float = 1.0) -> Path:
    version_dir.mkdir(parents=True, exist_ok=True)
    (version_dir / "model.py").write_text(ECHO_MODEL.format(scale=scale))
    return version_dir


def build_publish_repository(root: Path) -> Path:
    """face_embedding (real weights, ONNX) and the echo Python model: what the publish
    tests ship new versions of."""
    require_weights()
    copy_tree(SHIPPED_REPOSITORY / "face_embedding", root / "face_embedding")
    (root / "echo").mkdir()
    (root / "echo" / "config.pbtxt").write_text(textwrap.dedent(ECHO_CONFIG))
    write_echo_version(root / "echo" / "1", scale=1.0)
    return root


def build_tiny_repository(root: Path) -> Path:
    """A sound repository: an ONNX model, a Python model and an ensemble of both."""
    (root / "double" / "1").mkdir(parents=True)
    (root / "double" / "config.pbtxt").write_text(textwrap.dedent(DOUBLE_CONFIG))
    tiny_onnx(root / "double" / "1" / "model.onnx")
    (root / "echo").mkdir()
    (root / "echo" / "config.pbtxt").write_text(textwrap.dedent(ECHO_CONFIG))
    write_echo_version(root / "echo" / "1")
    (root / "pipe" / "1").mkdir(parents=True)
    (root / "pipe" / "config.pbtxt").write_text(textwrap.dedent(PIPE_CONFIG))
    return root


def copy_tree(src: Path, dest: Path) -> Path:
    """Copy a repository (about 50 MB). Not hard links: Triton's poll takes a file's
    max(mtime, ctime), and a new link to a file changes its ctime, so every copy made
    by one test reloaded every model of the servers other tests ran on linked copies
    (and a test writing into a linked file would have edited the shipped one)."""
    shutil.copytree(src, dest,
                    ignore=shutil.ignore_patterns("__pycache__", ".staging-*", ".publish.lock"))
    return dest


# A value searched for in a log must be one no log line holds by chance: the generator's
# two-letter surnames (NG, LI, OE...) are in WARNING, LINE, DOES (issue 45).
SEARCHABLE = 5


def searchable(*values: str) -> list[str]:
    """``values`` that are at least :data:`SEARCHABLE` characters long: those a test can
    look for in a log (the MRZ lines it also looks for hold the shorter ones)."""
    return [value for value in values if len(value) >= SEARCHABLE]


def require_weights() -> None:
    missing = [
        str(p.relative_to(SHIPPED_REPOSITORY.parent))
        for p in sorted(SHIPPED_REPOSITORY.glob("*/config.pbtxt"))
        if not list(p.parent.glob("[0-9]*/model.*")) and 'platform: "ensemble"' not in p.read_text()
    ]
    if missing:
        pytest.fail(f"model weights missing for {', '.join(missing)}: run `make setup`")


def start_server(repository: Path, log_file: Path, *, open_inference: bool = True,
                 **options) -> TritonServer:
    """A server on free loopback ports, ready. Inference open by name unless told: the
    tests' raw tritonclient calls carry no client key (test_serve_cli.py and
    test_readme.py test servers that need it)."""
    server = TritonServer(ServerOptions.on_free_ports(repository, open_inference=open_inference,
                                                      **options), log_file=log_file)
    return start_until_ready(server, timeout_s=180, stop_grace_s=5, tail_chars=4000)


def shipped_copy(dest: Path) -> Path:
    """A copy of the shipped repository at ``dest`` (its weights there: else the test
    fails with how to fetch them)."""
    require_weights()
    return copy_tree(SHIPPED_REPOSITORY, dest)


@contextlib.contextmanager
def shipped_server(root: Path, config_changes: dict[str, Callable[[str], str]] | None = None,
                   **options) -> Iterator[tuple[Path, TritonServer]]:
    """A server of its own on a copy of the shipped repository (``root/repo``, the log in
    ``root/server.log``), each model of ``config_changes`` with its config.pbtxt's text
    changed as said first: (the copy, the server), stopped after. ``options`` as
    :func:`start_server`'s."""
    repo = shipped_copy(root / "repo")
    for model, change in (config_changes or {}).items():
        config = repo / model / "config.pbtxt"
        config.write_text(change(config.read_text()))
    server = start_server(repo, root / "server.log", **options)
    try:
        yield repo, server
    finally:
        server.stop()


@contextlib.contextmanager
def keyed_server(repository: Path, log_dir: Path) -> Iterator[TritonServer]:
    """A server whose inference needs the client key, as `kyc serve` starts one; while it
    runs the key is in KYC_CLIENT_KEY, where a reader's client (and a child process) finds
    it."""
    with mock.patch.dict(os.environ, {CLIENT_KEY_ENV: secrets.token_hex(24)}):
        server = start_server(repository, log_dir / "tritonserver.log", open_inference=False)
        try:
            yield server
        finally:
            server.stop()


# What the server needs to serve and a client's environment must never be made to hold
# (the client's distribution: its lock, and a fresh install of it).
MODEL_RUNTIMES = frozenset({"onnxruntime", "openvino", "onnx", "opencv-python-headless",
                            "pillow", "pyclipper", "starlette", "uvicorn", "watchdog"})

KYC = [sys.executable, "-m", "kyc_tools.cli"]


class ServeProcess:
    """`kyc serve` on free loopback ports, as a user runs it: its output read line by
    line, stopped as a user would stop it."""

    def __init__(self, repository: Path, tmp_path: Path, *extra: str,
                 env: dict[str, str] | None = None) -> None:
        self.ports = dict(zip(("http", "grpc", "metrics", "status"), free_ports(4), strict=True))
        self.log = tmp_path / "serve.log"
        self.proc = subprocess.Popen(
            [*KYC, "serve", "--model-repository", str(repository),
             "--http-port", str(self.ports["http"]), "--grpc-port", str(self.ports["grpc"]),
             "--metrics-port", str(self.ports["metrics"]), "--host", "127.0.0.1",
             "--status-port", str(self.ports["status"]),
             "--log-file", str(self.log), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, **(env or {})},
        )
        self.out: list[str] = []
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.ports['http']}"

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def wait_for_line(self, needle: str, timeout: float = 120) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.5)
            except queue.Empty:
                if self.proc.poll() is not None and self.lines.empty():
                    break
                continue
            self.out.append(line)
            if needle in line:
                return line
        stderr = self.proc.stderr.read() if self.proc.poll() is not None else ""
        raise AssertionError(f"no {needle!r} in output: {''.join(self.out)}{stderr}")

    def close(self) -> None:
        """Stop as a user would (SIGTERM), then by force."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def server_pid(self) -> int:
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid), "tritonserver"],
                             capture_output=True, text=True).stdout.split()
        assert len(out) == 1, out
        return int(out[0])

    def shm_regions(self) -> list[str]:
        return sorted(p.name for p in SHM_DIR.glob(f"kyc_{self.proc.pid}_*"))


REDIS_INSTALL = ("`bash scripts/system-deps.sh \"\" --test` (make unit and make test run it), "
                 "or `apt-get install redis-server`")


@contextlib.contextmanager
def redis_server(workdir: Path, timeout_s: float = 15.0) -> Iterator[str]:
    """A real ``redis-server`` on a free loopback port, nothing persisted (the token
    ledger's entries live one token lifetime): its ``redis://`` URL, stopped after.
    Missing, it fails the test with the command that installs it (never a skip)."""
    from kyc.decision.ledger import LedgerUnavailableError, RespConnection

    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail(f"redis-server is not installed: run {REDIS_INSTALL}")
    port = free_port()
    log = workdir / "redis.log"
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
         "no", "--dir", str(workdir), "--logfile", str(log)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        client, deadline = RespConnection(url), time.monotonic() + timeout_s
        while True:
            try:
                client.command("PING")
                break
            except LedgerUnavailableError:
                if process.poll() is not None or time.monotonic() > deadline:
                    tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                    pytest.fail(f"redis-server did not answer PING on {port}:\n{tail}")
                time.sleep(0.05)
        client.close()
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def concurrently(url: str, model: str, inputs: list[list[grpcclient.InferInput]]) -> list:
    """Send every request at once (so they share a batch); results or exceptions, in order."""
    results: list = [None] * len(inputs)
    done = threading.Event()
    lock = threading.Lock()
    pending = [len(inputs)]
    client = grpcclient.InferenceServerClient(url)

    def callback(index, result, error):
        with lock:
            results[index] = error if error is not None else result
            pending[0] -= 1
            if pending[0] == 0:
                done.set()

    try:
        for index, tensors in enumerate(inputs):
            client.async_infer(model, tensors, functools.partial(callback, index),
                               client_timeout=120)
        assert done.wait(180), "requests did not finish"
    finally:
        client.close()
    return results


def shed(result) -> bool:
    """Refused by admission control (UNAVAILABLE, "at capacity"): a client sends it
    again after a backoff (the SDK does, kyc_client.sdk)."""
    return (isinstance(result, Exception) and "UNAVAILABLE" in str(result.status())
            and "at capacity" in result.message())


def concurrently_as_a_client(url: str, model: str, inputs: list[list[grpcclient.InferInput]],
                             on_shed: Callable[[], None] = lambda: None) -> list:
    """:func:`concurrently`, then each request that admission control shed (a busy
    machine: the limit follows measured capacity) sent again alone after the SDK's
    backoff, as a client does; ``on_shed`` is called for each time."""
    results = concurrently(url, model, inputs)
    client = grpcclient.InferenceServerClient(url)
    try:
        for index, tensors in enumerate(inputs):
            for retry in range(1, DEFAULT_RETRY.attempts):
                if not shed(results[index]):
                    break
                on_shed()
                time.sleep(DEFAULT_RETRY.delay_s(retry))
                try:
                    results[index] = client.infer(model, tensors, client_timeout=120)
                except Exception as exc:
                    results[index] = exc
    finally:
        client.close()
    return results


def liveness_step(client: grpcclient.InferenceServerClient, sid, frame: bytes = b"",
                  start: bool = False, end: bool = False, model_version: str = ""):
    """One liveness_sequence request: the reply, or the error as the result."""
    try:
        return LivenessReply.from_result(client.infer(
            "liveness_sequence", [frame_input(frame)], model_version=model_version,
            sequence_id=sid, sequence_start=start, sequence_end=end, client_timeout=60))
    except Exception as exc:
        return exc


def write_model(root: Path, name: str, config: str, model_py: str | None = None) -> None:
    """A model folder in ``root``: its config (dedented) and a version 1, with a
    ``model.py`` when given."""
    (root / name / "1").mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(textwrap.dedent(config))
    if model_py is not None:
        (root / name / "1" / "model.py").write_text(textwrap.dedent(model_py))


def ensemble_customers(seed: int) -> list[tuple[bytes, bytes]]:
    """(document, selfie) pairs for kyc_ensemble: rendered TD3 documents with a real
    portrait (person_a_1), and real selfies of the same person and of two others."""
    import numpy as np
    from PIL import Image

    from kyc_tools.assets.fetch import fetch_test_photos
    from kyc_tools.dev.synthetic.document import Degradation, random_identity, render_document

    photos = fetch_test_photos()
    rng = np.random.default_rng(seed)
    portrait = np.asarray(Image.open(photos["person_a_1"]).convert("RGB"))
    out = []
    for selfie in ("person_a_2", "person_b_1", "impostor_1"):
        document = render_document(random_identity(rng), "td3", portrait, Degradation(), rng)
        out.append((document.jpeg_bytes(), photos[selfie].read_bytes()))
    return out


def ensemble_inputs(document: bytes, selfie: bytes, token: bytes = b"") -> list:
    """kyc_ensemble's three BYTES inputs for one customer."""
    return [bytes_input(name, value) for name, value in (
        ("DOCUMENT_IMAGE", document), ("SELFIE_IMAGE", selfie), ("LIVENESS_TOKEN", token))]


def scrape(server: TritonServer) -> str:
    """The server's Prometheus metrics, as text."""
    with urllib.request.urlopen(server.options.metrics_url, timeout=10) as response:
        return response.read().decode()


def metric_sum(text: str, name: str, **labels: str) -> float:
    """The sum of the samples ``name`` whose labels include ``labels`` (prometheus_client's
    parser of the text format, which names a counter's samples ``..._total`` even where
    Triton's ``nv_*`` counters have no such suffix)."""
    from prometheus_client.parser import text_string_to_metric_families

    names = {name, name + "_total"}
    return sum(sample.value for family in text_string_to_metric_families(text)
               for sample in family.samples
               if sample.name in names and labels.items() <= sample.labels.items())


class Person:
    """A real test photo's face (``role`` of the manifest's test photos), making the
    moves a liveness session asks for as 3-D head turns rendered on the canonical face
    mesh (kyc_tools.dev.synthetic.liveness: frames made by software, not video of a person; the
    relief check passes them, as it passes any render of a face's relief)."""

    def __init__(self, grpc_url: str, role: str = "person_a_2") -> None:
        import numpy as np
        from PIL import Image

        from kyc_client.sdk import KycClient
        from kyc_tools.assets.fetch import fetch_test_photos
        from kyc_tools.dev.synthetic.liveness import HeadModel

        self.path = fetch_test_photos()[role]
        self.image = np.asarray(Image.open(self.path).convert("RGB"))
        with KycClient(grpc_url) as client:
            face = client.find_face(self.path.read_bytes())
        assert face["found"], f"no face in the test photo {role}"
        self.box, self.landmarks = face["box"], face["landmarks"]
        self.head = HeadModel(self.image, self.landmarks)

    def performer(self):
        """A fresh :class:`kyc_tools.dev.synthetic.liveness.Performer` (its own frame count)."""
        from kyc_tools.dev.synthetic.liveness import Performer

        return Performer(self.head)

    def film(self, moves) -> list[bytes]:
        """The frames of ``moves`` one after the other, as a recording of them."""
        from kyc_tools.dev.synthetic.liveness import turn_sequence

        return turn_sequence(self.head, moves)


def live_session(grpc_url: str, person: Person, **options) -> list:
    """A liveness session of ``person`` doing what the server asks, move by move (the
    replies, START's first; see kyc_client.liveness.perform_session)."""
    from kyc_client.liveness import perform_session

    return perform_session(grpc_url, person.performer(), **options)


def perform_on(capture, perform, fps: float = 15.0) -> list:
    """Stream a person through an open :class:`kyc_client.liveness.LivenessCapture`
    (START already answered) at a camera's pace: ``perform(None)``, then each move still
    to make as told, waiting for the server's word after each, then ``perform(None)``
    again; END is left to the caller. The replies so far, in order."""
    from kyc_client.liveness import FramePacer

    pacer, sent, replies = FramePacer(fps), [0], []

    def push(frames) -> None:
        for frame in frames:
            pacer.wait(sent[0])
            capture.push(frame)
            sent[0] += 1

    push(perform(None))
    # from where the session is (a session some of whose moves were made already)
    move = capture.progress.get("next", capture.challenge["next"])
    done, tries = capture.progress.get("moves_done", 0), 0
    while move is not None and tries < MOVE_TRIES:
        push(perform(move))
        ready = capture.settle()
        replies += ready
        progress = [r.status["progress"] for r in ready if not isinstance(r, Exception)]
        if progress and progress[-1]["moves_done"] > done:
            move, done, tries = progress[-1]["next"], progress[-1]["moves_done"], 0
        else:
            tries += 1  # not seen: made again, as a person told "a little more" does
    push(perform(None))
    return replies + capture.settle()


def play_moves(send, perform, first: str | None, done: int = 0) -> list:
    """A person doing each move as told, one request at a time: ``send(frame, end)``
    sends one frame (END on the last) and returns its reply or error; ``perform`` as
    :func:`perform_on`'s; ``first``: the move told (START's, or the last reply's when
    ``done`` moves were made already). The replies, in order; it stops at the first
    error."""
    replies: list = []

    def film(frames, end: bool = False) -> bool:
        for k, frame in enumerate(frames):
            replies.append(send(frame, end and k == len(frames) - 1))
            if isinstance(replies[-1], Exception):
                return False
        return True

    if not film(perform(None)):
        return replies
    move, tries = first, 0
    while move is not None and tries < MOVE_TRIES:
        if not film(perform(move)):
            return replies
        progress = replies[-1].status["progress"]
        if progress["moves_done"] > done:
            move, done, tries = progress["next"], progress["moves_done"], 0
        else:
            tries += 1  # not seen: made again
    film(perform(None), end=True)
    return replies


def models_for(model: str, repository: Path = SHIPPED_REPOSITORY) -> tuple[str, ...]:
    """``model`` and every model it calls or reads the settings of, however deep (the
    repository's graph, kyc_tools.repo.graph): what a copy must hold for it to load."""
    from kyc_tools.repo.graph import build_graph

    calls = build_graph(repository).calls
    needed, todo = {model}, [model]
    while todo:
        caller = todo.pop()
        for call in calls:
            if call.caller == caller and call.callee not in needed:
                needed.add(call.callee)
                todo.append(call.callee)
    return tuple(sorted(needed))


# -- kyc web: its ASGI app driven by hand, a real server, slow clients ----------------
WEB_FORM = "multipart/form-data; boundary=b0undary"


def web_form(**fields: bytes) -> bytes:
    """A ``POST /api/verify`` body of these fields, as :data:`WEB_FORM` says."""
    return b"".join(b'--b0undary\r\nContent-Disposition: form-data; name="%s"\r\n\r\n%s\r\n'
                    % (name.encode(), value) for name, value in fields.items()) + b"--b0undary--"


def ensemble_answer(decision: str = "reject", reasons=("face_mismatch", "high_fraud_score")):
    """kyc_ensemble's answer, with every score and figure its REPORT carries."""
    from kyc_client.sdk import Verification

    return Verification(decision, list(reasons), face_match_score=0.123, liveness_score=0.456,
                        fraud_score=0.971, report={"fraud_features": {"age": 17},
                                                   "thresholds": {"face_match": 0.4}})


class Ensemble:
    """Stands in for the SDK's AsyncKycClient in kyc web's app: ``hold`` (an
    asyncio.Event) keeps each verification open until set; a liveness session is an
    :class:`IdleCapture`."""

    def __init__(self, hold=None) -> None:
        self.hold, self.calls, self.applications = hold, [], []

    async def verify(self, document: bytes, selfie: bytes, token: bytes,
                     application: str | None = None):
        self.calls.append((document, selfie, token))
        self.applications.append(application)
        if self.hold is not None:
            await self.hold.wait()
        return ensemble_answer()

    async def liveness_capture(self, client_id=None, application=None) -> IdleCapture:
        return IdleCapture()


class IdleCapture:
    """A liveness session on the server that tells its challenge, then nothing."""

    def __init__(self) -> None:
        self.challenge = {"length": 3, "how": "", "next": "left"}

    async def push(self, frame: bytes) -> None:
        pass

    async def replies(self):
        import asyncio

        await asyncio.Event().wait()
        yield  # never reached: an async generator

    async def close(self) -> None:
        pass


def web_scope(kind: str, path: str, client: str, headers: list | None = None) -> dict:
    """An ASGI scope of kind ``http`` (a POST) or ``websocket`` from ``client``."""
    return {"type": kind, "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
            "scheme": "http" if kind == "http" else "ws", "path": path, "raw_path": b"",
            "query_string": b"", "root_path": "", "client": (client, 5555),
            "server": ("127.0.0.1", 8080), "headers": headers or []}


async def post(app, body: bytes, content_type: str = WEB_FORM,
               client: str = "192.0.2.7") -> tuple[int, dict]:
    """One POST /api/verify, its body in 64 KiB messages as a server passes them on (each
    made when asked for, as a server reads them)."""
    import json

    starts, sent = iter(range(0, max(len(body), 1), 65536)), []

    async def receive():
        at = next(starts, None)
        if at is None:
            return {"type": "http.disconnect"}
        return {"type": "http.request", "body": body[at:at + 65536],
                "more_body": at + 65536 < len(body)}

    async def send(message):
        sent.append(message)

    headers = [(b"content-type", content_type.encode())]
    await app(web_scope("http", "/api/verify", client, headers), receive, send)
    return sent[0]["status"], json.loads(b"".join(m.get("body", b"") for m in sent[1:]))


class StreamedPost:
    """One POST /api/verify to kyc web's ASGI app from ``client`` whose body comes as
    the test feeds it (:meth:`feed`), as a slow client sends it. Start it in a running
    event loop."""

    def __init__(self, app, body: bytes, client: str = "192.0.2.7") -> None:
        import asyncio

        self.body, self.at, self.sent = body, 0, []
        self.pieces: asyncio.Queue = asyncio.Queue()
        headers = [(b"content-type", WEB_FORM.encode()),
                   (b"content-length", str(len(body)).encode())]
        self.task = asyncio.ensure_future(
            app(web_scope("http", "/api/verify", client, headers), self.pieces.get, self._send))

    async def _send(self, message: dict) -> None:
        self.sent.append(message)

    def feed(self, size: int | None = None) -> None:
        """The body's next ``size`` bytes (None: the rest)."""
        end = len(self.body) if size is None else min(self.at + size, len(self.body))
        self.pieces.put_nowait({"type": "http.request", "body": self.body[self.at:end],
                                "more_body": end < len(self.body)})
        self.at = end

    async def answer(self, timeout: float = 5.0) -> tuple[int, dict, dict]:
        """The status, the JSON body and the headers of the answer, once it is sent."""
        import asyncio
        import json

        await asyncio.wait_for(asyncio.shield(self.task), timeout)
        headers = {k.decode(): v.decode() for k, v in self.sent[0].get("headers", [])}
        body = b"".join(m.get("body", b"") for m in self.sent[1:])
        return self.sent[0]["status"], json.loads(body), headers


class IdlePage:
    """A page that opens ``/ws/liveness`` on kyc web's ASGI app from ``client`` and then
    sends nothing; :attr:`told` is what the app sent it, :attr:`close_code` how it was
    closed. Start it in a running event loop."""

    def __init__(self, app, client: str) -> None:
        import asyncio

        self.messages, self.close_code, self.opened = [], None, False
        self.closed = asyncio.Event()
        headers = [(b"host", b"kyc.test"), (b"origin", b"https://kyc.test")]
        self.task = asyncio.ensure_future(
            app(web_scope("websocket", "/ws/liveness", client, headers), self._receive,
                self._send))

    async def _receive(self) -> dict:
        if not self.opened:
            self.opened = True
            return {"type": "websocket.connect"}
        await self.closed.wait()
        return {"type": "websocket.disconnect", "code": 1000}

    async def _send(self, message: dict) -> None:
        if message["type"] == "websocket.close":
            self.close_code = message.get("code", 1000)
            self.closed.set()
        self.messages.append(message)

    @property
    def told(self) -> list[str]:
        """The ``type`` (an error: its code) of each JSON message the app sent."""
        import json

        said = [json.loads(m["text"]) for m in self.messages if m["type"] == "websocket.send"]
        return [m.get("error", m["type"]) for m in said]


@contextlib.contextmanager
def web_server(app, settings) -> Iterator[int]:
    """kyc web's ``app`` served by a real uvicorn with ``kyc web``'s options for
    ``settings`` (:func:`kyc_tools.cli.web.uvicorn_options`) on a free port of
    127.0.0.1, in a thread of its own: the port."""
    import uvicorn

    from kyc_tools.cli.web import uvicorn_options

    config = uvicorn.Config(app, host="127.0.0.1", port=free_port(), lifespan="off",
                            timeout_graceful_shutdown=1, **uvicorn_options(settings))
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.started, "uvicorn did not start"
    try:
        yield config.port
    finally:
        server.should_exit = True
        thread.join(10)


def verify_head(length: int) -> bytes:
    """A ``POST /api/verify`` request's line and headers, for a form of ``length`` bytes."""
    return (b"POST /api/verify HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: %s\r\n"
            b"Content-Length: %d\r\n\r\n" % (WEB_FORM.encode(), length))


class RawClient:
    """A client of a server on 127.0.0.1 from a loopback address of its own (``source``,
    127.0.0.x: Linux routes all of 127/8 to itself), on a raw socket: it sends what it
    is told, a byte at a time if need be, and reads what comes back."""

    def __init__(self, port: int, source: str = "127.0.0.1") -> None:
        import socket

        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5,
                                             source_address=(source, 0))
        self.received = b""

    def send(self, data: bytes) -> bool:
        """False: the server has closed the connection."""
        try:
            self.sock.sendall(data)
            return True
        except OSError:
            return False

    def closed_within(self, timeout: float) -> bool:
        """Whether the server closes the connection within ``timeout`` (what it sends
        meanwhile is kept in :attr:`received`)."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                return False
            except OSError:  # reset
                return True
            if not data:
                return True
            self.received += data
        return False

    def answer(self, timeout: float = 5.0) -> tuple[int, dict]:
        """The status and JSON body of the answer (read until it is whole)."""
        import json

        deadline, closed = time.monotonic() + timeout, False
        while True:
            head, _, body = self.received.partition(b"\r\n\r\n")
            length = [int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:")]
            if length and len(body) >= length[0]:
                return int(head.split(b" ")[1]), json.loads(body[:length[0]])
            if closed or time.monotonic() > deadline:
                raise AssertionError(f"no whole answer: {self.received[:200]!r}")
            closed = self.closed_within(0.05)

    def close(self) -> None:
        self.sock.close()
