"""`hedgespec bench engines`: the vLLM engines alone, without Ray Serve or HTTP: aggregate tokens/s
of N concurrent greedy requests per kind of speculation, every engine in this one process, taking
turns as in `hedgespec bench load`.

`bench load` measures the app as clients see it; this measures what the engines give, so that the
two side by side split a gap between kinds into the engine's share (the proposer, the load gate,
vLLM's spec-decode path) and the serving path's (the deployments, the streams, the RPCs the app
makes per request). Per N and repeat every kind runs once, in an order rotating with both; a kind's
tokens/s is the median over repeats, its ratio to the first kind the median of the repeats' ratios.

Kind `hedgespec-off` is HedgeSpec's engine (the same one, where `hedgespec` runs too) with every
request asking for no speculation: vLLM's spec-decode path and the proposer's call with no draft in
any step, so that against `none` it shows what running in spec mode costs by itself.

A kind may name the engine's K after it, `hedgespec@k=8` (the config's `k` otherwise): the most
tokens a step drafts, for HedgeSpec's learner and for vLLM's n-gram alike, so that one run compares
reaches (each K its own engine).
"""
import asyncio
import statistics
import time
import uuid

from hedgespec.bench import paired_ratio, rotated
from hedgespec.config import EngineConfig
from hedgespec.models import loading
from hedgespec.sampling import Sampling
from hedgespec.text import encode_prompt
from hedgespec.vllm_engine import VLLMEngine, sampling_params, speculation_args


NO_DRAFTS = "hedgespec-off"
KINDS = ("none", "ngram", "hedgespec", NO_DRAFTS)


def with_speculation(config: EngineConfig, kind: str, **vllm_settings) -> EngineConfig:
    """The config with the vLLM engine's speculation `kind` (and any other of its settings given)."""
    settings = config.target.vllm.model_copy(update={"speculation": kind, **vllm_settings})
    return config.model_copy(update={"target": config.target.model_copy(update={"vllm": settings})})


def engine_kind(kind: str) -> str:
    """The engine a kind runs on: its speculation and its K setting, if any (`hedgespec-off@k=8`
    runs on `hedgespec@k=8`'s engine)."""
    name, at, setting = kind.partition("@")
    return ("hedgespec" if name == NO_DRAFTS else name) + at + setting


def engine_config(config: EngineConfig, engine: str) -> EngineConfig:
    """The config of an engine_kind: its speculation, and its K where it names one."""
    name, _, setting = engine.partition("@")
    if setting:
        key, _, value = setting.partition("=")
        if key != "k" or not value.isdigit():
            raise ValueError(f"kind {engine!r}: after '@' only k=N (the engine's K) is understood")
        config = EngineConfig.model_validate(config.model_dump() | {"k": int(value)})
    return with_speculation(config, name)


async def _tokens(engine: VLLMEngine, prompt: list[int], max_tokens: int, speculate: bool) -> int:
    params = sampling_params(max_tokens, Sampling(), 0, speculation_args(speculate, None, None))
    return sum([len(piece.tokens) async for piece in engine.generate(uuid.uuid4().hex, prompt, params)])


async def _level(engine: VLLMEngine, speculate: bool, prompts: list[list[int]], clients: int, per_client: int,
                 max_tokens: int) -> float:
    """`clients` concurrent clients, each sending its requests one after another (request i: prompt
    i, cycling; every prompt at least once); aggregate tokens/s over the wall time."""
    total = max(len(prompts), clients * per_client)

    async def client(c: int) -> int:
        return sum([await _tokens(engine, prompts[i % len(prompts)], max_tokens, speculate)
                    for i in range(c, total, clients)])

    start = time.perf_counter()
    tokens = sum(await asyncio.gather(*[client(c) for c in range(clients)]))
    return tokens / (time.perf_counter() - start)


def run(config: EngineConfig, prompts: list[str], kinds: list[str], levels: list[int], per_client: int,
        max_tokens: int, repeats: int) -> dict:
    if config.target.backend != "vllm":
        raise ValueError("bench engines compares vLLM engines: the config's target.backend must be vllm")
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, not {repeats}")
    names = {kind: kind.partition("@")[0] for kind in kinds}
    if unknown := [kind for kind, name in names.items() if name not in KINDS]:
        raise ValueError(f"unknown kinds {unknown}; expected some of {', '.join(KINDS)}, each with @k=N or not")
    # every kind's settings checked before any engine starts
    configs = {engine: engine_config(config, engine) for engine in map(engine_kind, kinds)}
    tokenizer = loading.load_tokenizer(config.target.model)
    encoded = [encode_prompt(tokenizer, prompt, True) for prompt in prompts]
    engines = {engine: VLLMEngine(settings) for engine, settings in configs.items()}
    runs = {kind: (engines[engine_kind(kind)], names[kind] != NO_DRAFTS) for kind in kinds}
    rates = {kind: {n: [] for n in levels} for kind in kinds}

    async def measure() -> dict:
        for n, clients in enumerate(levels):
            for kind in kinds:  # warm-up at this concurrency (vLLM compiles per batch shape on first use)
                await _level(*runs[kind], encoded[:clients], clients, 1, 8)
            for repeat in range(repeats):
                for kind in rotated(kinds, n + repeat):
                    rates[kind][clients].append(await _level(*runs[kind], encoded, clients, per_client, max_tokens))
        return {kind: await engine.costs() for kind, engine in engines.items()}

    try:
        costs = asyncio.run(measure())
    finally:
        for engine in engines.values():
            engine.shutdown()
    baseline = kinds[0]
    return {"target": config.target.model_dump(), "dtype": loading.resolve_dtype(config.target.dtype, config.target.device),
            "k": config.k, "kinds": kinds, "levels": levels, "repeats": repeats,
            "requests_per_client": per_client, "max_tokens": max_tokens, "prompts": len(prompts),
            "tokens_per_s": {kind: {n: statistics.median(r) for n, r in by_level.items()} for kind, by_level in rates.items()},
            "tokens_per_s_repeats": rates,
            "vs_baseline": {kind: {n: paired_ratio(r, rates[baseline][n]) for n, r in by_level.items()}
                            for kind, by_level in rates.items()},
            "step_costs": costs}


def main(config: EngineConfig, prompts: list[str], kinds: list[str], levels: list[int], per_client: int,
         max_tokens: int, repeats: int) -> dict:
    result = run(config, prompts, kinds, levels, per_client, max_tokens, repeats)
    target = result["target"]
    print(f"{target['model']} in vLLM engines in one process ({result['dtype']}), "
          f"K={config.k} where a kind names none, greedy, <= {max_tokens} tokens, {len(prompts)} prompts, "
          f"{per_client} requests per client, "
          f"{repeats} repeat(s) per level, kinds taking turns (tokens/s: the median; vs {kinds[0]}: the median of the "
          f"repeats' ratios)")
    print(f"| speculation | clients | tokens/s | per repeat | vs {kinds[0]} |")
    print("|---|---|---|---|---|")
    for kind in kinds:
        for n in levels:
            per_repeat = "/".join(f"{rate:.0f}" for rate in result["tokens_per_s_repeats"][kind][n])
            print(f"| {kind} | {n} | {result['tokens_per_s'][kind][n]:.1f} | {per_repeat} | "
                  f"{result['vs_baseline'][kind][n]:.2f}x |")
    for kind, costs in result["step_costs"].items():
        if costs:
            print(f"{kind}: the load gate's tokens/s per load and mode: {costs.get('gate_tokens_per_s')}")
    return result
