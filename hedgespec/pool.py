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
appeared, an old one has ended), and a learner offered wrong flags picks sleeping drafters.
"""
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch

from hedgespec.evaluation import acceptance
from hedgespec.interfaces import Draft, Drafter, Observation, Verified
from hedgespec.sampling import Sampling


@dataclass
class Scores:
    """Per committed position (rows) and drafter (columns): acceptance probability gamma, likelihood
    ratio of the committed token, and whether the drafter was awake there."""
    gamma: np.ndarray
    ratio: np.ndarray
    awake: np.ndarray

    @staticmethod
    def of_columns(columns: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> "Scores":
        """From each drafter's (gamma, ratio, awake) columns, in the pool's order."""
        return Scores(*(np.stack([c[f] for c in columns], axis=1) for f in range(3)))

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


def score(verified: Verified, observation: Observation) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One drafter's (gamma, ratio, awake) columns for a round. A point mass at d has gamma = p(d)
    and ratio = min(1, 1 / p(x)) = 1 where d is the committed token x, else 0 (evaluation.py's
    formulas with q one-hot). Without the target's distributions (`verified.probs` None: the vLLM
    backend, which keeps them), gamma is the indicator that d was committed: exact under greedy
    decoding, and under sampling an unbiased estimate of p(d), since x was drawn from p."""
    awake = np.asarray(observation.awake)
    if observation.probs is None:
        # numpy, not torch: this runs for every drafter and request at every vLLM step
        drafted = np.asarray(observation.tokens)
        hit = (drafted == np.asarray(verified.tokens)).astype(np.float32)
        if verified.probs is None:
            return hit, hit, awake
        drafted = torch.as_tensor(np.maximum(drafted, 0))  # asleep positions (-1) are masked by `awake`
        return verified.probs.gather(-1, drafted[:, None])[:, 0].numpy(), hit, awake
    gamma, ratio = acceptance(verified.probs, observation.probs, torch.as_tensor(verified.tokens))
    return gamma.numpy(), ratio.numpy(), awake


def score_all(verified: Verified, observations: list[Observation]) -> Scores:
    """Every drafter's `score` for a round, as Scores. Where every drafter gives point masses and
    the target's distributions are not at hand (the vLLM backend, every request at every step), the
    hits of all of them are one comparison."""
    if verified.probs is None and all(o.probs is None for o in observations):
        drafted = np.stack([np.asarray(o.tokens) for o in observations], axis=1)
        hit = (drafted == np.asarray(verified.tokens)[:, None]).astype(np.float32)
        return Scores(hit, hit, np.stack([np.asarray(o.awake) for o in observations], axis=1))
    return Scores.of_columns([score(verified, o) for o in observations])


def drafter_seeds(seed: int, n: int) -> list[int]:
    """Each drafter's sampling seed for a request; the same wherever the drafter runs."""
    return [seed + 1 + j for j in range(n)]


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
        request = self.requests[request_id]
        newer = len(request.rounds) - request.since  # rounds handed over since the prompt or the last extend
        if self.worker is None and newer:  # scored as it was handed over: the flags are current
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
        scored.future.result()
        return scored.ready.copy()

    def propose(self, request_id, index, k):
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
            self._score_now(request_id, scored)
        else:
            self.worker.submit(self._score_all, request_id)
        return scored.future

    def _score_now(self, request_id: str, scored: _Round) -> None:
        """Without the worker every round is scored as it is handed over, by every drafter in turn:
        nothing runs beside it, so no locks or per-drafter bookkeeping (the vLLM proposer does this
        for every request of every step)."""
        request, start = self.requests[request_id], time.perf_counter()
        try:
            scores = score_all(scored.verified, [drafter.observe(request_id, scored.verified) for drafter in self.drafters])
            scored.ready[:] = [drafter.ready(request_id) for drafter in self.drafters]
        except Exception as error:  # the loop raises it from the round's future
            scored.future.set_exception(error)
            return
        request.done = [len(request.rounds)] * len(self.drafters)
        scored.complete(scores)
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
