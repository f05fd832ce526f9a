"""BanditSpec baselines (Hou et al., ICML 2025): arms are drafters, and the only feedback is the
chosen drafter's committed count Y in [1, K+1] for the round. They never read the
full-information `matured` losses. Each query is a fresh bandit instance, as in the paper.
Only awake arms are played.
"""
import math

import numpy as np

from hedgespec.feedback import RoundFeedback
from hedgespec.learners.experts import awake_mask, sample_index


def check_pool(n: int, k: int) -> None:
    if n < 1 or k < 1:
        raise ValueError(f"need n >= 1 drafters and k >= 1 drafts, got n={n}, k={k}")


def exp3_loss_estimate(chosen: int, committed: int, k: int, probs: np.ndarray) -> np.ndarray:
    """Z_i = 1[i chosen] (K+1-Y) / (K P(i)): unbiased for each arm's loss (K+1-Y_i)/K in [0, 1]."""
    z = np.zeros(len(probs))
    z[chosen] = (k + 1 - committed) / (k * probs[chosen])
    return z


class UCBSpecSelector:
    """Each arm once, then argmax mu_i + (K/2) sqrt(((1+n_i)/n_i^2)(1 + 2 ln(N t^2 sqrt(1+n_i)/delta)))."""

    def __init__(self, n: int, k: int, delta: float = 0.05):
        if not 0.0 < delta < 1.0:
            raise ValueError(f"delta must lie in (0, 1), got {delta}")
        check_pool(n, k)
        self.name = "ucbspec"
        self.n, self.k, self.delta = n, k, delta
        self.begin("")

    def begin(self, prompt_text: str) -> None:
        self.plays = np.zeros(self.n)
        self.total = np.zeros(self.n)
        self.t = 0  # rounds observed in this query

    def choose(self, awake: np.ndarray | None) -> int:
        mask = awake_mask(awake, self.n)
        unplayed = np.flatnonzero(mask & (self.plays == 0))
        if unplayed.size:
            return int(unplayed[0])
        t = self.t + 1
        plays = np.maximum(self.plays, 1)  # every awake arm has been played; this spares asleep ones
        radius = (self.k / 2) * np.sqrt(
            (1 + plays) / plays**2 * (1 + 2 * np.log(self.n * t * t * np.sqrt(1 + plays) / self.delta))
        )
        return int(np.argmax(np.where(mask, self.total / plays + radius, -np.inf)))

    def observe(self, round: RoundFeedback) -> None:
        if round.chosen is not None:
            self.plays[round.chosen] += 1
            self.total[round.chosen] += round.committed
            self.t += 1

    def end(self) -> None:
        """Nothing outlives a query."""


class EXP3SpecSelector:
    """Sample from w ∝ exp(-eta_t sum Z_i), eta_t = sqrt(ln N / (t N)), Z the estimate above."""

    def __init__(self, n: int, k: int, seed: int = 0):
        check_pool(n, k)
        self.name = "exp3spec"
        self.n, self.k = n, k
        self.rng = np.random.default_rng(seed)
        self.begin("")

    def begin(self, prompt_text: str) -> None:
        self.estimated = np.zeros(self.n)
        self.t = 0
        self.probs = np.full(self.n, 1.0 / self.n)  # the distribution of the last choice

    def choose(self, awake: np.ndarray | None) -> int:
        mask = awake_mask(awake, self.n)
        eta = math.sqrt(math.log(self.n) / ((self.t + 1) * self.n))
        x = np.where(mask, -eta * self.estimated, -np.inf)
        w = np.exp(x - x.max())
        self.probs = w / w.sum()
        return sample_index(self.probs, self.rng)

    def observe(self, round: RoundFeedback) -> None:
        if round.chosen is not None:
            self.estimated += exp3_loss_estimate(round.chosen, round.committed, round.k, self.probs)
            self.t += 1

    def end(self) -> None:
        """Nothing outlives a query."""
