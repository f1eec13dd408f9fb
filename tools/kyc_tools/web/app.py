"""The capture page's server: a Starlette app, the only public entry in front of Triton.

Routes:

- ``GET /`` the page, ``GET /static/...`` its script and style (package files: no
  build step, no CDN);
- ``GET /api/config`` what the page needs to know (limits, capture rate, attempts);
- ``WS /ws/liveness`` one liveness session: the server sends the challenge, the page
  streams JPEG frames (binary messages) as the camera makes them and gets each frame's
  findings and progress back in plain words, then sends ``{"type": "end"}`` and gets
  the verdict with its token (kept by the page in memory, never in a URL);
- ``POST /api/verify`` a form (``multipart/form-data``: ``document``, ``selfie``, raw;
  ``liveness_token``, base64; ``application``, the reference the session's token is
  bound to, which the verdict's signature names) or JSON ``{"document", "selfie",
  "liveness_token"}`` (base64 each), read within caps as it streams in
  (:mod:`kyc_tools.web.upload`) ->
  ``kyc_ensemble``'s decision and a few coarse reasons in plain words: never a score,
  a threshold or the report, which stay with the operator's backend;
- ``GET /healthz``.

Safe by default: Triton is reached over gRPC on loopback or the cluster network; the
app binds 127.0.0.1 unless told otherwise; no image, name, number, token or embedding
is written or logged (logs carry sizes, counts and timings); uploads and frames are
bounded in size and rate; each client address has a rate limit on sessions and
verifications and a cap on sessions and uploads at once (the excess: 429); a body
must come in at a pace (else 408) and the bodies being read hold at most a budget of
memory; a verification takes its place among those at once only when its upload has
been read and checked, just before the call to Triton (the excess is answered 503 at
once, never queued), so a slow client holds no verification; WebSockets from another
origin are refused; every response carries a strict Content-Security-Policy and the
usual hardening headers. Images live in memory for the time of their request only.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import logging
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

from kyc_tools.web import words
from kyc_tools.web.upload import BadInputError, Pace, Upload, UploadBudget, read_upload

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.websockets import WebSocket

log = logging.getLogger(__name__)

MiB = 1024 * 1024


@dataclass(frozen=True)
class WebSettings:
    """What ``kyc web`` serves and allows (command-line options; defaults here only)."""

    triton_url: str = "127.0.0.1:8001"  # Triton's gRPC host:port
    max_image_bytes: int = 8 * MiB  # each uploaded image (kyc_intake's limit is the same)
    max_frame_bytes: int = 512 * 1024  # each camera frame (the page sends about 30 KB)
    capture_fps: float = 8.0  # the page's frame rate
    max_fps: float = 15.0  # frames faster than this are dropped; far faster ends the session
    frame_max_side: int = 480  # the page downscales frames to this longest side
    max_session_s: float = 90.0
    liveness_attempts: int = 3  # tries before the page goes on to the document
    sessions_per_minute: int = 12  # per client address
    verifications_per_minute: int = 6  # per client address
    # Liveness sessions open at once per client address: a person needs one (a retry may
    # open the next as the last one closes); each ends at max_session_s.
    sessions_per_client: int = 2
    # Verifications at once, in all, taken once the upload is read and checked, just
    # before the call to Triton. Each holds its images (16 MiB at most) and, while
    # Triton's client serializes them, about two copies more: 4 hold about 200 MiB.
    max_verifications: int = 4
    # A body must come in at a pace (kyc_tools.web.upload.Pace), else 408 too_slow: 30 s
    # for any body and one second more for each 64 KiB received (512 kbit/s, a poor 3G
    # uplink), so an honest upload at that rate or faster is never cut whatever its
    # size, and one slower is cut at most 30 s after it falls behind; the longest a body
    # may take is 30 s + 21.5 MiB / 64 KiB/s (about 6 min), and only by sending 64 KiB a
    # second. No gap between two chunks may pass 10 s (a phone changing cells stalls for
    # a few seconds).
    upload_s: float = 30.0
    upload_min_bytes_per_s: int = 64 * 1024
    upload_idle_s: float = 10.0
    # Uploads being read, per client address at once (the excess: 429): one client's slow
    # connections hold back no one else. Behind a carrier's NAT many people share an
    # address; they share its rate limits too.
    uploads_per_client: int = 2
    # The memory of the uploads being read, all together (each counted at twice what it
    # has received: its peak as it is parsed; past it, 503). With the verifications'
    # 200 MiB and the process's own 90, the app holds at most about 420 MiB, inside the
    # pod's 512 MiB (docs/reliability.md), and each open connection under 80 KiB more
    # (uvicorn buffers a head up to 16 KiB, a body up to 64 KiB before the app reads
    # it); a slow upload holds only what it has sent.
    upload_memory_bytes: int = 128 * MiB
    # Connections (kyc_tools.cli.web): a request's head (its line and headers) must
    # come within head_s of the connection or of the last answer, and one peer address
    # holds at most connections_per_client (a browser opens about 6); not counted
    # behind trusted proxies (the peer is the proxy: bound them there).
    head_s: float = 10.0
    connections_per_client: int = 32
    # Proxies in front of the app that each append the address they saw to
    # X-Forwarded-For (an Ingress controller: 1); 0: the header is not read.
    trusted_proxies: int = 0
    timeout_s: float = 30.0  # each call to Triton

    @property
    def upload_pace(self) -> Pace:
        return Pace(self.upload_s, self.upload_min_bytes_per_s, self.upload_idle_s)


class RateLimiter:
    """A token bucket per (client, action): ``rate_per_minute`` refills, bursts of that
    size. Holds at most ``max_clients`` buckets (the least recently used go first)."""

    def __init__(self, clock=time.monotonic, max_clients: int = 10_000) -> None:
        self.clock = clock
        self.max_clients = max_clients
        self._buckets: OrderedDict[tuple[str, str], tuple[float, float]] = OrderedDict()

    def allow(self, client: str, action: str, rate_per_minute: int) -> bool:
        now = self.clock()
        key = (client, action)
        tokens, stamp = self._buckets.pop(key, (float(rate_per_minute), now))
        tokens = min(float(rate_per_minute), tokens + (now - stamp) * rate_per_minute / 60.0)
        allowed = tokens >= 1.0
        self._buckets[key] = (tokens - 1.0 if allowed else tokens, now)
        while len(self._buckets) > self.max_clients:
            self._buckets.popitem(last=False)
        return allowed


class PerClient:
    """How many of one thing each client address has going at once, at most ``cap``: a
    :meth:`take` past it is refused at once (never queued); :meth:`give` gives one back."""

    def __init__(self, cap: int) -> None:
        self.cap, self.held = cap, Counter[str]()

    def take(self, client: str) -> bool:
        if self.held[client] >= self.cap:
            return False
        self.held[client] += 1
        return True

    def give(self, client: str) -> None:
        self.held[client] -= 1
        if self.held[client] <= 0:
            del self.held[client]


# The page needs the camera, its own script and style, and its own server; nothing else.
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
        "media-src 'self' blob: mediastream:; connect-src 'self'; base-uri 'none'; "
        "form-action 'self'; frame-ancestors 'none'"),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "permissions-policy": "camera=(self), microphone=(), geolocation=(), payment=()",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
    "cache-control": "no-store",
}


class SecurityHeaders:
    """ASGI middleware: :data:`SECURITY_HEADERS` on every HTTP response."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message) -> None:
            if message["type"] == "http.response.start":
                present = {k.lower() for k, _ in message.get("headers", [])}
                extra = [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()
                         if k.encode() not in present]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, with_headers)


def client_address(scope: dict, headers, settings: WebSettings) -> str:
    """Who is asking, for the rate limits: the peer, or, behind ``trusted_proxies``
    proxies, the address the outermost of them saw: X-Forwarded-For's hop that many
    from the right. Every hop left of it is the client's to write (a forged leftmost
    hop once bought a fresh rate-limit bucket for each request)."""
    if settings.trusted_proxies > 0:
        hops = [h.strip() for h in headers.get("x-forwarded-for", "").split(",") if h.strip()]
        if hops:
            return hops[max(len(hops) - settings.trusted_proxies, 0)]
    client = scope.get("client")
    return client[0] if client else "unknown"


def same_origin(headers) -> bool:
    """A browser's WebSocket carries its page's Origin: it must be this host (no other
    site's page may open sessions in a visitor's name)."""
    origin, host = headers.get("origin"), headers.get("host")
    if not origin or not host:
        return False
    return origin.split("://", 1)[-1].rstrip("/") == host


def advice(status: dict) -> str:
    """One line for the person, from the server's words for this frame (STATUS
    ``guidance``: what to do, never an angle) and the progress."""
    frame = status.get("frame") or {}
    progress = status.get("progress") or {}
    if frame and frame.get("face_found") and not frame.get("sharp", True):
        return "Hold the phone still."
    words_now = (status.get("guidance") or "").strip()
    line = words_now[:1].upper() + words_now[1:] if words_now else "Look at the camera"
    if progress.get("next") is not None and progress.get("moves"):
        line += f" ({progress.get('moves_done', 0) + 1} of {progress['moves']})"
    return line + "."


def ready_to_end(status: dict) -> bool:
    """Every move made and the person facing the camera again: the page may send END."""
    from kyc.liveness.challenge import GUIDANCE

    progress = status.get("progress") or {}
    return progress.get("next", "") is None and status.get("guidance") == GUIDANCE["done"]


def client_pseudonym(address: str) -> str:
    """What the server is told of the page's client (its START limit per client): a
    digest of the address, not the address."""
    return hashlib.sha256(b"kyc-web-client\0" + address.encode()).hexdigest()[:32]


def static_dir():
    return resources.files("kyc_tools.web") / "static"


def create_app(settings: WebSettings, kyc_client: Callable[[], Any] | None = None) -> Any:
    """The ASGI app (Starlette) for ``settings``; ``kyc_client`` stands in for the SDK's
    AsyncKycClient (tests)."""
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.responses import FileResponse, JSONResponse
    from starlette.routing import Mount, Route, WebSocketRoute
    from starlette.staticfiles import StaticFiles

    from kyc_client.sdk import AsyncKycClient

    clients: dict[str, AsyncKycClient] = {}

    def kyc() -> AsyncKycClient:
        if kyc_client is not None:
            return kyc_client()
        if "kyc" not in clients:  # made inside the event loop, on first use
            clients["kyc"] = AsyncKycClient(settings.triton_url, timeout_s=settings.timeout_s)
        return clients["kyc"]

    async def index(request: Request) -> Response:
        return FileResponse(str(static_dir() / "index.html"), media_type="text/html")

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def config(request: Request) -> Response:
        return JSONResponse(page_config(settings))

    work = WorkRoutes(settings, kyc)
    routes = [
        Route("/", index),
        Route("/healthz", healthz),
        Route("/api/config", config),
        Route("/api/verify", work.verify, methods=["POST"]),
        WebSocketRoute("/ws/liveness", work.liveness),
        Mount("/static", StaticFiles(directory=str(static_dir())), name="static"),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        for client in clients.values():
            await client.close()

    return Starlette(routes=routes, middleware=[Middleware(SecurityHeaders)],
                     lifespan=lifespan)


class WorkRoutes:
    """The routes that do work, each within its bounds: ``POST /api/verify`` (a rate and
    uploads at once per client, the uploads' pace and memory, then a place among the
    verifications at once) and ``WS /ws/liveness`` (a rate and sessions at once per
    client, the session's deadline). ``kyc()``: the AsyncKycClient."""

    def __init__(self, settings: WebSettings, kyc: Callable[[], Any]) -> None:
        self.settings, self.kyc, self.limiter = settings, kyc, RateLimiter()
        self.verifying = asyncio.Semaphore(settings.max_verifications)
        self.reading = PerClient(settings.uploads_per_client)  # uploads being read
        self.budget = UploadBudget(settings.upload_memory_bytes)  # their memory, in all
        self.sessions = PerClient(settings.sessions_per_client)  # liveness sessions

    async def verify(self, request: Request) -> Response:
        settings, started = self.settings, time.perf_counter()
        who = client_address(request.scope, request.headers, settings)
        if not self.limiter.allow(who, "verify", settings.verifications_per_minute) \
                or not self.reading.take(who):
            return _error("busy", 429)
        try:  # the body is read holding no verification, within its pace and the budget
            upload = await read_upload(request.headers, request.stream(),
                                       settings.max_image_bytes, settings.upload_pace,
                                       self.budget)
        except BadInputError as exc:  # what is still sent is dropped (cli/web.py: till head_s)
            return _error(exc.code, exc.status)
        finally:
            self.reading.give(who)
        if self.verifying.locked():  # the excess is answered now: a queue holds images
            return _error("busy", 503)
        async with self.verifying:
            return await verify_upload(upload, self.kyc, started)

    async def liveness(self, websocket: WebSocket) -> None:
        if not same_origin(websocket.headers):
            await websocket.close(code=1008)
            return
        await websocket.accept()
        who = client_address(websocket.scope, websocket.headers, self.settings)
        session = LivenessRelay(websocket, self.settings, self.kyc, client_pseudonym(who))
        if not self.limiter.allow(who, "session", self.settings.sessions_per_minute) \
                or not self.sessions.take(who):
            await session.fail("busy", 1013)
            return
        try:
            await session.run()
        finally:
            self.sessions.give(who)


def page_config(settings: WebSettings) -> dict:
    """What ``GET /api/config`` tells the page: its limits, capture rate and attempts,
    and the words of each error code."""
    return {"capture_fps": settings.capture_fps, "frame_max_side": settings.frame_max_side,
            "max_image_bytes": settings.max_image_bytes,
            "liveness_attempts": settings.liveness_attempts,
            "max_session_s": settings.max_session_s, "errors": words.ERROR}


async def verify_upload(upload: Upload, kyc: Callable[[], Any], started: float) -> Response:
    """One ``POST /api/verify``'s upload, read and checked, sent to ``kyc()`` (an
    AsyncKycClient): its decision in plain words (:func:`told`), or a failure as an
    error code and an HTTP status."""
    from starlette.responses import JSONResponse

    from kyc_client.sdk import KycError, KycInputError, KycTimeoutError, KycUnavailableError

    rid = uuid.uuid4().hex[:12]
    try:
        result = await kyc().verify(upload.document, upload.selfie, upload.token,
                                    application=upload.application)
    except KycInputError:
        return _error("bad_image", 400)
    except KycUnavailableError:
        return _error("busy", 503)
    except KycTimeoutError:
        return _error("unavailable", 504)
    except KycError as exc:
        log.warning("verify %s: %s", rid, type(exc).__name__)
        return _error("server", 502)
    log.info("verify %s: document %d B, selfie %d B, token %s: %s in %.0f ms", rid,
             len(upload.document), len(upload.selfie), "yes" if upload.token else "no",
             result.decision, (time.perf_counter() - started) * 1e3)
    return JSONResponse(told(result))


def told(result) -> dict:
    """What the person is told of a decision: the decision and its coarse reasons. The
    scores, the figures and the report stay with kyc_ensemble's REPORT."""
    return {"decision": result.decision, "text": words.DECISION[result.decision],
            "reasons": words.reasons(list(result.reasons))}


def _error(code: str, status: int):
    from starlette.responses import JSONResponse

    return JSONResponse({"error": code, "message": words.ERROR[code]}, status_code=status)


class LivenessRelay:
    """One page's liveness session: its frames to a :class:`AsyncLivenessCapture`, the
    replies back as plain words (see the module docstring for the messages)."""

    def __init__(self, websocket, settings: WebSettings, kyc, client_id: str = "") -> None:
        self.ws, self.settings, self.kyc = websocket, settings, kyc
        self.client_id = client_id
        self.sends = asyncio.Lock()  # the reply relay and the main loop both send
        self.rid = uuid.uuid4().hex[:12]
        # the session's token is bound to it; the page sends it back with its verification
        self.application = f"web-{uuid.uuid4().hex}"
        self.frames = self.dropped = 0

    async def send(self, message: dict) -> None:
        async with self.sends:
            await self.ws.send_json(message)

    async def fail(self, code: str, close_code: int = 1011) -> None:
        try:
            await self.send({"type": "error", "error": code, "message": words.ERROR[code]})
            await self.ws.close(code=close_code)
        except Exception:  # the page has gone: nothing to tell
            pass

    async def run(self) -> None:
        from kyc_client.sdk import KycError, KycUnavailableError

        started = time.perf_counter()
        try:
            capture = await self.kyc().liveness_capture(client_id=self.client_id or None,
                                                        application=self.application)
        except KycUnavailableError:
            await self.fail("busy", 1013)
            return
        except KycError:
            await self.fail("unavailable", 1011)
            return
        relay = None
        try:
            challenge = capture.challenge
            await self.send({"type": "challenge", "length": challenge["length"],
                             "how": challenge.get("how", ""),
                             "min_duration_s": challenge.get("min_duration_s", 1.0),
                             "max_duration_s": challenge.get("max_duration_s", 60.0)})
            relay = asyncio.create_task(self._relay(capture))
            outcome = await self._frames(capture, relay)
            log.info("liveness %s: %d frames (%d dropped), %s in %.1f s", self.rid,
                     self.frames, self.dropped, outcome, time.perf_counter() - started)
        finally:
            if relay is not None and not relay.done():
                relay.cancel()
            await capture.close()

    async def _frames(self, capture, relay) -> str:
        """Frames in, until END (the verdict goes out) or a reason to stop."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.max_session_s
        interval, last = 1.0 / self.settings.max_fps, float("-inf")
        while True:
            left = deadline - loop.time()
            if left <= 0:
                await self.fail("expired", 1000)
                return "expired"
            try:
                message = await asyncio.wait_for(self.ws.receive(), left)
            except asyncio.TimeoutError:
                await self.fail("expired", 1000)
                return "expired"
            if message["type"] == "websocket.disconnect":
                return "left"
            data = message.get("bytes")
            if data is not None:
                if len(data) > self.settings.max_frame_bytes:
                    await self.fail("too_large", 1009)
                    return "frame too large"
                now = loop.time()
                if now - last < 0.8 * interval:  # faster than the camera may go: dropped
                    self.dropped += 1
                    if self.dropped > 4 * self.settings.max_fps:
                        await self.fail("too_fast", 1008)
                        return "too fast"
                    continue
                last = now
                self.frames += 1
                await capture.push(data)
                continue
            if _is_end(message.get("text")):
                return await self._end(capture, relay)

    async def _end(self, capture, relay) -> str:
        try:
            final = await capture.end(b"")
        except Exception as exc:  # the session is gone (e.g. dropped idle by the server)
            await self.fail("expired" if "START" in str(exc) else "server", 1000)
            return f"END failed: {type(exc).__name__}"
        await asyncio.wait_for(relay, self.settings.timeout_s)
        status = final.status
        # no score, no check by name: the reasons the person can act on, and the token
        await self.send({"type": "result", "live": final.is_live,
                         "reasons": words.reasons(list(status.get("reasons", []))),
                         "token": base64.b64encode(final.token).decode(),
                         "application": self.application})
        await self.ws.close(code=1000)
        return "live" if final.is_live else "not live"

    async def _relay(self, capture) -> None:
        """Each frame's reply to the page, in plain words, as it comes."""
        async for reply in capture.replies():
            if isinstance(reply, Exception):
                await self.send({"type": "frame_error",
                                 "message": "That picture could not be used."})
                continue
            status = reply.status
            if status.get("state") == "done":
                return
            progress = status.get("progress") or {}
            await self.send({"type": "progress", "frame": status.get("frame") or {},
                             "progress": {k: progress.get(k) for k in ("moves_done", "moves",
                                                                       "next")},
                             "advice": advice(status), "ready_to_end": ready_to_end(status)})


def _is_end(text: str | None) -> bool:
    if not text:
        return False
    try:
        return json.loads(text).get("type") == "end"
    except (json.JSONDecodeError, AttributeError):
        return False
