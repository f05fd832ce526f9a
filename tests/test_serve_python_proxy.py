"""The HF app (configs/serve-tiny.yaml) as `serve run` gives it without cluster/serving.env: Serve's
own Python proxy in front of the ingress and calls between deployments as Ray actor tasks. The rest
of the suite runs the app as it is served (deployments.local.serving_env: HAProxy and the
throughput-optimized mode); this path must answer and clean up as well."""
import pytest

from app_state import haproxy_command_lines, leave_a_plain_request, leave_a_stream, no_state
from deployments.local import local_app, serve_args
from hedgespec.config import ServeConfig
from hedgespec.engine import Engine

CONFIG = "configs/serve-tiny.yaml"
MODEL = "hedgespec-tiny"
PROMPTS = ["hello there, how are you doing today?", "one two three one two three"]
SERVES_PYTHON_PROXY = {"RAY_SERVE_ENABLE_HA_PROXY": "0", "RAY_SERVE_THROUGHPUT_OPTIMIZED": "0"}


@pytest.fixture(scope="module")
def server():
    with local_app(serve_args(CONFIG), env=SERVES_PYTHON_PROXY) as client:
        yield client


def test_no_haproxy_is_in_front(server):
    assert haproxy_command_lines() == []


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


def test_a_client_that_leaves_a_plain_request_frees_all_state(server):
    cancelled = server.get("/stats").json()["cancelled"]
    leave_a_plain_request(server, {"model": MODEL, "prompt": "abc abc abc abc abc", "max_tokens": 240,
                                   "temperature": 0, "speculate": False})
    assert no_state(server)["cancelled"] == cancelled + 1
