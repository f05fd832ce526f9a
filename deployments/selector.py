"""The Selector deployment: per-request learner state (NormalHedge behind the delayed-feedback
queue by default), fed each round's feedback, answering with the drafter for a coming round."""
import numpy as np
from ray import serve

from deployments.metrics import Recorder
from deployments.ordering import Sequencer
from hedgespec.config import SelectorConfig
from hedgespec.engine import build_selector
from hedgespec.feedback import RoundFeedback


@serve.deployment(name="Selector", max_ongoing_requests=1024)
class SelectorDeployment:
    def __init__(self, config: dict, names: list[str], k: int):
        self.config = SelectorConfig.model_validate(config)
        self.names, self.k = names, k
        self.selectors = {}
        self.order = Sequencer()
        self.metrics = Recorder("hedgespec_selector_weight")
        self.latest: dict[str, float] = {}

    def _show(self, selector, choice: int) -> None:
        """Exports the weights behind a choice; a selector without weights (fixed, rule, the
        bandits) shows its choice as weight 1."""
        weights = getattr(selector, "last_weights", None)
        if weights is None:
            weights = np.eye(len(self.names))[choice]
        self.latest = {name: float(w) for name, w in zip(self.names, weights)}
        for name, weight in self.latest.items():
            self.metrics.set("hedgespec_selector_weight", weight, drafter=name)

    async def begin(self, request_id: str, seq: int, prompt_text: str, seed: int) -> None:
        async with self.order.turn(request_id, seq):
            selector = build_selector(self.config, self.names, self.k, seed)
            selector.begin(prompt_text)
            self.selectors[request_id] = selector

    async def step(self, request_id: str, seq: int, feedback: list[RoundFeedback], awake) -> int:
        """Learn from the rounds whose scores arrived; choose for the next round."""
        async with self.order.turn(request_id, seq):
            selector = self.selectors[request_id]
            for round_feedback in feedback:
                selector.observe(round_feedback)
            choice = selector.choose(awake)
            self._show(selector, choice)
            return choice

    async def end(self, request_id: str, seq: int, feedback: list[RoundFeedback]) -> None:
        """Final feedback, then the request's learner state is dropped (also after a disconnect)."""
        async with self.order.turn(request_id, seq):
            selector = self.selectors.pop(request_id, None)
            if selector is not None:
                for round_feedback in feedback:
                    selector.observe(round_feedback)
                selector.end()
        self.order.forget(request_id)

    async def weights(self) -> dict:
        """The selector and its weights at the latest choice of any request (empty before the first)."""
        return {"selector": self.config.name, "weights": self.latest}

    async def active(self) -> int:
        return len(self.selectors) + self.order.active
