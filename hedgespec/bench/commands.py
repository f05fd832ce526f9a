"""The `hedgespec bench` commands that compare selectors and drafters (their arguments are parsed in bench/cli.py)."""
import json
from pathlib import Path

from hedgespec.bench import matrix as matrix_bench
from hedgespec.bench import overhead as overhead_bench
from hedgespec.bench import paper as paper_bench
from hedgespec.bench import selectors as selector_bench


def selectors(args, config, sampling) -> int:
    from hedgespec.data import load_prompts, mixed_stream
    from hedgespec.engine import Engine
    if args.prompts:
        queries = load_prompts(args.prompts)[:args.queries]
    else:
        queries = (mixed_stream(None, args.queries, args.seed, args.reworded) if args.workload == "mixed"
                   else load_prompts(args.workload, args.reworded)[:args.queries])
    engine = Engine(config)
    routes = dict(r.split("=", 1) for r in args.route)
    chosen = selector_bench.default_selectors([d.name for d in engine.drafters], tuple(args.rule) if args.rule else None, routes)
    if args.replay:
        chosen = {label: c for label, c in chosen.items() if c.objective != "time"}
    result = selector_bench.run(engine, queries, chosen, args.max_tokens, sampling, args.seed, replay=args.replay)
    result["workload"] = args.prompts or args.workload + (" (reworded)" if args.reworded else "")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f)
    print(f"target {result['target']}, drafters {result['drafters']}, K={result['k']}, T={args.temperature}, "
          f"workload {result['workload']}, {result['queries']} queries x <= {args.max_tokens} tokens")
    print(selector_bench.table(result))
    return 0


def matrix(args, config, sampling) -> int:
    from hedgespec.data import DOMAINS, load_prompts
    from hedgespec.engine import Engine
    prompts = {d: [r["prompt"] for r in load_prompts(d)[:args.queries_per_domain]] for d in DOMAINS}
    result = matrix_bench.run(Engine(config), prompts, args.max_tokens, args.speed_queries, args.baseline)
    table = matrix_bench.markdown(result)
    if args.json:
        out = Path(args.json)
        out.write_text(json.dumps(result, indent=1))
        out.with_suffix(".md").write_text(table + "\n")
        matrix_bench.heatmap(result, str(out.with_suffix(".png")))
    print(table)
    return 0


def overhead(args, config, sampling) -> int:
    from hedgespec.bench.prompts import SPEED_PROMPTS
    from hedgespec.engine import Engine
    engine = Engine(config)
    result = {"learner_update_us": {n: overhead_bench.learner_update_us(n) for n in (8, 64)},
              "scoring_ms_per_drafter_round": overhead_bench.scoring_ms(engine.target.vocab),
              "head_scoring": overhead_bench.head_scoring_ms(engine),
              "round": overhead_bench.round_breakdown(engine, SPEED_PROMPTS[:3], args.max_tokens, sampling, args.seed)}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    for n, times in result["learner_update_us"].items():
        print(f"learner update + weights, N={n}: " + ", ".join(f"{k} {v:.1f} us" for k, v in times.items()))
    print(f"gamma/ratio scoring, one drafter, 6 positions, V={engine.target.vocab}: {result['scoring_ms_per_drafter_round']:.3f} ms")
    heads = result["head_scoring"]
    if heads:
        print(f"one scored round (3 tokens) of the EAGLE heads ({'int8' if heads['int8'] else 'float32'} products): "
              f"one head {heads['one_ms']:.2f} ms, all {heads['heads']} in one call {heads['all_ms']:.2f} ms "
              f"({heads['ratio']:.2f}x one)")
    r = result["round"]
    print(f"round: {r['round_ms']:.1f} ms over {r['rounds']} rounds")
    for key, ms in sorted(r["ms_per_round"].items(), key=lambda kv: -kv[1]):
        print(f"  {key:28s} {ms:8.2f} ms  {100 * r['share'][key]:5.1f}%")
    print(f"  beside the rounds, on the pool's worker: scoring {r['scoring_beside_ms_per_round']:.2f} ms per round")
    return 0


def paper(args) -> int:
    paper_bench.run(Path(args.out), args.quick, only=tuple(args.steps))
    print((Path(args.out) / "BENCHMARKS.md").read_text())
    return 0
