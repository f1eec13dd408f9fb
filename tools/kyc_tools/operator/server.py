"""Start, watch and stop a real ``tritonserver`` over a model repository.

Used by ``kyc serve`` (local CPU runtime and the production image) and by the
integration tests, so both run the server the same way.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import json
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import IO

from kyc_tools.operator.live import QUIET_S, Event, LiveRepository
from kyc_tools.operator.procs import stubs_per_model
from kyc_tools.operator.triton import TritonInstall, assemble_backends, system_install
from kyc_tools.repo.publish import precompile_python_models

log = logging.getLogger(__name__)

SHM_DIR = Path("/dev/shm")
# Our Python-backend shared-memory regions are named kyc_<launcher pid>_<token>_<uuid>.
_SHM_PREFIX_RE = re.compile(r"^kyc_(\d+)_[0-9a-f]{6}_")
# kyc.intake.admission's state file, named after the tritonserver's own pid
_ADMISSION_RE = re.compile(r"^kyc_(\d+)_admission_[a-z_]+$")
# kyc.decision.ledger's folder of spent tokens, named after the tritonserver's own pid
_LEDGER_RE = re.compile(r"^kyc_(\d+)_ledger$")


# Locked by the admin key, in development too: loading models, client-registered
# shared memory (a client could map server memory), tracing and log settings. Left
# open: health, metadata, inference, model-config, statistics (timings only; `kyc bench`).
# tritonserver 2.51 takes the key only on its command line ("<apis>:admin-key=<key>"):
# any local user can read it in /proc/<pid>/cmdline; there is no file or variable form.
RESTRICTED_APIS = ("model-repository", "shared-memory", "trace", "logging")
# Locked by the client key (kyc_client.channel) unless the operator opens it by name
# (open_inference, `kyc serve --open-inference`): inference, every model's (Triton cannot
# lock one model and not another). Internal calls (ensemble steps, BLS) do not pass the
# frontend and need none. A call without the key gets UNAVAILABLE "This protocol is
# restricted, expecting header 'triton-grpc-protocol-kyc-client-key'" on gRPC, 403 on HTTP.
CLIENT_APIS = ("inference",)
OPEN_INFERENCE_FLAG = "--open-inference"

# Where kyc serve listens unless told otherwise (--host): this machine only. The image
# and deploy/ pass --host 0.0.0.0 themselves.
DEFAULT_HOST = "127.0.0.1"
MIN_ADMIN_KEY_CHARS = 16
# The Python backend's shared-memory region of each stub, through which every tensor
# to and from the stub goes: created this large (a sparse file: a page costs memory
# only once written) instead of the backend's 1 MiB grown in 1 MiB steps. Grown step
# by step, each region placed new tensors past the holes its freed ones left, and the
# pages written crept pass after pass of the hostile corpus (all regions: +160, +47,
# +5 MiB; created at 64 MiB: +72, +9, 0). 14 stubs and a version switch's second one
# x 64 MiB stay inside the 2 GiB /dev/shm the image and deploy/ give (1 GiB held 13
# and a switch, not 14: issue 45; docs/reliability.md, "Memory").
PYTHON_SHM_DEFAULT_BYTES = 64 * 2**20
# gRPC request/response objects kept for reuse. Each one kept holds the capacity of
# the largest request it carried (up to the 20 MiB image limit): with Triton's 8,
# the server's own memory moved by 20-50 MiB from pass to pass of the hostile corpus;
# with none kept, by -4 to +18 MiB. Allocating one per request costs microseconds.
GRPC_INFER_ALLOCATION_POOL_SIZE = 0


class ServerError(RuntimeError):
    """The server failed to start, or stopped on its own."""


def default_token_key_file() -> Path:
    """``$XDG_CONFIG_HOME/kyc/token.key`` (``~/.config/kyc/token.key``)."""
    from kyc_client.channel import key_folder

    return key_folder() / "token.key"


def default_admin_key_file() -> Path:
    """``admin.key`` beside the token key file (``~/.config/kyc/admin.key``)."""
    return default_token_key_file().with_name("admin.key")


def development_admin_key(path: Path | None = None) -> str:
    """The admin key of a server started without one: random, made on first start into
    a file only its owner reads (as the token key), so local tools can use it."""
    from kyc.keys import create_key_file

    return create_key_file(path or default_admin_key_file()).read_text().strip()


def development_client_key(path: Path | None = None) -> str:
    """The client key of a server started without one: random (hex, within the characters
    :func:`client_key_problems` allows), made on first start into a file only its owner
    reads, beside the admin key, where this machine's clients find it
    (:func:`kyc_client.channel.client_key`)."""
    from kyc.keys import create_key_file
    from kyc_client.channel import default_client_key_file

    path = create_key_file(path or default_client_key_file(), secrets.token_hex(24))
    return path.read_text(encoding="ascii").strip()


def client_key_problems(client_key: str | None) -> list[str]:
    """Why a client key cannot be used: too short, or characters Triton's restricted-API
    option or an HTTP header would cut or change."""
    from kyc_client.channel import CLIENT_KEY_ENV

    if client_key is None:
        return []
    problems = []
    if len(client_key) < MIN_ADMIN_KEY_CHARS:
        problems.append(f"{CLIENT_KEY_ENV} is shorter than {MIN_ADMIN_KEY_CHARS} characters")
    if not re.fullmatch(r"[A-Za-z0-9._~+/-]*", client_key):
        problems.append(f"{CLIENT_KEY_ENV} may hold letters, digits and ._~+/- only "
                        "(e.g. openssl rand -hex 24)")
    return problems


def no_client_key_problem() -> str:
    """What a production server without a client key says (``kyc serve``, the runtime)."""
    from kyc_client.channel import CLIENT_KEY_ENV

    return (f"no client key: set {CLIENT_KEY_ENV} (at least {MIN_ADMIN_KEY_CHARS} of letters, "
            f"digits, ._~+/-; e.g. openssl rand -hex 24), the key every inference call must "
            f"carry, or pass {OPEN_INFERENCE_FLAG} to let every caller of the ports infer")


def production_problems(admin_key: str | None, env: Mapping[str, str],
                        open_inference: bool = False) -> list[str]:
    """Why a production server must not start: one line per missing or weak key."""
    from kyc.keys import ENV_KEY, ENV_KEY_FILE
    from kyc_client.channel import CLIENT_KEY_ENV

    problems = []
    if not admin_key:
        problems.append("no model-repository API key: set KYC_ADMIN_KEY (at least "
                        f"{MIN_ADMIN_KEY_CHARS} characters)")
    elif len(admin_key) < MIN_ADMIN_KEY_CHARS:
        problems.append(f"the model-repository API key is shorter than {MIN_ADMIN_KEY_CHARS} "
                        "characters")
    if not env.get(ENV_KEY) and not env.get(ENV_KEY_FILE):
        problems.append(f"no liveness token key: set {ENV_KEY} or {ENV_KEY_FILE}")
    if not open_inference and not env.get(CLIENT_KEY_ENV, "").strip():
        problems.append(no_client_key_problem())
    return problems


@dataclass(frozen=True)
class InferenceLock:
    """What inference needs on a server: ``key`` (None: nothing, open to every caller)
    and where it comes from, for the banner (never the key itself)."""

    key: str | None
    origin: str


def inference_lock(options: ServerOptions, env: Mapping[str, str] = os.environ) -> InferenceLock:
    """The options' client key; none when the operator opened inference by name
    (``open_inference``); else ``KYC_CLIENT_KEY``; else (not in production) the
    development key file, made on first start, that this machine's clients read."""
    from kyc_client.channel import CLIENT_KEY_ENV, default_client_key_file

    if options.open_inference:
        return InferenceLock(None, f"open to every caller ({OPEN_INFERENCE_FLAG})")
    lock = InferenceLock(options.client_key, "the server's options")
    if lock.key is None and env.get(CLIENT_KEY_ENV, "").strip():
        lock = InferenceLock(env[CLIENT_KEY_ENV].strip(), f"${CLIENT_KEY_ENV}")
    elif lock.key is None and options.production:
        raise ServerError(no_client_key_problem())
    elif lock.key is None:
        path = default_client_key_file(env)
        lock = InferenceLock(development_client_key(path), str(path))
    problems = client_key_problems(lock.key)
    if problems:
        raise ServerError(f"the client key from {lock.origin}: " + "; ".join(problems))
    return lock


def token_key_environment(env: dict[str, str], options: ServerOptions) -> dict[str, str]:
    """``env`` with a usable liveness token key for the models, checked here so that
    a bad key stops the start with a clear message instead of failing models."""
    from kyc.keys import ENV_KEY, ENV_KEY_FILE, TokenKeyError, create_key_file, load_key

    if not env.get(ENV_KEY) and not env.get(ENV_KEY_FILE):
        if options.require_token_key:
            raise ServerError(f"no liveness token key: set {ENV_KEY} (base64 of 32 random "
                              f"bytes) or {ENV_KEY_FILE} (a file holding it); every server "
                              "that reads the tokens needs the same key")
        path = create_key_file(options.token_key_file or default_token_key_file())
        env = {**env, ENV_KEY_FILE: str(path)}
    try:
        load_key(env)
    except TokenKeyError as exc:
        raise ServerError(str(exc)) from None
    return env


@dataclass(frozen=True)
class ServerOptions:
    """How to run the server. Defaults are the public contract's ports."""

    model_repository: Path
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    address: str = DEFAULT_HOST
    poll_secs: int = 2
    # "poll": new version folders are picked up (production, `kyc serve`);
    # "explicit": every model loaded at start, then only through the model-control
    # API (`kyc bench` loads variants of a model that way).
    model_control: str = "poll"
    # Explicit mode: the models loaded at start ("*": every one; `kyc eval` names only
    # those its measure runs through).
    load_models: tuple[str, ...] = ("*",)
    admin_key: str | None = None
    # Inference (every model) answers only calls carrying this key (kyc_client.channel);
    # None: KYC_CLIENT_KEY, else the development key file (inference_lock).
    client_key: str | None = None
    # No client key: inference open to whoever reaches the ports, by the caller's choice
    # (`kyc serve --open-inference`; the tests' servers, whose raw calls carry no key).
    open_inference: bool = False
    # "onnxruntime": the local onnxruntime backend ignores the configs' CPU accelerator
    # (KYC_CPU_RUNTIME; kyc.onnx_runtime.settings); "": as the configs say (OpenVINO).
    cpu_runtime: str = ""
    log_verbose: int = 0
    exit_on_error: bool = True
    # On SIGTERM Triton finishes in-flight work and waits for open client
    # connections up to this long before it exits.
    exit_timeout_secs: int = 10
    extra_args: tuple[str, ...] = field(default=())
    # The liveness token key (KYC_TOKEN_KEY or KYC_TOKEN_KEY_FILE): without one the
    # server refuses to start when this is set (the production image), else a key
    # file is created on first start (token_key_file).
    require_token_key: bool = False
    token_key_file: Path | None = None
    # Production (`kyc serve --production`, the image): the keys are required.
    production: bool = False
    # Poll mode: Triton reads a live copy that only kyc_tools.operator.live writes, from
    # complete, checked folders of model_repository (hand-dropped versions are safe);
    # False: Triton polls model_repository itself (`kyc serve --no-watch`).
    watch: bool = True
    quiet_secs: float = QUIET_S  # a dropped folder is taken once unchanged this long
    watch_polling: bool = False  # stat the files instead of inotify (network filesystems)
    live_dir: Path | None = None  # where the live copy goes (default: the temp folder)
    status_port: int = 0  # the watcher's /metrics and /status (0: a free port)

    @classmethod
    def on_free_ports(cls, model_repository: Path, **options) -> ServerOptions:
        """Loopback-only options on three distinct free ports (tests, bench, eval)."""
        http, grpc, metrics = free_ports(3)
        return cls(model_repository, http_port=http, grpc_port=grpc, metrics_port=metrics,
                   address="127.0.0.1", **options)

    @property
    def watching(self) -> bool:
        return self.watch and self.model_control == "poll"

    @property
    def restricted_apis(self) -> str:
        """The APIs that need the admin key (Triton's restricted-API categories)."""
        return ",".join(RESTRICTED_APIS)

    @property
    def client_host(self) -> str:
        return "127.0.0.1" if self.address in ("0.0.0.0", "") else self.address

    @property
    def http_url(self) -> str:
        return f"{self.client_host}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"{self.client_host}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.client_host}:{self.metrics_port}/metrics"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now on ``host``."""
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct TCP ports free right now on ``host``.

    The sockets stay bound until all are picked: one at a time, the kernel may hand
    the same port out twice (CI once gave gRPC and metrics the same one, and the
    server refused to start).
    """
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
                 for _ in range(count)]
        for sock in socks:
            sock.bind((host, 0))
        return [int(sock.getsockname()[1]) for sock in socks]


def _stop_with_parent() -> None:
    """In the child before exec: SIGKILL when the launcher dies (Linux prctl).

    The server runs in its own session so that a terminal's Ctrl-C reaches only
    the launcher, which then stops it in order (SIGTERM, its drain, SIGKILL after the
    grace). A launcher that dies without doing so (killed with SIGKILL, crashed) must
    not leave an orphan server holding its ports: SIGTERM would not do, since a server
    whose poller is wedged by a half-copied version folder ignores it (measured:
    tests/integration/test_serve_cli.py). Its stubs exit within about 2 s of it.
    """
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_shm_regions(prefix: str, shm_dir: Path = SHM_DIR) -> list[str]:
    """Remove the shared-memory regions whose names start with ``prefix``."""
    return _unlink_all(shm_dir.glob(f"{prefix}*"))


def remove_stale_shm_regions(shm_dir: Path = SHM_DIR) -> list[str]:
    """Remove regions left by servers of ours whose launcher process is gone.

    A server killed with SIGKILL leaves its Python-backend regions behind; the
    launcher's pid is in the name, so a region is stale once that pid is dead.
    """
    if not shm_dir.is_dir():
        return []
    stale = []
    for entry in shm_dir.iterdir():
        match = (_SHM_PREFIX_RE.match(entry.name) or _ADMISSION_RE.match(entry.name)
                 or _LEDGER_RE.match(entry.name))
        if match and not _pid_alive(int(match.group(1))):
            stale.append(entry)
    return _unlink_all(stale)


LIVE_PREFIX = "kyc-live-"
_LIVE_RE = re.compile(rf"^{LIVE_PREFIX}(\d+)-")


def remove_stale_live_copies(parent: Path) -> list[str]:
    """Remove the live copies (``kyc-live-<launcher pid>-*``) in ``parent`` of servers
    whose launcher is gone: a ``kyc serve`` killed with SIGKILL cannot remove its own."""
    if not parent.is_dir():
        return []
    removed = []
    for entry in parent.iterdir():
        match = _LIVE_RE.match(entry.name)
        if match and entry.is_dir() and not _pid_alive(int(match.group(1))):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry.name)
    return removed


def _unlink_all(entries: Iterable[Path]) -> list[str]:
    """Unlink each entry; the names of those removed (already gone is fine)."""
    removed = []
    for entry in entries:
        with contextlib.suppress(FileNotFoundError):
            if entry.is_dir() and not entry.is_symlink():  # a ledger folder: ours, 0700
                shutil.rmtree(entry)
            else:
                entry.unlink()
            removed.append(entry.name)
    return removed


def _http_get(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""
    except (urllib.error.URLError, OSError):
        return 0, b""


def is_ready(http_url: str, timeout: float = 2.0) -> bool:
    """True when ``GET /v2/health/ready`` answers 200."""
    return _http_get(f"http://{http_url}/v2/health/ready", timeout)[0] == 200


def repository_index(http_url: str, admin_key: str | None = None) -> list[dict]:
    """The server's repository index: name, version, state and reason per model.

    The model-repository API is locked by a key (HTTP header ``admin-key``).
    """
    headers = {"admin-key": admin_key} if admin_key else {}
    req = urllib.request.Request(
        f"http://{http_url}/v2/repository/index", method="POST", data=b"", headers=headers
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        return list(json.loads(resp.read() or b"[]"))


class TritonServer:
    """One ``tritonserver`` process in poll mode, with its own backend directory.

    ``install`` defaults to a backend directory assembled from the PyPI wheel;
    pass ``triton_home`` to use a full installation (``/opt/tritonserver``).
    """

    def __init__(
        self,
        options: ServerOptions,
        *,
        triton_home: Path | None = None,
        log_file: Path | None = None,
    ) -> None:
        self.options = options
        self.triton_home = triton_home
        self.log_file = log_file
        self.shm_prefix = f"kyc_{os.getpid()}_{secrets.token_hex(3)}_"
        # Without a key given, the restricted APIs are locked by one nobody else
        # knows (poll mode needs no API to pick up new versions).
        self.admin_key = options.admin_key or secrets.token_urlsafe(24)
        self.process: subprocess.Popen[bytes] | None = None
        self.token_key_id: str | None = None
        self.install: TritonInstall | None = None
        self._backend_tmp: Path | None = None
        self._log_handle: IO[bytes] | None = None
        # Watch mode: the live copy Triton reads, and what keeps it in line.
        self.live: LiveRepository | None = None
        self.seed_events: list[Event] = []
        self.watcher = None
        self._live_tmp: Path | None = None

    @property
    def served_repository(self) -> Path:
        """The folder Triton reads: the live copy in watch mode, else the repository."""
        return self.live.live if self.live is not None else self.options.model_repository

    # -- life cycle -------------------------------------------------------
    def command(self) -> list[str]:
        """The tritonserver command line."""
        assert self.install is not None
        opts = self.options
        key = self.admin_key
        cmd = [
            str(self.install.server),
            f"--model-repository={self.served_repository}",
            *([f"--model-control-mode={opts.model_control}",
               *(f"--load-model={m}" for m in opts.load_models)]
              if opts.model_control == "explicit" else
              ["--model-control-mode=poll", f"--repository-poll-secs={opts.poll_secs}"]),
            f"--backend-directory={self.install.backend_dir}",
            f"--http-address={opts.address}",
            f"--http-port={opts.http_port}",
            f"--grpc-address={opts.address}",
            f"--grpc-port={opts.grpc_port}",
            f"--metrics-address={opts.address}",
            f"--metrics-port={opts.metrics_port}",
            "--metrics-config=summary_latencies=true",
            # Not strict: Triton 2.51 keeps the record of a version that failed to load
            # (UNAVAILABLE with its error) for good, and strict readiness then reports the
            # whole server not ready for good, while the previous version serves on
            # (measured: tests/integration/test_hand_drops.py), so one refused drop would
            # take every replica out of its Service. Ready still means the start-up load
            # is done (every model loaded: --exit-on-error) and no stop has begun; which
            # versions serve and which were refused is `kyc repo status`.
            "--strict-readiness=false",
            f"--exit-on-error={'true' if opts.exit_on_error else 'false'}",
            f"--exit-timeout-secs={opts.exit_timeout_secs}",
            f"--log-verbose={opts.log_verbose}",
            f"--backend-config=python,shm-region-prefix-name={self.shm_prefix}",
            f"--backend-config=python,shm-default-byte-size={PYTHON_SHM_DEFAULT_BYTES}",
            f"--grpc-infer-allocation-pool-size={GRPC_INFER_ALLOCATION_POOL_SIZE}",
            f"--http-restricted-api={opts.restricted_apis}:admin-key={key}",
            f"--grpc-restricted-protocol={opts.restricted_apis}:admin-key={key}",
            *self._client_key_args(),
        ]
        if self.install.cache_dir is not None:
            cmd.append(f"--cache-directory={self.install.cache_dir}")
        if self.install.library_dirs:
            # Local CPU runtime: no CUDA, so no pinned host memory pool.
            cmd.append("--pinned-memory-pool-byte-size=0")
        cmd.extend(self.options.extra_args)
        return cmd

    @cached_property
    def inference_lock(self) -> InferenceLock:
        """The client key inference needs here (:func:`inference_lock`), resolved once."""
        return inference_lock(self.options)

    def _client_key_args(self) -> list[str]:
        from kyc_client.channel import CLIENT_KEY_NAME

        key = self.inference_lock.key
        if key is None:
            return []
        locked = f"{','.join(CLIENT_APIS)}:{CLIENT_KEY_NAME}={key}"
        return [f"--http-restricted-api={locked}", f"--grpc-restricted-protocol={locked}"]

    def start(self) -> None:
        """Start the server process (returns at once; see :meth:`wait_ready`)."""
        if self.process is not None:
            raise ServerError("server already started")
        lock = self.inference_lock  # a key it cannot use stops it before anything runs
        log.info("inference: %s", f"needs the client key, from {lock.origin}" if lock.key
                 else lock.origin)
        stale = remove_stale_shm_regions()
        if stale:
            log.info("removed %d stale shared-memory regions of dead servers", len(stale))
        if self.triton_home is not None:
            self.install = system_install(self.triton_home)
        else:
            self._backend_tmp = Path(tempfile.mkdtemp(prefix="kyc-triton-backends-"))
            self.install = assemble_backends(self._backend_tmp)
        stdout: int | IO[bytes] | None = None
        if self.log_file is not None:
            self._log_handle = open(self.log_file, "ab")  # noqa: SIM115 (closed in stop)
            stdout = self._log_handle
        if self.options.watching:
            self._seed_live_repository()
        else:
            precompile_python_models(self.options.model_repository)
        env = token_key_environment(self.install.environment(), self.options)
        if self.options.cpu_runtime:
            from kyc.onnx_runtime.settings import CPU_RUNTIME_ENV

            env[CPU_RUNTIME_ENV] = self.options.cpu_runtime
        self.token_key_environment = {k: v for k, v in env.items() if k.startswith("KYC_TOKEN")}
        from kyc.keys import key_id, load_key

        # its public name: replicas behind one service must all print the same
        self.token_key_id = key_id(load_key(env))
        self.process = subprocess.Popen(
            self.command(),
            env=env,
            stdout=stdout,
            stderr=subprocess.STDOUT if stdout is not None else None,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # our signal handling decides when it stops
            preexec_fn=_stop_with_parent,
        )
        log.info("tritonserver pid %d started (%s)", self.process.pid, self.install.origin)
        if self.live is not None:
            self._start_watcher()

    def _seed_live_repository(self) -> None:
        """Copy the sound part of the repository into a fresh live folder."""
        opts = self.options
        if opts.live_dir is not None:
            opts.live_dir.mkdir(parents=True, exist_ok=True)
        parent = opts.live_dir or Path(tempfile.gettempdir())
        stale = remove_stale_live_copies(parent)
        if stale:
            log.info("removed %d live copies of dead servers from %s", len(stale), parent)
        self._live_tmp = Path(tempfile.mkdtemp(prefix=f"{LIVE_PREFIX}{os.getpid()}-",
                                               dir=parent))
        self.live = LiveRepository(opts.model_repository.resolve(), self._live_tmp / "models",
                                   self._live_tmp / "staging", quiet_s=opts.quiet_secs)
        self.seed_events = self.live.sync()

    def _start_watcher(self) -> None:
        from kyc_tools.operator.watcher import RepositoryWatcher

        assert self.live is not None
        opts = self.options
        self.watcher = RepositoryWatcher(self.live, index=self.index,
                                         metrics_url=opts.metrics_url, poll_s=opts.poll_secs,
                                         polling_observer=opts.watch_polling)
        try:
            self.watcher.serve_status(opts.address, opts.status_port)
        except OSError as exc:
            raise ServerError(f"the repository status port {opts.status_port}: {exc} "
                              "(--status-port)") from None
        self.watcher.start(self.seed_events)

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Block until every model is ready, or raise :class:`ServerError`."""
        assert self.process is not None, "start() first"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                raise ServerError(f"tritonserver exited with code {code} before it was ready")
            if is_ready(self.options.http_url, timeout=1.0):
                return
            time.sleep(0.25)
        raise ServerError(f"tritonserver not ready after {timeout:.0f} s")

    def index(self) -> list[dict]:
        """The repository index of this server (it knows its own admin key)."""
        return repository_index(self.options.http_url, self.admin_key)

    def poll(self) -> int | None:
        """The exit code once the server has stopped, else None."""
        return None if self.process is None else self.process.poll()

    def stop(self, grace: float = 30.0) -> int | None:
        """Stop the server (SIGTERM, then SIGKILL after ``grace`` seconds) and clean up.

        Removes the server's shared-memory regions and the assembled backend
        directory. Returns the server's exit code.
        """
        code = None
        if self.watcher is not None:
            self.watcher.stop()
            self.watcher = None
        if self.process is not None:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
                try:
                    self.process.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    log.warning("tritonserver did not stop in %.0f s: killing it", grace)
            code = self.process.poll()
            # The stubs are in the server's process group: none may outlive it.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
            code = self.process.wait() if code is None else code
        removed = remove_shm_regions(self.shm_prefix)
        if self.process is not None:
            from kyc.decision.ledger import shm_folder
            from kyc.intake.admission import ENTRIES, shm_path

            removed += _unlink_all([*(shm_path(self.process.pid, e) for e in ENTRIES),
                                    shm_folder(self.process.pid)])
        if removed:
            log.info("removed %d shared-memory regions left by the server", len(removed))
        if self._backend_tmp is not None:
            shutil.rmtree(self._backend_tmp, ignore_errors=True)
            self._backend_tmp = None
        if self._live_tmp is not None:
            shutil.rmtree(self._live_tmp, ignore_errors=True)
            self._live_tmp = None
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None
        return code

    def __enter__(self) -> TritonServer:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop(grace=5)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_until_ready(server: TritonServer, *, timeout_s: float, stop_grace_s: float,
                      tail_chars: int = 2000) -> TritonServer:
    """Start a private ``server`` and wait until every model is ready: the launcher of
    the bench, ``kyc eval`` and the tests. One that does not get there is stopped
    (SIGKILL after ``stop_grace_s``) and the :class:`ServerError` raised gives the cause,
    then the last ``tail_chars`` of its log, read before it was stopped."""
    try:
        server.start()
        server.wait_ready(timeout=timeout_s)
    except ServerError as exc:
        log_file = server.log_file
        tail = log_file.read_text(errors="replace")[-tail_chars:] \
            if log_file is not None and log_file.exists() else ""
        server.stop(grace=stop_grace_s)
        raise ServerError(f"{exc}\n--- server log tail ---\n{tail}") from None
    return server


class StubWatch:
    """Finds models whose Python stubs died.

    Triton 2.51's Python backend does not restart a stub that died (killed, out of
    memory, crashed): every later request of that model fails with INTERNAL "Stub
    process '<instance>' is not healthy.", while the server and the model still
    report ready (measured: tests/integration/test_faults.py). A model is dead when it
    had stub processes, is READY in the repository index, and has none left on
    ``confirmations`` checks in a row (a version switch starts the new stub before
    the old one exits, so it never has zero).
    """

    def __init__(self, server: TritonServer, confirmations: int = 2) -> None:
        assert server.process is not None
        self.server, self.confirmations = server, confirmations
        self.watched = set(stubs_per_model(server.process.pid))
        self._misses: dict[str, int] = {}

    def dead(self) -> list[str]:
        assert self.server.process is not None
        counts = stubs_per_model(self.server.process.pid)
        self.watched |= set(counts)  # models loaded since
        missing = [m for m in sorted(self.watched) if counts.get(m, 0) == 0]
        if missing:
            try:
                ready = {m["name"] for m in self.server.index() if m.get("state") == "READY"}
            except (OSError, ValueError):
                ready = set()
            missing = [m for m in missing if m in ready]
        self._misses = {m: self._misses.get(m, 0) + 1 for m in missing}
        return [m for m, n in self._misses.items() if n >= self.confirmations]
