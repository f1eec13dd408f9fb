"""The capture page in a real browser: Debian's headless Chromium, driven by Playwright,
with a fake camera playing a video rendered from the sample selfie, against `kyc web`
and a real Triton server.

The server's repository is the shipped one with one change: its challenges use the
move `left` only (left, left, left), so that a video made in advance can do what the
random challenge asks. The head turns are 3-D head turns of a real photo's face on
the canonical face mesh (kyc_tools.dev.synthetic.liveness), NOT video of a live person. With
the shipped policy (no passive anti-spoofing model), the best decision is review.

Set KYC_SCREENSHOTS=DIR to keep a screenshot of each state there (docs/web/ holds those
docs/web.md shows).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from fake_camera import challenge_film, still_film, write_y4m
from PIL import Image

from kyc_client.sdk import KycClient
from kyc_testing import metric_sum, scrape, shipped_server
from kyc_tools.assets.fetch import fetch_test_photos
from kyc_tools.operator.server import free_port
from kyc_tools.repo.config_edit import set_string_parameter

pytestmark = pytest.mark.integration

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
MOVES = ["left"] * 3
ATTEMPTS = 2


@pytest.fixture(scope="module")
def triton(tmp_path_factory):
    left_only = {"liveness_sequence": lambda text: set_string_parameter(text, "moves", "left")}
    with shipped_server(tmp_path_factory.mktemp("web"), left_only) as (_, server):
        yield server


def kyc_web(triton_url: str, log_dir: Path, *options: str):
    """`kyc web` on a free port, as a user starts it: (process, page URL)."""
    port = free_port()
    log = (log_dir / "web.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "kyc_tools.cli", "web", "--url", triton_url, "--port", str(port),
         *options], stdout=log, stderr=subprocess.STDOUT)
    log.close()
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url + "healthz", timeout=2).read()
            return process, url
        except OSError:
            assert process.poll() is None and time.monotonic() < deadline, "kyc web did not start"
            time.sleep(0.2)


@pytest.fixture(scope="module")
def web(triton, tmp_path_factory):
    process, url = kyc_web(triton.options.grpc_url, tmp_path_factory.mktemp("web-log"),
                           "--liveness-attempts", str(ATTEMPTS))
    yield url
    process.terminate()
    process.wait(timeout=15)


@pytest.fixture
def strict_web(triton, tmp_path):
    """An app of its own, with a low rate per client."""
    process, url = kyc_web(triton.options.grpc_url, tmp_path, "--verifications-per-minute", "4")
    yield url
    process.terminate()
    process.wait(timeout=15)


@pytest.fixture(scope="module")
def videos(triton, tmp_path_factory):
    photos = fetch_test_photos()
    image = np.asarray(Image.open(photos["person_a_2"]).convert("RGB"))
    with KycClient(triton.options.grpc_url) as client:
        landmarks = client.find_face(photos["person_a_2"].read_bytes())["landmarks"]
    out = tmp_path_factory.mktemp("videos")
    return {"turns": write_y4m(out / "turns.y4m", challenge_film(image, landmarks, MOVES)),
            "still": write_y4m(out / "still.y4m", still_film(image, landmarks))}


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    from kyc_tools.cli import main

    out = tmp_path_factory.mktemp("samples")
    assert main(["samples", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def playwright():
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed (make test installs it: "
                    "scripts/system-deps.sh --test)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        yield driver


def browser(playwright, video: Path | None, camera: bool = True):
    """Headless Chromium as the machine allows it (no sandbox as root, no network
    chatter); a fake camera playing ``video``, or a camera the person refuses."""
    args = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--disable-quic",
            "--use-fake-device-for-media-stream"]
    args += (["--use-fake-ui-for-media-stream", f"--use-file-for-fake-video-capture={video}"]
             if camera else ["--deny-permission-prompts"])
    return playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=args)


def open_page(instance, url: str):
    page = instance.new_page(viewport={"width": 390, "height": 844})  # a phone
    page.goto(url)
    page.wait_for_selector("body[data-ready=true]")
    return page


def state(page) -> str:
    return page.get_attribute("body", "data-kyc-state")


def shot(page, name: str) -> None:
    target = os.environ.get("KYC_SCREENSHOTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(target) / f"{name}.png"))


def liveness_requests(triton) -> int:
    return int(metric_sum(scrape(triton), "nv_inference_request_success",
                          model="liveness_sequence", version="1"))


def reason_codes(page) -> list[str]:
    return [item.get_attribute("data-code") for item in page.query_selector_all("#kyc-reasons li")]


def decide(page, document: Path) -> str:
    page.set_input_files("input[type=file][name=document]", str(document))
    page.click("#kyc-submit")
    page.wait_for_selector("body[data-kyc-state=decision]", timeout=90_000)
    return page.text_content("#kyc-decision")


def test_a_person_turning_as_asked_goes_from_camera_to_a_decision_wanting_only_passive_pad(
        playwright, web, triton, videos, samples):
    instance = browser(playwright, videos["turns"])
    try:
        page = open_page(instance, web)
        assert state(page) == "camera"
        shot(page, "1-camera")
        before = liveness_requests(triton)
        page.click("#kyc-start")
        page.wait_for_selector("body[data-kyc-state=challenge]")
        page.wait_for_selector("#kyc-progress[value='1']", timeout=30_000)
        assert page.is_visible("#kyc-video") and not page.is_visible("#kyc-retry")
        shot(page, "2-challenge")
        # the frames reach liveness_sequence while the person moves, not at the end
        during = liveness_requests(triton)
        assert during - before >= 10, (before, during)
        page.wait_for_selector("body[data-kyc-state=document]", timeout=60_000)
        assert "Camera check passed" in page.text_content("#kyc-message")
        assert not page.is_visible("#kyc-selfie-label")  # the camera's still is the selfie
        shot(page, "3-document")
        decision = decide(page, samples / "document.jpg")
        shot(page, "4-decision")
        # every check passed; no passive anti-spoofing model is shipped: a person reviews
        assert decision == "review", page.text_content("#kyc-reasons")
        assert reason_codes(page) == ["person_reviews"]  # liveness_without_passive_pad
        assert "score" not in page.text_content("body").lower()
        timings = {name: int(page.get_attribute("body", f"data-{name}-ms"))
                   for name in ("token", "decision")}
        print(f"\nthrough the page: last frame -> token {timings['token']} ms, document -> "
              f"decision {timings['decision']} ms; liveness requests {during - before} "
              f"during the challenge, {liveness_requests(triton) - before} in all")
    finally:
        instance.close()


def test_a_still_photo_fails_the_check_says_why_and_after_the_tries_is_never_approved(
        playwright, web, videos, samples):
    instance = browser(playwright, videos["still"])
    try:
        page = open_page(instance, web)
        page.click("#kyc-start")
        page.wait_for_selector("#kyc-retry:not([hidden])", timeout=60_000)
        message = page.text_content("#kyc-message")
        assert "did not pass" in message and "head turns asked were not seen" in message
        assert state(page) == "challenge"
        shot(page, "5-not-live")
        page.click("#kyc-retry")  # the last try (ATTEMPTS): then the page goes on by itself
        page.wait_for_selector("body[data-kyc-state=document]", timeout=60_000)
        assert "We go on" in page.text_content("#kyc-message")
        decision = decide(page, samples / "document.jpg")
        assert decision != "approve"
        codes = reason_codes(page)
        assert "liveness_not_confirmed" in codes  # liveness_failed
    finally:
        instance.close()


def test_a_refused_camera_says_so_and_the_person_can_go_on_to_a_review(
        playwright, web, samples):
    instance = browser(playwright, None, camera=False)
    try:
        page = open_page(instance, web)
        page.click("#kyc-start")
        page.wait_for_selector("#kyc-skip:not([hidden])", timeout=20_000)
        assert "camera was refused" in page.text_content("#kyc-message")
        shot(page, "6-camera-refused")
        page.click("#kyc-skip")
        assert state(page) == "document" and page.is_visible("#kyc-selfie-label")
        page.set_input_files("input[type=file][name=selfie]", str(samples / "selfie.jpg"))
        decision = decide(page, samples / "document.jpg")
        assert decision == "review"
        codes = reason_codes(page)
        assert "liveness_not_confirmed" in codes  # liveness_missing
    finally:
        instance.close()


def test_the_app_answers_bad_uploads_floods_and_foreign_pages_with_plain_errors(strict_web):
    import json
    import socket
    import urllib.error
    import urllib.parse

    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    web = strict_web
    page = urllib.request.urlopen(web, timeout=10)
    assert page.headers["content-security-policy"].startswith("default-src 'none'")
    assert page.headers["x-frame-options"] == "DENY" and page.headers.get("server") is None

    def post(body: bytes, kind: str = "application/json") -> tuple[int, dict]:
        request = urllib.request.Request(web + "api/verify", data=body, method="POST",
                                         headers={"Content-Type": kind})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as refused:
            return refused.code, json.loads(refused.read())

    assert post(b"{not json") == (400, {"error": "bad_image",
                                         "message": post(b"[]")[1]["message"]})
    # a body that declares more than the caps allow is refused before a byte of it comes
    host, port = urllib.parse.urlsplit(web).hostname, urllib.parse.urlsplit(web).port
    with socket.create_connection((host, port), timeout=10) as conn:
        conn.sendall(b"POST /api/verify HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json"
                     b"\r\nContent-Length: %d\r\n\r\n" % (host.encode(), 25 * 2**20))
        assert conn.recv(64).split()[1] == b"413"
    # a form's image is refused as it streams in, past its 8 MiB
    status, body = post(b'--b\r\nContent-Disposition: form-data; name="document"\r\n\r\n'
                        + b"\xff" * (8 * 2**20 + 65536) + b"\r\n--b--\r\n",
                        "multipart/form-data; boundary=b")
    assert status == 413 and body["error"] == "too_large"
    # a page of another site may not open a session in a visitor's name
    with pytest.raises(InvalidStatus):
        connect(web.replace("http", "ws") + "ws/liveness",
                origin="https://elsewhere.example").close()
    # past the client's rate (4 a minute, all spent above), verifications are refused
    assert [post(b"{}")[0] for _ in range(2)] == [429, 429]
    assert post(b"{}")[1]["message"].startswith("We are busy right now")
