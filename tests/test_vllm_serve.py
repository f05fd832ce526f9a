"""`bench load --vllm-serve` starts vLLM's own OpenAI server with the app's engine settings: its
command line, read by vLLM's own argument parser (the reference), gives the engine the app builds.
Behind the `vllm` marker (it imports vLLM; no engine is started)."""
import pytest

from deployments.vllm_serve import command
from hedgespec.bench.engines import with_speculation
from hedgespec.config import load_config
from hedgespec.vllm_engine import engine_arguments

pytestmark = pytest.mark.vllm


@pytest.mark.parametrize("kind", ["none", "ngram"])
def test_vllm_serve_is_started_with_the_apps_engine_settings(kind):
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    config = with_speculation(load_config("serve_config.yaml"), kind)
    line = command(config, 8123, "hedgespec")
    assert line[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    parsed = make_arg_parser(FlexibleArgumentParser()).parse_args(line[3:])
    served, app = AsyncEngineArgs.from_cli_args(parsed), engine_arguments(config)
    for name in ("model", "tokenizer", "dtype", "enforce_eager", "max_model_len", "max_num_seqs", "stream_interval", "seed"):
        assert getattr(served, name) == app[name], name
    assert served.speculative_config == app.get("speculative_config")
    assert (parsed.port, parsed.served_model_name) == (8123, ["hedgespec"])
