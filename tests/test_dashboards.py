"""The Grafana dashboard as code: generated, valid, querying only metrics the app exports, and
provisioned through grafana-client (against a stand-in Grafana HTTP API on loopback)."""
import json
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cluster.grafana import dashboard
from deployments.local import free_port
from deployments.metrics import METRICS
from hedgespec.cli import main

ROOT = Path(__file__).resolve().parents[1]
PANELS = ["MAT per drafter", "Selection share over time", "Acceptance per position", "Latency breakdown",
          "Throughput", "Errors by kind"]
EXPORTED = {name for metric in METRICS.values() for name in metric.series()}


def expressions(model: dict) -> list[str]:
    return [t["expr"] for p in model["panels"] for t in p["targets"]]


def test_the_committed_json_is_what_the_code_builds():
    committed = json.loads((ROOT / "cluster/grafana" / dashboard.FILENAME).read_text())
    assert committed == dashboard.build(), "regenerate it: hedgespec dashboards build"


def test_cli_build_writes_the_dashboard(tmp_path, capsys):
    assert main(["dashboards", "build", "--out", str(tmp_path)]) == 0
    path = Path(capsys.readouterr().out.strip())
    assert path == tmp_path / dashboard.FILENAME and json.loads(path.read_text()) == dashboard.build()


def test_the_dashboard_has_the_panels_and_a_valid_layout():
    model = dashboard.build()
    assert model["uid"] == dashboard.UID and model["title"] and isinstance(model["schemaVersion"], int)
    variables = {v["name"]: v for v in model["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    titles = [p["title"] for p in model["panels"]]
    for wanted in PANELS:
        assert any(title.startswith(wanted) for title in titles), wanted
    assert len({p["id"] for p in model["panels"]}) == len(titles)
    cells = set()
    for p in model["panels"]:
        grid = p["gridPos"]
        assert grid["x"] >= 0 and grid["w"] > 0 and grid["x"] + grid["w"] <= 24 and grid["h"] > 0
        area = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])}
        assert not area & cells, f"panel {p['title']!r} overlaps another"
        cells |= area
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"} and p["targets"]
        assert len({t["refId"] for t in p["targets"]}) == len(p["targets"])


def test_every_query_names_only_exported_metrics():
    used = set()
    for expr in expressions(dashboard.build()):
        assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}"), expr
        names = set(re.findall(r"\bray_\w+", expr))
        assert names and names <= EXPORTED, f"{expr}: {sorted(names - EXPORTED)} are not exported by the app"
        used |= names
    per_drafter = {m.name for m in METRICS.values() if "drafter" in m.tags}
    assert all(used & METRICS[name].series() for name in per_drafter), "every per-drafter metric is on a panel"


def test_series_refuses_what_the_app_does_not_export():
    with pytest.raises(KeyError):
        dashboard.series("hedgespec_no_such_metric")
    with pytest.raises(KeyError, match="exports no series"):
        dashboard.series("hedgespec_requests", "bucket")


def test_building_the_dashboard_imports_no_ray():
    code = "import sys; from cluster.grafana import dashboard; dashboard.build(); assert 'ray' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


class _FakeGrafana(BaseHTTPRequestHandler):
    """Grafana's POST /api/dashboards/db, recording what it was sent."""
    received: list = []
    status = 200

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.received.append((self.path, self.headers["Authorization"], body))
        answer = ({"id": 1, "uid": body["dashboard"]["uid"], "url": f"/d/{body['dashboard']['uid']}/hedgespec-serve",
                   "status": "success", "version": 1} if self.status == 200 else {"message": "invalid API key"})
        data = json.dumps(answer).encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        """Quiet."""


@pytest.fixture
def grafana():
    _FakeGrafana.received, _FakeGrafana.status = [], 200
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeGrafana)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join(5)


def test_push_provisions_the_dashboard_with_the_token(grafana, capsys):
    assert main(["dashboards", "push", "--url", grafana, "--token", "glsa_test"]) == 0
    assert capsys.readouterr().out.strip() == f"{grafana}/d/{dashboard.UID}/hedgespec-serve"
    [(path, auth, body)] = _FakeGrafana.received
    assert path == "/api/dashboards/db" and auth == "Bearer glsa_test" and body["overwrite"] is True
    assert body["dashboard"] == dashboard.build() | {"id": None}


def test_push_says_when_grafana_refuses_the_token(grafana, capsys):
    _FakeGrafana.status = 401
    assert main(["dashboards", "push", "--url", grafana, "--token", "wrong"]) == 2
    assert "refused the token (401)" in capsys.readouterr().err


def test_push_says_when_grafana_cannot_be_reached(capsys):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    assert main(["dashboards", "push", "--url", url, "--token", "t"]) == 2
    assert f"cannot reach Grafana at {url}" in capsys.readouterr().err
