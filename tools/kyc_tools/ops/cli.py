"""``kyc deploy render``: the generated monitoring files of ``deploy/``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEFAULT_REPOSITORY = Path("model_repository")
DEFAULT_DEPLOY = Path("deploy")


def cmd_render(args: argparse.Namespace) -> int:
    from kyc_tools.ops.render import render

    changed = render(args.model_repository, args.out, check=args.check)
    for path in changed:
        print(f"{'out of date' if args.check else 'wrote'}: {path}",
              file=sys.stderr if args.check else sys.stdout)
    if args.check and changed:
        print("kyc deploy render --check: run `kyc deploy render` and commit the result",
              file=sys.stderr)
        return 1
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    deploy = sub.add_parser("deploy", help="deployment files (Kubernetes, Prometheus, "
                            "Grafana)").add_subparsers(dest="deploy_command", required=True)
    render = deploy.add_parser(
        "render", help="write deploy/'s Prometheus rules, adapter rule and Grafana dashboard "
                       "from the model repository and kyc.budgets")
    render.add_argument("--model-repository", type=Path, default=DEFAULT_REPOSITORY)
    render.add_argument("--out", type=Path, default=DEFAULT_DEPLOY, help="the deploy/ folder")
    render.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when a file is out of date")
    render.set_defaults(func=cmd_render)
