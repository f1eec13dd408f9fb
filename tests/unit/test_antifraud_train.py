"""Training the antifraud model: synthetic generator, CSV, ONNX, determinism."""

from __future__ import annotations

import csv

import numpy as np
import onnxruntime as ort
import pytest

from kyc.decision.features import FEATURES
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
    assert antifraud.auc(p, y) > 0.95 and trained.holdout_auc > 0.95
    kinds = np.array(kinds)
    assert np.median(p[kinds == "genuine"]) < 0.3
    for kind in ("impostor", "forged_document", "stolen_token"):
        assert np.median(p[kinds == kind]) > 0.7, kind


def test_training_is_deterministic_and_the_metadata_names_the_features(trained):
    again = antifraud.build(cases=4000)
    assert again.model.SerializeToString() == trained.model.SerializeToString()
    assert tuple(antifraud.features_of(trained.model)) == FEATURES
    meta = {p.key: p.value for p in trained.model.metadata_props}
    assert meta["kyc.trained_on"].startswith(antifraud.GENERATOR_VERSION)


def test_onnx_scores_equal_the_fitted_model():
    x, y, _ = antifraud.synthetic_cases(500, seed=3)
    fitted = antifraud.train(x, y)
    model = antifraud.to_onnx(fitted, "test", "none")
    np.testing.assert_allclose(scores(model, x), fitted.predict(x), atol=1e-5)


def test_a_labelled_csv_trains_a_model_and_a_wrong_one_is_refused(tmp_path):
    x, y, _ = antifraud.synthetic_cases(600, seed=4)
    path = tmp_path / "cases.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([*FEATURES, "label"])
        writer.writerows([[*row, int(label)] for row, label in zip(x, y, strict=True)])
    built = antifraud.build(csv_path=path)
    assert built.cases == 600 and built.trained_on.startswith("csv sha256")
    bad = tmp_path / "bad.csv"
    bad.write_text("face_match_score,label\n0.5,1\n")
    with pytest.raises(ConversionError, match="missing"):
        antifraud.read_csv(bad)


def test_auc_is_the_rank_statistic():
    assert antifraud.auc(np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1])) == 0.75
    assert antifraud.auc(np.array([0.5, 0.5]), np.array([0, 1])) == 0.5
