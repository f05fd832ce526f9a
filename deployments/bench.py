"""`hedgespec bench serve`: the same prompts through HTTP and in process, one run, same models.

HTTP sides, all through the one app of the config: target-only (`speculate: false`), HedgeSpec with
the app's selector on the time objective and on the MAT objective (`speculation.objective`), and
the single drafters predicted fastest at their best K (`speculation.drafter` and `.k`; the best K
comes from the in-process calibration of `hedgespec bench speed`). In process: HedgeSpec with the
time objective, for the cost of serving. Sides rotate per prompt; every figure is a ratio within
the run. Per side: tokens/s, MAT, and the mean ms of a round (the target's forward, the draft, and
the whole round as the ingress's decode loop saw it)."""
import json
import time

from deployments.local import local_app, serve_args
from hedgespec.bench.speed import best_k
from hedgespec.config import ServeConfig
from hedgespec.engine import Engine
from hedgespec.sampling import Sampling

TARGET_ONLY = "http target-only"


def run(config_path: str, prompts: list[str], max_tokens: int, temperature: float, seed: int,
        singles: int = 3, calibration: int = 3) -> dict:
    args = serve_args(config_path)
    config = ServeConfig.model_validate(args)
    engine = Engine(config.engine)
    sampling = Sampling(temperature)
    calibrated = best_k(engine, prompts[:calibration], max_tokens) if sampling.greedy else {}
    ranked = sorted(calibrated, key=lambda d: -calibrated[d]["per_k"][calibrated[d]["best_k"]]["predicted_tokens_per_s"])
    http_sides = {TARGET_ONLY: {"speculate": False}, "http hedgespec (time)": {"speculation": {"objective": "time"}},
                  "http hedgespec (MAT)": {"speculation": {"objective": "eal"}}}
    for name in ranked[:singles]:
        http_sides[f"http {name}@{calibrated[name]['best_k']}"] = {"speculation": {"drafter": name, "k": calibrated[name]["best_k"]}}
    totals = {name: {"tokens": 0, "seconds": 0.0, "forwards": 0, "round_ms": {"verify": 0.0, "draft": 0.0, "total": 0.0},
                     "texts": []} for name in [*http_sides, "in-process hedgespec (time)"]}
    with local_app(args) as client:
        def http(prompt: str, extra: dict) -> tuple[str, int, dict]:
            body = {"model": config.model_name, "messages": [{"role": "user", "content": prompt}],
                    "max_tokens": max_tokens, "temperature": temperature, "seed": seed, **extra}
            response = client.post("/v1/chat/completions", json=body)
            response.raise_for_status()
            out = response.json()
            return out["choices"][0]["message"]["content"], out["usage"]["completion_tokens"], out["hedgespec"]

        def in_process(prompt: str) -> tuple[str, int, dict]:
            gen = engine.generate(prompt, max_tokens, sampling, seed)
            return gen.text, len(gen.tokens), gen.stats()

        runners = {name: (lambda p, extra=extra: http(p, extra)) for name, extra in http_sides.items()}
        runners["in-process hedgespec (time)"] = in_process
        for runner in runners.values():  # warm-up: first forwards and first routes pay one-off costs
            runner(prompts[0][:200])
        for i, prompt in enumerate(prompts):
            names = list(runners)
            for name in names[i % len(names):] + names[:i % len(names)]:  # rotate: drift hits every side alike
                start = time.perf_counter()
                text, tokens, stats = runners[name](prompt)
                side = totals[name]
                side["seconds"] += time.perf_counter() - start
                side["tokens"] += tokens
                side["forwards"] += stats["target_forwards"]
                for part, ms in stats["round_ms"].items():
                    side["round_ms"][part] += ms * stats["target_forwards"]
                side["texts"].append(text)
    reference = totals[TARGET_ONLY]["texts"]
    base = totals[TARGET_ONLY]["tokens"] / totals[TARGET_ONLY]["seconds"]
    for side in totals.values():
        side["identical"] = sum(a == b for a, b in zip(side.pop("texts"), reference))
        side["round_ms"] = {part: ms / max(1, side["forwards"]) for part, ms in side["round_ms"].items()}
        side |= {"tokens_per_s": side["tokens"] / side["seconds"], "mat": side["tokens"] / max(1, side["forwards"]),
                 "vs_http_target_only": side["tokens"] / side["seconds"] / base}
    singles_run = [name for name in totals if "@" in name]
    best = max(singles_run, key=lambda n: totals[n]["tokens_per_s"]) if singles_run else None
    return {"config": config_path, "target": config.engine.target.model, "dtype": engine.dtype,
            "drafters": [d.name for d in config.engine.drafters], "k": config.engine.k, "temperature": temperature,
            "max_tokens": max_tokens, "prompts": len(prompts), "calibration": calibrated, "best_single": best, "sides": totals}


def main(config_path: str, prompts: list[str], max_tokens: int, temperature: float, seed: int, json_out: str | None,
         singles: int = 3, calibration: int = 3) -> int:
    result = run(config_path, prompts, max_tokens, temperature, seed, singles, calibration)
    if json_out:
        with open(json_out, "w") as f:
            json.dump(result, f, indent=2)
    print(f"{result['config']}: target {result['target']} ({result['dtype']}), {len(result['drafters'])} drafters, "
          f"K <= {result['k']}, T={temperature}, {result['prompts']} prompts x <= {max_tokens} tokens")
    print("| side | tokens/s | vs HTTP target-only | MAT | verify ms | draft ms | round ms | text identical |")
    print("|---|---|---|---|---|---|---|---|")
    for name, s in result["sides"].items():
        ms = s["round_ms"]
        print(f"| {name} | {s['tokens_per_s']:.2f} | {s['vs_http_target_only']:.2f}x | {s['mat']:.2f} | {ms['verify']:.1f} | "
              f"{ms['draft']:.1f} | {ms['total']:.1f} | {s['identical']}/{result['prompts']} |")
    sides = result["sides"]
    if result["best_single"]:
        print(f"HTTP hedgespec (time) / best single drafter over HTTP ({result['best_single']}): "
              f"{sides['http hedgespec (time)']['tokens_per_s'] / sides[result['best_single']]['tokens_per_s']:.2f}x")
    print(f"HTTP / in-process (hedgespec, time): "
          f"{sides['http hedgespec (time)']['tokens_per_s'] / sides['in-process hedgespec (time)']['tokens_per_s']:.2f}x")
    identical = all(s["identical"] == result["prompts"] for s in sides.values())
    return 0 if temperature > 0 or result["dtype"] != "float32" or identical else 1
