"""The capture page's server: limits, origins, words, headers, and /api/verify through
the ASGI app with Triton's client stood in for.

The page itself, in a real browser against a real Triton server, is
tests/integration/test_web.py."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest

from kyc_testing import WEB_FORM, Ensemble, post, web_form
from kyc_tools.web import words
from kyc_tools.web.app import (
    SECURITY_HEADERS,
    BadInputError,
    RateLimiter,
    WebSettings,
    advice,
    client_address,
    create_app,
    ready_to_end,
    same_origin,
    static_dir,
)
from kyc_tools.web.upload import decode_image_field


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_client_gets_its_rate_then_one_more_as_the_bucket_refills():
    clock = Clock()
    limiter = RateLimiter(clock)
    assert all(limiter.allow("10.0.0.1", "session", 6) for _ in range(6))
    assert not limiter.allow("10.0.0.1", "session", 6)
    assert limiter.allow("10.0.0.2", "session", 6)  # another client has its own bucket
    assert limiter.allow("10.0.0.1", "verify", 6)  # and another action
    clock.now += 10.0  # a sixth of a minute: one more
    assert limiter.allow("10.0.0.1", "session", 6)
    assert not limiter.allow("10.0.0.1", "session", 6)


def test_the_limiter_forgets_the_least_recent_clients_past_its_size():
    limiter = RateLimiter(Clock(), max_clients=3)
    for client in ("a", "b", "c", "d"):
        limiter.allow(client, "session", 1)
    assert not limiter.allow("d", "session", 1)
    assert limiter.allow("a", "session", 1)  # forgotten: a fresh bucket


def test_the_client_address_is_the_peer_unless_the_proxy_is_trusted():
    scope = {"client": ("192.0.2.7", 5555)}
    headers = {"x-forwarded-for": "203.0.113.9, 10.0.0.1"}
    assert client_address(scope, headers, WebSettings()) == "192.0.2.7"
    one = WebSettings(trusted_proxies=1)
    assert client_address(scope, headers, one) == "10.0.0.1"  # what the proxy saw
    assert client_address(scope, headers, WebSettings(trusted_proxies=2)) == "203.0.113.9"
    assert client_address(scope, {}, one) == "192.0.2.7"


def test_a_forged_leftmost_hop_buys_no_fresh_rate_limit_bucket():
    """The client writes what it likes before the proxy appends its address."""
    limiter, settings = RateLimiter(clock=lambda: 0.0), WebSettings(trusted_proxies=1)
    scope = {"client": ("10.0.0.2", 443)}  # the Ingress controller
    allowed = [limiter.allow(client_address(
        scope, {"x-forwarded-for": f"198.51.100.{n}, 203.0.113.9"}, settings), "verify", 6)
        for n in range(8)]
    assert allowed == [True] * 6 + [False] * 2


@pytest.mark.parametrize("origin,host,allowed", [
    ("http://127.0.0.1:8080", "127.0.0.1:8080", True),
    ("https://kyc.example.com", "kyc.example.com", True),
    ("https://evil.example.net", "kyc.example.com", False),
    (None, "kyc.example.com", False),
])
def test_a_websocket_from_another_sites_page_is_refused(origin, host, allowed):
    headers = {"host": host} | ({"origin": origin} if origin else {})
    assert same_origin(headers) is allowed


def test_the_advice_shows_the_servers_words_and_the_step_never_an_angle():
    from kyc.liveness.challenge import GUIDANCE, MOVES

    progress = {"moves_done": 1, "moves": 3, "next": "right"}
    sharp = {"face_found": True, "faces": 1, "sharp": True}
    assert advice({"frame": {"face_found": False}, "progress": progress,
                   "guidance": GUIDANCE["no_face"]}) \
        == "We cannot see your face: face the camera (2 of 3)."
    assert advice({"frame": {"face_found": True, "faces": 1, "sharp": False},
                   "progress": progress, "guidance": MOVES["right"].instruction}) \
        == "Hold the phone still."
    assert advice({"frame": sharp, "progress": progress,
                   "guidance": MOVES["right"].more}) == "A little more to your right (2 of 3)."
    done = {"moves_done": 3, "moves": 3, "next": None}
    status = {"frame": sharp, "progress": done, "guidance": GUIDANCE["done"]}
    assert advice(status) == "Done: keep looking at the camera."
    assert ready_to_end(status)
    assert not ready_to_end({**status, "guidance": GUIDANCE["back"]})
    assert not ready_to_end({"frame": sharp, "progress": progress,
                             "guidance": GUIDANCE["done"]})


def test_the_server_is_told_a_digest_of_the_clients_address_not_the_address():
    from kyc_tools.web.app import client_pseudonym

    assert client_pseudonym("203.0.113.9") == client_pseudonym("203.0.113.9")
    assert client_pseudonym("203.0.113.9") != client_pseudonym("203.0.113.10")
    assert "203.0.113" not in client_pseudonym("203.0.113.9")


def test_every_reason_the_pipeline_gives_is_told_as_one_of_a_few_coarse_reasons():
    from kyc.decision.policy import REASONS
    from kyc.liveness.session import REASONS as LIVENESS_REASONS

    assert set(words.TOLD_FOR) == set(REASONS) | set(LIVENESS_REASONS.values())
    assert set(words.TOLD_FOR.values()) - {None} == set(words.TOLD)
    assert len(words.TOLD) <= 9
    assert all(text.endswith(".") and "_" not in text for text in words.TOLD.values())
    assert set(words.DECISION) == {"approve", "review", "reject"}


def test_the_person_is_told_each_coarse_reason_once_and_nothing_of_the_fraud_score():
    told = words.reasons(["face_mismatch", "selfie_not_live_person", "high_fraud_score",
                          "liveness_token_expired"])
    assert told == [{"code": "face_not_matched", "text": "The face did not match the document."},
                    {"code": "liveness_not_confirmed",
                     "text": "The camera check could not confirm a live person."}]
    assert words.reasons(["a_code_added_later"])[0]["code"] == "person_reviews"


def test_an_uploaded_image_is_base64_within_its_limit():
    good = base64.b64encode(b"\xff\xd8" + b"x" * 100).decode()
    assert decode_image_field({"document": good}, "document", 1000) == b"\xff\xd8" + b"x" * 100
    assert decode_image_field({}, "liveness_token", 10, required=False) == b""
    for body, code in (({"document": "not base64!"}, "bad_image"),
                       ({"document": 12}, "bad_image"), ({}, "bad_image"),
                       ({"document": base64.b64encode(b"x" * 2000).decode()}, "too_large")):
        with pytest.raises(BadInputError) as refused:
            decode_image_field(body, "document", 1000)
        assert refused.value.code == code


def test_the_page_allows_only_its_own_script_style_camera_and_server():
    policy = SECURITY_HEADERS["content-security-policy"]
    assert "default-src 'none'" in policy and "script-src 'self'" in policy
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
    assert "frame-ancestors 'none'" in policy and "connect-src 'self'" in policy
    assert SECURITY_HEADERS["permissions-policy"].startswith("camera=(self)")
    assert SECURITY_HEADERS["referrer-policy"] == "no-referrer"


def test_the_page_is_package_data_with_no_inline_script_and_no_other_host():
    import re

    files = {p.name: p.read_text(encoding="utf-8") for p in static_dir().iterdir()}
    assert {"index.html", "app.js", "app.css"} <= set(files)
    page = files["index.html"]
    assert re.search(r"<script(?![^>]*\bsrc=)[^>]*>", page) is None  # no inline script
    assert "style=" not in page and "onclick" not in page
    for name, text in files.items():
        assert re.search(r"https?://(?!www\.w3\.org)", text) is None, name  # no CDN
    # the testable contract of the page
    assert 'data-kyc-state="camera"' in page and 'id="kyc-decision"' in page
    assert re.search(r'<input type="file" name="document"', page)


# -- POST /api/verify through the ASGI app, Triton's client stood in for ----------------
def test_the_browser_is_told_the_decision_and_coarse_reasons_never_a_score_or_the_report():
    ensemble = Ensemble()
    app = create_app(WebSettings(), kyc_client=lambda: ensemble)
    status, body = asyncio.run(post(app, web_form(document=b"doc", selfie=b"me",
                                                   liveness_token=b"dG9rZW4="), WEB_FORM))
    assert status == 200 and ensemble.calls == [(b"doc", b"me", b"token")]
    assert body == {"decision": "reject", "text": words.DECISION["reject"],
                    "reasons": [{"code": "face_not_matched",
                                 "text": words.TOLD["face_not_matched"]}]}
    for secret in ("score", "0.12", "0.45", "0.97", "fraud", "threshold", "report"):
        assert secret not in json.dumps(body), secret


def test_a_json_body_of_base64_still_verifies():
    ensemble = Ensemble()
    app = create_app(WebSettings(), kyc_client=lambda: ensemble)
    body = json.dumps({"document": base64.b64encode(b"doc").decode(),
                       "selfie": base64.b64encode(b"me").decode()}).encode()
    status, answered = asyncio.run(post(app, body, "application/json"))
    assert status == 200 and ensemble.calls == [(b"doc", b"me", b"")]
    assert set(answered) == {"decision", "text", "reasons"}


def test_verifications_past_the_limit_at_once_are_answered_503_at_once_not_queued():
    async def scenario():
        hold = asyncio.Event()
        ensemble = Ensemble(hold)
        app = create_app(WebSettings(max_verifications=2, verifications_per_minute=100),
                         kyc_client=lambda: ensemble)
        body = web_form(document=b"doc", selfie=b"me")
        running = [asyncio.create_task(post(app, body, WEB_FORM)) for _ in range(2)]
        while len(ensemble.calls) < 2:
            await asyncio.sleep(0)
        excess = await asyncio.wait_for(post(app, body, WEB_FORM), timeout=1)
        hold.set()
        done = await asyncio.gather(*running)
        return excess, done, await post(app, body, WEB_FORM)

    excess, done, after = asyncio.run(scenario())
    assert excess == (503, {"error": "busy", "message": words.ERROR["busy"]})
    assert [status for status, _ in done] == [200, 200] and after[0] == 200


def test_the_application_the_session_was_bound_to_goes_with_the_verification_and_is_checked():
    ensemble = Ensemble()
    app = create_app(WebSettings(), kyc_client=lambda: ensemble)
    bound = web_form(document=b"doc", selfie=b"me", liveness_token=b"dG9rZW4=",
                      application=b"web-0123abcd")
    assert asyncio.run(post(app, bound, WEB_FORM))[0] == 200
    assert ensemble.applications == ["web-0123abcd"]
    status, body = asyncio.run(post(app, web_form(document=b"doc", selfie=b"me",
                                                   application=b"a\x01b"), WEB_FORM))
    assert status == 400 and body["error"] == "bad_request"
