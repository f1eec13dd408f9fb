"""README.md is a door: short, its links and the docs' links lead somewhere, and it types no
count of tests (a count typed by hand is stale by the next commit)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kyc_testing import PROJECT_ROOT

README = PROJECT_ROOT / "README.md"
DOCS = PROJECT_ROOT / "docs"
MAX_README_LINES = 260

# [text](target) and ![alt](target); the target ends at a space (a title) or ")".
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?[^)]*\)")
# Made by `kyc docs reasons` from backends/kyc/reasons.py: another change creates and
# regenerates it, so a link to it may come before the page does.
NOT_YET_MADE = {DOCS / "reason-codes.md"}


def markdown_pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md")), *sorted(DOCS.glob("*/*.md"))]


def relative_links(page: Path) -> list[str]:
    """The page's link targets that name a file of the repository: no web address, no
    mail address, no bare anchor; code spans and fenced blocks are not links."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    targets = (target.split("#", 1)[0] for target in LINK.findall(text))
    return [t for t in targets if t and not re.match(r"[a-z][a-z0-9+.-]*:", t, re.I)]


def test_the_readme_is_at_most_260_lines():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_README_LINES, (
        f"README.md has {lines} lines: move the detail to a page under docs/ and link to it")


@pytest.mark.parametrize("page", markdown_pages(), ids=lambda p: str(p.relative_to(PROJECT_ROOT)))
def test_every_relative_link_points_to_a_file_that_exists(page):
    missing = [target for target in relative_links(page)
               if (page.parent / target).resolve() not in NOT_YET_MADE
               and not (page.parent / target).exists()]
    assert not missing, f"{page.relative_to(PROJECT_ROOT)} links to missing {missing}"


def test_the_link_checker_sees_links_and_skips_web_addresses_anchors_and_code(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("[a](docs/a.md#part) ![b](web/b.png \"title\") [c](https://x.org/c.md)\n"
                    "[d](#here) [e](mailto:x@y.z) `[f](f.md)`\n```\n[g](g.md)\n```\n")

    assert relative_links(page) == ["docs/a.md", "web/b.png"]


def test_the_readme_types_no_count_of_tests():
    text = README.read_text(encoding="utf-8")
    counts = re.findall(r"\b\d[\d,]*\s+(?:tests?|passed|failed|skipped|errors?)\b", text, re.I)
    assert not counts, f"README.md types test counts by hand: {counts}"
