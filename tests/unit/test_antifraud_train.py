"""Training the antifraud model: synthetic generator, objective, CSV, ONNX contract, determinism."""

from __future__ import annotations

import csv

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from sklearn.metrics import roc_auc_score

from kyc.decision.features import FEATURES, FEATURES_VERSION
from kyc_export import antifraud
from kyc_export.errors import ConversionError


@pytest.fixture(scope="module")
def trained():
    return antifraud.build(cases=4000)


def scores(model, x):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(["FRAUD_SCORE"], {"FEATURES": x})[0][:, 0]


def test_the_default_model_separates_the_synthetic_kinds(trained):
    x, y, kinds = antifraud.synthetic_cases(3000, seed=99)  # not the training seed
    p = scores(trained.model, x)
    assert roc_auc_score(y, p) > 0.95 and trained.holdout_auc > 0.95
    kinds = np.array(kinds)
    assert np.median(p[kinds == "genuine"]) < 0.3
    for kind in ("impostor", "forged_document", "stolen_token"):
        assert np.median(p[kinds == kind]) > 0.7, kind


def test_the_fit_is_the_optimum_of_the_l2_objective():
    """sum(log loss) + l2 * N / 2 * |w|^2 on standardised features, the intercept not
    shrunk: what the hand-written Newton solver minimised, so the same model."""
    x, y, _ = antifraud.synthetic_cases(2000, seed=5)
    l2 = antifraud.L2
    model = antifraud.train(x, y, l2=l2)
    scaler, classifier = model[0], model[-1]
    x64 = x.astype(np.float64)
    varying = x64.std(axis=0) > 0
    np.testing.assert_allclose(scaler.mean_, x64.mean(axis=0), rtol=1e-9)
    np.testing.assert_allclose(scaler.scale_[varying], x64.std(axis=0)[varying], rtol=1e-9)
    assert (scaler.scale_[~varying] == 1.0).all()
    z = (x64 - scaler.mean_) / scaler.scale_
    w, b = classifier.coef_[0], classifier.intercept_[0]
    p = 1.0 / (1.0 + np.exp(-(z @ w + b)))
    gradient_w = z.T @ (p - y) + l2 * len(y) * w
    gradient_b = (p - y).sum()
    assert np.abs(gradient_w).max() < 1e-6 and abs(gradient_b) < 1e-6
    assert w[FEATURES.index("document_face_found")] == 0.0  # constant in the generator
    stronger = antifraud.train(x, y, l2=10 * l2)[-1].coef_[0]
    assert np.abs(stronger).sum() < np.abs(w).sum()


def test_the_graph_is_what_the_server_and_the_repository_check_expect(trained):
    model = trained.model
    onnx.checker.check_model(model, full_check=True)

    def io(values):
        return [(v.name, v.type.tensor_type.elem_type,
                 [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim])
                for v in values]

    assert io(model.graph.input) == [("FEATURES", TensorProto.FLOAT, ["N", len(FEATURES)])]
    assert io(model.graph.output) == [("FRAUD_SCORE", TensorProto.FLOAT, ["N", 1])]
    assert model.ir_version <= 9  # Triton 24.10's onnxruntime 1.19 reads up to 10
    assert {o.domain: o.version for o in model.opset_import}[""] <= 17
    meta = {p.key: p.value for p in model.metadata_props}
    assert set(meta) == {"kyc.features", "kyc.features_version", "kyc.trained_on",
                         "kyc.metrics", "kyc.trainer"}
    assert tuple(antifraud.features_of(model)) == FEATURES
    assert meta["kyc.features_version"] == FEATURES_VERSION
    assert meta["kyc.trained_on"].startswith(antifraud.GENERATOR_VERSION)
    assert meta["kyc.metrics"] == f"holdout AUC {trained.holdout_auc:.4f} on 800 cases"
    assert meta["kyc.trainer"].startswith(antifraud.TRAINER)
    x, _, _ = antifraud.synthetic_cases(64, seed=7)
    for batch in (1, 32, 64):  # 64: the config's max_batch_size
        p = scores(model, x[:batch])
        assert p.shape == (batch,) and np.isfinite(p).all() and ((p > 0) & (p < 1)).all()


def test_training_is_deterministic(trained):
    again = antifraud.build(cases=4000)
    assert again.model.SerializeToString() == trained.model.SerializeToString()


def test_onnx_scores_equal_the_fitted_model():
    x, y, _ = antifraud.synthetic_cases(500, seed=3)
    fitted = antifraud.train(x, y)
    model = antifraud.to_onnx(fitted, "test", "none")
    np.testing.assert_allclose(scores(model, x), antifraud.predict(fitted, x), atol=1e-6)
    odd = x[:4].copy()  # values the generator never makes, a feature it keeps constant
    odd[:, FEATURES.index("document_face_found")] = 0.0
    odd[0] = 1e6
    assert np.isfinite(scores(model, odd)).all()


def test_an_install_by_another_trainer_or_on_other_data_is_replaced(tmp_path, trained):
    path = tmp_path / "model.onnx"
    onnx.save(trained.model, str(path))
    assert antifraud.installed_matches(path, trained.trained_on)
    assert not antifraud.installed_matches(path, trained.trained_on + "0")
    older = helper.make_model(helper.make_graph([], "antifraud", [], []))  # no kyc.trainer
    for key, value in (("kyc.features", ",".join(FEATURES)), ("kyc.trained_on",
                                                               trained.trained_on)):
        entry = older.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(older, str(path))
    assert not antifraud.installed_matches(path, trained.trained_on)
    path.write_bytes(b"not onnx")
    assert not antifraud.installed_matches(path, trained.trained_on)


def test_a_labelled_csv_trains_a_model_and_a_wrong_one_is_refused(tmp_path):
    x, y, _ = antifraud.synthetic_cases(600, seed=4)
    path = tmp_path / "cases.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([*FEATURES, "label"])
        writer.writerows([[*row, int(label)] for row, label in zip(x, y, strict=True)])
    built = antifraud.build(csv_path=path)
    assert built.cases == 600 and built.trained_on.startswith("csv sha256")
    assert built.holdout_auc > 0.9
    bad = tmp_path / "bad.csv"
    bad.write_text("face_match_score,label\n0.5,1\n")
    with pytest.raises(ConversionError, match="missing"):
        antifraud.read_csv(bad)
    with pytest.raises(ConversionError, match="both genuine"):
        antifraud.train(x, np.zeros(len(x), np.float32))
