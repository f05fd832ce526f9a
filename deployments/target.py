"""The Target deployment: the target model, its per-request KV caches, and verification."""
import asyncio
import logging
import threading

import torch

from ray import serve

from deployments.metrics import Recorder
from deployments.ordering import Sequencer
from hedgespec.config import TargetConfig
from hedgespec.interfaces import Draft, Verified
from hedgespec.models import loading
from hedgespec.models.runner import CachedLM
from hedgespec.models.target import HFTarget
from hedgespec.sampling import Sampling
from hedgespec.transport import compact, expand_draft

logger = logging.getLogger("ray.serve")


@serve.deployment(name="Target", max_ongoing_requests=512)
class TargetDeployment:
    def __init__(self, config: dict, threads: int | None, k: int):
        if threads:  # Ray caps a replica's threads at its num_cpus unless told otherwise
            torch.set_num_threads(threads)
        config = TargetConfig.model_validate(config)
        logger.info("target %s on the HF backend: one forward at a time, every drafter kind (target.backend: vllm "
                    "batches requests: serve_config.yaml)", config.model)
        model, _ = loading.load(config.model, config.dtype, config.device)
        self.target = HFTarget(CachedLM(model))
        self.target.lm.warm_up(range(1, k + 2))  # a verify of up to k drafts
        self.greedy: dict[str, bool] = {}
        # one forward at a time: requests interleave round by round (no cross-request batching yet)
        self.lock = threading.Lock()
        self.order = Sequencer()
        self.metrics = Recorder("hedgespec_target_forward_seconds")

    def _locked(self, fn, *args):
        with self.lock:
            return fn(*args)

    def _forward(self, phase: str, fn, *args):
        """A timed forward; the time waiting for the lock (other requests' forwards) is not its own."""
        with self.lock, self.metrics.timed("hedgespec_target_forward_seconds", phase=phase):
            return fn(*args)

    async def prefill(self, request_id: str, seq: int, tokens: list[int], sampling: Sampling, seed: int):
        async with self.order.turn(request_id, seq):
            self.greedy[request_id] = sampling.greedy
            hidden = await asyncio.to_thread(self._forward, "prefill", self.target.prefill, request_id, tokens, sampling, seed)
            return hidden.half()

    async def verify(self, request_id: str, seq: int, draft: Draft) -> Verified:
        async with self.order.turn(request_id, seq):
            draft = expand_draft(draft, self.target.vocab)
            verified = await asyncio.to_thread(self._forward, "verify", self.target.verify, request_id, draft)
            return compact(verified, self.greedy[request_id])

    async def release(self, request_id: str, seq: int) -> None:
        async with self.order.turn(request_id, seq):
            self.greedy.pop(request_id, None)
            await asyncio.to_thread(self._locked, self.target.release, request_id)
        self.order.forget(request_id)

    async def active(self) -> int:
        return self.target.active + self.order.active

    async def ready(self) -> bool:
        """The ingress's /health: a replica that answers has its model loaded."""
        return True
