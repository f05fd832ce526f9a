"""Per-depth calibration of the scores against what the drafts really did.

The evaluation phase scores a drafter at each position with what it predicts there from the
committed text. A drafter whose k-th draft token depends only on the text before it (prompt lookup,
which re-matches after each drafted token, and the datastore) is scored exactly: under greedy
decoding its scored acceptance length at a round's start is what the round commits (tested). An
EAGLE head is not: from the second token on it drafts from its own predicted feature, while
scoring feeds it the target's true states, so its deeper drafts are scored too kindly.

So the loop reports every round it played (drafter, drafts, accepted) and, when that round's
window of scores is complete, both are counted on the same round start, per drafter and depth d:
the scores' chance that depth d was reached and accepted, against whether it really was. The
factor c_d = (real acceptance rate at d) / (scored rate at d), each rate with a few pseudo-counts
at one half so that a drafter never played keeps c = 1, then multiplies the scores of depth d
(hedgespec.feedback). For the exactly scored kinds the two counts agree round by round, so c = 1.
One calibration lives as long as the engine or the serving replica.
"""
import threading

import numpy as np

PRIOR = 4.0  # pseudo-counts per rate, at rate 1/2
BOUNDS = (0.0, 2.0)  # a factor stays within these


class DepthCalibration:
    def __init__(self, n_drafters: int, k: int):
        self.n, self.k = n_drafters, k
        # [drafter, depth, (reached, accepted)]: expected under the scores, counted in the rounds
        self.scored = np.zeros((n_drafters, k, 2))
        self.real = np.zeros((n_drafters, k, 2))
        self.lock = threading.Lock()
        self.latest: np.ndarray | None = None  # the factors, until the next record

    def record(self, drafter: int, gamma: np.ndarray, carry: np.ndarray, drafted: int, accepted: int) -> None:
        """One played round: the drafter's scores over the window from its start (gamma, and the
        estimator's carry: the ratio, or gamma for the paper's), its drafts and accepted drafts."""
        depths = min(drafted, self.k, len(gamma))
        reach = np.cumprod(np.concatenate([[1.0], carry[:depths - 1]]))
        with self.lock:
            self.scored[drafter, :depths, 0] += reach
            self.scored[drafter, :depths, 1] += reach * gamma[:depths]
            reached = np.arange(depths) <= accepted  # depth d (from 0) was drafted after d accepted ones
            self.real[drafter, :depths, 0] += reached
            self.real[drafter, :depths, 1] += np.arange(depths) < accepted
            self.latest = None

    def factors(self) -> np.ndarray:
        """[K, N]: the factor of each depth (rows) for each drafter (columns)."""
        with self.lock:
            if self.latest is None:
                rate = lambda counts: (counts[..., 1] + PRIOR / 2) / (counts[..., 0] + PRIOR)  # noqa: E731
                self.latest = np.clip(rate(self.real) / rate(self.scored), *BOUNDS).T
            return self.latest

    def snapshot(self, names: list[str]) -> dict:
        """Per drafter: rounds counted and the factor per depth (benchmarks, /stats)."""
        factors = self.factors()
        return {name: {"rounds": float(self.real[j, 0, 0]), "factors": factors[:, j].round(3).tolist()}
                for j, name in enumerate(names)}
