"""``kyc docs``: the pages of docs/ generated from the vocabularies declared once in the
code (kyc_tools.docs).

``kyc docs reasons`` writes docs/reason-codes.md from kyc.reasons; ``kyc docs moves``
writes docs/liveness-moves.md from kyc.liveness.challenge. ``--check`` writes nothing:
exit 0 when the page is as generated, else 1 with the command that regenerates it.
Paths are relative to the project root (the current directory unless ``--root``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_docs_parser(sub: argparse._SubParsersAction) -> None:
    from kyc_tools.docs import pages

    docs = sub.add_parser("docs", help="write (or check) the pages generated from the code",
                          description=__doc__,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    docs.add_argument("page", choices=sorted(pages()), help="which page")
    docs.add_argument("--check", action="store_true",
                      help="write nothing; exit 1 when the committed page differs")
    docs.add_argument("--root", type=Path, default=Path("."),
                      help="the project root (default: the current directory)")
    docs.set_defaults(func=cmd_docs)


def cmd_docs(args: argparse.Namespace) -> int:
    from kyc_tools.docs import pages

    page = pages()[args.page]
    path = args.root / page.path
    text = page.render()
    if args.check:
        current = path.read_text(encoding="utf-8") if path.is_file() else None
        if current != text:
            print(f"kyc docs: {page.path} is {'missing' if current is None else 'out of date'}"
                  f": run `{page.command}`", file=sys.stderr)
            return 1
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(page.path)
    return 0
