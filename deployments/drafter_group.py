"""A DrafterGroup deployment: some drafters of the pool in a LocalPool, their per-request state, and
their part of the evaluation phase (each drafter scores itself against the target's compact
distributions on the pool's worker thread, beside the next round; a propose catches up only the
drafter it asks)."""
import asyncio

import numpy as np
import torch
from ray import serve
from ray.serve.config import RequestRouterConfig

from deployments.metrics import Recorder
from deployments.ordering import Sequencer
from deployments.routing import RequestAffinityRouter
from hedgespec.config import DrafterConfig, TargetConfig
from hedgespec.drafters import build_drafters
from hedgespec.evaluation import Scores
from hedgespec.interfaces import Draft, Verified
from hedgespec.models import loading
from hedgespec.pool import LocalPool
from hedgespec.sampling import Sampling
from hedgespec.transport import compact_draft, expand


@serve.deployment(max_ongoing_requests=512,
                  request_router_config=RequestRouterConfig(request_router_class=RequestAffinityRouter))
class DrafterGroup:
    def __init__(self, drafters: list[dict], target: dict, threads: int | None, k: int):
        if threads:
            torch.set_num_threads(threads)
        target = TargetConfig.model_validate(target)
        tokenizer = loading.load_tokenizer(target.model)
        self.vocab = loading.vocab_size(target.model)
        configs = [DrafterConfig.model_validate(d) for d in drafters]
        self.pool = LocalPool(build_drafters(configs, self.vocab, tokenizer, target, k))
        self.names = self.pool.names
        self.label = "+".join(self.names)  # the group, named as /stats names it
        self.metrics = Recorder("hedgespec_draft_seconds", "hedgespec_evaluation_phase_seconds")
        self.order = Sequencer()
        self.greedy: dict[str, bool] = {}

    def _state(self, request_id: str) -> None:
        if request_id not in self.greedy:
            raise KeyError(f"request {request_id} has no state on this replica (it began elsewhere or ended)")

    async def begin(self, request_id: str, seq: int, tokens: list[int], hidden, sampling: Sampling, seeds: list[int]):
        async with self.order.turn(request_id, seq):
            self.greedy[request_id] = sampling.greedy
            await asyncio.to_thread(self.pool.begin_seeded, request_id, tokens, hidden.float(), sampling, seeds)
            return self.pool.awake(request_id)

    async def propose(self, request_id: str, seq: int, index: int, k: int) -> Draft:
        async with self.order.turn(request_id, seq):
            self._state(request_id)
            with self.metrics.timed("hedgespec_draft_seconds", drafter=self.names[index]):
                draft = await asyncio.to_thread(self.pool.propose, request_id, index, k)
            # greedy verification reads only the tokens: leave the distributions behind
            return Draft(draft.tokens, seconds=draft.seconds) if self.greedy[request_id] else compact_draft(draft)

    async def observe(self, request_id: str, seq: int, verified: Verified) -> tuple[Scores, np.ndarray]:
        async with self.order.turn(request_id, seq):  # only the hand-over is ordered: the scoring runs beside
            self._state(request_id)
            index = self.pool.evaluated(request_id)
            scores = self.pool.evaluate(request_id, expand(verified, self.vocab))
        with self.metrics.timed("hedgespec_evaluation_phase_seconds", group=self.label):
            result = await asyncio.wrap_future(scores)
        return result, self.pool.ready_after(request_id, index)

    async def release(self, request_id: str, seq: int) -> None:
        async with self.order.turn(request_id, seq):
            self.greedy.pop(request_id, None)
            await asyncio.to_thread(self.pool.release, request_id)
        self.order.forget(request_id)

    async def active(self) -> int:
        """Requests holding state here (drafter caches included): 0 when idle."""
        return len(self.greedy) + self.pool.active + self.order.active
