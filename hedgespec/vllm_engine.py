"""The vLLM backend (target.backend: vllm): a vLLM engine, continuously batched, whose speculation
is HedgeSpec's (the pool and the learner inside vLLM's steps, hedgespec.vllm_proposer), vLLM's own
n-gram lookup, or none, from the one typed config. vllm is imported here only: the proposer
(vllm_proposer.py) and its worker methods (vllm_control.py) are named to vLLM, which loads them in its worker.

vLLM verifies the drafts and batches every running request into each step; its worker process
calls the proposer after each step with every request's newly committed tokens. The proposer's
configuration reaches that process (spawned by vLLM) through an environment variable, set before
the engine starts.
"""
import asyncio
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from hedgespec.config import EngineConfig, SelectorConfig
from hedgespec.decode import Round
from hedgespec.learners.priors import Learned
from hedgespec.models import loading
from hedgespec.sampling import Sampling

RPC_TIMEOUT_S = 10.0  # a worker RPC (the proposer's state) that takes longer: the engine is stuck
PROPOSER_ENV = "HEDGESPEC_VLLM_PROPOSER"  # the EngineConfig (JSON) the proposer builds its pool from
PROPOSER = "hedgespec.vllm_proposer.HedgeSpecProposer"
EXTENSION = "hedgespec.vllm_control.ProposerControl"  # worker methods: the proposer's state, and its release


def engine_arguments(config: EngineConfig) -> dict:
    """vLLM's engine arguments for the config's target and speculation."""
    target, settings = config.target, config.target.vllm
    folder = str(loading.resolve(target.model))
    arguments = {"model": folder, "tokenizer": folder, "dtype": loading.resolve_dtype(target.dtype, target.device),
                 "enforce_eager": settings.enforce_eager, "max_model_len": settings.max_model_len,
                 "max_num_seqs": settings.max_num_seqs, "stream_interval": settings.stream_interval, "seed": 0,
                 "worker_extension_cls": EXTENSION}
    if target.device != "cpu":
        arguments["gpu_memory_utilization"] = settings.gpu_memory_utilization
    if settings.speculation == "ngram":
        arguments["speculative_config"] = {"method": "ngram", "num_speculative_tokens": config.k,
                                           "prompt_lookup_max": settings.ngram_max,
                                           "prompt_lookup_min": settings.ngram_min}
    elif settings.speculation == "hedgespec" and config.drafters:
        arguments["speculative_config"] = {"method": "custom_class", "model": PROPOSER,
                                           "num_speculative_tokens": config.k}
    return arguments


def environment(config: EngineConfig) -> dict[str, str]:
    """What vLLM's processes need in their environment: offline model loading, the CPU KV cache,
    threads and their binding, the Intel OpenMP runtime the CPU wheel ships (vLLM asks for it; it doubled
    n-gram speculation's speed in ../shared/docs/vllm-notes.md), and the proposer's config."""
    env = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", PROPOSER_ENV: config.model_dump_json()}
    if config.target.device == "cpu":
        env["VLLM_CPU_KVCACHE_SPACE"] = f"{config.target.vllm.kv_cache_gib:g}"
        env["VLLM_CPU_OMP_THREADS_BIND"] = config.target.vllm.cpu_threads_bind
        # Ray sets OMP_NUM_THREADS to an actor's num_cpus, and the engine's processes inherit it
        env["OMP_NUM_THREADS"] = str(config.target.vllm.cpu_threads or len(os.sched_getaffinity(0)))
        iomp = Path(sys.prefix) / "lib" / "libiomp5.so"
        if iomp.is_file():
            env["LD_PRELOAD"] = str(iomp)
    return env


def speculation_args(speculate: bool, selector: SelectorConfig | None, k: int | None) -> dict:
    """A request's own speculation, carried to the proposer in vLLM's SamplingParams.extra_args."""
    return {"hedgespec": {"speculate": speculate, "selector": selector.model_dump() if selector else None, "k": k}}


def sampling_params(max_tokens: int, sampling: Sampling, seed: int, speculation: dict | None = None,
                    logprobs: int | None = None):
    """Token ids only: the caller detokenizes and applies stop strings (hedgespec.text.TextStream,
    as for the HF backend), and ends the request where one matches by closing `generate`.
    `logprobs`: also each token's top log-probabilities, that many (bench/vllm_ties.py)."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind
    return SamplingParams(temperature=sampling.temperature, top_k=sampling.top_k or 0, top_p=sampling.top_p,
                          seed=seed, max_tokens=max_tokens, output_kind=RequestOutputKind.DELTA, detokenize=False,
                          extra_args=speculation, logprobs=logprobs)


@dataclass
class Piece:
    """What one engine output added to a request."""
    tokens: list[int]
    finish_reason: str | None  # "stop" or "length" on the last piece
    rounds: list[Round] = field(default_factory=list)  # on the last piece: how the request was speculated
    logprobs: list[dict[int, float]] | None = None  # per token, where asked for: its top log-probabilities


class VLLMEngine:
    """An AsyncLLM for the config; `generate` streams a request's pieces as vLLM's steps make them.
    A generate that is closed early (the client went away) aborts its request in vLLM."""

    def __init__(self, config: EngineConfig):
        os.environ.update(environment(config))
        from vllm import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM
        self.config = config
        self.engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**engine_arguments(config)))
        self.running: set[str] = set()

    async def generate(self, request_id: str, tokens: list[int], params) -> AsyncIterator[Piece]:
        """The request's pieces; the last one (finish_reason set) carries its speculation rounds."""
        self.running.add(request_id)
        released = False
        try:
            async for output in self.engine.generate({"prompt_token_ids": tokens}, params, request_id):
                completion = output.outputs[0]
                logprobs = ([{token: float(lp.logprob) for token, lp in position.items()} for position in completion.logprobs]
                            if completion.logprobs is not None else None)
                if output.finished:
                    released = True
                    yield Piece(list(completion.token_ids), completion.finish_reason, await self.release(request_id),
                                logprobs)
                else:
                    yield Piece(list(completion.token_ids), None, logprobs=logprobs)
        finally:
            self.running.discard(request_id)
            if not released:  # aborted (vLLM's generate aborts it on the way out): free the proposer's state now
                await asyncio.shield(self.release(request_id))

    async def _ask_proposer(self, method: str, *args) -> list:
        """Every worker's answer to a ProposerControl method; none without HedgeSpec speculation."""
        if self.config.target.vllm.speculation != "hedgespec":
            return []
        return await self.engine.collective_rpc(method, RPC_TIMEOUT_S, args=args)

    async def release(self, request_id: str) -> list[Round]:
        """Ends the request's drafter and learner state in the proposer now, rather than at the next
        step that no longer holds it (an idle engine runs no step); its rounds."""
        answers = await self._ask_proposer("hedgespec_release", [request_id])
        return [Round(*fields) for answer in answers for fields in answer.get(request_id, [])]

    async def proposer_state(self) -> int:
        """Requests holding drafter or learner state in the proposer (0 when idle)."""
        return sum(await self._ask_proposer("hedgespec_active"))

    async def learned(self) -> Learned:
        """What the learners of the requests that ended in this engine taught (empty without HedgeSpec)."""
        answers = await self._ask_proposer("hedgespec_learned")
        return answers[0] if answers else {}

    async def adopt(self, merged: Learned) -> None:
        """New requests' learners start from `merged` (learners.priors)."""
        await self._ask_proposer("hedgespec_adopt", merged)

    async def costs(self) -> dict:
        """The proposer's cost estimates (empty without HedgeSpec speculation)."""
        answers = await self._ask_proposer("hedgespec_costs")
        return answers[0] if answers else {}

    async def check_health(self) -> None:
        """Raises once the engine is dead (vLLM's EngineDeadError): Serve then restarts the replica."""
        await self.engine.check_health()

    def shutdown(self) -> None:
        if self.engine is not None:
            self.engine.shutdown()
            # gone now, not at interpreter exit, where vLLM's own __del__ would shut it down again
            # without the modules it needs (a traceback on every exit)
            self.engine = None
