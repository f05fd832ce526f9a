"""The HedgeSpec Serve dashboard as code: plain Python that returns Grafana's dashboard JSON model.

`hedgespec dashboards build --out DIR` writes it (cluster/grafana/hedgespec-serve.json is the
committed copy); `hedgespec dashboards push` provisions it. Every query names its series through
`series()`, which takes them from the application's metric registry (deployments/metrics.py), so
the dashboard cannot ask for a metric the app does not export. No Ray import here.
"""
import json
from pathlib import Path

from deployments.metrics import METRICS, NO_DRAFTER

UID = "hedgespec-serve"
FILENAME = f"{UID}.json"
WINDOW = "$__rate_interval"  # Grafana's rate window: at least four scrape intervals
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
WIDTH, HEIGHT = 12, 8  # two panels per row of Grafana's 24-column grid
SPECULATING = f'drafter!="{NO_DRAFTER}"'  # rounds that had a draft


def series(name: str, part: str = "") -> str:
    """The exported series of a registry metric: `part` is "bucket", "sum" or "count" for a histogram."""
    metric = METRICS[name]
    exported = f"{metric.exported}_{part}" if part else metric.exported
    if exported not in metric.series():
        raise KeyError(f"{name} exports no series {exported}; it exports {sorted(metric.series())}")
    return exported


def rate(name: str, part: str = "", by: tuple[str, ...] = (), where: str = "") -> str:
    grouping = f" by ({', '.join(by)})" if by else ""
    selector = f"{series(name, part)}{{{where}}}" if where else series(name, part)
    return f"sum{grouping} (rate({selector}[{WINDOW}]))"


def quantile(q: float, name: str, where: str = "") -> str:
    return f"histogram_quantile({q}, {rate(name, 'bucket', ('le',), where)})"


def target(expr: str, legend: str) -> dict:
    return {"expr": expr, "legendFormat": legend}


def panel(title: str, description: str, targets: list[dict], unit: str, stacked: bool = False,
          bounds: tuple[float, float] | None = None) -> dict:
    defaults = {"unit": unit, "custom": {"stacking": {"mode": "normal" if stacked else "none"},
                                         "fillOpacity": 30 if stacked else 0}}
    if bounds:
        defaults["min"], defaults["max"] = bounds
    return {"type": "timeseries", "title": title, "description": description, "datasource": DATASOURCE,
            "targets": [{"refId": chr(ord("A") + i), "datasource": DATASOURCE, **t} for i, t in enumerate(targets)],
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}}}


def panels() -> list[dict]:
    committed = "hedgespec_spec_decode_committed_tokens_per_round"
    won = "hedgespec_spec_decode_rounds_won"
    drafts = "hedgespec_spec_decode_num_drafts"
    return [
        panel("MAT per drafter", "Mean accepted tokens per target forward (committed tokens per round) in the "
              "rounds each drafter drafted; 'all' counts every round.",
              [target(f"{rate(committed, 'sum', ('drafter',))} / {rate(committed, 'count', ('drafter',))}", "{{drafter}}"),
               target(f"{rate(committed, 'sum')} / {rate(committed, 'count')}", "all")], "none"),
        panel("Selection share over time", "Share of rounds the selector gave each drafter ('none': no drafter "
              "was awake, or target-only requests).",
              [target(f"{rate(won, by=('drafter',))} / ignoring(drafter) group_left {rate(won)}", "{{drafter}}")],
              "percentunit", stacked=True, bounds=(0, 1)),
        panel("Selector weights", "Each drafter's weight at the selector's latest choice.",
              [target(f"avg by (drafter) ({series('hedgespec_selector_weight')})", "{{drafter}}")],
              "percentunit", bounds=(0, 1)),
        panel("Acceptance per position", "Share of each drafter's drafts whose token at a position (0 = first) "
              "was accepted.",
              [target(f"{rate('hedgespec_spec_decode_num_accepted_tokens_per_pos', by=('drafter', 'position'))} "
                      f"/ on(drafter) group_left {rate(drafts, by=('drafter',))}", "{{drafter}} @{{position}}")],
              "percentunit", bounds=(0, 1)),
        panel("Acceptance rate per drafter", "Accepted draft tokens over proposed draft tokens.",
              [target(f"{rate('hedgespec_spec_decode_num_accepted_tokens', by=('drafter',))} / "
                      f"{rate('hedgespec_spec_decode_num_draft_tokens', by=('drafter',))}", "{{drafter}}")],
              "percentunit", bounds=(0, 1)),
        panel("Latency breakdown (p50, p95)", "A round (draft + verification, as the loop sees it), and its parts: "
              "the target's forward, the chosen drafter's draft, and a group's evaluation phase (beside the next round).",
              [target(quantile(q, name, where), f"{label} p{round(100 * q)}")
               for name, where, label in (("hedgespec_round_seconds", SPECULATING, "round"),
                                          ("hedgespec_target_forward_seconds", 'phase="verify"', "target verify"),
                                          ("hedgespec_draft_seconds", "", "draft"),
                                          ("hedgespec_evaluation_phase_seconds", "", "evaluation"))
               for q in (0.5, 0.95)], "s"),
        panel("Throughput", "Generated tokens per second, and requests per second by endpoint.",
              [target(rate("hedgespec_generation_tokens"), "tokens/s"),
               target(rate("hedgespec_requests", by=("endpoint",)), "{{endpoint}} requests/s")], "short"),
        panel("Errors by kind", "Failed requests per second: bad input, unknown model, client gone, generation failed.",
              [target(rate("hedgespec_request_errors", by=("kind",)), "{{kind}}")], "reqps", stacked=True),
    ]


def build() -> dict:
    """The dashboard's JSON model (schema of Grafana 10/11), with a Prometheus data source variable."""
    laid_out = [p | {"id": i + 1, "gridPos": {"x": WIDTH * (i % 2), "y": HEIGHT * (i // 2), "w": WIDTH, "h": HEIGHT}}
                for i, p in enumerate(panels())]
    return {
        "uid": UID, "title": "HedgeSpec Serve", "description": "Speculative decoding with a drafter pool chosen "
        "online: per-drafter acceptance, the selector's choices, latency and throughput.",
        "tags": ["hedgespec", "ray-serve", "speculative-decoding"], "schemaVersion": 39, "version": 1,
        "editable": True, "graphTooltip": 1, "refresh": "10s", "time": {"from": "now-30m", "to": "now"},
        "timezone": "browser", "annotations": {"list": []}, "links": [],
        "templating": {"list": [{"name": "datasource", "label": "Prometheus", "type": "datasource",
                                 "query": "prometheus", "current": {}, "hide": 0, "refresh": 1}]},
        "panels": laid_out,
    }


def write(out: str | Path) -> Path:
    path = Path(out) / FILENAME
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(build(), indent=2) + "\n")
    return path
