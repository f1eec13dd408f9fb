"""The client snippets of the README and of the docs pages it links to run as written
against a real server."""

from __future__ import annotations

import contextlib
import io
import re

import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from kyc_testing import PROJECT_ROOT, keyed_server
from kyc_tools.assets import fetch

pytestmark = pytest.mark.integration

# Where the snippets live: the README shows the kyc_ensemble call; the pages it links to
# hold the raw calls and the liveness session.
CLIENT = "docs/client.md"
LIVENESS = "docs/liveness.md"
LIVENESS_SESSION = "Streaming a session (for app developers)"


@pytest.fixture(scope="module")
def server(served_repository, tmp_path_factory):
    """The snippets, run as written, find the server's key as a reader's would."""
    with keyed_server(served_repository, tmp_path_factory.mktemp("keyed")) as keyed:
        yield keyed


def test_the_snippets_server_refuses_a_call_without_the_key(server):
    """What the raw snippets would get without the key they send."""
    import numpy as np

    image = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
    image.set_data_from_numpy(np.array([[b"not an image"]], dtype=object))
    client = grpcclient.InferenceServerClient(server.options.grpc_url)
    try:
        with pytest.raises(InferenceServerException, match="kyc-client-key"):
            client.infer("face_preprocess", [image])
    finally:
        client.close()


def readme_snippet(heading: str, index: int = 0, page: str = "README.md") -> str:
    """The python snippet number ``index`` under ``heading`` (any level) of ``page``,
    a path from the project's root; the section ends at the next heading of its level or
    above."""
    level, section, fenced = 0, [], False
    for line in (PROJECT_ROOT / page).read_text(encoding="utf-8").splitlines(keepends=True):
        fenced ^= line.startswith("```")
        marks = len(line) - len(line.lstrip("#"))
        is_heading = not fenced and marks > 0 and line[marks:marks + 1] == " "
        if is_heading and level and marks <= level:
            break
        if level:
            section.append(line)
        elif is_heading and line[marks + 1:].rstrip("\n") == heading:
            level = marks
    assert level, f"no heading '{heading}' in {page}"
    snippets = re.findall(r"```python\n(.*?)```", "".join(section), re.S)
    assert len(snippets) > index, f"no python snippet {index} under '{heading}' in {page}"
    return snippets[index]


def run_snippet(code: str, page: str = "README.md") -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, page, "exec"), {})
    return out.getvalue()


@pytest.mark.parametrize(("document", "selfie", "verdict"), [
    ("person_a_1", "person_a_2", "same person"),
    ("person_b_2", "person_b_1", "same person"),
    ("person_a_2", "impostor_2", "different people"),
])
def test_the_face_matching_snippet_tells_people_apart(server, document, selfie, verdict):
    photos = fetch.fetch_test_photos()
    code = (readme_snippet("Face matching", page=CLIENT)
            .replace('"localhost:8001"', repr(server.options.grpc_url))
            .replace('"document.jpg"', repr(str(photos[document])))
            .replace('"selfie.jpg"', repr(str(photos[selfie]))))
    printed = run_snippet(code, CLIENT)
    assert printed.startswith("score ") and printed.rstrip().endswith(verdict), printed


def test_the_document_snippet_reads_a_rendered_document(server, tmp_path):
    import numpy as np

    from kyc_tools.dev.synthetic.document import Degradation, random_identity, render_document

    rng = np.random.default_rng(42)
    doc = render_document(random_identity(rng), "td3", None, Degradation(), rng)
    path = tmp_path / "document.jpg"
    path.write_bytes(doc.jpeg_bytes())
    code = (readme_snippet("Reading a document", page=CLIENT)
            .replace('"localhost:8001"', repr(server.options.grpc_url))
            .replace('"document.jpg"', repr(str(path))))
    printed = run_snippet(code, CLIENT).splitlines()
    assert printed[0].endswith("MRZ valid: True"), printed
    assert printed[1] == f"{doc.fields['document_number']} {doc.fields['expiry_date']}"


def person_setup(client) -> str:
    """Code that defines PERFORM: a real photo's face making each move told, as 3-D head
    turns on the canonical face mesh (tests only: frames made by software)."""
    path = fetch.fetch_test_photos()["person_a_2"]
    return ("import time\nimport numpy as np\nfrom PIL import Image\n"
            "from kyc_client.sdk import KycClient as _Faces\n"
            "from kyc_tools.dev.synthetic.liveness import HeadModel, Performer\n"
            f"_PATH = {str(path)!r}\n"
            "with _Faces(URL) as _faces:\n"
            "    _face = _faces.find_face(open(_PATH, 'rb').read())\n"
            "PERFORM = Performer(HeadModel(np.asarray(Image.open(_PATH).convert('RGB')), "
            "_face['landmarks']))\n")


def test_the_liveness_snippet_streams_a_session_to_a_verdict(server, client):
    url = server.options.grpc_url
    code = f"URL = {url!r}\n" + person_setup(client) + (
        readme_snippet(LIVENESS_SESSION, page=LIVENESS)
        .replace('"localhost:8001"', repr(url))
        .replace("return frames", "return PERFORM(move)"))
    printed = run_snippet(code, LIVENESS).splitlines()
    assert printed[0] == "None" and printed[1] in ("left", "right", "up", "down"), printed
    assert printed[-1].startswith("True ") and printed[-1].endswith(" []"), printed


def test_the_verification_snippet_prints_a_decision_with_reasons(server, tmp_path):
    import subprocess
    import sys

    samples = tmp_path / "samples"
    subprocess.run([sys.executable, "-m", "kyc_tools.cli", "samples", "--out", str(samples)],
                   cwd=PROJECT_ROOT, check=True, capture_output=True, timeout=120)
    code = (readme_snippet("2. Clients: `kyc_ensemble` and `liveness_sequence`")
            .replace('"localhost:8001"', repr(server.options.grpc_url))
            .replace('"document.jpg"', repr(str(samples / "document.jpg")))
            .replace('"selfie.jpg"', repr(str(samples / "selfie.jpg"))))
    decision, rest = run_snippet(code).strip().split(" ", 1)
    assert decision == "review" and rest.startswith("['liveness_missing'] 0."), rest


def test_the_capture_snippet_streams_a_camera_and_verifies_with_its_token(
        server, client, tmp_path):
    from kyc_tools.cli import main

    assert main(["samples", "--out", str(tmp_path)]) == 0
    # A camera: the person's frames, 15 a second, doing each move as the replies tell it
    # (the capture keeps the latest progress), holding still until a move is counted.
    url = server.options.grpc_url
    setup = f"URL = {url!r}\n" + person_setup(client) + (
        "def camera():\n"
        "    def shoot(frames):\n"
        "        for frame in frames:\n"
        "            time.sleep(1 / 15)\n"
        "            yield frame\n"
        "    yield from shoot(PERFORM(None))\n"
        "    done = 0\n"
        "    while capture.progress.get('next') is not None:\n"
        "        yield from shoot(PERFORM(capture.progress['next']))\n"
        "        for _ in range(20):\n"
        "            if capture.progress.get('moves_done', 0) > done:\n"
        "                break\n"
        "            yield from shoot(PERFORM(None)[:1])\n"
        "        else:\n"
        "            return\n"
        "        done = capture.progress['moves_done']\n"
        "    yield from shoot(PERFORM(None))\n")
    code = setup + (readme_snippet(LIVENESS_SESSION, 1, page=LIVENESS)
                    .replace('"localhost:8001"', repr(server.options.grpc_url))
                    .replace('"document.jpg"', repr(str(tmp_path / "document.jpg")))
                    .replace('"selfie.jpg"', repr(str(tmp_path / "selfie.jpg"))))
    printed = run_snippet(code, LIVENESS).splitlines()
    assert printed[0].startswith("turn your head to your") or printed[0].startswith(
        "tilt your head"), printed
    assert "done: keep looking at the camera" in printed[1:-2], printed
    # every check passed; no passive anti-spoofing model is shipped: a person reviews
    assert printed[-2] == "True []", printed
    assert printed[-1] == "review ['liveness_without_passive_pad']", printed
