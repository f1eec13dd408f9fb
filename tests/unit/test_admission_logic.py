"""kyc.intake.admission: the limit and the tickets, on a plain array and on the shared file."""

from __future__ import annotations

import os
import stat
import time

import numpy as np
import pytest

from kyc.intake.admission import (
    ENTRIES,
    AdmissionSettings,
    AdmissionState,
    SharedAdmission,
    StateFileError,
    Ticket,
    TicketReturns,
    shm_path,
    tickets_in,
)

SETTINGS = AdmissionSettings(target_s=4.0, ttl_s=8.0, initial_limit=4, min_limit=2,
                             max_limit=10, decrease=0.5)


def state(settings: AdmissionSettings = SETTINGS) -> AdmissionState:
    return AdmissionState(np.zeros(AdmissionState.size() // 8), settings)


def test_sequential_customers_are_never_refused_and_do_not_raise_the_limit():
    s = state()
    for k in range(100):
        admitted = s.admit(float(k))
        assert admitted.ticket is not None and admitted.out == 1
        assert s.release(admitted.ticket, k + 0.3)
    s.admit(100.0)
    assert s.limit == 4  # never in use: a quiet day does not open the gate


def test_a_crowd_past_the_limit_is_shed_at_once_and_a_ticket_back_lets_one_in():
    s = state()
    tickets = [s.admit(0.0).ticket for _ in range(4)]
    assert all(tickets)
    shed = s.admit(0.1)
    assert shed.ticket is None and shed.out == 4
    assert s.release(tickets[0], 1.0)
    assert s.admit(1.1).ticket is not None


def test_fast_answers_under_a_full_limit_raise_it_slowly_up_to_the_maximum():
    s = state()
    now = 0.0
    for _ in range(400):
        tickets = [s.admit(now).ticket for _ in range(int(s.limit))]
        now += 1.0
        for t in tickets:
            assert t is not None and s.release(t, now)
    s.admit(now)
    assert s.limit == 10


def test_slow_answers_cut_the_limit_to_what_finishes_inside_the_target_once():
    s = state(AdmissionSettings(target_s=4.0, ttl_s=8.0, initial_limit=8, min_limit=2,
                                max_limit=10, decrease=0.5))
    tickets = [s.admit(0.0).ticket for _ in range(8)]
    for t in tickets:
        s.release(t, 5.0)  # all over the 4 s target, given back together
    s.admit(5.0)
    # Little's law: 8 in flight took 5 s, so 6.4 finish inside 4 s; eight slow answers
    # cut to that estimate once, not eight times
    assert s.limit == pytest.approx(6.4)
    t = s.admit(5.1).ticket
    s.release(t, 9.5)
    s.admit(9.5)  # alone and 4.4 s: under one fits, floored at min_limit
    assert s.limit == 2


def test_a_new_server_starts_small_and_grows_by_one_a_round_trip_while_there_is_room():
    s = state(AdmissionSettings(target_s=4.0, ttl_s=8.0, initial_limit=2, min_limit=2,
                                max_limit=64, decrease=0.8))
    now = 0.0
    for _ in range(6):  # fast answers (0.5 s) with the limit full: room for 8x as many
        first = s.admit(now).ticket  # takes the tickets back first: the limit moves
        tickets = [first] + [s.admit(now).ticket for _ in range(int(s.limit) - 1)]
        now += 0.5
        for t in tickets:
            s.release(t, now)
    first = s.admit(now).ticket
    assert s.limit >= 40  # doubling a round trip, not +1/limit
    grown = int(s.limit)
    tickets = [first] + [s.admit(now).ticket for _ in range(grown - 1)]
    for t in tickets:
        s.release(t, now + 6.0)  # then the crowd is slow: 6 s
    s.admit(now + 6.0)
    assert s.limit == pytest.approx(grown * 4.0 / 6.0, rel=0.05)


def test_an_idle_server_takes_a_request_larger_than_the_limit_and_a_busy_one_does_not():
    s = state()  # limit 4
    big = s.admit(0.0, count=8)
    assert len(big.tickets) == 8 and big.out == 8  # nothing was in flight
    assert s.admit(0.1).ticket is None  # now it is over the limit
    for t in big.tickets:
        s.release(t, 0.5)
    assert len(s.admit(1.0, count=2).tickets) == 2
    assert s.admit(1.1, count=3).tickets == ()  # 2 out + 3 > 4, all or none


def test_a_ticket_whose_customer_failed_midway_expires_and_frees_its_place():
    s = state()
    lost = [s.admit(0.0).ticket for _ in range(4)]
    assert s.admit(1.0).ticket is None
    late = s.admit(8.5)  # past ttl_s: the four are taken back as expired
    assert late.expired == 4 and late.ticket is not None
    assert not s.release(lost[0], 9.0)  # an expired ticket cannot be given back twice


def test_a_reused_slot_refuses_the_old_ticket():
    s = state()
    first = s.admit(0.0).ticket
    assert s.release(first, 0.5)
    second = s.admit(1.0).ticket
    assert second.slot == first.slot and second.generation == first.generation + 1
    assert not s.release(first, 1.5)
    assert not s.release(Ticket(-1, 0), 1.5)


def test_the_decision_side_only_gives_back_and_shares_the_file(tmp_path):
    path = shm_path(4242, "kyc_ensemble", tmp_path)
    intake = SharedAdmission(path, SETTINGS)
    decision = SharedAdmission(path, None)  # kyc_decision: no settings, never admits
    try:
        ticket = intake.admit(0.0).ticket
        assert decision.release(ticket, 0.2)
        with pytest.raises(RuntimeError):
            decision.admit(1.0)
        assert intake.admit(1.0).out == 1  # the ticket given back was taken in
    finally:
        intake.close()
        decision.close()


def test_each_entry_has_its_own_file_and_target_from_its_budget(tmp_path):
    from kyc.budgets import ADMISSION_BUDGET_MS, ADMISSION_TARGET_SHARE

    assert ENTRIES == ("kyc_ensemble", "document_ocr")
    paths = {shm_path(1, entry, tmp_path) for entry in ENTRIES}
    assert len(paths) == 2
    with pytest.raises(ValueError):
        shm_path(1, "face_preprocess", tmp_path)
    for entry in ENTRIES:
        target = AdmissionSettings().for_entry(entry).target_s
        assert target == ADMISSION_BUDGET_MS[entry] / 1000 * ADMISSION_TARGET_SHARE


def test_tickets_travel_as_rows_of_entry_slot_generation():
    tickets = [Ticket(3, 7, "document_ocr"), Ticket(0, 1, "kyc_ensemble")]
    rows = np.stack([t.as_array() for t in tickets])
    assert rows.tolist() == [[1, 3, 7], [0, 0, 1]]
    # no ticket (admission off) and an unknown entry are skipped
    assert tickets_in([rows, np.array([[-1, -1, -1]]), np.array([[9, 1, 1]])]) == tickets


def test_the_last_steps_give_each_ticket_back_to_its_own_entry(tmp_path):
    states = {entry: SharedAdmission(shm_path(5, entry, tmp_path), SETTINGS, entry)
              for entry in ENTRIES}
    returns = TicketReturns(lambda entry: SharedAdmission(shm_path(5, entry, tmp_path), None,
                                                           entry))
    try:
        customer = states["kyc_ensemble"].admit(0.0).ticket
        document = states["document_ocr"].admit(0.0).ticket
        assert (customer.entry, document.entry) == ("kyc_ensemble", "document_ocr")
        assert customer.slot == document.slot == 0  # two states, two slot 0s
        assert returns.give_back([(document.as_array()[None], True)], 0.3) == 1
        assert states["document_ocr"].admit(1.0).out == 1  # given back, then one more
        assert states["kyc_ensemble"].admit(1.0).out == 2  # the customer is still out
    finally:
        returns.close()
        for state in states.values():
            state.close()


# -- the steps: kyc_intake admits, the last steps give back ------------------------------
def intake_request(document: bytes, selfie: bytes | None):
    from kyc.pipeline.step import Request

    return Request({name: np.array([[data]], dtype=np.object_) for name, data in
                    (("DOCUMENT_IMAGE", document), ("SELFIE_IMAGE", selfie))
                    if data is not None})


def admissions(tmp_path, settings, pid: int = 7) -> dict[str, SharedAdmission]:
    return {entry: SharedAdmission(shm_path(pid, entry, tmp_path),
                                   settings.admission_settings(entry), entry)
            for entry in ENTRIES}


@pytest.fixture
def jpeg() -> bytes:
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (64, 48), (120, 90, 60)).save(buffer, "JPEG")
    return buffer.getvalue()


def test_intake_sheds_past_the_limit_with_unavailable_and_bad_images_take_no_ticket(
        tmp_path, jpeg):
    from kyc.decision.step import DecisionStep
    from kyc.intake import IntakeSettings
    from kyc.intake.step import IntakeStep
    from kyc.pipeline.step import Request, RequestError, UnavailableError

    settings = IntakeSettings(admission_initial_limit=2, admission_min_limit=2)
    clock = iter(float(t) for t in range(100))
    intake = IntakeStep(settings, admissions(tmp_path, settings), clock=lambda: next(clock))
    answers = intake.run([intake_request(jpeg, jpeg), intake_request(b"junk", jpeg),
                          intake_request(jpeg, jpeg), intake_request(jpeg, jpeg)])
    admitted, bad, second, shed = answers
    assert isinstance(bad, RequestError)  # answered before admission: no place taken
    assert isinstance(shed, UnavailableError)
    assert "at capacity (2 customers in flight)" in str(shed) and "retry" in str(shed)
    tickets = [admitted["ADMISSION"], second["ADMISSION"]]
    assert [t.shape for t in tickets] == [(1, 3), (1, 3)]
    # a document alone (document_ocr) has its own limit: the customers do not shed it
    document = intake.run([intake_request(jpeg, None)])[0]
    assert set(document) == {"CHECKED_DOCUMENT_IMAGE", "ADMISSION", "SEAL"}
    assert document["ADMISSION"][0, 0] == ENTRIES.index("document_ocr")

    decision = DecisionStep.__new__(DecisionStep)  # only its give-back is under test
    decision.clock = time.time
    decision.admission = TicketReturns(
        lambda entry: SharedAdmission(shm_path(7, entry, tmp_path), None, entry))
    decision.give_back([Request({"ADMISSION": tickets[0], "TEXT_LINES": np.array(
        [[b'[{"text": "P<UTO"}]']], dtype=np.object_)}), Request({})])
    again = intake.run([intake_request(jpeg, jpeg)])[0]
    assert isinstance(again, dict) and again["ADMISSION"][0, 1] == tickets[0][0, 1]


def test_documents_alone_are_shed_past_their_own_limit_and_given_back_by_ocr_postprocess(
        tmp_path, jpeg):
    from kyc.document.step import OcrPostprocessStep
    from kyc.intake import IntakeSettings
    from kyc.intake.step import IntakeStep
    from kyc.pipeline.seal import Sealer
    from kyc.pipeline.step import Request, UnavailableError

    settings = IntakeSettings(admission_initial_limit=2, admission_min_limit=2)
    sealer = Sealer(b"k" * 32)
    intake = IntakeStep(settings, admissions(tmp_path, settings, pid=8), sealer=sealer)
    first, second, shed = intake.run([intake_request(jpeg, None) for _ in range(3)])
    assert isinstance(shed, UnavailableError)
    assert str(shed).startswith("document_ocr is at capacity (2 documents in flight)")
    assert isinstance(intake.run([intake_request(jpeg, jpeg)])[0], dict)  # customers: apart
    (bad,) = intake.run([intake_request(b"junk", None)])  # named as its client sent it
    assert str(bad).startswith("IMAGE: ") and "DOCUMENT_IMAGE" not in str(bad)

    class Reader:  # the page reading is not under test here
        def read(self, pages):
            return [[] for _ in pages]

    returns = TicketReturns(
        lambda entry: SharedAdmission(shm_path(8, entry, tmp_path), None, entry))
    step = OcrPostprocessStep(Reader(), returns, sealer)
    page = {"CANVAS": np.zeros((1, 8, 8, 3), np.uint8), "PROB_MAP": np.zeros((1, 8, 8), np.float32),
            "SCALE": np.ones((1, 2), np.float32)}
    # a ticket without its seal (a direct call naming another request's) is not given back
    step.run([Request({**page, "ADMISSION": second["ADMISSION"]})])
    assert isinstance(intake.run([intake_request(jpeg, None)])[0], UnavailableError)
    step.run([Request({**page, "ADMISSION": first["ADMISSION"], "SEAL": first["SEAL"]})])
    assert isinstance(intake.run([intake_request(jpeg, None)])[0], dict)  # its place is free


def test_tickets_freed_without_proof_of_work_free_their_places_and_teach_nothing():
    """The review's give-back attack on the state: a full limit of tickets handed back
    at once, round after round."""
    fast, unproven = state(), state()
    for s, teaches in ((fast, True), (unproven, False)):
        now = 0.0
        for _ in range(20):
            tickets = [s.admit(now).ticket for _ in range(int(s.limit))]
            now += 0.01
            assert all(s.release(t, now, teaches) for t in tickets)
        assert s.admit(now).ticket is not None  # every place was freed
    assert fast.limit == SETTINGS.max_limit  # real fast answers would open the gate
    assert unproven.limit == SETTINGS.initial_limit  # unproven ones leave it where it was


class _Reader:  # reads a line from a page whose map holds text, none from a blank map
    def read(self, pages):
        from kyc.document.ocr import TextLine

        return [[TextLine("P<UTOBERG<<ANNA", 0.9, [[0, 0], [8, 0], [8, 1], [0, 1]])]
                if page[1].any() else [] for page in pages]


def _documents(tmp_path, pid: int):
    """kyc_intake and ocr_postprocess of document_ocr, sharing one admission state."""
    from kyc.document.step import OcrPostprocessStep
    from kyc.intake import IntakeSettings
    from kyc.intake.step import IntakeStep
    from kyc.pipeline.seal import Sealer

    settings = IntakeSettings(admission_initial_limit=4, admission_min_limit=2)
    sealer = Sealer(b"k" * 32)
    gates = admissions(tmp_path, settings, pid=pid)
    returns = TicketReturns(
        lambda entry: SharedAdmission(shm_path(pid, entry, tmp_path), None, entry))
    return (IntakeStep(settings, gates, sealer=sealer), OcrPostprocessStep(_Reader(), returns,
                                                                           sealer),
            gates["document_ocr"], sealer)


def _page(sealer, image: bytes, text: bool, attested: bool = True) -> dict:
    from kyc.document.step import CANVAS_ATTESTED, CANVAS_KIND
    from kyc.pipeline.seal import digest

    page = {"CANVAS": np.zeros((1, 8, 8, 3), np.uint8),
            "PROB_MAP": np.full((1, 8, 8), 0.9 if text else 0.0, np.float32),
            "SCALE": np.ones((1, 2), np.float32)}
    if attested:
        page["CANVAS_ATTESTATION"] = np.array([[sealer.attest(
            CANVAS_KIND, digest(image), {n: page[n][0] for n in CANVAS_ATTESTED}).encode()]],
            dtype=np.object_)
    return page


@pytest.mark.parametrize(("attested", "text", "teaches"), [
    (False, True, False),  # as the review did it: kyc_intake, then ocr_postprocess at once
    (True, False, False),  # a canvas attested, a map forged in place of ocr_det's: no text
    (True, True, True),  # a page read: a real document's work
], ids=["straight-back", "forged-map", "read"])
def test_only_a_read_of_the_attested_page_teaches_document_ocrs_limit(tmp_path, jpeg,
                                                                      attested, text, teaches):
    from kyc.pipeline.step import Request

    intake, postprocess, gate, sealer = _documents(tmp_path, pid=11)
    for _ in range(30):
        taken = intake.run([intake_request(jpeg, None) for _ in range(int(gate.state.limit))])
        postprocess.run([Request({**_page(sealer, jpeg, text, attested), "ADMISSION":
                                  t["ADMISSION"], "SEAL": t["SEAL"]}) for t in taken])
    assert all(isinstance(a, dict) for a in intake.run([intake_request(jpeg, None)]))
    assert (gate.state.limit > 4) is teaches, gate.state.limit


def test_each_row_of_a_batched_document_request_is_given_back(tmp_path, jpeg):
    from kyc.pipeline.step import Request

    intake, postprocess, gate, sealer = _documents(tmp_path, pid=12)
    two = Request({"DOCUMENT_IMAGE": np.array([[jpeg], [jpeg]], dtype=np.object_)})
    (taken,) = intake.run([two])
    pages = [_page(sealer, jpeg, True) for _ in range(2)]
    batch = {name: np.concatenate([p[name] for p in pages]) for name in pages[0]}
    postprocess.run([Request({**batch, "ADMISSION": taken["ADMISSION"], "SEAL": taken["SEAL"]})])
    assert gate.admit(time.time(), 4).out == 4  # both places came back


def test_without_admission_the_intake_passes_no_ticket(jpeg):
    from kyc.intake import IntakeSettings
    from kyc.intake.step import NO_TICKET, IntakeStep

    (answer,) = IntakeStep(IntakeSettings(admission=False)).run([intake_request(jpeg, jpeg)])
    assert answer["ADMISSION"].tolist() == [list(NO_TICKET)]


def test_the_state_file_is_created_0600_and_shared_by_the_next_opener(tmp_path):
    path = shm_path(4243, "kyc_ensemble", tmp_path)
    first, second = SharedAdmission(path, SETTINGS), SharedAdmission(path, None)
    try:
        assert stat.S_IMODE(path.lstat().st_mode) == 0o600
        assert second.release(first.admit(0.0).ticket, 0.1)
    finally:
        first.close()
        second.close()


def test_a_symlink_placed_at_the_state_path_is_refused_and_not_followed(tmp_path):
    target = tmp_path / "victim"
    target.write_bytes(b"keep")
    path = shm_path(4244, "kyc_ensemble", tmp_path)
    path.symlink_to(target)
    with pytest.raises(StateFileError, match="refused"):
        SharedAdmission(path, SETTINGS)
    assert target.read_bytes() == b"keep"


def _owned_by_nobody(path):
    if os.geteuid() != 0:
        pytest.skip("only root can give a file away")
    path.write_bytes(b"")
    path.chmod(0o600)
    os.chown(path, 65534, 65534)


@pytest.mark.parametrize("place", [lambda p: os.mkfifo(p, 0o600),
                                   lambda p: p.write_bytes(b"") or p.chmod(0o644),
                                   _owned_by_nobody])
def test_a_fifo_a_file_others_may_read_or_one_of_another_user_is_refused(tmp_path, place):
    path = shm_path(4245, "kyc_ensemble", tmp_path)
    place(path)
    with pytest.raises(StateFileError, match="mode 0600"):
        SharedAdmission(path, SETTINGS)
