"""What the deployments record per request, without Ray: the per-drafter tallies behind the Prometheus
metrics and the live page, the registry's histogram buckets, and the selector's weights accessor."""
from collections import Counter

import numpy as np
import pytest

from deployments.dashboard import LiveStats
from deployments.metrics import METRICS, MAX_COMMITTED, error_kind, record_generation, tally_rounds
from hedgespec.decode import Generation, Round
from hedgespec.feedback import MaturedLoss, RoundFeedback
from hedgespec.learners.selectors import make_selector

ROUNDS = [Round("a", 4, 4, 5, 0.01), Round("b", 4, 1, 2, 0.02), Round("a", 4, 0, 1, 0.01), Round(None, 0, 0, 1, 0.005),
          Round("a", 2, 2, 3, 0.01)]
GENERATION = Generation(list(range(12)), "text", "length", ROUNDS, 0.2)


class FakeRecorder:
    def __init__(self):
        self.counts, self.observed = Counter(), {}

    def count(self, name, value=1, **tags):
        self.counts[(name, tuple(sorted(tags.items())))] += value

    def observe(self, name, value, **tags):
        self.observed.setdefault((name, tuple(sorted(tags.items()))), []).append(value)


def test_rounds_are_tallied_per_drafter_and_position():
    t = tally_rounds(ROUNDS)
    assert t["won"] == {"a": 3, "b": 1, "none": 1}
    assert t["drafts"] == {"a": 3, "b": 1} and t["draft_tokens"] == {"a": 10, "b": 4} and t["accepted"] == {"a": 6, "b": 1}
    assert t["per_position"] == {("a", "0"): 2, ("a", "1"): 2, ("a", "2"): 1, ("a", "3"): 1, ("b", "0"): 1}


def test_a_generation_is_recorded_consistently_with_its_stats():
    recorder = FakeRecorder()
    record_generation(recorder, GENERATION, prompt_tokens=7)
    stats = GENERATION.stats()
    by_drafter = lambda name: {dict(tags)["drafter"]: v for (n, tags), v in recorder.counts.items() if n == name}  # noqa: E731
    assert by_drafter("hedgespec_spec_decode_rounds_won") == stats["rounds_by_drafter"] | {"none": 1}
    assert sum(by_drafter("hedgespec_spec_decode_num_draft_tokens").values()) == stats["drafted"]
    assert sum(by_drafter("hedgespec_spec_decode_num_accepted_tokens").values()) == stats["accepted"]
    assert sum(v for (n, _), v in recorder.counts.items() if n.endswith("_per_pos")) == stats["accepted"]
    committed = [v for (n, _), vs in recorder.observed.items() if n.endswith("committed_tokens_per_round") for v in vs]
    assert sum(committed) / len(committed) == pytest.approx(stats["mat"])
    assert recorder.counts[("hedgespec_generation_tokens", ())] == 12 and recorder.counts[("hedgespec_prompt_tokens", ())] == 7
    assert recorder.counts[("hedgespec_request_success", (("finished_reason", "length"),))] == 1
    assert all(name in METRICS for name, _ in list(recorder.counts) + list(recorder.observed))


def test_committed_token_buckets_keep_histogram_sums_exact():
    """Ray re-emits a histogram observation at its bucket's midpoint: each integer must be one."""
    bounds = METRICS["hedgespec_spec_decode_committed_tokens_per_round"].boundaries
    midpoints = [(lo + hi) / 2 for lo, hi in zip(bounds, bounds[1:])]
    assert midpoints == list(range(1, MAX_COMMITTED + 1))


def test_error_kinds():
    assert error_kind(404, "model_not_found") == "model_not_found"
    assert error_kind(400, None) == "invalid_request" and error_kind(503, None) == "http_503"


def test_live_stats_snapshot():
    live = LiveStats(["a", "b", "c"])
    live.record("cmpl-1", GENERATION)
    snap = live.snapshot({"selector": "hedgespec", "weights": {"a": 0.7, "b": 0.2, "c": 0.1}})
    assert snap["requests"] == 1 and snap["tokens"] == 12 and snap["selector"]["weights"]["a"] == 0.7
    assert list(snap["drafters"]) == ["a", "b", "c", "none"]
    assert {k: snap["drafters"]["a"][k] for k in ("rounds_won", "drafts", "draft_tokens", "accepted", "share")} == \
        {"rounds_won": 3, "drafts": 3, "draft_tokens": 10, "accepted": 6, "share": 0.6}
    assert snap["drafters"]["a"]["acceptance"] == pytest.approx(0.6) and snap["drafters"]["c"]["acceptance"] is None
    [recent] = snap["recent"]
    assert recent["id"] == "cmpl-1" and recent["mat"] == pytest.approx(GENERATION.mat) and recent["tokens"] == 12


def test_hedgespec_selector_exposes_the_weights_it_played():
    selector = make_selector("hedgespec", 3, 4, act="argmax")
    assert selector.last_weights is None
    selector.begin("")
    awake = np.array([True, True, False])
    selector.choose(awake)
    first = selector.last_weights
    assert first.sum() == pytest.approx(1) and first[2] == 0
    first[0] = 99.0  # a copy: the learner's own state is untouched
    assert selector.last_weights[0] != 99.0
    loss = MaturedLoss(0, np.array([1.0, 0.0, 0.0]), np.array([True, True, True]), delay=0)
    selector.observe(RoundFeedback(1, 1, 4, [loss]))
    assert selector.choose(awake) == 1 and selector.last_weights[1] > selector.last_weights[0]
