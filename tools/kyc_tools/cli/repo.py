"""``kyc repo check|publish|status|seed``: model repository tools."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DEFAULT_REPOSITORY = Path("model_repository")
DEFAULT_STATUS_PORT = 8003


def add_repo_parser(sub: argparse._SubParsersAction) -> None:
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
    from kyc_tools.repo.graph.cli import add_graph_parser

    add_graph_parser(repo)


def cmd_repo_check(args: argparse.Namespace) -> int:
    from kyc_tools.repo.check import check_repository
    from kyc_tools.repo.graph.build import build_graph
    from kyc_tools.repo.graph.contracts import contract_mismatches

    problems = [str(p) for p in check_repository(args.directory)]
    if not problems:  # a sound repository: each Python model against its step's CONTRACT
        problems = contract_mismatches(build_graph(args.directory), args.directory)
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} problem(s) in {args.directory}", file=sys.stderr)
        return 1
    count = sum(1 for p in args.directory.iterdir() if p.is_dir())
    print(f"OK: {count} models in {args.directory}")
    return 0


def cmd_repo_publish(args: argparse.Namespace) -> int:
    from kyc_tools.repo.publish import PublishError, publish

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


def cmd_repo_status(args: argparse.Namespace) -> int:
    from kyc_tools.operator.watcher import format_status, read_status

    try:
        status = read_status(args.url)
    except (OSError, ValueError) as exc:
        print(f"kyc repo status: no kyc serve status at {args.url} ({exc}); is it running "
              "with --watch (the default)?", file=sys.stderr)
        return 1
    print(json.dumps(status, indent=1) if args.json else format_status(status))
    return 0


def cmd_repo_seed(args: argparse.Namespace) -> int:
    from kyc_tools.repo.seed import SeedError, seed

    try:
        seeded = seed(args.src, args.dest)
    except SeedError as exc:
        print(f"kyc repo seed: {exc}", file=sys.stderr)
        return 1
    print(f"seeded {args.dest} from {args.src}" if seeded
          else f"{args.dest} already holds a repository: left as it is")
    return 0
