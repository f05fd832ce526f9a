"""Full-information base learners over N experts (drafters), all with sleeping experts and a prior.

Shared interface: `n`; `weights(awake=None)`, a probability vector that is zero on sleeping
experts; `update(losses, awake=None)`, a loss vector in [0, 1]. Each learner keeps the regret
R_i = sum_t (<w_t, l_t> - l_{t,i}) against the weights w_t it would have played over that round's
awake set; a sleeping expert's state is left as it is (Freund, Schapire, Singer, Warmuth 1997).

The prior pi (uniform by default) is where a warm start enters: each potential below is a
pi-weighted mixture, so the regret to expert i costs ln(1/pi_i) instead of ln N.
"""
import math
from abc import ABC, abstractmethod

import numpy as np


def awake_mask(awake: np.ndarray | None, n: int, to_play: bool = True) -> np.ndarray:
    """The awake experts as a bool vector (None: all). A choice needs one of them; an update that
    finds nobody awake simply compares nobody."""
    if awake is None:
        return np.ones(n, dtype=bool)
    mask = np.asarray(awake, dtype=bool)
    if mask.shape != (n,):
        raise ValueError(f"awake mask has shape {mask.shape}, expected ({n},)")
    if to_play and not mask.any():
        raise ValueError("no expert is awake")
    return mask


def sample_index(weights: np.ndarray, rng: np.random.Generator) -> int:
    """An index drawn from a probability vector; zero-weight entries are never drawn."""
    cumulative = np.cumsum(weights)
    i = int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))
    return min(i, int(np.flatnonzero(weights)[-1]))


def normalhedge_scale(regret: np.ndarray, prior: np.ndarray | None = None, guess: float | None = None) -> float:
    """NormalHedge's c > 0 solving sum_i pi_i exp([R_i]_+^2 / (2c)) = e (uniform pi: the mean).

    With M = max [R_i]_+, s_i = ([R_i]_+ / M)^2 and v = M^2 / (2c), the equation is
    g(v) = v + ln sum_i pi_i exp(v (s_i - 1)) - 1 = 0, the root lies in [1, 1 + ln(1/pi_top)]
    (uniform: c in [M^2/(2(1+ln N)), M^2/2]), and g is convex and increasing there. So Newton,
    from any start in that bracket, lands at or above the root after one step and then descends
    monotonically and quadratically: a few steps replace bisection's thirty, fewer still from the
    previous call's c (`guess`, regrets move little between updates). The exponents v (s_i - 1)
    are <= 0, so nothing overflows for large R.
    """
    positive = np.maximum(regret, 0.0)
    pi = np.full(len(regret), 1.0 / len(regret)) if prior is None else prior
    top = int(positive.argmax())
    m = positive[top]
    if m <= 0:
        raise ValueError("NormalHedge's scale needs a positive regret")
    s = (positive / m) ** 2
    shifted = s - 1.0
    upper = 1.0 - math.log(pi[top])
    v = upper if guess is None else min(max(m * m / (2.0 * guess), 1.0), upper)
    for _ in range(100):
        terms = pi * np.exp(v * shifted)
        total = terms.sum()
        # Newton step g / g', with g' = sum pi s e^{v(s-1)} / total >= pi_top / total > 0.
        step = (v + math.log(total) - 1.0) * total / (terms @ s)
        v = min(v - step, upper)
        if abs(step) <= 1e-12 * v:
            break
    return m * m / (2.0 * v)


def ada_log_weight(regret: np.ndarray, abs_regret: np.ndarray) -> np.ndarray:
    """ln w(R, C) of AdaNormalHedge, w = (Phi(R+1, C+1) - Phi(R-1, C+1)) / 2,
    Phi(R, C) = exp([R]_+^2 / (3C)); -inf where w = 0 (R <= -1).

    As e^hi (1 - e^{lo-hi}) / 2 it stays finite for any R where the plain form overflows.
    """
    denominator = 3.0 * (abs_regret + 1.0)
    hi = np.maximum(regret + 1.0, 0.0) ** 2 / denominator
    lo = np.maximum(regret - 1.0, 0.0) ** 2 / denominator
    with np.errstate(divide="ignore"):
        return hi + np.log(-np.expm1(lo - hi)) - math.log(2.0)


def _normalized(x: np.ndarray) -> np.ndarray:
    return x / x.sum()


class _RegretLearner(ABC):
    def __init__(self, n: int, prior: np.ndarray | None = None):
        if n < 1:
            raise ValueError(f"need at least one expert, got n={n}")
        self.n = n
        self.prior = np.full(n, 1.0 / n) if prior is None else np.asarray(prior, dtype=float)
        if self.prior.shape != (n,) or not (self.prior > 0).all():
            raise ValueError(f"prior must be {n} positive numbers")
        self.prior = _normalized(self.prior)
        self.log_prior = np.log(self.prior)
        self.regret = np.zeros(n)

    def _awake_prior(self, mask: np.ndarray) -> np.ndarray:
        return _normalized(np.where(mask, self.prior, 0.0))

    def _softmax_awake(self, logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """pi_i e^{logits_i} over the awake set; the prior alone if every awake weight is 0."""
        x = np.where(mask, logits + self.log_prior, -np.inf)
        top = x.max()
        if top == -np.inf:
            return self._awake_prior(mask)
        return _normalized(np.exp(x - top))

    @abstractmethod
    def weights(self, awake: np.ndarray | None = None) -> np.ndarray:
        """The probability vector to play over the awake experts."""

    def update(self, losses: np.ndarray, awake: np.ndarray | None = None) -> np.ndarray:
        """Charge one loss vector to the awake experts; returns their instantaneous regrets."""
        mask = awake_mask(awake, self.n, to_play=False)
        if not mask.any():
            return np.zeros(self.n)
        losses = np.asarray(losses, dtype=float)
        r = np.where(mask, self.weights(mask) @ losses - losses, 0.0)
        self.regret += r
        return r


class NormalHedge(_RegretLearner):
    """Chaudhuri, Freund & Hsu (2009): parameter-free, w_i ∝ pi_i ([R_i]_+/c) exp([R_i]_+^2 / (2c))."""

    def __init__(self, n: int, prior: np.ndarray | None = None):
        super().__init__(n, prior)
        self.scale: float | None = None  # the last c solved for: the next solve starts from it

    def weights(self, awake: np.ndarray | None = None) -> np.ndarray:
        mask = awake_mask(awake, self.n)
        pi = self._awake_prior(mask)
        positive = np.where(mask, np.maximum(self.regret, 0.0), 0.0)
        m = positive.max()
        if m <= 0:
            return pi
        self.scale = normalhedge_scale(positive, pi, self.scale)
        return _normalized(pi * positive * np.exp((positive**2 - m * m) / (2.0 * self.scale)))


class Hedge(_RegretLearner):
    """Exponential weights with the anytime rate eta_t = sqrt(8 ln N / t).

    Written on regrets, w ∝ pi_i exp(eta R_i): with every expert awake this is exp(-eta L_i)
    (the <w, l> terms are common to all i), and with sleepers it compares only the awake ones.
    """

    def __init__(self, n: int, prior: np.ndarray | None = None):
        super().__init__(n, prior)
        self.t = 0

    def weights(self, awake: np.ndarray | None = None) -> np.ndarray:
        mask = awake_mask(awake, self.n)
        eta = math.sqrt(8.0 * math.log(self.n) / self.t) if self.t else 0.0
        return self._softmax_awake(eta * self.regret, mask)

    def update(self, losses: np.ndarray, awake: np.ndarray | None = None) -> np.ndarray:
        r = super().update(losses, awake)
        self.t += 1
        return r


class AdaNormalHedge(_RegretLearner):
    """Luo & Schapire (2015): p_i ∝ pi_i w(R_i, C_i) over the awake experts, C_i = sum |r_i|."""

    def __init__(self, n: int, prior: np.ndarray | None = None):
        super().__init__(n, prior)
        self.abs_regret = np.zeros(n)

    def weights(self, awake: np.ndarray | None = None) -> np.ndarray:
        mask = awake_mask(awake, self.n)
        return self._softmax_awake(ada_log_weight(self.regret, self.abs_regret), mask)

    def update(self, losses: np.ndarray, awake: np.ndarray | None = None) -> np.ndarray:
        r = super().update(losses, awake)
        self.abs_regret += np.abs(r)
        return r


LEARNERS = {"normalhedge": NormalHedge, "adanormalhedge": AdaNormalHedge, "hedge": Hedge}
