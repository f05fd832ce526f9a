"""A drafter that is a smaller causal LM sharing the target's tokenizer (classic draft model).

Its cache holds every committed token but the last one (`pending`): a proposal feeds pending and
then its own drafts one at a time; `observe` cuts the drafts away and feeds the committed tokens in
one forward, which also yields its distributions at those positions for the evaluation phase.
"""
from dataclasses import dataclass

import torch

from hedgespec.interfaces import Draft, Observation, Verified
from hedgespec.models.runner import CachedLM
from hedgespec.sampling import Sampling, draw, process_draft


@dataclass
class _Request:
    sampling: Sampling
    generator: torch.Generator
    pending: int
    cached: int  # committed tokens in the cache (all but pending)


class LMDrafter:
    def __init__(self, name: str, lm: CachedLM):
        self.name = name
        self.lm = lm
        self.requests: dict[str, _Request] = {}

    def begin(self, request_id: str, tokens: list[int], hidden: torch.Tensor, sampling: Sampling, seed: int) -> None:
        self.lm.start(request_id)
        self.requests[request_id] = _Request(sampling, torch.Generator().manual_seed(seed), tokens[-1], len(tokens) - 1)
        if len(tokens) > 1:
            self.lm.forward(request_id, tokens[:-1])

    def ready(self, request_id: str) -> bool:
        return True

    def propose(self, request_id: str, k: int) -> Draft:
        request = self.requests[request_id]
        tokens, rows = [], []
        token = request.pending
        for _ in range(k):
            logits, _ = self.lm.forward(request_id, [token])
            probs = process_draft(logits, request.sampling)[0]
            token = draw(probs, request.generator)
            tokens.append(token)
            rows.append(probs)
        return Draft(tokens, torch.stack(rows) if rows else None)

    def observe(self, request_id: str, verified: Verified) -> Observation:
        request = self.requests[request_id]
        # a proposal fed pending + drafts[:-1]; cut them and re-feed pending + the committed text
        self.lm.crop(request_id, request.cached)
        logits, _ = self.lm.forward(request_id, [request.pending] + verified.tokens[:-1])
        request.cached += len(verified.tokens)
        request.pending = verified.tokens[-1]
        probs = process_draft(logits, request.sampling)
        return Observation(probs, torch.ones(len(probs), dtype=torch.bool))

    def release(self, request_id: str) -> None:
        self.requests.pop(request_id, None)
        self.lm.release(request_id)
