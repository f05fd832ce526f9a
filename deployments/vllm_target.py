"""The Target deployment on the vLLM backend (target.backend: vllm): one vLLM engine, continuously
batched, whose speculation runs inside its steps (hedgespec.vllm_engine). The ingress streams each
request's pieces from `generate`; a stream the ingress closes aborts its request in vLLM."""
from ray import serve

from hedgespec.config import EngineConfig
from hedgespec.sampling import Sampling
from hedgespec.vllm_engine import VLLMEngine, sampling_params


@serve.deployment(name="Target", max_ongoing_requests=512)
class VLLMTargetDeployment:
    def __init__(self, config: dict):
        self.engine = VLLMEngine(EngineConfig.model_validate(config))

    async def generate(self, request_id: str, tokens: list[int], max_tokens: int, sampling: Sampling, seed: int,
                       speculation: dict):
        params = sampling_params(max_tokens, sampling, seed, speculation)
        async for piece in self.engine.generate(request_id, tokens, params):
            yield piece

    async def active(self) -> dict:
        """Requests running in vLLM, and those holding drafter or learner state in the proposer."""
        return {"requests": len(self.engine.running), "proposer": await self.engine.proposer_state()}

    async def check_health(self) -> None:
        """Serve's health check: a dead engine fails it, and Serve replaces the replica."""
        await self.engine.check_health()

    def __del__(self):
        self.engine.shutdown()
