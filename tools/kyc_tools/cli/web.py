"""``kyc web``: the capture page for the people being verified (kyc_tools.web.app).

``kyc web --url HOST:GRPC_PORT --port PORT`` serves the page at ``/`` on
127.0.0.1 (``--host 0.0.0.0`` to publish it; put TLS in front: browsers give the
camera only to https pages and to localhost). Triton stays where it is, on loopback
or the cluster network: this app is the only public entry.

uvicorn serves it with its protections stated (:func:`uvicorn_options`) and two it
lacks (:func:`bounded_h11`): a request's head has a deadline, and one peer address
holds a bounded number of connections.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any


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
    uvicorn.run(create_app(settings), host=args.host, port=args.port,
                **uvicorn_options(settings))
    return 0


def uvicorn_options(settings) -> dict[str, Any]:
    """uvicorn's options for ``kyc web``: each says what it bounds (the tests serve the
    app with the same)."""
    return {
        # uvicorn logs warnings only: its request and WebSocket lines carry the clients'
        # addresses; the app logs ids, sizes and timings itself. No server header.
        "log_level": "warning", "access_log": False, "server_header": False,
        "proxy_headers": False,  # X-Forwarded-For is read by the app (client_address)
        "http": bounded_h11(settings),  # h11, with a head deadline and connections per peer
        # an idle connection between two requests is closed after 5 s
        "timeout_keep_alive": 5,
        # a request's line and headers, held while they come: a browser writes under 2 KiB
        "h11_max_incomplete_event_size": 16 * 1024,
        # No limit_concurrency: it counts every open connection and answers every request
        # 503 past it, so idle connections from a few addresses would shut the page; the
        # connections are bounded per peer (bounded_h11), the work by the app's caps.
        "limit_concurrency": None,
        "ws_max_size": settings.max_frame_bytes,  # a WebSocket message: one camera frame
        # a WebSocket whose client stops answering pings is closed within 40 s (its
        # session, idle or not, ends at max_session_s in any case)
        "ws_ping_interval": 20.0, "ws_ping_timeout": 20.0,
    }


def bounded_h11(settings) -> type:
    """uvicorn's h11 protocol with two bounds it lacks: a request's head must be in
    within ``settings.head_s`` of the connection or of the last answer, and so must the
    rest of a body answered before it was in (uvicorn's keep-alive timer stops at the
    first byte, so a head or the rest of a refused body sent a byte at a time held a
    connection for ever), and a peer address holds at most
    ``settings.connections_per_client`` connections (the next ones are closed at once).
    Behind trusted proxies the peer is a proxy: not counted. A WebSocket leaves the
    count when it is upgraded (the app caps sessions per client)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    from kyc_tools.web.app import PerClient

    by_peer = PerClient(settings.connections_per_client) if settings.trusted_proxies == 0 \
        else None

    class BoundedH11Protocol(H11Protocol):
        peer: str | None = None  # while counted
        head_timer: Any = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            peer = self.client[0] if self.client else None
            if by_peer is not None and peer is not None:
                if not by_peer.take(peer):
                    transport.close()
                    return
                self.peer = peer
            self._await_head()

        def connection_lost(self, exc) -> None:
            self._leave()
            super().connection_lost(exc)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():  # the next head, or the end of a body
                self._await_head()               # answered before it was in, is due

        def handle_websocket_upgrade(self, event) -> None:
            self._leave()
            super().handle_websocket_upgrade(event)

        def _await_head(self) -> None:
            if self.head_timer is not None:
                self.head_timer.cancel()
            self.head_timer = self.loop.call_later(settings.head_s, self._head_late)

        def _head_late(self) -> None:
            self.head_timer = None
            waiting = self.conn.their_state is h11.IDLE  # else a request is in: the app's
            answered = self.conn.our_state is h11.DONE   # unless it is answered already
            if (waiting or answered) and not self.transport.is_closing():
                self.transport.close()

        def _leave(self) -> None:
            if self.head_timer is not None:
                self.head_timer.cancel()
                self.head_timer = None
            if self.peer is not None:
                by_peer.give(self.peer)  # type: ignore[union-attr]
                self.peer = None

    return BoundedH11Protocol
