"""One liveness token, one verification: the ledger of spent tokens.

``kyc_decision`` spends a token (its random id, sealed inside it) the first time it
reads it; the second verification with the same token is refused
(``liveness_token_reused``), whichever replica it reaches, when the replicas share a
ledger. The entry holds a digest of the verification that spent it (its application
and images), so a retry of that same verification (a reply lost on the way, retried
by the SDK) is answered again rather than refused; nothing of the customer is kept.
An entry lives until the token's own expiry, so the ledger holds at most the tokens
of one token lifetime.

A ledger knows when it *began*: a token issued before that may have been spent in a
ledger now forgotten (a server restarted, Redis restarted without persistence), so it
is not taken (:attr:`Spend.UNKNOWN`; ``kyc_decision`` answers it as an expired token:
the customer makes a new liveness session). So a spent token is never accepted twice.

Where the ledger is: ``KYC_TOKEN_LEDGER``.
- ``redis://[:PASSWORD@]HOST:PORT/DB``: a Redis server every replica reaches;
  one ``SET key holder NX EXAT expiry`` per token, atomic on the server, so two replicas
  spending the same token at once cannot both win; the ledger's start is a key of its
  own (``SET NX``), read with it. deploy/ runs one; ``make test`` starts a real one for
  the replica test. A ledger that cannot be reached refuses the verification
  (``kyc_decision`` answers UNAVAILABLE): a token is never accepted unchecked.
- unset, in a server: a folder in /dev/shm named after the server's pid, one file per
  spent token, created atomically (:class:`FolderLedger`): it outlives a reload of
  ``kyc_decision`` (a new model version, a config change), and goes with the server.
- unset, outside a server (unit tests, the in-process runtime): this process's memory.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import math
import os
import socket
import stat
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from kyc.files import put_new_file

ENV_LEDGER = "KYC_TOKEN_LEDGER"
KEY_PREFIX = "kyc:token:"
BEGAN_KEY = "kyc:ledger:began"  # when this Redis began holding spent tokens
SHM_DIR = Path("/dev/shm")
BEGAN_FILE = "began"


class Spend(enum.Enum):
    """What spending a token found."""

    FIRST = "first"  # not spent before: spent now
    AGAIN = "again"  # spent before by this same verification (a retry)
    TAKEN = "taken"  # spent before by another verification
    UNKNOWN = "unknown"  # issued before this ledger began: it may have been spent

    @property
    def accepted(self) -> bool:
        return self in (Spend.FIRST, Spend.AGAIN)


class LedgerUnavailableError(RuntimeError):
    """The shared ledger did not answer: the token cannot be checked now."""


class LedgerError(RuntimeError):
    """The ledger's folder holds something this server did not create."""


class Ledger(Protocol):
    def spend(self, token_id: str, issued_at: float, expires_at: float,
              holder: str) -> Spend:
        """Spend ``token_id`` for ``holder`` (kyc.decision.step's digest of the
        verification's application and images): FIRST the first time, AGAIN for the
        same holder, TAKEN for another, UNKNOWN for a token issued before the ledger
        began."""


def _settled(began: float, issued_at: float, previous: str | None, holder: str) -> Spend:
    """The outcome once the store said who held the token before (None: nobody)."""
    if issued_at < began:
        return Spend.UNKNOWN
    if previous is None:
        return Spend.FIRST
    return Spend.AGAIN if holder and previous == holder else Spend.TAKEN


class MemoryLedger:
    """Spent tokens in this process, forgotten at their expiry; it began when made."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._spent: dict[str, tuple[float, str]] = {}  # token id -> (expiry, holder)
        self._lock = threading.Lock()
        self._clock = clock
        self.began = clock()
        self._next_prune = 0.0

    def spend(self, token_id: str, issued_at: float, expires_at: float,
              holder: str) -> Spend:
        now = self._clock()
        with self._lock:
            if now >= self._next_prune:  # at most one sweep a second
                self._spent = {k: v for k, v in self._spent.items() if v[0] > now}
                self._next_prune = now + 1.0
            previous = self._spent.get(token_id)
            if previous is None:
                self._spent[token_id] = (expires_at, holder)
            return _settled(self.began, issued_at, previous and previous[1], holder)


def shm_folder(server_pid: int, shm_dir: Path | None = None) -> Path:
    """The folder ledger of the tritonserver ``server_pid`` (removed when it stops), in
    ``shm_dir`` (default :data:`SHM_DIR`)."""
    return (shm_dir or SHM_DIR) / f"kyc_{server_pid}_ledger"


class FolderLedger:
    """Spent tokens as files of one folder, shared by every process of one server and
    kept across reloads of ``kyc_decision``: one file a token, named by a digest of its
    id, holding its expiry and holder, put in place with ``link`` (atomic: of two
    processes spending one token at once, one finds the other's file).

    Why files, not SQLite or a mapped table: the stubs' Python may lack ``_sqlite3`` (as
    it lacks ``_ssl``: RespConnection), and a token lifetime holds few tokens. The
    folder is made 0700 by the first process; the others refuse one that is a link, is
    another user's or that others may enter (/dev/shm is every local user's)."""

    PRUNE_EVERY_S = 10.0

    def __init__(self, folder: Path, clock: Callable[[], float] = time.time) -> None:
        self.folder = folder
        self._clock = clock
        self._next_prune = 0.0
        self._lock = threading.Lock()
        _own_folder(folder)
        self._put(BEGAN_FILE, _stamp(clock()))  # the first process to get here wins
        self.began = float(self._read(BEGAN_FILE) or clock())

    @classmethod
    def for_server(cls) -> FolderLedger:
        """The ledger of the server this stub belongs to (its parent process)."""
        return cls(shm_folder(os.getppid()))

    def spend(self, token_id: str, issued_at: float, expires_at: float,
              holder: str) -> Spend:
        self._prune()
        name = hashlib.sha256(token_id.encode()).hexdigest()[:32]
        # the expiry rounded up: a file swept before its token expires frees it to be spent
        # again (rounded to the nearest second, it was, for the last half second)
        previous = None if self._put(name, f"{math.ceil(expires_at)} {holder}") else (
            self._read(name) or " ").split(" ", 1)[1]
        return _settled(self.began, issued_at, previous, holder)

    def _put(self, name: str, text: str) -> bool:
        """Write ``name`` unless it exists: True when this call wrote it."""
        return put_new_file(self.folder / name, text.encode())

    def _read(self, name: str) -> str | None:
        try:
            fd = os.open(self.folder / name, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        try:
            return os.read(fd, 4096).decode("ascii", "replace")
        finally:
            os.close(fd)

    def _prune(self) -> None:
        """Remove the files of expired tokens, at most once every PRUNE_EVERY_S."""
        now = self._clock()
        with self._lock:
            if now < self._next_prune:
                return
            self._next_prune = now + self.PRUNE_EVERY_S
        for entry in os.scandir(self.folder):
            if entry.name == BEGAN_FILE or entry.name.startswith("."):
                continue
            expiry = (self._read(entry.name) or "0").split(" ", 1)[0]
            if _number(expiry) < now:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)


def _own_folder(folder: Path) -> None:
    """``folder`` made 0700, or found as a folder of this user that only it enters."""
    try:
        os.mkdir(folder, 0o700)
        os.chmod(folder, 0o700)  # whatever the umask took away
        return
    except FileExistsError:
        pass
    info = os.lstat(folder)
    if (not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid()
            or stat.S_IMODE(info.st_mode) != 0o700):
        raise LedgerError(f"token ledger {folder}: refused, not a folder of this user with "
                          f"mode 0700 (uid {info.st_uid}, mode {info.st_mode:o})")


def _stamp(t: float) -> str:
    """A time to the millisecond, rounded down (a ledger never begins after it began)."""
    return f"{math.floor(t * 1000) / 1000:.3f}"


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:  # not ours: swept as expired
        return 0.0


class RedisLedger:
    """Spent tokens in a Redis server shared by every replica, over
    :class:`RespConnection`: per token, in one round trip, the ledger's start kept
    (``SET began now NX``) and read, and ``SET key holder NX EXAT expiry``; a second
    round trip reads who spent a token only when it was spent before."""

    def __init__(self, url: str, timeout_s: float = 1.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.connection = RespConnection(url, timeout_s)
        self._clock = clock
        # a fresh Redis begins before the first token is issued (kyc_decision loads
        # before the server is ready); one that cannot be reached yet begins at the
        # first spend
        with contextlib.suppress(LedgerUnavailableError):
            self.connection.command(*self._begin())

    def _begin(self) -> tuple[str, ...]:
        return ("SET", BEGAN_KEY, _stamp(self._clock()), "NX")

    def spend(self, token_id: str, issued_at: float, expires_at: float,
              holder: str) -> Spend:
        key = KEY_PREFIX + token_id
        _, began, stored = self.connection.pipeline(
            self._begin(), ("GET", BEGAN_KEY),
            ("SET", key, holder or "1", "NX", "EXAT", str(max(int(expires_at) + 1, 1))))
        previous = None if stored == "OK" else self.connection.command("GET", key)
        # spent before: by this very verification when its reply was lost (the SDK
        # retries UNAVAILABLE), else by another
        return _settled(_number(str(began)), issued_at,
                        None if stored == "OK" else str(previous), holder)


class RespConnection:
    """A Redis connection that speaks RESP2 itself, for the few commands the ledger sends.

    Why not redis-py: the local server's Python stubs embed Debian's libpython 3.11.2
    with the venv's standard library (pyenv 3.11.7), whose ``_ssl`` does not load there,
    and redis-py imports ``ssl`` whatever the URL: kyc_decision would not start with a
    ledger configured. The protocol for SET/GET/TTL is a few lines. ``redis://[:PASSWORD
    @]HOST[:PORT][/DB]``; no TLS (the ledger is reached inside the cluster, under a
    NetworkPolicy). Any failure closes the socket (the next command reconnects) and
    raises :class:`LedgerUnavailableError`."""

    def __init__(self, url: str, timeout_s: float = 1.0) -> None:
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        if parts.scheme != "redis" or not parts.hostname:
            raise ValueError(f"{ENV_LEDGER} must be redis://[:PASSWORD@]HOST[:PORT][/DB]")
        self.address = (parts.hostname, parts.port or 6379)
        self.password = parts.password
        self.db = int(parts.path.strip("/") or 0)
        self.timeout_s = timeout_s
        self._sock: socket.socket | None = None
        self._file = None
        self._lock = threading.Lock()

    def command(self, *args: str) -> str | int | None:
        return self.pipeline(args)[0]

    def pipeline(self, *commands: tuple[str, ...]) -> list[str | int | None]:
        """The replies of ``commands``, sent together (one round trip)."""
        with self._lock:
            try:
                if self._sock is None:
                    self._connect()
                self._sock.sendall(b"".join(map(_encoded, commands)))  # type: ignore[union-attr]
                return [self._reply() for _ in commands]
            except (OSError, ValueError) as exc:
                self.close()
                raise LedgerUnavailableError(
                    f"the token ledger did not answer ({type(exc).__name__})") from None

    def _connect(self) -> None:
        self._sock = socket.create_connection(self.address, timeout=self.timeout_s)
        self._file = self._sock.makefile("rb")
        if self.password:
            self._roundtrip(("AUTH", self.password))
        if self.db:
            self._roundtrip(("SELECT", str(self.db)))

    def _roundtrip(self, args: tuple[str, ...]) -> str | int | None:
        self._sock.sendall(_encoded(args))  # type: ignore[union-attr]
        return self._reply()

    def _reply(self) -> str | int | None:
        line = self._file.readline()  # type: ignore[union-attr]
        if not line.endswith(b"\r\n"):
            raise ConnectionError("the connection closed")
        kind, body = line[:1], line[1:-2].decode()
        if kind == b"+":
            return body
        if kind == b":":
            return int(body)
        if kind == b"$":
            size = int(body)
            return None if size < 0 else self._file.read(size + 2)[:-2].decode()  # type: ignore[union-attr]
        if kind == b"-":
            raise ValueError(f"redis refused: {body.split(' ', 1)[0]}")
        raise ValueError("not a RESP2 reply")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock = self._file = None


def _encoded(args: tuple[str, ...]) -> bytes:
    """One command in RESP2: an array of bulk strings."""
    parts = [a.encode() for a in args]
    return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in parts)


def ledger_from_environ(environ: Mapping[str, str] | None, in_server: bool = False) -> Ledger:
    """The ledger ``KYC_TOKEN_LEDGER`` names; else, in a server, its folder ledger, and
    outside one this process's memory."""
    url = (os.environ if environ is None else environ).get(ENV_LEDGER, "")
    if url:
        return RedisLedger(url)
    return FolderLedger.for_server() if in_server else MemoryLedger()
