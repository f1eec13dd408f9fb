"""Admission control of the entries ``kyc_ensemble`` and ``document_ocr``: a request is
taken only while the server can finish it inside its budget, else refused at once
(UNAVAILABLE, retry after a backoff).

Why. The ensemble's steps share every queued customer, so without a bound a flash
crowd slows every customer together and all of them miss the SLA. Triton 2.51's own
shedding (a dynamic batcher's queue policy) loses wake-ups (``kyc.budgets``), so the
bound is ours, on mechanisms this Triton has.

How. ``kyc_intake`` (the first step of both entries, before any model works on the
request) takes a *ticket* for each customer (or document) whose images pass its
checks, or sheds the request when as many tickets as the *limit* are out. The ticket
travels through the ensemble as a tensor (``ADMISSION``: entry, slot, generation) to
the last step (``kyc_decision``, ``ocr_postprocess``), which gives it back with the
request's latency. A request that fails in a step between never reaches the last
step: its ticket expires after ``ttl_s`` (the SLA). Each entry has its own limit and
state (:data:`ENTRIES`): a document read alone costs a fraction of a customer; the
budgets are ``kyc.budgets.ADMISSION_BUDGET_MS`` (the SLA for both, and why).

Only real customers teach the limit. A ticket is given back under its seal only (a
forged one would free another request's place), and it *teaches* only when the work
of its request was done and is proven: ``kyc_decision`` gives back the tickets of
requests whose whole chain of custody holds (both faces and the document's reading
attested for the sealed images) and whose reading found text; ``ocr_postprocess``
(``document_ocr``) those whose canvas ``ocr_preprocess`` attested for the sealed page
and whose reading found text. Any other sealed ticket is freed without moving the
limit: a caller who takes tickets from ``kyc_intake`` and hands them straight back
(the review's attack, 4 -> 64 in 2.1 s) frees its places and teaches nothing. A map
forged in place of ``ocr_det``'s (an ONNX model cannot attest) reads nothing, so it
teaches nothing either.

The limit follows measured latency, in the style of Netflix's concurrency-limits:
each ticket given back tells, by Little's law, how many customers the server finishes
inside the target (the tickets out over its latency, times the target). A customer
over the target cuts the limit to that estimate; one under it, while the limit was in
use (at least half of it out when the customer came: idle traffic does not inflate
it), raises it by 1 while it came in half the target and the estimate leaves room,
else by 1/limit; an expired ticket cuts it by ``decrease`` at most once per half a
target. It starts at ``initial_limit`` (4): a crowd on a fresh server is not admitted
far past what the server finishes inside the SLA (at 8, measured on a 2-core VM, the
first eight took 10-17 s). The target is a share of the entry's budget
(``kyc.budgets.ADMISSION_TARGET_SHARE``): the mean latency of admitted customers kept
there leaves their tail inside it. So the limit settles near capacity x target
(Little's law) on any hardware. A request
that finds nothing in flight is always taken, whatever its number of customers and
the limit: sequential customers are never refused.

The state is shared by every instance of ``kyc_intake`` and the last steps of one
server: a small file per entry in /dev/shm named after the server's pid (the stubs'
parent), mapped by each stub, every change under an exclusive ``flock``. Outside a server
(unit tests, the in-process runtime) it is a plain array and admission is off.
Counts and times only: no customer data.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from kyc.budgets import ADMISSION_BUDGET_MS, ADMISSION_TARGET_SHARE, SLA_MS

ENTRIES = tuple(ADMISSION_BUDGET_MS)  # a ticket names its entry by its index here

SLOTS = 256  # the most tickets out at once (max_limit is capped to it)
# header: [magic, limit, last decrease time, out at the last admission]; per slot:
# [taken (0/1), admitted at, generation, tickets out when admitted, given back (0: no,
#  1: teaching the limit, 2: freed only), given back at]
HEADER, WIDTH = 4, 6
TAKEN, AT, GEN, OUT, BACK, BACK_AT = range(WIDTH)
TEACHES, FREES = 1.0, 2.0  # how a ticket came back (BACK)
MAGIC = 20261128.0
SHM_DIR = Path("/dev/shm")


def shm_path(server_pid: int, entry: str, shm_dir: Path | None = None) -> Path:
    """The state file of ``entry`` in the tritonserver ``server_pid`` (removed when it
    stops), in ``shm_dir`` (default :data:`SHM_DIR`)."""
    if entry not in ENTRIES:
        raise ValueError(f"no admission control for {entry!r}")
    return (shm_dir or SHM_DIR) / f"kyc_{server_pid}_admission_{entry}"


@dataclass(frozen=True)
class AdmissionSettings:
    """``kyc_intake`` parameters (``admission_*``)."""

    enabled: bool = True
    target_s: float = SLA_MS / 1000 * ADMISSION_TARGET_SHARE
    ttl_s: float = SLA_MS / 1000
    # A server starts small and grows to its capacity in a few round trips: a crowd
    # at start is not admitted past what it can finish inside the SLA.
    initial_limit: float = 4.0
    min_limit: float = 2.0
    max_limit: float = 64.0
    decrease: float = 0.8  # the limit is multiplied by this on an expired ticket

    def for_entry(self, entry: str) -> AdmissionSettings:
        """These settings with ``entry``'s target (a share of its budget)."""
        return replace(self, target_s=ADMISSION_BUDGET_MS[entry] / 1000 * ADMISSION_TARGET_SHARE)


TICKET_WIDTH = 3  # a ticket as a tensor row: entry (index in ENTRIES), slot, generation
TICKET_TENSOR = "ADMISSION"  # kyc_intake's output, the last steps' optional input


@dataclass(frozen=True)
class Ticket:
    slot: int
    generation: int
    entry: str = ENTRIES[0]

    def as_array(self) -> np.ndarray:
        return np.array([ENTRIES.index(self.entry), self.slot, self.generation],
                        dtype=np.int64)


def tickets_in(arrays: Iterable[np.ndarray]) -> list[Ticket]:
    """The tickets in ``ADMISSION`` tensors (rows of :data:`TICKET_WIDTH`), without the
    rows that hold none (slot -1: admission off) or name no entry."""
    rows = [np.asarray(a, np.int64).reshape(-1, TICKET_WIDTH) for a in arrays]
    return [Ticket(int(slot), int(generation), ENTRIES[int(entry)])
            for entry, slot, generation in (np.concatenate(rows).tolist() if rows else [])
            if slot >= 0 and 0 <= entry < len(ENTRIES)]


@dataclass(frozen=True)
class Admitted:
    tickets: tuple[Ticket, ...]  # empty: shed
    out: int  # tickets out after this decision
    limit: float
    expired: int  # tickets found expired (and freed) on the way

    @property
    def ticket(self) -> Ticket | None:
        """The first ticket (a request of one customer), None when shed."""
        return self.tickets[0] if self.tickets else None


class AdmissionState:
    """The limit and the tickets, over ``table`` (float64, HEADER + SLOTS x WIDTH).

    ``kyc_intake`` admits (and owns the limit: :meth:`admit` first takes in the tickets
    given back since, then decides); ``kyc_decision`` only marks its customers' tickets
    given back (:meth:`release`), so it needs none of the settings."""

    def __init__(self, table: np.ndarray, settings: AdmissionSettings | None) -> None:
        self.table = table
        self.settings = settings
        self.header = table[:HEADER]
        self.slots = table[HEADER:].reshape(SLOTS, WIDTH)
        if settings is not None and self.header[0] != MAGIC:  # a new state
            self.table[:] = 0.0
            self.header[:] = (MAGIC, self._clamp(settings.initial_limit), 0.0, 0.0)

    @staticmethod
    def size() -> int:
        return (HEADER + SLOTS * WIDTH) * 8

    def _clamp(self, limit: float) -> float:
        s = self._settings()
        return float(min(max(limit, s.min_limit), s.max_limit, SLOTS))

    def _settings(self) -> AdmissionSettings:
        if self.settings is None:
            raise RuntimeError("only kyc_intake's side admits")
        return self.settings

    @property
    def limit(self) -> float:
        return float(self.header[1])

    def _decrease(self, now: float) -> None:
        s = self._settings()
        if now - self.header[2] >= s.target_s / 2:
            self.header[1] = self._clamp(self.limit * s.decrease)
            self.header[2] = now

    def _moved(self, latency: float, in_flight: float) -> None:
        """The limit after one ticket back ``latency`` s after it was taken, with about
        ``in_flight`` tickets out meanwhile. By Little's law the server finishes
        ``in_flight / latency`` customers a second, so ``fits`` of them stay inside the
        target: a slow answer cuts the limit to it (an estimate, so a crowd of slow
        answers cuts once, not once each); a fast one while the limit was in use
        raises it by 1 while it came in half the target and ``fits`` leaves room (a
        new or a larger server reaches its capacity in a few round trips), else by
        1/limit (probing: a limit near capacity does not overshoot it)."""
        s = self._settings()
        fits = in_flight * s.target_s / max(latency, 1e-3)
        if latency > s.target_s:
            self.header[1] = self._clamp(min(self.limit, fits))
        else:
            roomy = latency <= s.target_s / 2 and self.limit + 1.0 <= fits
            step = 1.0 if roomy else 1.0 / self.limit
            self.header[1] = self._clamp(self.limit + step)

    def _take_back(self, now: float) -> tuple[list[float], int]:
        """Free the tickets given back (their latencies) and those expired (counted),
        moving the limit for each."""
        s = self._settings()
        back = self.slots[:, BACK] > 0
        teaches = self.slots[:, BACK] == TEACHES
        out_now = int(np.count_nonzero(self.slots[:, TAKEN]))
        latencies = (self.slots[teaches, BACK_AT] - self.slots[teaches, AT]).tolist()
        for latency, out_then in zip(latencies, self.slots[teaches, OUT].tolist(), strict=True):
            # in use: at least half the limit out when it came (a quiet day does not
            # open the gate); a slow answer counts whenever it comes
            if latency > s.target_s or out_then + 1 >= self.limit / 2:
                self._moved(latency, max(out_then + 1, out_now))
        expired = (self.slots[:, TAKEN] > 0) & ~back & (now - self.slots[:, AT] > s.ttl_s)
        if expired.any():
            self._decrease(now)
        free = back | expired
        self.slots[free, TAKEN] = 0.0
        self.slots[free, BACK] = 0.0
        return latencies, int(expired.sum())

    def admit(self, now: float, count: int = 1, entry: str = ENTRIES[0]) -> Admitted:
        """``count`` tickets for the customers of one request arriving at ``now``, all or
        none: none when they would take more than the limit, unless nothing is in
        flight (an idle server takes any request)."""
        _, expired = self._take_back(now)
        out = int(np.count_nonzero(self.slots[:, TAKEN]))
        self.header[3] = out
        if out > 0 and out + count > int(self.limit):
            return Admitted((), out, self.limit, expired)
        tickets = []
        for slot in np.flatnonzero(self.slots[:, TAKEN] == 0)[:count].tolist():
            generation = self.slots[slot, GEN] + 1
            self.slots[slot] = (1.0, now, generation, out, 0.0, 0.0)
            tickets.append(Ticket(slot, int(generation), entry))
        self.header[3] = out + count
        return Admitted(tuple(tickets), out + count, self.limit, expired)

    def release(self, ticket: Ticket, now: float, teaches: bool = True) -> bool:
        """Mark ``ticket`` given back at ``now``, its latency ``teaches`` the limit or
        not (its request's work not proven); False for one expired (or unknown)."""
        if not 0 <= ticket.slot < SLOTS:
            return False
        row = self.slots[ticket.slot]
        if row[TAKEN] == 0 or row[BACK] > 0 or int(row[GEN]) != ticket.generation:
            return False
        row[BACK], row[BACK_AT] = (TEACHES if teaches else FREES), now
        return True


class StateFileError(RuntimeError):
    """The admission state path holds something this server did not create."""


def open_state_file(path: Path) -> int:
    """``path`` opened read-write: created 0600 by the first stub of the server, opened by
    the others, never through a symlink.

    /dev/shm is writable by every local user, so a file or symlink placed there under the
    name of a server pid to come would otherwise be mapped (or followed) by the stubs.
    O_EXCL makes exactly one stub the creator; the others find EEXIST and check what they
    opened (a regular file, ours, 0600) instead of trusting the name.
    """
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
        os.fchmod(fd, 0o600)  # whatever the umask took away
        return fd
    except FileExistsError:
        pass
    try:
        # O_NONBLOCK: a fifo placed there must not hang the stub (mmap ignores it)
        fd = os.open(path, flags | os.O_NONBLOCK)
    except OSError as exc:  # ELOOP: a symlink
        raise StateFileError(f"admission state {path}: refused ({exc.strerror}); "
                             "not a regular file of this user") from None
    info = os.fstat(fd)
    if (not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid()
            or stat.S_IMODE(info.st_mode) != 0o600):
        os.close(fd)
        raise StateFileError(f"admission state {path}: refused, not a regular file of this "
                             f"user with mode 0600 (uid {info.st_uid}, mode "
                             f"{info.st_mode:o})")
    return fd


class SharedAdmission:
    """:class:`AdmissionState` of one entry in a file every stub of one server maps,
    under ``flock``."""

    def __init__(self, path: Path, settings: AdmissionSettings | None,
                 entry: str = ENTRIES[0]) -> None:
        self.path = path
        self.entry = entry
        size = AdmissionState.size()
        self._fd = open_state_file(path)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            if os.fstat(self._fd).st_size < size:
                os.ftruncate(self._fd, size)
            self._map = mmap.mmap(self._fd, size)
            self.state = AdmissionState(np.frombuffer(self._map, dtype=np.float64), settings)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    @classmethod
    def for_server(cls, settings: AdmissionSettings | None, entry: str) -> SharedAdmission:
        """``entry``'s state in the server this stub belongs to (its parent process)."""
        return cls(shm_path(os.getppid(), entry), settings, entry)

    def admit(self, now: float, count: int = 1) -> Admitted:
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            return self.state.admit(now, count, self.entry)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def release(self, ticket: Ticket, now: float, teaches: bool = True) -> bool:
        return self.release_all([(ticket, teaches)], now) == 1

    def release_all(self, tickets: list[tuple[Ticket, bool]], now: float) -> int:
        """Give back ``tickets`` (each with whether it teaches the limit) under one
        lock; how many were still out."""
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            return sum(self.state.release(ticket, now, teaches) for ticket, teaches in tickets)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        self.state = None  # type: ignore[assignment]  # the array views the map
        self._map.close()
        os.close(self._fd)


class TicketReturns:
    """The last step's side: gives back the tickets it receives, each to its entry's
    state, opened on first use (``open``: an entry's :class:`SharedAdmission`)."""

    def __init__(self, open: Callable[[str], SharedAdmission] | None = None) -> None:
        self._open = open or (lambda entry: SharedAdmission.for_server(None, entry))
        self._states: dict[str, SharedAdmission] = {}

    def give_back(self, rows: Iterable[tuple[np.ndarray, bool]], now: float) -> int:
        """Give back the tickets in ``rows`` (``ADMISSION`` rows, each with whether its
        request's work, proven, teaches the limit); how many were still out."""
        by_entry: dict[str, list[tuple[Ticket, bool]]] = {}
        for row, teaches in rows:
            for ticket in tickets_in([row]):
                by_entry.setdefault(ticket.entry, []).append((ticket, teaches))
        back = 0
        for entry, tickets in by_entry.items():
            if entry not in self._states:
                self._states[entry] = self._open(entry)
            back += self._states[entry].release_all(tickets, now)
        return back

    def close(self) -> None:
        for state in self._states.values():
            state.close()
        self._states.clear()


class AdmissionMetrics:
    """``kyc_admission_*`` on Triton's metrics endpoint (labels model, version, entry):
    requests' customers (or documents) admitted, shed and whose ticket expired
    (counters), the limit and the tickets out at the last admission (gauges, set: the
    state is shared), per entry (:data:`ENTRIES`)."""

    def __init__(self, model: str, version: str, publish: bool = True) -> None:
        from kyc.pipeline.metrics import COUNTER, GAUGE, ModelMetrics

        def each(key: str) -> list[tuple[str, dict[str, str]]]:
            return [(f"{key}:{entry}", {"model": model, "version": version, "entry": entry})
                    for entry in ENTRIES]

        self._metrics = ModelMetrics("kyc_admission", publish)
        add = self._metrics.add
        add("admitted_total", COUNTER, "customers (documents for document_ocr) admitted",
            each("admitted"))
        add("shed_total", COUNTER, "customers (documents) refused at once (UNAVAILABLE): "
            "the limit of requests in flight was reached", each("shed"))
        add("expired_total", COUNTER, "admission tickets never given back (the request "
            "failed in a step before the last)", each("expired"))
        add("limit", GAUGE, "customers (documents) the server takes in flight now",
            each("limit"))
        add("in_flight", GAUGE, "customers (documents) in flight at the last admission",
            each("in_flight"))

    def record(self, decision: Admitted, rows: int, entry: str = ENTRIES[0]) -> None:
        def get(key: str):
            return self._metrics.get(f"{key}:{entry}")

        get("admitted" if decision.tickets else "shed").increment(rows)
        if decision.expired:
            get("expired").increment(decision.expired)
        get("limit").set(decision.limit)
        get("in_flight").set(decision.out)

    def close(self) -> None:
        self._metrics.close()
