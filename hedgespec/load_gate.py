"""How much of a batched engine's next step speculates, learned per load from wall-clock time.

At a batch of one a step's cost is mostly fixed (the weights are read once for all its tokens), so
accepted drafts come nearly free. As the batch grows the step turns compute-bound: a draft token
costs about what a decoded one does, and the proposer's own work for every request is paid however
little is accepted. On the 2-core CPU of the README's figures (the app run of commit b6ecf70), at 16
concurrent clients the learners' rounds cost more than their drafts bought (0.90x plain vLLM), while
vLLM's own n-gram speculation, whose drafts cost microseconds, still gained (1.04x). The per-request
learners price their arms with StepCosts' fitted line, which sees neither vLLM's spec-decode
bookkeeping nor the proposer's share of the cores; rather than model those, the gate measures what
they add up to.

A step is played in one of three modes: ALL (every request plays its round: its learner's arm is
drafted, and the round's tokens score every drafter), COPY (no request plays a round: each one
drafts what followed the latest earlier occurrence of its text's last n-gram, where there is one, as
vLLM's own n-gram speculation does, but only as far as its own copies' acceptance pays for the
compute the tokens add to the step), NONE (no request drafts). A round is mostly the proposer's own
work (0.31 ms per request and step at a batch of 16, scoring every drafter and feeding the learner,
against a ~26 ms step; 0.02 ms in copy steps: benchmarks/vllm/README.md, bench proposer --modes),
paid whether or not the learner then drafts. In COPY and NONE steps the requests' tokens wait,
unscored, for their next round.

Per load (the batch in powers of two, vllm_proposer.load_of) the gate keeps the tokens committed
per second of wall-clock of the steps of each mode (each step charged its vLLM step and the
proposer's work on its drafts and on its results). A mode is played in blocks of BLOCK steps, and
the first SETTLE steps after a switch are not measured: what the step before left behind (vLLM's
bookkeeping of rejected drafts, the serving path's backlog of a speculating step's tokens) would be
charged to them, and a lone plain step among speculating ones measured slower than plain steps
are. Until every mode is measured at a load they take turns; then the fastest one is played, and
one block in EXPLORE_EVERY goes to the others in turn, so that all stay measured as loads and texts
change: a bandit, since a step shows what its own mode did and not the others'. The schedule is
deterministic, so that a run's choices do not hang on a random draw.
"""
from collections import Counter, deque

import numpy as np


ALL, COPY, NONE = "all", "copy", "none"
MODES = (ALL, NONE, COPY)  # the order an unmeasured load tries them in: the learners first (optimism)


class LoadGate:
    BLOCK = 6  # steps a mode is played in a row
    SETTLE = 2  # steps after a switch of mode that are not measured
    MEASURED = 8  # steps of each mode measured at a load before the fastest one is preferred
    EXPLORE_EVERY = 16  # then the slower modes get one block in this many, in turn
    DECAY = 0.98  # weight of a mode's step per later step of that mode and load: about its last 50 count

    def __init__(self, fixed: str | None = None):
        """`fixed`: the mode played at every load, measured but never changed (bench proposer compares
        the modes with it)."""
        if fixed is not None and fixed not in MODES:
            raise ValueError(f"load gate mode must be one of {', '.join(MODES)}, got {fixed!r}")
        self.fixed = fixed
        self.sums: dict[tuple[str, str], np.ndarray] = {}  # (load, mode): decayed [tokens, seconds]
        self.measured: Counter = Counter()  # (load, mode): steps recorded
        self.blocks: Counter = Counter()  # per load: blocks begun
        self.playing: dict[str, tuple[str, int]] = {}  # per load: the block's mode and its steps left
        self.decided: deque[str] = deque(maxlen=self.SETTLE + 1)  # the latest modes played, any load
        self.load: str | None = None  # the load of the latest decision

    def mode(self, load: str) -> str:
        """The next step's mode under `load`: ALL, COPY or NONE."""
        mode, left = self.playing.get(load, (ALL, 0))
        if left == 0:
            self.blocks[load] += 1
            mode, left = self._block(load), self.BLOCK
        self.playing[load] = (mode, left - 1)
        self.decided.append(mode)
        self.load = load
        return mode

    def _block(self, load: str) -> str:
        if self.fixed:
            return self.fixed
        if min(self.measured[(load, mode)] for mode in MODES) < self.MEASURED:
            return MODES[(self.blocks[load] - 1) % len(MODES)]
        preferred = max(MODES, key=lambda mode: self.rate(load, mode) or 0.0)
        if self.blocks[load] % self.EXPLORE_EVERY:
            return preferred
        others = [mode for mode in MODES if mode != preferred]
        return others[self.blocks[load] // self.EXPLORE_EVERY % len(others)]  # in turn

    def record(self, tokens: int, seconds: float) -> None:
        """The step of the latest decision committed `tokens` in `seconds` of wall-clock; not counted
        within SETTLE steps of a switch of mode."""
        if len(self.decided) <= self.SETTLE or len(set(self.decided)) > 1:
            return
        key = (self.load, self.decided[-1])
        self.sums[key] = self.DECAY * self.sums.get(key, np.zeros(2)) + (tokens, seconds)
        self.measured[key] += 1

    def rate(self, load: str, mode: str) -> float | None:
        """Tokens per second measured for the mode under `load` (None: not measured yet)."""
        sums = self.sums.get((load, mode))
        return None if sums is None or sums[1] <= 0 else float(sums[0] / sums[1])

    def snapshot(self) -> dict:
        """Per load: tokens per second measured in each mode, for /stats."""
        loads = sorted({load for load, _ in self.sums}, key=lambda load: int(load.split("<=")[-1]))
        return {load: {mode: self.rate(load, mode) for mode in MODES} for load in loads}
