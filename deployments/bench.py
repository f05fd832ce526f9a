"""`hedgespec bench serve`: the same prompts through HTTP (speculative and target-only) and through
the in-process engine, in one run, same models. Reports tokens/s and the ratios."""
import json
import time

from deployments.local import local_app, serve_args
from hedgespec.config import ServeConfig
from hedgespec.engine import Engine
from hedgespec.sampling import Sampling


def run(config_path: str, prompts: list[str], max_tokens: int, temperature: float, seed: int) -> dict:
    args = serve_args(config_path)
    config = ServeConfig.model_validate(args)
    engine = Engine(config.engine)
    sides = {name: {"tokens": 0, "seconds": 0.0, "forwards": 0} for name in ("in_process", "http", "http_target_only")}
    texts = {name: [] for name in sides}
    with local_app(args) as client:
        def http(prompt: str, speculate: bool) -> tuple[str, int, int]:
            body = {"model": config.model_name, "messages": [{"role": "user", "content": prompt}],
                    "max_tokens": max_tokens, "temperature": temperature, "seed": seed, "speculate": speculate}
            response = client.post("/v1/chat/completions", json=body)
            response.raise_for_status()
            out = response.json()
            return out["choices"][0]["message"]["content"], out["usage"]["completion_tokens"], out["hedgespec"]["target_forwards"]

        def in_process(prompt: str) -> tuple[str, int, int]:
            gen = engine.generate(prompt, max_tokens, Sampling(temperature), seed)
            return gen.text, len(gen.tokens), gen.target_forwards

        runners = {"in_process": in_process, "http": lambda p: http(p, True), "http_target_only": lambda p: http(p, False)}
        for runner in runners.values():  # warm-up: first forwards and first routes pay one-off costs
            runner(prompts[0][:200])
        for i, prompt in enumerate(prompts):
            names = list(runners)
            for name in names[i % 3:] + names[:i % 3]:  # rotate the order so drift hits every side alike
                start = time.perf_counter()
                text, tokens, forwards = runners[name](prompt)
                side = sides[name]
                side["seconds"] += time.perf_counter() - start
                side["tokens"] += tokens
                side["forwards"] += forwards
                texts[name].append(text)
    for side in sides.values():
        side["tokens_per_s"] = side["tokens"] / side["seconds"]
        side["mat"] = side["tokens"] / side["forwards"]
    http_side = sides["http"]["tokens_per_s"]
    return {"config": config_path, "target": config.engine.target.model, "drafters": [d.name for d in config.engine.drafters],
            "k": config.engine.k, "temperature": temperature, "max_tokens": max_tokens, "prompts": len(prompts), **sides,
            "http_vs_in_process": http_side / sides["in_process"]["tokens_per_s"],
            "http_vs_http_target_only": http_side / sides["http_target_only"]["tokens_per_s"],
            "greedy_identical": (texts["http"] == texts["in_process"] == texts["http_target_only"]) if temperature == 0 else None}


def main(config_path: str, prompts: list[str], max_tokens: int, temperature: float, seed: int, json_out: str | None) -> int:
    result = run(config_path, prompts, max_tokens, temperature, seed)
    if json_out:
        with open(json_out, "w") as f:
            json.dump(result, f, indent=2)
    print(f"{result['config']}: target {result['target']}, drafters {result['drafters']}, K={result['k']}, "
          f"T={temperature}, {result['prompts']} prompts x <= {max_tokens} tokens")
    for name in ("in_process", "http", "http_target_only"):
        side = result[name]
        print(f"{name:17s}: {side['tokens_per_s']:7.2f} tokens/s  MAT {side['mat']:.2f}  ({side['tokens']} tokens, {side['seconds']:.1f} s)")
    print(f"HTTP / in-process          : {result['http_vs_in_process']:.2f}x")
    print(f"HTTP / HTTP target-only    : {result['http_vs_http_target_only']:.2f}x")
    if result["greedy_identical"] is not None:
        print(f"greedy text identical on all three sides: {result['greedy_identical']}")
    return 0 if result["greedy_identical"] is not False else 1
