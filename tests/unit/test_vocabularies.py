"""The vocabularies declared once (kyc.reasons, kyc.liveness.challenge): what follows
from them, the pages generated from them, and the wire values they must keep."""

from __future__ import annotations

import ast
import re

import pytest

from kyc.decision.policy import REASONS, REJECT, REVIEW
from kyc.liveness.challenge import GUIDANCE, MOVES
from kyc.liveness.session import REASONS as LIVENESS_CHECK_REASONS
from kyc.reasons import (
    DECISION_REASONS,
    LIVENESS_REASONS,
    OUTCOME_MEANS,
    OUTCOME_TOLD,
    TOLD,
    Outcome,
    every_code,
    told_for,
)
from kyc_testing import PROJECT_ROOT
from kyc_tools.cli import main
from kyc_tools.docs import pages
from kyc_tools.web import words

# What clients see, typed here on purpose: a rename in the declaration fails this test.
DECISION_CODES_ON_THE_WIRE = (
    "face_mismatch", "liveness_failed", "liveness_token_invalid", "liveness_token_reused",
    "selfie_not_live_person", "mrz_check_failed", "document_expired", "underage",
    "high_fraud_score", "no_face_in_document", "no_face_in_selfie", "multiple_faces_in_selfie",
    "face_match_uncertain", "liveness_missing", "liveness_token_expired",
    "liveness_without_passive_pad", "mrz_not_found", "mrz_misread", "visual_zone_mismatch",
    "visual_zone_unreadable", "elevated_fraud_score")
LIVENESS_CODES_ON_THE_WIRE = {
    "challenge": "challenge_not_completed", "relief": "face_looks_flat",
    "same_person": "face_changed", "single_face": "multiple_or_no_faces",
    "sharp_frames": "too_few_sharp_frames", "duration": "duration_out_of_bounds",
    "passive_pad": "passive_pad_failed"}
MOVES_ON_THE_WIRE = {
    "left": ("yaw", +1, "turn your head to your left", "a little more to your left"),
    "right": ("yaw", -1, "turn your head to your right", "a little more to your right"),
    "up": ("pitch", +1, "tilt your head up", "a little higher"),
    "down": ("pitch", -1, "tilt your head down", "a little lower")}


# -- reason codes ---------------------------------------------------------------------
def test_the_reason_codes_clients_see_are_unchanged_and_in_report_order():
    assert REASONS == DECISION_CODES_ON_THE_WIRE
    assert DECISION_CODES_ON_THE_WIRE[:9] == REJECT and DECISION_CODES_ON_THE_WIRE[9:] == REVIEW
    assert LIVENESS_CHECK_REASONS == LIVENESS_CODES_ON_THE_WIRE
    assert [o.value for o in Outcome] == ["approve", "review", "reject"]


def test_each_reason_code_is_declared_once_snake_case_with_its_meaning_and_words():
    codes = every_code()
    assert len(codes) == len(set(codes))
    assert all(re.fullmatch(r"[a-z]+(_[a-z]+)*", code) for code in codes)
    assert all(r.outcome in (Outcome.REJECT, Outcome.REVIEW) for r in DECISION_REASONS)
    assert all(r.means and (r.told is None or r.told in TOLD)
               for r in (*DECISION_REASONS, *LIVENESS_REASONS))
    assert len({r.check for r in LIVENESS_REASONS}) == len(LIVENESS_REASONS)
    assert set(OUTCOME_MEANS) == set(OUTCOME_TOLD) == set(Outcome)


def test_the_capture_pages_words_are_those_declared_with_the_codes():
    assert {t.code: t.text for t in TOLD} == words.TOLD
    assert told_for() == words.TOLD_FOR and set(words.TOLD_FOR) == set(every_code())
    assert {o.value: OUTCOME_TOLD[o] for o in Outcome} == words.DECISION


def _string_constants(path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)}


def test_no_code_outside_the_declaration_writes_a_reason_code_as_a_string():
    codes = set(every_code())
    declaration = PROJECT_ROOT / "backends" / "kyc" / "reasons.py"
    sources = [p for folder in ("backends", "tools") for p in (PROJECT_ROOT / folder).rglob("*.py")
               if p != declaration]
    written = {str(p.relative_to(PROJECT_ROOT)): sorted(_string_constants(p) & codes)
               for p in sources}
    assert {path: found for path, found in written.items() if found} == {}, (
        "refer to the constants of kyc.reasons instead")


# -- generated pages --------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(pages()))
def test_each_generated_page_in_docs_is_as_its_declaration_makes_it(name):
    page = pages()[name]
    path = PROJECT_ROOT / page.path
    assert path.is_file(), f"{page.path} is missing: run `.venv/bin/{page.command}`"
    assert path.read_text(encoding="utf-8") == page.render(), (
        f"{page.path} is out of date with its declaration: run `.venv/bin/{page.command}`")


def test_the_reason_codes_page_names_every_code_and_every_coarse_reasons_words():
    text = pages()["reasons"].render()
    for code in every_code():
        assert f"| `{code}` |" in text
    for told in TOLD:
        assert f"| `{told.code}` | {told.text} |" in text


def test_the_moves_page_names_every_move_and_every_line_of_guidance():
    text = pages()["moves"].render()
    for move in MOVES.values():
        assert f"| `{move.name}` | `{move.measure.name}` |" in text and move.instruction in text
    assert all(line in text for line in GUIDANCE.values())


def test_kyc_docs_writes_a_page_and_check_fails_naming_the_command_when_it_differs(
        tmp_path, capsys):
    assert main(["docs", "reasons", "--check", "--root", str(tmp_path)]) == 1
    assert "docs/reason-codes.md is missing: run `kyc docs reasons`" in capsys.readouterr().err
    assert main(["docs", "reasons", "--root", str(tmp_path)]) == 0
    assert main(["docs", "reasons", "--check", "--root", str(tmp_path)]) == 0
    page = tmp_path / "docs" / "reason-codes.md"
    page.write_text(page.read_text(encoding="utf-8") + "an edit by hand\n", encoding="utf-8")
    assert main(["docs", "reasons", "--check", "--root", str(tmp_path)]) == 1
    assert "out of date: run `kyc docs reasons`" in capsys.readouterr().err


# -- moves ------------------------------------------------------------------------------
def test_the_moves_and_their_words_are_unchanged():
    assert {name: (m.measure.name, m.sign, m.instruction, m.more)
            for name, m in MOVES.items()} == MOVES_ON_THE_WIRE
