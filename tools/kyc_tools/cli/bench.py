"""``kyc bench``: the command line of :mod:`kyc_tools.dev.bench`."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

from kyc_tools.cli.repo import DEFAULT_REPOSITORY

# kyc_tools.dev.bench.options.GROUPS (not imported: the CLI starts without numpy)
BENCH_GROUPS = ("kyc", "batching", "liveness", "document", "publish")
# The instruments the bench's figures need, by the groups that use them: NVIDIA's
# perf_analyzer loads the stateless served scenarios, RapidOCR is the document peer.
# `make bench-tools` installs both.
INSTRUMENTS = (("perf_analyzer", ("kyc", "batching", "document")),
               ("rapidocr-onnxruntime", ("document",)))
BENCH_TOOLS = "make bench-tools"


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


def add_bench_parser(sub: argparse._SubParsersAction) -> None:
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
                       help="instead of the scenarios: these running servers (gRPC; repeat, "
                            "at least two), window after window in turns, latencies pooled "
                            "per server, on kyc_ensemble (--scenario kyc, the default; one "
                            "client), document_ocr (--scenario document; one client) and/or "
                            "liveness_sequence (--scenario liveness; 8 sessions); --levels: "
                            "the first level for each")
    bench.add_argument("--rounds", type=_positive_int, default=None,
                       help="with --compare: measured windows per server")
    bench.add_argument("--own-clients", action="store_true",
                       help="measure even without perf_analyzer or the OCR peer: the bench's "
                            f"own clients load instead, and no peer ratio (else `{BENCH_TOOLS}` "
                            "first)")
    bench.add_argument("--model-repository", type=Path, default=DEFAULT_REPOSITORY)
    bench.set_defaults(func=cmd_bench)


def _installed(instrument: str) -> bool:
    if instrument == "perf_analyzer":
        from kyc_tools.dev.bench import perf_analyzer

        return perf_analyzer.available()
    return importlib.util.find_spec(instrument.replace("-", "_")) is not None


def missing_instruments(groups: list[str] | tuple[str, ...]) -> list[str]:
    """The instruments that ``groups`` (none: every group) need and this environment
    lacks."""
    wanted = set(groups or BENCH_GROUPS)
    return [name for name, users in INSTRUMENTS
            if wanted & set(users) and not _installed(name)]


def bench_output_dir(json_path: Path | None, out: Path | None) -> Path:
    """Where the CSVs and plots go: --out, else beside the JSON file, else ./bench-results."""
    if out is not None:
        return out
    if json_path is not None:
        return json_path.parent / f"{json_path.stem}-files"
    return Path("bench-results")


def cmd_bench(args: argparse.Namespace) -> int:
    from kyc_tools.operator.triton import THREAD_SETTINGS

    # The in-process limit and the peers run in this process: numpy's OpenBLAS gets
    # the server stubs' thread settings (its idle workers spin after every call), so
    # that both sides of the comparison run alike. Effective before numpy loads.
    for name, value in THREAD_SETTINGS.items():
        os.environ.setdefault(name, value)
    from kyc_tools.dev.bench.options import BenchError, BenchOptions
    from kyc_tools.dev.bench.report import write_csvs, write_plots
    from kyc_tools.dev.bench.scenarios import run_bench
    from kyc_tools.dev.bench.summary import format_table, total_errors, write_json
    from kyc_tools.operator.triton import TritonNotFoundError

    if args.compare:
        return _bench_compare(args)
    missing = [] if args.own_clients else missing_instruments(args.scenario)
    if missing:
        print(f"kyc bench: {' and '.join(missing)} not installed: run `{BENCH_TOOLS}` (or pass "
              "--own-clients to load with the bench's own clients, without a peer ratio)",
              file=sys.stderr)
        return 2
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
    from kyc_tools.dev.bench.compare import WORKLOADS, format_comparison, run_comparison
    from kyc_tools.dev.bench.summary import write_json

    if len(args.compare) < 2:
        print("kyc bench --compare: name at least two servers (--compare HOST:PORT twice)",
              file=sys.stderr)
        return 2
    workloads = list(dict.fromkeys(args.scenario or ["kyc"]))
    unknown = [w for w in workloads if w not in WORKLOADS]
    if unknown:
        print(f"kyc bench --compare: compares the scenarios {', '.join(WORKLOADS)} only, "
              f"not {', '.join(unknown)}", file=sys.stderr)
        return 2
    reports = []
    try:
        for workload in workloads:
            reports.append(run_comparison(
                args.compare, workload=workload, concurrency=(args.levels or (None,))[0],
                rounds=args.rounds, window_s=args.window_s))
            print(format_comparison(reports[-1]), flush=True)
    except (OSError, RuntimeError) as exc:
        print(f"kyc bench --compare: {exc}", file=sys.stderr)
        return 1
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        write_json({"comparisons": reports}, args.json)
    errors = sum(s["errors"] for report in reports for s in report["servers"])
    if errors:
        print(f"kyc bench --compare: {errors} request(s) failed", file=sys.stderr)
    return 1 if errors else 0
