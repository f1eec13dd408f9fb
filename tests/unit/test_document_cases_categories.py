"""The hard cases of ``kyc eval documents`` counted in their own rows: each page's kinds
read from its printed MRZ, the genuine pages reported not valid split by what the
decision does with them, the rows in the JSON and the report, and the held-out seed
of ``kyc eval samples``. Crafted truths, no server, no rendering."""

from __future__ import annotations

import copy
import json
from datetime import date
from pathlib import Path

import pytest
from PIL import Image

from kyc.document.mrz import compose_mrz, parse_mrz
from kyc_tools.cli import build_parser
from kyc_tools.dev.eval import documents, report, samples
from kyc_tools.dev.eval.data import DocumentSample
from kyc_tools.dev.eval.document_cases import (
    CATEGORIES,
    CATEGORY_TALLIES,
    FILLER_RUN,
    DocumentCase,
    by_category,
    categories,
    score,
)
from kyc_tools.dev.synthetic.document import LOOKALIKES

FORMAT_OF = {"TD1": "td1", "TD2": "td2", "TD3": "td3"}


def printed(fmt: str = "TD3", tampered: bool = False, **fields: str) -> DocumentCase:
    """A case whose truth is the MRZ ``compose_mrz`` prints for these fields."""
    given = {"issuing_state": "UTO", "surname": "LINDQVIST", "given_names": "MARIA ISOBEL",
             "document_number": "123456789", "nationality": "UTO",
             "birth_date": date(1980, 5, 17), "sex": "F", "expiry_date": date(2031, 2, 3),
             "optional_data": ""}
    given.update(fields)
    lines = compose_mrz(fmt, given)
    return DocumentCase(b"", FORMAT_OF[fmt], tuple(lines), {"surname": given["surname"]},
                        tampered)


def test_every_category_has_words_and_the_formats_come_first():
    assert list(CATEGORIES)[:3] == ["TD1", "TD2", "TD3"]
    assert all(CATEGORIES.values())
    assert CATEGORIES["TD2"] == "TD2 (2 x 36)"


def test_a_td1_page_of_digits_and_a_name_that_fits_is_only_its_format():
    # LINDQVIST<<MARIA<ISOBEL: 23 of 30, a run of 7 fillers, not cut
    assert categories(printed("TD1")) == ("TD1", "number_digits_only")


def test_a_td2_line_pair_is_a_td2_page():
    case = printed("TD2", surname="LINDQVIST", given_names="MARIA ISOBEL ANNA")
    assert [len(line) for line in case.mrz_lines] == [36, 36]
    assert categories(case)[0] == "TD2"


@pytest.mark.parametrize("letter", LOOKALIKES)
def test_a_number_with_any_lookalike_letter_is_a_lookalike_page(letter):
    case = printed("TD1", document_number=f"12{letter}456789")
    assert "number_lookalike" in categories(case)
    assert "number_alphanumeric_no_lookalike" not in categories(case)
    assert "number_digits_only" not in categories(case)


def test_a_number_with_an_o_among_other_letters_is_still_a_lookalike_page():
    assert "number_lookalike" in categories(printed("TD3", document_number="CFO456789"))


def test_a_number_with_letters_but_no_lookalike_and_one_of_digits_only():
    assert "number_alphanumeric_no_lookalike" in categories(
        printed("TD3", document_number="CF1234567"))
    short = categories(printed("TD3", document_number="1234567"))  # padded with fillers
    assert "number_digits_only" in short and "number_lookalike" not in short


def test_a_number_overflowing_into_the_optional_data_is_read_whole():
    case = printed("TD1", document_number="123456789Q12")  # the Q in the overflow
    assert "number_lookalike" in categories(case)
    assert "optional_data_letters" not in categories(case)  # the overflow is the number's


@pytest.mark.parametrize(("fmt", "field"), [("TD3", "optional_data"), ("TD2", "optional_data"),
                                            ("TD1", "optional_data"),
                                            ("TD1", "optional_data_2")])
def test_optional_data_with_a_letter_is_its_own_kind(fmt, field):
    assert "optional_data_letters" in categories(printed(fmt, **{field: "12A45"}))
    assert "optional_data_letters" not in categories(printed(fmt, **{field: "12345"}))


def test_a_short_name_leaves_a_long_run_of_fillers():
    case = printed("TD1", surname="LI", given_names="BO")
    assert "name_filler_run" in categories(case) and "name_cut" not in categories(case)
    # one filler short of the run: 30 - 19 = 11 characters of name
    fitted = printed("TD1", surname="ABCDEF", given_names="GHI")
    assert fitted.mrz_lines[2].endswith("<" * (FILLER_RUN - 1))
    assert "name_filler_run" not in categories(fitted)


def test_a_name_longer_than_its_field_is_cut_to_the_line():
    for fmt in ("TD1", "TD2", "TD3"):
        case = printed(fmt, surname="WOLFESCHLEGELSTEINHAUSEN BERGERDORFF",
                       given_names="MARIA DEL ROSARIO")
        assert "name_cut" in categories(case), fmt
        assert "name_filler_run" not in categories(case), fmt


def test_a_tampered_page_is_counted_and_lines_of_no_format_only_as_that():
    assert categories(printed("TD3", tampered=True))[-1] == "tampered"
    assert categories(DocumentCase(b"", "td3", ("NOT AN MRZ",), {}, True)) == ("tampered",)
    assert categories(DocumentCase(b"", "td3", (), {})) == ()


def not_valid(case: DocumentCase, **mrz: object) -> dict:
    document = copy.deepcopy(parse_mrz(list(case.mrz_lines)))
    document["mrz"]["valid"] = False
    document["mrz"].pop("misread", None)
    document["mrz"].update(mrz)
    return document


def test_a_genuine_page_not_valid_with_misread_checks_asks_for_another_photo():
    tallies = score(not_valid(printed(), misread=["document_number"]), printed())
    assert (tallies["genuine_not_valid"], tallies["genuine_not_valid_retake"],
            tallies["genuine_rejected_for_misread"]) == (1, 1, 0)


@pytest.mark.parametrize("mrz", [{"misread": []}, {"misread": None}, {}])
def test_a_genuine_page_not_valid_without_misread_checks_is_rejected_for_a_misread(mrz):
    tallies = score(not_valid(printed(), **mrz), printed())  # {}: an older reader's MRZ
    assert (tallies["genuine_not_valid"], tallies["genuine_not_valid_retake"],
            tallies["genuine_rejected_for_misread"]) == (1, 0, 1)


def test_valid_tampered_and_unfound_pages_are_no_genuine_page_not_valid():
    case = printed()
    assert score(parse_mrz(list(case.mrz_lines)), case)["genuine_not_valid"] == 0
    tampered = printed(tampered=True)
    assert score(not_valid(tampered), tampered)["genuine_not_valid"] == 0
    nothing = {"mrz": None, "fields": {}}
    assert score(nothing, case)["genuine_not_valid"] == 0  # mrz_not_found, another reason


def test_tallies_are_summed_per_kind_in_the_categories_order():
    lookalike = printed("TD1", document_number="O23456789")
    digits = printed("TD3", surname="LI", given_names="BO")
    scored = [(categories(lookalike), score(parse_mrz(list(lookalike.mrz_lines)), lookalike)),
              (categories(digits), score(not_valid(digits), digits)),
              (categories(digits), {"documents": 1})]  # a request that failed
    rows = by_category(scored)
    assert list(rows) == ["TD1", "TD3", "number_lookalike", "number_digits_only",
                          "name_filler_run"]
    assert all(list(row) == list(CATEGORY_TALLIES) for row in rows.values())
    assert rows["TD3"] == {"documents": 2, "mrz_found": 1, "mrz_exact": 1, "fields_exact": 1,
                           "valid_but_wrong": 0, "genuine_not_valid": 1,
                           "genuine_not_valid_retake": 0, "genuine_rejected_for_misread": 1}
    assert rows["number_lookalike"]["mrz_exact"] == 1
    assert rows["number_lookalike"]["genuine_not_valid"] == 0
    assert all(type(n) is int for row in rows.values() for n in row.values())


SECRET_NUMBER = "DZ3456789"


def figures(misread: list[str]) -> tuple[list[DocumentSample], dict]:
    cases = [printed("TD1", document_number=SECRET_NUMBER), printed("TD2"),
             printed("TD3", surname="LI", given_names="BO", tampered=True)]
    samples_ = [DocumentSample(Path(f"doc_{k}.jpg"), c.mrz_lines, dict(c.fields), c.kind,
                               c.tampered) for k, c in enumerate(cases)]
    read = [(not_valid(cases[0], misread=misread), 0.1),
            (parse_mrz(list(cases[1].mrz_lines)), 0.2),
            RuntimeError("the server said no")]
    return samples_, documents.tally(samples_, read)


def test_the_version_figures_hold_the_new_tallies_and_the_rows_per_kind():
    _, v1 = figures(["document_number"])
    assert (v1["genuine_not_valid"], v1["genuine_not_valid_retake"],
            v1["genuine_rejected_for_misread"]) == (1, 1, 0)
    rows = v1["by_kind_of_page"]
    assert rows["number_lookalike"]["documents"] == 1
    assert rows["number_lookalike"]["genuine_not_valid_retake"] == 1
    assert rows["TD2"]["mrz_exact"] == rows["TD2"]["fields_exact"] == 1
    assert rows["tampered"] == {**dict.fromkeys(CATEGORY_TALLIES, 0), "documents": 1}
    assert rows["TD3"]["documents"] == 1 and "name_filler_run" in rows


def test_the_report_has_a_by_kind_table_side_by_side_and_never_a_text(tmp_path):
    samples_, v1 = figures(["document_number"])
    _, v2 = figures([])
    result = {"kind": "documents", "data": "d", "repository": "r", "model": "ocr_rec",
              "documents": len(samples_), "kinds": {"td1": 1, "td2": 1, "td3": 1},
              "versions": {"1": v1, "2": v2}, "peers": {}, "recommendation": "ocr_rec v1"}
    text = report.markdown(result, [], tmp_path)
    assert "### By kind of page" in text
    table = text[text.index("### By kind of page"):].splitlines()
    assert "| kind of page | documents | ocr_rec v1 | ocr_rec v2 |" in table
    lookalike = next(r for r in table if r.startswith(f"| {CATEGORIES['number_lookalike']} "))
    assert lookalike.endswith("| 1 | 1 / 1 / 1 / 0 / 1 (0) | 1 / 1 / 1 / 0 / 1 (1) |")
    assert f"| {CATEGORIES['tampered']} | 1 | 0 / 0 / 0 / 0 / 0 (0) |" in "\n".join(table)
    assert "| genuine pages rejected for a misread (must be 0) | 0 | 1 |" in text
    report.write_json(result, tmp_path / "documents.json")
    saved = (tmp_path / "documents.json").read_text()
    assert json.loads(saved)["versions"]["2"]["by_kind_of_page"]["number_lookalike"][
        "genuine_rejected_for_misread"] == 1
    for secret in (SECRET_NUMBER, "LINDQVIST", *samples_[0].mrz_lines):
        assert secret not in saved and secret not in text


def test_samples_take_a_documents_seed_and_say_where_the_held_out_pages_start(capsys):
    parser = build_parser()
    args = parser.parse_args(["eval", "samples", "--out", "D", "--documents", "5",
                              "--documents-seed", str(samples.HELD_OUT_SEED)])
    assert (args.documents, args.documents_seed) == (5, 900000)
    assert parser.parse_args(["eval", "samples", "--out", "D"]).documents_seed is None
    with pytest.raises(SystemExit):
        parser.parse_args(["eval", "samples", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    for seed in (samples.DOCUMENTS_SEED, samples.HARSH_SEED, samples.HELD_OUT_SEED):
        assert str(seed) in shown


def test_a_documents_seed_renders_both_document_sets_from_it(monkeypatch, tmp_path):
    seeds = []
    monkeypatch.setattr("kyc_tools.assets.fetch.fetch_test_photos", lambda: {})
    monkeypatch.setattr(samples, "write_faces", lambda photos, out: 0)
    monkeypatch.setattr(samples, "write_liveness", lambda out, repository: 0)
    monkeypatch.setattr(samples, "write_documents",
                        lambda photos, out, count, harsh=False, seed=None:
                        seeds.append((out.name, harsh, seed)) or count)
    samples.write_samples(tmp_path, tmp_path, 5, documents_seed=samples.HELD_OUT_SEED)
    assert seeds == [("documents", False, 900000), ("documents-harsh", True, 900005)]
    seeds.clear()
    samples.write_samples(tmp_path, tmp_path, 5)
    assert seeds == [("documents", False, None), ("documents-harsh", True, None)]


def test_the_fixed_seeds_stay_the_default_of_each_document_set(monkeypatch, tmp_path):
    import kyc_tools.dev.eval.document_cases as document_cases
    import kyc_tools.dev.synthetic.document as synthetic

    drawn = []
    monkeypatch.setattr(synthetic, "require_fonts", lambda: None)
    monkeypatch.setattr(document_cases, "render_cases",
                        lambda count, portraits, seed, **options:
                        drawn.append((seed, bool(options))) or [])
    photos = {}
    for role in (r for roles in samples.PEOPLE.values() for r in roles):
        photos[role] = tmp_path / f"{role}.png"
        Image.new("RGB", (4, 4)).save(photos[role])
    for harsh in (False, True):
        samples.write_documents(photos, tmp_path / str(harsh), 0, harsh=harsh)
    samples.write_documents(photos, tmp_path / "held", 0, seed=samples.HELD_OUT_SEED)
    assert drawn == [(samples.DOCUMENTS_SEED, False), (samples.HARSH_SEED, True),
                     (samples.HELD_OUT_SEED, False)]
    assert samples.HELD_OUT_SEED > samples.HARSH_SEED > samples.DOCUMENTS_SEED
