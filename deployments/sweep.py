"""`hedgespec bench load`: the app under N concurrent streaming clients, N = 1, 2, 4, ... (greedy
requests, cycling through the prompts: each client sends a fixed number, and every prompt is sent
at least once at every N), for several kinds of speculation on the same engine settings, in one
run: on the vLLM backend, vLLM without speculation, vLLM's own n-gram speculation and HedgeSpec
(target.vllm.speculation); on the HF backend, the target alone and HedgeSpec (the request's
`speculate`). `pinned` drafters each run alone as well, in HedgeSpec's app (the request's
`speculation.drafter`): the single-drafter baselines, on the same engine start.

Per kind and N: aggregate output tokens/s (all clients' tokens over the wall time from the first
request sent to the last one answered), time to first token, time per output token and
inter-token latency, p50/p99 (vLLM's serving-benchmark terms), and errors. Every greedy text is
compared with the first kind's for the same prompt (the baseline without speculation: the
output must not change). One app start per kind; a warm-up request per client count first.
"""
import json
import threading
import time
from collections import Counter

import httpx

from deployments.load import CLIENT_TIMEOUT_S, concurrently, percentiles, request
from deployments.local import local_app, serve_args
from hedgespec.config import ServeConfig
from hedgespec.models.loading import resolve_dtype

VLLM_KINDS = ("none", "ngram", "hedgespec")
HF_KINDS = ("none", "hedgespec")


def kind_args(args: dict, kind: str, eager: bool) -> tuple[dict, bool]:
    """The Serve args for one kind of speculation, and whether requests ask to speculate."""
    config = ServeConfig.model_validate(args)
    if config.engine.target.backend == "hf":
        if kind not in HF_KINDS:
            raise ValueError(f"the HF backend runs {HF_KINDS}, not {kind!r}")
        return args, kind == "hedgespec"
    engine = args.setdefault("engine", {})
    settings = engine.setdefault("target", {}).setdefault("vllm", {})
    settings.update({"speculation": kind, **({"enforce_eager": True} if eager else {})})
    return args, True


def pinned_kind(drafter: str) -> str:
    return f"{drafter} alone"


def one_level(client: httpx.Client, model: str, prompts: list[str], clients: int, per_client: int,
              max_tokens: int, speculate: bool, speculation: dict | None = None) -> dict:
    """`clients` clients sending max(len(prompts), clients * per_client) requests between them,
    request i with prompt i (cycling), each client one after another."""
    results: list[dict] = []
    lock = threading.Lock()
    total = max(len(prompts), clients * per_client)

    def client_loop(c: int) -> None:
        for i in range(c, total, clients):
            prompt = prompts[i % len(prompts)]
            result = request(client, model, prompt, max_tokens, 0.0, 0, speculate, speculation)
            with lock:
                results.append(result | {"prompt": prompt})

    wall = concurrently(client_loop, clients)
    complete = [r for r in results if r["outcome"] == "complete"]
    rounds = [r["stats"] for r in complete if r["stats"] and r["stats"]["rounds"]]
    steps = sum(x["rounds"] for x in rounds)
    return {"clients": clients, "requests": len(results), "complete": len(complete), "wall_s": wall,
            "errors": dict(Counter(r["outcome"] for r in results if r["outcome"] != "complete")),
            "tokens": sum(r["tokens"] for r in complete),
            "tokens_per_s": sum(r["tokens"] for r in complete) / wall,
            "ttft_s": percentiles([r["ttft"] for r in complete if r["ttft"] is not None]),
            "tpot_s": percentiles([r["tpot"] for r in complete if r["tpot"] is not None]),
            "itl_s": percentiles([gap for r in complete for gap in r["itl"]]),
            # HedgeSpec's rounds (vLLM's other kinds report none): tokens committed and drafted per step
            "mat": sum(x["mat"] * x["rounds"] for x in rounds) / steps if steps else None,
            "drafted_per_step": sum(x["drafted"] for x in rounds) / steps if steps else None,
            "rounds_by_drafter": dict(sum((Counter(x["rounds_by_drafter"]) for x in rounds), Counter())),
            "texts": {r["prompt"]: r["text"] for r in complete}}


def run(config_path: str, prompts: list[str], kinds: list[str], levels: list[int], per_client: int,
        max_tokens: int, eager: bool = False, single: list[str] | None = None, pinned: list[str] = ()) -> dict:
    """`single`: another prompt set, sent once each by one client after the levels (the same app).
    `pinned`: drafters of the pool, each run alone through every level and set in the app of kind
    "hedgespec"."""
    runs = {}
    for kind in kinds:
        args, speculate = kind_args(serve_args(config_path), kind, eager)
        config = ServeConfig.model_validate(args)
        started = time.perf_counter()
        with local_app(args, timeout_s=900) as client:
            startup = time.perf_counter() - started
            pool = httpx.Client(base_url=client.base_url, timeout=CLIENT_TIMEOUT_S,
                                limits=httpx.Limits(max_connections=max(levels) + 4), headers=dict(client.headers))
            sides = [(kind, None)] + ([(pinned_kind(d), {"drafter": d}) for d in pinned] if kind == "hedgespec" else [])
            for side, speculation in sides:
                levels_out = []
                for clients in levels:
                    # warm-up at this concurrency (vLLM compiles per batch shape on first use)
                    one_level(pool, config.model_name, prompts[:clients], clients, 1, 8, speculate, speculation)
                    levels_out.append(one_level(pool, config.model_name, prompts, clients, per_client, max_tokens,
                                                speculate, speculation))
                alone = (one_level(pool, config.model_name, single, 1, 1, max_tokens, speculate, speculation)
                         if single else None)
                runs[side] = {"startup_s": startup, "levels": levels_out, "single": alone}
            stats = client.get("/stats").json()
        for side, _ in sides:
            runs[side]["stats_after"] = stats
    measured = lambda run_: run_["levels"] + ([run_["single"]] if run_["single"] else [])  # noqa: E731
    for kind in runs:
        for level, reference in zip(measured(runs[kind]), measured(runs[kinds[0]])):
            same = [text == reference["texts"].get(prompt) for prompt, text in level["texts"].items()
                    if prompt in reference["texts"]]
            level["greedy_equal_to_baseline"] = f"{sum(same)}/{len(same)}"
    settings = ServeConfig.model_validate(serve_args(config_path)).engine
    return {"config": config_path, "target": settings.target.model_dump(), "k": settings.k, "kinds": list(runs),
            "levels": levels,
            "requests_per_client": per_client, "max_tokens": max_tokens, "prompts": len(prompts), "eager": eager,
            "single_prompts": len(single or []), "runs": runs}


def plot(result: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, axis = plt.subplots(figsize=(6, 4))
    for kind, run_ in result["runs"].items():
        axis.plot(result["levels"], [level["tokens_per_s"] for level in run_["levels"]], marker="o", label=kind)
    axis.set_xscale("log", base=2)
    axis.set_xticks(result["levels"], [str(n) for n in result["levels"]])
    axis.set_xlabel("concurrent streaming clients")
    axis.set_ylabel("aggregate output tokens/s")
    target = result["target"]
    axis.set_title(f"{target['model']} on {target['backend']}, greedy, <= {result['max_tokens']} tokens", fontsize=9)
    axis.grid(alpha=0.3)
    axis.legend(title="speculation")
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(config_path: str, prompts: list[str], kinds: list[str], levels: list[int], per_client: int,
         max_tokens: int, eager: bool, json_out: str | None, plot_out: str | None, single: list[str] | None = None,
         pinned: list[str] = ()) -> int:
    result = run(config_path, prompts, kinds, levels, per_client, max_tokens, eager, single, pinned)
    if json_out:
        with open(json_out, "w") as f:
            json.dump(result, f, indent=2)
    if plot_out:
        plot(result, plot_out)
    ms = lambda v: "-" if v is None else f"{1e3 * v:.0f}"  # noqa: E731
    target = result["target"]
    print(f"{config_path}: {target['model']} on {target['backend']} ({resolve_dtype(target['dtype'], target['device'])}), "
          f"K={result['k']}, greedy, <= {max_tokens} tokens, {len(prompts)} prompts, {per_client} requests per client "
          f"(every prompt at least once per level){', eager' if eager else ''}")
    print("| speculation | clients | tokens/s | vs " + kinds[0] + " | TTFT p50/p99 ms | TPOT p50/p99 ms | "
          "ITL p50/p99 ms | tokens/step | drafts/step | errors | greedy = " + kinds[0] + " |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    number = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    failed = False
    for label, rows in (("levels", lambda r: r["levels"]), ("single", lambda r: [r["single"]] if r["single"] else [])):
        baseline = rows(result["runs"][kinds[0]])
        if label == "single" and baseline:
            print(f"\nthe second set ({result['single_prompts']} prompts), one client:")
        for kind, run_ in result["runs"].items():
            for level, reference in zip(rows(run_), baseline):
                failed |= bool(level["errors"])
                _row(kind, level, reference, ms, number)
    return 1 if failed else 0


def _row(kind: str, level: dict, reference: dict, ms, number) -> None:
    print(f"| {kind} | {level['clients']} | {level['tokens_per_s']:.1f} | "
          f"{level['tokens_per_s'] / max(reference['tokens_per_s'], 1e-9):.2f}x | "
          f"{ms(level['ttft_s']['p50'])}/{ms(level['ttft_s']['p99'])} | "
          f"{ms(level['tpot_s']['p50'])}/{ms(level['tpot_s']['p99'])} | "
          f"{ms(level['itl_s']['p50'])}/{ms(level['itl_s']['p99'])} | {number(level['mat'])} | "
          f"{number(level['drafted_per_step'])} | {level['errors'] or 0} | "
          f"{level['greedy_equal_to_baseline']} |")
