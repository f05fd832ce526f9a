"""The `hedgespec bench` commands: their arguments, and what runs each (imported only when it runs:
torch, vLLM and Ray stay out of `hedgespec --help`)."""
import argparse
import json

from hedgespec.bench import PAPER_STEPS
from hedgespec.cli_options import (add_engine_args, add_sampling_args, add_singles_args, add_speed_args,
                                   engine_config, prompts, sampling)
from hedgespec.config import load_config


def add_parsers(commands) -> None:
    bench = commands.add_parser("bench", help="benchmarks").add_subparsers(dest="bench", required=True)
    speed = bench.add_parser("speed", help="target-only vs speculative decoding on the same prompts, one run")
    add_engine_args(speed)
    add_speed_args(speed)
    add_singles_args(speed)
    speed.set_defaults(run=_speed)

    serve_bench = bench.add_parser("serve", help="HTTP (Ray Serve) vs in-process vs HTTP target-only, one run")
    serve_bench.add_argument("--config", default="configs/serve-hf.yaml", help="Serve config (default: configs/serve-hf.yaml)")
    add_speed_args(serve_bench)
    add_singles_args(serve_bench)
    serve_bench.set_defaults(run=_serve)

    load = bench.add_parser("load", help="tokens/s and latency against concurrent clients, per kind of speculation, one run")
    load.add_argument("--config", default="serve_config.yaml", help="Serve config (default: serve_config.yaml)")
    load.add_argument("--kinds", default=None, help="comma-separated, the baseline first (default: none,ngram,hedgespec "
                                                    "on the vLLM backend, none,hedgespec on HF); on vLLM a kind may "
                                                    "change other target.vllm settings: hedgespec@stream_interval=1")
    load.add_argument("--clients", default="1,2,4,8,16", help="comma-separated client counts")
    load.add_argument("--requests", type=int, default=4, help="greedy requests per client at each count")
    load.add_argument("--repeats", type=int, default=1, help="runs of every count, all kinds in each (the median "
                                                             "is reported; the machine's drift cancels in the ratios)")
    load.add_argument("--eager", action="store_true", help="vLLM without torch.compile (starts fast, decodes slower)")
    _add_stream_args(load, max_tokens=128)
    load.add_argument("--plot", help="also plot tokens/s against clients to this PNG")
    load.add_argument("--single", help="JSON-lines prompts also sent once each by one client (e.g. a chat-style set)")
    load.add_argument("--pinned", default="", help="comma-separated drafters of the pool, each also run alone "
                                                   "(`speculation.drafter`) in the hedgespec kind's app")
    load.add_argument("--vllm-serve", default="", help="comma-separated kinds of vLLM's own speculation (none, ngram), "
                                                       "each also run in vLLM's own OpenAI server, the config's engine "
                                                       "settings: the server a user would run instead")
    load.set_defaults(run=_load)

    engines = bench.add_parser("engines", help="the vLLM engines alone in this process (no Ray, no HTTP): tokens/s "
                                               "per kind at N concurrent requests, to split bench load's gaps")
    engines.add_argument("--config", default="serve_config.yaml", help="Serve or engine config (default: serve_config.yaml)")
    engines.add_argument("--kinds", default="none,hedgespec", help="comma-separated, the baseline first: none, ngram, "
                                                                   "hedgespec, hedgespec-off (its engine, no drafts); "
                                                                   "each may name its engine's K, e.g. hedgespec@k=8")
    engines.add_argument("--clients", default="8,16", help="comma-separated client counts")
    engines.add_argument("--requests", type=int, default=3, help="greedy requests per client at each count")
    engines.add_argument("--repeats", type=int, default=3, help="runs of every count, all kinds in each")
    _add_stream_args(engines, max_tokens=128)
    engines.set_defaults(run=_engines)

    soak = bench.add_parser("soak", help="N concurrent streaming clients against the app for a fixed time")
    soak.add_argument("--config", default="serve_config.yaml", help="Serve config (default: serve_config.yaml)")
    soak.add_argument("--clients", type=int, default=32)
    soak.add_argument("--duration", type=float, default=300.0, help="seconds of load")
    soak.add_argument("--warmup", type=float, default=60.0, help="seconds of the same load before memory is read")
    _add_stream_args(soak, max_tokens=32)
    soak.set_defaults(run=_soak)

    sel = bench.add_parser("selectors", help="every selector on the same queries, one run: MAT, tokens/s, regret")
    add_engine_args(sel)
    add_sampling_args(sel)
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
    add_engine_args(matrix)
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
    paper.set_defaults(run=lambda args: _commands().paper(args))

    overhead = bench.add_parser("overhead", help="learner update cost, and where a round's time goes")
    add_engine_args(overhead)
    add_sampling_args(overhead)
    overhead.add_argument("--json", help="also write the results to this JSON file")
    overhead.set_defaults(run=_with_engine("overhead"))

    ties = bench.add_parser("ties", help="greedy speculative vs target-only text in the configured dtype: every "
                                         "divergence must sit at a near-tie of the target (measured bound)")
    add_engine_args(ties)
    add_speed_args(ties)
    ties.set_defaults(run=_ties)

    proposer = bench.add_parser("proposer", help="the vLLM backend's proposer alone, as vLLM's runner drives it "
                                                 "over the target's greedy texts: its own ms per step at each batch size")
    proposer.add_argument("--config", default="serve_config.yaml", help="Serve or engine config (default: serve_config.yaml)")
    proposer.add_argument("--batches", default="1,4,8,16", help="comma-separated batch sizes")
    proposer.add_argument("--requests", type=int, help="requests run at each batch size, the prompts' texts cycling "
                                                       "(default: the more of the prompts and twice the batch)")
    proposer.add_argument("--step-ms", type=float, default=30.0, help="a simulated step's fixed part")
    proposer.add_argument("--token-ms", type=float, default=2.0, help="a simulated step's part per token it verifies")
    proposer.add_argument("--modes", type=_gate_modes, help="comma-separated load-gate modes (all, copy, none), each played in every "
                                          "batched step, one row per mode and batch size (default: the gate decides)")
    _add_stream_args(proposer, max_tokens=128)
    proposer.set_defaults(run=_proposer)

    forward = bench.add_parser("forward", help="the target's forward cost per number of new tokens, default "
                                               "CPU kernels against oneDNN-prepacked weights, one run")
    forward.add_argument("--model", default="smollm2")
    forward.add_argument("--dtype", default="float32")
    forward.add_argument("--context", type=int, default=300)
    forward.add_argument("--threads", type=int, default=1)
    forward.set_defaults(run=_forward)


def _add_stream_args(parser: argparse.ArgumentParser, max_tokens: int) -> None:
    """The prompts, length and seed of a benchmark that streams requests, and where its results go."""
    parser.add_argument("--max-tokens", type=int, default=max_tokens)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prompts", help="JSON-lines file with a `prompt` field (default: built-in prompts)")
    parser.add_argument("--mixed", type=int, metavar="N", help="the first N queries of the mixed stream (before the "
                                                               "--prompts file's, if both are given)")
    parser.add_argument("--json", help="also write the results to this JSON file")


def _gate_modes(value: str) -> list[str]:
    from hedgespec.load_gate import MODES
    modes = value.split(",")
    unknown = [mode for mode in modes if mode not in MODES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown load-gate mode(s) {', '.join(unknown)}: choose from {', '.join(MODES)}")
    return modes


def _write_json(path: str | None, result: dict) -> int:
    if path:
        with open(path, "w") as f:
            json.dump(result, f, indent=2)
    return 0


def _speed(args) -> int:
    from hedgespec.bench import speed
    from hedgespec.engine import Engine
    return speed.main(Engine(engine_config(args)), sampling(args), args.max_tokens, args.seed,
                      prompts(args.prompts, args.limit, args.mixed, args.seed), args.json, args.singles, args.calibration)


def _serve(args) -> int:
    from deployments import bench as serve_bench  # Ray lives in deployments/, never in the library
    return serve_bench.main(args.config, prompts(args.prompts, args.limit, args.mixed, args.seed), args.max_tokens,
                            args.temperature, args.seed, args.json, args.singles, args.calibration)


def _load(args) -> int:
    from deployments import sweep
    from deployments.local import serve_args
    from hedgespec.config import ServeConfig
    backend = ServeConfig.model_validate(serve_args(args.config)).engine.target.backend
    kinds = args.kinds.split(",") if args.kinds else list(sweep.VLLM_KINDS if backend == "vllm" else sweep.HF_KINDS)
    return sweep.main(args.config, prompts(args.prompts, None, args.mixed, args.seed), kinds,
                      [int(n) for n in args.clients.split(",")], args.requests, args.max_tokens, args.eager, args.json,
                      args.plot, prompts(args.single, None) if args.single else None,
                      [d for d in args.pinned.split(",") if d], args.repeats, [k for k in args.vllm_serve.split(",") if k])


def _engines(args) -> int:
    from hedgespec.bench import engines
    return _write_json(args.json, engines.main(
        load_config(args.config), prompts(args.prompts, None, args.mixed, args.seed), args.kinds.split(","),
        [int(n) for n in args.clients.split(",")], args.requests, args.max_tokens, args.repeats))


def _soak(args) -> int:
    from deployments import load
    return load.main(args.config, prompts(args.prompts, None, args.mixed, args.seed), args.clients, args.duration,
                     args.max_tokens, args.seed, args.warmup, args.json)


def _ties(args) -> int:
    config, texts = engine_config(args), prompts(args.prompts, args.limit, args.mixed, args.seed)
    if config.target.backend == "vllm":  # one vLLM engine, its plain decoding against HedgeSpec's
        from hedgespec.bench import vllm_ties
        return vllm_ties.main(config, texts, args.max_tokens)
    from hedgespec.bench import ties
    from hedgespec.engine import Engine
    return ties.main(Engine(config), texts, args.max_tokens)


def _proposer(args) -> int:
    from hedgespec.bench import proposer
    return _write_json(args.json, proposer.main(
        load_config(args.config), prompts(args.prompts, None, args.mixed, args.seed), args.max_tokens,
        [int(b) for b in args.batches.split(",")], args.requests, args.step_ms / 1e3, args.token_ms / 1e3,
        args.modes or [None]))


def _forward(args) -> int:
    import torch

    from hedgespec.bench import forward
    torch.set_num_threads(args.threads)
    return forward.main(args.model, args.dtype, args.context)


def _commands():
    from hedgespec.bench import commands  # imports torch and the data layer: only when a benchmark runs
    return commands


def _with_engine(name: str, greedy: bool = False):
    """A handler that takes the engine config and the sampling: from the common arguments, or greedy
    for commands that are greedy by design (the matrix's exact replay needs it)."""
    def run(args):
        from hedgespec.sampling import Sampling
        return getattr(_commands(), name)(args, engine_config(args), Sampling() if greedy else sampling(args))
    return run
