"""`kyc web` against slow clients: a body has a deadline, a verification's place is taken
only once its upload is read, uploads and sessions are capped per client, the uploads'
memory in all, and a connection's head has a deadline; through the ASGI app (bodies fed
by hand) and a real uvicorn with raw sockets sending a byte at a time.

Before (2026-11-28): four clients sending a byte every 20 s held the four verification
places, and every other verification was answered 503 for as long as they stayed."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time

import pytest

from kyc_testing import (
    Ensemble,
    IdlePage,
    RawClient,
    StreamedPost,
    post,
    verify_head,
    web_form,
    web_server,
)
from kyc_tools.web import words
from kyc_tools.web.app import WebSettings, create_app

BODY = web_form(document=b"\xff\xd8" + b"d" * 1000, selfie=b"s" * 900)
# the rates per minute out of the way: each test sets the bound it shows
SETTINGS = WebSettings(verifications_per_minute=1000, sessions_per_minute=1000)


def app_with(ensemble: Ensemble | None = None, **settings):
    ensemble = ensemble or Ensemble()
    return create_app(dataclasses.replace(SETTINGS, **settings), kyc_client=lambda: ensemble)


async def settle() -> None:
    """Lets every task run as far as it can without a new byte."""
    for _ in range(20):
        await asyncio.sleep(0)


# -- the verification's place: taken when the work starts ------------------------------
@pytest.mark.parametrize("slow", [2, 6])
def test_an_ordinary_verification_is_answered_while_slow_uploads_outnumber_the_places(slow):
    async def scenario():
        app = app_with(max_verifications=2)
        uploads = [StreamedPost(app, BODY, client=f"10.0.0.{k}") for k in range(slow)]
        for upload in uploads:
            upload.feed(1)
        await settle()
        ordinary = await asyncio.wait_for(post(app, BODY, client="192.0.2.99"), 2)
        for upload in uploads:
            upload.feed()
        return ordinary, [(await upload.answer())[0] for upload in uploads]

    ordinary, slow_ones = asyncio.run(scenario())
    assert ordinary[0] == 200 and ordinary[1]["decision"] == "reject"
    assert slow_ones == [200] * slow  # each answered once its body was in


def test_the_place_is_taken_once_the_upload_is_read_and_the_excess_then_is_503_at_once():
    async def scenario():
        hold, answers = asyncio.Event(), {}
        ensemble = Ensemble(hold)
        app = app_with(ensemble, max_verifications=1)
        working = asyncio.ensure_future(post(app, BODY, client="192.0.2.1"))
        while not ensemble.calls:
            await asyncio.sleep(0)
        streaming = StreamedPost(app, BODY, client="192.0.2.2")
        streaming.feed(len(BODY) // 2)
        await settle()
        answers["while streaming"] = list(streaming.sent)  # nothing yet: it is being read
        streaming.feed()
        answers["read, the place taken"] = await streaming.answer(timeout=1)
        hold.set()
        answers["working"] = await working
        return answers, len(ensemble.calls)

    answers, calls = asyncio.run(scenario())
    assert answers["while streaming"] == []
    status, body, _ = answers["read, the place taken"]
    assert (status, body["error"]) == (503, "busy") and calls == 1
    assert answers["working"][0] == 200


# -- a body has a deadline -------------------------------------------------------------
def test_a_body_slower_than_its_deadline_is_answered_408_and_gives_back_its_place_and_memory():
    async def scenario():
        app = app_with(upload_s=0.2, upload_min_bytes_per_s=10**6, upload_idle_s=1.0,
                       uploads_per_client=1, upload_memory_bytes=2 * len(BODY))
        slow, started = StreamedPost(app, BODY, client="192.0.2.5"), time.monotonic()
        while not slow.sent and slow.at < len(BODY):
            slow.feed(1)  # a byte every 20 ms: never idle, always behind
            await asyncio.sleep(0.02)
        answered = await slow.answer(timeout=1)
        # the same client, with a body that needs the whole budget
        return answered, time.monotonic() - started, await post(app, BODY, client="192.0.2.5")

    (status, body, _), took, after = asyncio.run(scenario())
    assert (status, body) == (408, {"error": "too_slow", "message": words.ERROR["too_slow"]})
    assert 0.15 < took < 1.0
    assert after[0] == 200


def test_a_body_that_stops_for_longer_than_its_idle_gap_is_answered_408():
    async def scenario():
        slow = StreamedPost(app_with(upload_s=30.0, upload_idle_s=0.1), BODY)
        slow.feed(100)
        return await slow.answer(timeout=2)

    status, body, _ = asyncio.run(scenario())
    assert (status, body["error"]) == (408, "too_slow")


def test_a_body_coming_at_the_minimum_rate_is_not_cut_however_long_it_takes():
    async def scenario():
        app = app_with(upload_s=0.1, upload_min_bytes_per_s=2000, upload_idle_s=1.0)
        upload, started = StreamedPost(app, BODY), time.monotonic()
        while upload.at < len(BODY):
            upload.feed(200)  # 4000 bytes a second: twice the minimum
            await asyncio.sleep(0.05)
        return await upload.answer(), time.monotonic() - started

    (status, _, _), took = asyncio.run(scenario())
    assert status == 200 and took > 0.3  # three times its 0.1 s, earned byte by byte


# -- uploads capped per client and in memory, not by the verification places ---------
def test_a_client_past_its_cap_of_uploads_at_once_gets_429_while_another_gets_through():
    async def scenario():
        app = app_with(uploads_per_client=2)
        mine = [StreamedPost(app, BODY, client="198.51.100.7") for _ in range(2)]
        for upload in mine:
            upload.feed(10)
        await settle()
        third = await asyncio.wait_for(post(app, BODY, client="198.51.100.7"), 1)
        other = await asyncio.wait_for(post(app, BODY, client="203.0.113.8"), 1)
        for upload in mine:
            upload.feed()
        done = [(await upload.answer())[0] for upload in mine]
        return third, other, done, await post(app, BODY, client="198.51.100.7")

    third, other, done, again = asyncio.run(scenario())
    assert third == (429, {"error": "busy", "message": words.ERROR["busy"]})
    assert other[0] == 200 and done == [200, 200] and again[0] == 200


def test_an_upload_past_the_memory_budget_is_answered_503_and_the_others_go_on():
    async def scenario():
        app = app_with(upload_memory_bytes=2 * len(BODY) + 1000)
        first = StreamedPost(app, BODY, client="192.0.2.1")
        first.feed(len(BODY) - 10)  # holds twice that of the budget
        await settle()
        refused = await asyncio.wait_for(post(app, BODY, client="192.0.2.2"), 1)
        first.feed()
        return refused, await first.answer()

    refused, first = asyncio.run(scenario())
    assert refused == (503, {"error": "busy", "message": words.ERROR["busy"]})
    assert first[0] == 200


# -- a liveness session: bounded in time and per client --------------------------------
def test_an_idle_liveness_session_ends_at_its_deadline_and_gives_back_its_clients_place():
    async def scenario():
        app = app_with(max_session_s=0.3, sessions_per_client=1)
        idle = IdlePage(app, "198.51.100.7")
        await settle()
        second, other = IdlePage(app, "198.51.100.7"), IdlePage(app, "203.0.113.8")
        await settle()
        told = {"second": (second.told, second.close_code), "other": list(other.told)}
        await asyncio.wait_for(asyncio.gather(idle.task, other.task), 2)
        told["idle"] = (idle.told, idle.close_code)
        again = IdlePage(app, "198.51.100.7")
        await settle()
        told["again"] = list(again.told)
        await asyncio.wait_for(again.task, 2)
        return told

    told = asyncio.run(scenario())
    assert told["second"] == (["busy"], 1013)  # one session a client at once
    assert told["other"] == ["challenge"]
    assert told["idle"] == (["challenge", "expired"], 1000)
    assert told["again"] == ["challenge"]


# -- a real server, raw sockets ---------------------------------------------------------
def test_a_real_server_answers_an_ordinary_verification_while_sockets_send_a_byte_at_a_time():
    settings = dataclasses.replace(SETTINGS, max_verifications=2, upload_s=1.0,
                                   upload_idle_s=0.5, head_s=0.3)  # a head's, not a body's
    with web_server(create_app(settings, kyc_client=Ensemble), settings) as port:
        slow = [RawClient(port, f"127.0.0.{10 + k}") for k in range(6)]
        for client in slow:
            assert client.send(verify_head(len(BODY)) + BODY[:1])
        ordinary = RawClient(port, "127.0.0.99")
        ordinary.send(verify_head(len(BODY)) + BODY)
        assert ordinary.answer()[0] == 200
        for at in range(1, 8):  # a byte each every 0.2 s, past their 1 s
            for client in slow:
                client.send(BODY[at:at + 1])
            time.sleep(0.2)
        closed = [client.closed_within(2.0) for client in slow]
        answers = [client.received.split(b"\r\n", 1)[0] for client in slow]
        for client in (*slow, ordinary):
            client.close()
    assert closed == [True] * 6  # answered, then the connection closed
    assert answers == [b"HTTP/1.1 408 Request Timeout"] * 6


def trickle_until_closed(client: RawClient, head: bytes) -> float:
    """Sends ``head`` a byte every 50 ms (then more bytes) until the server closes the
    connection: how long that took (at most 3 s)."""
    started = time.monotonic()
    while client.send(head[:1]) and not client.closed_within(0.05):
        head = head[1:] or b"a"
        if time.monotonic() - started > 3:
            break
    return time.monotonic() - started


def test_a_connection_that_sends_no_whole_head_within_its_deadline_is_closed():
    settings = dataclasses.replace(SETTINGS, head_s=0.3)
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: " + b"a" * 50
    with web_server(create_app(settings, kyc_client=Ensemble), settings) as port:
        idle, trickle = RawClient(port), RawClient(port)
        trickle_took = trickle_until_closed(trickle, head)
        idle_closed = idle.closed_within(0.5)
        kept = RawClient(port)  # a body that takes longer than a head may
        kept.send(verify_head(len(BODY)) + BODY[:10])
        time.sleep(0.4)
        kept.send(BODY[10:])
        answered = kept.answer()[0]
        kept.received = b""  # kept alive: its next head has a deadline too
        kept_took = trickle_until_closed(kept, head)
        for client in (idle, trickle, kept):
            client.close()
    assert trickle_took < 1.0 and idle_closed
    assert answered == 200 and kept_took < 1.0


@pytest.mark.parametrize("trusted_proxies,capped", [(0, True), (1, False)])
def test_a_peer_past_its_cap_of_connections_is_closed_at_once_unless_it_is_a_trusted_proxy(
        trusted_proxies, capped):
    settings = dataclasses.replace(SETTINGS, connections_per_client=3, head_s=5.0,
                                   trusted_proxies=trusted_proxies)
    with web_server(create_app(settings, kyc_client=Ensemble), settings) as port:
        held = [RawClient(port, "127.0.0.20") for _ in range(3)]
        past = RawClient(port, "127.0.0.20")
        past_closed = past.closed_within(0.3)
        other = RawClient(port, "127.0.0.21")
        other.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        other_answered = other.answer()[0]
        held.pop().close()
        time.sleep(0.2)
        after = RawClient(port, "127.0.0.20")  # a place given back
        after_closed = after.closed_within(0.3)
        for client in (*held, past, other, after):
            client.close()
    assert past_closed is capped
    assert other_answered == 200 and not after_closed


def test_a_websocket_leaves_its_peers_count_of_connections_once_upgraded():
    import socket

    from websockets.sync.client import connect

    settings = dataclasses.replace(SETTINGS, connections_per_client=1, max_session_s=0.5)
    with web_server(create_app(settings, kyc_client=Ensemble), settings) as port:
        sock = socket.create_connection(("127.0.0.1", port), source_address=("127.0.0.30", 0))
        with connect(f"ws://127.0.0.1:{port}/ws/liveness", sock=sock,
                     origin=f"http://127.0.0.1:{port}", proxy=None) as page:
            told = json.loads(page.recv(timeout=2))["type"]
            beside = RawClient(port, "127.0.0.30")  # the WebSocket is the app's to cap
            beside.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            answered = beside.answer()[0]
            beside.close()
        time.sleep(0.2)
        after = RawClient(port, "127.0.0.30")
        after_closed = after.closed_within(0.3)
        after.close()
    assert told == "challenge" and answered == 200 and not after_closed
