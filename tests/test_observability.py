"""The running tiny app seen from outside, by the tools a user points at it (Debian packages), one
app for both. A real Prometheus scrapes it through Ray's metrics export port: after traffic, its HTTP
API shows every metric of the registry, agreeing with the responses' own statistics; more traffic
moves the per-drafter counters by exactly that traffic's statistics; and every query of the Grafana
dashboard returns data (pytest -m prometheus, about 1.5 minutes). Then the live page at /dashboard
in headless Chromium: after a request, the page's own script has fetched and drawn that request's
id, tokens and MAT, and the selector's weights and acceptance per drafter the server reports
(pytest -m browser, about 1 minute). The page's test runs last: the Prometheus checks count every
request since the app started."""
import json
import subprocess
import time
from collections import Counter
from html.parser import HTMLParser

import httpx
import pytest
import yaml

from cluster.grafana import dashboard
from deployments.local import free_port, local_app, serve_args
from deployments.metrics import METRICS

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


@pytest.mark.prometheus
def test_every_registered_metric_is_scraped(prometheus, traffic):
    def all_present():
        missing = [series for metric in METRICS.values() for series in sorted(metric.series())
                   if not prometheus.query(f"count({series})")]
        assert not missing, f"not in Prometheus: {missing}"
    eventually(all_present)


@pytest.mark.prometheus
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


@pytest.mark.prometheus
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


@pytest.mark.prometheus
def test_every_dashboard_query_returns_data(prometheus, traffic):
    for panel in dashboard.build()["panels"]:
        for target in panel["targets"]:
            expr = target["expr"].replace(dashboard.WINDOW, "10m")
            assert prometheus.query(expr), f"{panel['title']}: {expr} returned nothing"
    [mat] = prometheus.query(dashboard.build()["panels"][0]["targets"][1]["expr"].replace(dashboard.WINDOW, "10m"))
    assert 1 <= float(mat["value"][1]) <= 5  # K = 4: at most 4 accepted + 1 per forward


CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--virtual-time-budget=5000"]  # virtual time: the page's fetch and drawing complete first


class Rows(HTMLParser):
    """Per table id: its body rows as {cell class: text}, keyed by the row's data-id; and the status line."""

    def __init__(self, dom: str):
        super().__init__()
        self.tables: dict[str, dict[str, dict[str, str]]] = {}
        self.table = self.row = self.cell = None
        self.status, self.in_status = "", False
        self.feed(dom)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self.table = self.tables.setdefault(attrs["id"], {})
        elif tag == "tr" and "data-id" in attrs:
            self.row = self.table.setdefault(attrs["data-id"], {})
        elif tag == "td" and self.row is not None:
            self.cell = attrs["class"]
            self.row[self.cell] = ""
        self.in_status = attrs.get("id") == "status"

    def handle_endtag(self, tag):
        if tag == "tr":
            self.row = None
        elif tag == "td":
            self.cell = None
        self.in_status = False

    def handle_data(self, data):
        if self.cell is not None:
            self.row[self.cell] += data
        if self.in_status:
            self.status += data


def render(chromium: str, url: str, profile) -> Rows:
    done = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", url],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "<html" in done.stdout, done.stderr[-2000:]
    return Rows(done.stdout)


@pytest.mark.browser
def test_the_page_shows_a_request_just_made(server, system_binary, tmp_path):
    chromium = system_binary("chromium")
    answer = server.post("/v1/completions", json={"model": MODEL, "prompt": "one two three one two three",
                                                  "max_tokens": 40, "temperature": 0}).json()
    stats = answer["hedgespec"]
    page = render(chromium, f"{server.base_url}/dashboard", tmp_path / "profile")
    assert page.status.startswith("updated"), f"the page's script did not draw: {page.status!r}"
    row = page.tables["recent"][answer["id"]]
    assert row["mat"] == f"{stats['mat']:.2f}" and row["tokens"] == str(answer["usage"]["completion_tokens"])
    assert row["rounds"] == str(stats["rounds"]) and row["accepted"] == f"{stats['accepted']} / {stats['drafted']}"
    live = server.get("/dashboard/data").json()  # no request ran since: what the page drew
    weights = live["selector"]["weights"]
    # the time objective's plain step shows as "none" beside the drafters
    assert set(weights) == {d["name"] for d in serve_args(CONFIG)["engine"]["drafters"]} | {"none"}
    assert {name: cells["weight"] for name, cells in page.tables["weights"].items()} == \
        {name: f"{w:.3f}" for name, w in weights.items()}
    for name, drafter in live["drafters"].items():
        cells = page.tables["drafters"][name]
        assert cells["rounds_won"] == str(drafter["rounds_won"]) and cells["accepted"] == str(drafter["accepted"])
        assert cells["acceptance"] == ("-" if drafter["acceptance"] is None else f"{drafter['acceptance']:.3f}")
