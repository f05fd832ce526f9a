"""A real Prometheus (the Debian package) scrapes the tiny app through Ray's metrics export port.
After traffic, its HTTP API shows every metric of the registry, agreeing with the responses' own
statistics; more traffic moves the per-drafter counters by exactly that traffic's statistics; and
every query of the Grafana dashboard returns data. Run: pytest -m prometheus (about 1.5 minutes)."""
import json
import subprocess
import time
from collections import Counter

import httpx
import pytest
import yaml

from cluster.grafana import dashboard
from deployments.local import free_port, local_app, serve_args
from deployments.metrics import METRICS

pytestmark = pytest.mark.prometheus
CONFIG = "configs/serve-tiny.yaml"
MODEL = "hedgespec-tiny"
DRAFTERS = [d["name"] for d in serve_args(CONFIG)["engine"]["drafters"]]
PROMPTS = ["abc abc abc abc abc", "one two three one two three", "The quick brown fox", "Write a poem about the sea."]
BAD = [({"model": "gpt-4", "prompt": "hi"}, "model_not_found"), ({"model": MODEL, "prompt": "hi", "max_tokens": 0}, "invalid_request")]
WAIT_S = 60  # Ray reports every second here, Prometheus scrapes every second


class Prometheus:
    def __init__(self, url: str):
        self.client = httpx.Client(base_url=url, timeout=10)

    def query(self, expr: str) -> list[dict]:
        answer = self.client.get("/api/v1/query", params={"query": expr}).json()
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def by(self, label: str, expr: str) -> dict[str, float]:
        return {r["metric"].get(label, ""): float(r["value"][1]) for r in self.query(f"sum by ({label}) ({expr})")}

    def total(self, expr: str) -> float:
        result = self.query(f"sum({expr})")
        return float(result[0]["value"][1]) if result else 0.0


def eventually(check, timeout_s: float = WAIT_S):
    """Runs `check` until its assertions hold: each process reports its metrics on its own clock."""
    deadline = time.time() + timeout_s
    while True:
        try:
            return check()
        except AssertionError:
            if time.time() > deadline:
                raise
            time.sleep(1)


@pytest.fixture(scope="module")
def metrics_port():
    return free_port()


@pytest.fixture(scope="module")
def server(metrics_port):
    with local_app(serve_args(CONFIG), metrics_export_port=metrics_port) as client:
        yield client


@pytest.fixture(scope="module")
def prometheus(system_binary, metrics_port, tmp_path_factory):
    binary = system_binary("prometheus")
    home = tmp_path_factory.mktemp("prometheus")
    (home / "prometheus.yml").write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "ray", "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}]}]}))
    port = free_port()
    with open(home / "prometheus.log", "wb") as log:
        process = subprocess.Popen([binary, f"--config.file={home / 'prometheus.yml'}", f"--storage.tsdb.path={home / 'data'}",
                                    f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h"],
                                   stdout=log, stderr=subprocess.STDOUT)
    try:
        api = Prometheus(f"http://127.0.0.1:{port}")
        deadline = time.time() + 30
        while not _ready(api):
            assert process.poll() is None, (home / "prometheus.log").read_text()[-2000:]
            assert time.time() < deadline, "Prometheus did not become ready in 30 s"
            time.sleep(0.5)
        yield api
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _ready(api: Prometheus) -> bool:
    try:
        return api.client.get("/-/ready").status_code == 200
    except httpx.TransportError:
        return False


def send(server, prompts: list[str]) -> list[dict]:
    """Completions, one chat and one stream; the (usage, hedgespec statistics) of each answer."""
    answers = []
    for i, prompt in enumerate(prompts):
        body = {"model": MODEL, "max_tokens": 32, "temperature": 0}
        if i == 1:
            response = server.post("/v1/chat/completions", json=body | {"messages": [{"role": "user", "content": prompt}]})
        elif i == 2:
            lines = server.post("/v1/completions", json=body | {"prompt": prompt, "stream": True,
                                                                "stream_options": {"include_usage": True}}).text.splitlines()
            answers.append(json.loads([line for line in lines if line.startswith("data: {")][-1][6:]))
            continue
        else:
            response = server.post("/v1/completions", json=body | {"prompt": prompt})
        assert response.status_code == 200, response.text
        answers.append(response.json())
    return [{"usage": a["usage"], **a["hedgespec"]} for a in answers]


def summed(answers: list[dict], key: str) -> Counter:
    total = Counter()
    for a in answers:
        total.update(a[key])
    return total


@pytest.fixture(scope="module")
def traffic(server, prometheus) -> list[dict]:
    answers = send(server, PROMPTS)
    for body, _ in BAD:
        assert server.post("/v1/completions", json=body).status_code in (400, 404)
    return answers


def test_every_registered_metric_is_scraped(prometheus, traffic):
    def all_present():
        missing = [series for metric in METRICS.values() for series in sorted(metric.series())
                   if not prometheus.query(f"count({series})")]
        assert not missing, f"not in Prometheus: {missing}"
    eventually(all_present)


def test_metrics_agree_with_the_responses(prometheus, traffic):
    rounds = sum(a["rounds"] for a in traffic)
    won = summed(traffic, "rounds_by_drafter")

    def agree():
        p = prometheus
        assert p.by("drafter", "ray_hedgespec_spec_decode_rounds_won_total") == won
        assert p.total("ray_hedgespec_spec_decode_num_draft_tokens_total") == sum(a["drafted"] for a in traffic)
        assert p.total("ray_hedgespec_spec_decode_num_accepted_tokens_total") == sum(a["accepted"] for a in traffic)
        assert p.total("ray_hedgespec_spec_decode_num_accepted_tokens_per_pos_total") == sum(a["accepted"] for a in traffic)
        assert p.total("ray_hedgespec_spec_decode_committed_tokens_per_round_count") == rounds
        assert p.total("ray_hedgespec_spec_decode_committed_tokens_per_round_sum") == \
            pytest.approx(sum(a["mat"] * a["rounds"] for a in traffic))
        assert p.total("ray_hedgespec_round_seconds_count") == rounds
        assert p.by("phase", "ray_hedgespec_target_forward_seconds_count") == \
            {"prefill": len(traffic), "verify": sum(a["target_forwards"] for a in traffic)}
        assert p.by("drafter", "ray_hedgespec_draft_seconds_count") == {d: n for d, n in won.items() if d != "none"}
        groups = p.by("group", "ray_hedgespec_evaluation_phase_seconds_count")
        assert groups == {"same-model+other-model": rounds, "prompt-lookup": rounds}
        assert p.by("endpoint", "ray_hedgespec_requests_total") == {"completions": len(traffic) - 1 + len(BAD), "chat": 1}
        assert p.total("ray_hedgespec_request_success_total") == len(traffic)
        assert p.by("kind", "ray_hedgespec_request_errors_total") == {kind: 1 for _, kind in BAD}
        assert p.total("ray_hedgespec_generation_tokens_total") == sum(a["usage"]["completion_tokens"] for a in traffic)
        assert p.total("ray_hedgespec_prompt_tokens_total") == sum(a["usage"]["prompt_tokens"] for a in traffic)
        weights = p.by("drafter", "ray_hedgespec_selector_weight")
        assert set(weights) == set(DRAFTERS) | {"none"} and all(0 <= w <= 1 for w in weights.values())  # none: the plain step
        assert sum(weights.values()) == pytest.approx(1)
    eventually(agree)


def test_per_drafter_counters_move_with_traffic(server, prometheus, traffic):
    counters = {"won": "ray_hedgespec_spec_decode_rounds_won_total",
                "drafted": "ray_hedgespec_spec_decode_num_draft_tokens_total",
                "accepted": "ray_hedgespec_spec_decode_num_accepted_tokens_total"}
    before = {key: Counter(prometheus.by("drafter", name)) for key, name in counters.items()}
    more = send(server, PROMPTS[:3])

    def moved():
        after = {key: Counter(prometheus.by("drafter", name)) for key, name in counters.items()}
        delta = {key: +(after[key] - before[key]) for key in counters}  # + drops drafters that did not move
        assert delta["won"] == summed(more, "rounds_by_drafter")
        assert sum(delta["drafted"].values()) == sum(a["drafted"] for a in more) > 0
        assert sum(delta["accepted"].values()) == sum(a["accepted"] for a in more)
        assert set(delta["drafted"]) <= set(delta["won"])
    eventually(moved)


def test_every_dashboard_query_returns_data(prometheus, traffic):
    for panel in dashboard.build()["panels"]:
        for target in panel["targets"]:
            expr = target["expr"].replace(dashboard.WINDOW, "10m")
            assert prometheus.query(expr), f"{panel['title']}: {expr} returned nothing"
    [mat] = prometheus.query(dashboard.build()["panels"][0]["targets"][1]["expr"].replace(dashboard.WINDOW, "10m"))
    assert 1 <= float(mat["value"][1]) <= 5  # K = 4: at most 4 accepted + 1 per forward
