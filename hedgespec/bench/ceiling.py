"""The hindsight per-round ceiling of drafter selection under greedy decoding.

The committed trajectory is fixed whoever drafts, so what a round starting at position i commits
with drafter d drafting k tokens is min(A[d, i], k) + 1, where A[d, i] is what d's full-budget draft
there would have had accepted (bench/replay.acceptance_table; a chain drafter's k-draft is the
prefix of its K-draft). Choosing, at every round start, the drafter and k that cover the trajectory
in the fewest rounds (or the least time) is then a shortest path over positions, solved exactly by
dynamic programming from the end. No selector can do better on that trajectory, a switching one
included, unlike the best single drafter per query.
"""
from collections.abc import Callable

import numpy as np


def fewest_rounds(table: np.ndarray) -> tuple[int, list[int]]:
    """table: [N, L] accepted drafts per drafter and position (-1 asleep). Returns the fewest target
    forwards that commit all L positions and the round starts of one plan that achieves it."""
    length = table.shape[1]
    best_accept = np.maximum(table.max(axis=0), 0) if len(table) else np.zeros(length, dtype=int)
    rounds = np.zeros(length + 1, dtype=int)
    step = np.ones(length, dtype=int)  # tokens the best first round from i commits
    for i in range(length - 1, -1, -1):
        reach = np.minimum(length, i + 1 + np.arange(best_accept[i] + 1))  # accept 0..A drafts, +1
        j = int(np.argmin(rounds[reach]))
        rounds[i], step[i] = 1 + rounds[reach[j]], reach[j] - i
    return int(rounds[0]), _starts(step)


def least_time(table: np.ndarray, budgets: np.ndarray, cost: Callable[[int | None, int], float]) -> tuple[float, list[int]]:
    """The least time to commit the trajectory: cost(d, k) is a round's seconds with drafter d
    drafting k tokens (d None, k 0: the plain step); budgets[i] is the most a round at i may draft."""
    n, length = table.shape
    seconds = np.zeros(length + 1)
    step = np.ones(length, dtype=int)
    for i in range(length - 1, -1, -1):
        options = [(cost(None, 0) + seconds[i + 1], 1)]
        for d in range(n):
            if table[d, i] < 0:
                continue
            for k in range(1, budgets[i] + 1):
                end = min(length, i + 1 + min(int(table[d, i]), k))
                options.append((cost(d, k) + seconds[end], end - i))
        seconds[i], step[i] = min(options)
    return float(seconds[0]), _starts(step)


def _starts(step: np.ndarray) -> list[int]:
    starts, i = [], 0
    while i < len(step):
        starts.append(i)
        i += int(step[i])
    return starts
