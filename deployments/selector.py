"""The Selector deployment: per-request learner state (NormalHedge behind the delayed-feedback
queue by default), fed each round's feedback, answering with the arm for a coming round (a drafter
and its k, or the plain step, under the time objective; a drafter under the MAT objectives).

On the vLLM backend each request's learner runs inside vLLM's step (a call here per step would cost
as much as all the rest of the proposer's work), and the Selector holds what they learned across
requests instead: each Target replica's share of the warm-start prior (`share`), merged for all."""
import numpy as np
from ray import serve

from deployments.metrics import Recorder
from deployments.ordering import Sequencer
from hedgespec.arms import Arms
from hedgespec.config import SelectorConfig
from hedgespec.engine import build_selector
from hedgespec.feedback import RoundFeedback
from hedgespec.learners.priors import Learned, WarmStarts, merge


@serve.deployment(name="Selector", max_ongoing_requests=1024)
class SelectorDeployment:
    def __init__(self, config: dict, names: list[str], k: int):
        self.config = SelectorConfig.model_validate(config)
        self.names, self.k = names, k
        self.selectors = {}
        self.warm = WarmStarts()
        self.order = Sequencer()
        self.metrics = Recorder("hedgespec_selector_weight")
        self.latest: dict[str, float] = {}
        self.learned: dict[str, Learned] = {}  # vLLM backend: per Target replica, what its requests taught

    def _show(self, selector, arms: Arms, choice: int) -> None:
        """Exports the weights behind a choice, summed over each drafter's arms ("none": the plain
        step); a selector without weights (fixed, rule, the bandits) shows its choice as weight 1."""
        weights = getattr(selector, "last_weights", None)
        if weights is None:
            weights = np.eye(len(arms))[choice]
        by_drafter = np.bincount(arms.drafter_of + 1, weights, minlength=len(self.names) + 1)
        self.latest = {name: float(w) for name, w in zip(self.names, by_drafter[1:])}
        if len(arms) > len(self.names):  # the time objective's arms: the plain step is one of them
            self.latest["none"] = float(by_drafter[0])
        for name, weight in self.latest.items():
            self.metrics.set("hedgespec_selector_weight", weight, drafter=name)

    async def begin(self, request_id: str, seq: int, prompt_text: str, seed: int, config: dict | None = None,
                    k: int | None = None) -> None:
        """`config` and `k`: the request's own selector and K (default: the app's)."""
        async with self.order.turn(request_id, seq):
            config = SelectorConfig.model_validate(config) if config else self.config
            k = k or self.k
            selector = build_selector(config, self.names, k, seed)
            key = f"{config.model_dump_json()}:{k}"
            self.warm.start(selector, key)
            selector.begin(prompt_text)
            self.selectors[request_id] = (selector, Arms(len(self.names), k, config.objective == "time"), key)

    async def step(self, request_id: str, seq: int, feedback: list[RoundFeedback], awake) -> tuple[int, float | None]:
        """Learn from the rounds whose scores arrived; choose for the next round. Answers the arm and
        the probability its draw had, where the learner draws (EXP3Spec: its caller hands that back
        with the feedback of the round the arm is played in)."""
        async with self.order.turn(request_id, seq):
            selector, arms, _ = self.selectors[request_id]
            for round_feedback in feedback:
                selector.observe(round_feedback)
            choice = selector.choose(awake)
            self._show(selector, arms, choice)
            return choice, getattr(selector, "last_probability", None)

    async def end(self, request_id: str, seq: int, feedback: list[RoundFeedback]) -> None:
        """Final feedback, then the request's learner state is dropped (also after a disconnect)."""
        async with self.order.turn(request_id, seq):
            selector, _, key = self.selectors.pop(request_id, (None, None, None))
            if selector is not None:
                for round_feedback in feedback:
                    selector.observe(round_feedback)
                self.warm.end(selector, key)
        self.order.forget(request_id)

    async def share(self, replica: str, learned: Learned) -> Learned:
        """A Target replica's own learned priors in; every replica's merged out (a replica that
        Serve replaced keeps its share: what its requests taught still holds)."""
        self.learned[replica] = learned
        return merge(list(self.learned.values()))

    async def shared(self) -> dict:
        """How many Target replicas shared, and over how many finished requests (per selector and K)."""
        return {"replicas": len(self.learned),
                "requests": sum(count for learned in self.learned.values() for count, _ in learned.values())}

    async def weights(self) -> dict:
        """The selector and its weights at the latest choice of any request (empty before the first)."""
        return {"selector": self.config.name, "weights": self.latest}

    async def active(self) -> int:
        return len(self.selectors) + self.order.active
