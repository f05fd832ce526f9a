"""The options that `hedgespec generate` and the benchmarks share, and what they resolve to: the engine
config with its overrides, the prompts, the sampling."""
import argparse

from hedgespec.config import load_config


def add_engine_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="engine config YAML (an engine document or a Serve config)")
    parser.add_argument("--target", help="override the target model ('smollm2', 'tiny:SEED' or a folder)")
    parser.add_argument("--dtype", choices=["auto", "float32", "bfloat16", "float16"], help="override the target's dtype")
    parser.add_argument("--k", type=int, help="draft tokens per round")
    parser.add_argument("--selector", help="selector name (see configs/)")
    parser.add_argument("--drafter", help="drafter for --selector fixed, primary for --selector rule")
    parser.add_argument("--threads", type=int, help="torch CPU threads")


def add_sampling_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)


def add_speed_args(parser: argparse.ArgumentParser) -> None:
    """The speed comparisons: sampling, the prompts, and where the results go."""
    add_sampling_args(parser)
    parser.add_argument("--prompts", help="JSON-lines file with a `prompt` field (default: built-in prompts); "
                                          "benchmarks/prompts/chat.jsonl holds short chat questions")
    parser.add_argument("--mixed", type=int, metavar="N", help="the first N queries of the mixed stream of the seven "
                                                               "domains' eval sets (`hedgespec data build`), before "
                                                               "the --prompts file's if both are given")
    parser.add_argument("--limit", type=int, default=None, help="use only the first N prompts")
    parser.add_argument("--json", help="also write the results to this JSON file")


def add_singles_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--singles", type=int, default=3,
                        help="how many single drafters run alone (those predicted fastest at their best K)")
    parser.add_argument("--calibration", type=int, default=3, help="prompts the best K of each drafter is chosen on")


def engine_config(args):
    """The config file's engine document with the command line's overrides applied (and validated)."""
    config = load_config(args.config)
    target = config.target.model_copy(update={k: v for k, v in (("model", args.target), ("dtype", args.dtype)) if v})
    selector = config.selector
    if args.selector or args.drafter:
        fields = selector.model_dump() | {k: v for k, v in (("name", args.selector), ("drafter", args.drafter)) if v}
        selector = type(selector).model_validate(fields)
    fields = config.model_dump() | {"target": target.model_dump(), "selector": selector.model_dump()}
    fields |= {k: v for k, v in (("k", args.k), ("threads", args.threads)) if v is not None}
    return type(config).model_validate(fields)


def prompts(path: str | None, limit: int | None, mixed: int | None = None, seed: int = 0) -> list[str]:
    """The first `mixed` queries of the mixed stream, then the prompts of the file at `path` (neither:
    the built-in prompts); the first `limit` of them."""
    from hedgespec.bench.prompts import SPEED_PROMPTS
    from hedgespec.data import load_prompts, mixed_stream
    if not (mixed or path):
        return SPEED_PROMPTS[:limit]
    rows = (mixed_stream(None, mixed, seed) if mixed else []) + (load_prompts(path) if path else [])
    return [r["prompt"] for r in rows][:limit]


def sampling(args):
    from hedgespec.sampling import Sampling
    return Sampling(args.temperature, args.top_k, args.top_p)
