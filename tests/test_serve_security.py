"""The served app against hostile input, at its limits and behind its API keys, over real HTTP on
tiny models (configs/serve-tiny.yaml with small limits, so that each can be reached).

One app for the module; its replicas get the keys through the environment, as an operator's would.
"""
import concurrent.futures
import contextlib
import json
import pathlib
import time

import hypothesis
import pytest
import schemathesis

from app_state import no_state
from deployments.admission import CallerSlots
from deployments.local import local_app, serve_args
from deployments.openai_api import APIError

CONFIG = "configs/serve-tiny.yaml"
MODEL = "hedgespec-tiny"
KEYS = ["sk-test-alpha-7f3a9c", "sk-test-beta-51d2e8", "sk-test-gamma-c0ffee", "sk-test-delta-9b9b9b"]
WRONG_KEY = "sk-test-wrong-424242"
LIMITS = {"max_body_bytes": 4096, "max_prompt_tokens": 64, "max_tokens": 256, "max_stop_sequences": 4,
          "max_stop_chars": 32, "max_concurrent_per_key": 1, "max_ongoing_requests": 2, "max_queued_requests": 1,
          "retry_after_s": 2}
# what an internal failure would show if it leaked: Python's and Ray's own words
LEAKS = ("Traceback", "ray.", "RayTaskError", "ActorDiedError", "File \"")


def auth(key: str = KEYS[0]) -> dict:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def server():
    args = serve_args(CONFIG) | {"limits": LIMITS}
    with local_app(args, env={"HEDGESPEC_API_KEY": ",".join(KEYS)}) as client:
        yield client


def completion(server, key=KEYS[0], **body):
    return server.post("/v1/completions", headers=auth(key), json={"model": MODEL, "prompt": "abc abc", **body})


def error_of(response) -> dict:
    error = response.json()["error"]
    assert isinstance(error["message"], str) and error["message"]
    assert not any(leak in error["message"] for leak in LEAKS), error
    return error


@pytest.mark.parametrize("path", ["/v1/models", "/stats", "/dashboard", "/dashboard/data", "/openapi.json", "/docs"])
def test_every_route_but_health_wants_a_key(server, path):
    assert server.get("/health").status_code == 200
    for headers in ({}, auth(WRONG_KEY), {"Authorization": KEYS[0]}, {"Authorization": "Basic " + KEYS[0]}):
        response = server.get(path, headers=headers)
        assert response.status_code == 401, (path, headers)
        assert "API key" in error_of(response)["message"] and response.headers["www-authenticate"] == "Bearer"
    assert server.get(path, headers=auth(KEYS[1])).status_code == 200


def test_posts_want_a_key_before_anything_is_read(server):
    for body in ({"model": MODEL, "prompt": "hi"}, b"{not json"):
        kwargs = {"content": body} if isinstance(body, bytes) else {"json": body}
        assert server.post("/v1/completions", headers=auth(WRONG_KEY), **kwargs).status_code == 401
        assert server.post("/v1/chat/completions", **kwargs).status_code == 401


def test_seeds_of_any_64_bit_integer_are_accepted_and_reproducible(server):
    # the MAT objective: the time objective learns from measured times, so its choices (and with them
    # which random draws a sampled text uses) may differ between runs of the same seed
    for seed in (-1, -2**63, 0, 2**63 - 1):
        texts = {completion(server, seed=seed, max_tokens=12, temperature=0.9,
                            speculation={"objective": "eal"}).json()["choices"][0]["text"] for _ in range(2)}
        assert len(texts) == 1, seed
    for seed in (2**63, -2**63 - 1, 1.5, "7", True):
        response = completion(server, seed=seed)
        assert response.status_code == 400 and "seed" in error_of(response)["message"], seed


def test_a_temperature_too_small_to_divide_by_decodes_greedily(server):
    greedy = completion(server, max_tokens=16, temperature=0).json()["choices"][0]["text"]
    for temperature in (1e-300, 5e-6):
        assert completion(server, max_tokens=16, temperature=temperature, seed=3).json()["choices"][0]["text"] == greedy


HOSTILE = [
    ("nested 100k deep", b'{"model": "x", "prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", 413),
    ("nested 2k deep", b'{"model": "x", "prompt": ' + b"[" * 2000 + b"]" * 2000 + b"}", 400),
    ("a 5000-digit integer", b'{"model": "%s", "prompt": "x", "max_tokens": %s}' % (MODEL.encode(), b"9" * 5000), 413),
    ("a 4000-digit integer", b'{"model": "%s", "prompt": "x", "max_tokens": %s}' % (MODEL.encode(), b"9" * 4000), 400),
    ("NaN temperature", b'{"model": "%s", "prompt": "x", "temperature": NaN}' % MODEL.encode(), 400),
    ("infinite top_p", b'{"model": "%s", "prompt": "x", "top_p": Infinity}' % MODEL.encode(), 400),
    ("a lone surrogate", b'{"model": "%s", "prompt": "x\\ud800"}' % MODEL.encode(), 400),
    ("not UTF-8", b'{"model": "\xff\xfe", "prompt": "x"}', 400),
    ("not an object", b'[1, 2, 3]', 400),
    ("a string for a number", b'{"model": "%s", "prompt": "x", "max_tokens": "5"}' % MODEL.encode(), 400),
    ("a bool for a number", b'{"model": "%s", "prompt": "x", "top_k": true}' % MODEL.encode(), 400),
]


@pytest.mark.parametrize("body,status", [(b, s) for _, b, s in HOSTILE], ids=[name for name, _, _ in HOSTILE])
def test_hostile_bodies_get_a_clear_4xx(server, body, status):
    response = server.post("/v1/completions", headers=auth() | {"content-type": "application/json"}, content=body)
    assert response.status_code == status, response.text
    error_of(response)


def test_limits_each_get_their_4xx(server):
    too_large = completion(server, prompt="x" * 5000)
    assert too_large.status_code == 413 and "4096 bytes" in error_of(too_large)["message"]
    chunked = server.post("/v1/completions", headers=auth() | {"content-type": "application/json"},
                          content=iter([b'{"model": "%s", "prompt": "' % MODEL.encode()] + [b"x" * 1000] * 5 + [b'"}']))
    assert chunked.status_code == 413  # no Content-Length: counted as it arrives
    long_prompt = completion(server, prompt="word " * 200)
    assert long_prompt.status_code == 400 and "at most 64" in error_of(long_prompt)["message"]
    assert completion(server, max_tokens=257).status_code == 400
    for stop, words in ((["a", "b", "c", "d", "e"], "at most 4"), (["x" * 33], "at most 32 characters"), ([""], "empty")):
        response = completion(server, stop=stop)
        assert response.status_code == 400 and words in error_of(response)["message"], stop
    assert completion(server, stop=["a", "b", "c", "x" * 32], max_tokens=4).status_code == 200


# the tiny target's greedy text for this prompt runs the whole 256 tokens without an EOS: about 1.5 s
# a target call at a time (the tiny pool holds the target itself: speculating, it would take a tenth)
LONG_PROMPT = "the quick brown fox"


@contextlib.contextmanager
def _long_stream(server, key):
    """A stream whose first event has arrived: its request holds its slot until the block ends and the
    client disconnects. (The line iterator is held here: dropping it would close the response at once.)"""
    with server.stream("POST", "/v1/completions", headers=auth(key),
                       json={"model": MODEL, "prompt": LONG_PROMPT, "max_tokens": 256, "temperature": 0,
                             "speculate": False, "stream": True}) as response:
        assert response.status_code == 200
        lines = response.iter_lines()
        next(lines)
        yield response


def test_concurrent_requests_per_key_get_429_with_retry_after(server):
    no_state(server, headers=auth())  # the slots of earlier tests' requests are back
    with _long_stream(server, KEYS[0]):
        second = completion(server, KEYS[0], max_tokens=4)
        assert second.status_code == 429 and second.headers["retry-after"] == "2"
        assert error_of(second)["code"] == "rate_limit_exceeded"
        assert completion(server, KEYS[1], max_tokens=4).status_code == 200  # another key has its own slots


def test_a_key_s_slots_come_back_when_its_requests_end_and_keyless_callers_are_not_counted():
    slots = CallerSlots(limit=2, retry_after_s=3)
    slots.take("a"), slots.take("a")
    with pytest.raises(APIError) as refused:
        slots.take("a")
    assert refused.value.status == 429 and refused.value.headers == {"Retry-After": "3"}
    slots.take("b")  # another key has its own
    slots.give_back("a")
    slots.take("a")
    for _ in range(5):
        slots.take(None)
    slots.give_back("a"), slots.give_back("a"), slots.give_back("b")
    assert not slots.held  # no key left behind once its requests ended


def test_a_full_queue_gets_503_with_retry_after(server):
    """Two streams decode (max_ongoing_requests), a third request waits (max_queued_requests): a fourth is
    refused. They arrive one after another: for requests that arrive together Ray Serve's queue count was
    seen here to let all of them in, or to count one still being placed as queued."""
    no_state(server, headers=auth())  # the slots of earlier tests' requests are back (a disconnect frees them a moment later)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        with contextlib.ExitStack() as streams:
            for key in KEYS[:2]:
                streams.enter_context(_long_stream(server, key))
            answers = []
            for key in KEYS[2:]:
                answers.append(pool.submit(completion, server, key, max_tokens=4))
                time.sleep(0.3)  # the streams decode for seconds more
        # the streams' disconnects end them: the request in the queue gets a slot
        answers = [answer.result() for answer in answers]
    assert sorted(a.status_code for a in answers) == [200, 503], [a.text for a in answers]
    full = next(a for a in answers if a.status_code == 503)
    assert full.headers["retry-after"] == "2"


def _answer_is_clean(response) -> None:
    """A schemathesis check: no 5xx; an error is an OpenAI error body, naming its field, leaking nothing."""
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        error = json.loads(response.content)["error"]
        assert isinstance(error["message"], str) and error["message"]
        assert not any(leak in response.text for leak in LEAKS), response.text
        if error.get("param"):
            assert error["param"].split(".")[0] in error["message"], error


@pytest.fixture(scope="module")
def api_schema(server):
    return schemathesis.openapi.from_url(f"{server.base_url}/openapi.json", headers=auth())


@pytest.mark.parametrize("mode", list(schemathesis.GenerationMode), ids=lambda m: m.value)
@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_fuzzed_bodies_never_get_a_5xx(server, api_schema, path, mode):
    """schemathesis's cases from the app's own OpenAPI schema, valid (positive) and invalid
    (negative), against the running app. (Driven through hypothesis directly: schemathesis's
    pytest plugin does not run on this pytest.)"""
    operation = api_schema[path]["POST"]

    @hypothesis.given(case=operation.as_strategy(generation_mode=mode))
    @hypothesis.settings(max_examples=30, deadline=None, database=None, derandomize=True,
                         suppress_health_check=list(hypothesis.HealthCheck))
    def fuzz(case):
        # sent with httpx (schemathesis's own requests transport does not run on this urllib3)
        body = case.body if isinstance(case.body, (bytes, str)) else json.dumps(case.body)
        response = server.post(path, headers=auth(KEYS[2]) | {"content-type": case.media_type or "application/json"},
                               content=body, timeout=120)  # a hang fails as a timeout
        _answer_is_clean(response)

    fuzz()


def test_no_log_line_holds_a_key(server):
    """After every test above: the Ray session's logs (every replica, the proxy, the controller)."""
    import ray
    logs = pathlib.Path(ray._private.worker._global_node.get_session_dir_path()) / "logs"
    text = "\n".join(p.read_text(errors="replace") for p in logs.rglob("*") if p.is_file())
    assert "POST /v1/completions" in text  # the access log is there to be searched
    for key in KEYS + [WRONG_KEY]:
        assert key not in text, key
