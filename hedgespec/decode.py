"""THE decode loop. Each round: choose an arm (a drafter and how many tokens it drafts, or no
draft at all), draft, verify (one target forward); then the evaluation phase scores every drafter
on the committed tokens and the selector learns.

It is written against small interfaces (Target, DrafterPool, Selector); the in-process engine and
the Ray deployments both call it. A round's speculation (choose, draft, then score and learn) is
`Speculation`, which the vLLM backend's proposer also runs, inside vLLM's own loop. The evaluation of a round is a future that completes beside the
next round (a worker thread in process, the drafter groups behind Ray): the loop hands a round's
scores to the learner one round later, when they have had the whole next round to arrive, so the
scoring stays off the critical path unless it takes longer than a round. Each round's
measured draft, verify and overhead times go to the shared RoundCosts, which price the arms of the
time objective. Greedy output is identical to target-only decoding whatever the drafters and the
selector do (byte-identical in float32; in bfloat16 up to near-ties of the target, see README).
"""
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

import torch

from hedgespec.feedback import DelayedLosses, MaturedLoss, RoundFeedback
from hedgespec.interfaces import Draft, Target, Verified
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
    drafter: str | None  # None: no draft (the plain step was chosen, no drafter was awake, or target-only decoding)
    drafted: int
    accepted: int
    committed: int
    seconds: float = 0.0  # wall time of its draft and verification (its evaluation runs beside the next round)
    draft_seconds: float = 0.0  # the drafter's propose, as it measured it
    verify_seconds: float = 0.0  # the target's forward, as it measured it


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
        rounds = max(1, len(self.rounds))
        return {"rounds": len(self.rounds), "target_forwards": self.target_forwards, "mat": self.mat,
                "drafted": sum(r.drafted for r in self.rounds), "accepted": sum(r.accepted for r in self.rounds),
                "rounds_by_drafter": by_drafter,
                "share_by_drafter": {k: v / rounds for k, v in by_drafter.items()},
                # mean ms of a round as the loop saw it: the target's forward, the draft, all of it
                "round_ms": {"verify": 1e3 * sum(r.verify_seconds for r in self.rounds) / rounds,
                             "draft": 1e3 * sum(r.draft_seconds for r in self.rounds) / rounds,
                             "total": 1e3 * sum(r.seconds for r in self.rounds) / rounds}}


def decode(request: Request, target: Target, pool: DrafterPool | None, selector: Selector | None,
           stream: TextStream, k: int, losses: DelayedLosses | None = None,
           on_text: Callable[[str], None] | None = None, cancelled: Callable[[], bool] | None = None) -> Generation:
    """`losses` (required with a pool) also fixes the arms the selector's indices refer to and
    carries the RoundCosts that every round's timings are recorded into."""
    rid, start = request.request_id, time.perf_counter()
    rounds: list[Round] = []
    speculation = Speculation(rid, pool, selector, losses, k) if pool else None
    try:
        hidden = target.prefill(rid, request.prompt, request.sampling, request.seed)
        if speculation:
            speculation.begin(request, hidden)
        while stream.finish_reason is None:
            if cancelled and cancelled():
                raise Cancelled(rid)
            round_start = time.perf_counter()
            # a round commits at most drafted + 1 tokens: draft no more than the budget can keep
            budget = min(k, stream.remaining - 1)
            draft = speculation.draft(budget) if speculation else Draft([])
            verified = through_eos(target.verify(rid, draft), stream.eos_ids)
            seconds = time.perf_counter() - round_start
            drafter = speculation.commit(verified, seconds) if speculation else None
            rounds.append(Round(drafter, verified.drafted, verified.accepted, len(verified.tokens), seconds,
                                verified.draft_seconds, verified.seconds))
            delta = stream.push(verified.tokens)
            if delta and on_text:
                on_text(delta)
        if speculation:
            speculation.finish()
    finally:
        target.release(rid)
        if pool:
            pool.release(rid)
    return Generation(stream.tokens, stream.text, stream.finish_reason, rounds, time.perf_counter() - start,
                      losses.max_delay if losses else 0, speculation.learning.delivered if speculation else [])


class Speculation:
    """One request's speculation, round by round: which arm to play and its draft, then what the
    round committed, for the learner, the feedback window and the cost estimates. `decode` runs it
    around its target; the vLLM backend's proposer (hedgespec.vllm_proposer) runs it for every
    request of each vLLM step, whose verification vLLM does itself."""

    def __init__(self, request_id: str, pool: DrafterPool, selector: Selector, losses: DelayedLosses, k: int,
                 end: Callable[[], None] | None = None):
        """`end` ends the selector's query in place of `selector.end` (a warm start's bookkeeping)."""
        self.request_id, self.pool, self.losses = request_id, pool, losses
        self.learning = Learning(selector, losses, k, end)
        self.position = 0  # tokens committed so far: where the next round starts
        self.chosen: int | None = None  # the arm played this round (None: nothing was awake, or no budget)
        self.drafter: int | None = None  # its drafter (None: the plain step)

    def begin(self, request: Request, hidden) -> None:
        self.pool.begin(self.request_id, request.prompt, hidden, request.sampling, request.seed)
        self.learning.selector.begin(request.prompt_text)

    def draft(self, budget: int) -> Draft:
        """The chosen arm's draft of at most `budget` tokens for this round (empty: the plain step)."""
        self.chosen, self.drafter, draft = None, None, Draft([])
        if budget > 0:
            self.learning.absorb(lag=1)
            awake = self.losses.arms.awake(self.pool.awake(self.request_id))
            if awake.any():
                self.chosen = self.learning.selector.choose(awake)
                arm = self.losses.arms[self.chosen]
                self.drafter = arm.drafter
                if arm.drafter is not None:
                    draft = self.pool.propose(self.request_id, arm.drafter, min(arm.k, budget))
        return draft

    def commit(self, verified: Verified, seconds: float | None) -> str | None:
        """The round's commitment and its wall time (None: a round that prices no arm, vLLM's
        prefill step): every drafter is scored on it. Returns the drafter's name that drafted it, if any."""
        self.learning.expect(self.chosen, len(verified.tokens), self.pool.evaluate(self.request_id, verified))
        if self.losses.costs is not None and seconds is not None:
            self.losses.costs.record(self.drafter, verified.drafted, verified.draft_seconds, verified.seconds, seconds)
        if self.drafter is not None:
            self.losses.play(self.position, self.drafter, verified.drafted, verified.accepted)
        self.position += len(verified.tokens)
        return self.pool.names[self.drafter] if self.drafter is not None else None

    def catch_up(self, tokens: list[int]) -> None:
        """Tokens committed while no round was played (the vLLM proposer's load gate played steps
        without rounds): every drafter observes them and is scored on them, as on rounds
        without a draft (of at most K + 1 tokens, as any round) that price no arm."""
        self.chosen = self.drafter = None
        k = self.learning.k
        for start in range(0, len(tokens), k + 1):
            chunk = tokens[start:start + k + 1]
            self.commit(Verified(chunk, len(chunk) - 1, 0, None, torch.empty(0, 0)), None)

    def skip(self, skipped: int) -> None:
        """The next `skipped` tokens were committed while no round was played and are not scored
        (the drafters took them in without: LocalPool.extend): the learner loses the positions
        whose losses would need them."""
        self.learning.absorb(lag=0)
        self.losses.skip(skipped)
        self.position += skipped
        self.chosen = self.drafter = None

    def finish(self) -> None:
        self.learning.finish()


def through_eos(verified: Verified, eos_ids: set[int]) -> Verified:
    """The round's commitment up to and including its first EOS: what follows it is never shown,
    so it is neither scored (no loss rows beyond EOS) nor counted as committed."""
    end = next((i + 1 for i, token in enumerate(verified.tokens) if token in eos_ids), len(verified.tokens))
    return verified if end == len(verified.tokens) else verified.first(end)


class Learning:
    """Tells the selector each round as it is played, and hands it the round's scores, in round
    order, once they have arrived."""

    def __init__(self, selector: Selector, losses: DelayedLosses | None, k: int, end: Callable[[], None] | None = None):
        self.selector, self.losses, self.k = selector, losses, k
        self.end = end or selector.end
        self.pending: deque[Future] = deque()  # the future Scores of each round not yet absorbed
        self.delivered: list[MaturedLoss] = []

    def expect(self, chosen: int | None, committed: int, scores: Future) -> None:
        """A round was played (a bandit learns from this alone); its scores may arrive while later rounds run."""
        self.selector.observe(RoundFeedback(chosen, committed, self.k))
        self.pending.append(scores)

    def absorb(self, lag: int) -> None:
        """Learn from every round but the latest `lag` ones, waiting for their scores if need be: the
        scores of the round before the latest had a whole round to arrive, so the wait is rarely
        felt, and what the learner knows at each choice does not depend on timing."""
        while len(self.pending) > lag:
            scores = self.pending.popleft().result()
            matured = []
            if self.losses:
                for s in range(len(scores.gamma)):
                    matured += self.losses.push(scores.gamma[s], scores.ratio[s], scores.awake[s])
            self.delivered += matured
            if matured:
                self.selector.observe(RoundFeedback(None, 0, self.k, awake_only(matured)))

    def finish(self) -> None:
        self.absorb(lag=0)
        flushed = self.losses.flush() if self.losses else []
        self.delivered += flushed
        self.selector.observe(RoundFeedback(None, 0, self.k, awake_only(flushed)))
        self.end()


def awake_only(matured: list[MaturedLoss]) -> list[MaturedLoss]:
    """A position where every drafter slept compares nobody: there is nothing to learn from it."""
    return [m for m in matured if m.awake.any()]
