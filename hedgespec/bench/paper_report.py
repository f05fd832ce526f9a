"""Tables, plots and DIR/BENCHMARKS.md for `hedgespec bench paper`, with the conditions beside every number."""
import os
import platform
from pathlib import Path

import numpy as np

from hedgespec.bench.selectors import BEST_PER_QUERY, CEILING
from hedgespec.models.loading import resolve_dtype

REGRET_METHODS = ("hedgespec", "hedge", "ucbspec", "ucb1", "exp3spec")
SCALING_METHODS = ("hedgespec", "ucbspec", "ucb1", "exp3spec", BEST_PER_QUERY, CEILING)


def conditions(settings, config, temperature: float, queries: int | None = None, max_tokens: int | None = None) -> str:
    dtype = resolve_dtype(config.target.dtype, config.target.device)
    return (f"target `{config.target.model}` ({dtype}, {config.target.device}), pool of "
            f"{len(config.drafters)} drafters from `{settings.config}`, K = {config.k}, temperature {temperature}, "
            f"the first {queries or settings.queries} queries of the mixed stream (seed {settings.seed}), up to "
            f"{max_tokens or settings.max_tokens} new tokens, "
            f"{platform.machine()} with {os.cpu_count()} CPU cores, {config.threads} torch thread(s)")


def main_table(result: dict) -> str:
    domains = sorted({d for d in result["domains"] if d})
    by_domain = {d: [i for i, q in enumerate(result["domains"]) if q == d] for d in domains}
    speed = "" if result.get("replay") else " tokens/s |"
    head = "| method | " + " | ".join(domains) + f" | MAT | MAT (pooled) | rounds per query | explored |{speed}"
    lines = [head, "|---|" + "---|" * (len(domains) + 4 + bool(speed))]
    for label, s in result["selectors"].items():
        mats = s["per_query_mat"]
        cells = [f"{np.mean([mats[i] for i in by_domain[d]]):.2f}" for d in domains]
        pooled = f"{s['pooled_mat']:.3f}" if "pooled_mat" in s else "—"
        explored = f"{100 * s['explored_share']:.0f}%" if "explored_share" in s else "—"
        row = (f"| {label} | " + " | ".join(cells) + f" | {np.mean(mats):.3f} | {pooled} | "
               f"{np.mean(s['per_query_rounds']):.1f} | {explored} |")
        if speed:
            row += f" {s['tokens_per_s']:.2f} |" if "tokens_per_s" in s else " — |"
        lines.append(row)
    notes = ["MAT: committed tokens (the EOS included) per target forward, averaged per query, in every row and "
             "domain cell; MAT (pooled): all committed tokens over all forwards of the run. explored: the share of "
             "a bandit's rounds chosen by its bonus, not its best mean."]
    if result.get("replay"):
        notes.append("Every row is an exact greedy replay of the query's trajectory through the decode loop "
                     "(bench/replay.py): MAT is exact, and no tokens/s is measured (README: `hedgespec bench speed`).")
    else:
        notes.append("tokens/s: output tokens over wall time, averaged per query.")
    notes.append(f"`{BEST_PER_QUERY}`: each query's best fixed run, picked in hindsight (a switching selector may "
                 f"beat it). `{CEILING}`: the hindsight per-round choice of drafter and k that covers each trajectory "
                 "in the fewest forwards (bench/ceiling.py), which no selector can beat.")
    return "\n".join(lines) + "\n\n" + " ".join(notes)


def checks(results: dict) -> list[str]:
    """The paper's claims as measured here, in the units of the tables below (MAT averaged per query)."""
    lines = []
    if "main-greedy" in results:
        lines += greedy_checks(results["main-greedy"]["selectors"])
    if "scaling" in results:
        sizes = sorted(results["scaling"], key=int)
        base = "8" if "8" in sizes[:-1] else sizes[0]  # the paper's claim: N = 32 against N = 8
        first, last = results["scaling"][base], results["scaling"][sizes[-1]]
        lines.append(f"- Pool size {base} -> {sizes[-1]}: " + ", ".join(
            f"{m} {100 * (last[m] / first[m] - 1):+.1f}%" for m in SCALING_METHODS if m in first) + " MAT.")
    if "shift" in results:
        shift = results["shift"]
        lines.append("- Rewording: " + ", ".join(
            f"{m} {100 * (shift['reworded'][m] / shift['original'][m] - 1):+.1f}%" for m in shift["original"]) + " MAT.")
    return lines


def greedy_checks(greedy: dict) -> list[str]:
    mat = {label: float(np.mean(s["per_query_mat"])) for label, s in greedy.items()}
    best_fixed = max((label for label in mat if label.startswith("fixed:")), key=mat.get)
    lines = []
    if CEILING in mat:
        lines.append(f"- HedgeSpec / per-round ceiling: {mat['hedgespec']:.3f} / {mat[CEILING]:.3f} = "
                     f"**{mat['hedgespec'] / mat[CEILING]:.3f}x**.")
    lines.append(f"- HedgeSpec / best single drafter per query: {mat['hedgespec']:.3f} / {mat[BEST_PER_QUERY]:.3f} = "
                 f"**{mat['hedgespec'] / mat[BEST_PER_QUERY]:.3f}x**; best fixed drafter ({best_fixed}) {mat[best_fixed]:.3f}.")
    for bandit in ("ucbspec", "ucb1", "exp3spec"):
        if bandit in mat:
            row = greedy[bandit]
            how = (f" ({row['rounds_per_query']:.0f} rounds per query, {100 * row['explored_share']:.0f}% of them chosen "
                   "by the bonus)" if "explored_share" in row else "")
            lines.append(f"- HedgeSpec against {bandit}: {100 * (mat['hedgespec'] / mat[bandit] - 1):+.1f}% MAT{how}.")
    if "rule" in mat:
        lines.append(f"- Sleeping HedgeSpec {mat['hedgespec-sleeping']:.3f} against the per-round rule {mat['rule']:.3f}.")
    return lines


def mean_regret(result: dict, label: str, grid: np.ndarray) -> np.ndarray:
    curves = [np.interp(grid, tokens, curve) for tokens, curve in result["selectors"][label]["regret_curves"] if tokens]
    return np.mean(curves, axis=0) if curves else np.zeros_like(grid, dtype=float)


def _figure(path: Path, draw) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    draw(ax)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plots(out: Path, results: dict, max_tokens: int) -> None:
    """regret.png (from main-greedy) and scaling.png (from scaling), for the steps saved so far."""
    if "main-greedy" in results:
        grid = np.arange(1, max_tokens + 1)

        def regret(ax):
            for label in REGRET_METHODS:
                if label in results["main-greedy"]["selectors"]:
                    ax.plot(grid, mean_regret(results["main-greedy"], label, grid), label=label)
            ax.set(xlabel="committed tokens", ylabel="cumulative regret (EAL loss)",
                   title="Regret against the best drafter of each query")
        _figure(out / "regret.png", regret)
    if "scaling" in results:
        sizes = sorted(results["scaling"], key=int)

        def scaling(ax):
            for label in SCALING_METHODS:
                if all(label in results["scaling"][n] for n in sizes):
                    ax.plot([int(n) for n in sizes], [results["scaling"][n][label] for n in sizes], marker="o", label=label)
            ax.set(xlabel="drafters in the pool (N)", ylabel="MAT", xscale="log", title="MAT against pool size")
            ax.set_xticks([int(n) for n in sizes], sizes)
        _figure(out / "scaling.png", scaling)


def write(out: Path, results: dict, settings, config) -> None:
    """BENCHMARKS.md from the steps saved so far; a step not run yet is named with its command."""
    quick = " --quick" if settings.config == "configs/tiny.yaml" else ""
    command = f"hedgespec bench paper{quick} --out {out}"
    plots(out, results, settings.max_tokens)
    subset = settings.subset_queries
    sections = {
        "main-greedy": lambda r: ["## Main table, greedy\n", f"Conditions: {conditions(settings, config, 0.0)}.\n",
                                  main_table(r), "\n## Regret\n", "![regret](regret.png)\n",
                                  "Mean cumulative regret per query against the best single drafter of that query, on "
                                  "the full-information EAL loss at each round's start (greedy run above). Regret per "
                                  "committed token: " + ", ".join(f"{m} {r['selectors'][m]['regret_per_token']:.4f}"
                                                                  for m in REGRET_METHODS if m in r["selectors"]) + ".\n"],
        "main-sampling": lambda r: ["## Main table, sampling\n",
                                    f"Conditions: {conditions(settings, config, settings.temperature, subset, settings.live_max_tokens)}.\n",
                                    main_table(r)],
        "scaling": lambda r: ["## Pool size\n", "Greedy, exact replay; the pool is grown with decoy drafters (datastores "
                              f"over token-shuffled domain text). {conditions(settings, config, 0.0, subset)}.\n",
                              "MAT averaged per query in every column.\n",
                              "| N | " + " | ".join(SCALING_METHODS) + " |", "|---|" + "---|" * len(SCALING_METHODS),
                              *[f"| {n} | " + " | ".join(f"{r[n][m]:.3f}" if m in r[n] else "—" for m in SCALING_METHODS)
                                + " |" for n in sorted(r, key=int)], "\n![scaling](scaling.png)\n"],
        "shift": lambda r: ["## Distribution shift (reworded prompts)\n", f"Greedy. {conditions(settings, config, 0.0)}.\n",
                            "| method | original | reworded | change |", "|---|---|---|---|",
                            *[f"| {m} | {r['original'][m]:.3f} | {r['reworded'][m]:.3f} | "
                              f"{100 * (r['reworded'][m] / r['original'][m] - 1):+.1f}% |" for m in r["original"]]],
        "overhead": lambda r: ["## Overheads\n", f"Greedy, {r['round']['rounds']} rounds of the first 3 queries. "
                               f"{conditions(settings, config, 0.0, max_tokens=settings.live_max_tokens)}.\n", "| part of a round | ms | share |", "|---|---|---|",
                               *[f"| {k} | {v:.2f} | {100 * r['round']['share'][k]:.1f}% |" for k, v in
                                 sorted(r["round"]["ms_per_round"].items(), key=lambda kv: -kv[1])],
                               "\nLearner update + weights (us): " + "; ".join(
                                   f"N={n}: " + ", ".join(f"{k} {v:.1f}" for k, v in t.items())
                                   for n, t in r["learner_update_us"].items()) + "\n"],
    }
    missing = [step for step in sections if step not in results]
    lines = ["# HedgeSpec on this pool: the paper's experiments\n", f"Produced by `{command}`.\n"]
    if missing:
        lines.append(f"Not run yet: {', '.join(missing)} (`{command} --steps {' '.join(missing)}`).\n")
    lines += ["## The paper's claims, measured\n", *checks(results), ""]
    for step, section in sections.items():
        if step in results:
            lines += [*section(results[step]), ""]
    (out / "BENCHMARKS.md").write_text("\n".join(lines))
