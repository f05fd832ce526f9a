"""THE decode loop. Each round: choose a drafter, draft, verify (one target forward), then the
evaluation phase scores every drafter on the committed tokens and the selector learns.

It is written against the interfaces in `hedgespec.interfaces`; the in-process engine and the Ray
deployments both call it. Greedy output is byte-identical to target-only decoding whatever the
drafters and the selector do: they only change how many tokens each forward commits.
"""
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from hedgespec.evaluation import acceptance
from hedgespec.feedback import DelayedLosses
from hedgespec.interfaces import Draft, Drafter, Target, Verified
from hedgespec.learners.selectors import RoundFeedback, Selector
from hedgespec.sampling import Sampling
from hedgespec.text import TextStream


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


@dataclass
class Generation:
    tokens: list[int]
    text: str
    finish_reason: str
    rounds: list[Round]
    seconds: float
    max_delay: int = 0  # largest delay of a loss vector, in committed positions

    @property
    def target_forwards(self) -> int:
        return len(self.rounds)

    @property
    def mat(self) -> float:
        """Mean committed tokens per target forward (the bonus/correction token included)."""
        return sum(r.committed for r in self.rounds) / max(1, len(self.rounds))


def decode(request: Request, target: Target, drafters: Sequence[Drafter], selector: Selector | None,
           stream: TextStream, k: int, losses: DelayedLosses | None = None,
           on_text: Callable[[str], None] | None = None) -> Generation:
    rid, start = request.request_id, time.perf_counter()
    rounds: list[Round] = []
    try:
        hidden = target.prefill(rid, request.prompt, request.sampling, request.seed)
        for j, drafter in enumerate(drafters):
            drafter.begin(rid, request.prompt, hidden, request.sampling, request.seed + 1 + j)
        if selector:
            selector.begin(request.prompt_text)
        while stream.finish_reason is None:
            # a round commits at most drafted + 1 tokens: draft no more than the budget can keep
            budget = min(k, stream.remaining - 1)
            chosen = draft = None
            if drafters and budget > 0:
                awake = np.array([d.ready(rid) for d in drafters])
                if awake.any():
                    chosen = selector.choose(awake)
                    draft = drafters[chosen].propose(rid, budget)
            verified = target.verify(rid, draft or Draft([]))
            matured = evaluate(rid, drafters, verified, losses)
            if selector and drafters:
                selector.observe(RoundFeedback(chosen, len(verified.tokens), k, matured))
            rounds.append(Round(drafters[chosen].name if chosen is not None else None,
                                len(draft.tokens) if draft else 0, verified.accepted, len(verified.tokens)))
            delta = stream.push(verified.tokens)
            if delta and on_text:
                on_text(delta)
        if selector and drafters:
            selector.observe(RoundFeedback(None, 0, k, awake_only(losses.flush()) if losses else []))
            selector.end()
    finally:
        target.release(rid)
        for drafter in drafters:
            drafter.release(rid)
    return Generation(stream.tokens, stream.text, stream.finish_reason, rounds, time.perf_counter() - start,
                      losses.max_delay if losses else 0)


def evaluate(rid: str, drafters: Sequence[Drafter], verified: Verified, losses: DelayedLosses | None) -> list:
    """The full-information step: every drafter consumes the committed tokens (staying in sync) and
    is scored on them against the target distributions verification already produced; no extra
    target forward. Returns the loss vectors that matured."""
    if not drafters:
        return []
    observations = [d.observe(rid, verified) for d in drafters]
    if losses is None:
        return []
    tokens = np.asarray(verified.tokens)
    gamma, ratio, awake = (np.empty((len(tokens), len(drafters))) for _ in range(3))
    for j, obs in enumerate(observations):
        g, a = acceptance(verified.probs, obs.probs, tokens)
        gamma[:, j], ratio[:, j], awake[:, j] = g.numpy(), a.numpy(), obs.awake.numpy()
    matured = []
    for s in range(len(tokens)):
        matured += losses.push(gamma[s], ratio[s], awake[s].astype(bool))
    return awake_only(matured)


def awake_only(matured: list) -> list:
    """A position where every drafter slept compares nobody: there is nothing to learn from it."""
    return [m for m in matured if m.awake.any()]
