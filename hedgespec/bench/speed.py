"""`hedgespec bench speed`: target-only against speculative decoding, same prompts, one process.

Runs alternate in order per prompt (ABBA) so that a noisy, shared machine drifts into both sides
alike; the reported figure is the ratio of tokens per second.
"""
import json
import sys

from hedgespec.config import EngineConfig
from hedgespec.engine import Engine
from hedgespec.sampling import Sampling


def run(engine: Engine, prompts: list[str], sampling: Sampling, max_tokens: int, seed: int) -> dict:
    engine.generate(prompts[0], 8, sampling, seed)  # warm-up: first forwards pay one-off costs
    sides = {"target_only": {"tokens": 0, "seconds": 0.0, "forwards": 0},
             "speculative": {"tokens": 0, "seconds": 0.0, "forwards": 0}}
    per_prompt, identical = [], True
    for i, prompt in enumerate(prompts):
        order = [False, True] if i % 2 == 0 else [True, False]
        runs = {spec: engine.generate(prompt, max_tokens, sampling, seed, speculate=spec) for spec in order}
        for spec, gen in runs.items():
            side = sides["speculative" if spec else "target_only"]
            side["tokens"] += len(gen.tokens)
            side["seconds"] += gen.seconds
            side["forwards"] += gen.target_forwards
        identical &= runs[True].tokens == runs[False].tokens
        per_prompt.append({"prompt": prompt[:80], "tokens": len(runs[True].tokens), "mat": runs[True].mat,
                           "speculative_s": runs[True].seconds, "target_only_s": runs[False].seconds})
    for side in sides.values():
        side["tokens_per_s"] = side["tokens"] / side["seconds"]
    spec = sides["speculative"]
    return {"target": engine.config.target.model, "drafters": [d.name for d in engine.drafters],
            "selector": engine.config.selector.name, "k": engine.config.k, "temperature": sampling.temperature,
            "max_tokens": max_tokens, "prompts": len(prompts), **sides,
            "mat": spec["tokens"] / spec["forwards"], "speedup": spec["tokens_per_s"] / sides["target_only"]["tokens_per_s"],
            "greedy_identical": identical if sampling.greedy else None, "per_prompt": per_prompt}


def main(config: EngineConfig, sampling: Sampling, max_tokens: int, seed: int, prompts: list[str],
         json_out: str | None) -> int:
    result = run(Engine(config), prompts, sampling, max_tokens, seed)
    if json_out:
        with open(json_out, "w") as f:
            json.dump(result, f, indent=2)
    t, s = result["target_only"], result["speculative"]
    print(f"target {result['target']}, drafters {result['drafters']}, selector {result['selector']}, K={result['k']}, "
          f"T={sampling.temperature}, {result['prompts']} prompts x <= {max_tokens} tokens")
    print(f"target-only : {t['tokens_per_s']:7.2f} tokens/s  ({t['tokens']} tokens, {t['seconds']:.1f} s)")
    print(f"speculative : {s['tokens_per_s']:7.2f} tokens/s  ({s['tokens']} tokens, {s['seconds']:.1f} s), MAT {result['mat']:.2f}")
    print(f"speedup     : {result['speedup']:.2f}x" + ("" if result["greedy_identical"] is None
                                                       else f"   greedy output identical: {result['greedy_identical']}"))
    if result["greedy_identical"] is False:
        print("ERROR: speculative greedy output differs from target-only", file=sys.stderr)
        return 1
    return 0
