"""``kyc web``: the capture page for the people being verified (kyc_tools.web.app).

``kyc web --url HOST:GRPC_PORT --port PORT`` serves the page at ``/`` on
127.0.0.1 (``--host 0.0.0.0`` to publish it; put TLS in front: browsers give the
camera only to https pages and to localhost). Triton stays where it is, on loopback
or the cluster network: this app is the only public entry.
"""

from __future__ import annotations

import argparse
import dataclasses


def add_web_parser(sub: argparse._SubParsersAction) -> None:
    from kyc_tools.web.app import WebSettings

    defaults = WebSettings()
    web = sub.add_parser("web", help="the capture page (camera, challenge, document, decision)",
                         description=__doc__,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    web.add_argument("--url", default=defaults.triton_url, help="Triton's gRPC host:port")
    web.add_argument("--host", default="127.0.0.1", help="address to listen on")
    web.add_argument("--port", type=int, default=8080)
    web.add_argument("--max-image-mib", type=float, default=defaults.max_image_bytes / 2**20,
                     help="largest uploaded image")
    web.add_argument("--liveness-attempts", type=int, default=defaults.liveness_attempts,
                     help="camera checks a person may try before going on to the document")
    web.add_argument("--sessions-per-minute", type=int, default=defaults.sessions_per_minute,
                     help="liveness sessions per client address and minute")
    web.add_argument("--verifications-per-minute", type=int,
                     default=defaults.verifications_per_minute,
                     help="verifications per client address and minute")
    web.add_argument("--max-verifications", type=int, default=defaults.max_verifications,
                     help="verifications at once, in all (more are answered 503 at once)")
    web.add_argument("--trusted-proxies", type=int, default=defaults.trusted_proxies,
                     metavar="N", help="proxies in front that append to X-Forwarded-For: the "
                     "client address is its hop N from the right (0: the peer's)")
    web.add_argument("--trust-forwarded-for", dest="trusted_proxies", action="store_const",
                     const=1, help="the same as --trusted-proxies 1 (one Ingress controller)")
    web.set_defaults(func=cmd_web)


def settings_from(args: argparse.Namespace):
    from kyc_tools.web.app import WebSettings

    return dataclasses.replace(
        WebSettings(), triton_url=args.url, max_image_bytes=int(args.max_image_mib * 2**20),
        liveness_attempts=args.liveness_attempts,
        sessions_per_minute=args.sessions_per_minute,
        verifications_per_minute=args.verifications_per_minute,
        max_verifications=args.max_verifications, trusted_proxies=args.trusted_proxies)


def cmd_web(args: argparse.Namespace) -> int:
    import uvicorn

    from kyc_tools.web.app import create_app

    settings = settings_from(args)
    print(f"kyc web: http://{args.host}:{args.port}/ (Triton at {settings.triton_url})",
          flush=True)
    # uvicorn logs warnings only: its request and WebSocket lines carry the clients'
    # addresses; the app logs ids, sizes and timings itself. No server header.
    uvicorn.run(create_app(settings), host=args.host, port=args.port, log_level="warning",
                access_log=False, server_header=False, ws_max_size=settings.max_frame_bytes,
                proxy_headers=False)  # X-Forwarded-For is read by the app (client_address)
    return 0
