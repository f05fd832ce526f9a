"""Prompt lookup (n-gram copy) drafting: if the last n tokens occurred earlier in the prompt or the
text so far, propose what followed them. Deterministic (point masses) and free to run; it abstains
(sleeps) when no n-gram of at least `min_ngram` tokens matches, which is what makes it a sleeping
expert for the selector.
"""
from dataclasses import dataclass, field

import torch

from hedgespec.interfaces import Draft, Observation, Verified
from hedgespec.sampling import Sampling


@dataclass
class _History:
    tokens: list[int]
    # n-gram -> index of the token that followed its most recent occurrence
    follows: dict[tuple[int, ...], int] = field(default_factory=dict)


class PromptLookupDrafter:
    def __init__(self, name: str, vocab: int, max_ngram: int = 3, min_ngram: int = 1):
        assert 1 <= min_ngram <= max_ngram, "need 1 <= min_ngram <= max_ngram"
        self.name = name
        self.vocab = vocab
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.requests: dict[str, _History] = {}

    def begin(self, request_id: str, tokens: list[int], hidden: torch.Tensor, sampling: Sampling, seed: int) -> None:
        history = _History([])
        for token in tokens:
            self._append(history, token)
        self.requests[request_id] = history

    def _append(self, history: _History, token: int) -> None:
        # index the n-grams that end just before the new token: their continuation is now known
        tokens = history.tokens
        for n in range(self.min_ngram, min(self.max_ngram, len(tokens)) + 1):
            history.follows[tuple(tokens[-n:])] = len(tokens)
        tokens.append(token)

    def _match(self, history: _History) -> int | None:
        """Where the continuation of the longest matching suffix n-gram starts, or None."""
        tokens = history.tokens
        for n in range(min(self.max_ngram, len(tokens)), self.min_ngram - 1, -1):
            start = history.follows.get(tuple(tokens[-n:]))
            if start is not None:
                return start
        return None

    def ready(self, request_id: str) -> bool:
        return self._match(self.requests[request_id]) is not None

    def propose(self, request_id: str, k: int) -> Draft:
        history = self.requests[request_id]
        start = self._match(history)
        return Draft([] if start is None else history.tokens[start:start + k])

    def observe(self, request_id: str, verified: Verified) -> Observation:
        history = self.requests[request_id]
        probs = torch.zeros(len(verified.tokens), self.vocab)
        awake = torch.zeros(len(verified.tokens), dtype=torch.bool)
        for i, token in enumerate(verified.tokens):
            start = self._match(history)
            if start is not None:
                probs[i, history.tokens[start]] = 1.0
                awake[i] = True
            self._append(history, token)
        return Observation(probs, awake)

    def release(self, request_id: str) -> None:
        self.requests.pop(request_id, None)
