"""The Ray Serve application over real HTTP, on tiny models (configs/serve-tiny.yaml).

One Ray instance and one Serve app for the whole module (Ray start-up costs seconds)."""
import concurrent.futures
from pathlib import Path

import pytest

from app_state import haproxy_command_lines, leave_a_plain_request, leave_a_stream, no_state
from deployments.local import local_app, serve_args
from hedgespec.config import ServeConfig
from hedgespec.engine import Engine

CONFIG = "configs/serve-tiny.yaml"
MODEL = "hedgespec-tiny"
PROMPTS = ["hello there, how are you doing today?", "abc abc abc abc abc", "Write a poem about the sea.",
           "one two three one two three", "The quick brown fox", "SELECT name FROM users WHERE"]


@pytest.fixture(scope="module")
def server():
    with local_app(serve_args(CONFIG)) as client:
        yield client


@pytest.fixture(scope="module")
def reference():
    """Target-only greedy text from the in-process engine on the same target."""
    engine = Engine(ServeConfig.model_validate(serve_args(CONFIG)).engine)
    return {(p, chat): engine.generate(p, 40, chat=chat, speculate=False).text
            for p in PROMPTS for chat in (False, True)}


@pytest.fixture(scope="module")
def openai_client(server):
    from openai import OpenAI
    return OpenAI(base_url=str(server.base_url) + "/v1", api_key="unused", max_retries=0)


def test_models_and_health(server):
    assert server.get("/health").json() == {"status": "ok"}
    assert [m["id"] for m in server.get("/v1/models").json()["data"]] == [MODEL]


def test_haproxy_is_in_front_with_splice_off_and_its_own_errors(server):
    """As cluster/serving.env serves the app (tests/test_serve_python_proxy.py runs it without): with
    `hedgespec-haproxy`'s copy of Ray's configuration, which names its error files."""
    lines = haproxy_command_lines()
    assert lines and all("-dS" in args for args in lines), lines
    for args in lines:
        config = Path(args[args.index("-f") + 1])
        assert config.name == "hedgespec-haproxy.cfg", args
        assert "errorfile 503 " + str(config.with_name("hedgespec-503.http")) in config.read_text()


def test_openai_client_completion_matches_in_process_greedy(openai_client, reference):
    for prompt in PROMPTS[:3]:
        out = openai_client.completions.create(model=MODEL, prompt=prompt, max_tokens=40, temperature=0)
        assert out.choices[0].text == reference[(prompt, False)]
        assert out.usage.completion_tokens == 40 and out.choices[0].finish_reason == "length"
        stats = out.model_extra["hedgespec"]
        assert stats["mat"] >= 1 and sum(stats["share_by_drafter"].values()) == pytest.approx(1)


def test_openai_client_chat_and_streaming(openai_client, reference):
    prompt = PROMPTS[2]
    chat = openai_client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": prompt}],
                                                 max_tokens=40, temperature=0)
    assert chat.choices[0].message.content == reference[(prompt, True)]
    pieces = [c.choices[0].delta.content or "" for c in openai_client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": prompt}], max_tokens=40, temperature=0, stream=True)
        if c.choices]
    assert "".join(pieces) == reference[(prompt, True)]
    stream = openai_client.completions.create(model=MODEL, prompt=prompt, max_tokens=40, temperature=0, stream=True,
                                              stream_options={"include_usage": True})
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == reference[(prompt, False)]
    assert chunks[-1].usage.completion_tokens == 40


def test_sampling_with_a_seed_is_reproducible(openai_client):
    # the MAT objective, what the README promises reproducible: the time objective (the config's) learns
    # from measured times, so its choices, and with them the random draws a text uses, may differ
    kwargs = dict(model=MODEL, prompt=PROMPTS[0], max_tokens=24, temperature=0.9, top_p=0.9, seed=5,
                  extra_body={"speculation": {"objective": "eal"}})
    assert openai_client.completions.create(**kwargs).choices[0].text == \
        openai_client.completions.create(**kwargs).choices[0].text


def test_concurrent_requests_across_two_group_replicas(server, reference):
    def ask(prompt):
        return server.post("/v1/completions", json={"model": MODEL, "prompt": prompt, "max_tokens": 40,
                                                    "temperature": 0}).json()
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(ask, PROMPTS * 2))
    for prompt, answer in zip(PROMPTS * 2, answers):
        assert answer["choices"][0]["text"] == reference[(prompt, False)], answer
    from ray import serve
    lm_group = serve.status().applications["hedgespec"].deployments["DrafterGroup-lm"]
    assert lm_group.replica_states.get("RUNNING") == 2
    no_state(server)


BAD = [
    (b"{not json", 400, "not valid JSON"),
    ({"model": MODEL, "prompt": "hi", "max_tokens": "many"}, 400, "max_tokens"),
    ({"model": MODEL, "prompt": ""}, 400, "empty"),
    ({"model": MODEL, "prompt": "word " * 2000}, 400, "at most 512"),
    ({"model": MODEL, "prompt": "hi", "max_tokens": 0}, 400, "max_tokens"),
    ({"model": MODEL, "prompt": "hi", "max_tokens": 100000}, 400, "limit"),
    ({"model": "gpt-4", "prompt": "hi"}, 404, "does not exist"),
    ({"model": MODEL, "prompt": "hi", "n": 2}, 400, "n"),
    ({"model": MODEL, "prompt": "hi", "logprobs": 3}, 400, "logprobs"),
    ({"model": MODEL, "prompt": "hi", "temperature": -1}, 400, "temperature"),
    ({"model": MODEL, "prompt": ["a", "b"]}, 400, "one prompt"),
    ({"model": MODEL, "prompt": "hi", "speculation": {"drafter": "nobody"}}, 400, "speculation.drafter"),
    ({"model": MODEL, "prompt": "hi", "speculation": {"k": 99}}, 400, "speculation.k"),
    ({"model": MODEL, "prompt": "hi", "speculation": {"objective": "fast"}}, 400, "objective"),
]


@pytest.mark.parametrize("body,status,message", BAD, ids=[m for _, _, m in BAD])
def test_bad_input_gets_a_clear_4xx(server, body, status, message):
    kwargs = {"content": body, "headers": {"content-type": "application/json"}} if isinstance(body, bytes) else {"json": body}
    response = server.post("/v1/completions", **kwargs)
    assert response.status_code == status
    assert message in response.json()["error"]["message"]


def test_a_request_can_pin_its_drafter_k_and_objective(server, reference):
    """The `speculation` extension: a pinned drafter drafts every round, at most k tokens; the
    paper's MAT objective chooses among drafters; the text stays the target's greedy text."""
    prompt = PROMPTS[0]
    pinned = server.post("/v1/completions", json={"model": MODEL, "prompt": prompt, "max_tokens": 40, "temperature": 0,
                                                  "speculation": {"drafter": "same-model", "k": 2}}).json()
    assert pinned["choices"][0]["text"] == reference[(prompt, False)]
    stats = pinned["hedgespec"]
    # every round drafts with the pinned drafter but a last one whose budget leaves no room for a draft
    assert set(stats["rounds_by_drafter"]) <= {"same-model", "none"} and stats["rounds_by_drafter"].get("none", 0) <= 1
    assert stats["drafted"] <= 2 * stats["rounds"]
    assert stats["mat"] > 2.5  # the target's own weights: k = 2 drafts accepted nearly every round
    paper = server.post("/v1/completions", json={"model": MODEL, "prompt": prompt, "max_tokens": 40, "temperature": 0,
                                                 "speculation": {"objective": "eal"}}).json()
    # no plain-step arm under the MAT objective: a round without a draft is only the last one, when
    # its budget leaves no room (as for the pinned drafter above; over Ray the rounds, and so whether
    # the last one has a budget, depend on when the learner's steps land)
    assert paper["choices"][0]["text"] == reference[(prompt, False)]
    assert paper["hedgespec"]["rounds_by_drafter"].get("none", 0) <= 1
    no_state(server)


def test_bad_chat_input(server):
    response = server.post("/v1/chat/completions", json={"model": MODEL, "messages": [{"role": "robot", "content": "x"}]})
    assert response.status_code == 400 and "role" in response.json()["error"]["message"]
    response = server.post("/v1/chat/completions", json={"model": MODEL, "messages": []})
    assert response.status_code == 400


def test_client_disconnect_mid_stream_frees_all_state(server):
    cancelled_before = server.get("/stats").json()["cancelled"]
    body = {"model": MODEL, "prompt": PROMPTS[0], "max_tokens": 250, "temperature": 0, "stream": True}
    leave_a_stream(server, body, events=3)
    stats = no_state(server)
    assert stats["cancelled"] == cancelled_before + 1  # stopped by the disconnect, not run to the end


def test_client_that_leaves_a_plain_request_frees_all_state(server):
    cancelled_before = server.get("/stats").json()["cancelled"]
    leave_a_plain_request(server, {"model": MODEL, "prompt": "abc abc abc abc abc", "max_tokens": 240,
                                   "temperature": 0, "speculate": False})
    assert no_state(server)["cancelled"] == cancelled_before + 1
