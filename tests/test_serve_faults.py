"""Faults on the real app (configs/serve-tiny.yaml): replicas killed while requests are in flight,
and clients that leave. Behind the `faults` marker (.ci/run runs it after the default suite):
each test kills a replica and waits for Ray Serve to bring it back.

What is promised (README, "What the server promises"): a drafter group or the selector that fails
costs speed, never the text; a target that fails ends its in-flight requests with a 503 and
Retry-After, never a hang, and the app serves again once Serve has restarted it.
"""
import concurrent.futures
import json
import os
import threading
import time

import httpx
import pytest

from app_state import no_state, wait_until
from deployments.local import local_app, serve_args
from hedgespec.config import ServeConfig
from hedgespec.engine import Engine

pytestmark = pytest.mark.faults

CONFIG = "configs/serve-tiny.yaml"
MODEL = "hedgespec-tiny"
PROMPTS = ["hello there, how are you doing today?", "abc abc abc abc abc", "Write a poem about the sea.",
           "one two three one two three"]
TOKENS = 240
RESTART_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def server():
    with local_app(serve_args(CONFIG)) as client:
        yield client


@pytest.fixture(scope="module")
def reference():
    """Target-only greedy text of the in-process engine on the same target, by (prompt, tokens)."""
    engine = Engine(ServeConfig.model_validate(serve_args(CONFIG)).engine)
    texts = {}

    def text(prompt: str, tokens: int = TOKENS) -> str:
        if (prompt, tokens) not in texts:
            texts[prompt, tokens] = engine.generate(prompt, tokens, chat=False, speculate=False).text
        return texts[prompt, tokens]
    return text


def kill_replica(deployment: str) -> str:
    """Kills one running replica of a deployment the way a crash would (Serve then starts another);
    returns once its process has exited. ray.kill only asks, and Ray drops the actor's name before
    the process is gone: behind HAProxy with the throughput-optimized mode, where calls between
    deployments go over gRPC straight to the replica's process, a /health asked in that gap was
    answered by the dying Target."""
    import ray

    names = sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                   if a["namespace"] == "serve" and f"#{deployment}#" in a["name"])
    assert names, f"no replica of {deployment}"
    replica = ray.get_actor(names[0], namespace="serve")
    pid = ray.get(replica.__ray_call__.remote(lambda _: os.getpid()))
    ray.kill(replica, no_restart=True)
    wait_until(lambda: not os.path.exists(f"/proc/{pid}"), timeout=30, what=f"{names[0]} to exit")
    return names[0]


def replaced(deployment: str, replicas: int) -> bool:
    """Serve runs `replicas` replicas of the deployment again, none of them a killed one. Right
    after a kill Serve may still count the dead replica as running (its controller finds out by the
    replica's health check), while Ray no longer lists the dead actor."""
    import ray
    from ray import serve
    running = serve.status().applications["hedgespec"].deployments[deployment].replica_states.get("RUNNING", 0)
    alive = [a for a in ray.util.list_named_actors(all_namespaces=True)
             if a["namespace"] == "serve" and f"#{deployment}#" in a["name"]]
    return running == len(alive) == replicas


def stream(server, prompt: str, started: threading.Event, timeout: float = 120) -> dict:
    """A greedy streaming request: its text, the status of an error event if one came, and its stats."""
    body = {"model": MODEL, "prompt": prompt, "max_tokens": TOKENS, "temperature": 0, "stream": True}
    text, error, stats = [], None, None
    with server.stream("POST", "/v1/completions", json=body, timeout=timeout) as response:
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if "error" in event:
                error = event
                continue
            started.set()
            text.append(event["choices"][0]["text"])
            stats = event.get("hedgespec", stats)
    started.set()
    return {"text": "".join(text), "error": error, "stats": stats, "ended_at": time.monotonic()}


def in_flight_while(server, prompts, fault):
    """Streams the prompts at once; runs `fault` once every stream has produced text. Each result
    says whether its stream was still running when the fault was done (`after_fault`)."""
    events = [threading.Event() for _ in prompts]
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        futures = [pool.submit(stream, server, p, e) for p, e in zip(prompts, events)]
        for event in events:
            assert event.wait(60)
        fault()
        done = time.monotonic()
        return [result | {"after_fault": result["ended_at"] > done} for result in (f.result(timeout=180) for f in futures)]


def test_a_drafter_group_replica_killed_mid_request_changes_no_text(server, reference):
    before = server.get("/stats").json()["recovered"].get("groups", 0)
    results = in_flight_while(server, PROMPTS, lambda: kill_replica("DrafterGroup-lm"))
    for prompt, result in zip(PROMPTS, results):
        assert result["error"] is None, (prompt, result["error"])
        assert result["text"] == reference(prompt), prompt
    # the requests that lost their group were rebuilt on a live replica (the other one, or the restarted
    # one); the router spreads the four over both replicas, so the killed one held two of them
    recovered = server.get("/stats").json()["recovered"]
    running_after = sum(result["after_fault"] for result in results)
    assert recovered.get("groups", 0) > before, f"{recovered}; streams still running after the kill: {running_after} of {len(results)}"
    wait_until(lambda: replaced("DrafterGroup-lm", 2), RESTART_TIMEOUT_S, what="the group's replica to be restarted")
    no_state(server)


def test_the_selector_killed_mid_request_changes_no_text_and_learning_resumes(server, reference):
    """Requests in flight at the kill and requests begun while the selector is down keep the
    target's greedy text (they draft on their last choice, or a uniform one); once Serve has
    restarted the selector, requests learn again."""
    with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
        def kill_and_ask_more():
            kill_replica("Selector")
            late.extend(pool.submit(stream, server, p, threading.Event()) for p in PROMPTS[:2])
        late = []
        results = in_flight_while(server, PROMPTS, kill_and_ask_more)
        results += [f.result(timeout=180) for f in late]
    for prompt, result in zip(PROMPTS + PROMPTS[:2], results):
        assert result["error"] is None and result["text"] == reference(prompt), prompt
    wait_until(lambda: replaced("Selector", 1), RESTART_TIMEOUT_S, what="the selector to be restarted")
    answer = server.post("/v1/completions", json={"model": MODEL, "prompt": PROMPTS[1], "max_tokens": 40,
                                                  "temperature": 0}).json()
    assert answer["choices"][0]["text"] == reference(PROMPTS[1], 40)
    weights = server.get("/dashboard/data").json()["selector"]["weights"]
    assert sum(weights.values()) == pytest.approx(1) and len(weights) > 1  # a learner's weights, not a fallback
    no_state(server)


def test_the_target_killed_mid_request_gives_503_then_serves_again(server, reference):
    def plain():
        try:
            return server.post("/v1/completions", json={"model": MODEL, "prompt": PROMPTS[0], "max_tokens": TOKENS,
                                                        "temperature": 0}, timeout=120)
        except httpx.HTTPError as error:  # a hang would surface here
            return error
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        started = time.time()
        answer = pool.submit(plain)
        results = in_flight_while(server, PROMPTS[1:3], lambda: kill_replica("Target"))
        answer = answer.result(timeout=180)
    for result in results:
        assert result["error"] is not None and result["error"]["status"] == 503, result
        assert "retry" in result["error"]["error"]["message"]
    assert isinstance(answer, httpx.Response) and time.time() - started < 120
    if answer.status_code != 200:  # it may have finished before the kill
        assert answer.status_code == 503 and answer.headers["retry-after"] == "1", answer.text
        assert "Traceback" not in answer.text and "ray" not in answer.json()["error"]["message"].lower()

    def serves():
        response = server.post("/v1/completions", json={"model": MODEL, "prompt": PROMPTS[2], "max_tokens": 20,
                                                        "temperature": 0}, timeout=60)
        return response.status_code == 200
    wait_until(serves, RESTART_TIMEOUT_S, what="the app to serve again")
    answer = server.post("/v1/completions", json={"model": MODEL, "prompt": PROMPTS[3], "max_tokens": 40,
                                                  "temperature": 0}).json()
    assert answer["choices"][0]["text"] == reference(PROMPTS[3], 40)
    no_state(server)


def test_health_says_503_while_the_target_is_down_and_200_once_it_serves(server):
    """A load balancer polling /health must not send traffic to an app whose model is not up."""
    assert server.get("/health").status_code == 200
    kill_replica("Target")
    down = server.get("/health", timeout=30)
    assert down.status_code == 503 and "not ready" in down.json()["error"]["message"], down.text
    assert down.headers["retry-after"] == "1"
    wait_until(lambda: server.get("/health", timeout=30).status_code == 200, RESTART_TIMEOUT_S,
               what="/health to answer 200 again")
    answer = server.post("/v1/completions", json={"model": MODEL, "prompt": PROMPTS[2], "max_tokens": 20,
                                                  "temperature": 0}, timeout=60)
    assert answer.status_code == 200, answer.text


def test_a_client_that_leaves_a_plain_request_frees_all_state(server):
    cancelled = server.get("/stats").json()["cancelled"]
    # a prompt whose text runs all 240 tokens, a target call per token: 1.4 s on 2 cores, the client
    # gone after 0.5 (PROMPTS[0] reaches its EOS at 137 tokens, sooner than a 1 s timeout with speculation)
    with pytest.raises(httpx.ReadTimeout):
        server.post("/v1/completions", json={"model": MODEL, "prompt": PROMPTS[1], "max_tokens": TOKENS,
                                             "temperature": 0, "speculate": False}, timeout=0.5)
    stats = no_state(server)
    assert stats["cancelled"] == cancelled + 1  # stopped by the disconnect, not run to the end
