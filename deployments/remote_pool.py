"""The drafter pool of one request, across the drafter-group deployments, as the decode loop's
DrafterPool: propose on the chosen group, observe and score on every group beside the next round.

A group that fails (a replica died, or lost the request's state) costs speed, never the text: its
drafters sleep (the learner sees them asleep, and a draft of theirs that failed became the plain
step, adapters.RemoteTarget), and the request is rebuilt on a live replica under a new key, with
the committed tokens and the target's hidden states so far: the state its drafters would have had.
"""
import threading
import time
from concurrent.futures import Executor, Future

import numpy as np
import torch
from ray.serve.handle import DeploymentResponse

from deployments.adapters import RESULT_TIMEOUT_S, RETRY_AFTER_S, Calls, outcome, wait_unless_lost
from hedgespec.evaluation import Scores
from hedgespec.interfaces import Verified
from hedgespec.pool import drafter_seeds
from hedgespec.sampling import Sampling

FIRST_BEGIN_TIMEOUT_S = 30.0  # the first round waits this long for a group to have the prompt (after the prefill)


class _Group:
    """One drafter group as one request sees it: `up` (its replica holds the request's state),
    `rebuilding` (a begin with the request's history was sent under a new key) or `down`."""

    def __init__(self, handle, names: list[str], request_id: str):
        self.handle, self.names, self.request_id = handle, names, request_id
        self.attempt = 0
        self.calls = Calls(handle, request_id, affinity=True)
        self.state = "up"
        self.begun: DeploymentResponse | None = None
        self.ready = np.zeros(len(names), dtype=bool)  # after the prompt (or a rebuild's history)
        self.ready_by_round: dict[int, np.ndarray] = {}  # round -> the flags right after it
        self.retry_at = 0.0
        self.retired: list[Calls] = []  # the keys before a rebuild: a replica that failed a call may still hold one

    def begin(self, *args) -> None:
        self.begun = self.calls("begin", *args)

    def rebuild(self, *args) -> None:
        self.attempt += 1
        self.retired.append(self.calls)
        self.calls = Calls(self.handle, f"{self.request_id}~{self.attempt}", affinity=True)
        self.state = "rebuilding"
        self.begin(*args)

    def fail(self, calls: Calls) -> None:
        """A call under `calls` failed; a failure of an earlier key changes nothing."""
        if calls is self.calls and self.state != "down":
            self.state, self.retry_at = "down", time.monotonic() + RETRY_AFTER_S
            self.ready[:] = False
            self.ready_by_round.clear()

    def ready_before(self, latest: int) -> np.ndarray:
        """The flags after the round before round `latest` (the fixed lag of LocalPool.awake: the
        loop has waited for that round's scores, so the choices do not depend on timing); before
        two rounds, or where that round's flags are missing (the group was rebuilt), the newest
        older ones, else those after the prompt."""
        known = [r for r in self.ready_by_round if r <= latest - 1]
        for r in [r for r in self.ready_by_round if r < max(known, default=-1)]:
            del self.ready_by_round[r]  # never asked for again
        return self.ready_by_round[max(known)] if known else self.ready


class RemotePool:
    def __init__(self, groups: list[tuple], request_id: str, executor: Executor):
        """groups: (handle, drafter names) per drafter group, in pool order."""
        self.groups = [_Group(handle, names, request_id) for handle, names in groups]
        self.names = [name for _, names in groups for name in names]
        self.owner = [(g, j) for g, (_, names) in enumerate(groups) for j in range(len(names))]
        self.executor = executor
        self.lock = threading.Lock()  # group states change on the gathering threads too
        self.rounds = 0
        self.first = True
        self.rebuilds = 0
        # what a rebuild needs: the prompt, its hidden states, and every round's committed tokens
        self.prompt: list[int] = []
        self.hidden = None
        self.sampling: Sampling | None = None
        self.seeds: list[list[int]] = []
        self.history: list[Verified] = []

    def begin(self, request_id, tokens, hidden, sampling, seed):
        seeds = iter(drafter_seeds(seed, len(self.names)))
        self.seeds = [[next(seeds) for _ in group.names] for group in self.groups]
        self.prompt, self.hidden, self.sampling = list(tokens), hidden, sampling
        for group, group_seeds in zip(self.groups, self.seeds):
            group.begin(tokens, hidden, sampling, group_seeds)

    def awake(self, request_id) -> np.ndarray:
        with self.lock:
            for group, group_seeds in zip(self.groups, self.seeds):
                if group.state == "down" and time.monotonic() >= group.retry_at:
                    self._rebuild(group, group_seeds)
            for group in self.groups:
                # the first round waits for every group to have the prompt; a rebuild is waited for by nobody
                if group.state == "rebuilding" or self.first:
                    self._settle(group, wait=self.first)
            self.first = False
            return np.concatenate([group.ready_before(self.rounds - 1) if group.state == "up"
                                   else np.zeros(len(group.names), bool) for group in self.groups])

    def _settle(self, group: _Group, wait: bool) -> None:
        """A begun group is up once its begin answered. The first round waits for every group (so
        that the choices do not depend on timing), but not for long: a group that is restarting
        or swamped stays asleep until it answers."""
        calls = group.calls
        if not wait and outcome(group.begun) is None:
            return
        try:
            group.ready = np.array(group.begun.result(timeout_s=FIRST_BEGIN_TIMEOUT_S), dtype=bool)
            group.state = "up"
        except TimeoutError:
            group.state = "rebuilding"
        except Exception:
            group.fail(calls)

    def _rebuild(self, group: _Group, group_seeds: list[int]) -> None:
        """Begins the request anew on the group's live replica: the prompt followed by every
        committed token, with the hidden state of each (the prompt's from the prefill, the rest from
        the rounds), is what the group's drafters would hold now."""
        try:
            hidden = torch.cat([self.hidden.result(timeout_s=RESULT_TIMEOUT_S)] + [v.hidden for v in self.history])
        except Exception:  # the prompt's hidden states went with a failed target: no rebuild
            group.retry_at = float("inf")
            return
        tokens = self.prompt + [t for v in self.history for t in v.tokens]
        group.rebuild(tokens, hidden, self.sampling, group_seeds)
        self.rebuilds += 1

    def propose(self, request_id, index, k):
        group, local = self.owner[index]
        return self.groups[group].calls("propose", local, k)

    def evaluate(self, request_id, verified: Verified) -> Future:
        positions = len(verified.tokens)
        with self.lock:
            self.history.append(verified)
            sent = [(group, group.calls, group.calls("observe", verified) if group.state != "down" else None)
                    for group in self.groups]
        round_index = self.rounds
        self.rounds += 1

        def gather() -> Scores:
            parts = []
            for group, calls, response in sent:
                result = None
                if response is not None:
                    try:
                        result = response.result(timeout_s=RESULT_TIMEOUT_S)
                    except Exception:
                        with self.lock:
                            group.fail(calls)
                if result is None:  # the group was down for this round: its drafters slept
                    parts.append(_asleep(positions, len(group.names)))
                    continue
                scores, ready = result
                with self.lock:
                    if group.state == "up" and calls is group.calls:
                        group.ready_by_round[round_index] = np.array(ready, dtype=bool)  # Ray hands arrays over read-only
                parts.append(scores)
            return Scores.concat(parts)

        return self.executor.submit(gather)

    def release(self, request_id) -> None:
        """Frees the request on every group that holds it; a failed group holds nothing. Keys given
        up after a failed call are released too, unwaited: where their replica died, the call fails
        (nobody began them there), where it lives, it frees what the failed call left behind."""
        for group in self.groups:
            for calls in group.retired + ([group.calls] if group.state == "down" else []):
                calls("release")
        responses = [group.calls("release") for group in self.groups if group.state != "down"]
        for response in responses:
            wait_unless_lost(response, RESULT_TIMEOUT_S)


def _asleep(positions: int, drafters: int) -> Scores:
    return Scores(np.zeros((positions, drafters), np.float32), np.zeros((positions, drafters), np.float32),
                  np.zeros((positions, drafters), bool))
