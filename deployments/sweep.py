"""`hedgespec bench load`: the app under N concurrent streaming clients, N = 1, 2, 4, ... (greedy
requests, cycling through the prompts: each client sends a fixed number, and every prompt is sent
at least once at every N), for several kinds of speculation on the same engine settings, in one
run: on the vLLM backend, vLLM without speculation, vLLM's own n-gram speculation and HedgeSpec
(target.vllm.speculation; a kind such as `hedgespec@stream_interval=1` also changes other
target.vllm settings for its side); on the HF backend, the target alone and HedgeSpec (the request's
`speculate`). `pinned` drafters each run alone as well, in HedgeSpec's app (the request's
`speculation.drafter`): the single-drafter baselines. `served` kinds (none, ngram) each run in
vLLM's own OpenAI server too (deployments/vllm_serve.py, the same engine settings, without Ray
Serve): what a user would run instead of this app.

Every kind's app runs at once, side by side in one Ray instance (each at /<kind>, or /<speculation>-<i>
for a kind with changed settings), and the kinds
take turns, so that a drift of the machine's speed (10-15% between runs of minutes on the 2-core
VMs here) reaches them alike: one client sends each prompt to every kind in turn, and under load
each N runs kind after kind, in an order that rotates with N. Only one kind is ever running.

Per kind and N: aggregate output tokens/s (all clients' tokens over the wall time from the first
request sent to the last one answered; for one client, over its requests' own times), time to first
token, time per output token and inter-token latency, p50/p99 (vLLM's serving-benchmark terms), and
errors. With `repeats` R > 1 every N is run R times over, every kind in each repeat (the order
rotating again), and a kind's tokens/s is the median of its R; its ratio to the baseline is the
median of the R ratios of runs in the same repeat, minutes apart at most, so a drift of the machine
between repeats cancels. Every distinct greedy text is compared with the first kind's for the same
prompt (the baseline without speculation: the output must not change).
"""
import json
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass

import httpx

from deployments.load import CLIENT_TIMEOUT_S, concurrently, percentiles, request
from deployments.local import local_apps, serve_args
from deployments.vllm_serve import vllm_servers
from hedgespec.bench import paired_ratio, rotated
from hedgespec.config import ServeConfig
from hedgespec.models.loading import resolve_dtype

VLLM_KINDS = ("none", "ngram", "hedgespec")
HF_KINDS = ("none", "hedgespec")


@dataclass(frozen=True)
class Side:
    """One row of the comparison: a kind of speculation, or a pinned drafter, and the app it runs on."""
    label: str
    app: str
    speculate: bool = True
    speculation: dict | None = None


def plan(args: dict, kinds: list[str], pinned: list[str], eager: bool) -> tuple[dict[str, dict], list[Side]]:
    """The apps to start (name -> Serve args) and the sides, the baseline first. On vLLM each kind is
    an engine setting, so an app of its own, and may change others of target.vllm for its side
    (`hedgespec@stream_interval=1`: HedgeSpec streaming every token); on HF they share one app
    (the request's `speculate`)."""
    backend = ServeConfig.model_validate(args).engine.target.backend
    if backend == "hf":
        if any(kind not in HF_KINDS for kind in kinds):
            raise ValueError(f"the HF backend runs {HF_KINDS}, not {kinds}")
        apps = {"hedgespec": args}
        sides = [Side(kind, "hedgespec", speculate=kind == "hedgespec") for kind in kinds]
    else:
        apps = {}
        for kind in kinds:
            speculation, *changes = kind.split("@")
            if any("=" not in change for change in changes):
                raise ValueError(f"kind {kind!r}: each change after '@' is SETTING=VALUE (hedgespec@stream_interval=1)")
            engine = json.loads(json.dumps(args))
            settings = engine.setdefault("engine", {}).setdefault("target", {}).setdefault("vllm", {})
            settings.update({"speculation": speculation, **({"enforce_eager": True} if eager else {}),
                             **dict(change.split("=", 1) for change in changes)})
            ServeConfig.model_validate(engine)  # a misspelt setting fails here, not minutes into the run
            apps[kind if not changes else f"{speculation}-{len(apps)}"] = engine  # a route name of letters
        sides = [Side(kind, app) for kind, app in zip(kinds, apps)]
    if pinned and "hedgespec" not in kinds:
        raise ValueError("pinned drafters run in the hedgespec kind's app: name the kind")
    return apps, sides + [Side(f"{drafter} alone", "hedgespec", speculation={"drafter": drafter}) for drafter in pinned]


def send(client: httpx.Client, model: str, prompts: list[str], clients: int, per_client: int, max_tokens: int,
         side: Side) -> tuple[list[dict], float]:
    """`clients` clients sending max(len(prompts), clients * per_client) requests between them,
    request i with prompt i (cycling), each client one after another; the results and the wall time."""
    results: list[dict] = []
    lock = threading.Lock()
    total = max(len(prompts), clients * per_client)

    def client_loop(c: int) -> None:
        for i in range(c, total, clients):
            prompt = prompts[i % len(prompts)]
            result = request(client, model, prompt, max_tokens, 0.0, 0, side.speculate, side.speculation)
            with lock:
                results.append(result | {"prompt": prompt})

    return results, concurrently(client_loop, clients)


def in_turns(pools: dict[str, httpx.Client], model: str, prompts: list[str], max_tokens: int,
             sides: list[Side]) -> dict[str, tuple[list[dict], float]]:
    """One client: every prompt to every side in turn (the order rotating per prompt); per side, its
    results and the sum of their times."""
    results: dict[str, list[dict]] = {side.label: [] for side in sides}
    for i, prompt in enumerate(prompts):
        for side in rotated(sides, i):
            result = request(pools[side.app], model, prompt, max_tokens, 0.0, 0, side.speculate, side.speculation)
            results[side.label].append(result | {"prompt": prompt})
    return {label: (rows, sum(r["seconds"] for r in rows)) for label, rows in results.items()}


def summary(repeats: list[tuple[list[dict], float]], clients: int) -> dict:
    """A kind's figures at one N over its repeats (each: its results and its wall time)."""
    results = [r for batch, _ in repeats for r in batch]
    complete = [r for r in results if r["outcome"] == "complete"]
    rounds = [r["stats"] for r in complete if r["stats"] and r["stats"]["rounds"]]
    steps = sum(x["rounds"] for x in rounds)
    rates = [sum(r["tokens"] for r in batch if r["outcome"] == "complete") / wall for batch, wall in repeats]
    texts: dict[str, list[str]] = {}
    for r in complete:
        if r["text"] not in texts.setdefault(r["prompt"], []):
            texts[r["prompt"]].append(r["text"])
    return {"clients": clients, "requests": len(results), "complete": len(complete),
            "wall_s": sum(wall for _, wall in repeats),
            "errors": dict(Counter(r["outcome"] for r in results if r["outcome"] != "complete")),
            "tokens": sum(r["tokens"] for r in complete),
            "tokens_per_s": statistics.median(rates), "tokens_per_s_repeats": rates,
            "ttft_s": percentiles([r["ttft"] for r in complete if r["ttft"] is not None]),
            "tpot_s": percentiles([r["tpot"] for r in complete if r["tpot"] is not None]),
            "itl_s": percentiles([gap for r in complete for gap in r["itl"]]),
            # HedgeSpec's rounds (vLLM's other kinds report none): tokens committed and drafted per step
            "mat": sum(x["mat"] * x["rounds"] for x in rounds) / steps if steps else None,
            "drafted_per_step": sum(x["drafted"] for x in rounds) / steps if steps else None,
            "rounds_by_drafter": dict(sum((Counter(x["rounds_by_drafter"]) for x in rounds), Counter())),
            "texts": texts}  # the distinct texts of each prompt (bfloat16 batches may break a near-tie either way)


def run(config_path: str, prompts: list[str], kinds: list[str], levels: list[int], per_client: int,
        max_tokens: int, eager: bool = False, single: list[str] | None = None, pinned: list[str] = (),
        repeats: int = 1, served: list[str] = ()) -> dict:
    """`single`: another prompt set, sent once each by one client after the levels (`repeats` times too).
    `served`: vLLM's own speculation kinds also run in vLLM's own server (deployments/vllm_serve.py)."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, not {repeats}")
    args = serve_args(config_path)
    apps, sides = plan(args, kinds, list(pinned), eager)
    config = ServeConfig.model_validate(args)
    if served and config.engine.target.backend != "vllm":
        raise ValueError("--vllm-serve compares with vLLM's own server: the config's target.backend must be vllm")
    served_sides = {kind: Side(f"vllm serve {kind}", f"vllm serve {kind}") for kind in served}
    sides += list(served_sides.values())
    runs = {side.label: {"levels": [], "single": None} for side in sides}
    started = time.perf_counter()
    with local_apps(apps, num_cpus=4 * len(apps), timeout_s=1800) as clients, \
            vllm_servers(config.engine, list(served), config.model_name, eager) as urls:
        startup = time.perf_counter() - started
        limits = httpx.Limits(max_connections=max(levels) + 4)
        pools = {name: httpx.Client(base_url=client.base_url, timeout=CLIENT_TIMEOUT_S, headers=dict(client.headers),
                                    limits=limits) for name, client in clients.items()}
        pools |= {served_sides[kind].app: httpx.Client(base_url=url, timeout=CLIENT_TIMEOUT_S, limits=limits)
                  for kind, url in urls.items()}
        for n, count in enumerate(levels):
            for side in rotated(sides, n):  # warm-up at this concurrency (vLLM compiles per batch shape on first use)
                send(pools[side.app], config.model_name, prompts[:count], count, 1, 8, side)
            timed = {side.label: [] for side in sides}
            for repeat in range(repeats):
                order = rotated(sides, n + repeat)
                if count == 1:
                    for label, batch in in_turns(pools, config.model_name, prompts, max_tokens, order).items():
                        timed[label].append(batch)
                else:
                    for side in order:
                        timed[side.label].append(
                            send(pools[side.app], config.model_name, prompts, count, per_client, max_tokens, side))
            for label, batches in timed.items():
                runs[label]["levels"].append(summary(batches, count))
            stats = {name: client.get("/stats").json() for name, client in clients.items()}
            for side in sides:  # on vLLM, HedgeSpec's: what its learners price a step with after this level
                runs[side.label]["levels"][-1]["step_costs"] = stats.get(side.app, {}).get("step_costs")
        if single:
            timed = {side.label: [] for side in sides}
            for repeat in range(repeats):
                for label, batch in in_turns(pools, config.model_name, single, max_tokens, rotated(sides, repeat)).items():
                    timed[label].append(batch)
            for label, batches in timed.items():
                runs[label]["single"] = summary(batches, 1)
        stats = {name: client.get("/stats").json() for name, client in clients.items()}
    for side in sides:  # vLLM's own servers have no /stats
        runs[side.label]["stats_after"] = stats.get(side.app)
    measured = lambda run_: run_["levels"] + ([run_["single"]] if run_["single"] else [])  # noqa: E731
    baseline = runs[sides[0].label]
    for run_ in runs.values():
        for level, reference in zip(measured(run_), measured(baseline)):
            same = [text in reference["texts"][prompt] for prompt, texts in level["texts"].items()
                    if prompt in reference["texts"] for text in texts]
            level["greedy_equal_to_baseline"] = f"{sum(same)}/{len(same)}"
            level["vs_baseline"] = paired_ratio(level["tokens_per_s_repeats"], reference["tokens_per_s_repeats"])
    target = config.engine.target
    return {"config": config_path, "target": target.model_dump(), "dtype": resolve_dtype(target.dtype, target.device),
            "k": config.engine.k,
            "kinds": list(runs), "levels": levels, "repeats": repeats, "requests_per_client": per_client,
            "max_tokens": max_tokens,
            "prompts": len(prompts), "eager": eager, "single_prompts": len(single or []), "startup_s": startup,
            "runs": runs}


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
    axis.set_title(f"{target['model']} on {target['backend']} ({result['dtype']}), greedy, <= {result['max_tokens']} tokens", fontsize=9)
    axis.grid(alpha=0.3)
    axis.legend(title="speculation")
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(config_path: str, prompts: list[str], kinds: list[str], levels: list[int], per_client: int,
         max_tokens: int, eager: bool, json_out: str | None, plot_out: str | None, single: list[str] | None = None,
         pinned: list[str] = (), repeats: int = 1, served: list[str] = ()) -> int:
    result = run(config_path, prompts, kinds, levels, per_client, max_tokens, eager, single, pinned, repeats, served)
    if json_out:
        with open(json_out, "w") as f:
            json.dump(result, f, indent=2)
    if plot_out:
        plot(result, plot_out)
    ms = lambda v: "-" if v is None else f"{1e3 * v:.0f}"  # noqa: E731
    target = result["target"]
    print(f"{config_path}: {target['model']} on {target['backend']} ({result['dtype']}), "
          f"K={result['k']}, greedy, <= {max_tokens} tokens, {len(prompts)} prompts, {per_client} requests per client "
          f"(every prompt at least once per level){', eager' if eager else ''}; the kinds side by side, taking turns, "
          f"{repeats} repeat(s) per level (tokens/s: the median; vs {kinds[0]}: the median of the repeats' ratios) "
          f"(apps up in {result['startup_s']:.0f} s)")
    print("| speculation | clients | tokens/s | per repeat | vs " + kinds[0] + " | TTFT p50/p99 ms | TPOT p50/p99 ms | "
          "ITL p50/p99 ms | tokens/step | drafts/step | errors | greedy = " + kinds[0] + " |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    number = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    failed = False
    for label, rows in (("levels", lambda r: r["levels"]), ("single", lambda r: [r["single"]] if r["single"] else [])):
        if label == "single" and result["single_prompts"]:
            print(f"\nthe second set ({result['single_prompts']} prompts), one client:")
        for kind, run_ in result["runs"].items():
            for level in rows(run_):
                failed |= bool(level["errors"])
                _row(kind, level, ms, number)
    return 1 if failed else 0


def _row(kind: str, level: dict, ms, number) -> None:
    print(f"| {kind} | {level['clients']} | {level['tokens_per_s']:.1f} | "
          f"{'/'.join(f'{rate:.0f}' for rate in level['tokens_per_s_repeats'])} | {level['vs_baseline']:.2f}x | "
          f"{ms(level['ttft_s']['p50'])}/{ms(level['ttft_s']['p99'])} | "
          f"{ms(level['tpot_s']['p50'])}/{ms(level['tpot_s']['p99'])} | "
          f"{ms(level['itl_s']['p50'])}/{ms(level['itl_s']['p99'])} | {number(level['mat'])} | "
          f"{number(level['drafted_per_step'])} | {level['errors'] or 0} | "
          f"{level['greedy_equal_to_baseline']} |")
