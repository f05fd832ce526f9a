"""`hedgespec bench soak`: N concurrent streaming clients against the app for a fixed time.

Each client sends one request after another, cycling through mixed prompts and temperatures (greedy
and sampled), and records how each ended: complete (a finish reason and [DONE]), a clear error (an
HTTP 4xx/5xx or an error event, by kind), or lost (no end at all: a hang past the client timeout
or a dropped connection). Per run: requests, tokens/s, time to first token and time per output
token (p50/p99, vLLM's serving-benchmark terms), the resident memory of every replica process
after a warm-up under the same load and at the end (read from /proc: the app runs on this
machine), and, after the load, every greedy prompt sent alone: its text must equal what it gave
under load.
"""
import json
import os
import pathlib
import threading
import time
from collections import Counter

import httpx
import numpy as np

from deployments.local import local_app, serve_args
from hedgespec.config import ServeConfig

CLIENT_TIMEOUT_S = 600.0
TEMPERATURES = (0.0, 0.0, 0.7, 1.0)  # half the requests greedy, half sampled


def replica_memory() -> dict[str, int]:
    """Resident bytes of every Ray Serve process on this machine, by actor and pid (Ray's process
    title is `ray::Actor.method_running_now`: the method part changes, the actor part does not)."""
    found = {}
    for proc in pathlib.Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            title = (proc / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
            if "ServeReplica:" not in title and "ServeController" not in title and "ProxyActor" not in title:
                continue
            rss = next(int(line.split()[1]) * 1024 for line in (proc / "status").read_text().splitlines()
                       if line.startswith("VmRSS:"))
        except (OSError, StopIteration):
            continue
        actor = title.removeprefix("ray::").split(" ")[0]
        actor = actor.rsplit(".", 1)[0] if "." in actor.split(":")[-1] else actor
        found[f"{actor} (pid {proc.name})"] = rss
    return found


def request(client: httpx.Client, model: str, prompt: str, max_tokens: int, temperature: float, seed: int,
            speculate: bool = True, speculation: dict | None = None) -> dict:
    """One streaming chat request: how it ended, its text, tokens and timings (`itl`: the gaps
    between its text events, vLLM's inter-token latency where an event carries one token).
    `speculation`: the request's own (the API's extension, e.g. {"drafter": NAME} pins a drafter)."""
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": temperature, "seed": seed, "stream": True, "stream_options": {"include_usage": True},
            "speculate": speculate, **({"speculation": speculation} if speculation else {})}
    start, first, text, tokens, outcome, arrivals, stats = time.perf_counter(), None, [], 0, "lost", [], None
    try:
        with client.stream("POST", "/v1/chat/completions", json=body, timeout=CLIENT_TIMEOUT_S) as response:
            if response.status_code != 200:
                return {"outcome": f"http {response.status_code}", "seconds": time.perf_counter() - start}
            for line in response.iter_lines():
                if line == "data: [DONE]":
                    outcome = "complete"
                    break
                if not line.startswith("data: "):
                    continue
                event = json.loads(line[6:])
                if "error" in event:
                    outcome = f"error {event.get('status', '?')}"
                    break
                delta = event["choices"][0]["delta"].get("content") if event["choices"] else None
                if delta:
                    arrivals.append(time.perf_counter())
                    first = first or arrivals[0]
                text.append(delta or "")
                tokens = event.get("usage", {}).get("completion_tokens", tokens)
                stats = event.get("hedgespec", stats)
    except httpx.HTTPError:
        outcome = "lost"
    end = time.perf_counter()
    return {"outcome": outcome, "text": "".join(text), "tokens": tokens, "seconds": end - start,
            "ttft": None if first is None else first - start,
            "tpot": None if first is None or tokens < 2 else (end - first) / (tokens - 1),
            "itl": list(np.diff(arrivals)), "stats": stats}


def concurrently(client_loop, clients: int) -> float:
    """client_loop(0), ..., client_loop(clients - 1) in threads at once; the wall time until all are done."""
    start = time.perf_counter()
    threads = [threading.Thread(target=client_loop, args=(c,)) for c in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start


def run(config_path: str, prompts: list[str], clients: int, duration_s: float, max_tokens: int, seed: int,
        warmup_s: float) -> dict:
    args = serve_args(config_path)
    config = ServeConfig.model_validate(args)
    with local_app(args) as client:
        pool = httpx.Client(base_url=client.base_url, timeout=CLIENT_TIMEOUT_S,
                            limits=httpx.Limits(max_connections=clients + 4), headers=dict(client.headers))
        results: list[dict] = []
        lock = threading.Lock()

        def load_for(seconds: float, into: list) -> float:
            """Every client sends requests until the time is up; returns the wall time until the last ends."""
            deadline = time.perf_counter() + seconds

            def client_loop(c: int) -> None:
                i = c
                while time.perf_counter() < deadline:
                    prompt, temperature = prompts[i % len(prompts)], TEMPERATURES[i % len(TEMPERATURES)]
                    result = request(pool, config.model_name, prompt, max_tokens, temperature, seed + i)
                    with lock:
                        into.append(result | {"prompt": prompt, "temperature": temperature})
                    i += clients

            return concurrently(client_loop, clients)

        # warm-up: the same load, so that caches, allocator arenas and thread pools reach the size this
        # load needs; what the memory does after that is what the load leaves behind
        warmup: list[dict] = []
        load_for(warmup_s, warmup)
        memory_before = replica_memory()
        wall = load_for(duration_s, results)
        memory_after = replica_memory()
        stats_after = client.get("/stats").json()
        # every greedy prompt alone, after the load: its text under load must be the same
        alone = {p: request(pool, config.model_name, p, max_tokens, 0.0, seed)["text"]
                 for p in {r["prompt"] for r in results if r["temperature"] == 0 and r["outcome"] == "complete"}}
    complete = [r for r in results if r["outcome"] == "complete"]
    greedy = [r for r in complete if r["temperature"] == 0]
    ttft = [r["ttft"] for r in complete if r["ttft"] is not None]
    tpot = [r["tpot"] for r in complete if r["tpot"] is not None]
    growth = {name: memory_after.get(name, 0) / before - 1 for name, before in memory_before.items()}
    return {"config": config_path, "target": config.engine.target.model, "clients": clients, "duration_s": duration_s,
            "warmup_s": warmup_s, "warmup_outcomes": dict(Counter(r["outcome"] for r in warmup)),
            "max_tokens": max_tokens, "wall_s": wall, "requests": len(results), "complete": len(complete),
            "outcomes": dict(Counter(r["outcome"] for r in results)),
            "lost": sum(r["outcome"] == "lost" for r in results),
            "tokens_per_s": sum(r["tokens"] for r in complete) / wall,
            "ttft_s": percentiles(ttft), "tpot_s": percentiles(tpot),
            "greedy_identical_to_alone": f"{sum(r['text'] == alone.get(r['prompt']) for r in greedy)}/{len(greedy)}",
            "memory_after_warmup": memory_before, "memory_after": memory_after,
            "largest_memory_growth": max(growth.values(), default=0.0), "stats_after": stats_after}


def percentiles(values: list[float]) -> dict:
    if not values:
        return {"p50": None, "p99": None}
    return {"p50": float(np.percentile(values, 50)), "p99": float(np.percentile(values, 99))}


def main(config_path: str, prompts: list[str], clients: int, duration_s: float, max_tokens: int, seed: int,
         warmup_s: float, json_out: str | None) -> int:
    result = run(config_path, prompts, clients, duration_s, max_tokens, seed, warmup_s)
    if json_out:
        with open(json_out, "w") as f:
            json.dump(result, f, indent=2)
    ms = lambda v: "-" if v is None else f"{1e3 * v:.0f}"  # noqa: E731
    print(f"{config_path}: {clients} streaming clients for {duration_s:.0f} s (wall {result['wall_s']:.0f} s) "
          f"after {warmup_s:.0f} s of the same load (outcomes {result['warmup_outcomes']}), "
          f"<= {max_tokens} tokens, {len(prompts)} prompts, temperatures {TEMPERATURES}, pid {os.getpid()}")
    print(f"requests {result['requests']}, complete {result['complete']}, lost {result['lost']}, "
          f"outcomes {result['outcomes']}")
    print(f"tokens/s {result['tokens_per_s']:.2f}; TTFT p50/p99 {ms(result['ttft_s']['p50'])}/{ms(result['ttft_s']['p99'])} ms; "
          f"TPOT p50/p99 {ms(result['tpot_s']['p50'])}/{ms(result['tpot_s']['p99'])} ms")
    print(f"greedy texts identical to the same request alone: {result['greedy_identical_to_alone']}")
    print(f"largest memory growth: {result['largest_memory_growth']:+.1%}")
    print("| process | RSS after warm-up (MiB) | RSS at the end (MiB) | change |")
    print("|---|---|---|---|")
    for name, before in sorted(result["memory_after_warmup"].items()):
        after = result["memory_after"].get(name, 0)
        print(f"| {name} | {before / 2**20:.0f} | {after / 2**20:.0f} | {after / before - 1:+.1%} |")
    greedy_ok = result["greedy_identical_to_alone"].split("/")
    return 0 if result["lost"] == 0 and greedy_ok[0] == greedy_ok[1] else 1
