"""kyc_tools.dev.eval.metrics: the field's measures on hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from kyc_tools.dev.eval import metrics


def test_cosine_matrix_normalises_rows():
    e = np.array([[3.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    s = metrics.cosine_matrix(e)
    assert s[0, 1] == pytest.approx(0.0)
    assert s[0, 2] == pytest.approx(1 / np.sqrt(2))
    assert np.allclose(np.diag(s), 1.0)


def test_pairs_are_genuine_within_a_person_and_skip_images_without_a_face():
    scores = np.arange(16, dtype=float).reshape(4, 4)
    pairs = metrics.pair_scores(scores, ["a", "a", "b", "a"], [True, True, True, False])
    assert pairs.genuine_index == ((0, 1),)
    assert pairs.impostor_index == ((0, 2), (1, 2))
    assert pairs.genuine.tolist() == [1.0]
    assert pairs.impostor.tolist() == [2.0, 6.0]


def test_fnmr_and_fmr_at_a_threshold():
    genuine = np.array([0.2, 0.5, 0.7, 0.9])
    impostor = np.array([0.1, 0.3, 0.5, 0.05])
    assert metrics.fnmr_at(genuine, 0.5) == 0.25  # 0.2 < 0.5; 0.5 is accepted
    assert metrics.fmr_at(impostor, 0.5) == 0.25  # 0.5 >= 0.5 is a false match
    assert metrics.fnmr_at(np.array([]), 0.5) is None


def test_threshold_for_a_target_fmr_accepts_at_most_that_many_impostors():
    impostor = np.linspace(0.0, 0.99, 100)
    t = metrics.threshold_for_fmr(impostor, 0.05)
    assert metrics.fmr_at(impostor, t) == pytest.approx(0.05)
    assert metrics.fmr_at(impostor, np.nextafter(t, -np.inf)) > 0.05  # the smallest such
    # below the data's resolution: nothing accepted, just above the highest impostor
    t0 = metrics.threshold_for_fmr(impostor, 1e-3)
    assert t0 > impostor.max() and metrics.fmr_at(impostor, t0) == 0.0
    assert metrics.fmr_resolution(100) == 0.01


def test_equal_error_rate_where_the_curves_cross():
    genuine = np.array([0.4, 0.6, 0.8, 0.9])
    impostor = np.array([0.1, 0.2, 0.3, 0.5])
    eer, threshold = metrics.equal_error_rate(genuine, impostor)
    assert eer == pytest.approx(0.25)
    assert metrics.fnmr_at(genuine, threshold) == pytest.approx(0.25)
    separated, _ = metrics.equal_error_rate(np.array([0.8, 0.9]), np.array([0.1, 0.2]))
    assert separated == 0.0


def test_det_curve_runs_from_everything_accepted_to_nothing_accepted():
    thresholds, fmr, fnmr = metrics.det_curve(np.array([0.5, 0.9]), np.array([0.1, 0.6]))
    assert (fmr[0], fnmr[0]) == (1.0, 0.0)
    assert (fmr[-1], fnmr[-1]) == (0.0, 1.0)
    assert np.all(np.diff(thresholds) > 0)
    assert np.all(np.diff(fmr) <= 0) and np.all(np.diff(fnmr) >= 0)


def test_pad_figures_apcer_per_attack_type_and_bpcer():
    outcomes = [("bona_fide", True), ("bona_fide", False), ("bona_fide", True),
                ("bona_fide", True), ("print", False), ("print", True), ("replay", False)]
    f = metrics.pad_figures(outcomes)
    assert f["bpcer"] == 0.25 and f["bona_fide_rejected"] == 1
    assert f["apcer_by_type"]["print"] == {"presentations": 2, "accepted": 1, "apcer": 0.5,
                                           "channel": "presentation"}
    assert f["apcer_by_type"]["replay"]["apcer"] == 0.0
    assert f["apcer_max"] == 0.5 and f["attacks"] == 3
    # an injection attack type is reported apart from the presentation attacks' worst
    g = metrics.pad_figures([*outcomes, ("render", True)], injection=["render"])
    assert g["apcer_max"] == 0.5 and g["apcer_injection_max"] == 1.0
    assert g["apcer_by_type"]["render"]["channel"] == "injection"


def test_fraud_figures_auc_and_shares_above_the_thresholds():
    scores = np.array([0.1, 0.2, 0.3, 0.8, 0.9, 0.4])
    labels = np.array([0, 0, 0, 1, 1, 1])
    f = metrics.fraud_figures(scores, labels, {"review": 0.35, "reject": 0.85})
    assert f["roc_auc"] == pytest.approx(1.0)
    assert f["fraud"]["at_or_above"] == {"review": 1.0, "reject": pytest.approx(1 / 3)}
    assert f["genuine"]["at_or_above"]["review"] == 0.0
    assert metrics.fraud_figures(scores[:3], labels[:3], {})["roc_auc"] is None


def test_percent():
    assert metrics.percent(0.0123) == "1.2%"
    assert metrics.percent(None) == "-"
