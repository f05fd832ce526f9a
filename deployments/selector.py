"""The Selector deployment: per-request learner state (NormalHedge behind the delayed-feedback
queue by default), fed each round's feedback, answering with the drafter for a coming round."""
from ray import serve

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
            return selector.choose(awake)

    async def end(self, request_id: str, seq: int, feedback: list[RoundFeedback]) -> None:
        """Final feedback, then the request's learner state is dropped (also after a disconnect)."""
        async with self.order.turn(request_id, seq):
            selector = self.selectors.pop(request_id, None)
            if selector is not None:
                for round_feedback in feedback:
                    selector.observe(round_feedback)
                selector.end()
        self.order.forget(request_id)

    async def active(self) -> int:
        return len(self.selectors) + self.order.active
