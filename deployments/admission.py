"""Admission: an OpenAI request body checked against this server's model and limits, and the Job
it asks for; bad input raises an APIError (a 4xx that says what is wrong) before any work starts."""
import json
import random
import threading
import uuid
from collections import Counter

from deployments import openai_api as api
from hedgespec.config import SelectorConfig, ServeConfig
from hedgespec.sampling import Sampling
from hedgespec.text import encode_prompt


class Job:
    """One admitted request, as the Ingress runs it."""

    def __init__(self, request_id, response_id, tokens, text, max_tokens, sampling, seed, stop, speculate,
                 selector: SelectorConfig, k: int, caller: str | None):
        self.request_id, self.response_id, self.caller = request_id, response_id, caller
        self.tokens, self.text, self.max_tokens = tokens, text, max_tokens
        self.sampling, self.seed, self.stop, self.speculate = sampling, seed, list(stop or []), speculate
        self.selector, self.k = selector, k  # the server's, or what the request's `speculation` asked for
        self.cancel = threading.Event()


class Admission:
    def __init__(self, config: ServeConfig, tokenizer, context: int):
        """`context`: the tokens a request may hold in all, prompt, output and a round's drafts."""
        self.config, self.tokenizer, self.context = config, tokenizer, context

    def accept(self, raw: bytes, chat: bool, caller: str | None) -> tuple:
        """The validated body and the job it asks for; `caller`: the request's API key, None on an
        open server (where only the app's queue bounds a caller)."""
        try:
            payload = json.loads(raw)
        except (ValueError, RecursionError):  # malformed, not UTF-8, nested too deep, or an integer too long
            raise api.APIError(400, "the request body is not valid JSON") from None
        body = api.parse(api.ChatBody if chat else api.CompletionBody, payload)
        if body.model != self.config.model_name:
            raise api.APIError(404, f"model {body.model!r} does not exist; this server serves "
                                    f"{self.config.model_name!r}", "model", "model_not_found")
        stops = self._stops(body.stops)
        prompt = [m.model_dump(exclude_none=True) for m in body.messages] if chat else body.prompt
        tokens = encode_prompt(self.tokenizer, prompt, chat)
        max_tokens = self._budget(tokens, body.limit if chat else body.max_tokens)
        text = "\n".join(m["content"] for m in prompt) if chat else prompt
        selector, k = self._speculation(body.speculation)
        seed = body.decode_seed if body.seed is not None else random.getrandbits(31)
        return body, Job(uuid.uuid4().hex, api.completion_id(chat), tokens, text, max_tokens,
                         Sampling(body.decode_temperature, body.top_k, body.top_p), seed, stops, body.speculate,
                         selector, k, caller)

    def _stops(self, stops: list[str]) -> list[str]:
        limits = self.config.limits
        if len(stops) > limits.max_stop_sequences:
            raise api.APIError(400, f"stop: at most {limits.max_stop_sequences} strings", "stop")
        if any(not s for s in stops):
            raise api.APIError(400, "stop: the strings must not be empty", "stop")
        if any(len(s) > limits.max_stop_chars for s in stops):
            raise api.APIError(400, f"stop: each string has at most {limits.max_stop_chars} characters", "stop")
        return stops

    def _speculation(self, asked: api.Speculation | None) -> tuple[SelectorConfig, int]:
        """The selector and K of a request: the server's, with the request's `speculation` applied."""
        engine = self.config.engine
        selector, k = engine.selector, engine.k
        if asked is None:
            return selector, k
        if asked.k is not None:
            if asked.k > engine.k:
                raise api.APIError(400, f"speculation.k={asked.k} is above this server's K of {engine.k}", "speculation.k")
            k = asked.k
        if asked.drafter is not None:
            names = [d.name for d in engine.drafters]
            if asked.drafter not in names:
                raise api.APIError(400, f"speculation.drafter {asked.drafter!r} is not in the pool {names}",
                                   "speculation.drafter")
            selector = SelectorConfig(name="fixed", drafter=asked.drafter)
        if asked.objective is not None:
            selector = selector.model_copy(update={"loss": asked.objective})
        return selector, k

    def _budget(self, tokens: list[int], asked: int | None) -> int:
        limit, k = self.config.limits.max_tokens, self.config.engine.k
        if len(tokens) > self.config.limits.max_prompt_tokens:
            raise api.APIError(400, f"prompt: {len(tokens)} tokens; this server takes at most "
                                    f"{self.config.limits.max_prompt_tokens}", "prompt", "context_length_exceeded")
        room = self.context - len(tokens) - k - 1  # a round may hold K drafts beyond the last kept token
        if asked is None:
            asked = min(limit, room)
        if asked > limit:
            raise api.APIError(400, f"max_tokens: {asked} is above this server's limit of {limit}", "max_tokens")
        if asked > room or room < 1:
            raise api.APIError(400, f"max_tokens: the prompt ({len(tokens)} tokens) plus {asked} does not fit the "
                                    f"model's context of {self.context}", "max_tokens", "context_length_exceeded")
        return asked


class CallerSlots:
    """Requests in flight per API key, at most `limit` each (429 with Retry-After beyond): a slot is
    taken when a request is admitted and given back however it ends, on the event loop or on a
    decode thread (hence the lock). Callers without a key (an open server) have only the queue."""

    def __init__(self, limit: int, retry_after_s: int):
        self.limit, self.retry_after_s = limit, retry_after_s
        self.held: Counter = Counter()
        self.lock = threading.Lock()

    def take(self, caller: str | None) -> None:
        if caller is None:
            return
        with self.lock:
            full = self.held[caller] >= self.limit
            if not full:
                self.held[caller] += 1
        if full:
            raise api.APIError(429, f"too many concurrent requests for this API key (at most {self.limit}); "
                                    "retry later", None, "rate_limit_exceeded", self.retry_after_s)

    def give_back(self, caller: str | None) -> None:
        if caller is None:
            return
        with self.lock:
            self.held[caller] -= 1
            if self.held[caller] <= 0:
                del self.held[caller]
