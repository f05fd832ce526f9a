"""The HF app (configs/serve-tiny.yaml) behind Ray Serve's high-throughput settings, which README
("Ray Serve's high-throughput settings") offers to try: HAProxy in place of Serve's proxy, and the
throughput-optimized mode, in which a replica's router runs on its event loop. The HF ingress calls
the other deployments from its decode threads; before it kept a router loop of its own there, every
completion on this path was a 500."""
import pytest

from app_state import leave_a_stream, no_state
from deployments.local import local_app, serve_args
from hedgespec.config import ServeConfig
from hedgespec.engine import Engine

CONFIG = "configs/serve-tiny.yaml"
MODEL = "hedgespec-tiny"
PROMPTS = ["hello there, how are you doing today?", "one two three one two three"]
HIGH_THROUGHPUT = {"RAY_SERVE_ENABLE_HA_PROXY": "1", "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1"}


@pytest.fixture(scope="module")
def server():
    with local_app(serve_args(CONFIG), env=HIGH_THROUGHPUT) as client:
        yield client


def test_speculative_greedy_text_is_the_targets_and_sampling_answers(server):
    engine = Engine(ServeConfig.model_validate(serve_args(CONFIG)).engine)
    for prompt in PROMPTS:
        answer = server.post("/v1/completions", json={"model": MODEL, "prompt": prompt, "max_tokens": 40,
                                                      "temperature": 0})
        assert answer.status_code == 200, answer.text
        assert answer.json()["choices"][0]["text"] == engine.generate(prompt, 40, chat=False, speculate=False).text
        sampled = server.post("/v1/completions", json={"model": MODEL, "prompt": prompt, "max_tokens": 12,
                                                       "temperature": 0.9, "seed": 7})
        assert sampled.status_code == 200, sampled.text
    no_state(server)


def test_a_client_that_leaves_a_stream_frees_all_state(server):
    cancelled = server.get("/stats").json()["cancelled"]
    body = {"model": MODEL, "prompt": PROMPTS[0], "max_tokens": 250, "temperature": 0, "stream": True}
    leave_a_stream(server, body, events=3)
    assert no_state(server)["cancelled"] == cancelled + 1
