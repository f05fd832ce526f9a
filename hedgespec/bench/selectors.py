"""`hedgespec bench selectors`: every selector on the same queries in one run.

Per selector: MAT (one unit everywhere: committed tokens, the EOS included, per target forward,
averaged per query; the pooled ratio beside it, labelled), rounds per query, tokens/s averaged per
query, and for every selector over the whole pool, the cumulative regret per committed token against
the best single drafter of that query, measured on the full-information loss vectors (EAL, corrected
estimator) that the evaluation phase computes for every drafter at every round start, whoever
drafted. A fixed drafter runs alone (a pool of one), as a single-drafter deployment would, so its
tokens/s pays for no other drafter's evaluation. Two references: the best single drafter per query
(each query's best fixed run, picked in hindsight: a switching selector may beat it) and, in replay,
the per-round ceiling (bench/ceiling.py: no selector can beat it).
"""
import numpy as np
from tqdm import tqdm

from hedgespec.config import SelectorConfig
from hedgespec.bench.ceiling import fewest_rounds
from hedgespec.bench.replay import ReplayTarget, acceptance_table, trajectory
from hedgespec.decode import Generation
from hedgespec.engine import Engine, build_selector
from hedgespec.sampling import Sampling


def default_selectors(names: list[str], rule: tuple[str, str] | None, routes: dict[str, str] | None) -> dict[str, SelectorConfig]:
    selectors = {f"fixed:{n}": SelectorConfig(name="fixed", drafter=n) for n in names}
    # the paper's objective (tokens per round, EAL) unless named otherwise; `hedgespec-time` chooses
    # (drafter, k) arms for time per token, and its regret is not on the drafters' EAL scale
    selectors |= {
        "hedgespec": SelectorConfig(name="hedgespec", loss="eal"),
        "hedgespec-tap": SelectorConfig(name="hedgespec", loss="tap"),
        "hedgespec-paper-eal": SelectorConfig(name="hedgespec", loss="eal", estimator="paper"),
        "hedgespec-sample": SelectorConfig(name="hedgespec", loss="eal", act="sample"),
        "hedgespec-sleeping": SelectorConfig(name="hedgespec-sleeping", loss="eal"),
        "hedge": SelectorConfig(name="hedge", loss="eal"),
        "hedgespec-time": SelectorConfig(name="hedgespec", loss="time"),
        "ucbspec": SelectorConfig(name="ucbspec"),
        "ucb1": SelectorConfig(name="ucb1"),
        "exp3spec": SelectorConfig(name="exp3spec"),
    }
    if rule:
        selectors["rule"] = SelectorConfig(name="rule", drafter=rule[0], fallback=rule[1])
    if routes:
        selectors["router"] = SelectorConfig(name="router", routes=routes, fallback=names[0])
    return selectors


def regret_curve(gen: Generation, names: list[str]) -> tuple[list[int], list[float], float]:
    """Cumulative regret of the drafts actually chosen against the best single drafter of the query,
    both scored by the loss vector at each round's first position; rounds with no draft are skipped."""
    by_position = {m.position: m.losses for m in gen.losses}
    position, chosen_losses, all_losses, tokens = 0, [], [], []
    for r in gen.rounds:
        if r.drafter is not None and position in by_position:
            losses = by_position[position]
            chosen_losses.append(losses[names.index(r.drafter)])
            all_losses.append(losses)
            tokens.append(position + r.committed)
        position += r.committed
    if not all_losses:
        return [], [], 0.0
    best = int(np.argmin(np.sum(all_losses, axis=0)))
    curve = np.cumsum(chosen_losses) - np.cumsum(np.asarray(all_losses)[:, best])
    return tokens, curve.tolist(), float(curve[-1] / max(1, position))


def run(engine: Engine, queries: list[dict], selectors: dict[str, SelectorConfig], max_tokens: int,
        sampling: Sampling, seed: int, progress: bool = True, target_only: bool = False, replay: bool = False) -> dict:
    """`target_only` adds a row of target-only decoding on the same queries. `replay` (greedy only)
    runs every selector through the decode loop on each query's recorded trajectory (bench/replay.py:
    exact MAT, no target forward, no tokens/s) and adds the per-round ceiling of each query."""
    if replay and any(config.objective == "time" for config in selectors.values()):
        raise ValueError("a replay runs no target forward, so it cannot price the time objective's arms")
    names = [d.name for d in engine.drafters]
    instances = {label: build_selector(config, names, engine.config.k, seed) for label, config in selectors.items()}
    alone = {label: engine.with_drafters([engine.drafters[names.index(config.drafter)]], selector=config)
             for label, config in selectors.items() if config.name == "fixed"}
    engine.generate(queries[0]["prompt"], 8, sampling, seed)  # warm-up
    labels = [*selectors, "target-only"] if target_only else list(selectors)
    results = {label: {"per_query_mat": [], "per_query_rounds": [], "per_query_tokens_per_s": [], "committed": 0,
                       "forwards": 0, "regret_per_token": [], "regret_curves": [], "explored": []} for label in labels}
    target = ReplayTarget(engine.target.vocab) if replay else None
    ceiling = []
    reference_tokens = []
    bar = tqdm(total=len(queries) * len(labels), disable=not progress, desc="selectors x queries")
    for q, query in enumerate(queries):
        if replay:
            ceiling.append(_record(engine, target, query["prompt"], max_tokens))
        order = labels[q % len(labels):] + labels[:q % len(labels)]  # rotate: drift hits every selector alike
        for label in order:
            if label == "target-only":
                gen = engine.generate(query["prompt"], max_tokens, sampling, seed + q, speculate=False)
            elif label in alone:
                gen = alone[label].generate(query["prompt"], max_tokens, sampling, seed + q, target=target)
            else:
                gen = engine.generate(query["prompt"], max_tokens, sampling, seed + q, selector=instances[label],
                                      selector_config=selectors[label], target=target)
            if sampling.greedy and label == order[0]:
                reference_tokens.append(gen.tokens)
            elif sampling.greedy:
                assert gen.tokens == reference_tokens[q], f"{label}: greedy output differs between selectors"
            _count(results[label], gen, timed=not replay or label == "target-only")
            if label not in alone and label != "target-only":
                if selectors[label].objective != "time":
                    tokens, curve, per_token = regret_curve(gen, names)
                    results[label]["regret_per_token"].append(per_token)
                    results[label]["regret_curves"].append([tokens, curve])
                if hasattr(instances[label], "explored"):
                    results[label]["explored"].append(instances[label].explored / max(1, len(gen.rounds)))
            bar.update()
    bar.close()
    summary = {label: _summary(result) for label, result in results.items()}
    fixed = [label for label in labels if label.startswith("fixed:")]
    if fixed:
        best_per_query = [max(fixed, key=lambda label: results[label]["per_query_mat"][q]) for q in range(len(queries))]
        summary[BEST_PER_QUERY] = {
            "mat": float(np.mean([results[label]["per_query_mat"][q] for q, label in enumerate(best_per_query)])),
            "per_query_mat": [results[label]["per_query_mat"][q] for q, label in enumerate(best_per_query)],
            "per_query_rounds": [results[label]["per_query_rounds"][q] for q, label in enumerate(best_per_query)],
            "per_query_best": best_per_query}
        if not replay:
            summary[BEST_PER_QUERY]["tokens_per_s"] = float(np.mean(
                [results[label]["per_query_tokens_per_s"][q] for q, label in enumerate(best_per_query)]))
    if replay:
        summary[CEILING] = {"mat": float(np.mean([c["mat"] for c in ceiling])),
                            "per_query_mat": [c["mat"] for c in ceiling], "per_query_rounds": [c["rounds"] for c in ceiling]}
    return {"target": engine.config.target.model, "drafters": names, "k": engine.config.k,
            "temperature": sampling.temperature, "max_tokens": max_tokens, "queries": len(queries), "replay": replay,
            "domains": [q.get("domain") for q in queries], "selectors": summary,
            "best_fixed": max(fixed, key=lambda label: summary[label]["mat"]) if fixed else None}


BEST_PER_QUERY = "best single drafter per query"
CEILING = "per-round ceiling"


def _record(engine: Engine, target: ReplayTarget, prompt: str, max_tokens: int) -> dict:
    """Records the query's greedy trajectory for the replay and returns its per-round ceiling."""
    tokens = engine.encode(prompt)
    path, hidden = trajectory(engine, prompt, tokens, max_tokens)
    target.record(tokens, path, hidden)
    table = np.array([acceptance_table(d, tokens, path, hidden, engine.target.vocab, engine.config.k, max_tokens)
                      for d in engine.drafters]).reshape(len(engine.drafters), len(path))
    rounds, _ = fewest_rounds(table)
    return {"rounds": rounds, "mat": len(path) / rounds}


def _count(result: dict, gen: Generation, timed: bool) -> None:
    """One query: MAT in the one unit (committed tokens, the EOS included, per target forward)."""
    committed = sum(r.committed for r in gen.rounds)
    result["committed"] += committed
    result["forwards"] += gen.target_forwards
    result["per_query_mat"].append(gen.mat)
    result["per_query_rounds"].append(gen.target_forwards)
    if timed:  # tokens/s of the text shown: the EOS is not an output token
        result["per_query_tokens_per_s"].append(len(gen.tokens) / gen.seconds)


def _summary(result: dict) -> dict:
    """Means over queries; the pooled MAT (all committed tokens over all forwards) beside, labelled."""
    regrets, explored = result.pop("regret_per_token"), result.pop("explored")
    out = {**result, "mat": float(np.mean(result["per_query_mat"])), "pooled_mat": result["committed"] / result["forwards"],
           "rounds_per_query": float(np.mean(result["per_query_rounds"]))}
    if result["per_query_tokens_per_s"]:
        out["tokens_per_s"] = float(np.mean(result["per_query_tokens_per_s"]))
    if regrets:
        out |= {"per_query_regret_per_token": regrets, "regret_per_token": float(np.mean(regrets))}
    if explored:
        out["explored_share"] = float(np.mean(explored))
    return out


def table(result: dict) -> str:
    """Markdown: per selector, MAT averaged per query (the one unit), pooled MAT, rounds, tokens/s, regret."""
    rows = ["| selector | MAT (mean per query) | MAT (pooled) | rounds per query | tokens/s (mean per query) | regret per token |",
            "|---|---|---|---|---|---|"]
    for label, s in result["selectors"].items():
        regret = f"{s['regret_per_token']:.4f}" if "regret_per_token" in s else "—"
        pooled = f"{s['pooled_mat']:.3f}" if "pooled_mat" in s else "—"
        speed = f"{s['tokens_per_s']:.2f}" if "tokens_per_s" in s else "—"
        rows.append(f"| {label} | {s['mat']:.3f} | {pooled} | {np.mean(s['per_query_rounds']):.1f} | {speed} | {regret} |")
    return "\n".join(rows)
