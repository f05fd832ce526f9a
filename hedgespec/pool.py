"""The drafter pool as the decode loop sees it, and the scoring every drafter gets after a round.

`evaluate` returns a future: in process it is already done, behind Ray it completes while the next
round runs (the learner accepts feedback that arrives a round late). The scoring itself lives in
`score_round`, which both the in-process pool and the Ray drafter groups call.
"""
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from hedgespec.evaluation import acceptance
from hedgespec.interfaces import Draft, Drafter, Verified
from hedgespec.sampling import Sampling


@dataclass
class Scores:
    """Per committed position (rows) and drafter (columns): acceptance probability gamma, likelihood
    ratio of the committed token, and whether the drafter was awake there."""
    gamma: np.ndarray
    ratio: np.ndarray
    awake: np.ndarray

    @staticmethod
    def concat(parts: Sequence["Scores"]) -> "Scores":
        return Scores(*(np.concatenate([getattr(p, f) for p in parts], axis=1) for f in ("gamma", "ratio", "awake")))


class DrafterPool(Protocol):
    names: list[str]

    def begin(self, request_id: str, tokens: list[int], hidden, sampling: Sampling, seed: int) -> None: ...

    def awake(self, request_id: str) -> np.ndarray:
        """Which drafters have a proposal for the next round."""

    def propose(self, request_id: str, index: int, k: int) -> Draft: ...

    def evaluate(self, request_id: str, verified: Verified) -> Future:
        """Every drafter consumes the committed tokens; the future's result is their Scores."""

    def release(self, request_id: str) -> None: ...


def score_round(drafters: Sequence[Drafter], request_id: str, verified: Verified) -> Scores:
    """The full-information step for these drafters: each observes the committed tokens (staying in
    sync) and is scored against the target distributions that verification already produced."""
    m, n = len(verified.tokens), len(drafters)
    gamma, ratio, awake = np.zeros((m, n)), np.zeros((m, n)), np.zeros((m, n), dtype=bool)
    tokens = np.asarray(verified.tokens)
    for j, drafter in enumerate(drafters):
        observation = drafter.observe(request_id, verified)
        g, a = acceptance(verified.probs, observation.probs, tokens)
        gamma[:, j], ratio[:, j], awake[:, j] = g.numpy(), a.numpy(), observation.awake.numpy()
    return Scores(gamma, ratio, awake)


def drafter_seeds(seed: int, n: int) -> list[int]:
    """Each drafter's sampling seed for a request; the same wherever the drafter runs."""
    return [seed + 1 + j for j in range(n)]


def done(value) -> Future:
    future = Future()
    future.set_result(value)
    return future


class LocalPool:
    """Drafters in this process: every call runs now."""

    def __init__(self, drafters: Sequence[Drafter]):
        self.drafters = list(drafters)
        self.names = [d.name for d in self.drafters]

    def begin(self, request_id, tokens, hidden, sampling, seed):
        for drafter, drafter_seed in zip(self.drafters, drafter_seeds(seed, len(self.drafters))):
            drafter.begin(request_id, tokens, hidden, sampling, drafter_seed)

    def awake(self, request_id):
        return np.array([d.ready(request_id) for d in self.drafters])

    def propose(self, request_id, index, k):
        return self.drafters[index].propose(request_id, k)

    def evaluate(self, request_id, verified):
        return done(score_round(self.drafters, request_id, verified))

    def release(self, request_id):
        for drafter in self.drafters:
            drafter.release(request_id)
