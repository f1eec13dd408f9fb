"""kyc.document.mrz_mend: failing check digits mended from the recogniser's own choices."""

from __future__ import annotations

from datetime import date

from kyc.document.mrz import compose_mrz, parse_mrz

TODAY = date(2026, 11, 27)
FIELDS = {"document_code": "P", "issuing_state": "D", "nationality": "D",
          "surname": "KOWALSKI", "given_names": "SOFIA", "document_number": "C25437501",
          "birth_date": "1979-06-26", "sex": "F", "expiry_date": "2031-05-21",
          "optional_data": "90102947"}
PRINTED = compose_mrz("TD3", FIELDS)


def sure(line: str, p: float = 0.99):
    return tuple(((char, p),) for char in line)


def offering(line: str, position: int, written: str, written_p: float,
             other: str, other_p: float):
    """``line`` read with ``written`` at ``position`` (probability ``written_p``) and
    ``other`` offered beside it."""
    read = line[:position] + written + line[position + 1:]
    options = list(sure(read))
    options[position] = ((written, written_p), (other, other_p))
    return read, tuple(options)


def read(visual: list[str], mrz: list[str], options: list) -> dict:
    return parse_mrz(mrz, TODAY, options=options, visual=visual)["mrz"]


def test_a_look_alike_in_the_number_is_mended_where_the_visual_zone_shows_the_number():
    # "C25437501" read "C254375O1": O and 0 are both legal in a document number
    line, options = offering(PRINTED[1], 7, "O", 0.6, "0", 0.35)
    mrz = read(["Document No", "C25437501"], [PRINTED[0], line], [sure(PRINTED[0]), options])
    assert mrz["lines"] == PRINTED and mrz["valid"] is True and mrz["mended"] == 1
    assert parse_mrz([PRINTED[0], line], TODAY)["mrz"]["valid"] is False  # no options


def test_a_number_the_visual_zone_does_not_show_is_not_mended():
    """The MRZ alone altered (4 -> 0 at a 0/O look-alike): O is worth 24, so reading the
    altered 0 as O passes every check; the visual zone still shows the genuine number."""
    genuine = compose_mrz("TD3", {**FIELDS, "document_number": "MW4274461"})
    altered = genuine[1][:2] + "0" + genuine[1][3:]
    options = list(sure(altered))
    options[2] = (("0", 0.61), ("O", 0.37))
    mrz = read(["MW4274461"], [genuine[0], altered], [sure(genuine[0]), tuple(options)])
    assert mrz["valid"] is False and mrz["mended"] == 0
    assert read(["MW0274461"], [genuine[0], altered],
                [sure(genuine[0]), tuple(options)])["mended"] == 1  # shown: a misread


def test_a_date_digit_read_as_its_look_alike_is_mended_by_two_checks():
    birth = PRINTED[1].index("790626")
    line, options = offering(PRINTED[1], birth + 1, "8", 0.55, "9", 0.4)  # 7 9 -> 7 8
    mrz = read([], [PRINTED[0], line], [sure(PRINTED[0]), options])
    assert mrz["lines"] == PRINTED and mrz["valid"] is True and mrz["mended"] == 1


def test_a_check_digit_is_never_chosen_to_pass():
    digit = 9  # the document number's check digit
    wrong = str((int(PRINTED[1][digit]) + 3) % 10)
    line, options = offering(PRINTED[1], digit, wrong, 0.5, PRINTED[1][digit], 0.45)
    mrz = read(["C25437501"], [PRINTED[0], line], [sure(PRINTED[0]), options])
    assert mrz["valid"] is False and mrz["mended"] == 0


def test_an_altered_digit_printed_clearly_is_never_mended():
    altered = PRINTED[1][:5] + "9" + PRINTED[1][6:]  # a digit of the number changed
    mrz = read(["C25437501"], [PRINTED[0], altered], [sure(PRINTED[0]), sure(altered)])
    assert mrz["valid"] is False and mrz["mended"] == 0


def test_a_choice_below_the_floor_or_at_a_sure_character_is_not_taken():
    for written_p, other_p in ((0.6, 0.03), (0.97, 0.2)):
        line, options = offering(PRINTED[1], 7, "O", written_p, "0", other_p)
        mrz = read(["C25437501"], [PRINTED[0], line], [sure(PRINTED[0]), options])
        assert mrz["valid"] is False and mrz["mended"] == 0


def test_a_filler_is_never_written_into_data_nor_data_into_padding():
    """An altered personal number would pass if a digit were written into its padding."""
    line = PRINTED[1]
    padding = line.index("<", 28)  # the first filler after the personal number
    altered = line[:28] + str((int(line[28]) + 1) % 10) + line[29:]
    options = list(sure(altered))
    options[padding] = (("<", 0.6), *((d, 0.3) for d in "0123456789"))
    mrz = read([], [PRINTED[0], altered], [sure(PRINTED[0]), tuple(options)])
    assert mrz["valid"] is False and mrz["mended"] == 0


def test_no_mend_is_made_when_more_than_two_changes_would_be_needed():
    line = PRINTED[1]
    options = list(sure(line))
    for position in (1, 2, 3):  # three digits of the number read wrong, each offered
        digit = line[position]
        wrong = str((int(digit) + 1) % 10)
        line = line[:position] + wrong + line[position + 1:]
        options[position] = ((wrong, 0.5), (digit, 0.4))
    mrz = read([PRINTED[1][:9]], [PRINTED[0], line], [sure(PRINTED[0]), tuple(options)])
    assert mrz["valid"] is False and mrz["mended"] == 0
