"""The Target deployment on the vLLM backend (target.backend: vllm): one vLLM engine, continuously
batched, whose speculation runs inside its steps (hedgespec.vllm_engine). The ingress streams each
request's pieces from `generate`; a stream the ingress closes aborts its request in vLLM.

What the requests' learners learn across requests (their warm-start prior) is shared through the
Selector deployment, off every request's path: as requests start and end, at most every
SHARE_EVERY_S, the replica sends what its own finished requests taught and adopts what every
replica's taught, its own included (learners.priors.merge). So every Target replica, and one that
Serve restarts, starts its requests' learners from all of it; a Selector that is down or late only
delays the merge."""
import asyncio
import logging
import time

from ray import serve

from hedgespec.config import EngineConfig
from hedgespec.sampling import Sampling
from hedgespec.vllm_engine import VLLMEngine, sampling_params

logger = logging.getLogger("ray.serve")

SHARE_EVERY_S = 5.0
SHARE_TIMEOUT_S = 10.0


@serve.deployment(name="Target", max_ongoing_requests=512)
class VLLMTargetDeployment:
    def __init__(self, config: dict, selector=None):
        """`selector`: the Selector deployment's handle, where the learned priors are merged (None: kept here)."""
        self.engine = VLLMEngine(EngineConfig.model_validate(config))
        self.selector = selector
        self.replica = serve.get_replica_context().replica_id.unique_id
        self.shared_at = float("-inf")
        self.sharing: asyncio.Task | None = None

    async def generate(self, request_id: str, tokens: list[int], max_tokens: int, sampling: Sampling, seed: int,
                       speculation: dict):
        params = sampling_params(max_tokens, sampling, seed, speculation)
        self._share_soon()
        try:
            async for piece in self.engine.generate(request_id, tokens, params):
                yield piece
        finally:
            self._share_soon()

    def _share_soon(self) -> None:
        busy = self.sharing is not None and not self.sharing.done()
        if self.selector is None or busy or time.monotonic() - self.shared_at < SHARE_EVERY_S:
            return
        self.shared_at = time.monotonic()
        self.sharing = asyncio.ensure_future(self._share())

    async def _share(self) -> None:
        try:
            learned = await self.engine.learned()
            merged = await asyncio.wait_for(self.selector.share.remote(self.replica, learned), SHARE_TIMEOUT_S)
            await self.engine.adopt(merged)
        except Exception as error:  # noqa: BLE001 - the next request's end tries again
            logger.warning("sharing the learned priors with the Selector failed: %r", error)

    async def active(self) -> dict:
        """Requests running in vLLM, and those holding drafter or learner state in the proposer."""
        return {"requests": len(self.engine.running), "proposer": await self.engine.proposer_state()}

    async def costs(self) -> dict:
        """What the time objective prices a step with now (hedgespec.vllm_proposer.costs_snapshot)."""
        return await self.engine.costs()

    async def ready(self) -> bool:
        """The ingress's /health: a replica that answers has its engine up; a dead one raises."""
        await self.engine.check_health()
        return True

    async def check_health(self) -> None:
        """Serve's health check: a dead engine fails it, and Serve replaces the replica."""
        await self.engine.check_health()

    def __del__(self):
        self.engine.shutdown()
