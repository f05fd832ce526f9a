"""`hedgespec bench speed`: tokens per second of every way to decode the same prompts, one process.

Sides: target-only; HedgeSpec with the time objective (`loss: time`, arms (drafter, k) and the plain
step); HedgeSpec with the paper's MAT objective (`loss: eal`, drafters at K); and single drafters
alone, each at its best K. The best K of every drafter comes from an exact greedy replay on the
first `calibration` prompts (its MAT at each K, bench/replay.py) priced with times measured in the
same run: its own propose time at each K during the replay, and the target's verify forward per
number of tokens (bench/forward.py). The `singles` drafters with the highest predicted tokens/s
then run for real on every prompt; the table keeps the predictions of the others.

Sides alternate per prompt in a rotating order so that drift on a shared machine hits them alike;
every figure is a ratio within the run. Per side: tokens/s, MAT (committed tokens per target
forward, pooled over the prompts), and the mean ms of a round split into verify, draft (a chosen
drafter's catch-up included), the rest of the loop, and scoring beside the rounds (the worker).
"""
import json
import sys
import time

import numpy as np

from hedgespec.bench.forward import forward_ms
from hedgespec.bench.ceiling import least_time
from hedgespec.bench.replay import acceptance_table, replay_one, trajectory
from hedgespec.config import FULL_INFORMATION, SelectorConfig
from hedgespec.engine import Engine
from hedgespec.sampling import Sampling

TARGET_ONLY = "target-only"


def best_k(engine: Engine, prompts: list[str], max_tokens: int) -> dict[str, dict]:
    """Per drafter ("drafters"): predicted tokens/s at each K (replay MAT over measured round cost)
    and the best K; and the per-round ceiling over time, priced the same way ("ceiling")."""
    k_max = engine.config.k
    context = int(np.mean([len(engine.encode(p)) for p in prompts]))
    verify_s = {n: ms / 1e3 for n, ms in forward_ms(engine.target.lm, context, range(1, k_max + 2), repeats=5).items()}
    paths = [(tokens, *trajectory(engine, p, tokens, max_tokens)) for p in prompts for tokens in [engine.encode(p)]]
    out = {}
    for drafter in engine.drafters:
        per_k = {}
        for k in range(1, k_max + 1):
            proposing = _TimedPropose(drafter)
            mats = [replay_one(proposing, tokens, path, hidden, engine.target.vocab, k, max_tokens)
                    for tokens, path, hidden in paths]
            rounds = sum(len(path) / mat for (_, path, _), mat in zip(paths, mats))
            tokens = sum(len(path) for _, path, _ in paths)
            # a round: the drafts it proposed (rounds where it slept cost a plain verify) and the verify of k+1
            seconds = proposing.seconds + (rounds - proposing.calls) * verify_s[1] + proposing.calls * verify_s[k + 1]
            per_k[k] = {"mat": tokens / rounds, "predicted_tokens_per_s": tokens / seconds,
                        "propose_s": proposing.seconds / max(1, proposing.calls)}
        best = max(per_k, key=lambda k: per_k[k]["predicted_tokens_per_s"])
        out[drafter.name] = {"best_k": best, "per_k": per_k}
    return {"drafters": out, "ceiling": time_ceiling(engine, paths, out, verify_s, max_tokens)}


def time_ceiling(engine: Engine, paths: list, calibrated: dict, verify_s: dict, max_tokens: int) -> dict:
    """The per-round ceiling over time on the calibration prompts (bench/ceiling.py): the hindsight
    choice, each round, of the drafter and k (or the plain step) that commits the trajectory in the
    least time, priced like the singles' predictions (a round: its draft + the verify of k+1)."""
    names = [d.name for d in engine.drafters]

    def cost(d, k):
        return verify_s[k + 1] + (0.0 if d is None else calibrated[names[d]]["per_k"][k]["propose_s"])
    tokens = seconds = 0.0
    for prompt, path, hidden in paths:
        table = np.array([acceptance_table(d, prompt, path, hidden, engine.target.vocab, engine.config.k, max_tokens)
                          for d in engine.drafters])
        budgets = np.minimum(engine.config.k, max_tokens - 1 - np.arange(len(path)))
        best, _ = least_time(table, budgets, cost)
        tokens, seconds = tokens + len(path), seconds + best
    return {"predicted_tokens_per_s": tokens / seconds, "prompts": len(paths)}


class _TimedPropose:
    """A drafter whose proposals are timed (what a round spends drafting with it)."""

    def __init__(self, drafter):
        self.drafter, self.name = drafter, drafter.name
        self.seconds, self.calls = 0.0, 0

    def propose(self, request_id, k):
        start = time.perf_counter()
        draft = self.drafter.propose(request_id, k)
        self.seconds += time.perf_counter() - start
        self.calls += bool(draft.tokens)
        return draft

    def __getattr__(self, name):
        return getattr(self.drafter, name)


def sides(engine: Engine, calibration: dict[str, dict] | None, singles: int) -> dict:
    """label -> (engine, selector config or None for target-only decoding)."""
    configured = engine.config.selector
    learner = configured if configured.name in FULL_INFORMATION else SelectorConfig(name="hedgespec")
    out = {TARGET_ONLY: (engine, None)}
    for objective, label in (("time", "time"), ("eal", "MAT")):
        selector = learner.model_copy(update={"loss": objective})
        out[f"{learner.name} ({label})"] = (engine.with_drafters(engine.drafters, selector=selector), "spec")
    if calibration:
        ranked = sorted(calibration, key=lambda d: -calibration[d]["per_k"][calibration[d]["best_k"]]["predicted_tokens_per_s"])
        chosen = [(d, calibration[d]["best_k"]) for d in ranked[:singles]]
    else:
        chosen = [(d.name, engine.config.k) for d in engine.drafters[:singles]]
    by_name = {d.name: d for d in engine.drafters}
    for drafter, k in chosen:
        out[f"{drafter}@{k}"] = (engine.with_drafters([by_name[drafter]], k, SelectorConfig(name="fixed", drafter=drafter)), "spec")
    return out


def run(engine: Engine, prompts: list[str], sampling: Sampling, max_tokens: int, seed: int, singles: int = 3,
        calibration: int = 3) -> dict:
    engine.generate(prompts[0], 8, sampling, seed)  # warm-up: first forwards pay one-off costs
    predicted = best_k(engine, prompts[:calibration], max_tokens) if sampling.greedy and engine.drafters else None
    calibrated = predicted["drafters"] if predicted else None
    runners = sides(engine, calibrated, singles)
    totals = {label: {"tokens": 0, "seconds": 0.0, "forwards": 0, "verify_s": 0.0, "draft_s": 0.0,
                      "scoring_beside_s": 0.0, "identical": 0, "per_prompt_tokens_per_s": []} for label in runners}
    reference: list[list[int]] = []
    for i, prompt in enumerate(prompts):
        labels = list(runners)
        for label in labels[i % len(labels):] + labels[:i % len(labels)]:
            side, mode = runners[label]
            beside = side.pool.scoring_seconds["beside"]
            gen = side.generate(prompt, max_tokens, sampling, seed, speculate=mode is not None)
            t = totals[label]
            t["tokens"] += len(gen.tokens)
            t["seconds"] += gen.seconds
            t["forwards"] += gen.target_forwards
            t["verify_s"] += sum(r.verify_seconds for r in gen.rounds)
            t["draft_s"] += sum(r.draft_seconds for r in gen.rounds)
            t["scoring_beside_s"] += side.pool.scoring_seconds["beside"] - beside
            t["per_prompt_tokens_per_s"].append(len(gen.tokens) / gen.seconds)
            t.setdefault("texts", {})[i] = gen.tokens
        reference.append(totals[TARGET_ONLY]["texts"][i])
    base = totals[TARGET_ONLY]["tokens"] / totals[TARGET_ONLY]["seconds"]
    for label, t in totals.items():
        texts = t.pop("texts")
        t["identical"] = sum(texts[i] == reference[i] for i in range(len(prompts)))
        rounds = max(1, t["forwards"])
        t |= {"tokens_per_s": t["tokens"] / t["seconds"], "mat": t["tokens"] / rounds,
              "speedup": t["tokens"] / t["seconds"] / base,
              "ms_per_round": {"verify": 1e3 * t["verify_s"] / rounds, "draft": 1e3 * t["draft_s"] / rounds,
                               "rest": 1e3 * (t["seconds"] - t["verify_s"] - t["draft_s"]) / rounds,
                               "scoring_beside": 1e3 * t["scoring_beside_s"] / rounds}}
    singles_run = [label for label in totals if "@" in label]
    best_single = max(singles_run, key=lambda label: totals[label]["tokens_per_s"]) if singles_run else None
    names = [d.name for d in engine.drafters]
    learned = {label: {"costs": side.costs.snapshot(), "depth_factors": side.calibration.snapshot(names)}
               for label, (side, _) in runners.items() if "(" in label}
    return {"target": engine.config.target.model, "dtype": engine.dtype, "drafters": names,
            "k": engine.config.k, "temperature": sampling.temperature, "max_tokens": max_tokens, "prompts": len(prompts),
            "calibration": calibrated, "time_ceiling": predicted["ceiling"] if predicted else None,
            "best_single": best_single, "sides": totals, "learned": learned}


def table(result: dict) -> str:
    rows = ["| side | tokens/s | vs target-only | MAT | verify ms | draft ms | rest ms | scoring beside ms | greedy identical |",
            "|---|---|---|---|---|---|---|---|---|"]
    for label, t in result["sides"].items():
        ms = t["ms_per_round"]
        rows.append(f"| {label} | {t['tokens_per_s']:.2f} | {t['speedup']:.2f}x | {t['mat']:.2f} | {ms['verify']:.1f} | "
                    f"{ms['draft']:.1f} | {ms['rest']:.1f} | {ms['scoring_beside']:.1f} | {t['identical']}/{result['prompts']} |")
    return "\n".join(rows)


def main(engine: Engine, sampling: Sampling, max_tokens: int, seed: int, prompts: list[str], json_out: str | None,
         singles: int = 3, calibration: int = 3) -> int:
    result = run(engine, prompts, sampling, max_tokens, seed, singles, calibration)
    if json_out:
        with open(json_out, "w") as f:
            json.dump(result, f, indent=2)
    print(f"target {result['target']} ({result['dtype']}), {len(result['drafters'])} drafters, K <= {result['k']}, "
          f"T={sampling.temperature}, {result['prompts']} prompts x <= {max_tokens} tokens")
    print(table(result))
    if result["calibration"]:
        print("\npredicted tokens/s of each drafter alone at its best K (replay on the first prompts):")
        for name, c in sorted(result["calibration"].items(), key=lambda kv: -kv[1]["per_k"][kv[1]["best_k"]]["predicted_tokens_per_s"]):
            best = c["per_k"][c["best_k"]]
            print(f"  {name:22s} K={c['best_k']}  MAT {best['mat']:.2f}  {best['predicted_tokens_per_s']:.1f} tokens/s")
    sides_ = result["sides"]
    spec = [label for label in sides_ if "(time)" in label][0]
    print(f"\n{spec}: what it measured (ms) {result['learned'][spec]['costs']}")
    print("depth factors of the scores (real / scored acceptance per depth, from the rounds each drafter played):")
    for name, row in result["learned"][spec]["depth_factors"].items():
        if row["rounds"]:
            print(f"  {name:22s} {row['rounds']:5.0f} rounds  " + " ".join(f"{f:.2f}" for f in row["factors"]))
    if result["time_ceiling"]:
        ceiling, n = result["time_ceiling"]["predicted_tokens_per_s"], result["time_ceiling"]["prompts"]
        measured = np.mean(sides_[spec]["per_prompt_tokens_per_s"][:n])
        print(f"\nper-round ceiling over time (the best drafter and k of every round in hindsight, priced as the "
              f"predictions above) on the first {n} prompts: {ceiling:.1f} tokens/s; {spec} measured {measured:.1f} "
              f"there ({measured / ceiling:.2f}x)")
    if result["best_single"]:
        print(f"\n{spec} / best single drafter ({result['best_single']}): "
              f"{sides_[spec]['tokens_per_s'] / sides_[result['best_single']]['tokens_per_s']:.2f}x")
    if sampling.greedy and result["dtype"] == "float32" and any(t["identical"] < result["prompts"] for t in sides_.values()):
        print("ERROR: greedy output differs from target-only in float32", file=sys.stderr)
        return 1
    return 0
