"""The in-process engine: builds the target, the drafter pool and a selector from an EngineConfig
and runs the one decode loop for a prompt."""
import copy
from collections.abc import Callable

import torch

from hedgespec.arms import Arms, RoundCosts
from hedgespec.calibration import DepthCalibration
from hedgespec.config import EngineConfig, SelectorConfig
from hedgespec.decode import Generation, Request, decode
from hedgespec.drafters import build_drafters
from hedgespec.feedback import DelayedLosses
from hedgespec.learners.router import RouterSelector, trained_classifier
from hedgespec.learners.selectors import make_selector
from hedgespec.models import loading
from hedgespec.models.runner import CachedLM
from hedgespec.models.target import HFTarget
from hedgespec.pool import LocalPool
from hedgespec.sampling import Sampling
from hedgespec.text import TextStream, encode_prompt


class Engine:
    def __init__(self, config: EngineConfig):
        if config.target.backend != "hf":
            raise ValueError("the in-process engine runs the HF backend; the vLLM backend runs in the Serve app "
                             "(serve run serve_config.yaml)")
        if config.threads:
            torch.set_num_threads(config.threads)
        self.config = config
        self.dtype = loading.resolve_dtype(config.target.dtype, config.target.device)
        model, self.tokenizer = loading.load(config.target.model, config.target.dtype, config.target.device)
        self.target = HFTarget(CachedLM(model))
        self.target.lm.warm_up(range(1, config.k + 2))
        self.drafters = build_drafters(config.drafters, self.target.vocab, self.tokenizer, config.target, config.k, model)
        self.pool = LocalPool(self.drafters)
        self.eos_ids = loading.eos_ids(config.target.model)
        self.use_selector(config.selector)
        # measured by every generation, kept across them
        self.costs = RoundCosts(len(self.drafters), config.k)
        self.calibration = DepthCalibration(len(self.drafters), config.k)

    def use_selector(self, config: SelectorConfig, seed: int = 0) -> None:
        """One selector for the engine's sequential queries (so a warm start can carry across them);
        its config also fixes the arms its choices index."""
        names = [d.name for d in self.drafters]
        self.selector_config = config
        self.selector = build_selector(config, names, self.config.k, seed) if names else None

    def with_drafters(self, drafters: list, k: int | None = None, selector: SelectorConfig | None = None) -> "Engine":
        """The same target with another pool of already built drafters (nothing is reloaded), and
        optionally another K and selector."""
        other = copy.copy(self)
        other.config = self.config.model_copy(update={"k": k or self.config.k})
        other.drafters, other.pool = list(drafters), LocalPool(drafters)
        other.use_selector(selector or self.config.selector)
        other.costs = RoundCosts(len(drafters), other.config.k)
        other.calibration = DepthCalibration(len(drafters), other.config.k)
        return other

    def encode(self, prompt: str | list[dict], chat: bool = True) -> list[int]:
        return encode_prompt(self.tokenizer, prompt, chat)

    def generate(self, prompt: str | list[dict], max_tokens: int = 128, sampling: Sampling = Sampling(),
                 seed: int = 0, stop: tuple[str, ...] = (), chat: bool = True, speculate: bool = True,
                 on_text: Callable[[str], None] | None = None, selector=None,
                 selector_config: SelectorConfig | None = None, target=None) -> Generation:
        """`selector`, `selector_config` and `target` replace the engine's own for this query
        (benchmarks: `target` a bench.replay.ReplayTarget)."""
        selector = selector or self.selector
        selector_config = selector_config or self.selector_config
        tokens = self.encode(prompt, chat)
        text = prompt if isinstance(prompt, str) else "\n".join(m["content"] for m in prompt)
        request = Request(tokens, max_tokens, sampling, seed, stop, text)
        pool = self.pool if speculate and self.drafters else None
        losses = delayed_losses(selector_config, len(self.drafters), self.config.k, self.costs,
                                self.calibration) if pool else None
        stream = TextStream(self.tokenizer, max_tokens, list(stop), self.eos_ids)
        return decode(request, target or self.target, pool, selector, stream, self.config.k, losses, on_text)


def delayed_losses(config: SelectorConfig, n_drafters: int, k: int, costs: RoundCosts,
                   calibration: DepthCalibration | None) -> DelayedLosses:
    """One generation's feedback window for this selector; the time objective prices its arms with
    `costs`; `calibration` corrects the scores per depth (hedgespec.calibration) and learns from it."""
    return DelayedLosses(n_drafters, k, config.objective, config.estimator,
                         costs if config.objective == "time" else None, calibration)


def build_selector(config: SelectorConfig, names: list[str], k: int, seed: int = 0):
    """The configured selector over the drafters called `names` (the full-information learners choose
    among the arms of their objective, hedgespec.arms)."""
    if config.name == "router":
        routes = {domain: names.index(name) for domain, name in config.routes.items()}
        return RouterSelector(len(names), trained_classifier(), routes, names.index(config.fallback))
    options = {"fixed": lambda: {"index": names.index(config.drafter)},
               "rule": lambda: {"primary": names.index(config.drafter), "fallback": names.index(config.fallback)},
               "ucbspec": lambda: {"delta": config.delta, "seed": seed},
               "ucb1": lambda: {"seed": seed},
               "exp3spec": lambda: {"seed": seed}}.get(config.name)
    if options is None:  # the full-information learners
        options = lambda: {"delay": config.delay, "act": config.act, "warm_start": config.warm_start, "seed": seed}
        return make_selector(config.name, len(Arms(len(names), k, config.objective == "time")), k, **options())
    return make_selector(config.name, len(names), k, **options())
