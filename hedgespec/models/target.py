"""The target model: prefill, verify a draft in one forward, roll the KV cache back to what was
committed. Verification (and its randomness) lives here, beside the probabilities it needs."""
import time
from dataclasses import dataclass

import torch

from hedgespec.interfaces import Draft, Verified
from hedgespec.models.runner import CachedLM
from hedgespec.sampling import Sampling, process
from hedgespec.speculative import point_masses, verify_greedy, verify_sampling


@dataclass
class _Request:
    sampling: Sampling
    generator: torch.Generator
    pending: int  # the last committed token, not yet in the cache: the next verify feeds it first


class HFTarget:
    def __init__(self, lm: CachedLM):
        self.lm = lm
        self.vocab = lm.vocab
        self.requests: dict[str, _Request] = {}
        self.forwards = 0  # verify forwards since construction (the prefill is not counted)

    def prefill(self, request_id: str, tokens: list[int], sampling: Sampling, seed: int) -> torch.Tensor:
        assert tokens, "a prompt needs at least one token"
        self.lm.start(request_id)
        generator = torch.Generator().manual_seed(seed)
        self.requests[request_id] = _Request(sampling, generator, tokens[-1])
        if len(tokens) == 1:
            return torch.zeros(0, self.lm.decoder.config.hidden_size)
        _, hidden = self.lm.forward(request_id, tokens[:-1])
        return hidden

    def verify(self, request_id: str, draft: Draft) -> Verified:
        request = self.requests[request_id]
        start = self.lm.length(request_id)
        began = time.perf_counter()
        logits, hidden = self.lm.forward(request_id, [request.pending] + draft.tokens)
        seconds = time.perf_counter() - began
        self.forwards += 1
        probs = process(logits, request.sampling)
        if request.sampling.greedy:
            accepted, token = verify_greedy(probs, draft.tokens)
        else:
            draft_probs = draft.probs if draft.probs is not None else point_masses(draft.tokens, self.vocab)
            accepted, token = verify_sampling(probs, draft.tokens, draft_probs, request.generator)
        # keep the pending token and the accepted drafts; the new pending token is fed next round
        self.lm.crop(request_id, start + 1 + accepted)
        request.pending = token
        committed = draft.tokens[:accepted] + [token]
        return Verified(committed, accepted, len(draft.tokens), probs[: accepted + 1], hidden[: accepted + 1],
                        seconds, draft.seconds)

    def release(self, request_id: str) -> None:
        self.requests.pop(request_id, None)
        self.lm.release(request_id)

    @property
    def active(self) -> int:
        return len(self.requests)
