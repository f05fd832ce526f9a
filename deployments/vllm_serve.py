"""vLLM's own OpenAI server (`python -m vllm.entrypoints.openai.api_server`, what `vllm serve` runs),
started with the engine settings of a config, for `hedgespec bench load --vllm-serve`: the server
a user would run instead of this app, beside the app's own vLLM baselines.

Each server is a subprocess in a session of its own (vLLM's engine processes go down with it), on a
free local port, in the environment the app gives its engine (hedgespec.vllm_engine.environment)."""
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import httpx

from hedgespec.bench.engines import with_speculation
from hedgespec.config import EngineConfig
from hedgespec.vllm_engine import engine_arguments, environment

KINDS = ("none", "ngram")  # vLLM's own speculation; HedgeSpec's runs in the app
READY_TIMEOUT_S = 900.0  # a compiled engine starts in 1.5-4.5 min on 2 cores


def command(config: EngineConfig, port: int, model_name: str) -> list[str]:
    """The server's command line for the config's engine arguments (the app's worker extension left out)."""
    arguments = engine_arguments(config)
    flags = ["--model", arguments["model"], "--tokenizer", arguments["tokenizer"], "--served-model-name", model_name,
             "--dtype", arguments["dtype"], "--max-num-seqs", str(arguments["max_num_seqs"]),
             "--stream-interval", str(arguments["stream_interval"]),
             "--seed", str(arguments["seed"]), "--host", "127.0.0.1", "--port", str(port)]
    if arguments["max_model_len"] is not None:
        flags += ["--max-model-len", str(arguments["max_model_len"])]
    if arguments["enforce_eager"]:
        flags.append("--enforce-eager")
    if "gpu_memory_utilization" in arguments:
        flags += ["--gpu-memory-utilization", str(arguments["gpu_memory_utilization"])]
    if "speculative_config" in arguments:
        flags += ["--speculative-config", json.dumps(arguments["speculative_config"])]
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", *flags]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def vllm_servers(config: EngineConfig, kinds: list[str], model_name: str, eager: bool = False) -> Iterator[dict[str, str]]:
    """Per kind, the base URL of a ready vLLM server with that speculation; all stopped on exit."""
    if unknown := [kind for kind in kinds if kind not in KINDS]:
        raise ValueError(f"vLLM's own server runs speculation {KINDS}, not {unknown}")
    servers: dict[str, tuple[subprocess.Popen, str, str]] = {}  # kind: the process, its URL, its log
    try:
        for kind in kinds:
            engine = with_speculation(config, kind, **({"enforce_eager": True} if eager else {}))
            port = _free_port()
            log = tempfile.NamedTemporaryFile("w", prefix=f"vllm-serve-{kind}-", suffix=".log", delete=False)
            process = subprocess.Popen(command(engine, port, model_name), env=os.environ | environment(engine),
                                       stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            log.close()  # the server writes through its own copy
            servers[kind] = process, f"http://127.0.0.1:{port}", log.name
        for kind, (process, url, log_path) in servers.items():
            _wait_ready(process, url, f"{kind}, log {log_path}")
        yield {kind: url for kind, (_, url, _) in servers.items()}
    finally:
        for process, _, _ in servers.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process, _, _ in servers.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:  # a server stuck in its shutdown: its whole session goes
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)


def _wait_ready(process: subprocess.Popen, url: str, name: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"vLLM's server ({name}) exited with {process.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health", timeout=2.0).status_code == 200:
                return
        time.sleep(2.0)
    raise TimeoutError(f"vLLM's server ({name}) was not ready after {READY_TIMEOUT_S:.0f} s")
