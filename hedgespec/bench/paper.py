"""`hedgespec bench paper`: the paper's experiments on this project's pool, one resumable run.

Steps (each saved as DIR/<step>.json and skipped when present, so an interrupted run continues):
main-greedy / main-sampling (every method on the same mixed stream, per domain and overall; the
greedy steps replay each query's trajectory exactly, bench/replay.py, so they run at a long horizon
and report MAT, not tokens/s, beside the per-round ceiling),
scaling (MAT against pool size, the pool grown with honest but weak decoy drafters), shift
(reworded prompts: static router against HedgeSpec) and overhead. Then DIR/BENCHMARKS.md with the
tables and the conditions beside every number, and regret.png and scaling.png. `--steps` runs only
the named steps (say, in two processes at once); the report covers the steps saved so far and names
the ones still to run.
`--quick` runs the whole pipeline on tiny models (a smoke test of the machinery, in the test suite).
"""
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hedgespec.bench import PAPER_STEPS as STEPS, overhead, paper_report, selectors
from hedgespec.bench.replay import replay
from hedgespec.config import EngineConfig, SelectorConfig, load_config
from hedgespec.engine import Engine
from hedgespec.sampling import Sampling


@dataclass(frozen=True)
class Settings:
    config: str = "configs/pool.yaml"
    queries: int = 14  # mixed stream: 2 per domain
    # the first queries (one per domain) that the costlier steps use: the sampling table (it runs
    # every drafter) and pool-size scaling (four pools)
    subset_queries: int = 7
    max_tokens: int = 256  # the greedy steps, replayed exactly (bench/replay.py): the long horizon is cheap there
    # the steps that run live (no replay under sampling; the overheads are timings) at this horizon
    live_max_tokens: int = 64
    temperature: float = 0.7  # the sampling half of the main table
    pool_sizes: tuple[int, ...] = (4, 8, 16, 32)
    # the hand-written per-round rule: the first drafter whenever it is awake, else the second
    rule: tuple[str, str] = ("prompt-lookup-2", "eagle-general")
    seed: int = 0

    @staticmethod
    def quick() -> "Settings":
        return Settings(config="configs/tiny.yaml", queries=4, subset_queries=4, max_tokens=16, live_max_tokens=16,
                        pool_sizes=(2, 4), rule=("prompt-lookup", "other-model"))


QUICK_QUERIES = [{"prompt": "abc abc abc abc abc", "domain": "copy"}, {"prompt": "Write about the sea.", "domain": "prose"},
                 {"prompt": "one two three one two three", "domain": "copy"}, {"prompt": "Tell me a story.", "domain": "prose"}]


def queries_for(settings: Settings, quick: bool, reworded: bool = False, n: int | None = None) -> list[dict]:
    """The first `n` (default: settings.queries) queries of the mixed stream."""
    n = settings.queries if n is None else n
    if quick:
        return [q | {"prompt": ("Please: " if reworded else "") + q["prompt"]} for q in QUICK_QUERIES][:n]
    from hedgespec.data import mixed_stream
    return mixed_stream(None, n, settings.seed, reworded)


def routes_for(names: list[str], quick: bool) -> dict[str, str]:
    """The static router's domain -> drafter map: each domain's specialist head where the pool has one."""
    if quick:
        return {"copy": "prompt-lookup", "prose": "same-model"}
    from hedgespec.data import DOMAINS
    return {d: f"eagle-{d}" for d in DOMAINS if f"eagle-{d}" in names}


def decoys(engine: Engine, count: int, quick: bool, seed: int) -> list:
    """Honest drafters that are rarely right: unrelated tiny models (quick), or datastores over
    token-shuffled domain text (real pool)."""
    if quick:
        from hedgespec.config import DrafterConfig
        from hedgespec.drafters import build_drafter
        return [build_drafter(DrafterConfig(name=f"decoy-{i}", kind="lm", model=f"tiny:{100 + i}"), engine.target.vocab,
                              engine.tokenizer, engine.config.target, engine.config.k) for i in range(count)]
    from hedgespec.data import DOMAINS, data_dir
    from hedgespec.data.text import read_jsonl
    from hedgespec.drafters.datastore import DatastoreDrafter
    from hedgespec.drafters.store import Datastore
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        domain = DOMAINS[i % len(DOMAINS)]
        rows = read_jsonl(data_dir() / domain / "train.jsonl")
        start = (i // len(DOMAINS)) * 50 % len(rows)  # the domain's next 50 documents, wrapping around
        docs = [r["text"] for r in rows[start:start + 50]]
        ids = [rng.permutation(t).tolist() for t in engine.tokenizer(docs, add_special_tokens=False)["input_ids"]]
        out.append(DatastoreDrafter(f"decoy-{domain}-{i}", Datastore.build(ids), engine.target.vocab, 8, 2))
    return out


def main_table(engine: Engine, settings: Settings, quick: bool, temperature: float) -> dict:
    names = [d.name for d in engine.drafters]
    chosen = selectors.default_selectors(names, settings.rule, routes_for(names, quick) or None)
    if temperature == 0:  # replayed: every method's exact MAT, and the per-round ceiling
        chosen = {label: c for label, c in chosen.items() if c.objective != "time"}
        return selectors.run(engine, queries_for(settings, quick), chosen, settings.max_tokens, Sampling(),
                             settings.seed, target_only=True, replay=True)
    return selectors.run(engine, queries_for(settings, quick, n=settings.subset_queries), chosen,
                         settings.live_max_tokens, Sampling(temperature), settings.seed, target_only=True)


def scaling(engine: Engine, settings: Settings, quick: bool) -> dict:
    chosen = {"hedgespec": SelectorConfig(name="hedgespec", loss="eal"), "ucbspec": SelectorConfig(name="ucbspec"),
              "ucb1": SelectorConfig(name="ucb1"), "exp3spec": SelectorConfig(name="exp3spec")}
    extra = decoys(engine, max(0, max(settings.pool_sizes) - len(engine.drafters)), quick, settings.seed)
    queries = queries_for(settings, quick, n=settings.subset_queries)
    everyone = (engine.drafters + extra)[:max(settings.pool_sizes)]
    # the best single drafter per query by exact greedy replay, every drafter once
    mats = replay(engine, everyone, [q["prompt"] for q in queries], settings.max_tokens, engine.config.k)
    out = {}
    for n in settings.pool_sizes:
        pool = everyone[:n]
        result = selectors.run(engine.with_drafters(pool), queries, chosen, settings.max_tokens, Sampling(), settings.seed,
                               progress=False, replay=True)
        out[str(n)] = {label: result["selectors"][label]["mat"] for label in [*chosen, selectors.CEILING]}
        out[str(n)][selectors.BEST_PER_QUERY] = float(np.mean(np.max([mats[d.name] for d in pool], axis=0)))
        out[str(n)]["drafters"] = [d.name for d in pool]
    return out


def shift(engine: Engine, settings: Settings, quick: bool) -> dict:
    names = [d.name for d in engine.drafters]
    chosen = {"hedgespec": SelectorConfig(name="hedgespec", loss="eal"), "hedgespec-sleeping": SelectorConfig(name="hedgespec-sleeping", loss="eal")}
    routes = routes_for(names, quick)
    if routes:
        chosen["router"] = SelectorConfig(name="router", routes=routes, fallback=names[0])
    out = {}
    for label, reworded in (("original", False), ("reworded", True)):
        queries = queries_for(settings, quick, reworded)
        result = selectors.run(engine, queries, chosen, settings.max_tokens, Sampling(), settings.seed, progress=False,
                               replay=True)
        out[label] = {name: result["selectors"][name]["mat"] for name in chosen}
    return out


def run(out: Path, quick: bool = False, settings: Settings | None = None, only: tuple[str, ...] = STEPS) -> dict:
    """Runs the steps in `only` that are not saved yet, then writes the report of what is saved."""
    settings = settings or (Settings.quick() if quick else Settings())
    out.mkdir(parents=True, exist_ok=True)
    config: EngineConfig = load_config(settings.config)
    engine = Engine(config)
    steps = {
        "main-greedy": lambda: main_table(engine, settings, quick, 0.0),
        "main-sampling": lambda: main_table(engine, settings, quick, settings.temperature),
        "scaling": lambda: scaling(engine, settings, quick),
        "shift": lambda: shift(engine, settings, quick),
        "overhead": lambda: {"learner_update_us": {str(n): overhead.learner_update_us(n) for n in (8, 64)},
                             "round": overhead.round_breakdown(engine, [q["prompt"] for q in queries_for(settings, quick)][:3],
                                                               settings.live_max_tokens, Sampling(), settings.seed)},
    }
    results = {}
    for name, step in steps.items():
        path = out / f"{name}.json"
        if path.exists():  # finished in an earlier run
            results[name] = json.loads(path.read_text())
        elif name in only:
            results[name] = step()
            path.write_text(json.dumps(results[name]))
    if results:
        paper_report.write(out, results, settings, config)
    return results
