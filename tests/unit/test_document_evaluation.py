"""Scoring a reading of a rendered document against what was printed on it."""

from __future__ import annotations

import copy

import pytest

from kyc.document.mrz import empty_document, parse_mrz
from kyc_tools.dev.eval.document_cases import TALLIES, rates, render_cases, score


@pytest.fixture(scope="module")
def cases():
    return render_cases(3, [None])


def test_cases_are_td1_td2_and_td3_in_turn_and_are_seeded(cases):
    assert [c.kind for c in cases] == ["td1", "td2", "td3"]
    assert [(len(c.mrz_lines), len(c.mrz_lines[0])) for c in cases] == [(3, 30), (2, 36),
                                                                         (2, 44)]
    again = render_cases(3, [None])
    assert [c.mrz_lines for c in again] == [c.mrz_lines for c in cases]
    assert all(c.image[:2] == b"\xff\xd8" for c in cases)  # JPEG


def test_page_i_is_drawn_from_seed_plus_i(cases):
    shifted = render_cases(2, [None], seed=6999)[1]  # seed 7000 again, now drawn as a TD2
    assert shifted.kind == "td2"
    for name in ("document_number", "birth_date", "expiry_date"):
        assert shifted.fields[name] == cases[0].fields[name]


def test_the_printed_mrz_read_back_scores_every_tally(cases):
    for case in cases:
        tallies = score(parse_mrz(case.mrz_lines), case)
        assert set(tallies) == set(TALLIES)
        assert tallies == {"documents": 1, "mrz_found": 1, "mrz_exact": 1, "fields_exact": 1,
                           "fields_correct": len(case.fields),
                           "fields_total": len(case.fields), "valid": 1,
                           "valid_but_wrong": 0, "tampered": 0, "tampered_flagged": 0,
                           "genuine_not_valid": 0, "genuine_not_valid_retake": 0,
                           "genuine_rejected_for_misread": 0}


def test_one_wrong_field_costs_one_field_and_the_document_not_the_mrz_found(cases):
    case = cases[0]
    document = copy.deepcopy(parse_mrz(case.mrz_lines))
    document["fields"]["given_names"] = "SOMEONE ELSE"
    document["mrz"]["lines"][0] = document["mrz"]["lines"][0][:-1] + "X"
    tallies = score(document, case)
    assert (tallies["mrz_found"], tallies["mrz_exact"], tallies["fields_exact"]) == (1, 0, 0)
    assert tallies["fields_correct"] == len(case.fields) - 1


def test_a_reading_reported_valid_but_not_as_printed_is_counted_as_such(cases):
    case = cases[0]
    document = copy.deepcopy(parse_mrz(case.mrz_lines))
    document["mrz"]["lines"][1] = "X" + document["mrz"]["lines"][1][1:]
    assert score(document, case)["valid_but_wrong"] == 1
    document["mrz"]["valid"] = False
    assert score(document, case)["valid_but_wrong"] == 0


def test_tampered_pages_must_read_not_valid():
    *genuine, tampered = render_cases(3, [None], tampered=1)
    assert not any(c.tampered for c in genuine) and tampered.tampered
    read = parse_mrz(tampered.mrz_lines)  # the altered MRZ as printed, read exactly
    tallies = score(read, tampered)
    assert read["mrz"]["valid"] is False and tallies["mrz_exact"] == 1
    assert (tallies["tampered"], tallies["tampered_flagged"], tallies["valid_but_wrong"]) \
        == (1, 1, 0)
    forged_valid = copy.deepcopy(read)
    forged_valid["mrz"]["valid"] = True
    assert score(forged_valid, tampered)["valid_but_wrong"] == 1
    assert score(forged_valid, tampered)["tampered_flagged"] == 0


def test_nothing_found_scores_zero_but_counts_the_document(cases):
    tallies = score(empty_document(), cases[1])
    assert tallies["documents"] == 1 and tallies["fields_total"] == len(cases[1].fields)
    assert tallies["mrz_found"] == tallies["mrz_exact"] == tallies["valid"] == 0


def test_rates_are_shares_of_documents_and_fields_and_null_for_nothing():
    summed = {"documents": 4, "mrz_found": 4, "mrz_exact": 3, "fields_exact": 2,
              "fields_correct": 41, "fields_total": 44, "valid": 4}
    assert rates(summed) == {"mrz_exact_rate": 0.75, "fields_exact_rate": 0.5,
                             "field_accuracy": 0.9318, "valid_rate": 1.0}
    assert set(rates({}).values()) == {None}
