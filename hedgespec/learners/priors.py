"""Warm starts across concurrent requests: per (selector config, K), the number of finished queries
and the mean of their final weights, which every new request's learner starts from
(HedgeSpecSelector.prior). The Selector deployment keeps one for the HF backend's learners; on the
vLLM backend each engine's proposer keeps one, and the Selector deployment merges what each engine's
own queries taught (`merge`), so that every engine, and one that restarts, starts from all of it."""
import numpy as np

Learned = dict[str, tuple[int, list[float]]]  # key -> (finished queries, mean final weights): plain values for RPCs


class WarmStarts:
    def __init__(self):
        self.priors: dict[str, tuple[int, np.ndarray]] = {}  # what a new learner of each key starts from
        self.own: dict[str, tuple[int, np.ndarray]] = {}  # the queries that ended here, alone

    def start(self, selector, key: str) -> None:
        """Before `selector.begin`: a warm-starting learner takes what the finished queries of `key` learned."""
        if getattr(selector, "warm_start", False) and key in self.priors:
            selector.queries, mean_final = self.priors[key]
            selector.mean_final = mean_final.copy()

    def end(self, selector, key: str) -> None:
        """Ends the query (`selector.end`), folding its final weights into the prior of `key`."""
        if not getattr(selector, "warm_start", False):
            selector.end()
            return
        queries, mean_final = self.priors.get(key, (selector.queries, selector.mean_final))
        selector.queries, selector.mean_final = queries, mean_final.copy()
        selector.end()
        self.priors[key] = (selector.queries, selector.mean_final)
        count, mean = self.own.get(key, (0, np.zeros_like(selector.final)))
        self.own[key] = (count + 1, mean + (selector.final - mean) / (count + 1))

    def learned(self) -> Learned:
        """What the queries that ended here taught, per key."""
        return {key: (count, mean.tolist()) for key, (count, mean) in self.own.items()}

    def adopt(self, merged: Learned) -> None:
        """Start new learners from `merged` (every engine's queries, this one's included)."""
        for key, (count, mean) in merged.items():
            self.priors[key] = (count, np.asarray(mean, dtype=float))


def merge(parts: list[Learned]) -> Learned:
    """Several engines' learned priors as one: per key, the mean of the final weights over all their
    queries (each engine's mean weighted by its count)."""
    total: dict[str, tuple[int, np.ndarray]] = {}
    for part in parts:
        for key, (count, mean) in part.items():
            seen, running = total.get(key, (0, np.zeros(len(mean))))
            total[key] = (seen + count, running + count * np.asarray(mean, dtype=float))
    return {key: (count, (weighted / count).tolist()) for key, (count, weighted) in total.items() if count}
