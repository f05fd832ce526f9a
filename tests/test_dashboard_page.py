"""The live page at /dashboard in headless Chromium (the Debian package): after a request, the page's
own script has fetched and drawn that request's id, tokens and MAT, and the selector's weights and
acceptance per drafter the server reports. Run: pytest -m browser (about 1 minute)."""
import subprocess
from html.parser import HTMLParser

import pytest

from deployments.local import local_app, serve_args

pytestmark = pytest.mark.browser
CONFIG = "configs/serve-tiny.yaml"
MODEL = "hedgespec-tiny"
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


@pytest.fixture(scope="module")
def server():
    with local_app(serve_args(CONFIG)) as client:
        yield client


def render(chromium: str, url: str, profile) -> Rows:
    done = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", url],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "<html" in done.stdout, done.stderr[-2000:]
    return Rows(done.stdout)


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
