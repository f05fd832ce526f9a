"""The live page at /dashboard, for a person without Grafana: the selector's weights, acceptance per
drafter and the recent requests with their MAT. The ingress feeds it every answered request; the
page (static/dashboard.html) polls /dashboard/data and redraws itself.

It shows what one ingress replica answered since it started; Prometheus and Grafana
(cluster/grafana) hold the whole application's history.
"""
import threading
import time
from collections import Counter as Tally, deque
from pathlib import Path

from deployments.metrics import tally_rounds

PAGE = (Path(__file__).parent / "static" / "dashboard.html").read_text()
RECENT = 20  # requests listed


class LiveStats:
    def __init__(self, drafters: list[str]):
        self.drafters = list(drafters)
        self.totals = {key: Tally() for key in ("won", "drafts", "draft_tokens", "accepted")}
        self.recent: deque[dict] = deque(maxlen=RECENT)
        self.requests = self.tokens = 0
        self.lock = threading.Lock()  # requests end in the ingress's decode threads; the page reads on its event loop

    def record(self, response_id: str, generation) -> None:
        """An answered request (hedgespec.decode.Generation) under the id its response carries."""
        tallies, stats = tally_rounds(generation.rounds), generation.stats()
        with self.lock:
            for key, tally in self.totals.items():
                tally.update(tallies[key])
            self.requests += 1
            self.tokens += len(generation.tokens)
            self.recent.appendleft({"id": response_id, "time": time.time(), "tokens": len(generation.tokens),
                                    "seconds": generation.seconds, "finish_reason": generation.finish_reason,
                                    **{key: stats[key] for key in ("rounds", "mat", "drafted", "accepted", "share_by_drafter")}})

    def snapshot(self, selector: dict) -> dict:
        """selector: the Selector deployment's `weights()` ({} without a drafter pool)."""
        with self.lock:
            totals = {key: Tally(tally) for key, tally in self.totals.items()}
            recent, requests, tokens = list(self.recent), self.requests, self.tokens
        rounds = sum(totals["won"].values())
        drafters = {}
        for name in self.drafters + sorted(set(totals["won"]) - set(self.drafters)):  # and "none": no drafter awake
            won, drafted, accepted = totals["won"][name], totals["draft_tokens"][name], totals["accepted"][name]
            drafters[name] = {"rounds_won": won, "share": won / rounds if rounds else 0.0, "drafts": totals["drafts"][name],
                              "draft_tokens": drafted, "accepted": accepted, "acceptance": accepted / drafted if drafted else None}
        return {"time": time.time(), "requests": requests, "tokens": tokens, "selector": selector,
                "drafters": drafters, "recent": recent}
