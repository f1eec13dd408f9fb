"""kyc_tools.dev.eval's glue without a server: the labelled folders, the models a measure loads,
the recommendations and the report (the measures run on a real server in
tests/integration/test_eval.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kyc.decision.features import FEATURES
from kyc_tools.cli import build_parser
from kyc_tools.dev.eval import antifraud, data, documents, faces, liveness, metrics, report
from kyc_tools.dev.eval.server import EvalError, pick_versions, served_closure

REPOSITORY = Path(__file__).resolve().parents[2] / "model_repository"


def touch(path: Path, content: bytes = b"x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def test_each_measure_loads_only_the_models_its_entry_runs_through():
    assert served_closure(REPOSITORY, ["face_preprocess", "face_embedding"]) == [
        "face_detector", "face_embedding", "face_preprocess"]
    assert served_closure(REPOSITORY, ["document_ocr"]) == [
        "document_ocr", "kyc_intake", "mrz_rec", "ocr_det", "ocr_postprocess",
        "ocr_preprocess", "ocr_rec"]
    assert "face_detector" in served_closure(REPOSITORY, ["liveness_sequence"])
    assert served_closure(REPOSITORY, ["antifraud"]) == ["antifraud"]
    with pytest.raises(EvalError, match="no model nope"):
        served_closure(REPOSITORY, ["nope"])


def test_versions_are_those_on_disk_or_those_asked_that_are(tmp_path):
    for v in ("1", "3", "notes"):
        (tmp_path / "m" / v).mkdir(parents=True)
    assert pick_versions(tmp_path, "m", None) == [1, 3]
    assert pick_versions(tmp_path, "m", [3]) == [3]
    with pytest.raises(EvalError, match=r"no version 2 .*on disk: 1, 3"):
        pick_versions(tmp_path, "m", [2])


def test_faces_need_two_people_and_a_genuine_pair(tmp_path):
    touch(tmp_path / "a" / "1.jpg")
    touch(tmp_path / "b" / "1.jpg")
    touch(tmp_path / "b" / "notes.txt")
    with pytest.raises(EvalError, match="genuine pair"):
        data.read_faces(tmp_path)
    touch(tmp_path / "a" / "2.png")
    images = data.read_faces(tmp_path)
    assert [i.name for i in images] == ["a/1.jpg", "a/2.png", "b/1.jpg"]


def test_documents_are_images_with_their_json(tmp_path):
    touch(tmp_path / "d1.jpg")
    (tmp_path / "d1.json").write_text(json.dumps({"mrz": ["A" * 44, "B" * 44],
                                                  "fields": {"surname": "X"}}))
    touch(tmp_path / "orphan.jpg")
    (sample,) = data.read_documents(tmp_path)
    assert sample.kind == "td3" and sample.fields == {"surname": "X"}
    (tmp_path / "d1.json").write_text("{}")
    with pytest.raises(EvalError, match=r"d1\.json"):
        data.read_documents(tmp_path)


def test_liveness_samples_have_a_label_a_challenge_and_frames(tmp_path):
    touch(tmp_path / "s1" / "0001.jpg")
    (tmp_path / "s1" / "label.json").write_text(json.dumps(
        {"label": "attack", "attack": "print", "challenge": ["left"], "fps": 10}))
    (sample,) = data.read_liveness(tmp_path)
    assert (sample.label, sample.challenge, sample.fps, sample.bona_fide) == (
        "print", ("left",), 10.0, False)
    (tmp_path / "s1" / "label.json").write_text(json.dumps({"label": "fake",
                                                            "challenge": []}))
    with pytest.raises(EvalError, match="neither bona_fide nor attack"):
        data.read_liveness(tmp_path)


def test_antifraud_cases_need_every_feature_and_a_0_1_label(tmp_path):
    path = tmp_path / "cases.csv"
    path.write_text(",".join([*FEATURES, "label"]) + "\n" + ",".join(["0.5"] * len(FEATURES))
                    + ",1\n")
    x, y = data.read_cases(path, FEATURES)
    assert x.shape == (1, len(FEATURES)) and y.tolist() == [1]
    path.write_text("label\n1\n")
    with pytest.raises(EvalError, match="missing columns"):
        data.read_cases(path, FEATURES)


def face_version(genuine_mean: float, impostors: int, seed: int = 0) -> dict:
    """The figures of a version whose genuine scores centre on ``genuine_mean``."""
    rng = np.random.default_rng(seed)
    genuine = rng.normal(genuine_mean, 0.1, 1000)
    impostor = rng.normal(0.05, 0.1, impostors)
    return metrics.face_figures(genuine, impostor, 0.363, 1e-4, 0.363)


def test_faces_recommend_the_lower_fnmr_and_a_threshold_only_with_enough_pairs():
    result = {"versions": {"1": face_version(0.5, 13), "2": face_version(0.8, 13)},
              "threshold_parameter": "face_embedding/config.pbtxt: match_threshold"}
    line = faces.recommend(result)
    assert line.startswith("version 2: FNMR ") and "at FMR 0.0001 (version 1: " in line
    assert "keep the threshold (0.363)" in line and "at least 30000" in line
    result["versions"] = {"1": face_version(0.5, 40000), "2": face_version(0.8, 40000)}
    v2 = result["versions"]["2"]
    line = faces.recommend(result)
    # 40,000 pairs show 1e-4 at 95% only with no impostor accepted: just above the highest
    assert v2["threshold_at_fmr_bound"] > v2["impostor_score_max"]
    assert v2["fmr_at_fmr_bound"] == 0.0
    assert (f"threshold to set: {v2['threshold_at_fmr_bound']:.3f}, where these pairs show "
            "FMR <= 0.0001 at 95% confidence") in line
    assert f"review_threshold {v2['threshold_at_review_fmr']:.3f}, where 0.01 of" in line


def test_face_figures_of_a_review_band_count_the_pairs_between_its_edges():
    genuine, impostor = np.array([0.2, 0.35, 0.45, 0.6]), np.array([0.1, 0.3, 0.4, 0.5])
    band = metrics.face_figures(genuine, impostor, 0.47, 1e-4, 0.34)
    assert (band["genuine_in_band"], band["impostor_in_band"]) == (0.5, 0.25)
    assert band["fnmr_below_review"] == 0.25 and band["fnmr"] == 0.75


@pytest.mark.parametrize(("pairs", "target", "accepted"), [
    (29000, 1e-4, None), (31000, 1e-4, 0), (60000, 1e-4, 1), (100000, 1e-4, 4),
    (1000, 1e-2, 4)])
def test_the_threshold_the_data_shows_accepts_as_many_as_the_exact_bound_allows(pairs, target,
                                                                               accepted):
    impostor = np.random.default_rng(1).normal(size=pairs)
    shown = metrics.threshold_for_fmr_bound(impostor, target)
    if accepted is None:
        assert shown is None
    else:
        assert int(np.sum(impostor >= shown)) == accepted


def test_documents_liveness_antifraud_recommend_by_their_field_measure():
    docs = {"model": "ocr_rec", "versions": {
        "1": {"mrz_exact_rate": 0.9, "field_accuracy": 0.95, "seconds_per_document_p50": 0.3},
        "2": {"mrz_exact_rate": 0.95, "field_accuracy": 0.9, "seconds_per_document_p50": 0.5}}}
    assert documents.recommend(docs).startswith("ocr_rec version 2: MRZ exact 95.0%")
    live = {"passive_pad": liveness.NO_PAD, "versions": {
        "1": {"apcer_max": 0.2, "bpcer": 0.0}, "2": {"apcer_max": 0.0, "bpcer": 0.1}}}
    line = liveness.recommend(live)
    assert line.startswith(
        "liveness_sequence version 2: APCER (worst presentation attack type) 0.0%")
    assert line.endswith("No passive anti-spoofing model is installed")
    fraud = {"versions": {"1": {"roc_auc": 0.97, "fraud": {"at_or_above": {}}},
                          "2": {"roc_auc": 0.99, "fraud": {"at_or_above": {}}}}}
    assert antifraud.recommend(fraud).startswith("antifraud version 2: ROC AUC 0.9900")


def test_the_report_keeps_private_arrays_out_of_the_json_and_names_the_plots(tmp_path):
    genuine, impostor = np.array([0.6, 0.7]), np.array([0.1, 0.2, 0.3])
    from kyc_tools.dev.eval.metrics import face_figures

    figures = face_figures(genuine, impostor, 0.363, 1e-3)
    result = {"kind": "faces", "data": "d", "repository": "r", "model": "face_embedding",
              "images": 4, "people": 3, "faces_found": 4, "not_found": [],
              "threshold_parameter": "p",
              "versions": {"1": {**figures, "embedding_dims": 128, "embed_s": 0.1,
                                 "failing_pairs": {"genuine_rejected": [],
                                                   "impostor_accepted": []},
                                 "_genuine": genuine, "_impostor": impostor}},
              "recommendation": "version 1"}
    report.write_json(result, tmp_path / "r.json")
    saved = json.loads((tmp_path / "r.json").read_text())
    assert "_genuine" not in saved["versions"]["1"] and saved["versions"]["1"]["fnmr"] == 0.0
    written = report.write_report(result, tmp_path / "faces.md")
    text = (tmp_path / "faces.md").read_text()
    assert "![faces-det](faces-det.png)" in text and (tmp_path / "faces-det.png").is_file()
    assert "**Recommendation:** version 1." in text
    assert len(written) == 3


def test_the_cli_parses_each_measure():
    parser = build_parser()
    args = parser.parse_args(["eval", "faces", "D", "--versions", "1,2", "--fmr", "1e-4"])
    assert (args.eval_kind, args.versions, args.fmr) == ("faces", [1, 2], 1e-4)
    args = parser.parse_args(["eval", "documents", "D", "--model", "ocr_det"])
    assert args.model == "ocr_det" and args.versions is None
    with pytest.raises(SystemExit):
        parser.parse_args(["eval", "faces", "D", "--versions", "one"])


def _live_sample(name: str, label: str, person: str = "", kinds=()) -> data.LivenessSample:
    return data.LivenessSample(name, label, ("left",), 15.0, (Path(f"{name}/0.jpg"),),
                               person=person, kinds=tuple(kinds))


def test_an_earlier_liveness_run_is_recounted_by_person_and_kind_beside_this_one(tmp_path):
    samples = [_live_sample("a1", "bona_fide", "ann", ["every turn clear"]),
               _live_sample("a2", "bona_fide", "ann"), _live_sample("b1", "bona_fide", "bob"),
               _live_sample("p1", "print_turned"), _live_sample("p2", "print_turned")]
    earlier = tmp_path / "before.json"
    earlier.write_text(json.dumps({"sequences": 5, "versions": {"1": {
        "wrong": [{"sequence": "a1"}, {"sequence": "p2"}],
        "reasons_by_label": {"bona_fide": {"challenge_not_completed": 1}}}}}))
    figures = liveness.before(earlier, samples)
    assert figures["bona_fide_rejected"] == 1 and figures["apcer_by_type"]["print_turned"][
        "accepted"] == 1
    assert figures["bona_fide_by_person"] == {"ann": {"sessions": 2, "refused": 1},
                                              "bob": {"sessions": 1, "refused": 0}}
    assert figures["bona_fide_by_kind"] == {"every turn clear": {"sessions": 1, "refused": 1}}
    assert figures["reasons_by_label"] == {"bona_fide": {"challenge_not_completed": 1}}
    earlier.write_text(json.dumps({"sequences": 4, "versions": {"1": {"wrong": []}}}))
    with pytest.raises(EvalError, match="run on other sequences"):
        liveness.before(earlier, samples)
    earlier.write_text(json.dumps({"versions": {"1": {}, "2": {}}}))
    with pytest.raises(EvalError, match="not the --json of one version"):
        liveness.before(earlier, samples)


class _Moves:
    """Moves 'read' at each amplitude, as liveness_samples.MoveReader.read gives them."""

    def __init__(self, labelled: list[str], clear: list[str]) -> None:
        self.labelled, self.clear = labelled, clear

    def read(self, frames, amplitudes):
        from kyc_tools.dev.eval.liveness_samples import CLEAR_DEG, LABEL_DEG

        assert tuple(amplitudes) == (LABEL_DEG, CLEAR_DEG)
        return [self.labelled, self.clear]


def test_a_window_is_labelled_with_the_turns_it_holds_and_the_other_moves_as_kinds():
    from kyc_tools.dev.eval.liveness_samples import label_window

    assert label_window(_Moves(["up", "down"], []), []) is None  # no turn: not a session
    assert label_window(_Moves(["left", "up", "right", "down"], ["left", "right"]), []) == {
        "challenge": ["left", "right"], "moves_read": ["left", "up", "right", "down"],
        "kinds": ["movement besides the turns", "movement after the last turn",
                  "every turn clear"]}
    assert label_window(_Moves(["right", "left"], ["right"]), [])["kinds"] == []
