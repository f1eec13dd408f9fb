"""``kyc verdict``: the signed verdict, from the operator's side (kyc.verdict).

``kyc verdict public-key`` prints the public key that checks this server's verdicts
(base64, and its key id on stderr), derived from the token key (``KYC_TOKEN_KEY``,
``KYC_TOKEN_KEY_FILE``, else the file ``kyc serve`` made): hand it to your backend;
it cannot sign a verdict nor mint a token.

``kyc verdict check --public-key KEY [REPORT]`` checks a REPORT (a file, or stdin)
and prints its signed claims: exit 0 when the signature holds, 1 when it does not.
KEY is the base64 text, or a file holding it (or PEM).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_verdict_parser(sub: argparse._SubParsersAction) -> None:
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
    check.set_defaults(func=cmd_check)


def cmd_public_key(args: argparse.Namespace) -> int:
    import os

    from kyc.liveness.token import ENV_KEY, ENV_KEY_FILE, TokenKeyError, load_key
    from kyc.verdict import VerdictSigner, public_key_text
    from kyc_tools.runtime.server import default_token_key_file

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
    from kyc.verdict import VerdictError, verify_verdict

    key = args.public_key
    if Path(key).is_file():
        key = Path(key).read_text()
    try:
        text = args.report.read_text() if args.report else sys.stdin.read()
        claims = verify_verdict(text, key)
    except (OSError, ValueError, VerdictError) as exc:
        print(f"kyc verdict: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(claims, indent=2))
    return 0
