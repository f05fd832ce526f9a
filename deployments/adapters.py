"""Adapters that make deployment handles look like the decode loop's Target, DrafterPool and
Selector, so the Ray app runs the same `hedgespec.decode.decode` as the in-process engine.

They live in the ingress's decode thread (blocking `.result()` is fine there) and are made per
request. Every call carries the request id and a per-deployment sequence number (see ordering.py);
drafter-group calls carry the request id as the multiplexed model id for the affinity router.
A round's critical path is two remote calls: the chosen group's `propose`, whose response is
passed unresolved into the target's `verify` (the draft goes group -> target directly). The
evaluation of every group and the learner's step run beside the next round.
"""
from concurrent.futures import Executor, Future

import numpy as np

from hedgespec.config import SelectorConfig
from hedgespec.feedback import RoundFeedback
from hedgespec.interfaces import Verified
from hedgespec.pool import Scores, drafter_seeds
from hedgespec.sampling import Sampling

RESULT_TIMEOUT_S = 300.0


class _Calls:
    """Sequenced calls of one request to one deployment."""

    def __init__(self, handle, request_id: str, affinity: bool = False):
        self.handle = handle.options(multiplexed_model_id=request_id) if affinity else handle
        self.request_id = request_id
        self.seq = 0

    def __call__(self, method: str, *args):
        response = getattr(self.handle, method).remote(self.request_id, self.seq, *args)
        self.seq += 1
        return response


class RemoteTarget:
    def __init__(self, handle, request_id: str):
        self.calls = _Calls(handle, request_id)

    def prefill(self, request_id: str, tokens: list[int], sampling: Sampling, seed: int):
        # unresolved: the prompt's hidden states travel from the target to the groups directly
        return self.calls("prefill", tokens, sampling, seed)

    def verify(self, request_id: str, draft) -> Verified:
        return self.calls("verify", draft).result(timeout_s=RESULT_TIMEOUT_S)

    def release(self, request_id: str) -> None:
        self.calls("release").result(timeout_s=RESULT_TIMEOUT_S)


class RemotePool:
    def __init__(self, groups: list[tuple], request_id: str, executor: Executor):
        """groups: (handle, drafter names) per drafter group, in pool order."""
        self.groups = [(_Calls(handle, request_id, affinity=True), names) for handle, names in groups]
        self.names = [name for _, names in groups for name in names]
        self.owner = [(g, j) for g, (_, names) in enumerate(groups) for j in range(len(names))]
        self.executor = executor
        self.ready: np.ndarray | None = None
        self.ready_round = -1  # which round's scores the ready flags come from
        self.rounds = 0
        self.begun: list = []

    def begin(self, request_id, tokens, hidden, sampling, seed):
        seeds = iter(drafter_seeds(seed, len(self.names)))
        self.begun = [calls("begin", tokens, hidden, sampling, [next(seeds) for _ in names])
                      for calls, names in self.groups]

    def awake(self, request_id) -> np.ndarray:
        if self.ready is None:  # the first round waits for the groups to have the prompt
            self.ready = np.concatenate([r.result(timeout_s=RESULT_TIMEOUT_S) for r in self.begun])
        return self.ready

    def propose(self, request_id, index, k):
        group, local = self.owner[index]
        return self.groups[group][0]("propose", local, k)

    def evaluate(self, request_id, verified: Verified) -> Future:
        responses = [calls("observe", verified) for calls, _ in self.groups]
        round_index = self.rounds
        self.rounds += 1

        def gather() -> Scores:
            results = [r.result(timeout_s=RESULT_TIMEOUT_S) for r in responses]
            if round_index > self.ready_round:  # flags from a later round may have landed first
                self.ready, self.ready_round = np.concatenate([ready for _, ready in results]), round_index
            return Scores.concat([scores for scores, _ in results])

        return self.executor.submit(gather)

    def release(self, request_id) -> None:
        for response in [calls("release") for calls, _ in self.groups]:
            response.result(timeout_s=RESULT_TIMEOUT_S)


class RemoteSelector:
    """Learner steps run remotely beside the rounds: the drafter chosen for a round was computed
    from the feedback and awake set known one round earlier (the delayed-feedback learner is built
    to tolerate exactly this lag)."""

    def __init__(self, handle, request_id: str, executor: Executor, seed: int, config: SelectorConfig, k: int):
        self.calls = _Calls(handle, request_id)
        self.executor = executor
        self.seed, self.config, self.k = seed, config, k
        self.feedback: list[RoundFeedback] = []
        self.next_choice: Future | None = None
        self.choice = 0
        self.ended = False

    def begin(self, prompt_text: str) -> None:
        self.calls("begin", prompt_text, self.seed, self.config.model_dump(), self.k)

    def choose(self, awake: np.ndarray) -> int:
        step = self.calls("step", self.feedback, awake)
        self.feedback = []
        if self.next_choice is None:  # first round: nothing to lag behind yet
            self.choice = step.result(timeout_s=RESULT_TIMEOUT_S)
        elif self.next_choice.done():
            self.choice = self.next_choice.result()
        self.next_choice = self.executor.submit(step.result, timeout_s=RESULT_TIMEOUT_S)
        return self.choice if awake[self.choice] else int(np.argmax(awake))

    def observe(self, round_feedback: RoundFeedback) -> None:
        self.feedback.append(round_feedback)

    def end(self) -> None:
        """Drops the request's learner state; the ingress calls it again after a failed or
        abandoned request, where the loop never reached its end."""
        if not self.ended:
            self.ended = True
            self.calls("end", self.feedback).result(timeout_s=RESULT_TIMEOUT_S)
