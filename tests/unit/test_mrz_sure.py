"""kyc.document.mrz_sure through parse_mrz: a failing check over a character the reader was
unsure of may be a misread (issue 45); a name letter read unsure where a filler was offered
makes the MRZ not valid; a digit altered and read with confidence stays an edit."""

from __future__ import annotations

import dataclasses
from datetime import date

import pytest

from kyc.decision.policy import DecisionSettings, Findings, LivenessEvidence, decide
from kyc.document.mrz import compose_mrz, parse_mrz
from kyc.face.match import FaceThresholds
from kyc_tools.web import words

TODAY = date(2026, 11, 27)
FIELDS = {"document_code": "P", "issuing_state": "D", "nationality": "D",
          "surname": "GARCIA", "given_names": "JUAN ANDRES", "document_number": "C25437501",
          "birth_date": "1979-06-26", "sex": "F", "expiry_date": "2031-05-21",
          "optional_data": "90102947"}
PRINTED = compose_mrz("TD3", FIELDS)  # P<D<<GARCIA<<JUAN<ANDRES<<<<... / C254375015D<<...
NUMBER_O = 7  # "C25437501": the 0 at 7 read as O, which the number may legally hold
FILLERS_AFTER_ANDRES = range(PRINTED[0].index("ANDRES") + 7, PRINTED[0].index("ANDRES") + 12)


def sure(line: str, p: float = 0.99) -> list:
    return [((char, p),) for char in line]


def read_as(line: str, readings: dict[int, tuple]) -> tuple[str, tuple]:
    """``line`` as read with ``readings`` (position -> its options, the written one
    first) and every other character written with confidence."""
    chars, options = list(line), sure(line)
    for position, offered in readings.items():
        chars[position], options[position] = offered[0][0], offered
    return "".join(chars), tuple(options)


def parsed(upper: tuple[str, tuple] | None = None, lower: tuple[str, tuple] | None = None,
           visual: tuple[str, ...] = ()) -> dict:
    """The MRZ dict of the printed page read as ``upper`` and ``lower`` (text, options),
    each line read with confidence where not given."""
    upper = upper or (PRINTED[0], tuple(sure(PRINTED[0])))
    lower = lower or (PRINTED[1], tuple(sure(PRINTED[1])))
    return parse_mrz([upper[0], lower[0]], TODAY, options=[upper[1], lower[1]],
                     visual=visual)["mrz"]


def decided(mrz: dict) -> tuple[str, list[str]]:
    """kyc_decision on a customer in order but for this MRZ."""
    document = {"mrz": mrz, "fields": {"surname": "GARCIA", "document_number": "C25437501",
                                       "birth_date": "1979-06-26"}, "expired": False}
    live = LivenessEvidence(provided=True, valid=True, live=True, passive_pad=True,
                            score=0.97, selfie_similarity=0.8)
    findings = Findings(0.7, True, True, 1, live, document, ["GARCIA", "C25437501"], 0.1)
    return decide(findings, DecisionSettings(), FaceThresholds(0.363, 0.363), TODAY)[:2]


def test_a_clean_page_reports_no_misread_and_stays_valid():
    mrz = parsed()
    assert (mrz["valid"], mrz["problems"], mrz["misread"]) == (True, [], [])
    assert decided(mrz) == ("approve", [])


@pytest.mark.parametrize("offered", [(("O", 0.6), ("0", 0.35)), (("O", 0.95), ("0", 0.05))],
                         ids=["unsure", "at-the-bounds"])
def test_a_look_alike_read_unsure_under_failing_checks_is_a_misread_not_an_edit(offered):
    """No visual zone shows the number, so no mend may choose the 0."""
    mrz = parsed(lower=read_as(PRINTED[1], {NUMBER_O: offered}))
    assert mrz["valid"] is False and mrz["mended"] == 0
    assert mrz["problems"] == ["document_number_check_failed", "composite_check_failed"]
    assert mrz["misread"] == ["document_number", "composite"]
    assert decided(mrz) == ("review", ["mrz_misread"])
    assert words.reasons(["mrz_misread"]) == [{
        "code": "document_photo_unclear",
        "text": "We could not read your document clearly: please take another photo, flat, "
                "in good light, without glare."}]


@pytest.mark.parametrize("offered", [
    (("O", 0.97), ("0", 0.03)),  # read with confidence
    (("O", 0.96), ("0", 0.05)),  # just above MAX_SURE
    (("O", 0.8),),  # unsure, but of no other character
    (("O", 0.6), ("0", 0.04)),  # the other below MIN_OPTION
    (("O", 0.6), ("<", 0.35)),  # a filler is never a character's misread
], ids=["sure", "above-max-sure", "nothing-offered", "below-min-option", "filler-offered"])
def test_a_look_alike_not_in_doubt_is_an_edit(offered):
    mrz = parsed(lower=read_as(PRINTED[1], {NUMBER_O: offered}))
    assert mrz["valid"] is False and mrz["misread"] == []
    assert decided(mrz) == ("reject", ["mrz_check_failed"])


def test_a_zero_read_unsure_beside_its_letter_o_is_no_doubt_where_only_digits_stand():
    """A date digit altered and read clearly; the date's check digit 0 written at 0.8 with
    an O beside it: O cannot stand there, so it offers no other reading."""
    upper, lower = PRINTED
    digit = lower.index("790626") + 6
    assert lower[digit] == "0"
    altered = lower[:digit - 1] + "8" + lower[digit:]  # 790626 -> 790628
    _, options = read_as(altered, {digit: (("0", 0.8), ("O", 0.19))})
    mrz = parse_mrz([upper, altered], TODAY, options=[tuple(sure(upper)), options])["mrz"]
    assert mrz["checks"]["birth_date"] is False and mrz["misread"] == []
    _, options = read_as(altered, {digit: (("0", 0.8), ("6", 0.19))})  # a digit offered
    mrz = parse_mrz([upper, altered], TODAY, options=[tuple(sure(upper)), options])["mrz"]
    assert mrz["misread"] == ["birth_date", "composite"]


def test_a_mended_page_is_valid_with_no_misread():
    mrz = parsed(lower=read_as(PRINTED[1], {NUMBER_O: (("O", 0.6), ("0", 0.35))}),
                 visual=("C25437501",))
    assert (mrz["valid"], mrz["mended"], mrz["misread"]) == (True, 1, [])


def test_a_tampered_digit_read_with_confidence_stays_mrz_check_failed():
    altered = PRINTED[1][:3] + "9" + PRINTED[1][4:]  # C25437501 -> C25937501
    mrz = parsed(lower=(altered, tuple(sure(altered))), visual=("C25937501",))
    assert mrz["valid"] is False and mrz["misread"] == []
    assert decided(mrz) == ("reject", ["mrz_check_failed"])


def test_an_unsure_character_under_a_check_that_passes_does_not_explain_a_failing_one():
    """The number altered and read clearly; a birth-date digit read unsure: the composite
    covers it, but so does the birth date's own check, which passes."""
    altered = PRINTED[1][:3] + "9" + PRINTED[1][4:]
    birth = PRINTED[1].index("790626")
    _, options = read_as(altered, {birth + 1: (("9", 0.7), ("8", 0.25))})
    mrz = parsed(lower=(altered, options))
    assert mrz["checks"]["birth_date"] is True and mrz["checks"]["composite"] is False
    assert mrz["misread"] == []
    assert decided(mrz)[1] == ["mrz_check_failed"]


def test_a_filler_read_unsure_explains_no_failing_check():
    """An altered personal number read clearly beside its padding read unsure."""
    line = PRINTED[1]
    padding = line.index("<", 28)
    altered = line[:28] + str((int(line[28]) + 1) % 10) + line[29:]
    _, options = read_as(altered, {padding: (("<", 0.6), ("0", 0.3))})
    mrz = parsed(lower=(altered, options))
    assert mrz["checks"]["optional_data"] is False and mrz["misread"] == []


def test_without_options_nothing_is_a_misread():
    read = PRINTED[1][:NUMBER_O] + "O" + PRINTED[1][NUMBER_O + 1:]
    mrz = parse_mrz([PRINTED[0], read], TODAY)["mrz"]
    assert mrz["valid"] is False and mrz["misread"] == []
    unknown = parse_mrz([PRINTED[0], read], TODAY, options=[None, None])["mrz"]
    assert unknown["misread"] == []


# -- names: no check digit covers them --------------------------------------------------
def fillers_read_as(letter: str, written_p: float, offered: tuple = ()) -> tuple[str, tuple]:
    """``...ANDRES<<<<<<`` read ``...ANDRES<CCCCC`` (``letter`` for C)."""
    return read_as(PRINTED[0], {pos: ((letter, written_p), *offered)
                                for pos in FILLERS_AFTER_ANDRES})


def test_fillers_read_as_letters_where_a_filler_was_offered_make_the_mrz_not_valid():
    upper = fillers_read_as("C", 0.6, (("<", 0.35),))
    assert upper[0].endswith("ANDRES<CCCCC" + "<" * 14)
    document = parse_mrz([upper[0], PRINTED[1]], TODAY,
                         options=[upper[1], tuple(sure(PRINTED[1]))])
    mrz = document["mrz"]
    assert all(mrz["checks"][name] is not False for name in mrz["checks"])
    assert (mrz["valid"], mrz["problems"], mrz["misread"]) == (False, ["name_unsure"], ["name"])
    assert document["fields"]["given_names"] == "JUAN ANDRES CCCCC"  # reported as read
    assert decided(mrz) == ("review", ["mrz_misread"])


@pytest.mark.parametrize("upper", [
    fillers_read_as("C", 0.99),  # read with confidence: nothing to tell it from a name
    fillers_read_as("C", 0.96, (("<", 0.04),)),  # sure enough
    fillers_read_as("C", 0.6, (("<", 0.04),)),  # a filler offered below MIN_OPTION
    fillers_read_as("C", 0.6, (("G", 0.35),)),  # only a letter offered
], ids=["sure", "above-max-sure", "filler-below-min-option", "letter-offered"])
def test_a_name_letter_is_doubted_only_when_read_unsure_with_a_filler_offered(upper):
    mrz = parsed(upper=upper)
    assert (mrz["valid"], mrz["misread"]) == (True, [])


def test_a_name_read_unsure_never_makes_a_tampered_page_anything_but_rejected():
    altered = PRINTED[1][:3] + "9" + PRINTED[1][4:]
    mrz = parsed(upper=fillers_read_as("C", 0.6, (("<", 0.35),)),
                 lower=(altered, tuple(sure(altered))))
    assert mrz["valid"] is False and mrz["misread"] == ["name"]
    assert mrz["problems"] == ["document_number_check_failed", "composite_check_failed",
                               "name_unsure"]
    assert decided(mrz) == ("reject", ["mrz_check_failed"])


def test_a_td1_name_on_the_third_line_is_read_the_same_way():
    fields = {**FIELDS, "document_code": "I", "optional_data": ""}
    lines = compose_mrz("TD1", fields)
    start = lines[2].index("ANDRES") + 7
    name, options = read_as(lines[2], {start: (("K", 0.5), ("<", 0.45))})
    mrz = parse_mrz([*lines[:2], name], TODAY,
                    options=[tuple(sure(lines[0])), tuple(sure(lines[1])), options])["mrz"]
    assert (mrz["format"], mrz["valid"], mrz["misread"]) == ("TD1", False, ["name"])


@dataclasses.dataclass
class Counted:
    """Lazy options (kyc.document.ctc_length.LazyOptions) that count how often asked."""

    options: tuple
    asked: int = 0

    def __call__(self) -> tuple:
        self.asked += 1
        return self.options


def test_a_clean_page_works_out_the_name_lines_options_only():
    upper, lower = Counted(tuple(sure(PRINTED[0]))), Counted(tuple(sure(PRINTED[1])))
    mrz = parse_mrz(PRINTED, TODAY, options=[upper, lower])["mrz"]
    assert mrz["valid"] is True and (upper.asked, lower.asked) == (1, 0)
