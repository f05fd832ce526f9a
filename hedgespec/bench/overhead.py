"""`hedgespec bench overhead`: where a round's time goes, and what the learner and the scoring cost.

Learner updates are timed in isolation (N = 8 and 64 drafters), and so is one scored round of the
pool's EAGLE heads: one head, then all of them in one stacked call. A real generation is then timed
with each part wrapped: the target's verify forward, the drafting, and the selector's choose and
observe; the evaluation is split into what ran beside the rounds (the pool's worker) and what ran
on the critical path (a chosen drafter caught up by the loop); the rest is the loop's own work.
"""
import time
from collections import defaultdict

import numpy as np
import torch

from hedgespec.engine import Engine
from hedgespec.evaluation import acceptance
from hedgespec.interfaces import Verified
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
        _Timed(drafter, "propose", totals, "draft")
    _Timed(engine.selector, "choose", totals, "learner")
    _Timed(engine.selector, "observe", totals, "learner")
    engine.generate(prompts[0], 8, sampling, seed)  # warm-up
    totals.clear()
    before = dict(engine.pool.scoring_seconds)
    rounds, seconds, tokens = 0, 0.0, 0
    for prompt in prompts:
        gen = engine.generate(prompt, max_tokens, sampling, seed)
        rounds, seconds, tokens = rounds + gen.target_forwards, seconds + gen.seconds, tokens + len(gen.tokens)
    scoring = {where: engine.pool.scoring_seconds[where] - before[where] for where in before}
    totals["scoring on the critical path"] = scoring["critical"]
    ms = {key: value / rounds * 1e3 for key, value in totals.items()}
    ms["rest"] = seconds / rounds * 1e3 - sum(ms.values())
    round_ms = seconds / rounds * 1e3
    return {"rounds": rounds, "tokens": tokens, "round_ms": round_ms, "ms_per_round": ms,
            "share": {key: value / round_ms for key, value in ms.items()},
            "scoring_beside_ms_per_round": scoring["beside"] / rounds * 1e3}


def head_scoring_ms(engine: Engine, context: int = 100, committed: int = 3, repeats: int = 20) -> dict | None:
    """ms to score one round of `committed` tokens with one head and with every head of the pool's
    stack (the first EAGLE drafter's), each call as the evaluation phase makes it."""
    stack = next((d.stack for d in engine.drafters if hasattr(d, "stack")), None)
    if stack is None:
        return None
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(context, stack.heads.spec.hidden, generator=generator)
    tokens = torch.randint(0, stack.frozen.size, (context + 1,), generator=generator).tolist()
    out = {}
    for label, members in (("one", 1), ("all", stack.heads.size)):
        rid = f"bench-heads-{label}"
        for member in range(members):
            stack.begin(rid, member, tokens, hidden, Sampling(), member)
        stack.ready(rid)  # the prompt's feed
        times = []
        for _ in range(repeats):
            verified = Verified(tokens[:committed], committed - 1, committed - 1,
                                torch.nn.functional.one_hot(torch.tensor(tokens[:committed]), stack.frozen.size).float(),
                                hidden[:committed])
            start = time.perf_counter()
            for member in range(members):
                stack.observe(rid, member, verified)
            times.append(time.perf_counter() - start)
        for member in range(members):
            stack.release(rid, member)
        out[label] = 1e3 * sorted(times)[len(times) // 2]
    return {"heads": stack.heads.size, "int8": stack.heads.int8, "one_ms": out["one"], "all_ms": out["all"],
            "ratio": out["all"] / out["one"]}


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
