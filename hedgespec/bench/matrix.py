"""`hedgespec bench matrix`: the drafter x domain MAT matrix (the paper's Table 1), greedy.

MAT is exact: under greedy decoding the committed text does not depend on the drafter, so one
target trajectory per query scores every drafter (hedgespec.bench.replay). Tokens/s come from real
runs of each drafter alone (a pool of one, so no other drafter's evaluation is paid for) and of
the target alone, on the first queries of each domain.
"""
from collections.abc import Sequence

import numpy as np
from tqdm import tqdm

from hedgespec.bench.replay import replay
from hedgespec.config import SelectorConfig
from hedgespec.engine import Engine


def run(engine: Engine, prompts: dict[str, list[str]], max_tokens: int, speed_queries: int = 1,
        baselines: Sequence[str] = (), progress: bool = True) -> dict:
    """`baselines`: drafters measured for comparison but not in the pool, so left out of the best per query
    and of the best fixed drafter."""
    names = [d.name for d in engine.drafters]
    unknown = set(baselines) - set(names)
    if unknown:
        raise ValueError(f"baseline drafters {sorted(unknown)} are not in the config's pool")
    k = engine.config.k
    per_query = {domain: replay(engine, engine.drafters, qs, max_tokens, k)
                 for domain, qs in tqdm(prompts.items(), desc="replay", disable=not progress)}
    mat = {n: {d: float(np.mean(per_query[d][n])) for d in prompts} for n in names}
    spread = {n: {d: float(np.std(per_query[d][n])) for d in prompts} for n in names}
    speed, target_only = _speeds(engine, prompts, max_tokens, speed_queries, progress)
    # the headroom a learner can win: the best drafter of each query against the best single drafter
    queries = [(d, q) for d in prompts for q in range(len(prompts[d]))]
    pool = [n for n in names if n not in baselines]
    oracle = float(np.mean([max(per_query[d][n][q] for n in pool) for d, q in queries]))
    fixed = {n: float(np.mean([per_query[d][n][q] for d, q in queries])) for n in names}
    best_fixed = max(pool, key=fixed.get)
    result = {"target": engine.config.target.model, "drafters": names, "k": k, "max_tokens": max_tokens,
              "queries_per_domain": {d: len(qs) for d, qs in prompts.items()}, "mat": mat, "spread": spread,
              "per_query": per_query, "tokens_per_s": speed, "target_only_tokens_per_s": target_only,
              "best_per_domain": {d: max(names, key=lambda n: mat[n][d]) for d in prompts},
              "baselines": list(baselines),
              "mixed": {"oracle_mat": oracle, "best_fixed": best_fixed, "best_fixed_mat": fixed[best_fixed],
                        "oracle_over_best_fixed": oracle / fixed[best_fixed], "fixed_mat": fixed}}
    result["specialist_vs_generalist"] = _specialists(result)
    return result


def _speeds(engine: Engine, prompts: dict[str, list[str]], max_tokens: int, speed_queries: int, progress: bool):
    names = [d.name for d in engine.drafters]
    speed = {n: {} for n in names}
    target_only = {}
    runs = [(d, p) for d, qs in prompts.items() for p in qs[:speed_queries]]
    for domain in tqdm(prompts, desc="tokens/s", disable=not progress):
        chosen = [p for d, p in runs if d == domain]
        target_only[domain] = _tokens_per_s([engine.generate(p, max_tokens, speculate=False) for p in chosen])
        for drafter in engine.drafters:
            # drafting every round it is awake (the engine's own selector might choose the plain step)
            solo = engine.with_drafters([drafter], selector=SelectorConfig(name="fixed", drafter=drafter.name))
            speed[drafter.name][domain] = _tokens_per_s([solo.generate(p, max_tokens) for p in chosen])
    return speed, target_only


def _tokens_per_s(generations) -> float:
    return sum(len(g.tokens) for g in generations) / sum(g.seconds for g in generations)


def _specialists(result: dict) -> dict:
    """Where the pool follows the zoo's naming (eagle-general, eagle-<domain>, eagle-all-domains):
    each specialist in its own domain against the generalist (and the all-domains head, if
    measured), with the spread of the per-prompt differences beside each gain."""
    if "eagle-general" not in result["mat"]:
        return {}
    out = {}
    for domain in result["queries_per_domain"]:
        specialist = f"eagle-{domain}"
        if specialist not in result["mat"]:
            continue
        out[domain] = {"specialist": result["mat"][specialist][domain]}
        for label, other in (("generalist", "eagle-general"), ("all_domains", "eagle-all-domains")):
            if other in result["mat"]:
                diffs = np.subtract(result["per_query"][domain][specialist], result["per_query"][domain][other])
                out[domain][label] = {"mat": result["mat"][other][domain], "gain": float(diffs.mean()),
                                      "spread": float(diffs.std()), "wins": bool(diffs.mean() > diffs.std()),
                                      "prompts_won": int((diffs > 0).sum())}
    return out


def markdown(result: dict) -> str:
    domains = list(result["queries_per_domain"])
    lines = ["| drafter | " + " | ".join(domains) + " | mean |", "|---|" + "---|" * (len(domains) + 1)]
    for name in result["drafters"]:
        cells = [f"{result['mat'][name][d]:.2f}" + ("*" if result["best_per_domain"][d] == name else "") for d in domains]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {result['mixed']['fixed_mat'][name]:.2f} |")
    lines.append("| target-only tokens/s | " + " | ".join(f"{result['target_only_tokens_per_s'][d]:.1f}" for d in domains) + " | |")
    lines.append("| best drafter tokens/s | " + " | ".join(
        f"{result['tokens_per_s'][result['best_per_domain'][d]][d]:.1f}" for d in domains) + " | |")
    versus = result["specialist_vs_generalist"]
    if versus:
        others = [k for k in ("generalist", "all_domains") if k in next(iter(versus.values()))]
        lines += ["", "| domain | specialist | " + " | ".join(f"{k} | gain (spread) | prompts won" for k in others) + " |",
                  "|---|---|" + "---|---|---|" * len(others)]
        for domain, v in versus.items():
            lines.append(f"| {domain} | {v['specialist']:.2f} | " + " | ".join(
                f"{v[k]['mat']:.2f} | {v[k]['gain']:+.2f} ({v[k]['spread']:.2f}){' **win**' if v[k]['wins'] else ''} | "
                f"{v[k]['prompts_won']}/{result['queries_per_domain'][domain]}" for k in others) + " |")
    mixed = result["mixed"]
    lines.append(f"\n`*` best in its domain. Best single drafter per query: MAT {mixed['oracle_mat']:.3f} vs best fixed "
                 f"({mixed['best_fixed']}) {mixed['best_fixed_mat']:.3f}: **{mixed['oracle_over_best_fixed']:.3f}x**.")
    return "\n".join(lines)


def heatmap(result: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    domains, names = list(result["queries_per_domain"]), result["drafters"]
    values = np.array([[result["mat"][n][d] for d in domains] for n in names])
    fig, ax = plt.subplots(figsize=(1.2 * len(domains) + 3, 0.45 * len(names) + 1.5))
    image = ax.imshow(values, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(domains)), domains, rotation=30, ha="right")
    ax.set_yticks(range(len(names)), names)
    for i in range(len(names)):
        for j in range(len(domains)):
            ax.text(j, i, f"{values[i, j]:.2f}", ha="center", va="center", color="w", fontsize=8)
    fig.colorbar(image, label="MAT (tokens per target forward)")
    ax.set_title(f"Drafter x domain MAT, {result['target']}, greedy, K={result['k']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
