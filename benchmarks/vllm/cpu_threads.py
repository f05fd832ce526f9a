"""serve_config.yaml's app at target.vllm.cpu_threads 1 and 2, side by side in one Ray instance and
taking turns: tokens/s per speculation kind, thread count and number of streaming clients.

    .venv/bin/python benchmarks/vllm/cpu_threads.py none:1,none:2,hedgespec:1,hedgespec:2 1,16 2

argv: kind:threads apps, client counts, repeats. Greedy, 128 tokens, the mixed stream's first 7
queries and then the edits prompts; 9 requests at one client, 3 per client beyond. Writes
benchmarks/vllm/cpu_threads.json (apps -> tokens/s per repeat)."""
import copy
import json
import pathlib
import sys

import httpx

from deployments.load import concurrently, request
from deployments.local import local_apps, serve_args
from hedgespec.cli import _prompts

ROOT = pathlib.Path(__file__).resolve().parents[2]


def main(specs: str, levels: str, repeats: str) -> None:
    base = serve_args(str(ROOT / "serve_config.yaml"))
    apps = {}
    for spec in specs.split(","):
        kind, threads = spec.split(":")
        args = copy.deepcopy(base)
        args["engine"]["target"]["vllm"].update(speculation=kind, cpu_threads=int(threads))
        apps[f"{kind}-{threads}"] = args
    prompts = _prompts(str(ROOT / "benchmarks/prompts/edits.jsonl"), None, 7, 0)
    results: dict[str, list[float]] = {}
    # 8 logical CPUs: every app's Target asks for one, and four apps with their ingresses must fit
    with local_apps(apps, num_cpus=8, timeout_s=1200) as clients:
        for repeat in range(int(repeats)):
            for n in map(int, levels.split(",")):
                per_client = 9 if n == 1 else 3
                for name, client in clients.items():
                    done = []
                    with httpx.Client(base_url=client.base_url, timeout=600,
                                      limits=httpx.Limits(max_connections=40)) as pool:

                        def one_client(c: int) -> None:
                            for r in range(per_client):
                                i = c * per_client + r
                                done.append(request(pool, "hedgespec", prompts[i % len(prompts)], 128, 0.0, i))

                        wall = concurrently(one_client, n)
                    tokens_per_s = sum(r["tokens"] for r in done) / wall
                    errors = sum(r["outcome"] != "complete" for r in done)
                    results.setdefault(f"{name}@{n}", []).append(tokens_per_s)
                    print(f"repeat {repeat} clients {n} {name}: {tokens_per_s:.1f} tokens/s, {errors} errors", flush=True)
    (ROOT / "benchmarks/vllm/cpu_threads.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:4])
