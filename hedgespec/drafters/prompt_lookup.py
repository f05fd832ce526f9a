"""Prompt lookup (n-gram copy) drafting: if the last n tokens occurred earlier in the prompt or the
text so far, propose what followed them. Deterministic (point masses) and free to run; it abstains
(sleeps) when no n-gram of at least `min_ngram` tokens matches, which is what makes it a sleeping
expert for the selector.

A draft is a chain of single-token matches: each drafted token is appended to a scratch view of
the history and the longest suffix is matched again. So the k-th drafted token is exactly what
`observe` credits the drafter with at that position once the k-1 before it are committed: the
scores equal what a round would have drafted, and a periodic text such as [1, 2, 1, 2] drafts
past the end of the history instead of stopping there.
"""
from collections import ChainMap
from dataclasses import dataclass, field

import numpy as np
import torch

from hedgespec.interfaces import Draft, Observation, Verified
from hedgespec.sampling import Sampling


@dataclass
class _History:
    tokens: list[int]
    # n-gram -> the token that followed its most recent occurrence
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
            self._append(history.tokens, history.follows, token)
        self.requests[request_id] = history

    def _append(self, tokens: list[int], follows, token: int) -> None:
        # index the n-grams that end just before the new token: their continuation is now known
        for n in range(self.min_ngram, min(self.max_ngram, len(tokens)) + 1):
            follows[tuple(tokens[-n:])] = token
        tokens.append(token)

    def _match(self, tokens: list[int], follows) -> int | None:
        """The token after the most recent occurrence of the longest matching suffix n-gram, or None."""
        for n in range(min(self.max_ngram, len(tokens)), self.min_ngram - 1, -1):
            token = follows.get(tuple(tokens[-n:]))
            if token is not None:
                return token
        return None

    def ready(self, request_id: str) -> bool:
        history = self.requests[request_id]
        return self._match(history.tokens, history.follows) is not None

    def propose(self, request_id: str, k: int) -> Draft:
        history = self.requests[request_id]
        # the scratch view: drafted tokens go into an overlay, the history itself stays untouched;
        # only the last max_ngram tokens are ever matched, so the scratch list starts from those
        tokens, follows = history.tokens[-self.max_ngram:], ChainMap({}, history.follows)
        draft = []
        while len(draft) < k:
            token = self._match(tokens, follows)
            if token is None:
                break
            draft.append(token)
            self._append(tokens, follows, token)
        return Draft(draft)

    def observe(self, request_id: str, verified: Verified) -> Observation:
        history = self.requests[request_id]
        proposals = []
        for token in verified.tokens:
            proposed = self._match(history.tokens, history.follows)
            proposals.append(-1 if proposed is None else proposed)
            self._append(history.tokens, history.follows, token)
        tokens = np.array(proposals)
        return Observation(None, tokens >= 0, tokens)

    def extend(self, request_id: str, tokens: list[int]) -> None:
        """Committed tokens taken into the history without proposing at them (no scores)."""
        history = self.requests[request_id]
        for token in tokens:
            self._append(history.tokens, history.follows, token)

    def release(self, request_id: str) -> None:
        self.requests.pop(request_id, None)
