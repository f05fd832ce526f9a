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
    """Each arm once, then argmax mu_i + (K/2) sqrt(((1+n_i)/n_i^2)(1 + 2 ln(N t^2 sqrt(1+n_i)/delta))).
    Ties (the unplayed arms first of all) are broken at random, not towards the pool's first drafter."""

    def __init__(self, n: int, k: int, delta: float = 0.05, seed: int = 0):
        if not 0.0 < delta < 1.0:
            raise ValueError(f"delta must lie in (0, 1), got {delta}")
        check_pool(n, k)
        self.name = "ucbspec"
        self.n, self.k, self.delta = n, k, delta
        self.rng = np.random.default_rng(seed)
        self.begin("")

    def begin(self, prompt_text: str) -> None:
        self.plays = np.zeros(self.n)
        self.total = np.zeros(self.n)
        self.t = 0  # rounds observed in this query
        self.explored = 0  # choices in this query that the bonus made: not the best mean among the awake

    def choose(self, awake: np.ndarray | None) -> int:
        mask = awake_mask(awake, self.n)
        unplayed = np.flatnonzero(mask & (self.plays == 0))
        if unplayed.size:
            self.explored += 1
            return int(self.rng.choice(unplayed))
        plays = np.maximum(self.plays, 1)  # every awake arm has been played; this spares asleep ones
        means = np.where(mask, self.total / plays, -np.inf)
        index = np.where(mask, means + self.radius(plays, self.t + 1), -np.inf)
        choice = int(self.rng.choice(np.flatnonzero(index == index.max())))
        self.explored += bool(means[choice] < means.max())
        return choice

    def radius(self, plays: np.ndarray, t: int) -> np.ndarray:
        """method.md's confidence radius: at a query's few dozen rounds it exceeds the whole reward
        range [1, K+1], so the arms are played in turn for the entire query."""
        return (self.k / 2) * np.sqrt((1 + plays) / plays**2 * (1 + 2 * np.log(self.n * t * t * np.sqrt(1 + plays) / self.delta)))

    def observe(self, round: RoundFeedback) -> None:
        if round.chosen is not None:
            self.plays[round.chosen] += 1
            self.total[round.chosen] += round.committed
            self.t += 1

    def end(self) -> None:
        """Nothing outlives a query."""


class UCB1Selector(UCBSpecSelector):
    """UCB1 with the bonus of BanditSpec's public code, sqrt(6 ln t / n_i), on the mean committed
    count: a radius that shrinks within a query's horizon, the tuned baseline beside UCBSpec's."""

    def __init__(self, n: int, k: int, seed: int = 0):
        super().__init__(n, k, seed=seed)
        self.name = "ucb1"

    def radius(self, plays: np.ndarray, t: int) -> np.ndarray:
        return np.sqrt(6 * math.log(t) / plays)


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
        self.last_probability: float | None = None  # that of the arm it drew

    def choose(self, awake: np.ndarray | None) -> int:
        mask = awake_mask(awake, self.n)
        eta = math.sqrt(math.log(self.n) / ((self.t + 1) * self.n))
        x = np.where(mask, -eta * self.estimated, -np.inf)
        w = np.exp(x - x.max())
        self.probs = w / w.sum()
        choice = sample_index(self.probs, self.rng)
        self.last_probability = float(self.probs[choice])
        return choice

    def observe(self, round: RoundFeedback) -> None:
        """A round played by the draw it came from is weighted by that draw's probability (carried
        with the feedback where the choice was played late); a round its draw did not play teaches
        the importance-weighted estimate nothing."""
        if round.chosen is None:
            return
        played = self.probs[round.chosen] if round.played_probability is None else round.played_probability
        if played > 0:
            probs = np.zeros(self.n)
            probs[round.chosen] = played
            self.estimated += exp3_loss_estimate(round.chosen, round.committed, round.k, probs)
        self.t += 1

    def end(self) -> None:
        """Nothing outlives a query."""
