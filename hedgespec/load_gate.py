"""Whether a batched engine's next step speculates at all, learned per load from wall-clock time.

At a batch of one a step's cost is mostly fixed (the weights are read once for all its tokens), so
accepted drafts come nearly free. As the batch grows the step turns compute-bound: a draft token
costs about what a decoded one does, and the proposer's own work for every request is paid however
little is accepted. On the 2-core CPU of the README's figures, 8 and 16 concurrent clients decoded
faster without speculation, vLLM's own n-gram speculation included. The per-request learners price
their arms with StepCosts' fitted line, which sees neither vLLM's spec-decode bookkeeping nor the
proposer's share of the cores; rather than model those, the gate measures what they add up to.

Per load (the batch in powers of two, vllm_proposer.load_of) it keeps the tokens committed per
second of wall-clock of the steps that speculated and of those that did not (each step charged its
vLLM step and the proposer's work on its drafts and on its results). A mode is played in blocks of
BLOCK steps, and the first SETTLE steps after a switch are not measured: what the step before left
behind (vLLM's bookkeeping of rejected drafts, the serving path's backlog of a speculating step's
tokens) would be charged to them, and a lone plain step among speculating ones measured slower
than plain steps are. Until both modes are measured at a load they alternate; then the faster one
is played, and the other one block in EXPLORE_EVERY, so that both stay measured as loads and texts
change: a two-armed bandit, since a step shows what its own mode did and not the other's. The
schedule is deterministic, so that a run's choices do not hang on a random draw.
"""
from collections import Counter, deque

import numpy as np


class LoadGate:
    BLOCK = 6  # steps a mode is played in a row
    SETTLE = 2  # steps after a switch of mode that are not measured
    MEASURED = 8  # steps of each mode measured at a load before the faster one is preferred
    EXPLORE_EVERY = 16  # then the slower mode gets one block in this many
    DECAY = 0.98  # weight of a mode's step per later step of that mode and load: about its last 50 count

    def __init__(self):
        self.sums: dict[tuple[str, bool], np.ndarray] = {}  # (load, speculated): decayed [tokens, seconds]
        self.measured: Counter = Counter()  # (load, speculated): steps recorded
        self.blocks: Counter = Counter()  # per load: blocks begun
        self.playing: dict[str, tuple[bool, int]] = {}  # per load: the block's mode and its steps left
        self.decided: deque[bool] = deque(maxlen=self.SETTLE + 1)  # the latest modes played, any load
        self.load: str | None = None  # the load of the latest decision

    def speculate(self, load: str) -> bool:
        """Whether the next step under `load` speculates."""
        mode, left = self.playing.get(load, (True, 0))
        if left == 0:
            self.blocks[load] += 1
            mode, left = self._block(load), self.BLOCK
        self.playing[load] = (mode, left - 1)
        self.decided.append(mode)
        self.load = load
        return mode

    def _block(self, load: str) -> bool:
        if min(self.measured[(load, True)], self.measured[(load, False)]) < self.MEASURED:
            return self.blocks[load] % 2 == 1  # speculation first (optimism: it gets tried), then the plain step
        preferred = self.rate(load, True) >= self.rate(load, False)
        return preferred != (self.blocks[load] % self.EXPLORE_EVERY == 0)

    def record(self, tokens: int, seconds: float) -> None:
        """The step of the latest decision committed `tokens` in `seconds` of wall-clock; not counted
        within SETTLE steps of a switch of mode."""
        if len(self.decided) <= self.SETTLE or len(set(self.decided)) > 1:
            return
        speculated = self.decided[-1]
        key = (self.load, speculated)
        self.sums[key] = self.DECAY * self.sums.get(key, np.zeros(2)) + (tokens, seconds)
        self.measured[key] += 1

    def rate(self, load: str, speculated: bool) -> float | None:
        """Tokens per second measured for the mode under `load` (None: not measured yet)."""
        sums = self.sums.get((load, speculated))
        return None if sums is None or sums[1] <= 0 else float(sums[0] / sums[1])

    def snapshot(self) -> dict:
        """Per load: tokens per second measured with and without speculation, for /stats."""
        loads = sorted({load for load, _ in self.sums}, key=lambda load: int(load.split("<=")[-1]))
        return {load: {"speculating": self.rate(load, True), "plain": self.rate(load, False)} for load in loads}
