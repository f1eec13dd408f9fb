"""kyc_decision's answer as clients read it: each request's own faces, the outputs'
names and types, REPORT's fields, the liveness token's evidence, and what a ticket
given back says. (The mutants of kyc/decision/step.py that `make mutate` found no test
for: docs/mutation-testing.md.)"""

from __future__ import annotations

import json
import secrets

import numpy as np
import pytest

from decision_cases import (
    IMAGES,
    NOW,
    TicketsBack,
    decision_step,
    embed,
    live_token,
    request,
    text,
)
from kyc.decision.features import FEATURES
from kyc.keys import KEY_BYTES
from kyc.liveness.token import LivenessClaims, TokenSealer

KEY = secrets.token_bytes(KEY_BYTES)


def _face(value: int) -> np.ndarray:
    """A face the stand-in embedding maps to unit vector ``value % 4``."""
    return np.full((1, 112, 112, 3), value, np.uint8)


def _report(answer) -> dict:
    return json.loads(answer["REPORT"][0, 0])


def test_each_requests_faces_are_matched_with_each_other_not_with_another_requests():
    same = request(DOC_FACE=_face(1), SELFIE_FACE=_face(1))
    other = request(DOC_FACE=_face(2), SELFIE_FACE=_face(3))
    third = request(DOC_FACE=_face(0), SELFIE_FACE=_face(0))
    answers = decision_step(KEY).run([same, other, third])
    assert [a["FACE_MATCH_SCORE"][0, 0] for a in answers] == [1.0, 0.0, 1.0]
    assert [_report(a)["decision"] for a in answers] == ["review", "reject", "review"]


@pytest.mark.parametrize("missing", ["DOC_FACE_FOUND", "SELFIE_FACE_FOUND"])
def test_a_face_not_found_gives_a_match_score_of_minus_one(missing):
    answer, = decision_step(KEY).run([request(**{missing: np.array([[False]])})])
    assert answer["FACE_MATCH_SCORE"][0, 0] == -1.0
    assert _report(answer)["face"]["match_score"] == -1.0


def test_the_outputs_have_the_contracts_names_types_and_shapes():
    answer, = decision_step(KEY).run([request()])
    assert {name: (a.dtype, a.shape) for name, a in answer.items()} == {
        "DECISION": (np.object_, (1, 1)), "FACE_MATCH_SCORE": (np.float32, (1, 1)),
        "LIVENESS_SCORE": (np.float32, (1, 1)), "FRAUD_SCORE": (np.float32, (1, 1)),
        "REPORT": (np.object_, (1, 1))}
    assert answer["DECISION"][0, 0] == b"review"


def _leaning(faces: np.ndarray) -> np.ndarray:
    """Unit embeddings at an angle of ``red`` hundredths of a radian: cosines with many
    decimals (the live token's stand-in face, all zeros, is at angle 0)."""
    angle = faces[:, 0, 0, 0].astype(np.float64) / 100
    return np.stack([np.cos(angle), np.sin(angle)], axis=1).astype(np.float32)


@pytest.mark.parametrize("extra", [-1, 1])
def test_an_antifraud_model_answering_another_count_of_scores_fails_the_batch(extra):
    """No score can then be paired with its customer: the batch fails, none is decided."""
    step = decision_step(KEY, score=lambda f: np.zeros((len(f) + extra, 1), np.float32))
    with pytest.raises(ValueError, match="zip"):
        step.run([request(), request()])


def test_the_report_carries_the_fields_clients_read_its_figures_to_four_places():
    step = decision_step(KEY, score=lambda f: np.full((len(f), 1), 0.123456789, np.float32),
                         embedder=_leaning)
    token = live_token(KEY, "A-1", score=0.97123456)
    token_face = np.zeros((1, 112, 112, 3), np.uint8)  # the live token's stand-in face
    report = _report(step.run([request(application="A-1", LIVENESS_TOKEN=token,
                                       DOC_FACE=_face(37), SELFIE_FACE=token_face)])[0])
    assert report["face"]["match_score"] == round(float(np.cos(np.float32(0.37))), 4)
    assert report["liveness"]["score"] == 0.9712
    assert report["fraud_features"]["liveness_score"] == 0.9712
    assert set(report) == {"decision", "reasons", "face", "liveness", "document",
                           "fraud_score", "fraud_features", "policy", "application",
                           "issued_at", "images", "liveness_token", "models"}
    assert set(report["face"]) == {"match_score", "match_threshold", "review_threshold",
                                   "document_face_found",
                                   "selfie_face_found", "selfie_faces", "quality"}
    assert report["face"]["quality"] == {"selfie": {}, "document_face": {}}
    assert {"age", "visual_zone", "visual_zone_consistent"} <= set(report["document"])
    assert report["policy"] == {"min_age": 18, "fraud_review_threshold": 0.7,
                                "fraud_reject_threshold": 0.95}
    assert report["fraud_score"] == 0.1235
    assert list(report["fraud_features"]) == list(FEATURES)
    assert all(round(v, 4) == v for v in report["fraud_features"].values())
    assert report["images"] == {"document": _digest(IMAGES["DOC_"]),
                                "selfie": _digest(IMAGES["SELFIE_"])}


def _digest(image: bytes) -> str:
    from kyc.verdict import image_digest

    return image_digest(image)


def _sealed_by(key: bytes, **changes) -> np.ndarray:
    claims = LivenessClaims("s1", True, 0.97, NOW, NOW + 120, ("left",), None,
                            {"passive_pad": True}, None, secrets.token_hex(16))
    from dataclasses import replace

    return np.array([[TokenSealer(key).seal(replace(claims, **changes))]], dtype=np.object_)


@pytest.mark.parametrize(("token", "reason", "problem"), [
    (_sealed_by(secrets.token_bytes(KEY_BYTES)), "liveness_token_invalid", "another token key"),
    (np.array([[b"kyc2.forged"]], dtype=np.object_), "liveness_token_invalid", "key id"),
    # expired by the step's own clock (NOW + 1), not by this machine's
    (_sealed_by(KEY, issued_at=NOW - 200, expires_at=NOW - 80), "liveness_token_expired",
     "expired"),
], ids=["another-key", "forged", "expired"])
def test_a_refused_token_says_why_and_gives_no_liveness_score(token, reason, problem):
    answer, = decision_step(KEY).run([request(LIVENESS_TOKEN=token)])
    report = _report(answer)
    assert report["reasons"] == [reason] and problem in report["liveness"]["problem"]
    assert report["liveness"]["provided"] is True and report["liveness"]["valid"] is False
    assert answer["LIVENESS_SCORE"][0, 0] == -1.0
    assert report["fraud_features"]["liveness_score"] == -1.0


def test_a_valid_tokens_score_is_the_liveness_score_and_no_token_is_said_so():
    live, = decision_step(KEY).run([request(LIVENESS_TOKEN=live_token(KEY, None, score=0.97))])
    assert live["LIVENESS_SCORE"][0, 0] == pytest.approx(0.97)
    features = _report(live)["fraud_features"]
    assert features["liveness_score"] == 0.97 and features["liveness_match"] == 1.0
    none, = decision_step(KEY).run([request()])
    assert _report(none)["liveness"]["provided"] is False
    assert _report(none)["liveness_token"] is None


def test_a_token_without_a_face_feeds_antifraud_a_liveness_match_of_minus_one():
    answer, = decision_step(KEY).run([request(LIVENESS_TOKEN=live_token(KEY, None, face=False))])
    features = _report(answer)["fraud_features"]
    assert features["liveness_match"] == -1.0 and features["liveness_live"] == 1.0


def test_an_unbound_token_spent_for_one_application_is_refused_for_another():
    """The holder of a spent token names the application too: the same images sent for
    another application are another verification."""
    step, token = decision_step(KEY), live_token(KEY, None)
    first = _report(step.run([request(application="A-1", LIVENESS_TOKEN=token)])[0])
    assert first["decision"] == "approve", first
    again = _report(step.run([request(application="A-2", LIVENESS_TOKEN=token)])[0])
    assert again["reasons"] == ["liveness_token_reused"]
    assert again["liveness"]["problem"] == "token was spent by an earlier verification"


def test_a_ticket_comes_back_at_the_steps_time_teaching_only_what_read_text():
    back = TicketsBack()
    step = decision_step(KEY, admission=back, clock=NOW + 7)
    step.run([request(), request(TEXT_LINES=np.array([[b"{not json"]], dtype=np.object_)),
              request(TEXT_LINES=text([]))])
    assert [teaches for _, teaches in back.rows] == [True, False, False]
    assert back.times == [NOW + 7]


def test_kyc_decision_built_as_its_stub_builds_it_reads_its_config_and_the_token_key(
        monkeypatch, tmp_path):
    import base64

    import fake_triton
    from kyc.decision import ledger
    from kyc.decision.ledger import FolderLedger
    from kyc.pipeline.triton import is_ready
    from kyc.verdict import VerdictSigner
    from kyc_testing import SHIPPED_REPOSITORY

    monkeypatch.setattr(ledger, "SHM_DIR", tmp_path)
    monkeypatch.delenv("KYC_TOKEN_LEDGER", raising=False)
    monkeypatch.setenv("KYC_TOKEN_KEY", base64.b64encode(KEY).decode())
    fake_triton.install(monkeypatch)
    step = fake_triton.served(SHIPPED_REPOSITORY, "kyc_decision").step
    threshold = SHIPPED_REPOSITORY / "face_embedding" / "config.pbtxt"
    text = threshold.read_text()
    assert f'"match_threshold" value: {{ string_value: "{step.faces.match}"' in text
    assert f'"review_threshold" value: {{ string_value: "{step.faces.review}"' in text
    assert step.settings.antifraud_model == "antifraud" and step.is_ready is is_ready
    assert step.signer.key_id == VerdictSigner(KEY).key_id
    assert isinstance(step.ledger, FolderLedger) and step.ledger.folder.parent == tmp_path
    assert step.admission is not None and step.repository.root == SHIPPED_REPOSITORY
    token = live_token(KEY, None)
    assert step.sealer.open(token[0, 0], NOW).token_id  # the token key is the one given


def _context(environ: dict, calls: list):
    """kyc_decision's context as the in-process runtime gives it: the shipped config, BLS
    calls answered here (the stand-in embedding, a fraud score of 0.25)."""
    from kyc.pipeline.modelconfig import Repository, config_dict, load_config
    from kyc.pipeline.step import StepContext
    from kyc_testing import SHIPPED_REPOSITORY

    def infer(model, inputs, outputs):
        calls.append((model, sorted(inputs), list(outputs)))
        if model == "face_embedding":
            return {"EMBEDDING": embed(inputs["FACE"])}
        return {"FRAUD_SCORE": np.full((len(inputs["FEATURES"]), 1), 0.25, np.float32)}

    config = config_dict(load_config(SHIPPED_REPOSITORY / "kyc_decision" / "config.pbtxt"))
    return StepContext("kyc_decision", "1", config, Repository(SHIPPED_REPOSITORY), infer,
                       in_server=False, environ=environ)


def test_kyc_decision_calls_its_models_by_their_tensors_and_checks_custody_with_its_key(
        monkeypatch):
    """Built from a context whose environment is not the process's: the token key, the
    custody key derived from it and the ledger come from the context."""
    import base64

    from kyc.decision.ledger import MemoryLedger
    from kyc.decision.step import DecisionStep
    from kyc.keys import derive_key
    from kyc.pipeline.seal import SEAL_LABEL, Sealer

    monkeypatch.setenv("KYC_TOKEN_LEDGER", "redis://127.0.0.1:1/0")  # not the context's
    monkeypatch.delenv("KYC_TOKEN_KEY", raising=False)
    calls: list = []
    step = DecisionStep.from_context(_context({"KYC_TOKEN_KEY": base64.b64encode(KEY).decode()},
                                              calls))
    assert isinstance(step.ledger, MemoryLedger) and step.admission is None
    step.clock = lambda: NOW + 1  # the time the request was sealed at, and a second
    custody = Sealer(derive_key(KEY, SEAL_LABEL))
    answer, = step.run([request(sealer=custody, LIVENESS_TOKEN=live_token(KEY, None))])
    assert not isinstance(answer, Exception), answer
    assert calls == [("face_embedding", ["FACE"], ["EMBEDDING"]),
                     ("antifraud", ["FEATURES"], ["FRAUD_SCORE"])]
    assert answer["FRAUD_SCORE"][0, 0] == 0.25 and answer["FACE_MATCH_SCORE"][0, 0] == 1.0
    assert _report(answer)["liveness"]["valid"] is True


def test_an_antifraud_model_trained_on_other_features_is_refused_at_start(tmp_path):
    import onnx

    from kyc.decision.step import FeatureMismatchError, check_antifraud_features
    from kyc.pipeline.modelconfig import Repository
    from kyc_testing import SHIPPED_REPOSITORY

    shipped = onnx.load(str(SHIPPED_REPOSITORY / "antifraud" / "1" / "model.onnx"))
    (tmp_path / "antifraud" / "1").mkdir(parents=True)
    config = (SHIPPED_REPOSITORY / "antifraud" / "config.pbtxt").read_text()
    (tmp_path / "antifraud" / "config.pbtxt").write_text(config)
    check_antifraud_features(Repository(SHIPPED_REPOSITORY), "antifraud")  # the shipped one
    for prop in shipped.metadata_props:
        if prop.key == "kyc.features":
            prop.value = ",".join(reversed(prop.value.split(",")))
    onnx.save(shipped, str(tmp_path / "antifraud" / "1" / "model.onnx"))
    with pytest.raises(FeatureMismatchError, match="retrain it") as refused:
        check_antifraud_features(Repository(tmp_path), "antifraud")
    version = {p.key: p.value for p in shipped.metadata_props}["kyc.features_version"]
    assert f"trained on features {version}," in str(refused.value)
    del shipped.metadata_props[:]  # a model that names no features at all
    onnx.save(shipped, str(tmp_path / "antifraud" / "1" / "model.onnx"))
    with pytest.raises(FeatureMismatchError, match="features of unknown version, "):
        check_antifraud_features(Repository(tmp_path), "antifraud")
    (tmp_path / "unversioned").mkdir()
    (tmp_path / "unversioned" / "config.pbtxt").write_text(config)
    with pytest.raises(FeatureMismatchError, match="no version"):
        check_antifraud_features(Repository(tmp_path), "unversioned")
