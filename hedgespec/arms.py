"""What a selector chooses among each round: arms, and what each one costs.

Under the MAT objectives (`loss: eal | tap`, the paper's) an arm is a drafter drafting the full K.
Under the time objective (`loss: time`, the default) an arm is a pair (drafter j, k drafts) with
k in 1..K, plus the plain decode step (no drafter, k = 0), which is always awake: the learner can
choose not to speculate, so it need never be slower than decoding without speculation.

The cost of an arm is measured online, never assumed: the recent median of what the loop saw a
drafter's propose take for k tokens, of the target's verify forward for n tokens, and of the rest
of a round (remote hops, bookkeeping) with and without a draft. One `RoundCosts` lives as long as
the engine or the serving replica, so every request starts from what the earlier ones measured.
"""
import statistics
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Arm:
    drafter: int | None  # None: the plain decode step
    k: int


class Arms:
    def __init__(self, n_drafters: int, k: int, cost_aware: bool):
        self.n_drafters, self.k = n_drafters, k
        if cost_aware:
            self.arms = [Arm(None, 0)] + [Arm(j, kk) for j in range(n_drafters) for kk in range(1, k + 1)]
        else:
            self.arms = [Arm(j, k) for j in range(n_drafters)]
        self.drafter_of = np.array([-1 if a.drafter is None else a.drafter for a in self.arms])
        self.ks = np.array([a.k for a in self.arms])

    def __len__(self) -> int:
        return len(self.arms)

    def __getitem__(self, index: int) -> Arm:
        return self.arms[index]

    def awake(self, drafters_awake: np.ndarray) -> np.ndarray:
        """An arm is awake when its drafter is; the plain step always is."""
        padded = np.append(np.asarray(drafters_awake, dtype=bool), True)  # index -1: the plain step
        return padded[self.drafter_of]

    def names(self, drafter_names: list[str]) -> list[str]:
        return ["none" if a.drafter is None else (f"{drafter_names[a.drafter]}@{a.k}" if len(self) > self.n_drafters
                                                  else drafter_names[a.drafter]) for a in self.arms]


class _Median:
    """The median of the latest WINDOW measurements of one cost (the lower middle one of an even
    number); None until TRUSTED of them.

    A median, so that one stalled round (another process on the cores, a kernel loaded on first
    use) cannot price an arm out: an arm is measured again only when it is played, and on an H200
    a running mean that the first drafting rounds had put at 435 ms (warm verifies take ~25 ms)
    priced every draft out for good (benchmarks/gpu/README.md). Untrusted until TRUSTED
    measurements, so that the first one, the likeliest to be slow, is not alone: until then the
    cost counts as unmeasured, which prices it optimistically (RoundCosts' docstrings) and gets it
    played."""

    WINDOW = 9  # about the last ten rounds: a drift shows after five
    TRUSTED = 3

    def __init__(self):
        self.recent: deque[float] = deque(maxlen=self.WINDOW)
        self.count = 0
        self.value: float | None = None

    def add(self, x: float) -> None:
        self.count += 1
        self.recent.append(x)
        if self.count >= self.TRUSTED:
            self.value = statistics.median_low(self.recent)


class StepCosts:
    """A batched engine's step (vLLM's): its time as a fixed part a and a part b per token it
    computes, fitted online by least squares over recent steps (exponentially weighted). A request
    with n of the step's tokens, in a batch of B requests, is charged a / B + b n: the fixed part
    is shared, each token costs its marginal compute. With one request that is the verify curve's
    line; under load the shared part shrinks, so speculation pays only where its accepted tokens
    outweigh the tokens it adds, and the time objective (feedback.py) shortens k or stops drafting."""

    DECAY = 0.99  # weight of a step per step since: about the last 100 steps count
    STALL = 2.0  # a step longer than this many times the line's estimate counts as this many
    SETTLED = 10.0  # the weight of steps after which the line is trusted to cap a stall

    def __init__(self):
        self.sums = np.zeros(5)  # weighted sums of 1, tokens, seconds, tokens^2, tokens * seconds
        # `line` until the next step is recorded: every request of a step is priced with it
        self.fitted: tuple[float, float] | None = None

    def record(self, tokens: int, seconds: float) -> None:
        """One step. A step stalled by another process on the cores (one in ten took twice the median
        on 2 cores) is capped: uncapped, a few stalls in the window tilted the per-token slope by
        more than itself, to 0.1 or 1.4 ms where the steps' medians gave 0.55."""
        if self.sums[0] >= self.SETTLED:
            fixed, per_token = self.line()
            seconds = min(seconds, self.STALL * (fixed + per_token * tokens))
        self.sums = self.DECAY * self.sums + np.array([1.0, tokens, seconds, tokens * tokens, tokens * seconds])
        self.fitted = None

    def line(self) -> tuple[float, float]:
        """(a, b); b = 0 until the steps have differed in size (optimism: longer drafts get tried)."""
        if self.fitted is None:
            self.fitted = self._fit()
        return self.fitted

    def _fit(self) -> tuple[float, float]:
        weight, x, y, xx, xy = self.sums
        if weight == 0:
            return 0.0, 0.0
        mean_x, mean_y = x / weight, y / weight
        spread = xx / weight - mean_x * mean_x
        slope = float(max(0.0, (xy / weight - mean_x * mean_y) / spread)) if spread > 1e-9 * max(1.0, mean_x * mean_x) else 0.0
        return max(0.0, float(mean_y - slope * mean_x)), slope

    def share(self, tokens: int, batch: int) -> float:
        fixed, per_token = self.line()
        return fixed / batch + per_token * tokens


class RoundCosts:
    """Running estimates of a round's parts, in seconds; safe to share between decode threads."""

    def __init__(self, n_drafters: int, k: int, verify_model: Callable[[np.ndarray], np.ndarray] | None = None):
        """`verify_model`: the verify times of arrays of token counts from elsewhere (a batched
        engine's StepCosts at its current batch), in place of the medians of the rounds' own
        verify times. Its owner reprices once per step (`reprice`, the batch changed): the many
        rounds of a step record without repricing after each."""
        self.n, self.k = n_drafters, k
        self.verify_model = verify_model
        self.verify = [_Median() for _ in range(k + 2)]  # index n: a forward over n tokens
        self.draft = [[_Median() for _ in range(k + 1)] for _ in range(n_drafters)]  # [j][k]
        self.rest = {True: _Median(), False: _Median()}  # the rest of a round, with a draft / without
        self.lock = threading.Lock()
        self.priced: dict[tuple, np.ndarray] = {}  # arm costs per kind of Arms, until the next record

    def record(self, drafter: int | None, drafted: int, draft_s: float, verify_s: float, round_s: float) -> None:
        """One round as the loop saw it: the drafter asked (None: none) and the drafts it gave."""
        with self.lock:
            if drafter is not None and drafted:
                self.draft[drafter][min(drafted, self.k)].add(draft_s)
            self.verify[min(drafted + 1, self.k + 1)].add(verify_s)
            self.rest[drafter is not None].add(max(0.0, round_s - draft_s - verify_s))
            if self.verify_model is None:
                self.priced.clear()

    def reprice(self) -> None:
        """The verify model changed (a batched engine's batch size): the arms' prices follow it."""
        with self.lock:
            self.priced.clear()

    def verify_curve(self) -> list[float]:
        """verify_s(n) for n = 0..K+1, with the line fitted once."""
        if self.verify_model is not None:
            return [float(v) for v in self.verify_model(np.arange(self.k + 2))]  # plain floats: they cross vLLM's RPC
        line = self._line()
        return [self._verify(n, line) for n in range(self.k + 2)]

    def verify_s(self, n: int) -> float:
        """The verify estimate for n tokens. One token is its own measurement (another kernel runs it,
        models/kernels.py); several tokens follow a line through the measured sizes, weighted by how
        often each was measured, so that one noisy size cannot make a longer draft look cheaper than
        a shorter one. Unmeasured: the nearest thing known (optimism: a size gets tried, then measured)."""
        if self.verify_model is not None:
            return self.verify_model(n)
        return self._verify(n, self._line())

    def _line(self) -> tuple[float, float] | None:
        """(slope, intercept) of the multi-token verify times, or None with fewer than two sizes measured."""
        known = [(i, m.value, m.count) for i, m in enumerate(self.verify) if i >= 2 and m.value is not None]
        if len(known) < 2:
            return None
        x, y, weight = np.array(known).T
        slope, intercept = np.polyfit(x, y, 1, w=np.sqrt(weight))
        return max(0.0, float(slope)), float(intercept)

    def _verify(self, n: int, line: tuple[float, float] | None) -> float:
        single = self.verify[1].value
        longer = [m.value for m in self.verify[2:] if m.value is not None]
        if n == 1 or not longer:
            return single or (longer[0] if longer else 0.0)
        if line is None:
            return longer[0]
        slope, intercept = line
        return max(0.0, intercept + slope * n)

    def draft_s(self, drafter: int, k: int) -> float:
        """The propose estimate; unmeasured k scale the measured ones' time per token, and a drafter
        with none measured costs 0 (optimism: it gets tried, then measured)."""
        return self._drafts(drafter)[k]

    def _drafts(self, drafter: int) -> list[float]:
        """draft_s(drafter, k) for k = 0..K."""
        known = [(kk, m.value) for kk, m in enumerate(self.draft[drafter]) if m.value is not None]
        per_token = sum(v / kk for kk, v in known) / len(known) if known else 0.0
        estimates = [k * per_token for k in range(self.k + 1)]
        for kk, value in known:
            estimates[kk] = value
        return estimates

    def arm_costs(self, arms: Arms) -> np.ndarray:
        with self.lock:
            if (key := (arms.n_drafters, arms.k, len(arms))) not in self.priced:
                verify = np.array(self.verify_curve())
                rest = {key: m.value or 0.0 for key, m in self.rest.items()}
                drafts = np.array([self._drafts(j) for j in range(arms.n_drafters)] or np.zeros((0, self.k + 1)))
                drafting = arms.drafter_of >= 0
                costs = np.full(len(arms), verify[1] + rest[False])
                costs[drafting] = (drafts[arms.drafter_of[drafting], arms.ks[drafting]] + verify[arms.ks[drafting] + 1]
                                   + rest[True])
                self.priced[key] = costs
            return self.priced[key]

    def snapshot(self) -> dict:
        """The estimates in ms, for benchmarks and /stats."""
        with self.lock:
            return {"verify_ms": {n: 1e3 * v for n, v in enumerate(self.verify_curve()) if n},
                    "rest_ms": {("draft" if key else "plain"): 1e3 * (m.value or 0.0) for key, m in self.rest.items()}}
