"""``kyc``: the project's command line (serve, verify, repository tools, model weights)."""

from __future__ import annotations

import argparse
import logging
import sys
from importlib.metadata import EntryPoint, distributions
from pathlib import Path

from kyc import __version__
from kyc_tools.cli.bench import BENCH_GROUPS, add_bench_parser, bench_output_dir
from kyc_tools.cli.repo import DEFAULT_REPOSITORY, DEFAULT_STATUS_PORT, add_repo_parser
from kyc_tools.cli.serve import add_serve_parser

__all__ = [
    "BENCH_GROUPS",
    "DEFAULT_HEALTH_URL",
    "DEFAULT_REPOSITORY",
    "DEFAULT_STATUS_PORT",
    "bench_output_dir",
    "build_parser",
    "cmd_health",
    "entrypoint_http_url",
    "main",
]

def _setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


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
    from kyc_tools.operator.server import ServerOptions

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
    from kyc_tools.operator.server import is_ready

    url = args.url or entrypoint_http_url() or DEFAULT_HEALTH_URL
    return 0 if is_ready(url, timeout=args.timeout) else 1


def add_health_parser(sub: argparse._SubParsersAction) -> None:
    health = sub.add_parser("health", help="exit 0 when the server is ready")
    health.add_argument("--url", default=None,
                        help="HTTP host:port (default: that of the `kyc serve` that is PID 1, "
                             f"as in the image, else {DEFAULT_HEALTH_URL})")
    health.add_argument("--timeout", type=float, default=3.0)
    health.set_defaults(func=cmd_health)


# -- commands of other packages ------------------------------------------------------
COMMANDS_GROUP = "kyc.commands"


def add_command_plugins(sub: argparse._SubParsersAction) -> None:
    """The commands other installed packages add, in the order of their names: each entry
    point of the group ``kyc.commands`` names a ``register(subparsers)`` function
    (kyc_export's ``models`` adds ``kyc models ...``; kyc itself imports no such package)."""
    for point in command_entry_points():
        point.load()(sub)


def command_entry_points() -> list[EntryPoint]:
    """The ``kyc.commands`` entry points of every distribution on sys.path, the first of
    each name. Not ``entry_points(group=...)``, which reads only the first distribution
    of each project name: with ``python -m kyc_tools.cli`` in the source tree, a
    ``kyc_triton.egg-info`` left there by an older in-tree wheel build comes first and
    would hide the installed metadata."""
    found: dict[str, EntryPoint] = {}
    for dist in distributions():
        for point in dist.entry_points:
            if point.group == COMMANDS_GROUP:
                found.setdefault(point.name, point)
    return [found[name] for name in sorted(found)]


# -- parser -------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    from kyc_tools.cli.docs import add_docs_parser
    from kyc_tools.cli.eval import add_eval_parser
    from kyc_tools.cli.tune import add_tune_parser
    from kyc_tools.cli.verdict import add_verdict_parser
    from kyc_tools.cli.verify import add_parsers as add_verify_parsers
    from kyc_tools.cli.web import add_web_parser
    from kyc_tools.ops.cli import add_parsers as add_deploy_parsers

    parser = argparse.ArgumentParser(prog="kyc", description=__doc__)
    parser.add_argument("--version", action="version", version=f"kyc {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    add_serve_parser(sub)
    add_repo_parser(sub)
    add_command_plugins(sub)
    add_bench_parser(sub)
    add_tune_parser(sub)
    add_eval_parser(sub)
    add_verify_parsers(sub)
    add_verdict_parser(sub)
    add_web_parser(sub)
    add_deploy_parsers(sub)
    add_health_parser(sub)
    add_docs_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _setup_logging(args.verbose)
    return int(args.func(args) or 0)
