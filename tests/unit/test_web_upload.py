"""`kyc web`'s uploads: a form read as it streams in, each field within its cap."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest

from kyc_tools.web.upload import BadInputError, FormReader, body_cap, field_caps, read_upload

BOUNDARY = "----WebKitFormBoundaryx7Rk2cQz9PqL0e1a"
MiB = 1024 * 1024


def form(fields: dict[str, bytes], boundary: str = BOUNDARY) -> bytes:
    """A body as a browser's FormData writes it."""
    out = b""
    for name, value in fields.items():
        out += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"; "
                f"filename=\"blob\"\r\nContent-Type: image/jpeg\r\n\r\n").encode() + value + b"\r\n"
    return out + f"--{boundary}--\r\n".encode()


def chunks(body: bytes, size: int):
    async def stream():
        for at in range(0, len(body), size):
            yield body[at:at + size]
    return stream()


def read(body: bytes, headers: dict | None = None, size: int = 65536, max_image: int = MiB):
    headers = headers or {"content-type": f"multipart/form-data; boundary={BOUNDARY}"}
    return asyncio.run(read_upload(headers, chunks(body, size), max_image))


@pytest.mark.parametrize("size", [1, 7, 65536])
def test_a_form_gives_its_fields_whatever_the_chunks_the_body_comes_in(size):
    document, selfie = b"\xff\xd8" + bytes(range(256)) * 9, b"\x89PNG\r\n--\r\n" * 40
    token = base64.b64encode(b"sealed token").decode()
    got = read(form({"document": document, "selfie": selfie,
                     "liveness_token": token.encode()}), size=size)
    assert (got.document, got.selfie, got.token) == (document, selfie, b"sealed token")


def test_a_json_body_of_base64_is_still_read():
    body = json.dumps({"document": base64.b64encode(b"doc").decode(),
                       "selfie": base64.b64encode(b"me").decode()}).encode()
    got = read(body, {"content-type": "application/json"})
    assert (got.document, got.selfie, got.token) == (b"doc", b"me", b"")


@pytest.mark.parametrize("fields,code", [
    ({"document": b"x" * (MiB + 1), "selfie": b"y"}, "too_large"),
    ({"document": b"x", "selfie": b"y", "liveness_token": b"A" * (64 * 1024 + 4)}, "too_large"),
    ({"document": b"x"}, "bad_image"),  # no selfie
    ({"document": b"x", "selfie": b"y", "other": b"z"}, "bad_image"),
    ({"document": b"", "selfie": b"y"}, "bad_image"),
])
def test_a_form_over_a_cap_missing_or_with_an_unknown_field_is_refused(fields, code):
    with pytest.raises(BadInputError) as refused:
        read(form(fields))
    assert refused.value.code == code


def test_a_field_twice_a_body_that_never_ends_or_no_boundary_is_refused():
    twice = form({"document": b"x", "selfie": b"y"}).replace(b"selfie", b"document")
    for body, headers in ((twice, None), (form({"document": b"x"})[:-20], None),
                          (form({"document": b"x", "selfie": b"y"}),
                           {"content-type": "multipart/form-data"})):
        with pytest.raises(BadInputError, match="bad_image"):
            read(body, headers)


def test_an_oversized_field_is_refused_while_it_streams_holding_no_more_than_its_cap():
    reader = FormReader(BOUNDARY.encode(), field_caps(MiB))
    reader.feed(f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="document"\r\n\r\n'
                .encode())
    with pytest.raises(BadInputError, match="too_large"):
        for _ in range(100):
            reader.feed(b"\0" * 65536)
    assert len(reader.buffer) < MiB + 2 * 65536


def test_a_body_that_says_it_is_too_large_is_refused_before_a_byte_is_read():
    async def unread():
        raise AssertionError("the body was read")
        yield b""

    headers = {"content-type": "application/json",
               "content-length": str(body_cap(field_caps(MiB)) + 1)}
    with pytest.raises(BadInputError, match="too_large"):
        asyncio.run(read_upload(headers, unread(), MiB))
