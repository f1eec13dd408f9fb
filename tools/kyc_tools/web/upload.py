"""The uploads of ``POST /api/verify``: read as they stream in, each field within its
byte cap, before anything is parsed.

The page sends ``multipart/form-data``: the document and the selfie as raw bytes, the
liveness token as the page got it (base64), and the application reference its liveness
session was bound to (text). Each part is kept as it arrives, so a
verification holds about its images' size (a JSON body of base64 held three times
that: 70 MiB at the peak for a 21 MiB body). A JSON body ``{"document", "selfie",
"liveness_token"}`` (base64 each) is still read, capped before it is parsed.

A body must also come in at a pace (:class:`Pace`: a deadline that grows with what has
come, and a longest gap; else 408 ``too_slow``), and the bodies being read hold at most
a budget of memory in all (:class:`UploadBudget`; past it, 503 ``busy``): a slow client
holds a connection, never a verification, and no more memory than it has sent.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

from kyc.verdict import APPLICATION_PARAMETER, MAX_APPLICATION_CHARS, application_ref

TOKEN_FIELD_BYTES = 64 * 1024  # the token, base64 (kyc.liveness.token allows 16 KiB)
HEADER_BYTES = 1024  # a part's headers (a browser writes about 100 bytes)
JSON_SLACK = 64 * 1024  # a JSON body's keys, quotes and spaces


class BadInputError(ValueError):
    """A request the page should not have sent: the code names the words to show."""

    def __init__(self, code: str, status: int = 400) -> None:
        super().__init__(code)
        self.code, self.status = code, status


def too_large() -> BadInputError:
    return BadInputError("too_large", 413)


def too_slow() -> BadInputError:
    return BadInputError("too_slow", 408)


@dataclass(frozen=True)
class Pace:
    """How fast a body must come in: within ``grace_s`` plus one second for each
    ``min_bytes_per_s`` received so far, with no gap between two chunks longer than
    ``idle_s`` (the defaults and why: ``kyc_tools.web.app.WebSettings``)."""

    grace_s: float
    min_bytes_per_s: float
    idle_s: float


class UploadBudget:
    """The memory the bodies being read hold, all together, at most ``limit``: each
    counted at twice the bytes it has received (its peak as it is parsed: about 1.5
    times as a form, twice as JSON, docs/reliability.md). A trickle holds what it has
    sent, not what it declares."""

    def __init__(self, limit: int) -> None:
        self.limit, self.held = limit, 0


class BodyRead:
    """One body as it is read (:meth:`chunks`): within its pace (None: no deadline) and
    its budget; :meth:`close` gives its share of the budget back."""

    def __init__(self, budget: UploadBudget, pace: Pace | None) -> None:
        self.budget, self.pace, self.held = budget, pace, 0

    async def chunks(self, stream: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """``stream``'s chunks; :class:`BadInputError` ``too_slow`` (408) once the body
        falls behind its pace, ``busy`` (503) for a chunk past the budget (never waits)."""
        loop, pace = asyncio.get_running_loop(), self.pace
        started, received, chunks = loop.time(), 0, aiter(stream)
        while True:
            wait = None if pace is None else min(
                pace.idle_s, started + pace.grace_s + received / pace.min_bytes_per_s - loop.time())
            try:
                chunk = await asyncio.wait_for(anext(chunks, None), wait)
            except asyncio.TimeoutError:  # (Python 3.10's is not the builtin)
                raise too_slow() from None
            if chunk is None:
                return
            cost = 2 * len(chunk)
            if self.budget.held + cost > self.budget.limit:
                raise BadInputError("busy", 503)
            self.budget.held, self.held, received = (self.budget.held + cost, self.held + cost,
                                                     received + len(chunk))
            yield chunk

    def close(self) -> None:
        self.budget.held, self.held = self.budget.held - self.held, 0


@dataclass(frozen=True)
class Upload:
    """One verification's inputs."""

    document: bytes
    selfie: bytes
    token: bytes  # b"": no liveness session
    application: str | None = None  # the liveness session's (the token is bound to it)


def field_caps(max_image_bytes: int) -> dict[str, int]:
    """Each field's cap, as sent in a form (the token in base64)."""
    return {"document": max_image_bytes, "selfie": max_image_bytes,
            "liveness_token": TOKEN_FIELD_BYTES, "application": MAX_APPLICATION_CHARS}


def body_cap(caps: Mapping[str, int]) -> int:
    """The most a body with these fields may hold, in either encoding."""
    return sum(cap * 4 // 3 + 8 + HEADER_BYTES for cap in caps.values()) + JSON_SLACK


async def read_upload(headers: Mapping[str, str], stream: AsyncIterator[bytes],
                      max_image_bytes: int, pace: Pace | None = None,
                      budget: UploadBudget | None = None) -> Upload:
    """The verification's inputs from a form or a JSON body, or :class:`BadInputError`.
    A body that says it is larger than it may be is refused before it is read; one
    slower than ``pace`` or past ``budget`` while it is read (None: no bound), when it
    falls behind. Its share of the budget is given back however the read ends."""
    caps = field_caps(max_image_bytes)
    declared = headers.get("content-length", "")
    if declared.isdigit() and int(declared) > body_cap(caps):
        raise too_large()
    read = BodyRead(budget or UploadBudget(2 * body_cap(caps)), pace)
    try:
        return await parse_upload(headers, read.chunks(stream), caps)
    finally:
        read.close()  # its memory is the verification's now, or garbage


async def parse_upload(headers: Mapping[str, str], stream: AsyncIterator[bytes],
                       caps: Mapping[str, int]) -> Upload:
    kind = headers.get("content-type", "")
    if kind.lower().startswith("multipart/form-data"):
        fields = await read_form(stream, boundary_of(kind), caps)
        token = fields.pop("liveness_token", b"").decode("ascii", "replace")
        fields["liveness_token"] = b64decode(token, TOKEN_FIELD_BYTES) if token else b""
    else:
        fields = await read_json(stream, caps)
    if not fields.get("document") or not fields.get("selfie"):
        raise BadInputError("bad_image")
    try:
        application = application_ref(
            {APPLICATION_PARAMETER: fields.get("application", b"").decode("ascii")})
    except (UnicodeDecodeError, ValueError):
        raise BadInputError("bad_request") from None
    return Upload(fields["document"], fields["selfie"], fields.get("liveness_token", b""),
                  application)


def boundary_of(content_type: str) -> bytes:
    found = re.search(r';\s*boundary="?([0-9A-Za-z\'()+_,./:=? -]{1,70})"?\s*(;|$)',
                      content_type)
    if found is None:
        raise BadInputError("bad_image")
    return found.group(1).rstrip().encode()


async def read_form(stream: AsyncIterator[bytes], boundary: bytes,
                    caps: Mapping[str, int]) -> dict[str, bytes]:
    form, size, cap = FormReader(boundary, caps), 0, body_cap(caps)
    async for chunk in stream:
        size += len(chunk)
        if size > cap:
            raise too_large()
        form.feed(chunk)
    return form.close()


class FormReader:
    """The fields of one ``multipart/form-data`` body (RFC 7578), fed as it arrives: a
    field not in ``caps``, a field twice, a field or a part's headers over its cap or a
    body that does not end are refused (:class:`BadInputError`). The buffer holds at
    most the field being read."""

    def __init__(self, boundary: bytes, caps: Mapping[str, int]) -> None:
        self.delimiter = b"\r\n--" + boundary
        self.caps = caps
        self.fields: dict[str, bytes] = {}
        self.buffer = bytearray(b"\r\n")  # the first delimiter has no line break before it
        self.name: str | None = None  # the field being read; None: at a delimiter
        self.searched = 0  # the buffer's bytes known to start no delimiter
        self.ended = False

    def feed(self, chunk: bytes) -> None:
        if self.ended:  # the epilogue, which means nothing
            return
        self.buffer += chunk
        while not self.ended and (self._headers() if self.name is None else self._content()):
            pass

    def close(self) -> dict[str, bytes]:
        if not self.ended:
            raise BadInputError("bad_image")
        return self.fields

    def _headers(self) -> bool:
        """A delimiter, then the next part's headers or the end; False: more to come."""
        start = len(self.delimiter)
        if not self.buffer.startswith(self.delimiter[:len(self.buffer)]):
            raise BadInputError("bad_image")
        if self.buffer[start:start + 2] == b"--":
            self.ended = True
            return False
        end = self.buffer.find(b"\r\n\r\n", start)
        if end < 0:
            if len(self.buffer) > start + HEADER_BYTES:
                raise BadInputError("bad_image")
            return False
        name = field_name(bytes(self.buffer[start:end]))
        if name not in self.caps or name in self.fields:
            raise BadInputError("bad_image")
        self.name, self.buffer = name, self.buffer[end + 4:]
        return True

    def _content(self) -> bool:
        """The current field, up to the next delimiter; False: more to come."""
        cap = self.caps[self.name]
        at = self.buffer.find(self.delimiter, self.searched)
        if at < 0:
            self.searched = max(0, len(self.buffer) - len(self.delimiter) + 1)
            if self.searched > cap:
                raise too_large()
            return False
        if at > cap:
            raise too_large()
        with memoryview(self.buffer) as view:
            self.fields[self.name] = bytes(view[:at])
        # a new buffer: the old one's memory (the whole field) goes back at once
        self.name, self.buffer, self.searched = None, self.buffer[at:], 0
        return True


def field_name(headers: bytes) -> str | None:
    found = re.search(rb'content-disposition:\s*form-data\s*;[^\r\n]*?\bname="([^"\r\n]*)"',
                      headers, re.IGNORECASE)
    return found.group(1).decode("latin-1") if found else None


async def read_body(stream: AsyncIterator[bytes], limit: int) -> bytes:
    """The request body, refused past ``limit`` bytes while it is read."""
    chunks, size = [], 0
    async for chunk in stream:
        size += len(chunk)
        if size > limit:
            raise too_large()
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json(stream: AsyncIterator[bytes], caps: Mapping[str, int]) -> dict[str, bytes]:
    """The fields of a JSON body (base64 each), capped before parsing. At most two copies
    of the body live at once: its bytes are let go once they are text, the text once
    parsed, each field's text once decoded."""
    try:
        body = json.loads((await read_body(stream, body_cap(caps))).decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise BadInputError("bad_image") from None
    if not isinstance(body, dict):
        raise BadInputError("bad_image")
    return {name: decode_image_field(body, name, cap, required=False)
            for name, cap in caps.items()}


def decode_image_field(body: dict, name: str, limit: int, required: bool = True) -> bytes:
    """``body[name]``, base64, decoded (taken out of ``body``: its text goes at once)."""
    value = body.pop(name, None) or ""
    if not isinstance(value, str):
        raise BadInputError("bad_image")
    if not value:
        if required:
            raise BadInputError("bad_image")
        return b""
    return b64decode(value, limit)


def b64decode(value: str, limit: int) -> bytes:
    if len(value) > limit * 4 // 3 + 8:
        raise too_large()
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise BadInputError("bad_image") from None
    if len(data) > limit:
        raise too_large()
    return data
