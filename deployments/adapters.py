"""Adapters that make deployment handles look like the decode loop's Target, DrafterPool and
Selector, so the Ray app runs the same `hedgespec.decode.decode` as the in-process engine.

They live in the ingress's decode thread (blocking `.result()` is fine there) and are made per
request. Every call carries the request's key and a per-deployment sequence number (see
ordering.py); drafter-group calls carry the key as the multiplexed model id for the affinity router.
A round's critical path is two remote calls: the chosen group's `propose`, whose response is
passed unresolved into the target's `verify` (the draft goes group -> target directly). The
evaluation of every group and the learner's step run beside the next round.

Faults. Speculation is an optimisation, so a drafter group or the selector that fails costs speed,
never the request: a failed draft is replaced by the plain step, a failed group's drafters sleep
(the learner sees them asleep) until the request is rebuilt on a live replica under a new key (the
committed tokens and the target's hidden states so far: the state it would have had), and a failed
selector leaves the request on its last choice until a new learner is begun for it. A target that
fails takes the request's KV cache with it: the request ends with `Unavailable` (a 503 to the client).
"""
import threading
import time
from concurrent.futures import Executor, Future

import numpy as np
import torch
from ray.exceptions import RayActorError
from ray.serve.exceptions import RayServeException
from ray.serve.handle import DeploymentResponse

from hedgespec.config import SelectorConfig
from hedgespec.feedback import RoundFeedback
from hedgespec.interfaces import Draft, Verified
from hedgespec.pool import Scores, drafter_seeds
from hedgespec.sampling import Sampling

RESULT_TIMEOUT_S = 300.0
TARGET_TIMEOUT_S = 60.0  # a verify waits behind at most every other request's forward
RETRY_AFTER_S = 1.0  # between attempts to rebuild a request on a failed group or selector
FIRST_CHOICE_TIMEOUT_S = 2.0  # a request's first round waits this long for the selector, then draws uniformly
FIRST_BEGIN_TIMEOUT_S = 30.0  # ... and this long for a drafter group to have the prompt (after the prefill)


class Unavailable(Exception):
    """A deployment that the request cannot do without failed (the target): retry later."""


def lost(error: BaseException) -> bool:
    """The replica died or restarted (its per-request state went with it), or did not answer in time."""
    return isinstance(error, (RayActorError, RayServeException, TimeoutError, KeyError))


class _Calls:
    """Sequenced calls of one request (under one key) to one deployment."""

    def __init__(self, handle, key: str, affinity: bool = False):
        self.handle = handle.options(multiplexed_model_id=key) if affinity else handle
        self.key = key
        self.seq = 0

    def __call__(self, method: str, *args, seq: int | None = None):
        """seq: resend a call whose turn was never taken (its arguments failed before it ran)."""
        if seq is None:
            seq, self.seq = self.seq, self.seq + 1
        return getattr(self.handle, method).remote(self.key, seq, *args)


class RemoteTarget:
    def __init__(self, handle, request_id: str):
        self.calls = _Calls(handle, request_id)

    def prefill(self, request_id: str, tokens: list[int], sampling: Sampling, seed: int):
        # unresolved: the prompt's hidden states travel from the target to the groups directly
        return self.calls("prefill", tokens, sampling, seed)

    def verify(self, request_id: str, draft) -> Verified:
        seq = self.calls.seq
        try:
            return self.calls("verify", draft).result(timeout_s=TARGET_TIMEOUT_S)
        except Exception as error:
            if isinstance(draft, DeploymentResponse) and _failed(draft):
                # the drafter's group failed, so the target never ran this call: the plain step in its turn
                return self._result(self.calls("verify", Draft([]), seq=seq))
            if lost(error):
                raise Unavailable("the target replica failed") from error
            raise

    def _result(self, response):
        try:
            return response.result(timeout_s=TARGET_TIMEOUT_S)
        except Exception as error:
            if lost(error):
                raise Unavailable("the target replica failed") from error
            raise

    def release(self, request_id: str) -> None:
        try:
            self.calls("release").result(timeout_s=TARGET_TIMEOUT_S)
        except Exception as error:
            if not lost(error):  # a target that died has freed the request's cache already
                raise


def _failed(response: DeploymentResponse) -> bool:
    try:
        response.result(timeout_s=TARGET_TIMEOUT_S)
        return False
    except Exception:
        return True


class _Group:
    """One drafter group as one request sees it: `up` (its replica holds the request's state),
    `rebuilding` (a begin with the request's history was sent under a new key) or `down`."""

    def __init__(self, handle, names: list[str], request_id: str):
        self.handle, self.names, self.request_id = handle, names, request_id
        self.attempt = 0
        self.calls = _Calls(handle, request_id, affinity=True)
        self.state = "up"
        self.begun: DeploymentResponse | None = None
        self.ready = np.zeros(len(names), dtype=bool)
        self.retry_at = 0.0
        self.retired: list[_Calls] = []  # the keys before a rebuild: a replica that failed a call may still hold one

    def begin(self, *args) -> None:
        self.begun = self.calls("begin", *args)

    def rebuild(self, *args) -> None:
        self.attempt += 1
        self.retired.append(self.calls)
        self.calls = _Calls(self.handle, f"{self.request_id}~{self.attempt}", affinity=True)
        self.state = "rebuilding"
        self.begin(*args)

    def fail(self, calls: _Calls) -> None:
        """A call under `calls` failed; a failure of an earlier key changes nothing."""
        if calls is self.calls and self.state != "down":
            self.state, self.retry_at = "down", time.monotonic() + RETRY_AFTER_S
            self.ready[:] = False


class RemotePool:
    def __init__(self, groups: list[tuple], request_id: str, executor: Executor):
        """groups: (handle, drafter names) per drafter group, in pool order."""
        self.groups = [_Group(handle, names, request_id) for handle, names in groups]
        self.names = [name for _, names in groups for name in names]
        self.owner = [(g, j) for g, (_, names) in enumerate(groups) for j in range(len(names))]
        self.executor = executor
        self.lock = threading.Lock()  # group states change on the gathering threads too
        self.ready_round = -1  # which round's scores the groups' ready flags come from
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
            return np.concatenate([group.ready if group.state == "up" else np.zeros(len(group.names), bool)
                                   for group in self.groups])

    def _settle(self, group: _Group, wait: bool) -> None:
        """A begun group is up once its begin answered. The first round waits for every group (so
        that the choices do not depend on timing), but not for long: a group that is restarting
        or swamped stays asleep until it answers."""
        calls = group.calls
        if not wait and not _done(group.begun):
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
                    if round_index > self.ready_round and group.state == "up" and calls is group.calls:
                        group.ready = np.array(ready, dtype=bool)  # Ray hands arrays over read-only
                parts.append(scores)
            with self.lock:
                self.ready_round = max(self.ready_round, round_index)
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
            try:
                response.result(timeout_s=RESULT_TIMEOUT_S)
            except Exception as error:
                if not lost(error):
                    raise


def _done(response: DeploymentResponse) -> bool:
    try:
        response.result(timeout_s=0)
        return True
    except TimeoutError:
        return False
    except Exception:
        return True


def _asleep(positions: int, drafters: int) -> Scores:
    return Scores(np.zeros((positions, drafters), np.float32), np.zeros((positions, drafters), np.float32),
                  np.zeros((positions, drafters), bool))


class RemoteSelector:
    """Learner steps run remotely beside the rounds: the arm chosen for a round was computed from
    the feedback and awake set known one round earlier (the delayed-feedback learner is built to
    tolerate exactly this lag). While the selector is down, rounds keep its last choice (or a uniform
    draw before the first), and a new learner is begun for the request once a replica answers."""

    def __init__(self, handle, request_id: str, executor: Executor, seed: int, config: SelectorConfig, k: int):
        self.handle, self.request_id = handle, request_id
        self.calls = _Calls(handle, request_id)
        self.executor = executor
        self.seed, self.config, self.k = seed, config, k
        self.rng = np.random.default_rng(seed)
        self.feedback: list[RoundFeedback] = []
        self.next_choice: Future | None = None
        self.choice: int | None = None
        self.prompt_text = ""
        self.attempt = 0
        self.down_until: float | None = None  # set while the selector is down
        self.recoveries = 0
        self.ended = False

    def begin(self, prompt_text: str) -> None:
        self.prompt_text = prompt_text
        self.calls("begin", prompt_text, self.seed, self.config.model_dump(), self.k)

    def choose(self, awake: np.ndarray) -> int:
        if self.down_until is not None:
            if time.monotonic() < self.down_until:
                return self._fallback(awake)
            self._restart()
        step = self.calls("step", self.feedback, awake)
        self.feedback = []
        try:
            if self.choice is None and self.next_choice is None:  # the first round waits, briefly
                self.choice = step.result(timeout_s=FIRST_CHOICE_TIMEOUT_S)
            elif self.next_choice is not None and self.next_choice.done():
                self.choice = self.next_choice.result()
        except TimeoutError:
            pass  # a busy or restarting selector: this round draws uniformly, the step answers later
        except Exception:
            self.down_until = time.monotonic() + RETRY_AFTER_S
            return self._fallback(awake)
        self.next_choice = self.executor.submit(step.result, timeout_s=RESULT_TIMEOUT_S)
        return self._fallback(awake)

    def _restart(self) -> None:
        """A new learner under a new key: what the lost one learned is gone (and where its replica
        still lives, it is dropped, unwaited)."""
        self.attempt += 1
        self.calls("end", [])
        self.calls = _Calls(self.handle, f"{self.request_id}~{self.attempt}")
        self.down_until, self.next_choice, self.feedback = None, None, []
        self.recoveries += 1
        self.begin(self.prompt_text)

    def _fallback(self, awake: np.ndarray) -> int:
        """The latest choice where it is awake, else a uniform draw among the awake arms."""
        if self.choice is not None and awake[self.choice]:
            return self.choice
        return int(self.rng.choice(np.flatnonzero(awake)))

    def observe(self, round_feedback: RoundFeedback) -> None:
        self.feedback.append(round_feedback)

    def end(self) -> None:
        """Drops the request's learner state; the ingress calls it again after a failed or
        abandoned request, where the loop never reached its end."""
        if self.ended:
            return
        self.ended = True
        if self.down_until is not None:
            return  # the learner went with its replica
        try:
            self.calls("end", self.feedback).result(timeout_s=RESULT_TIMEOUT_S)
        except Exception as error:
            if not lost(error):
                raise
