"""DocumentReader and the ocr_* glue with the real ONNX models run in-process.

The served path (the document_ocr ensemble, BLS to ocr_rec) is tested against a
real server in tests/integration/test_document_ocr.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import fake_triton
from fake_triton import FakeError, FakeResponse, FakeTensor
from kyc.document.ocr import OcrSettings
from kyc.document.step import PreprocessSettings, prepare_page, rec_alphabet
from kyc.pipeline.modelconfig import Repository
from kyc_testing import SHIPPED_REPOSITORY, require_weights
from kyc_tools.dev.synthetic.document import Degradation, random_identity, render_document


@pytest.fixture(scope="module")
def sessions():
    import onnxruntime as ort

    require_weights()

    def session(model):
        return ort.InferenceSession(str(SHIPPED_REPOSITORY / model / "1" / "model.onnx"),
                                    providers=["CPUExecutionProvider"])

    return session("ocr_det"), session("ocr_rec")


@pytest.fixture(scope="module")
def mrz_sessions():
    """mrz_rec's versions: 1 (PP-OCRv4's MRZ classes) and 2 (trained here)."""
    import onnxruntime as ort

    require_weights()
    return {v: ort.InferenceSession(str(SHIPPED_REPOSITORY / "mrz_rec" / str(v) / "model.onnx"),
                                    providers=["CPUExecutionProvider"]) for v in (1, 2)}


@pytest.fixture
def pb(monkeypatch, sessions, mrz_sessions):
    module = fake_triton.install(monkeypatch)
    for name, rec in (("ocr_rec", sessions[1]), ("mrz_rec", mrz_sessions[2])):
        module.models[name] = lambda inputs, rec=rec: FakeResponse(
            [FakeTensor("PROBS", rec.run(["PROBS"], {"IMAGES": inputs["IMAGES"]})[0])])
    return module


def served(name: str, parameters: dict | None = None):
    return fake_triton.served(SHIPPED_REPOSITORY, name, parameters)


def rows(calls, reader="ocr_rec"):
    """The crops each call of ``reader`` (ocr_rec, or mrz_rec) got, from the calls
    :func:`reader_counting_rows` recorded."""
    mine = [c[1:] for c in calls if c[0] == "mrz"] if reader == "mrz_rec" else \
        [c for c in calls if c[0] != "mrz"]
    return [n for n, _ in mine], [w for _, w in mine]


def rendered(seed: int, kind: str = "td1"):
    rng = np.random.default_rng(seed)
    return render_document(random_identity(rng), kind, None, Degradation(), rng)


def test_one_execute_reads_every_document_with_batched_recogniser_calls(pb, sessions):
    docs = [rendered(1), rendered(2, "td3")]
    pre = served("ocr_preprocess")
    post = served("ocr_postprocess")
    requests = []
    for doc in docs:
        image = FakeTensor("IMAGE", np.array([[doc.jpeg_bytes()]], dtype=np.object_))
        (response,) = pre.execute([{"IMAGE": image}])
        canvas, scale = (response.outputs()[n] for n in ("CANVAS", "SCALE"))
        prob = sessions[0].run(["PROB_MAP"], {"IMAGES": canvas})[0]
        requests.append({"CANVAS": FakeTensor("CANVAS", canvas),
                         "PROB_MAP": FakeTensor("PROB_MAP", prob),
                         "SCALE": FakeTensor("SCALE", scale)})
    responses = post.execute(requests)
    together = [call.inputs[0].as_numpy().shape[0] for call in pb.calls]
    pb.calls.clear()
    for request in requests:
        post.execute([request])
    alone = [call.inputs[0].as_numpy().shape[0] for call in pb.calls]
    # Each crop once (MRZ lines included), at most rec_max_batch per call, and the
    # crops of both documents share calls.
    assert sum(together) == sum(alone) and max(together) <= post.step.reader.settings.rec_max_batch
    assert len(together) < len(alone)
    for doc, response in zip(docs, responses, strict=True):
        document = json.loads(response.outputs()["DOCUMENT"][0, 0])
        assert document["fields"] == doc.fields
        assert document["mrz"]["valid"] is True


def test_preprocess_refuses_bad_bytes_per_request(pb):
    pre = served("ocr_preprocess")
    good = FakeTensor("IMAGE", np.array([[rendered(3).jpeg_bytes()]], dtype=np.object_))
    bad = FakeTensor("IMAGE", np.array([[b"junk"]], dtype=np.object_))
    responses = pre.execute([{"IMAGE": bad}, {"IMAGE": good}])
    assert responses[0].error().code == FakeError.INVALID_ARG
    assert responses[1].outputs()["CANVAS"].shape == (1, 640, 960, 3)  # a page-shaped canvas


def test_postprocess_refuses_inputs_that_do_not_belong_together(pb):
    post = served("ocr_postprocess")
    request = {"CANVAS": FakeTensor("CANVAS", np.zeros((1, 64, 64, 3), np.uint8)),
               "PROB_MAP": FakeTensor("PROB_MAP", np.zeros((1, 32, 32), np.float32)),
               "SCALE": FakeTensor("SCALE", np.ones((1, 2), np.float32))}
    (response,) = post.execute([request])
    assert response.error().code == FakeError.INVALID_ARG


def test_a_failing_recogniser_answers_the_batch_with_internal_errors(pb, sessions):
    pb.models["ocr_rec"] = lambda inputs: FakeResponse(error=FakeError("boom"))
    post = served("ocr_postprocess")
    canvas, scale = prepare_page(rendered(4).jpeg_bytes(), PreprocessSettings())
    prob = sessions[0].run(["PROB_MAP"], {"IMAGES": canvas[None]})[0]
    request = {"CANVAS": FakeTensor("CANVAS", canvas[None]),
               "PROB_MAP": FakeTensor("PROB_MAP", prob), "SCALE": FakeTensor("SCALE", scale[None])}
    (response,) = post.execute([request])
    assert response.error().code == FakeError.INTERNAL and "ocr_rec" in response.error().message()


def test_the_alphabet_is_the_recognisers_dictionary_plus_space():
    require_weights()
    alphabet = rec_alphabet(Repository(SHIPPED_REPOSITORY), "ocr_rec")
    assert len(alphabet) == 96 and alphabet[-1] == " " and "<" in alphabet


def test_a_failure_while_reporting_one_document_answers_only_that_request(pb, sessions,
                                                                          monkeypatch):
    from kyc.document import step as document_model

    post = served("ocr_postprocess")
    canvas, scale = prepare_page(rendered(5).jpeg_bytes(), PreprocessSettings())
    prob = sessions[0].run(["PROB_MAP"], {"IMAGES": canvas[None]})[0]
    request = {"CANVAS": FakeTensor("CANVAS", canvas[None]),
               "PROB_MAP": FakeTensor("PROB_MAP", prob), "SCALE": FakeTensor("SCALE", scale[None])}
    calls = []
    real = document_model.document_report

    def flaky(lines):
        calls.append(1)
        if len(calls) == 1:
            raise KeyError("simulated")
        return real(lines)

    monkeypatch.setattr(document_model, "document_report", flaky)
    first, second = post.execute([request, request])
    assert first.error().code == FakeError.INTERNAL and "KeyError" in first.error().message()
    assert second.error() is None


def reader_counting_rows(sessions, mrz_session=None, **settings):
    """A DocumentReader over the real recogniser that records each call's [N, W] (and
    ``mrz_session``'s calls, as ("mrz", N, W), when it reads the MRZ lines)."""
    from kyc.document.ocr import DocumentReader, OcrSettings

    calls = []

    def recognise(batch):
        calls.append(batch.shape[:3:2])
        return sessions[1].run(["PROBS"], {"IMAGES": batch})[0]

    def read_mrz(batch):
        calls.append(("mrz", *batch.shape[:3:2]))
        return mrz_session.run(["PROBS"], {"IMAGES": batch})[0]

    alphabet = rec_alphabet(Repository(SHIPPED_REPOSITORY), "ocr_rec")
    return DocumentReader(OcrSettings(**settings), alphabet, recognise,
                          read_mrz if mrz_session is not None else None), calls


def mrz_reader(sessions, mrz_session=None):
    """A DocumentReader reading MRZ lines again with ``mrz_session`` (None: from ocr_rec's
    answer), and the widths of the crops each mrz_rec call got."""
    from kyc.document.ocr import DocumentReader

    widths = []

    def read_mrz(batch):
        widths.append(batch.shape[2])
        return mrz_session.run(["PROBS"], {"IMAGES": batch})[0]

    alphabet = rec_alphabet(Repository(SHIPPED_REPOSITORY), "ocr_rec")
    return DocumentReader(OcrSettings(), alphabet,
                          lambda b: sessions[1].run(["PROBS"], {"IMAGES": b})[0],
                          read_mrz if mrz_session else None), widths


@pytest.mark.parametrize("lines", ["all", "decision"])
def test_mrz_rec_version_1_reads_what_the_reader_read_from_ocr_rec(sessions, mrz_sessions,
                                                                   lines):
    """Version 1 is ocr_rec's answer restricted to the MRZ classes: a page's MRZ lines,
    options and confidences are those of the reading without mrz_rec."""
    before, _ = mrz_reader(sessions)
    after, widths = mrz_reader(sessions, mrz_sessions[1])
    for reader in (before, after):
        reader.settings = OcrSettings(lines=lines)
    for seed, kind in ((11, "td1"), (12, "td2"), (13, "td3")):
        pages = [page(rendered(seed, kind).image, sessions)]
        old, new = before.read(pages)[0], after.read(pages)[0]
        assert [(x.text, x.mrz) for x in old] == [(x.text, x.mrz) for x in new]
        for x, y in zip(old, new, strict=True):
            assert x.confidence == pytest.approx(y.confidence, abs=1e-5)
            if x.mrz:
                assert [c for c, _ in x.options()[0]] == [c for c, _ in y.options()[0]]
    assert widths  # the MRZ lines went to mrz_rec


def test_mrz_rec_version_2_reads_look_alikes_in_a_document_number(sessions, mrz_sessions):
    """The page the issue names: a number with O, I, B, D, S and Z read by the trained
    version, at its own stride (a step every 4 pixels), exactly."""
    from kyc.document.mrz import parse_mrz
    from kyc_tools.dev.synthetic.document import Identity

    rng = np.random.default_rng(45)
    identity = random_identity(rng)
    identity = Identity(**{**identity.__dict__, "document_number": "O1BD5SZ0I"})
    doc = render_document(identity, "td3", None, Degradation(), rng)
    reader, widths = mrz_reader(sessions, mrz_sessions[2])
    (lines,) = reader.read([page(doc.image, sessions)])
    mrz = [line.text for line in lines if line.mrz]
    assert tuple(mrz) == doc.mrz_lines and parse_mrz(mrz)["mrz"]["valid"] is True
    assert widths


def page(image, sessions):
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    canvas, scale = prepare_page(buffer.getvalue(), PreprocessSettings())
    prob = sessions[0].run(["PROB_MAP"], {"IMAGES": canvas[None]})[0][0]
    return canvas, prob, scale


def test_every_crop_of_a_document_is_recognised_once_mrz_lines_included(sessions, mrz_sessions):
    from kyc.document.db import text_boxes
    from kyc.document.mrz import parse_mrz

    reader, calls = reader_counting_rows(sessions, mrz_sessions[2])
    doc = rendered(6, "td3")
    canvas, prob, scale = page(doc.image, sessions)
    (lines,) = reader.read([(canvas, prob, scale)])
    # Each crop once by ocr_rec, but the MRZ lines mrz_rec read surely as such (it reads
    # every MRZ-shaped crop first); an MRZ line the detector cut in pieces is read
    # again, whole.
    found = len(text_boxes(prob, reader.settings.db))
    mrz = [line.text for line in lines if line.mrz]
    assert found - len(mrz) <= sum(rows(calls)[0]) <= found
    assert len(mrz) <= sum(rows(calls, "mrz_rec")[0]) <= 2 * len(mrz)
    assert tuple(mrz) == doc.mrz_lines and parse_mrz(mrz)["fields"] == doc.fields


def test_a_long_line_that_is_not_an_mrz_line_is_read_again_at_its_natural_width(
        sessions, mrz_sessions):
    from PIL import Image, ImageDraw

    from kyc_tools.dev.synthetic.document import DEJAVU, _font

    text = "Holder of this document is requested to present it on demand"
    image = Image.new("RGB", (1400, 200), "white")
    ImageDraw.Draw(image).text((20, 80), text, font=_font(DEJAVU, 22), fill="black")
    reader, calls = reader_counting_rows(sessions, mrz_sessions[2])
    (lines,) = reader.read([page(np.asarray(image), sessions)])
    assert [line.mrz for line in lines] == [False]
    assert lines[0].text.replace(" ", "") == text.replace(" ", "")
    squeezed, natural = rows(calls)[1]  # and mrz_rec found no MRZ line in it first
    assert squeezed < 0.7 * natural and rows(calls, "mrz_rec")[1] == [squeezed]


def visual_text(lines):
    return [line.text for line in lines if not line.mrz]


@pytest.mark.parametrize("seed,kind", [(6, "td3"), (7, "td1"), (8, "td3"), (9, "td1")])
def test_reading_for_the_decision_gives_the_full_readings_document_and_verdict(
        sessions, mrz_sessions, seed, kind):
    from kyc.decision.policy import visual_zone_consistent
    from kyc.document.ocr import document_report

    doc = rendered(seed, kind)
    pages = [page(doc.image, sessions)]
    full_reader, full_calls = reader_counting_rows(sessions, mrz_sessions[2])
    reader, calls = reader_counting_rows(sessions, mrz_sessions[2], lines="decision")
    (full,) = full_reader.read(pages)
    (needed,) = reader.read(pages)
    assert document_report(needed) == document_report(full)
    assert document_report(needed)["fields"] == doc.fields
    assert (visual_zone_consistent(document_report(needed), visual_text(needed))
            is visual_zone_consistent(document_report(full), visual_text(full)) is True)
    # fewer lines read, each line read being one of the full reading's
    assert sum(rows(calls)[0]) < sum(rows(full_calls)[0])
    assert {(line.text, line.mrz) for line in needed} <= {(line.text, line.mrz) for line in full}


def test_a_page_whose_visual_zone_does_not_show_the_mrz_is_read_to_its_last_line(
        sessions, mrz_sessions, monkeypatch):
    from kyc.decision.policy import visual_zone_consistent
    from kyc.document.ocr import document_report

    doc = rendered(6, "td3")
    image = np.array(doc.image)
    pages = [page(image, sessions)]
    full_reader, _ = reader_counting_rows(sessions, mrz_sessions[2])
    (full,) = full_reader.read(pages)
    report = document_report(full)
    surname = report["fields"]["surname"]
    # the same page, but the MRZ says another surname: nothing in the visual zone shows it
    other = {**report, "fields": {**report["fields"], "surname": surname + "X"}}
    assert visual_zone_consistent(other, visual_text(full)) is False
    reader, calls = reader_counting_rows(sessions, mrz_sessions[2], lines="decision",
                                         visual_round=3)
    from kyc.document import ocr

    real = ocr.parse_mrz
    monkeypatch.setattr(ocr, "parse_mrz", lambda lines: {**real(lines), "fields": other["fields"]})
    (needed,) = reader.read(pages)
    assert sorted(visual_text(needed)) == sorted(visual_text(full))
    assert len(calls) > 3  # the MRZ, then round after round of three lines


def test_a_page_without_an_mrz_reads_no_visual_line(sessions, mrz_sessions):
    from PIL import Image, ImageDraw

    from kyc_tools.dev.synthetic.document import DEJAVU, _font

    image = Image.new("RGB", (800, 300), "white")
    ImageDraw.Draw(image).text((20, 80), "KOWALSKI 503507574", font=_font(DEJAVU, 28),
                               fill="black")
    reader, calls = reader_counting_rows(sessions, mrz_sessions[2], lines="decision")
    (lines,) = reader.read([page(np.asarray(image), sessions)])
    assert lines == [] and calls == []


def test_line_modes_are_checked():
    from kyc.document.ocr import OcrSettings

    with pytest.raises(ValueError, match="lines must be one of all, decision"):
        OcrSettings(lines="some")


def test_page_shaped_canvases_of_one_request_are_padded_to_one_tensor():
    from PIL import Image

    from kyc.document.step import _stacked

    wide = prepare_page(rendered(1).jpeg_bytes(), PreprocessSettings(short_step=64))[0]
    assert wide.shape[1] == 960 and wide.shape[0] < 960 and wide.shape[0] % 64 == 0
    tall = np.asarray(Image.fromarray(wide).rotate(90, expand=True))
    both = _stacked([wide, tall])
    assert both.shape == (2, 960, 960, 3)
    np.testing.assert_array_equal(both[0, : wide.shape[0], : wide.shape[1]], wide)
    assert both[0, wide.shape[0]:].max() == 0


def test_a_canvas_step_must_keep_the_detectors_stride():
    with pytest.raises(ValueError, match="short_step must be 0 or a multiple of 32"):
        PreprocessSettings(short_step=48)


@pytest.mark.parametrize("lines", ["all", "decision"])
def test_an_mrz_line_the_detector_cut_in_two_is_read_whole_beside_the_other(
        sessions, mrz_sessions, monkeypatch, lines):
    from kyc.document import ocr
    from kyc.document.db import TextBox, text_boxes

    doc = rendered(6, "td3")
    canvas, prob, scale = page(doc.image, sessions)
    boxes = text_boxes(prob, OcrSettings().db)
    first = min((b for b in boxes if b.points[1, 0] - b.points[0, 0] > 400),
                key=lambda b: b.points[0, 1])  # MRZ line 1: the upper of the two long lines
    tl, tr, br, bl = first.points

    def piece(start: float, end: float) -> TextBox:
        return TextBox(np.array([tl + start * (tr - tl), tl + end * (tr - tl),
                                 bl + end * (br - bl), bl + start * (br - bl)], np.float32), 0.9)

    # what the detector does with a long run of fillers: two pieces, the run between lost
    cut = [b for b in boxes if b is not first] + [piece(0.0, 0.4), piece(0.85, 1.0)]
    monkeypatch.setattr(ocr, "text_boxes", lambda *_: cut)
    reader, _ = reader_counting_rows(sessions, mrz_sessions[2], lines=lines)
    (read,) = reader.read([(canvas, prob, scale)])
    mrz = [line for line in read if line.mrz]
    assert [line.text for line in mrz] == list(doc.mrz_lines)  # whole, fillers and all
    assert not any(line.text.startswith("<<") for line in read)  # the end piece is gone


@pytest.mark.parametrize("lines", ["all", "decision"])
def test_an_mrz_line_whose_filler_run_is_read_short_comes_back_whole(
        sessions, mrz_sessions, monkeypatch, lines):
    """A harsh photo (issue 37) of an ID card whose second line ends in 11 fillers and a
    check digit: read greedily from ocr_rec's answer (``mrz_model: ""``) it comes out
    short; read at the page's line length it is the printed line. mrz_rec version 2 (a
    step every 4 pixels) reads it whole greedily."""
    from kyc.document import ocr
    from kyc_tools.dev.synthetic.document import HARSH

    rng = np.random.default_rng(38035)
    doc = render_document(random_identity(rng), "td1", None, HARSH, rng)
    pages = [page(doc.image, sessions)]
    general, _ = reader_counting_rows(sessions, lines=lines)
    made_for_mrz, _ = reader_counting_rows(sessions, mrz_sessions[2], lines=lines)
    for reader in (general, made_for_mrz):
        assert tuple(line.text for line in reader.read(pages)[0] if line.mrz) == doc.mrz_lines
    monkeypatch.setattr(ocr, "ctc_fixed_length", lambda *_: None)  # greedy alone
    greedy = [line.text for line in general.read(pages)[0] if line.mrz]
    assert len(greedy[1]) < len(doc.mrz_lines[1])
    assert tuple(line.text for line in made_for_mrz.read(pages)[0] if line.mrz) == doc.mrz_lines
