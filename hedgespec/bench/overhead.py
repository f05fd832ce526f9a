"""`hedgespec bench overhead`: where a round's time goes, and what the learner costs.

Learner updates are timed in isolation (N = 8 and 64 drafters). A real generation is then timed
with each part wrapped: the target's verify forward, each drafter's evaluation (observe plus
scoring, per drafter), the drafting, and the selector's choose/observe; the rest of the round is
the loop's own bookkeeping.
"""
import time
from collections import defaultdict

import numpy as np

from hedgespec.engine import Engine
from hedgespec.evaluation import acceptance
from hedgespec.learners.experts import LEARNERS
from hedgespec.sampling import Sampling


def learner_update_us(n: int, updates: int = 2000, seed: int = 0) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    losses = rng.random((updates, n))
    out = {}
    for name, cls in LEARNERS.items():
        learner = cls(n)
        start = time.perf_counter()
        for row in losses:
            learner.update(row)
            learner.weights()
        out[name] = (time.perf_counter() - start) / updates * 1e6
    return out


class _Timed:
    """Accumulates the wall time of calls to one method of one object."""

    def __init__(self, obj, method: str, totals: dict, key: str):
        original = getattr(obj, method)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                totals[key] += time.perf_counter() - start
        setattr(obj, method, timed)


def round_breakdown(engine: Engine, prompts: list[str], max_tokens: int, sampling: Sampling, seed: int) -> dict:
    totals: dict[str, float] = defaultdict(float)
    _Timed(engine.target, "verify", totals, "target_forward")
    _Timed(engine.target, "prefill", totals, "target_prefill")
    for drafter in engine.drafters:
        _Timed(drafter, "observe", totals, f"evaluate:{drafter.name}")
        _Timed(drafter, "propose", totals, "draft")
    _Timed(engine.selector, "choose", totals, "learner")
    _Timed(engine.selector, "observe", totals, "learner")
    engine.generate(prompts[0], 8, sampling, seed)  # warm-up
    totals.clear()
    rounds, seconds, tokens = 0, 0.0, 0
    for prompt in prompts:
        gen = engine.generate(prompt, max_tokens, sampling, seed)
        rounds, seconds, tokens = rounds + gen.target_forwards, seconds + gen.seconds, tokens + len(gen.tokens)
    ms = {key: value / rounds * 1e3 for key, value in totals.items()}
    ms["rest"] = seconds / rounds * 1e3 - sum(ms.values())
    round_ms = seconds / rounds * 1e3
    return {"rounds": rounds, "tokens": tokens, "round_ms": round_ms, "ms_per_round": ms,
            "share": {key: value / round_ms for key, value in ms.items()}}


def scoring_ms(vocab: int, m: int = 6, repeats: int = 200) -> float:
    """The gamma/ratio computation alone for one drafter and a round of m committed positions."""
    p, q = (torch_probs(vocab, m, seed) for seed in (0, 1))
    tokens = np.zeros(m, dtype=np.int64)
    start = time.perf_counter()
    for _ in range(repeats):
        acceptance(p, q, tokens)
    return (time.perf_counter() - start) / repeats * 1e3


def torch_probs(vocab: int, m: int, seed: int):
    import torch
    return torch.softmax(torch.randn(m, vocab, generator=torch.Generator().manual_seed(seed)), -1)
