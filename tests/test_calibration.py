"""The per-depth calibration of the scores, against counts worked out by hand."""
import numpy as np
import pytest

from hedgespec.calibration import PRIOR, DepthCalibration
from hedgespec.feedback import DelayedLosses


def test_a_drafter_scored_exactly_keeps_factor_one():
    calibration = DepthCalibration(1, 3)
    for accepted in (0, 1, 3, 2):  # greedy rows that say exactly what the round then did
        gamma = np.array([1.0 if d < accepted else 0.0 for d in range(3)])
        calibration.record(0, gamma, gamma, drafted=3, accepted=accepted)
    assert calibration.factors()[:, 0].tolist() == [1.0, 1.0, 1.0]


def test_scores_too_kind_at_depth_two_are_discounted_there():
    """The scores say every round accepts both drafts; really the second is always rejected."""
    calibration = DepthCalibration(2, 2)
    for _ in range(10):
        calibration.record(1, np.ones(2), np.ones(2), drafted=2, accepted=1)
    factors = calibration.factors()
    real = (0 + PRIOR / 2) / (10 + PRIOR)  # depth 2: reached 10 times, accepted never
    scored = (10 + PRIOR / 2) / (10 + PRIOR)  # the scores: reached and accepted 10 times
    assert factors[:, 1] == pytest.approx([1.0, real / scored])
    assert factors[:, 0].tolist() == [1.0, 1.0]  # the drafter never played keeps its scores


def test_the_window_applies_the_factors_and_learns_from_played_rounds():
    calibration = DepthCalibration(1, 2)
    for _ in range(10):
        calibration.record(0, np.ones(2), np.ones(2), drafted=2, accepted=1)
    c2 = calibration.factors()[1, 0]
    window = DelayedLosses(1, 2, "eal", calibration=calibration)
    window.play(0, drafter=0, drafted=2, accepted=2)
    window.push(np.ones(1), np.ones(1), np.ones(1, bool))
    (matured,) = window.push(np.ones(1), np.ones(1), np.ones(1, bool))
    # acceptance length 1 + 1 + c2, out of K + 1 = 3 (the factors before this round's own record)
    assert matured.losses[0] == pytest.approx(1 - (2 + c2) / 3)
    assert calibration.real[0, 1].tolist() == [11, 1]  # the played round was counted: depth 2 reached and accepted
