"""``kyc``: the project's command line (serve, verify, repository tools, model weights)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
import urllib.request
from pathlib import Path

from kyc import __version__

log = logging.getLogger("kyc")

DEFAULT_REPOSITORY = Path("model_repository")
# kyc.bench.core.GROUPS (not imported: the CLI starts without numpy)
BENCH_GROUPS = ("kyc", "batching", "liveness", "document", "publish")


def _setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


# -- serve --------------------------------------------------------------------------
def _server_version(http_url: str) -> str:
    try:
        with urllib.request.urlopen(f"http://{http_url}/v2", timeout=2) as resp:
            return str(json.loads(resp.read()).get("version", "?"))
    except (OSError, ValueError):
        return "?"


def cmd_serve(args: argparse.Namespace) -> int:
    from kyc.repo.check import check_repository
    from kyc.runtime.server import ServerError, ServerOptions, TritonServer
    from kyc.runtime.triton import TritonNotFoundError

    repository = args.model_repository.resolve()
    if args.exit_timeout_secs >= args.stop_grace:
        print(f"kyc serve: --exit-timeout-secs ({args.exit_timeout_secs}) must be under "
              f"--stop-grace ({args.stop_grace:g}), or Triton is killed before it drains",
              file=sys.stderr)
        return 2
    if not args.skip_check and not args.watch:
        problems = check_repository(repository)
        if problems:
            for problem in problems:
                print(problem, file=sys.stderr)
            print(
                f"kyc serve: {len(problems)} problem(s) in {repository}: not starting "
                "(fix them, or pass --skip-check)",
                file=sys.stderr,
            )
            return 1
    admin_key = os.environ.get(args.admin_key_env) or None
    production = args.production or os.environ.get("KYC_PRODUCTION", "") in ("1", "true")
    if production:
        from kyc.runtime.server import production_problems

        problems = production_problems(admin_key, dict(os.environ))
        if problems:
            for problem in problems:
                print(f"kyc serve --production: {problem}", file=sys.stderr)
            return 1
    options = ServerOptions(
        model_repository=repository,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        address=args.address,
        poll_secs=args.poll_secs,
        admin_key=admin_key,
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
    server = TritonServer(options, triton_home=args.triton_home, log_file=args.log_file)

    stop = threading.Event()
    hurry = threading.Event()  # a second signal: stop draining
    received: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        received.append(signum)
        (hurry if len(received) > 1 else stop).set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    started = time.monotonic()
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
    from kyc.runtime.server import is_ready

    ready = False
    while not stop.is_set() and time.monotonic() - started < args.ready_timeout:
        if server.poll() is not None:
            break
        if is_ready(options.http_url, timeout=1.0):
            ready = True
            break
        stop.wait(0.25)
    if not ready:
        code = server.poll()
        server.stop(grace=10)
        if received:
            return 0
        reason = (
            f"exited with code {code}" if code is not None else f"not ready after "
            f"{args.ready_timeout:.0f} s"
        )
        print(f"kyc serve: tritonserver {reason}", file=sys.stderr)
        return 1

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
        "  model-repository API: "
        + (f"key from ${args.admin_key_env}" if admin_key else "locked (no key set)")
        + (f"\n  production: {options.restricted_apis} APIs need the key" if production else "")
        + f"\n  liveness token key id {server.token_key_id} (the same on every replica)"
        + "\nPress Ctrl-C to stop.",
        flush=True,
    )
    from kyc.runtime.server import StubWatch

    watch = StubWatch(server) if args.stub_watch_secs > 0 else None
    next_watch = time.monotonic() + args.stub_watch_secs
    while not stop.is_set():
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
        stop.wait(0.5)
    code = server.poll()
    if code is not None and not received:
        server.stop(grace=5)
        print(f"kyc serve: tritonserver stopped on its own (exit code {code})", file=sys.stderr)
        return code or 1
    if args.drain_secs > 0 and code is None:
        _drain(options.metrics_url, repository, args.drain_secs, hurry)
    print("kyc serve: stopping", file=sys.stderr, flush=True)
    server.stop(grace=args.stop_grace)
    print("kyc serve: stopped", file=sys.stderr, flush=True)
    return 0


def _repository_mode(server) -> str:
    opts = server.options
    if server.watcher is None:
        return f"(Triton polls it every {opts.poll_secs} s: copy versions in with kyc repo publish)"
    refused = [e for e in server.seed_events if e.kind.endswith("refused")]
    return (f"(watched: a dropped folder is served once unchanged for {opts.quiet_secs:g} s "
            f"and checked; {len(refused)} refused at start)\n"
            f"  repository status  http://{opts.client_host}:{server.watcher.status_port}/status"
            " (kyc repo status)")


def _drain(metrics_url: str, repository: Path, seconds: float, hurry: threading.Event) -> None:
    """Keep serving until open liveness sessions and pending requests are done
    (kyc.runtime.drain: Triton itself fails open sessions once told to stop)."""
    from kyc.repo.config import model_parameters
    from kyc.runtime.drain import drain, read_server_load

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


# -- repo -------------------------------------------------------------------------
def cmd_repo_check(args: argparse.Namespace) -> int:
    from kyc.repo.check import check_repository

    problems = check_repository(args.directory)
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} problem(s) in {args.directory}", file=sys.stderr)
        return 1
    count = sum(1 for p in args.directory.iterdir() if p.is_dir())
    print(f"OK: {count} models in {args.directory}")
    return 0


def cmd_repo_publish(args: argparse.Namespace) -> int:
    from kyc.repo.publish import PublishError, publish

    try:
        result = publish(args.repository, args.model, args.src, force=args.force)
    except PublishError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        print(f"kyc repo publish: {exc}", file=sys.stderr)
        return 1
    for problem in result.problems:
        print(f"warning (forced): {problem}", file=sys.stderr)
    print(result.version)
    return 0


DEFAULT_STATUS_PORT = 8003


def cmd_repo_status(args: argparse.Namespace) -> int:
    from kyc.runtime.watcher import format_status, read_status

    try:
        status = read_status(args.url)
    except (OSError, ValueError) as exc:
        print(f"kyc repo status: no kyc serve status at {args.url} ({exc}); is it running "
              "with --watch (the default)?", file=sys.stderr)
        return 1
    print(json.dumps(status, indent=1) if args.json else format_status(status))
    return 0


def cmd_repo_seed(args: argparse.Namespace) -> int:
    from kyc.repo.seed import SeedError, seed

    try:
        seeded = seed(args.src, args.dest)
    except SeedError as exc:
        print(f"kyc repo seed: {exc}", file=sys.stderr)
        return 1
    print(f"seeded {args.dest} from {args.src}" if seeded
          else f"{args.dest} already holds a repository: left as it is")
    return 0


# -- health -----------------------------------------------------------------------
DEFAULT_HEALTH_URL = "127.0.0.1:8000"
# In the image, `kyc serve` is PID 1 (the ENTRYPOINT, exec form).
ENTRYPOINT_CMDLINE = Path("/proc/1/cmdline")


def entrypoint_http_url(cmdline: Path = ENTRYPOINT_CMDLINE) -> str | None:
    """The HTTP host:port of the ``kyc serve`` whose command line is ``cmdline``, else None.

    The image's HEALTHCHECK runs ``kyc health`` with no --url: it must follow the port that
    options after the image name gave (``docker run ... kyc-triton --http-port 9000``), so
    it reads them from the entrypoint's own command line, parsed by the same parser.
    """
    from kyc.runtime.server import ServerOptions

    try:
        argv = [a.decode(errors="replace") for a in cmdline.read_bytes().split(b"\0") if a]
    except OSError:
        return None
    start = next((i for i, a in enumerate(argv) if Path(a).name == "kyc"), None)
    if start is None or argv[start + 1:start + 2] != ["serve"]:
        return None
    try:
        args = build_parser().parse_args(argv[start + 1:])
    except SystemExit:  # argparse's way to refuse; that server would not have started
        return None
    return ServerOptions(Path(), http_port=args.http_port, address=args.address).http_url


def cmd_health(args: argparse.Namespace) -> int:
    from kyc.runtime.server import is_ready

    url = args.url or entrypoint_http_url() or DEFAULT_HEALTH_URL
    return 0 if is_ready(url, timeout=args.timeout) else 1


# -- bench ------------------------------------------------------------------------
def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text}") \
            from None
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError("concurrency levels must be at least 1")
    return levels


def bench_output_dir(json_path: Path | None, out: Path | None) -> Path:
    """Where the CSVs and plots go: --out, else beside the JSON file, else ./bench-results."""
    if out is not None:
        return out
    if json_path is not None:
        return json_path.parent / f"{json_path.stem}-files"
    return Path("bench-results")


def cmd_bench(args: argparse.Namespace) -> int:
    from kyc.bench.core import BenchError, BenchOptions, format_table, total_errors, write_json
    from kyc.bench.report import write_csvs, write_plots
    from kyc.bench.scenarios import run_bench
    from kyc.runtime.triton import TritonNotFoundError

    if args.compare:
        return _bench_compare(args)
    try:
        options = BenchOptions.for_run(quick=args.quick, model_repository=args.model_repository,
                                       groups=args.scenario, levels=args.levels or (),
                                       window_s=args.window_s, url=args.url,
                                       admin_key=args.admin_key)
        report = run_bench(options)
    except (BenchError, TritonNotFoundError, OSError) as exc:
        print(f"kyc bench: {exc}", file=sys.stderr)
        return 1
    out = bench_output_dir(args.json, args.out)
    out.mkdir(parents=True, exist_ok=True)
    plots = write_plots(report, out)
    report["files"] = {"csv": [str(p) for p in write_csvs(report, out)],
                       "plots": [str(p) for p in plots["files"]],
                       "plots_skipped": plots["skipped"]}
    print(format_table(report))
    print(f"CSV and plots in {out}" + (f" (plots skipped: {plots['skipped']})"
                                       if plots["skipped"] else ""))
    if args.json is not None:
        write_json(report, args.json)
    errors = total_errors(report)
    if errors:
        print(f"kyc bench: {errors} request(s) failed", file=sys.stderr)
    return 1 if errors else 0


def _bench_compare(args: argparse.Namespace) -> int:
    from kyc.bench.compare import format_comparison, run_comparison
    from kyc.bench.core import write_json

    if len(args.compare) < 2:
        print("kyc bench --compare: name at least two servers (--compare HOST:PORT twice)",
              file=sys.stderr)
        return 2
    levels = args.levels or (1,)
    try:
        report = run_comparison(args.compare, concurrency=levels[0], rounds=args.rounds,
                                window_s=args.window_s)
    except (OSError, RuntimeError) as exc:
        print(f"kyc bench --compare: {exc}", file=sys.stderr)
        return 1
    print(format_comparison(report))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        write_json(report, args.json)
    errors = sum(s["errors"] for s in report["servers"])
    if errors:
        print(f"kyc bench --compare: {errors} request(s) failed", file=sys.stderr)
    return 1 if errors else 0


# -- parser -------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kyc", description=__doc__)
    parser.add_argument("--version", action="version", version=f"kyc {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run a real Triton server over a model repository")
    serve.add_argument("--model-repository", type=Path, default=DEFAULT_REPOSITORY)
    serve.add_argument("--http-port", type=int, default=8000)
    serve.add_argument("--grpc-port", type=int, default=8001)
    serve.add_argument("--metrics-port", type=int, default=8002)
    serve.add_argument("--address", default="0.0.0.0", help="address to listen on")
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
        help="environment variable holding the model-repository API key",
    )
    serve.add_argument("--log-file", type=Path, default=None, help="server log (default: stderr)")
    serve.add_argument("--log-verbose", type=int, default=0)
    serve.add_argument("--ready-timeout", type=float, default=180.0)
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
    serve.add_argument("--watch", action=argparse.BooleanOptionalAction, default=True,
                       help="take hand-dropped version folders, configs and models once "
                            "complete and checked (Triton reads a live copy); --no-watch: "
                            "Triton polls the repository itself")
    serve.add_argument("--quiet-secs", type=float, default=None,
                       help="a dropped folder is taken once it has not changed for this long "
                            "(default: kyc.repo.live.QUIET_S, 2 s)")
    serve.add_argument("--watch-polling", action="store_true",
                       help="look for changes by stat instead of inotify (NFS and other "
                            "network filesystems)")
    serve.add_argument("--live-dir", type=Path, default=None,
                       help="where the live copy Triton reads goes (default: the temp folder)")
    serve.add_argument("--status-port", type=int, default=DEFAULT_STATUS_PORT,
                       help="the repository watcher's /metrics and /status (kyc repo status)")
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
        help="refuse to start without KYC_ADMIN_KEY (>= 16 characters) and a token key; "
             "the shared-memory, trace and logging APIs need the admin key too "
             "(also set by KYC_PRODUCTION=1; the image's mode)")
    serve.set_defaults(func=cmd_serve)

    repo = sub.add_parser("repo", help="model repository tools").add_subparsers(
        dest="repo_command", required=True
    )
    check = repo.add_parser("check", help="validate a model repository")
    check.add_argument("directory", type=Path, nargs="?", default=DEFAULT_REPOSITORY)
    check.set_defaults(func=cmd_repo_check)
    pub = repo.add_parser("publish", help="publish SRC as the next version of MODEL")
    pub.add_argument("model")
    pub.add_argument("src", type=Path, help="a version folder's content (or one file)")
    pub.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY)
    pub.add_argument("--force", action="store_true", help="publish even if the check fails")
    pub.set_defaults(func=cmd_repo_publish)
    status = repo.add_parser("status", help="what a running kyc serve serves, waits for, "
                                            "and refused (and why)")
    status.add_argument("--url", default=f"127.0.0.1:{DEFAULT_STATUS_PORT}",
                        help="host:port of kyc serve's --status-port")
    status.add_argument("--json", action="store_true", help="the raw status")
    status.set_defaults(func=cmd_repo_status)
    seed = repo.add_parser("seed", help="copy the repository SRC to DEST atomically, unless "
                                        "DEST already holds one (a shared volume's first start)")
    seed.add_argument("src", type=Path)
    seed.add_argument("dest", type=Path)
    seed.set_defaults(func=cmd_repo_seed)

    from kyc_export.cli import add_models_parser

    add_models_parser(sub)

    bench = sub.add_parser("bench", help="throughput and latency of the served pipeline "
                                          "against its in-process limit, batching off and "
                                          "the OCR peer, concurrency swept")
    bench.add_argument("--quick", action="store_true", help="a short run (under 3 minutes)")
    bench.add_argument("--json", type=Path, default=None, help="write the figures to FILE")
    bench.add_argument("--out", type=Path, default=None,
                       help="directory for the CSVs (perf_analyzer columns) and plots "
                            "(default: FILE-files beside --json, else ./bench-results)")
    bench.add_argument("--scenario", action="append", choices=BENCH_GROUPS, default=[],
                       help="run only this scenario group (repeatable; default: all)")
    bench.add_argument("--levels", type=_levels, default=None,
                       help="concurrency levels, e.g. 1,4,16 (default: each group's own)")
    bench.add_argument("--window-s", type=float, default=None,
                       help="measured window per level, seconds")
    bench.add_argument("--url", default=None,
                       help="a running server's gRPC host:port instead of starting one "
                            "(batching variants need --admin-key and explicit mode)")
    bench.add_argument("--admin-key", default=None,
                       help="that server's model-repository API admin key")
    bench.add_argument("--compare", action="append", default=[], metavar="HOST:PORT",
                       help="instead of the scenarios: kyc_ensemble on these running servers "
                            "(gRPC; repeat, at least two), window after window in turns, "
                            "latencies pooled per server (concurrency: the first of --levels, "
                            "default 1)")
    bench.add_argument("--rounds", type=_positive_int, default=None,
                       help="with --compare: measured windows per server")
    bench.add_argument("--model-repository", type=Path, default=DEFAULT_REPOSITORY)
    bench.set_defaults(func=cmd_bench)

    from kyc.cli_verify import add_parsers as add_verify_parsers

    add_verify_parsers(sub)

    from kyc.ops.cli import add_parsers as add_deploy_parsers

    add_deploy_parsers(sub)

    health = sub.add_parser("health", help="exit 0 when the server is ready")
    health.add_argument("--url", default=None,
                        help="HTTP host:port (default: that of the `kyc serve` that is PID 1, "
                             f"as in the image, else {DEFAULT_HEALTH_URL})")
    health.add_argument("--timeout", type=float, default=3.0)
    health.set_defaults(func=cmd_health)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _setup_logging(args.verbose)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
