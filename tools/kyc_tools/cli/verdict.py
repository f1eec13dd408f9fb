"""``kyc verdict``: the signed verdict, from the operator's side (kyc.verdict).

``kyc verdict public-key`` prints the public key that checks this server's verdicts
(base64, and its key id on stderr), derived from the token key (``KYC_TOKEN_KEY``,
``KYC_TOKEN_KEY_FILE``, else the file ``kyc serve`` made): hand it to your backend;
it cannot sign a verdict nor mint a token.

``kyc verdict check --public-key KEY --application APP [--max-age S] [REPORT]`` checks
a REPORT (a file, or stdin) as a backend must (kyc.verdict.verify_verdict): the
signature over the whole report, nothing in it changed, the application APP (``''``:
the verification named none), issued at most S seconds ago (default 300; 0: any age,
for an audit); with ``--document FILE --selfie FILE``, that it judged those images.
It prints the signed report: exit 0 when every check holds, 1 when one does not. KEY
is the base64 text, or a file holding it (or PEM).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_verdict_parser(sub: argparse._SubParsersAction) -> None:
    from kyc.verdict import MAX_AGE_S

    verdict = sub.add_parser("verdict", help="the public key of signed verdicts; check one",
                             description=__doc__,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = verdict.add_subparsers(dest="verdict_command", required=True)
    public = actions.add_parser("public-key", help="print the key that checks verdicts")
    public.set_defaults(func=cmd_public_key)
    check = actions.add_parser("check", help="check a REPORT's signature, print its claims")
    check.add_argument("report", nargs="?", type=Path, metavar="REPORT",
                       help="a file holding REPORT's JSON (default: stdin)")
    check.add_argument("--public-key", required=True, metavar="KEY",
                       help="base64 of the 32-byte public key, or a file holding it or PEM")
    check.add_argument("--application", required=True, metavar="APP",
                       help="the kyc_application your backend gave this verification "
                            "('': it gave none)")
    check.add_argument("--max-age", type=float, default=MAX_AGE_S, metavar="SECONDS",
                       help=f"the oldest verdict taken (default {MAX_AGE_S:g}; 0: any age)")
    check.add_argument("--document", type=Path, help="the document image the backend sent")
    check.add_argument("--selfie", type=Path, help="the selfie the backend sent")
    check.set_defaults(func=cmd_check)


def cmd_public_key(args: argparse.Namespace) -> int:
    import os

    from kyc.keys import ENV_KEY, ENV_KEY_FILE, TokenKeyError, load_key
    from kyc.verdict import VerdictSigner, public_key_text
    from kyc_tools.operator.server import default_token_key_file

    env = dict(os.environ)
    if not env.get(ENV_KEY) and not env.get(ENV_KEY_FILE):
        env[ENV_KEY_FILE] = str(default_token_key_file())
    try:
        signer = VerdictSigner(load_key(env))
    except TokenKeyError as exc:
        print(f"kyc verdict: {exc}", file=sys.stderr)
        return 1
    print(public_key_text(signer.public_key))
    print(f"key id {signer.key_id}", file=sys.stderr)
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from kyc_client.verdict import VerdictError, verify_verdict

    key = args.public_key
    if Path(key).is_file():
        key = Path(key).read_text()
    if (args.document is None) != (args.selfie is None):
        print("kyc verdict: give both --document and --selfie, or neither", file=sys.stderr)
        return 2
    try:
        text = args.report.read_text() if args.report else sys.stdin.read()
        images = ((args.document.read_bytes(), args.selfie.read_bytes())
                  if args.document is not None else None)
        claims = verify_verdict(text, key, application=args.application or None,
                                max_age_s=args.max_age or None, images=images)
    except (OSError, ValueError, VerdictError) as exc:
        print(f"kyc verdict: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(claims, indent=2))
    return 0
