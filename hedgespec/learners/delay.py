"""Delayed feedback: the black-box reductions of Joulani, Gyorgy & Szepesvari (ICML 2013).

A decision is taken at the start of a round, at the query's next uncommitted position; it covers
the positions that round commits, and their loss vectors mature later (EAL: K-1 positions on).
Both reductions expose the same calls to the selector:

- `play(position, awake)`: the weights for the decision starting at `position`;
- `skip(position)`: a round starts at `position` that no decision took (no drafter was awake);
- `receive(matured)`: loss vectors that became complete, in any number.

The base learners come from `make_learner`, a no-argument factory.
"""
import heapq
import itertools
from bisect import bisect_right
from collections.abc import Callable, Iterable

import numpy as np

from hedgespec.feedback import MaturedLoss


class QueueReduction:
    """Stochastic case: one base learner, and a queue of matured losses applied in position order
    right before each decision (so an out-of-order arrival cannot reorder the learner's updates)."""

    def __init__(self, make_learner: Callable):
        self.learner = make_learner()
        self.queue: list[tuple[int, int, MaturedLoss]] = []
        self.arrivals = itertools.count()  # tie-break, so the heap never compares two MaturedLoss

    def receive(self, matured: Iterable[MaturedLoss]) -> None:
        for loss in matured:
            heapq.heappush(self.queue, (loss.position, next(self.arrivals), loss))

    def apply_queue(self) -> None:
        while self.queue:
            loss = heapq.heappop(self.queue)[2]
            self.learner.update(loss.losses, loss.awake)

    def play(self, position: int, awake: np.ndarray | None) -> np.ndarray:
        self.apply_queue()
        return self.learner.weights(awake)

    def skip(self, position: int) -> None:
        """The one learner learns from every position, whoever drafted it."""

    def final_weights(self) -> np.ndarray:
        self.apply_queue()
        return self.learner.weights()


class BoldReduction:
    """Adversarial case (BOLD): copies of the base learner, created only when every existing copy
    still waits for feedback, so a delay of at most D decisions never needs more than D+1 copies.
    Each decision is taken by a free copy, and a matured position goes back to the copy that
    decided the round covering it: round r covers [starts[r], starts[r+1]).

    Losses mature in position order (DelayedLosses), so once position p has arrived every earlier
    one has arrived or never will (the loop may drop a position where every drafter slept: it
    teaches nothing). A copy is therefore free once its round is closed and the latest arrival
    has reached the round's last position.
    """

    def __init__(self, make_learner: Callable):
        self.make_learner = make_learner
        self.learners = [make_learner()]
        self.ends: list[int | None] = [0]  # per copy: end of the round it decided, None while open
        self.latest = -1  # the furthest position whose loss has arrived
        self.starts: list[int] = []  # first position of each round, increasing
        self.owners: list[int | None] = []  # the copy that took each round's decision, if any

    def _close_last(self, position: int) -> None:
        """A round starts at `position`, so the previous one covered the positions before it."""
        if not self.starts:
            return
        if position <= self.starts[-1]:
            raise ValueError(f"round at position {position} does not follow {self.starts[-1]}")
        if self.owners[-1] is not None:
            self.ends[self.owners[-1]] = position

    def play(self, position: int, awake: np.ndarray | None) -> np.ndarray:
        self._close_last(position)
        free = (i for i, end in enumerate(self.ends) if end is not None and end - 1 <= self.latest)
        owner = next(free, len(self.learners))
        if owner == len(self.learners):
            self.learners.append(self.make_learner())
            self.ends.append(None)
        self.ends[owner] = None
        self.starts.append(position)
        self.owners.append(owner)
        return self.learners[owner].weights(awake)

    def skip(self, position: int) -> None:
        """No copy decided this round, so its positions' feedback belongs to none."""
        self._close_last(position)
        self.starts.append(position)
        self.owners.append(None)

    def receive(self, matured: Iterable[MaturedLoss]) -> None:
        for loss in matured:
            which = bisect_right(self.starts, loss.position) - 1
            if which < 0:
                raise ValueError(f"loss at position {loss.position} precedes every round")
            self.latest = max(self.latest, loss.position)
            if self.owners[which] is not None:
                self.learners[self.owners[which]].update(loss.losses, loss.awake)

    def final_weights(self) -> np.ndarray:
        """The copies' mean weights: each learned from a share of the query's positions."""
        return np.mean([learner.weights() for learner in self.learners], axis=0)
