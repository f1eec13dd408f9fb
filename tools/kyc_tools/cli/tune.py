"""``kyc tune``: the command line of :mod:`kyc_tools.dev.bench.tune` (NVIDIA's Model Analyzer)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kyc_tools.cli.bench import _levels
from kyc_tools.cli.repo import DEFAULT_REPOSITORY

DEFAULT_OUT = Path("docs/performance/model-analyzer")


def add_tune_parser(sub: argparse._SubParsersAction) -> None:
    tune = sub.add_parser(
        "tune", help="Model Analyzer's search over instance counts, batch sizes and queue "
                     "delays of ONNX models, on this host; --apply writes the choice")
    tune.add_argument("models", nargs="+", metavar="MODEL")
    tune.add_argument("--model-repository", type=Path, default=DEFAULT_REPOSITORY)
    tune.add_argument("--out", type=Path, default=DEFAULT_OUT,
                      help="Model Analyzer's reports, plots and CSVs, with README.md and "
                           f"tune.json (default: {DEFAULT_OUT})")
    tune.add_argument("--instances", type=_levels, default=(1, 2),
                      help="instance counts to try (the shipped one is always tried)")
    tune.add_argument("--max-batch-sizes", type=_levels, default=(),
                      help="max_batch_size values to try (default: the shipped one)")
    tune.add_argument("--delays-us", type=_delays, default=(0, 2000, 10000),
                      help="dynamic batching max_queue_delay_microseconds values to try")
    tune.add_argument("--concurrency", type=_levels, default=(1, 4, 8))
    tune.add_argument("--requests-per-window", type=int, default=16,
                      help="perf_analyzer's count windows: 3 of this many answers per level")
    tune.add_argument("--latency-budget-ms", type=float, default=None,
                      help="only levels whose p99 is within this count for the choice")
    tune.add_argument("--apply", action="store_true",
                      help="write the chosen values into the shipped config.pbtxt")
    tune.add_argument("--timeout", type=float, default=3600.0,
                      help="seconds Model Analyzer may take in all")
    tune.add_argument("--keep-work", type=Path, default=None,
                      help="keep Model Analyzer's work folder (variants, checkpoints, log) here")
    tune.set_defaults(func=cmd_tune)


def _delays(text: str) -> tuple[int, ...]:
    try:
        delays = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text}") \
            from None
    if not delays or min(delays) < 0:
        raise argparse.ArgumentTypeError("delays are microseconds, at least 0")
    return delays


def cmd_tune(args: argparse.Namespace) -> int:
    from kyc_tools.dev.bench.tune import Search, TuneError, run

    search = Search(instances=args.instances, max_batch_sizes=args.max_batch_sizes,
                    delays_us=args.delays_us, concurrency=args.concurrency,
                    latency_budget_ms=args.latency_budget_ms,
                    requests_per_window=args.requests_per_window)
    try:
        results = run(args.model_repository, args.models, search, args.out,
                      apply_choice=args.apply, timeout_s=args.timeout,
                      keep_work=args.keep_work)
    except TuneError as exc:
        print(f"kyc tune: {exc}", file=sys.stderr)
        return 1
    for result in results:
        chosen = result.chosen
        if chosen is None:
            print(f"{result.model}: no config within the latency budget")
            continue
        best = chosen.best_within(search.latency_budget_ms)
        shipped = result.shipped
        print(f"{result.model}: {chosen.instances} instance(s), max batch "
              f"{chosen.max_batch_size}, queue delay {chosen.delay_us} us -> {best[1]:.1f} "
              f"infer/s at concurrency {best[0]} (p99 {best[2]:.0f} ms); shipped: "
              f"{shipped['instances']}, {shipped['max_batch_size']}, {shipped['delay_us']} us"
              + ("; written into its config" if args.apply else ""))
    print(f"reports: {args.out}")
    print("each model was measured alone: check the pipeline before shipping a choice, "
          "side by side (kyc bench --compare OLD:PORT --compare NEW:PORT)")
    return 0
