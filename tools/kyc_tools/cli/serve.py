"""``kyc serve``: a real Triton server over a model repository, until a signal stops it.

The steps of :func:`cmd_serve`, in order: the options checked, the repository checked
(unless watched: the watcher judges each model itself), production's requirements,
the server started and waited for, the banner printed, the server supervised (its
Python stubs watched), then drained and stopped on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kyc_tools.cli.repo import DEFAULT_REPOSITORY, DEFAULT_STATUS_PORT
from kyc_tools.operator.server import DEFAULT_HOST


# -- the parser ---------------------------------------------------------------------
def add_serve_parser(sub: argparse._SubParsersAction) -> None:
    serve = sub.add_parser(
        "serve", help="run a real Triton server over a model repository",
        epilog="Inference answers only calls carrying the client key (header kyc-client-key): "
               "KYC_CLIENT_KEY (>= 16 of letters, digits, ._~+/-; e.g. openssl rand -hex 24), "
               "else a random key made on first start in ~/.config/kyc/client.key (mode 0600; "
               "--production refuses to start without KYC_CLIENT_KEY). The kyc SDK, kyc verify, "
               "kyc web and kyc bench on this machine send it from the same variable, else "
               "from that file. --open-inference: no key, every caller of the ports may infer "
               "(the operator's choice, said at start).")
    _add_server_options(serve)
    _add_lifecycle_options(serve)
    serve.set_defaults(func=cmd_serve)


def _add_server_options(serve: argparse.ArgumentParser) -> None:
    """What Triton serves, where, and how it logs."""
    serve.add_argument("--model-repository", type=Path, default=DEFAULT_REPOSITORY)
    serve.add_argument("--http-port", type=int, default=8000)
    serve.add_argument("--grpc-port", type=int, default=8001)
    serve.add_argument("--metrics-port", type=int, default=8002)
    serve.add_argument("--host", "--address", dest="address", metavar="ADDRESS",
                       default=DEFAULT_HOST,
                       help="address HTTP, gRPC, metrics and the repository status listen "
                            "on (default: this machine only; 0.0.0.0: every interface, as "
                            "the image does)")
    serve.add_argument("--poll-secs", type=int, default=2, help="repository poll interval")
    serve.add_argument(
        "--triton-home",
        type=Path,
        default=Path(os.environ["KYC_TRITON_HOME"]) if os.environ.get("KYC_TRITON_HOME") else None,
        help="a full Triton installation (e.g. /opt/tritonserver); default: the PyPI wheel",
    )
    serve.add_argument(
        "--admin-key-env",
        default="KYC_ADMIN_KEY",
        help="environment variable holding the admin key (model-repository, shared-memory, "
             "trace and logging APIs); unset outside --production: a random key in "
             "~/.config/kyc/admin.key (made on first start, mode 0600)",
    )
    serve.add_argument("--cpu-runtime", choices=("configured", "onnxruntime"),
                       default="configured",
                       help="the ONNX models on the CPU: as their configs say (OpenVINO), or "
                            "onnxruntime alone (KYC_CPU_RUNTIME=onnxruntime does the same); "
                            "GPU instances take TensorRT either way")
    serve.add_argument("--log-file", type=Path, default=None, help="server log (default: stderr)")
    serve.add_argument("--log-verbose", type=int, default=0)
    serve.add_argument("--ready-timeout", type=float, default=180.0)


def _add_lifecycle_options(serve: argparse.ArgumentParser) -> None:
    """Stopping and draining, the repository watcher, the stub watch, production mode."""
    serve.add_argument("--stop-grace", type=float, default=30.0,
                       help="seconds from SIGTERM to SIGKILL of tritonserver")
    serve.add_argument("--drain-secs", type=float, default=0.0,
                       help="on SIGTERM, first keep serving for up to this long until no "
                            "liveness session is open and no request pending, then stop "
                            "Triton (which fails open sessions); 0: stop at once")
    serve.add_argument("--exit-timeout-secs", type=int, default=10,
                       help="once told to stop, how long Triton lets in-flight requests "
                            "finish (under --stop-grace; open liveness sessions fail then: "
                            "see --drain-secs)")
    serve.add_argument("--skip-check", action="store_true",
                       help="start even if some models cannot be served")
    _add_watch_options(serve)
    serve.add_argument(
        "--require-token-key", action="store_true",
        help="refuse to start without KYC_TOKEN_KEY or KYC_TOKEN_KEY_FILE (the liveness "
             "token key); without this flag a key file is created on first start "
             "(~/.config/kyc/token.key)")
    serve.add_argument(
        "--stub-watch-secs", type=float, default=2.0,
        help="check the Python stubs this often; a model whose stubs died stops the "
             "server with exit code 3 (Triton 2.51 does not restart them); 0: off")
    serve.add_argument(
        "--production", action="store_true",
        help="refuse to start without KYC_ADMIN_KEY (>= 16 characters), a token key and "
             "KYC_CLIENT_KEY unless --open-inference (also set by KYC_PRODUCTION=1; the "
             "image's mode)")
    serve.add_argument(
        "--open-inference", action="store_true",
        help="let every caller of the ports infer, without the client key (default: "
             "inference needs it; see below)")


def _add_watch_options(serve: argparse.ArgumentParser) -> None:
    serve.add_argument("--watch", action=argparse.BooleanOptionalAction, default=True,
                       help="take hand-dropped version folders, configs and models once "
                            "complete and checked (Triton reads a live copy); --no-watch: "
                            "Triton polls the repository itself")
    serve.add_argument("--quiet-secs", type=float, default=None,
                       help="a dropped folder is taken once it has not changed for this long "
                            "(default: kyc_tools.operator.live.QUIET_S, 2 s)")
    serve.add_argument("--watch-polling", action="store_true",
                       help="look for changes by stat instead of inotify (NFS and other "
                            "network filesystems)")
    serve.add_argument("--live-dir", type=Path, default=None,
                       help="where the live copy Triton reads goes (default: the temp folder)")
    serve.add_argument("--status-port", type=int, default=DEFAULT_STATUS_PORT,
                       help="the repository watcher's /metrics and /status (kyc repo status)")


# -- the command --------------------------------------------------------------------
@dataclass
class _Signals:
    """SIGINT and SIGTERM: the first stops the server, a second stops draining."""

    stop: threading.Event = field(default_factory=threading.Event)
    hurry: threading.Event = field(default_factory=threading.Event)
    received: list[int] = field(default_factory=list)

    def install(self) -> _Signals:
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)
        return self

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.received.append(signum)
        (self.hurry if len(self.received) > 1 else self.stop).set()


def cmd_serve(args: argparse.Namespace) -> int:
    repository = args.model_repository.resolve()
    refused = _check_options(args) or _check_repository(args, repository)
    if refused is not None:
        return refused
    admin_key = os.environ.get(args.admin_key_env) or None
    production = args.production or os.environ.get("KYC_PRODUCTION", "") in ("1", "true")
    if production and _production_refused(admin_key, args.open_inference):
        return 1
    key_origin = f"${args.admin_key_env}"
    if admin_key is None:
        admin_key, key_origin = _development_admin_key()
    server = _make_server(args, repository, admin_key, production)
    signals = _Signals().install()
    started = time.monotonic()
    refused = _start(server, args, repository)
    if refused is not None:
        return refused
    if not _wait_ready(server, args, signals, started):
        return 0 if signals.received else 1
    _print_banner(server, repository, key_origin, production, started)
    stopped = _supervise(server, args, signals)
    if stopped is not None:
        return stopped
    return _shut_down(server, args, repository, signals)


def _check_options(args: argparse.Namespace) -> int | None:
    if args.exit_timeout_secs >= args.stop_grace:
        print(f"kyc serve: --exit-timeout-secs ({args.exit_timeout_secs}) must be under "
              f"--stop-grace ({args.stop_grace:g}), or Triton is killed before it drains",
              file=sys.stderr)
        return 2
    return None


def _check_repository(args: argparse.Namespace, repository: Path) -> int | None:
    from kyc_tools.repo.check import check_repository

    if args.skip_check or args.watch:
        return None
    problems = check_repository(repository)
    if not problems:
        return None
    for problem in problems:
        print(problem, file=sys.stderr)
    print(
        f"kyc serve: {len(problems)} problem(s) in {repository}: not starting "
        "(fix them, or pass --skip-check)",
        file=sys.stderr,
    )
    return 1


def _development_admin_key() -> tuple[str, str]:
    """The admin key from its file (made on first start) and where it came from."""
    from kyc_tools.operator.server import default_admin_key_file, development_admin_key

    return development_admin_key(), str(default_admin_key_file())


def _production_refused(admin_key: str | None, open_inference: bool) -> bool:
    from kyc_tools.operator.server import production_problems

    problems = production_problems(admin_key, os.environ, open_inference)
    for problem in problems:
        print(f"kyc serve --production: {problem}", file=sys.stderr)
    return bool(problems)


def _make_server(args: argparse.Namespace, repository: Path, admin_key: str | None,
                 production: bool) -> Any:
    from kyc_tools.operator.server import ServerOptions, TritonServer

    options = ServerOptions(
        model_repository=repository,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        address=args.address,
        poll_secs=args.poll_secs,
        admin_key=admin_key,
        # the client key: KYC_CLIENT_KEY, else the key file (runtime.server.inference_lock)
        open_inference=args.open_inference,
        cpu_runtime="" if args.cpu_runtime == "configured" else args.cpu_runtime,
        log_verbose=args.log_verbose,
        exit_timeout_secs=args.exit_timeout_secs,
        require_token_key=args.require_token_key or production,
        production=production,
        watch=args.watch,
        **({"quiet_secs": args.quiet_secs} if args.quiet_secs is not None else {}),
        watch_polling=args.watch_polling,
        live_dir=args.live_dir,
        status_port=args.status_port,
    )
    return TritonServer(options, triton_home=args.triton_home, log_file=args.log_file)


def _start(server: Any, args: argparse.Namespace, repository: Path) -> int | None:
    """Start tritonserver; an exit status when it cannot start or cannot serve a model."""
    from kyc_tools.operator.server import ServerError
    from kyc_tools.operator.triton import TritonNotFoundError

    try:
        server.start()
    except (TritonNotFoundError, ServerError, OSError) as exc:
        print(f"kyc serve: cannot start tritonserver: {exc}", file=sys.stderr)
        server.stop(grace=1)
        return 1
    unservable = [e for e in server.seed_events if e.kind == "model_refused"]
    if unservable and not args.skip_check:
        for event in server.seed_events:
            print(f"kyc serve: {event}", file=sys.stderr)
        print(f"kyc serve: {len(unservable)} model(s) of {repository} cannot be served: not "
              "starting (fix them, or pass --skip-check to serve the others)", file=sys.stderr)
        server.stop(grace=5)
        return 1
    return None


def _wait_ready(server: Any, args: argparse.Namespace, signals: _Signals,
                started: float) -> bool:
    """Wait for readiness; when it does not come, stop the server (saying why unless a
    signal stopped the wait) and return False."""
    from kyc_tools.operator.server import is_ready

    while not signals.stop.is_set() and time.monotonic() - started < args.ready_timeout:
        if server.poll() is not None:
            break
        if is_ready(server.options.http_url, timeout=1.0):
            return True
        signals.stop.wait(0.25)
    code = server.poll()
    server.stop(grace=10)
    if not signals.received:
        reason = (
            f"exited with code {code}" if code is not None else f"not ready after "
            f"{args.ready_timeout:.0f} s"
        )
        print(f"kyc serve: tritonserver {reason}", file=sys.stderr)
    return False


def _server_version(http_url: str) -> str:
    try:
        with urllib.request.urlopen(f"http://{http_url}/v2", timeout=2) as resp:
            return str(json.loads(resp.read()).get("version", "?"))
    except (OSError, ValueError):
        return "?"


def _print_banner(server: Any, repository: Path, key_origin: str, production: bool,
                  started: float) -> None:
    options = server.options
    try:
        models = server.index()
    except (OSError, ValueError):
        models = []
    host = options.address or "0.0.0.0"
    print(
        f"kyc serve: Triton {_server_version(options.http_url)} ready in "
        f"{time.monotonic() - started:.1f} s ({server.install.origin if server.install else '?'})\n"
        f"  HTTP     http://{host}:{options.http_port}\n"
        f"  gRPC     {host}:{options.grpc_port}\n"
        f"  metrics  http://{host}:{options.metrics_port}/metrics\n"
        f"  models   "
        + (", ".join(f"{m['name']}:{m.get('version', '?')} {m.get('state', '?')}" for m in models)
           or "none")
        + f"\n  repository {repository} " + _repository_mode(server) + "\n"
        f"  {options.restricted_apis} APIs need the admin key, from {key_origin}"
        + ("; production: keys required" if production else "")
        + "\n  inference " + _inference_line(server.inference_lock)
        + f"\n  liveness token key id {server.token_key_id} (the same on every replica)"
        + "\nPress Ctrl-C to stop.",
        flush=True,
    )


def _inference_line(lock: Any) -> str:
    """Where the client key comes from (never the key), or that there is none."""
    if lock.key is None:
        return f"{lock.origin}: the operator's choice"
    return f"needs the client key (kyc-client-key header), from {lock.origin}"


def _repository_mode(server: Any) -> str:
    opts = server.options
    if server.watcher is None:
        return f"(Triton polls it every {opts.poll_secs} s: copy versions in with kyc repo publish)"
    refused = [e for e in server.seed_events if e.kind.endswith("refused")]
    return (f"(watched: a dropped folder is served once unchanged for {opts.quiet_secs:g} s "
            f"and checked; {len(refused)} refused at start)\n"
            f"  repository status  http://{opts.client_host}:{server.watcher.status_port}/status"
            " (kyc repo status)")


def _supervise(server: Any, args: argparse.Namespace, signals: _Signals) -> int | None:
    """Serve until a signal or until tritonserver exits; exit status 3 (the server
    stopped) when a model's Python stubs died."""
    from kyc_tools.operator.server import StubWatch

    watch = StubWatch(server) if args.stub_watch_secs > 0 else None
    next_watch = time.monotonic() + args.stub_watch_secs
    while not signals.stop.is_set():
        if server.poll() is not None:
            break
        if watch is not None and time.monotonic() >= next_watch:
            next_watch = time.monotonic() + args.stub_watch_secs
            dead = watch.dead()
            if dead:
                # Triton would keep answering INTERNAL for these models while reporting
                # ready: stop, so that the supervisor restarts a whole server.
                print(f"kyc serve: the Python stub of {', '.join(dead)} died and Triton does "
                      "not restart it: stopping (exit 3) so that the service is restarted",
                      file=sys.stderr, flush=True)
                server.stop(grace=args.stop_grace)
                return 3
        signals.stop.wait(0.5)
    return None


def _shut_down(server: Any, args: argparse.Namespace, repository: Path,
               signals: _Signals) -> int:
    code = server.poll()
    if code is not None and not signals.received:
        server.stop(grace=5)
        print(f"kyc serve: tritonserver stopped on its own (exit code {code})", file=sys.stderr)
        return code or 1
    if args.drain_secs > 0 and code is None:
        _drain(server.options.metrics_url, repository, args.drain_secs, signals.hurry)
    print("kyc serve: stopping", file=sys.stderr, flush=True)
    server.stop(grace=args.stop_grace)
    print("kyc serve: stopped", file=sys.stderr, flush=True)
    return 0


def _drain(metrics_url: str, repository: Path, seconds: float, hurry: threading.Event) -> None:
    """Keep serving until open liveness sessions and pending requests are done
    (kyc_tools.operator.drain: Triton itself fails open sessions once told to stop)."""
    from kyc_tools.operator.drain import drain, read_server_load
    from kyc_tools.repo.config import model_parameters

    try:
        idle_s = float(model_parameters(repository, "liveness_sequence")["idle_ttl_s"])
    except (OSError, KeyError, ValueError):
        idle_s = 30.0
    print(f"kyc serve: draining for up to {seconds:g} s (open liveness sessions, pending "
          "requests; a second signal stops at once)", file=sys.stderr, flush=True)
    result = drain(lambda: read_server_load(metrics_url), deadline_s=seconds, idle_s=idle_s,
                   interrupted=hurry)
    print(f"kyc serve: drain ended ({result.reason}) after {result.waited_s:.1f} s, "
          f"{result.open_sessions:g} liveness sessions open", file=sys.stderr, flush=True)
