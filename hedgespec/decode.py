"""THE decode loop. Each round: choose a drafter, draft, verify (one target forward); then the
evaluation phase scores every drafter on the committed tokens and the selector learns.

It is written against small interfaces (Target, DrafterPool, Selector); the in-process engine and
the Ray deployments both call it. The evaluation of a round is a future: the loop hands its scores
to the learner once they are there, never waiting for them on a round's critical path. Greedy
output is byte-identical to target-only decoding whatever the drafters and the selector do.
"""
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from hedgespec.feedback import DelayedLosses, MaturedLoss, RoundFeedback
from hedgespec.interfaces import Draft, Target
from hedgespec.learners.selectors import Selector
from hedgespec.pool import DrafterPool
from hedgespec.sampling import Sampling
from hedgespec.text import TextStream


class Cancelled(Exception):
    """The client went away; the loop stops and frees the request's state everywhere."""


@dataclass
class Request:
    prompt: list[int]
    max_tokens: int
    sampling: Sampling = Sampling()
    seed: int = 0
    stop: Sequence[str] = ()
    prompt_text: str = ""  # what a text-reading selector (the static router) sees
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)


@dataclass
class Round:
    drafter: str | None  # None: no drafter was awake (or target-only decoding)
    drafted: int
    accepted: int
    committed: int
    seconds: float = 0.0  # wall time of its draft and verification (its evaluation runs beside the next round)


@dataclass
class Generation:
    tokens: list[int]
    text: str
    finish_reason: str
    rounds: list[Round]
    seconds: float
    max_delay: int = 0  # largest delay of a loss vector, in committed positions
    losses: list[MaturedLoss] = field(default_factory=list)  # every drafter's loss at each position (benchmarks)

    @property
    def target_forwards(self) -> int:
        return len(self.rounds)

    @property
    def mat(self) -> float:
        """Mean committed tokens per target forward (the bonus/correction token included)."""
        return sum(r.committed for r in self.rounds) / max(1, len(self.rounds))

    def stats(self) -> dict:
        """The speculation statistics a response reports."""
        by_drafter: dict[str, int] = {}
        for r in self.rounds:
            by_drafter[r.drafter or "none"] = by_drafter.get(r.drafter or "none", 0) + 1
        return {"rounds": len(self.rounds), "target_forwards": self.target_forwards, "mat": self.mat,
                "drafted": sum(r.drafted for r in self.rounds), "accepted": sum(r.accepted for r in self.rounds),
                "rounds_by_drafter": by_drafter,
                "share_by_drafter": {k: v / max(1, len(self.rounds)) for k, v in by_drafter.items()}}


def decode(request: Request, target: Target, pool: DrafterPool | None, selector: Selector | None,
           stream: TextStream, k: int, losses: DelayedLosses | None = None,
           on_text: Callable[[str], None] | None = None, cancelled: Callable[[], bool] | None = None) -> Generation:
    rid, start = request.request_id, time.perf_counter()
    rounds: list[Round] = []
    learning = Learning(selector, losses, k) if pool else None
    try:
        hidden = target.prefill(rid, request.prompt, request.sampling, request.seed)
        if pool:
            pool.begin(rid, request.prompt, hidden, request.sampling, request.seed)
            selector.begin(request.prompt_text)
        while stream.finish_reason is None:
            if cancelled and cancelled():
                raise Cancelled(rid)
            round_start = time.perf_counter()
            # a round commits at most drafted + 1 tokens: draft no more than the budget can keep
            budget = min(k, stream.remaining - 1)
            chosen, draft = None, Draft([])
            if pool and budget > 0:
                learning.absorb(wait=False)
                awake = pool.awake(rid)
                if awake.any():
                    chosen = selector.choose(awake)
                    draft = pool.propose(rid, chosen, budget)
            verified = target.verify(rid, draft)
            if pool:
                learning.expect(chosen, len(verified.tokens), pool.evaluate(rid, verified))
            rounds.append(Round(pool.names[chosen] if chosen is not None else None, verified.drafted,
                                verified.accepted, len(verified.tokens), time.perf_counter() - round_start))
            delta = stream.push(verified.tokens)
            if delta and on_text:
                on_text(delta)
        if pool:
            learning.finish()
    finally:
        target.release(rid)
        if pool:
            pool.release(rid)
    return Generation(stream.tokens, stream.text, stream.finish_reason, rounds, time.perf_counter() - start,
                      losses.max_delay if losses else 0, learning.delivered if learning else [])


class Learning:
    """Hands each round's scores to the selector, in round order, once they have arrived."""

    def __init__(self, selector: Selector, losses: DelayedLosses | None, k: int):
        self.selector, self.losses, self.k = selector, losses, k
        self.pending: deque = deque()  # (chosen, committed, future of Scores) per round
        self.delivered: list[MaturedLoss] = []

    def expect(self, chosen: int | None, committed: int, scores: Future) -> None:
        """A round's scores, which may arrive while later rounds run."""
        self.pending.append((chosen, committed, scores))

    def absorb(self, wait: bool) -> None:
        while self.pending and (wait or self.pending[0][2].done()):
            chosen, committed, future = self.pending.popleft()
            scores = future.result()
            matured = []
            if self.losses:
                for s in range(len(scores.gamma)):
                    matured += self.losses.push(scores.gamma[s], scores.ratio[s], scores.awake[s])
            self.delivered += matured
            self.selector.observe(RoundFeedback(chosen, committed, self.k, awake_only(matured)))

    def finish(self) -> None:
        self.absorb(wait=True)
        flushed = self.losses.flush() if self.losses else []
        self.delivered += flushed
        self.selector.observe(RoundFeedback(None, 0, self.k, awake_only(flushed)))
        self.selector.end()


def awake_only(matured: list[MaturedLoss]) -> list[MaturedLoss]:
    """A position where every drafter slept compares nobody: there is nothing to learn from it."""
    return [m for m in matured if m.awake.any()]
