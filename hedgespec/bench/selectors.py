"""`hedgespec bench selectors`: every selector on the same queries in one run.

Per selector: MAT, tokens/s and per-query MAT; for every selector over the whole pool, the
cumulative regret per committed token against the best single drafter of that query, measured on
the full-information loss vectors (EAL, corrected estimator) that the evaluation phase computes for
every drafter at every round start, whoever drafted. A fixed drafter runs alone (a pool of one), as
a single-drafter deployment would, so its tokens/s pays for no other drafter's evaluation. The
per-query oracle is the best fixed drafter's run of each query, picked in hindsight.
"""
import numpy as np
from tqdm import tqdm

from hedgespec.config import SelectorConfig
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
        sampling: Sampling, seed: int, progress: bool = True, target_only: bool = False) -> dict:
    """`target_only` adds a row of target-only decoding on the same queries."""
    names = [d.name for d in engine.drafters]
    instances = {label: build_selector(config, names, engine.config.k, seed) for label, config in selectors.items()}
    alone = {label: engine.with_drafters([engine.drafters[names.index(config.drafter)]])
             for label, config in selectors.items() if config.name == "fixed"}
    engine.generate(queries[0]["prompt"], 8, sampling, seed)  # warm-up
    labels = [*selectors, "target-only"] if target_only else list(selectors)
    results = {label: {"tokens": 0, "seconds": 0.0, "forwards": 0, "per_query_mat": [], "per_query_tokens_per_s": [],
                       "regret_per_token": [], "regret_curves": []} for label in labels}
    reference_tokens = []
    bar = tqdm(total=len(queries) * len(labels), disable=not progress, desc="selectors x queries")
    for q, query in enumerate(queries):
        order = labels[q % len(labels):] + labels[:q % len(labels)]  # rotate: drift hits every selector alike
        for label in order:
            if label == "target-only":
                gen = engine.generate(query["prompt"], max_tokens, sampling, seed + q, speculate=False)
            elif label in alone:
                gen = alone[label].generate(query["prompt"], max_tokens, sampling, seed + q)
            else:
                gen = engine.generate(query["prompt"], max_tokens, sampling, seed + q, selector=instances[label],
                                      selector_config=selectors[label])
            if sampling.greedy and label == order[0]:
                reference_tokens.append(gen.tokens)
            elif sampling.greedy:
                assert gen.tokens == reference_tokens[q], f"{label}: greedy output differs between selectors"
            result = results[label]
            result["tokens"] += len(gen.tokens)
            result["seconds"] += gen.seconds
            result["forwards"] += gen.target_forwards
            result["per_query_mat"].append(gen.mat)
            result["per_query_tokens_per_s"].append(len(gen.tokens) / gen.seconds)
            if label not in alone and label != "target-only" and selectors[label].objective != "time":
                tokens, curve, per_token = regret_curve(gen, names)
                result["regret_per_token"].append(per_token)
                result["regret_curves"].append([tokens, curve])
            bar.update()
    bar.close()
    summary = {}
    for label, result in results.items():
        regrets = result.pop("regret_per_token")
        summary[label] = {**result, "mat": result["tokens"] / result["forwards"],
                          "tokens_per_s": result["tokens"] / result["seconds"]}
        if regrets:
            summary[label] |= {"per_query_regret_per_token": regrets, "regret_per_token": float(np.mean(regrets))}
    fixed = [label for label in labels if label.startswith("fixed:")]
    best_fixed = max(fixed, key=lambda label: summary[label]["mat"]) if fixed else None
    if fixed:
        best_per_query = [max(fixed, key=lambda label: results[label]["per_query_mat"][q]) for q in range(len(queries))]
        oracle_mats = [results[label]["per_query_mat"][q] for q, label in enumerate(best_per_query)]
        summary["oracle"] = {"mat": float(np.mean(oracle_mats)), "per_query_mat": oracle_mats,
                             "per_query_best": best_per_query,
                             "tokens_per_s": float(np.mean([results[label]["per_query_tokens_per_s"][q]
                                                            for q, label in enumerate(best_per_query)]))}
    return {"target": engine.config.target.model, "drafters": names, "k": engine.config.k,
            "temperature": sampling.temperature, "max_tokens": max_tokens, "queries": len(queries),
            "domains": [q.get("domain") for q in queries], "best_fixed": best_fixed, "selectors": summary}


def table(result: dict) -> str:
    """Markdown: per selector, mean-per-query MAT (the oracle's unit), pooled MAT, tokens/s, regret."""
    rows = ["| selector | MAT (pooled) | MAT (mean per query) | tokens/s | regret per token |", "|---|---|---|---|---|"]
    for label, s in result["selectors"].items():
        regret = f"{s['regret_per_token']:.4f}" if "regret_per_token" in s else "—"
        rows.append(f"| {label} | {s.get('mat', 0):.3f} | {np.mean(s['per_query_mat']):.3f} | {s['tokens_per_s']:.2f} | {regret} |")
    return "\n".join(rows)
