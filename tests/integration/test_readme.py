"""The README's client snippets run as written against a real server."""

from __future__ import annotations

import contextlib
import io
import re

import pytest

from kyc_export import fetch
from kyc_testing import PROJECT_ROOT

pytestmark = pytest.mark.integration


def readme_snippet(heading: str) -> str:
    text = (PROJECT_ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split(f"## {heading}\n", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, f"no python snippet under '## {heading}'"
    return match.group(1)


def run_snippet(code: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    return out.getvalue()


@pytest.mark.parametrize(("document", "selfie", "verdict"), [
    ("person_a_1", "person_a_2", "same person"),
    ("person_b_2", "person_b_1", "same person"),
    ("person_a_2", "impostor_2", "different people"),
])
def test_the_face_matching_snippet_tells_people_apart(server, document, selfie, verdict):
    photos = fetch.fetch_test_photos()
    code = (readme_snippet("Face matching")
            .replace('"localhost:8001"', repr(server.options.grpc_url))
            .replace('"document.jpg"', repr(str(photos[document])))
            .replace('"selfie.jpg"', repr(str(photos[selfie]))))
    printed = run_snippet(code)
    assert printed.startswith("score ") and printed.rstrip().endswith(verdict), printed
