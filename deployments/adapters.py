"""Adapters that make deployment handles look like the decode loop's Target and Selector (and,
in remote_pool.py, its DrafterPool), so the Ray app runs the same `hedgespec.decode.decode` as the
in-process engine.

They live in the ingress's decode thread (blocking `.result()` is fine there) and are made per
request. Every call carries the request's key and a per-deployment sequence number (see
ordering.py); drafter-group calls carry the key as the multiplexed model id for the affinity router.
A round's critical path is two remote calls: the chosen group's `propose`, whose response is
passed unresolved into the target's `verify` (the draft goes group -> target directly). The
evaluation of every group and the learner's step run beside the next round.

Faults. Speculation is an optimisation, so a drafter group or the selector that fails costs speed,
never the request: a failed draft (or one still missing after DRAFT_TIMEOUT_S) is replaced by the
plain step, a failed group's drafters sleep until the request is rebuilt on a live replica
(remote_pool.py), and a failed selector leaves the request on its last choice until a new learner
is begun for it. A target that fails takes the request's KV cache with it: the request ends with
`Unavailable` (a 503 to the client).
"""
import time
from concurrent.futures import Executor, Future
from dataclasses import replace

import numpy as np
from ray.exceptions import RayActorError
from ray.serve.exceptions import RayServeException
from ray.serve.handle import DeploymentResponse

from hedgespec.config import SelectorConfig
from hedgespec.feedback import RoundFeedback
from hedgespec.interfaces import Draft, Verified
from hedgespec.sampling import Sampling

RESULT_TIMEOUT_S = 300.0
TARGET_TIMEOUT_S = 60.0  # a verify waits behind at most every other request's forward
# a draft missing or failed by then: the verify waiting on it may never be answered (its draft's replica
# died as the call reached it), which held such a request for TARGET_TIMEOUT_S
DRAFT_TIMEOUT_S = 10.0
RETRY_AFTER_S = 1.0  # between attempts to rebuild a request on a failed group or selector
FIRST_CHOICE_TIMEOUT_S = 2.0  # a request's first round waits this long for the selector, then draws uniformly


class Unavailable(Exception):
    """A deployment that the request cannot do without failed (the target): retry later."""


def lost(error: BaseException) -> bool:
    """The replica died or restarted (its per-request state went with it), or did not answer in time."""
    return isinstance(error, (RayActorError, RayServeException, TimeoutError, KeyError))


def routed(handle):
    """The handle with its router made. Serve makes a handle's router on its first call (or
    `.options()`) without a lock, so the decode threads' first calls on a fresh handle would each
    make one: the first requests of a drafter group would then be placed by affinity routers that
    do not see each other's pins, and could all land on one replica."""
    return handle.options()


class Calls:
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
        self.calls = Calls(handle, request_id)

    def prefill(self, request_id: str, tokens: list[int], sampling: Sampling, seed: int):
        # unresolved: the prompt's hidden states travel from the target to the groups directly
        return self.calls("prefill", tokens, sampling, seed)

    def verify(self, request_id: str, draft) -> Verified:
        seq = self.calls.seq
        try:
            try:
                return _verified(self.calls("verify", draft), draft)
            except Exception:
                if not (isinstance(draft, DeploymentResponse) and _failed(draft)):
                    raise
            # the drafter's group failed, so the target never ran this call: the plain step in its turn
            return self.calls("verify", Draft([]), seq=seq).result(timeout_s=TARGET_TIMEOUT_S)
        except Exception as error:
            if lost(error):
                raise Unavailable("the target replica failed") from error
            raise

    def release(self, request_id: str) -> None:
        # a target that died has freed the request's cache already
        wait_unless_lost(self.calls("release"), TARGET_TIMEOUT_S)


def wait_unless_lost(response: DeploymentResponse, timeout_s: float) -> None:
    """Waits for a call that frees state; where its replica is lost, the state went with it."""
    try:
        response.result(timeout_s=timeout_s)
    except Exception as error:
        if not lost(error):
            raise


def _verified(response: DeploymentResponse, draft) -> Verified:
    """The verify's answer. Where its draft is a drafter group's answer that is missing or failed
    after DRAFT_TIMEOUT_S, the target has not begun the verify (its argument never came) and may
    never: a draft whose replica died as the call reached it failed with ActorUnavailableError at
    the ingress while the verify waiting on it stayed unanswered. Both are cancelled then, and the
    draft counts as failed."""
    if not isinstance(draft, DeploymentResponse):
        return response.result(timeout_s=TARGET_TIMEOUT_S)
    try:
        return response.result(timeout_s=DRAFT_TIMEOUT_S)
    except TimeoutError:
        if outcome(draft):  # the target has the draft: the verify waits behind other requests' forwards
            return response.result(timeout_s=TARGET_TIMEOUT_S - DRAFT_TIMEOUT_S)
        response.cancel()
        draft.cancel()
        raise


def outcome(response: DeploymentResponse) -> bool | None:
    """Asks without waiting: None while the call has not answered, else whether it answered without
    failing."""
    try:
        response.result(timeout_s=0)
        return True
    except TimeoutError:
        return None
    except Exception:
        return False


def _failed(response: DeploymentResponse) -> bool:
    try:
        response.result(timeout_s=TARGET_TIMEOUT_S)
        return False
    except Exception:
        return True


class RemoteSelector:
    """Learner steps run remotely beside the rounds: the arm chosen for a round was computed from
    the feedback and awake set known one round earlier (the delayed-feedback learner is built to
    tolerate exactly this lag). While the selector is down, rounds keep its last choice (or a uniform
    draw before the first), and a new learner is begun for the request once a replica answers."""

    def __init__(self, handle, request_id: str, executor: Executor, seed: int, config: SelectorConfig, k: int):
        self.handle, self.request_id = handle, request_id
        self.calls = Calls(handle, request_id)
        self.executor = executor
        self.seed, self.config, self.k = seed, config, k
        self.rng = np.random.default_rng(seed)
        self.feedback: list[RoundFeedback] = []
        self.next_choice: Future | None = None
        self.choice: tuple[int, float | None] | None = None  # the latest answer: an arm and its draw's probability
        self.played: float | None = 0.0  # the probability of the draw the current round plays (0: a fallback)
        self.late = False  # the latest answer missed its round: rounds stop waiting for answers
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
            elif self.next_choice is not None and (not self.late or self.next_choice.done()):
                # the answer to the round before: a fixed lag of one round (it had a whole round to
                # arrive), so that the choices, and a seeded sampled text, do not depend on timing;
                # after one late answer, no round waits again until an answer is on time
                self.choice = self.next_choice.result(timeout=FIRST_CHOICE_TIMEOUT_S)
                self.late = False
        except TimeoutError:
            self.late = True  # a busy or dead selector: this round keeps the older choice (or draws uniformly)
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
        self.calls = Calls(self.handle, f"{self.request_id}~{self.attempt}")
        self.down_until, self.next_choice, self.feedback = None, None, []
        if self.choice is not None:  # kept as the arm to play, but it is no draw of the new learner
            self.choice = (self.choice[0], 0.0)
        self.recoveries += 1
        self.begin(self.prompt_text)

    def _fallback(self, awake: np.ndarray) -> int:
        """The latest choice where it is awake, else the first awake arm (the plain step under the
        time objective); a uniform draw among the awake arms where the selector never answered.
        Notes the probability of the learner's draw that the round plays (0: not its draw)."""
        self.played = 0.0
        if self.choice is None:
            return int(self.rng.choice(np.flatnonzero(awake)))
        arm, probability = self.choice
        if awake[arm]:
            self.played = probability
            return arm
        return int(np.argmax(awake))

    def observe(self, round_feedback: RoundFeedback) -> None:
        if round_feedback.chosen is not None:
            round_feedback = replace(round_feedback, played_probability=self.played)
        self.feedback.append(round_feedback)

    def end(self) -> None:
        """Drops the request's learner state; the ingress calls it again after a failed or
        abandoned request, where the loop never reached its end."""
        if self.ended:
            return
        self.ended = True
        if self.down_until is not None:
            return  # the learner went with its replica
        wait_unless_lost(self.calls("end", self.feedback), RESULT_TIMEOUT_S)
