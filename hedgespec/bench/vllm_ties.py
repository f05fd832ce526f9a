"""`hedgespec bench ties` on the vLLM backend: what "lossless" means in bfloat16 there, measured.

vLLM verifies a draft in one forward over the draft and one more token, and decodes without one a
token per forward; in bfloat16 the two ways do not give bit-identical logits, so HedgeSpec's greedy
text can leave vLLM's own where the target is nearly tied. One engine (the config's, HedgeSpec as
its speculation) decodes each prompt twice, both times with every token's top-2 log-probabilities:
without drafts (`speculate: false`, vLLM's own decoding) and with HedgeSpec. The bound is the
largest difference between the two runs' log-probabilities of the same token at the same position,
over the positions where both texts agree: how far the two ways of computing moved a log-probability
in this very run. A divergence is explained only where the plain run's top-2 margin at the first
differing token is at most twice that bound (each side may be off by the bound, in opposite
directions); any other divergence is a bug.
"""
import asyncio
import uuid

from hedgespec.bench.ties import first_difference, report, verdict
from hedgespec.config import EngineConfig
from hedgespec.models import loading
from hedgespec.sampling import Sampling
from hedgespec.text import encode_prompt
from hedgespec.vllm_engine import VLLMEngine, sampling_params, speculation_args


async def _decode(engine: VLLMEngine, tokens: list[int], max_tokens: int, speculate: bool) -> tuple[list[int], list[dict]]:
    """The greedy continuation and each of its tokens' top-2 log-probabilities."""
    params = sampling_params(max_tokens, Sampling(), 0, speculation_args(speculate, None, None), logprobs=2)
    out, logprobs = [], []
    async for piece in engine.generate(uuid.uuid4().hex, tokens, params):
        out += piece.tokens
        logprobs += piece.logprobs or []
    return out, logprobs


def compare(plain: list[int], plain_logprobs: list[dict], spec: list[int], spec_logprobs: list[dict]) -> dict:
    """Where two greedy runs part, the plain run's top-2 margin there, and the largest difference of
    the log-probability of the same token at the same position before it."""
    first = first_difference(plain, spec)
    agreed = len(plain) if first is None else first
    gap = max((abs(plain_logprobs[i][t] - spec_logprobs[i][t]) for i, t in enumerate(plain[:agreed])), default=0.0)
    margin = None
    if first is not None and first < len(plain_logprobs):
        top = sorted(plain_logprobs[first].values(), reverse=True)
        margin = top[0] - top[1] if len(top) > 1 else float("inf")
    return {"identical": first is None, "first_difference": first, "gap": gap, "margin": margin}


def run(config: EngineConfig, prompts: list[str], max_tokens: int) -> dict:
    tokenizer = loading.load_tokenizer(config.target.model)
    engine = VLLMEngine(config)

    async def both() -> list[dict]:
        rows = []
        for prompt in prompts:
            tokens = encode_prompt(tokenizer, prompt, True)
            plain = await _decode(engine, tokens, max_tokens, speculate=False)
            spec = await _decode(engine, tokens, max_tokens, speculate=True)
            rows.append({"prompt": prompt[:60], **compare(*plain, *spec)})
        return rows

    try:
        rows = asyncio.run(both())
    finally:
        engine.shutdown()
    return verdict(loading.resolve_dtype(config.target.dtype, config.target.device), max(row["gap"] for row in rows), rows)


def main(config: EngineConfig, prompts: list[str], max_tokens: int) -> int:
    measured = run(config, prompts, max_tokens)
    print(f"target {config.target.model} on vLLM in {measured['dtype']}: log-probabilities of the same token in vLLM's "
          f"plain decoding and in HedgeSpec's verify forwards differ by <= {measured['bound']:.4f}; "
          f"{100 * measured['identical_share']:.0f}% of {len(prompts)} prompts byte-identical")
    return report(measured)
