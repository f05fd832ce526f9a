"""HedgeSpec inside vLLM's steps: vLLM's `custom_class` proposer (speculative_config method
"custom_class"), built in vLLM's worker process from the config in hedgespec.vllm_engine.PROPOSER_ENV.

After every step vLLM hands over, for each request of the batch, the tokens that step committed
(the accepted drafts and one more). Each request runs the decode loop's own round logic,
decode.Speculation: the committed tokens are a round for it (every drafter observes and is
scored, the learner and the delayed-feedback queue are fed, the round's cost is recorded), and the
learner's arm for the next round (a drafter and its k, or no draft) gives the draft returned to
vLLM. vLLM verifies it in the next step, batched with every other request's. Every request's round
is handed over before any drafts, so the pool scores the step's rounds together, each drafter
observing all of them in one call (pool.LocalPool without its worker: the datastores' lookups of
a step are one compiled call).

- Drafters: prompt lookup and the datastores (hedgespec.config.VLLM_KINDS), run here: they cost
  well under a millisecond a step, less than any call to another process (ray-notes.md: a Serve
  round trip is 1.3-3.9 ms against a 30-80 ms step). They draft point masses (greedy
  continuations) whatever the request's temperature: vLLM accepts a point-mass draft d with
  probability p(d), which is lossless however d was chosen.
- Scores: vLLM keeps the target's distributions, so a drafter's gamma is the indicator that its
  token was committed (evaluation.score): exact under greedy decoding, an unbiased estimate of p(d)
  under sampling.
- Costs: one step serves the whole batch; its time is fitted as a fixed part and a part per token
  (arms.StepCosts, over decode steps), and an arm drafting k is priced, at the current batch size,
  as the fixed part's share and its k + 1 tokens' compute: under load, when many requests share
  the fixed part, the time objective prices long drafts, and speculation itself, as they then cost.
  A round's own time leaves out its scoring, done for the whole step at once: every round is
  scored whatever arm it played, so that time would weigh on every arm alike.
- The load gate (hedgespec.load_gate) decides before the learners how the next step of a batch of
  two or more speculates: every request plays its round (ALL), every request drafts a copy of its
  own text where its last n-gram occurred before, with no round (COPY: vLLM's n-gram rule, for
  microseconds, reaching only as far as its tokens' chance of acceptance pays for the compute they
  add to the step: `_copy_length`), or none drafts (NONE), from the wall-clock tokens per second
  that steps of each mode measured at this load (what the line misses: vLLM's spec-decode
  bookkeeping, the other requests' proposer work; a request alone pays neither). A request that
  plays no round costs the proposer next to nothing: its committed tokens wait for the next round it
  plays. Every drafter is scored on the last K + 1 of them; the drafters take the rest into their
  histories without scoring them (far cheaper), and the learner does without those positions'
  scores.

vLLM hands the proposer no request ids; the worker's model runner has them (found once, when vLLM
calls `load_model`): `input_batch.req_ids` names the rows and `requests` holds each one's
SamplingParams, whose `extra_args["hedgespec"]` carries the request's own speculation
(vllm_engine.speculation_args). This reads vLLM 0.32's runner, pinned in pyproject.toml.
"""
import os
import sys
import time
from dataclasses import dataclass, field

import torch

from hedgespec.arms import RoundCosts, StepCosts
from hedgespec.calibration import DepthCalibration
from hedgespec.config import EngineConfig, SelectorConfig
from hedgespec.copies import CopyOdds
from hedgespec.decode import Request, Round, Speculation, through_eos
from hedgespec.drafters import build_drafters
from hedgespec.drafters.prompt_lookup import PromptLookupDrafter
from hedgespec.engine import build_selector, delayed_losses
from hedgespec.interfaces import Verified
from hedgespec.learners.priors import WarmStarts
from hedgespec.load_gate import ALL, COPY, NONE, LoadGate
from hedgespec.models import loading
from hedgespec.pool import LocalPool
from hedgespec.sampling import Sampling
from hedgespec.vllm_engine import PROPOSER_ENV

NO_HIDDEN = torch.empty(0, 0)  # these drafters read token ids only
KEPT = 4096  # finished requests' rounds kept for `release` to collect; beyond, the oldest are dropped
TOKENS_PER_S_EMA = 0.05  # weight of a step in the running tokens per second: about the last 20 steps


@dataclass
class _Live:
    """A request the proposer is speculating for."""
    speculation: Speculation
    k: int
    max_tokens: int
    ignore_eos: bool
    generated: int = 0
    draft: tuple[int, ...] = ()  # what the last step verified
    draft_seconds: float = 0.0
    budget: int = 0  # the most tokens the next step may draft
    gated: bool = False  # the last step played no round for it (the gate's COPY or NONE)
    copies: CopyOdds = field(default_factory=CopyOdds)  # how its copies have fared
    unplayed: list[int] = field(default_factory=list)  # committed since the last round played, not yet scored
    rounds: list[Round] = field(default_factory=list)  # what the response reports (decode.Generation.stats)


def load_of(batch: int) -> str:
    """The load a request starts under, in powers of two of the batch: what a warm-start prior is kept
    per. The time objective prices a step by the batch, so the arms a request learns to play (drafting
    less, or not at all, under load) depend on it: a prior learned under load would hold the first
    requests after it back from drafting where drafting is nearly free."""
    return f"batch<={1 << max(0, batch - 1).bit_length()}"


class HedgeSpecProposer:
    def __init__(self, vllm_config, clock=time.perf_counter):
        """`clock`: seconds, what the steps and the proposer's own work are timed with (bench/proposer.py
        simulates the steps on it)."""
        self.clock = clock
        self.config = EngineConfig.model_validate_json(os.environ[PROPOSER_ENV])
        target = self.config.target
        vocab = vllm_config.model_config.get_vocab_size()
        self.tokenizer = loading.load_tokenizer(target.model)
        self.pool = LocalPool(build_drafters(self.config.drafters, vocab, self.tokenizer, target, self.config.k), background=False)
        self.eos_ids = loading.eos_ids(target.model)
        self.max_model_len = vllm_config.model_config.max_model_len
        n, k = len(self.pool.names), self.config.k
        self.steps, self.batch = StepCosts(), 1  # the step's fit, and the requests of the step being priced
        self.costs = RoundCosts(n, k, lambda tokens: self.steps.share(tokens, self.batch))
        self.calibration = DepthCalibration(n, k)
        self.warm = WarmStarts()
        self.live: dict[str, _Live] = {}
        self.finished: dict[str, list[Round]] = {}  # ended here, not yet released by the engine
        self.plain: set[str] = set()  # running requests that asked for no speculation
        self.runner = None
        self.returned_at: float | None = None  # when the last drafts went back to vLLM
        self.gate = LoadGate()
        # COPY steps' drafter, fed every committed token (the pool's drafters take them in only when a
        # round is played); vLLM's n-gram settings, so that COPY drafts what that baseline would
        settings = target.vllm
        self.copier = PromptLookupDrafter(COPY, vocab, settings.ngram_max, settings.ngram_min)
        self.drafting_s: float | None = None  # the last step's drafting time (None: the gate did not decide the step)
        self.tokens_per_s = 0.0  # committed by the recent decode steps (a running mean): what a draft token must beat

    def load_model(self, target_model) -> None:
        """vLLM's model runner calls this; the runner is the caller whose batch names the requests."""
        frame = sys._getframe(1)
        while frame is not None:
            candidate = frame.f_locals.get("self")
            if hasattr(candidate, "input_batch") and hasattr(candidate, "requests"):
                self.runner = candidate
                return
            frame = frame.f_back
        raise RuntimeError("hedgespec proposer: vLLM's model runner was not found (vllm 0.32 is pinned)")

    def propose(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings=None, **_) -> list[list[int]]:
        arrived = self.clock()
        batch = list(self.runner.input_batch.req_ids)
        rows = set(batch)
        for request_id in [r for r in self.live if r not in rows]:  # finished or aborted
            self._end(request_id)
        self.plain &= rows
        # a step's tokens: each running request's draft and one more, a new one's prompt (all of it:
        # a prompt prefilled in chunks is overcharged, only while it is new)
        scheduled = [len(self.live[r].draft) + 1 if r in self.live else 1 if r in self.plain
                     else int(num_tokens_no_spec[i]) for i, r in enumerate(batch)]
        # decode steps only: a prefill's hundreds of tokens would pull the line away from what a
        # round's few cost, and would charge the gate's mode with a prompt
        decoding = self.returned_at is not None and all(r in self.live or r in self.plain for r in batch)
        committed_total = sum(len(s) for s in sampled_token_ids)
        if decoding:
            self.steps.record(sum(scheduled), arrived - self.returned_at)
            rate = committed_total / max(arrived - self.returned_at, 1e-6)
            self.tokens_per_s += TOKENS_PER_S_EMA * (rate - self.tokens_per_s) if self.tokens_per_s else rate
        self.batch = len(batch)
        self.costs.reprice()  # the arms' prices follow the batch
        learned = []  # per request: whether the step committed tokens to it that it learned from
        for i, request_id in enumerate(batch):
            committed = list(sampled_token_ids[i]) if i < len(sampled_token_ids) else []
            share = None if self.returned_at is None else self.steps.share(scheduled[i], len(batch))
            learned.append(self._commit(request_id, committed, share, token_ids_cpu[i, :num_tokens_no_spec[i]]))
        committed_at = self.clock()
        if decoding and self.drafting_s is not None:
            # the step's mode is charged what it cost: its drafts, vLLM's step, the work on its results
            self.gate.record(committed_total, self.drafting_s + committed_at - self.returned_at)
        # a request alone is priced in full by its own learner (the step's line is its own verify
        # curve, the proposer's work its own round's): the gate decides where requests share steps
        gated = self.batch > 1
        mode = self.gate.mode(load_of(self.batch)) if gated else ALL
        drafts = [self._draft(request_id, mode) if ok else self._no_draft(request_id)
                  for request_id, ok in zip(batch, learned)]
        self.returned_at = self.clock()
        self.drafting_s = self.returned_at - committed_at if gated else None
        return drafts

    def _commit(self, request_id: str, committed: list[int], step_share: float | None, history) -> bool:
        """Learn from what the step committed for the request (a new request's first token begins
        it); whether the request goes on speculating, so drafts for the next step."""
        if not committed or request_id in self.plain:  # a prompt still prefilled in chunks, or no speculation
            return False
        start = self.clock()
        live = self.live.get(request_id)
        if live is None:
            live = self._begin(request_id, history.tolist(), len(committed))
            if live is None:
                return False
            step_share = None  # the prefill step prices no arm
        verified = Verified(committed, len(committed) - 1, len(live.draft), None, NO_HIDDEN,
                            step_share or 0.0, live.draft_seconds)
        if not live.ignore_eos:
            verified = through_eos(verified, self.eos_ids)
        if len(verified.tokens) > live.max_tokens - live.generated:  # vLLM keeps none beyond max_tokens
            verified = verified.first(live.max_tokens - live.generated)
        live.generated += len(verified.tokens)
        self.copier.extend(request_id, verified.tokens)
        if live.gated:  # no round was played for this step: its tokens wait for the next one that is
            if live.draft:  # a copy was verified: vLLM committed its accepted tokens and one more
                live.copies.record(len(live.draft), len(committed) - 1)
            live.unplayed += verified.tokens
            live.rounds.append(Round(COPY if verified.drafted else None, verified.drafted, verified.accepted,
                                     len(verified.tokens), step_share or 0.0, live.draft_seconds, step_share or 0.0))
        else:
            seconds = None if step_share is None else step_share + live.draft_seconds + self.clock() - start
            drafter = live.speculation.commit(verified, seconds)
            live.rounds.append(Round(drafter, verified.drafted, verified.accepted, len(verified.tokens),
                                     seconds or 0.0, live.draft_seconds, verified.seconds))
        live.budget = min(live.k, live.max_tokens - live.generated - 1, self.max_model_len - len(history) - 1)
        if (not live.ignore_eos and verified.tokens[-1] in self.eos_ids) or live.budget < 0:  # its last step
            self._end(request_id)
            return False
        return True

    def _draft(self, request_id: str, mode: str) -> list[int]:
        """The request's draft for the next step: the learner's arm's (ALL), a copy of its text (COPY),
        or none (NONE)."""
        live = self.live[request_id]
        if mode != ALL:
            live.gated = True
            if mode == NONE or live.budget <= 0:
                return self._no_draft(request_id)
            start = self.clock()
            live.draft = tuple(self.copier.propose(request_id, self._copy_length(live)).tokens)
            live.draft_seconds = self.clock() - start
            return list(live.draft)
        if live.unplayed:
            self._catch_up(request_id, live)
        live.gated = False
        draft = live.speculation.draft(live.budget)
        live.draft, live.draft_seconds = tuple(draft.tokens), draft.seconds
        return list(draft.tokens)

    def _copy_length(self, live: _Live) -> int:
        """How far the request's copy should reach (copies.CopyOdds.reach): a draft token adds the
        step line's cost per token, and must beat it at the tokens per second the steps commit now."""
        _, per_token = self.steps.line()
        return live.copies.reach(live.budget, per_token * self.tokens_per_s)

    def _catch_up(self, request_id: str, live: _Live) -> None:
        """Before the request's next round, the tokens committed while the gate held it back: the
        last K + 1 are scored (what the learner sees of the text just before it chooses); the
        drafters take the rest in without scoring, and the learner does without their scores. Under
        load the gate holds back most steps; scoring all they commit stalled a batch of 16 by
        140-200 ms at each resumption, and the drafters' beginning again on the whole text instead
        still by ~16 ms (a session trace, not committed): taking in the held tokens costs microseconds."""
        held, tail = live.unplayed[:-(self.config.k + 1)], live.unplayed[-(self.config.k + 1):]
        if held:
            self.pool.extend(request_id, held)
            live.speculation.skip(len(held))
        live.speculation.catch_up(tail)
        live.unplayed = []

    def _no_draft(self, request_id: str) -> list[int]:
        """A request that goes on without a draft (the gate held it back, or the step committed
        nothing to it): the next step verifies none of its tokens, and its next round must not count
        the last draft again."""
        live = self.live.get(request_id)
        if live is not None:
            live.draft, live.draft_seconds = (), 0.0
        return []

    def _begin(self, request_id: str, history: list[int], committed: int) -> _Live | None:
        state = self.runner.requests.get(request_id)
        params = getattr(state, "sampling_params", None)
        asked = ((params.extra_args if params else None) or {}).get("hedgespec", {})
        if params is None or not asked.get("speculate", True) or not self.pool.names:
            self.plain.add(request_id)
            return None
        selector_config = SelectorConfig.model_validate(asked["selector"]) if asked.get("selector") else self.config.selector
        k = min(asked.get("k") or self.config.k, self.config.k)
        seed = params.seed or 0
        names = self.pool.names
        selector = build_selector(selector_config, names, k, seed)
        key = f"{selector_config.model_dump_json()}:{k}:{load_of(self.batch)}"
        self.warm.start(selector, key)
        losses = delayed_losses(selector_config, len(names), k, self.costs, self.calibration)
        speculation = Speculation(request_id, self.pool, selector, losses, k, lambda: self.warm.end(selector, key))
        prompt = history[:len(history) - committed]
        text = self.tokenizer.decode(prompt) if selector_config.name == "router" else ""
        # the drafters draft point masses (vLLM verifies them as such), so they run greedy
        speculation.begin(Request(prompt, params.max_tokens, Sampling(), seed, (), text, request_id), NO_HIDDEN)
        self.copier.begin(request_id, prompt, NO_HIDDEN, Sampling(), seed)
        live = _Live(speculation, k, params.max_tokens or self.max_model_len, bool(params.ignore_eos))
        self.live[request_id] = live
        return live

    def _end(self, request_id: str) -> None:
        live = self.live.pop(request_id, None)
        if live is not None:
            self.finished[request_id] = live.rounds
            while len(self.finished) > KEPT:
                self.finished.pop(next(iter(self.finished)))
            try:
                live.speculation.finish()
            finally:
                self.pool.release(request_id)
                self.copier.release(request_id)

    def release(self, request_ids: list[str]) -> dict[str, list[tuple]]:
        """Ends the named requests (vLLM's own ids carry a suffix after the caller's: "<id>-<8 chars>")
        and hands back each one's rounds, as tuples of decode.Round's fields."""
        wanted = set(request_ids)
        caller = lambda r: r if r in wanted else r.rsplit("-", 1)[0]  # noqa: E731
        for request_id in [r for r in self.live if caller(r) in wanted]:
            self._end(request_id)
        self.plain = {r for r in self.plain if caller(r) not in wanted}
        # plain Python values: vLLM's RPC serializes with msgpack, and a numpy scalar kills its output thread
        # (vars: dataclasses.astuple deep-copies every field of every round, at every request's end)
        return {caller(r): [tuple(v.item() if hasattr(v, "item") else v for v in vars(x).values()) for x in self.finished.pop(r)]
                for r in list(self.finished) if caller(r) in wanted}

    def costs_snapshot(self) -> dict:
        """What the time objective prices arms with now: the fitted step, the batch it was last shared
        by, and the round costs (ms); and the gate's tokens per second per load and mode."""
        fixed, per_token = self.steps.line()
        rounds = self.costs.snapshot()
        return {"step_ms": {"fixed": 1e3 * fixed, "per_token": 1e3 * per_token}, "batch": self.batch,
                "verify_ms": {str(n): v for n, v in rounds["verify_ms"].items()}, "rest_ms": rounds["rest_ms"],
                "gate_tokens_per_s": self.gate.snapshot()}

    @property
    def active(self) -> int:
        """Requests holding state here (drafters', learners', rounds not yet collected): 0 when idle."""
        return len(self.live) + len(self.finished) + self.pool.active + len(self.copier.requests)

