"""The app on the vLLM backend (serve_config.yaml, eager, float32) over real HTTP, with the
real SmolLM2 target: one engine start for the module. Behind the `vllm` marker (`make test-vllm`;
.ci/run installs vLLM and runs it).

The reference is vLLM's own decoding without drafts: a request with `speculate: false` is never
given one by the proposer, so the engine decodes it one token per step."""
import concurrent.futures
import contextlib
import json
import os
import pathlib
import time

import httpx
import pytest

from app_state import leave_a_stream, no_state
from deployments.local import local_app, serve_args
from hedgespec.vllm_engine import PROPOSER_ENV

pytestmark = pytest.mark.vllm

MODEL = "hedgespec"
PARAGRAPH = ("The Roman Republic was governed by a complex constitution that balanced power among the consuls, "
             "the Senate, and the popular assemblies. Over several centuries, Rome expanded from a small city-state "
             "on the Tiber into the dominant power of the Mediterranean.")
PROMPTS = [PARAGRAPH + "\n\nRepeat the paragraph above exactly.",
           "Here is a Python function:\n\ndef add_numbers(first, second):\n    total = first + second\n    return total\n\n"
           "Rename the function to sum_two and its arguments to a and b, and show the full function.",
           "What are the main causes of the seasons on Earth?",
           "Write the SQL query that selects the name and email of every customer from the customers table whose "
           "city is 'Paris', ordered by name."]


@pytest.fixture(scope="module")
def server():
    args = serve_args("serve_config.yaml")
    args["engine"]["target"].update(dtype="float32")
    args["engine"]["target"]["vllm"].update(enforce_eager=True, max_num_seqs=8)
    with local_app(args, timeout_s=900) as client:
        yield client


def chat(server, prompt: str, speculate: bool = True, **extra) -> dict:
    body = {"model": MODEL, "messages": [{"role": "user", "content": prompt}], "max_tokens": 64, "temperature": 0,
            "speculate": speculate, **extra}
    response = server.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture(scope="module")
def reference(server):
    return {p: chat(server, p, speculate=False)["choices"][0]["message"]["content"] for p in PROMPTS}


def test_greedy_text_through_hedgespec_equals_vllm_without_speculation(server, reference):
    for prompt in PROMPTS:
        answer = chat(server, prompt)
        assert answer["choices"][0]["message"]["content"] == reference[prompt]
        # the proposer's rounds account for every token the client got (and the EOS that ended it)
        stats, choice = answer["hedgespec"], answer["choices"][0]
        eos = choice["finish_reason"] == "stop"
        assert round(stats["mat"] * stats["rounds"]) == answer["usage"]["completion_tokens"] + eos
    copy = chat(server, PROMPTS[0])["hedgespec"]
    # the copy prompt is what prompt lookup is for: speculation ran, and it paid in steps
    assert copy["accepted"] > 0 and copy["mat"] > 1.5, copy
    assert set(copy["rounds_by_drafter"]) <= {"none", "prompt-lookup", "prompt-lookup-2", "store-python", "store-sql",
                                              "store-math", "store-biology", "store-chemistry", "store-medical",
                                              "store-news"}


def test_concurrent_requests_keep_the_text_they_have_alone(server, reference):
    prompts = PROMPTS * 2
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        answers = list(pool.map(lambda p: chat(server, p), prompts))
    for prompt, answer in zip(prompts, answers):
        assert answer["choices"][0]["message"]["content"] == reference[prompt]
    no_state(server)


def test_stop_strings_and_max_tokens_end_the_text_as_on_the_hf_backend(server, reference):
    full = reference[PROMPTS[0]]
    stop = full.split()[5]
    cut = chat(server, PROMPTS[0], stop=[stop])
    assert cut["choices"][0]["message"]["content"] == full[:full.index(stop)]
    assert cut["choices"][0]["finish_reason"] == "stop"
    short = chat(server, PROMPTS[0], max_tokens=7)
    assert short["usage"]["completion_tokens"] == 7 and short["choices"][0]["finish_reason"] == "length"
    assert full.startswith(short["choices"][0]["message"]["content"])


def test_streaming_matches_and_a_client_that_leaves_frees_all_state(server, reference):
    body = {"model": MODEL, "messages": [{"role": "user", "content": PROMPTS[1]}], "max_tokens": 64, "temperature": 0,
            "stream": True}
    text = []
    with server.stream("POST", "/v1/chat/completions", json=body) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                event = json.loads(line[6:])
                text.append(event["choices"][0]["delta"].get("content") or "" if event["choices"] else "")
    assert "".join(text) == reference[PROMPTS[1]]
    # a count goes on for all its 2000 tokens (minutes here): the client leaves after its first text
    endless = {"model": MODEL, "prompt": "1, 2, 3, 4, 5, 6, 7, 8,", "max_tokens": 2000, "temperature": 0, "stream": True}
    with httpx.Client(base_url=server.base_url, timeout=60) as leaving:
        leave_a_stream(leaving, endless, events=1)
    stats = no_state(server)
    assert stats["cancelled"] >= 1


def test_bad_input_gets_a_4xx_on_the_vllm_backend(server):
    too_long = server.post("/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 5000})
    assert too_long.status_code == 400 and "max_tokens" in too_long.json()["error"]["message"]
    pinned = server.post("/v1/completions", json={"model": MODEL, "prompt": "hi", "speculation": {"drafter": "nope"}})
    assert pinned.status_code == 400


def test_a_sampled_request_is_served_and_frees_its_state(server):
    answer = chat(server, PROMPTS[0], temperature=0.8, seed=7)
    assert answer["usage"]["completion_tokens"] > 0 and answer["choices"][0]["message"]["content"]
    assert answer["hedgespec"]["rounds"] >= 1
    no_state(server)


def test_the_selector_holds_what_the_requests_learners_learned(server):
    """The Target shares what its requests' learners learned (their warm-start prior) with the
    Selector deployment as requests start and end, at most every 5 s, off their path."""
    deadline = time.time() + 60
    while (shared := server.get("/stats").json()["shared_priors"])["requests"] == 0:
        assert time.time() < deadline, shared
        chat(server, PROMPTS[2], max_tokens=8)  # a request's start and end are when the Target shares
        time.sleep(1)
    assert shared["replicas"] == 1


def test_stats_show_the_step_line_the_learners_price_drafts_with(server):
    chat(server, PROMPTS[0])  # decode steps of a drafting request: the line is fitted on them
    costs = server.get("/stats").json()["step_costs"]
    assert costs["step_ms"]["fixed"] > 0 and costs["step_ms"]["per_token"] >= 0 and costs["batch"] >= 1, costs
    # a plain step's price is the line at one token for the batch it was last shared by
    assert costs["verify_ms"]["1"] == pytest.approx(costs["step_ms"]["fixed"] / costs["batch"] + costs["step_ms"]["per_token"])


def test_the_engine_runs_one_thread_per_core_although_ray_gives_its_replica_one_cpu(server):
    """Ray sets OMP_NUM_THREADS to an actor's num_cpus (serve_config.yaml's Target has 1), and vLLM's
    worker would inherit it: one OpenMP thread, the other core left to the engine core's polling.
    The worker runs with one thread per core, as vLLM's own server does."""
    chat(server, PROMPTS[2])
    threads = []
    for proc in pathlib.Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if (proc / "cmdline").read_bytes().startswith(b"VLLM::Worker"):
                environ = dict(item.split(b"=", 1) for item in (proc / "environ").read_bytes().split(b"\0") if b"=" in item)
                if PROPOSER_ENV.encode() in environ:  # this app's engine, not another's
                    threads.append(int(environ[b"OMP_NUM_THREADS"]))
    assert threads == [len(os.sched_getaffinity(0))]
