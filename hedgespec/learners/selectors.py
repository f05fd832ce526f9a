"""Selectors: what the decode loop asks which drafter drafts the next round.

Per query: begin(prompt) once, then per round choose(awake) -> drafter index and
observe(RoundFeedback), then end(). `awake` marks the drafters with a proposal this round
(None: all of them).
"""
import inspect
from typing import Protocol, runtime_checkable

import numpy as np

from hedgespec.feedback import RoundFeedback, check_choice
from hedgespec.learners.bandits import EXP3SpecSelector, UCB1Selector, UCBSpecSelector, check_pool
from hedgespec.learners.delay import BoldReduction, QueueReduction
from hedgespec.learners.experts import LEARNERS, awake_mask, sample_index

REDUCTIONS = {"queue": QueueReduction, "bold": BoldReduction}
ACTS = ("sample", "argmax")


@runtime_checkable
class Selector(Protocol):
    name: str

    def begin(self, prompt_text: str) -> None: ...
    def choose(self, awake: np.ndarray | None) -> int: ...
    def observe(self, round: RoundFeedback) -> None: ...
    def end(self) -> None: ...


def _check_index(i: int, n: int, what: str) -> int:
    if not 0 <= i < n:
        raise ValueError(f"{what}={i} is not a drafter index in [0, {n})")
    return i


class _Memoryless:
    """A per-round rule: it learns nothing, so a query's start, feedback and end change nothing."""

    def begin(self, prompt_text: str) -> None:
        """Nothing to reset."""

    def observe(self, round: RoundFeedback) -> None:
        """Nothing to learn."""

    def end(self) -> None:
        """Nothing to keep."""


class FixedSelector(_Memoryless):
    """Always the same drafter (the single-drafter baselines); asleep, its round has no draft."""

    def __init__(self, n: int, index: int):
        self.index = _check_index(index, n, "index")
        self.name = f"fixed-{index}"

    def choose(self, awake: np.ndarray | None) -> int:
        return self.index


class RuleSelector(_Memoryless):
    """`primary` whenever it is awake, else `fallback`: e.g. prompt lookup when it matches (its
    match gating lives in its awake mask), else a named head."""

    def __init__(self, n: int, primary: int, fallback: int):
        self.n = n
        self.primary = _check_index(primary, n, "primary")
        self.fallback = _check_index(fallback, n, "fallback")
        self.name = "rule"

    def choose(self, awake: np.ndarray | None) -> int:
        return self.primary if awake_mask(awake, self.n)[self.primary] else self.fallback


class HedgeSpecSelector:
    """A full-information base learner behind a delay reduction, fed the matured loss vectors.

    act: "sample" draws from the weights (what the regret bound is about); "argmax" takes the
    heaviest drafter. warm_start: each query starts from the prior
    pi = warm_mix * uniform + (1 - warm_mix) * (mean final weights of the past queries).
    Every base learner here is a pi-weighted potential, so its guarantee against each drafter i
    only grows from ln N to ln(1/pi_i) <= ln(N / warm_mix): a warm start helps when queries
    resemble the past ones and costs at most ln(1/warm_mix) when they do not, unlike carried
    regrets, which void the per-query guarantee. Without it, every query starts uniform.
    """

    def __init__(self, n: int, base: str = "normalhedge", delay: str = "queue", act: str = "sample",
                 warm_start: bool = False, warm_mix: float = 0.5, seed: int = 0, name: str = "hedgespec"):
        if n < 1:
            raise ValueError(f"need at least one drafter, got n={n}")
        if not 0.0 < warm_mix <= 1.0:
            raise ValueError(f"warm_mix must lie in (0, 1], got {warm_mix}")
        self.n = n
        self.base_type = LEARNERS[check_choice(base, tuple(LEARNERS), "base learner")]
        self.reduction_type = REDUCTIONS[check_choice(delay, tuple(REDUCTIONS), "delay reduction")]
        self.act = check_choice(act, ACTS, "act")
        self.warm_start, self.warm_mix = warm_start, warm_mix
        self.rng = np.random.default_rng(seed)
        self.name = name
        self.final: np.ndarray | None = None  # the final weights of the last query that ended
        self.queries = 0  # finished queries, and the mean of their final weights
        self.mean_final = np.full(n, 1.0 / n)
        self._played: np.ndarray | None = None

    @property
    def last_weights(self) -> np.ndarray | None:
        """The weights behind the latest choice (None before the first): what monitoring shows."""
        return None if self._played is None else self._played.copy()

    def prior(self) -> np.ndarray:
        uniform = np.full(self.n, 1.0 / self.n)
        if not self.warm_start:
            return uniform
        return self.warm_mix * uniform + (1.0 - self.warm_mix) * self.mean_final

    def begin(self, prompt_text: str) -> None:
        prior = self.prior()
        self.reduction = self.reduction_type(lambda: self.base_type(self.n, prior))
        self.position = 0  # tokens committed so far in this query: where the next round starts

    def choose(self, awake: np.ndarray | None) -> int:
        weights = self.reduction.play(self.position, awake)
        self._played = weights
        if self.act == "sample":
            return sample_index(weights, self.rng)
        # ties (a query's first rounds are uniform) broken at random, not towards the first drafter
        return int(self.rng.choice(np.flatnonzero(weights == weights.max())))

    def observe(self, round: RoundFeedback) -> None:
        if round.chosen is None and round.committed:
            self.reduction.skip(self.position)
        self.position += round.committed
        self.reduction.receive(round.matured)

    def end(self) -> None:
        self.final = self.reduction.final_weights()  # this query's, for priors.WarmStarts
        self.queries += 1
        self.mean_final += (self.final - self.mean_final) / self.queries
        self.reduction = None


# name -> (class, options the name fixes)
SELECTORS = {
    "fixed": (FixedSelector, {}),
    "hedgespec": (HedgeSpecSelector, {"base": "normalhedge", "name": "hedgespec"}),
    "hedgespec-sleeping": (HedgeSpecSelector, {"base": "adanormalhedge", "name": "hedgespec-sleeping"}),
    "hedge": (HedgeSpecSelector, {"base": "hedge", "name": "hedge"}),
    "ucbspec": (UCBSpecSelector, {}),
    "ucb1": (UCB1Selector, {}),
    "exp3spec": (EXP3SpecSelector, {}),
    "rule": (RuleSelector, {}),
}


def _check_type(name: str, option: str, value, annotation) -> None:
    numeric = (int, float) if annotation is float else annotation
    # Python counts a bool as an int; as an option value it is one only where a bool is asked for.
    if isinstance(value, bool) is not (annotation is bool) or not isinstance(value, numeric):
        raise ValueError(f"{name}: option {option}={value!r} must be of type {annotation.__name__}")


def make_selector(name: str, n: int, k: int, **options) -> Selector:
    """The selector called `name` for n drafters and K drafts per round, e.g.
    make_selector("hedgespec", 4, 5, act="argmax", seed=1)."""
    cls, fixed = SELECTORS[check_choice(name, tuple(SELECTORS), "selector")]
    check_pool(n, k)
    signature = inspect.signature(cls).parameters
    parameters = dict(signature)
    for given in ("n", "k", *fixed):
        parameters.pop(given, None)
    for option, value in options.items():
        if option not in parameters:
            raise ValueError(f"{name}: unknown option {option!r}; allowed: {', '.join(parameters) or 'none'}")
        _check_type(name, option, value, parameters[option].annotation)
    missing = [p for p, spec in parameters.items() if spec.default is inspect.Parameter.empty and p not in options]
    if missing:
        raise ValueError(f"{name}: missing option(s) {', '.join(missing)}")
    pool = {"n": n, "k": k} if "k" in signature else {"n": n}
    return cls(**pool, **fixed, **options)
