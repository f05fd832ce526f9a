"""Warm starts across concurrent requests: per (selector config, K), the number of finished queries
and the mean of their final weights, which every new request's learner starts from
(HedgeSpecSelector.prior). The Selector deployment and the vLLM backend's proposer each keep one."""
import numpy as np


class WarmStarts:
    def __init__(self):
        self.priors: dict[str, tuple[int, np.ndarray]] = {}

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
