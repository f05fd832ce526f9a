"""The application's Prometheus metrics, exported through `ray.util.metrics`.

Named after vLLM's speculative-decoding metrics (`spec_decode_num_drafts`, `..._num_draft_tokens`,
`..._num_accepted_tokens`, `..._num_accepted_tokens_per_pos`) and labelled by `drafter` where one
applies. `METRICS` is the registry: each deployment records only names listed here, and the Grafana
dashboard (cluster/grafana) builds its queries from it, so it reads this module without importing
Ray. Ray exports each name prefixed with `ray_`, counters with a `_total` suffix.

Ray re-emits a histogram's observations at its buckets' midpoints, so a histogram `_sum` is exact
only for values at those midpoints: committed tokens per round (an integer) get half-integer
boundaries, whose midpoints are the integers, which keeps MAT = sum / count exact.
"""
import contextlib
import time
from collections import Counter as Tally
from dataclasses import dataclass
from typing import Literal

MAX_COMMITTED = 17  # K + 1 for the largest K the config allows (16)
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
NO_DRAFTER = "none"  # the drafter label of a round without a draft (no drafter awake, or target only)


@dataclass(frozen=True)
class Metric:
    name: str
    kind: Literal["counter", "gauge", "histogram"]
    description: str
    tags: tuple[str, ...] = ()
    boundaries: tuple[float, ...] = ()

    @property
    def exported(self) -> str:
        """The name Prometheus scrapes (histograms add _bucket, _sum and _count to it)."""
        return "ray_" + self.name + ("_total" if self.kind == "counter" else "")

    def series(self) -> set[str]:
        if self.kind == "histogram":
            return {f"{self.exported}_{suffix}" for suffix in ("bucket", "sum", "count")}
        return {self.exported}


METRICS = {m.name: m for m in [
    Metric("hedgespec_spec_decode_num_drafts", "counter", "Rounds in which the drafter's draft was verified", ("drafter",)),
    Metric("hedgespec_spec_decode_num_draft_tokens", "counter", "Draft tokens proposed", ("drafter",)),
    Metric("hedgespec_spec_decode_num_accepted_tokens", "counter", "Draft tokens accepted by the target", ("drafter",)),
    Metric("hedgespec_spec_decode_num_accepted_tokens_per_pos", "counter",
           "Drafts whose token at this position (0 = first) was accepted", ("drafter", "position")),
    Metric("hedgespec_spec_decode_committed_tokens_per_round", "histogram",
           "Tokens committed by one target forward (accepted drafts + 1)", ("drafter",),
           tuple(i + 0.5 for i in range(MAX_COMMITTED + 1))),
    Metric("hedgespec_spec_decode_rounds_won", "counter", "Rounds the selector gave to the drafter", ("drafter",)),
    Metric("hedgespec_selector_weight", "gauge", "The selector's weight of the drafter at its latest choice", ("drafter",)),
    Metric("hedgespec_evaluation_phase_seconds", "histogram",
           "A drafter group observing and scoring one round (beside the next round)", ("group",), LATENCY_BUCKETS),
    Metric("hedgespec_draft_seconds", "histogram", "The drafter proposing one draft", ("drafter",), LATENCY_BUCKETS),
    Metric("hedgespec_round_seconds", "histogram", "One round: draft and verification, as the loop sees it",
           ("drafter",), LATENCY_BUCKETS),
    Metric("hedgespec_target_forward_seconds", "histogram", "One target forward (prefill or verify)", ("phase",),
           LATENCY_BUCKETS),
    Metric("hedgespec_requests", "counter", "Requests received", ("endpoint",)),
    Metric("hedgespec_request_success", "counter", "Requests answered in full", ("finished_reason",)),
    Metric("hedgespec_request_errors", "counter", "Requests that failed, by kind", ("kind",)),
    Metric("hedgespec_prompt_tokens", "counter", "Prompt tokens of answered requests"),
    Metric("hedgespec_generation_tokens", "counter", "Tokens generated"),
]}


def error_kind(status: int, code: str | None) -> str:
    return code or {400: "invalid_request", 404: "not_found"}.get(status, f"http_{status}")


class Recorder:
    """The Ray metric objects one replica records, by registry name."""

    def __init__(self, *names: str):
        from ray.util import metrics  # here, not at the top: the dashboard builder reads METRICS without Ray
        kinds = {"counter": metrics.Counter, "gauge": metrics.Gauge, "histogram": metrics.Histogram}
        self.metrics = {}
        for name in names:
            spec = METRICS[name]
            extra = {"boundaries": list(spec.boundaries)} if spec.kind == "histogram" else {}
            self.metrics[name] = kinds[spec.kind](name, spec.description, tag_keys=spec.tags, **extra)

    def count(self, name: str, value: float = 1, **tags) -> None:
        if value > 0:  # a Ray counter refuses zero increments
            self.metrics[name].inc(float(value), tags)

    def observe(self, name: str, value: float, **tags) -> None:
        self.metrics[name].observe(float(value), tags)

    def set(self, name: str, value: float, **tags) -> None:
        self.metrics[name].set(float(value), tags)

    @contextlib.contextmanager
    def timed(self, name: str, **tags):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.observe(name, time.perf_counter() - start, **tags)


INGRESS_METRICS = ("hedgespec_spec_decode_num_drafts", "hedgespec_spec_decode_num_draft_tokens",
                   "hedgespec_spec_decode_num_accepted_tokens", "hedgespec_spec_decode_num_accepted_tokens_per_pos",
                   "hedgespec_spec_decode_committed_tokens_per_round", "hedgespec_spec_decode_rounds_won",
                   "hedgespec_round_seconds", "hedgespec_requests", "hedgespec_request_success",
                   "hedgespec_request_errors", "hedgespec_prompt_tokens", "hedgespec_generation_tokens")


def tally_rounds(rounds) -> dict[str, Tally]:
    """Per drafter: rounds won, drafts, draft tokens and accepted tokens, and accepted tokens per
    (drafter, position), from a request's rounds (hedgespec.decode.Round)."""
    tallies = {key: Tally() for key in ("won", "drafts", "draft_tokens", "accepted", "per_position")}
    for r in rounds:
        drafter = r.drafter or NO_DRAFTER
        tallies["won"][drafter] += 1
        if r.drafted:
            tallies["drafts"][drafter] += 1
            tallies["draft_tokens"][drafter] += r.drafted
            tallies["accepted"][drafter] += r.accepted
            tallies["per_position"].update((drafter, str(p)) for p in range(r.accepted))
    return tallies


COUNTED_PER_DRAFTER = {"won": "hedgespec_spec_decode_rounds_won", "drafts": "hedgespec_spec_decode_num_drafts",
                       "draft_tokens": "hedgespec_spec_decode_num_draft_tokens",
                       "accepted": "hedgespec_spec_decode_num_accepted_tokens"}


def record_generation(recorder: Recorder, generation, prompt_tokens: int) -> None:
    """A finished request (hedgespec.decode.Generation): its rounds, counted once per drafter, and its tokens."""
    for r in generation.rounds:
        drafter = r.drafter or NO_DRAFTER
        recorder.observe("hedgespec_spec_decode_committed_tokens_per_round", r.committed, drafter=drafter)
        recorder.observe("hedgespec_round_seconds", r.seconds, drafter=drafter)
    tallies = tally_rounds(generation.rounds)
    for key, name in COUNTED_PER_DRAFTER.items():
        for drafter, value in tallies[key].items():
            recorder.count(name, value, drafter=drafter)
    for (drafter, position), value in tallies["per_position"].items():
        recorder.count("hedgespec_spec_decode_num_accepted_tokens_per_pos", value, drafter=drafter, position=position)
    recorder.count("hedgespec_request_success", finished_reason=generation.finish_reason)
    recorder.count("hedgespec_prompt_tokens", prompt_tokens)
    recorder.count("hedgespec_generation_tokens", len(generation.tokens))
