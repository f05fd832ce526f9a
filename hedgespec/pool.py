"""The drafter pool as the decode loop sees it, and the scoring every drafter gets after a round.

`evaluate` returns a future. `LocalPool` (the in-process engine, and each Ray drafter group, which
hosts one) scores on a worker thread beside the next round: every drafter observes the committed
tokens (staying in sync) and is scored against the target distributions that verification already
produced. Torch runs one thread per caller here, so the worker computes on the other core while
the target verifies. A drafter chosen for the next round is caught up first by whichever thread
gets to it (its own observe, not the whole pool's), so the critical path holds only the chosen
drafter's catch-up and draft. The awake flags offered for a round are those after the round before
the latest (the loop waits for that round's scores anyway, decode.Learning): a fixed lag of one
round, so that the choices, and with them a seeded sampled text, do not depend on thread timing.
The learner sees the exact awake rows in the scores; only the choice is a round behind, as behind Ray.
Without the worker (the vLLM backend's proposer, where scoring is part of vLLM's step) every round
is scored before the next choice, so the flags offered are those after the latest round: whether a
drafter has a proposal now. A round behind, prompt lookup's flag is often wrong (a new match has
appeared, an old one has ended), and a learner offered wrong flags picks sleeping drafters. There the
rounds handed over are queued and scored together at the first read after them (a flag, a draft, a
round's scores): the proposer hands over every request's round of a vLLM step before it drafts for
any, so each drafter observes the whole step in one call (`observe_many`, where it has one: the
datastores' lookups of a step are one compiled call).
"""
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from hedgespec.evaluation import Scores, observe_many, score, score_wave
from hedgespec.interfaces import Draft, Drafter, Verified
from hedgespec.sampling import Sampling


class DrafterPool(Protocol):
    names: list[str]

    def begin(self, request_id: str, tokens: list[int], hidden, sampling: Sampling, seed: int) -> None: ...

    def awake(self, request_id: str) -> np.ndarray:
        """Which drafters have a proposal for the next round."""

    def propose(self, request_id: str, index: int, k: int) -> Draft: ...

    def evaluate(self, request_id: str, verified: Verified) -> Future:
        """Every drafter consumes the committed tokens; the future's result is their Scores."""

    def release(self, request_id: str) -> None: ...


def drafter_seeds(seed: int, n: int) -> list[int]:
    """Each drafter's sampling seed for a request; the same wherever the drafter runs."""
    return [seed + 1 + j for j in range(n)]


class _OnRead(Future):
    """A queued round's scores: asking for them scores every round queued by then (LocalPool without
    its worker)."""

    def __init__(self, score_queued):
        super().__init__()
        self.score_queued = score_queued

    def result(self, timeout=None):
        if not self.done():
            self.score_queued()
        return super().result(timeout)


def done(value) -> Future:
    future = Future()
    future.set_result(value)
    return future


WORKER = "hedgespec-scoring"  # the worker thread's name prefix


@dataclass
class _Round:
    verified: Verified
    columns: list  # per drafter: (gamma, ratio, awake) once it has observed the round (scored drafter by drafter)
    ready: np.ndarray  # per drafter: whether it had a proposal right after observing the round
    future: Future = field(default_factory=Future)
    remaining: int = 0

    def complete(self, scores: Scores) -> None:
        """Every drafter has scored the round: its scores to the loop."""
        self.future.set_result(scores)
        self.verified = None  # the round's distributions are no longer needed


@dataclass
class _Request:
    ready: np.ndarray  # per drafter: whether it had a proposal after the prompt (or after `extend`)
    done: list[int]  # per drafter: rounds it has observed
    locks: list[threading.Lock]  # per drafter: held while it observes or drafts
    rounds: list[_Round] = field(default_factory=list)
    since: int = 0  # the rounds handed over when `ready` was set: later ones' flags are newer
    lock: threading.Lock = field(default_factory=threading.Lock)  # guards the rounds' counters


class LocalPool:
    """Drafters in this process; with `background`, their evaluation runs on a worker thread."""

    def __init__(self, drafters: Sequence[Drafter], background: bool = True):
        self.drafters = list(drafters)
        self.names = [d.name for d in self.drafters]
        self.worker = ThreadPoolExecutor(1, thread_name_prefix=WORKER) if background else None
        self.requests: dict[str, _Request] = {}
        self.queued: list[tuple[str, _Round]] = []  # without the worker: rounds handed over, not yet scored
        # seconds of evaluation run by the worker (beside the rounds) and by the loop's own thread
        # (a chosen drafter caught up on the critical path), for the benchmarks' round breakdown
        self.scoring_seconds = {"beside": 0.0, "critical": 0.0}
        self.counting = threading.Lock()

    def begin(self, request_id, tokens, hidden, sampling, seed):
        self.begin_seeded(request_id, tokens, hidden, sampling, drafter_seeds(seed, len(self.drafters)))

    def begin_seeded(self, request_id: str, tokens: list[int], hidden, sampling: Sampling, seeds: list[int]) -> None:
        """begin with each drafter's seed given (a Ray group gets its share of the pool's seeds)."""
        n = len(self.drafters)
        self.requests[request_id] = _Request(np.zeros(n, dtype=bool), [0] * n, [threading.Lock() for _ in range(n)])
        for drafter, drafter_seed in zip(self.drafters, seeds):
            drafter.begin(request_id, tokens, hidden, sampling, drafter_seed)
        self.requests[request_id].ready[:] = [d.ready(request_id) for d in self.drafters]

    def awake(self, request_id):
        self._score_queued()
        request = self.requests[request_id]
        newer = len(request.rounds) - request.since  # rounds handed over since the prompt or the last extend
        if self.worker is None and newer:  # scored by now (just above): the flags are current
            return request.rounds[-1].ready.copy()
        if newer < 2:
            return request.ready.copy()
        before = request.rounds[-2]
        before.future.result()  # complete: the loop absorbed it (or it failed, and this raises)
        return before.ready.copy()

    def evaluated(self, request_id: str) -> int:
        """Rounds handed to `evaluate` so far for the request: the index the next one gets."""
        return len(self.requests[request_id].rounds)

    def ready_after(self, request_id: str, index: int) -> np.ndarray:
        """The flags right after round `index`, once it is scored (a Ray group sends them with that
        round's scores, so that the caller can offer the same fixed lag as `awake`)."""
        scored = self.requests[request_id].rounds[index]
        scored.future.result()  # scores it, if it is still queued
        return scored.ready.copy()

    def propose(self, request_id, index, k):
        self._score_queued()
        start = time.perf_counter()
        self._catch_up(request_id, index)
        request = self.requests[request_id]
        with request.locks[index]:
            draft = self.drafters[index].propose(request_id, k)
        # what choosing this drafter cost the round: its catch-up (if the worker had not done it) and its draft
        draft.seconds = time.perf_counter() - start
        return draft

    def extend(self, request_id: str, tokens: list[int]) -> None:
        """Committed tokens that no round scores: every drafter takes them into its history, as after
        its prompt (the vLLM proposer's steps without rounds, whose scoring cost more than the
        steps). Drafters that read token ids only (prompt lookup, datastores) can. The
        rounds handed over before are scored first; the flags offered next are those after `tokens`."""
        self._score_queued()
        request = self.requests[request_id]
        for index, drafter in enumerate(self.drafters):
            self._catch_up(request_id, index)
            with request.locks[index]:
                drafter.extend(request_id, tokens)
                request.ready[index] = drafter.ready(request_id)
        request.since = len(request.rounds)

    def evaluate(self, request_id, verified):
        request = self.requests[request_id]
        scored = _Round(verified, [None] * len(self.drafters), np.zeros(len(self.drafters), dtype=bool),
                        remaining=len(self.drafters))
        request.rounds.append(scored)
        if self.worker is None:
            scored.future = _OnRead(self._score_queued)
            self.queued.append((request_id, scored))
        else:
            self.worker.submit(self._score_all, request_id)
        return scored.future

    def _score_queued(self) -> None:
        """Without the worker: every queued round, by every drafter, in waves of one round per
        request (a drafter observes a request's rounds in order), each drafter observing a wave in
        one call. Nothing runs beside it, so no locks or per-drafter bookkeeping."""
        while self.queued:
            wave, later, seen = [], [], set()
            for request_id, scored in self.queued:
                (later if request_id in seen else wave).append((request_id, scored))
                seen.add(request_id)
            self.queued = later
            start = time.perf_counter()
            rounds = [(request_id, scored.verified) for request_id, scored in wave]
            try:
                scores = score_wave([verified for _, verified in rounds],
                                    [observe_many(drafter, rounds) for drafter in self.drafters])
                for (request_id, scored), round_scores in zip(wave, scores):
                    scored.ready[:] = [drafter.ready(request_id) for drafter in self.drafters]
                    request = self.requests[request_id]
                    request.done = [observed_rounds + 1 for observed_rounds in request.done]
                    scored.complete(round_scores)
            except Exception as error:  # the loop raises it from the rounds' futures
                for _, scored in wave:
                    if not scored.future.done():
                        scored.future.set_exception(error)
            with self.counting:
                self.scoring_seconds["critical"] += time.perf_counter() - start

    def _score_all(self, request_id: str) -> None:
        """Every round not yet scored, oldest first, each by every drafter: the learner gets the
        oldest scores first when the worker falls behind."""
        request = self.requests.get(request_id)
        if request is None:  # released while the worker was on its way
            return
        for upto in range(min(request.done) + 1, len(request.rounds) + 1):
            for index in range(len(self.drafters)):
                try:
                    self._catch_up(request_id, index, upto)
                except Exception:  # the round's future holds it; the loop raises it
                    return

    def _catch_up(self, request_id: str, index: int, upto: int | None = None) -> None:
        """Drafter `index` observes every round it has not yet, in order (up to round `upto`), and
        scores itself on it."""
        request = self.requests.get(request_id)
        if request is None:  # released while the worker was on its way
            return
        drafter = self.drafters[index]
        with request.locks[index]:
            while request.done[index] < (len(request.rounds) if upto is None else upto):
                scored = request.rounds[request.done[index]]
                start = time.perf_counter()
                try:
                    scored.columns[index] = score(scored.verified, drafter.observe(request_id, scored.verified))
                    scored.ready[index] = drafter.ready(request_id)
                except Exception as error:  # this round and every later one cannot be scored
                    for later in request.rounds[request.done[index]:]:
                        if not later.future.done():
                            later.future.set_exception(error)
                    raise
                request.done[index] += 1
                where = "beside" if threading.current_thread().name.startswith(WORKER) else "critical"
                with self.counting:
                    self.scoring_seconds[where] += time.perf_counter() - start
                with request.lock:
                    scored.remaining -= 1
                    complete = scored.remaining == 0 and not scored.future.done()
                if complete:
                    scored.complete(Scores.of_columns(scored.columns))

    def release(self, request_id):
        request = self.requests.get(request_id)
        if request is not None:
            for scored in list(request.rounds):  # let the worker finish with this request first
                try:
                    scored.future.result()
                except Exception:
                    pass
            for lock in request.locks:  # and wait out a catch-up still reading a drafter's flag
                lock.acquire()
        try:
            self.requests.pop(request_id, None)
            for drafter in self.drafters:
                drafter.release(request_id)
        finally:
            for lock in request.locks if request is not None else []:
                lock.release()

    @property
    def active(self) -> int:
        """Requests holding state here, the drafters' own included: 0 when idle."""
        return len(self.requests) + sum(len(d.requests) for d in self.drafters)
