"""Losses from gamma/ratio rows, and their delivery once complete (delayed feedback).

One row per committed position s holds, for each of the N drafters, gamma_s (one-step acceptance
probability), a_s (likelihood ratio of the committed token) and whether the drafter was awake.

- TAP: l_s = 1 - gamma_s, complete as soon as position s is.
- EAL: l_s = 1 - AL_s / (K+1), where AL_s is the expected tokens committed by a K-draft round
  starting at s. It needs rows s..s+K-1, so it is delivered K-1 positions late. Two estimators:
  "paper":     AL_s = 1 + g_s + g_s g_{s+1} + ... + g_s...g_{s+K-1}
  "corrected": AL_s = 1 + g_s + a_s g_{s+1} + ... + (a_s...a_{s+K-2}) g_{s+K-1}
  The paper's is exact only for greedy decoding or K = 1: under sampling, accepted drafts follow
  min(p, q)/gamma, not p, so the target's own trajectory must be reweighted by a = min(1, q/p)
  to stand for them. Both lie in [1, K+1].
- time (the default): arms are (drafter, k) pairs and the plain decode step (hedgespec.arms).
  E_{j,k}(s), the expected tokens committed by a round of drafter j drafting k tokens at s, is the
  acceptance length above truncated at k (the same rows, the same estimators; E = 1 for the plain
  step); the loss is the arm's time per committed token, c_{j,k} / E_{j,k}(s), divided by the
  largest c of any arm so that it lies in [0, 1], with c measured online (arms.RoundCosts) at the
  moment the loss is delivered.

With a DepthCalibration, the gamma and ratio of depth d in a window are first multiplied by that
drafter's factor for depth d, learned from the rounds it played (hedgespec.calibration).
"""
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from hedgespec.arms import Arms, RoundCosts
from hedgespec.calibration import DepthCalibration

LOSSES = ("time", "eal", "tap")
ESTIMATORS = ("corrected", "paper")


def check_choice(value: str, choices: tuple[str, ...], what: str) -> str:
    if value not in choices:
        raise ValueError(f"unknown {what} {value!r}; expected one of {', '.join(choices)}")
    return value


def acceptance_lengths(gamma: np.ndarray, ratio: np.ndarray, estimator: str = "corrected") -> np.ndarray:
    """[K, N]: row k-1 is the expected tokens committed by a round drafting k tokens from s, per
    drafter, from the [K, N] rows of positions s..s+K-1."""
    check_choice(estimator, ESTIMATORS, "estimator")
    carry = gamma if estimator == "paper" else ratio
    # reach[j] = chance the round still drafts at step j: the product of the carries before it.
    reach = np.cumprod(np.vstack([np.ones_like(gamma[:1]), carry[:-1]]), axis=0)
    return 1.0 + np.cumsum(reach * gamma, axis=0)


def acceptance_length(gamma: np.ndarray, ratio: np.ndarray, estimator: str = "corrected") -> np.ndarray:
    """AL_s per drafter from the [K, N] rows of positions s..s+K-1: a round drafting all K."""
    return acceptance_lengths(gamma, ratio, estimator)[-1]


def eal_loss(gamma: np.ndarray, ratio: np.ndarray, estimator: str = "corrected") -> np.ndarray:
    return 1.0 - acceptance_length(gamma, ratio, estimator) / (len(gamma) + 1)


@dataclass(frozen=True)
class MaturedLoss:
    """The complete loss vector of one committed position, as handed to a learner."""
    position: int
    losses: np.ndarray  # [N], in [0, 1]
    awake: np.ndarray  # [N] bool: who was awake at `position`; the others take no part
    delay: int  # pushes after its own that it waited for


@dataclass(frozen=True)
class RoundFeedback:
    """What a selector learns from one round.

    Full-information selectors read `matured`; bandits read only `chosen` and `committed`.
    Positions in `matured` count the tokens committed by this query's rounds from 0, as
    DelayedLosses numbers them. chosen = None: no drafter drafted (none was awake), so the
    target committed alone; with committed = 0 as well, the call only delivers feedback (the
    final flush) and no round was played.

    `played_probability`: the chance with which the learner's draw chose `chosen`, for the round's
    importance weight (EXP3Spec). None: the round played the learner's latest choice (in process,
    where each round's feedback follows its own choose). A remote learner answers a round late, so
    its caller carries the probability of the draw it played, and 0 where the arm played was no
    draw of the learner at all (a fallback: its answer was late or its arm asleep by then).
    """
    chosen: int | None
    committed: int
    k: int
    matured: list[MaturedLoss] = field(default_factory=list)
    played_probability: float | None = None

    def __post_init__(self):
        if not 0 <= self.committed <= self.k + 1:
            raise ValueError(f"committed={self.committed} outside [0, k+1={self.k + 1}]")


class DelayedLosses:
    """Turns rows pushed in position order into loss vectors delivered once, in order, when complete.

    One instance per generation. A drafter asleep at a position proposes nothing there, so its gamma
    and ratio count as 0 inside any window (a round cannot go on through a missing draft); asleep at
    the window start it is excluded by the `awake` row and its (finite) loss is never used.
    """

    def __init__(self, n_drafters: int, k: int, loss: str = "eal", estimator: str = "corrected",
                 costs: RoundCosts | None = None, calibration: DepthCalibration | None = None):
        if n_drafters < 0 or k < 1:  # an empty pool (target-only decoding) just never pushes
            raise ValueError(f"need n_drafters >= 0 and k >= 1, got {n_drafters} and {k}")
        self.n = n_drafters
        self.k = k
        self.loss = check_choice(loss, LOSSES, "loss")
        self.estimator = check_choice(estimator, ESTIMATORS, "estimator")
        if (loss == "time") != (costs is not None):
            raise ValueError("the time loss needs the round costs, and only it uses them")
        self.costs = costs
        self.calibration = calibration  # per-depth factors for the scores, and what they learn from
        self.played: dict[int, tuple[int, int, int]] = {}  # round start -> (drafter, drafted, accepted)
        self.arms = Arms(n_drafters, k, cost_aware=loss == "time")
        self.window = 1 if loss == "tap" else k
        self.rows: deque[tuple[np.ndarray, np.ndarray, np.ndarray]] = deque()
        self.pushed = 0
        self.max_delay = 0  # the longest any delivered loss waited, in positions

    def push(self, gamma_row: np.ndarray, ratio_row: np.ndarray, awake_row: np.ndarray) -> list[MaturedLoss]:
        row = (np.asarray(gamma_row, dtype=float), np.asarray(ratio_row, dtype=float), np.asarray(awake_row, dtype=bool))
        if any(x.shape != (self.n,) for x in row):
            raise ValueError(f"rows must have shape ({self.n},)")
        self.rows.append(row)
        self.pushed += 1
        return [self._deliver()] if len(self.rows) == self.window else []

    def flush(self) -> list[MaturedLoss]:
        """End of generation: deliver what is left, with gamma beyond the end taken as 0."""
        return [self._deliver(complete=False) for _ in range(len(self.rows))]

    def skip(self, positions: int) -> None:
        """`positions` are committed that no rows will be pushed for (their scoring was skipped): the
        windows open before them are dropped, undelivered, since their losses would need those rows,
        and with them the rounds played there; the positions after the gap count on past it."""
        self.pushed += positions
        self.rows.clear()
        self.played.clear()

    def play(self, position: int, drafter: int, drafted: int, accepted: int) -> None:
        """A round started at `position` with this drafter: what its drafts really did, to be held
        against the drafter's scores there once they are complete."""
        if self.calibration is not None and drafted:
            self.played[position] = (drafter, drafted, accepted)

    def _deliver(self, complete: bool = True) -> MaturedLoss:
        gamma = np.zeros((self.window, self.n))
        ratio = np.zeros((self.window, self.n))
        rows = len(self.rows)  # fewer than the window only when flushed: the rest stays 0
        awake_rows = np.array([row[2] for row in self.rows])
        gamma[:rows] = np.where(awake_rows, [row[0] for row in self.rows], 0.0)
        ratio[:rows] = np.where(awake_rows, [row[1] for row in self.rows], 0.0)
        awake = self.rows[0][2]
        start = self.pushed - len(self.rows)
        if self.calibration is not None and self.loss != "tap":
            factors = self.calibration.factors()[:self.window]  # from the rounds before this one
            played = self.played.pop(start, None)
            if played is not None and complete:
                drafter, drafted, accepted = played
                carry = gamma if self.estimator == "paper" else ratio
                self.calibration.record(drafter, gamma[:, drafter], carry[:, drafter], drafted, accepted)
            gamma, ratio = np.minimum(gamma * factors, 1.0), np.minimum(ratio * factors, 1.0)
        if self.loss == "tap":
            losses = 1.0 - gamma[0]
        elif self.loss == "eal":
            losses = eal_loss(gamma, ratio, self.estimator)
        else:
            losses, awake = self._time_losses(gamma, ratio), self.arms.awake(awake)
        self.rows.popleft()
        delay = self.pushed - 1 - start
        self.max_delay = max(self.max_delay, delay)
        return MaturedLoss(start, np.clip(losses, 0.0, 1.0), awake, delay)

    def _time_losses(self, gamma: np.ndarray, ratio: np.ndarray) -> np.ndarray:
        """Each arm's time per committed token at the window's start, over the costliest arm's time."""
        lengths = acceptance_lengths(gamma, ratio, self.estimator)  # [K, N]
        expected = np.append(1.0, lengths[self.arms.ks[1:] - 1, self.arms.drafter_of[1:]])
        cost = self.costs.arm_costs(self.arms)
        top = cost.max()
        return cost / expected / top if top > 0 else np.zeros(len(cost))
