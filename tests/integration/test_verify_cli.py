"""`kyc verify` and the client SDK end to end, on the files `kyc samples` writes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from kyc_client.sdk import AsyncKycClient, KycClient, KycInputError, KycUnavailableError
from kyc_testing import PROJECT_ROOT, free_port
from kyc_tools.dev.synthetic.liveness import encode

pytestmark = pytest.mark.integration

KYC = [sys.executable, "-m", "kyc_tools.cli"]


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    out = tmp_path_factory.mktemp("samples")
    result = subprocess.run([*KYC, "samples", "--out", str(out)], cwd=PROJECT_ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return out


def verify(server, *args: str):
    return subprocess.run([*KYC, "verify", "--url", server.options.grpc_url, *args],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)


def test_a_demo_session_is_frames_made_by_software_and_gets_no_approve(server, samples):
    """The demo renders each move told as a 3-D head turn of one photo: an injection,
    which the server's checks pass (SECURITY.md); with no passive anti-spoofing model
    the shipped policy sends it to review, as any session without one."""
    run = verify(server, "--document", str(samples / "document.jpg"), "--selfie",
                 str(samples / "selfie.jpg"), "--demo-frames-from", str(samples / "selfie.jpg"))
    assert run.returncode == 3, run.stderr
    report = json.loads(run.stdout)
    assert report["decision"] == "review"
    assert report["reasons"] == ["liveness_without_passive_pad"]
    assert "frames made by software" in run.stderr and "liveness: live" in run.stderr
    assert "decision: review" in run.stderr


def test_exit_codes_say_review_and_reject(server, samples):
    review = verify(server, "--document", str(samples / "document.jpg"), "--selfie",
                    str(samples / "selfie.jpg"))
    assert review.returncode == 3 and json.loads(review.stdout)["reasons"] == [
        "liveness_missing"]
    reject = verify(server, "--document", str(samples / "document.jpg"), "--selfie",
                    str(samples / "impostor.jpg"))
    assert reject.returncode == 4 and "face_mismatch" in json.loads(reject.stdout)["reasons"]


def test_recorded_frames_are_streamed_and_cannot_know_the_challenge(server, samples, tmp_path):
    import numpy as np
    from PIL import Image

    still = np.asarray(Image.open(samples / "selfie.jpg").convert("RGB"))
    frames = []
    for k in range(12):
        path = tmp_path / f"frame_{k:02d}.jpg"
        path.write_bytes(encode(still, 90, k % 3))
        frames.append(str(path))
    run = verify(server, "--document", str(samples / "document.jpg"), "--selfie",
                 str(samples / "selfie.jpg"), "--frames", *frames)
    assert run.returncode == 4, run.stderr
    assert "12 recorded frames" in run.stderr and "liveness: not live" in run.stderr
    assert "liveness_failed" in json.loads(run.stdout)["reasons"]


def test_errors_exit_1_with_one_clear_line(server, samples, tmp_path):
    missing = verify(server, "--document", str(tmp_path / "nope.jpg"), "--selfie",
                     str(samples / "selfie.jpg"))
    assert missing.returncode == 1 and "cannot read" in missing.stderr
    garbage = tmp_path / "garbage.jpg"
    garbage.write_bytes(b"\x00garbage")
    bad = verify(server, "--document", str(samples / "document.jpg"), "--selfie", str(garbage))
    assert bad.returncode == 1 and "KycInputError" in bad.stderr and "IMAGE" in bad.stderr
    usage = subprocess.run([*KYC, "verify", "--selfie", "x"], cwd=PROJECT_ROOT,
                           capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2


def test_the_sdk_blocking_and_asyncio_agree(server, samples):
    url = server.options.grpc_url
    with KycClient(url) as client:
        face = client.find_face(samples / "selfie.jpg")
        assert face["found"] and len(face["box"]) == 4
        blocking = client.verify(samples / "document.jpg", samples / "selfie.jpg")
        with pytest.raises(KycInputError, match="IMAGE"):
            client.verify(samples / "document.jpg", b"\x00garbage")

    async def run():
        import numpy as np
        from PIL import Image

        from kyc_tools.dev.synthetic.liveness import HeadModel, Performer

        image = np.asarray(Image.open(samples / "selfie.jpg").convert("RGB"))
        async with AsyncKycClient(url) as client:
            session = await client.liveness_session(
                Performer(HeadModel(image, face["landmarks"])))
            result = await client.verify(samples / "document.jpg", samples / "selfie.jpg",
                                         session.token)
            return session, result

    session, result = asyncio.run(run())
    assert blocking.decision == "review" and blocking.reasons == ["liveness_missing"]
    assert session.is_live, session.final.status
    assert result.reasons == ["liveness_without_passive_pad"]
    assert abs(result.face_match_score - blocking.face_match_score) < 1e-5


def test_an_unreachable_server_is_a_clear_error():
    with KycClient(f"127.0.0.1:{free_port()}", timeout_s=5) as client, pytest.raises(
            KycUnavailableError):
        client.verify(b"a", b"b")
