"""Run the live repository (``kyc_tools.operator.live``) beside a server: wake on file events,
read what Triton says, count and show what happened.

- **Waking**: the ``watchdog`` library's observer (inotify here; its polling observer
  with ``--watch-polling``, for network filesystems such as NFS where a write made
  by another machine raises no inotify event). An event only wakes the loop early:
  whether a folder is complete is decided by ``LiveRepository`` from what the files
  look like over time, and the loop also looks every ``interval_s`` regardless, so a
  missed event costs at most that.
- **Triton's answers**: its repository index (states and load errors per version)
  and, for stateful models, ``kyc_liveness_sessions_live`` per version from its
  metrics endpoint.
- **What people see**: every event logged on one line (model, version, reason; no
  request data exists here); Prometheus counters and gauges, and ``GET /status`` (JSON)
  for ``kyc repo status``, on the status port (``kyc serve --status-port``, 8003).
"""

from __future__ import annotations

import json
import logging
import socketserver
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable
from dataclasses import asdict
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, make_wsgi_app

from kyc_tools.operator.drain import sessions_by_version
from kyc_tools.operator.live import Event, LiveRepository

log = logging.getLogger(__name__)

INTERVAL_S = 0.5
CHANGES = {"created", "deleted", "modified", "moved", "closed"}  # watchdog event types
RECENT_EVENTS = 100
_STAGES = {"refused": "check", "load_refused": "load", "config_refused": "config",
           "model_refused": "model"}


class RepositoryMetrics:
    """The watcher's Prometheus series (its own registry: one per server)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.loaded = Counter("kyc_repository_versions_loaded", "Dropped versions now serving",
                              ["model"], registry=self.registry)
        self.refused = Counter("kyc_repository_refusals", "Drops refused, by stage (check: "
                               "kyc repo check; load: Triton; config; model)",
                               ["model", "stage"], registry=self.registry)
        self.removed = Counter("kyc_repository_versions_removed", "Version folders deleted "
                               "(rollback)", ["model"], registry=self.registry)
        self.waiting = Gauge("kyc_repository_drops_waiting", "Folders being copied, or "
                             "holding a copy tool's temporary file", ["model"],
                             registry=self.registry)
        self.serving = Gauge("kyc_repository_serving_version", "Highest version serving",
                             ["model"], registry=self.registry)
        self.pinned = Gauge("kyc_repository_versions_pinned", "Older versions kept loaded "
                            "for their open sessions", ["model"], registry=self.registry)

    def count(self, event: Event) -> None:
        if event.kind == "loaded":
            self.loaded.labels(event.model).inc()
        elif event.kind in _STAGES:
            self.refused.labels(event.model, _STAGES[event.kind]).inc()
        elif event.kind == "removed":
            self.removed.labels(event.model).inc()

    def update(self, status: dict, serving: dict[str, int]) -> None:
        for model, entry in status.items():
            self.waiting.labels(model).set(len(entry["waiting"]))
            self.pinned.labels(model).set(len(entry["pinned"]))
        for model, version in serving.items():
            self.serving.labels(model).set(version)


def index_states(index: list[dict]) -> dict[tuple[str, int], tuple[str, str]]:
    """Triton's repository index as ``(model, version) -> (state, reason)``."""
    states = {}
    for entry in index:
        version = str(entry.get("version", ""))
        if version.isdigit():
            states[(entry["name"], int(version))] = (entry.get("state", ""),
                                                    entry.get("reason", ""))
    return states


# A client of the status port that sends nothing is dropped after this many seconds.
STATUS_TIMEOUT_S = 5.0


class _QuietHandler(WSGIRequestHandler):
    timeout = STATUS_TIMEOUT_S

    def log_message(self, *args: object) -> None:  # scrapes are not worth a log line
        pass


class _StatusServer(socketserver.ThreadingMixIn, WSGIServer):
    """A thread a connection: one idle connection to the single-threaded server held
    every scrape and `kyc repo status` until it closed."""

    daemon_threads = True


class RepositoryWatcher:
    """Keeps ``live`` in line with its source while a server runs."""

    def __init__(self, live: LiveRepository, *, index: Callable[[], list[dict]],
                 metrics_url: str | None, poll_s: float, interval_s: float = INTERVAL_S,
                 polling_observer: bool = False) -> None:
        self.live, self.index, self.metrics_url = live, index, metrics_url
        self.poll_s, self.interval_s, self.polling_observer = poll_s, interval_s, polling_observer
        self.metrics = RepositoryMetrics()
        self.events: deque[Event] = deque(maxlen=RECENT_EVENTS)
        self.serving: dict[str, list[int]] = {}
        self._wake, self._stop = threading.Event(), threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._observer = None
        self._http: WSGIServer | None = None
        self.status_port: int | None = None

    # -- life cycle ---------------------------------------------------------------
    def start(self, initial: list[Event] = ()) -> None:
        for event in initial:
            self._record(event)
        self._observer = self._observe()
        self._thread = threading.Thread(target=self._run, name="kyc-repository-watcher",
                                        daemon=True)
        self._thread.start()

    def serve_status(self, address: str, port: int) -> int:
        """``/metrics`` and ``/status`` on ``address:port`` (0: a free port); the port."""
        metrics_app = make_wsgi_app(self.metrics.registry)

        def app(environ, start_response):
            if environ.get("PATH_INFO") == "/status":
                body = json.dumps(self.status(), indent=1).encode()
                start_response("200 OK", [("Content-Type", "application/json"),
                                          ("Content-Length", str(len(body)))])
                return [body]
            return metrics_app(environ, start_response)

        self._http = make_server(address, port, app, server_class=_StatusServer,
                                 handler_class=_QuietHandler)
        threading.Thread(target=self._http.serve_forever, name="kyc-status", daemon=True).start()
        self.status_port = int(self._http.server_address[1])
        return self.status_port

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._observer is not None:
            self._observer.unschedule_all()
            self._observer.stop()
            self._observer.join(timeout=5)
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()

    def _observe(self):
        """A watchdog observer that wakes the loop on any change under the source."""
        from watchdog.events import FileSystemEventHandler
        from watchdog.observers import Observer
        from watchdog.observers.polling import PollingObserver

        wake = self._wake

        class Wake(FileSystemEventHandler):
            # Only changes: inotify also reports opens and reads, and the watcher's own
            # reads of the configs would wake it again at once (measured: a busy core).
            def on_any_event(self, event) -> None:
                if event.event_type in CHANGES:
                    wake.set()

        observer = PollingObserver(timeout=1) if self.polling_observer else Observer()
        try:
            observer.schedule(Wake(), str(self.live.source), recursive=True)
            observer.start()
        except OSError as exc:  # e.g. out of inotify watches: the loop still looks
            log.warning("no file events from %s (%s): looking every %.1f s",
                        self.live.source, exc, self.interval_s)
            return None
        return observer

    # -- the loop ---------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                self.sync_once()
            except Exception:  # never let a bad drop stop the watcher
                log.exception("repository watcher: sync failed; trying again")
                time.sleep(self.interval_s)

    def sync_once(self) -> list[Event]:
        try:
            states = index_states(self.index())
        except (OSError, ValueError):
            states = None
        # session counts matter only while a stateful model switches versions
        busy = any(m.pins or (m.stateful and m.loading) for m in self.live.models.values())
        sessions = self._sessions() if busy else None
        with self._lock:
            events = self.live.sync(states, sessions, poll_s=self.poll_s)
            for event in events:
                self._record(event)
            if states is not None:
                self.serving = {}
                for (model, version), (state, _) in sorted(states.items()):
                    if state == "READY":
                        self.serving.setdefault(model, []).append(version)
            self.metrics.update(self.live.status(),
                                {m: max(v) for m, v in self.serving.items() if v})
        return events

    def _sessions(self) -> dict[tuple[str, int], float] | None:
        if self.metrics_url is None:
            return None
        try:
            with urllib.request.urlopen(self.metrics_url, timeout=2) as reply:
                return sessions_by_version(reply.read().decode("utf-8", "replace"))
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def _record(self, event: Event) -> None:
        self.events.append(event)
        self.metrics.count(event)

    def status(self) -> dict:
        """What ``kyc repo status`` prints: per model, what serves, waits, was refused."""
        with self._lock:
            models = self.live.status()
            for name, versions in self.serving.items():
                models.setdefault(name, {"live": False, "versions": [], "policy": [],
                                         "pinned": [], "loading": [], "load_refused": [],
                                         "waiting": {}, "refused": []})["serving"] = versions
            for entry in models.values():
                entry.setdefault("serving", [])
            return {"source": str(self.live.source), "live": str(self.live.live),
                    "quiet_s": self.live.quiet_s, "models": models,
                    "events": [asdict(e) | {"text": str(e)} for e in self.events]}


def read_status(url: str, timeout: float = 5.0) -> dict:
    """``GET /status`` of a running ``kyc serve`` (``host:port`` of its status port)."""
    with urllib.request.urlopen(f"http://{url}/status", timeout=timeout) as reply:
        return json.loads(reply.read())


def format_status(status: dict) -> str:
    """``kyc repo status``: one block per model, what serves first, then what does not."""
    lines = [f"repository {status['source']} (taken once unchanged {status['quiet_s']:g} s)"]
    for name, entry in sorted(status["models"].items()):
        serving = ", ".join(map(str, entry.get("serving", []))) or "nothing"
        line = f"{name}: serving {serving}"
        if entry["pinned"]:
            line += f" (kept for open sessions: {', '.join(map(str, entry['pinned']))})"
        if entry["loading"]:
            line += f"; loading {', '.join(map(str, entry['loading']))}"
        lines.append(line)
        for what, why in sorted(entry["waiting"].items()):
            lines.append(f"  waiting  {what}: {why}")
        for refusal in entry["refused"]:
            lines.append(f"  REFUSED  {refusal['text']}")
    recent = status.get("events", [])[-10:]
    if recent:
        lines.append("recent:")
        lines.extend(f"  {time.strftime('%H:%M:%S', time.localtime(e['at']))} {e['text']}"
                     for e in recent)
    return "\n".join(lines)
