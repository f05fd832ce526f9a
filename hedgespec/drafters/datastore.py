"""A per-domain datastore drafter: continuation counts of n-grams in a token corpus (the domain's
text and, above all, the target's own answers on the domain), looked up by the longest suffix of
the text so far that occurs in the corpus (the corpus and its index: drafters/store.py).

q at a position is the empirical next-token distribution of the longest match (at least
`min_ngram`, at most `max_ngram` tokens) that has a continuation, processed like the target's
(log-counts as logits); greedy drafting therefore proposes the most frequent continuation chain.
With no such match the drafter sleeps: it proposes nothing and its evaluation rows are zero.
"""
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from hedgespec.drafters.store import Datastore
from hedgespec.interfaces import Draft, Observation, Verified
from hedgespec.sampling import Sampling, draw, process_draft


@dataclass
class _History:
    sampling: Sampling
    generator: torch.Generator
    tokens: list[int]
    row: torch.Tensor | None = None  # q at the end of `tokens`, once computed
    known: bool = False  # whether `row` (greedy: `next`) is up to date
    next: int | None = None  # greedy: the token q's point mass is on at the end of `tokens` (None: asleep)


class DatastoreDrafter:
    def __init__(self, name: str, store: Datastore, vocab: int, max_ngram: int = 8, min_ngram: int = 2):
        assert 1 <= min_ngram <= max_ngram <= store.depth, "need 1 <= min_ngram <= max_ngram <= store depth"
        self.name = name
        self.store = store
        self.vocab = vocab
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.requests: dict[str, _History] = {}

    def begin(self, request_id: str, tokens: list[int], hidden: torch.Tensor, sampling: Sampling, seed: int) -> None:
        self.requests[request_id] = _History(sampling, torch.Generator().manual_seed(seed), list(tokens))

    def _row(self, context: Sequence[int], sampling: Sampling) -> torch.Tensor | None:
        """The processed q over the full vocabulary after `context`, or None (asleep)."""
        found = self.store.continuations(context, self.min_ngram, self.max_ngram)
        if found is None:
            return None
        tokens, counts = found
        logits = torch.full((1, self.vocab), float("-inf"))
        logits[0, torch.from_numpy(tokens.astype(np.int64))] = torch.from_numpy(np.log(counts)).float()
        return process_draft(logits, sampling)[0]

    def _most_frequent(self, context: Sequence[int]) -> int | None:
        """Greedy q's point mass: the lowest id among the most frequent continuations, as the
        argmax of the processed row takes it (None: asleep)."""
        return self.store.most_frequent(context, self.min_ngram, self.max_ngram)

    def _current(self, history: _History) -> torch.Tensor | None:
        if not history.known:
            history.row, history.known = self._row(history.tokens, history.sampling), True
        return history.row

    def _current_next(self, history: _History) -> int | None:
        if not history.known:
            history.next, history.known = self._most_frequent(history.tokens), True
        return history.next

    def ready(self, request_id: str) -> bool:
        history = self.requests[request_id]
        if history.sampling.greedy:  # no full-vocabulary row for a point mass
            return self._current_next(history) is not None
        return self._current(history) is not None

    def propose(self, request_id: str, k: int) -> Draft:
        history = self.requests[request_id]
        context, tokens, rows = history.tokens[-self.max_ngram:], [], []
        if history.sampling.greedy:  # point masses: the chain of most frequent continuations
            token = self._current_next(history)
            while token is not None and len(tokens) < k:
                tokens.append(token)
                context = (context + [token])[-self.max_ngram:]
                token = self._most_frequent(context) if len(tokens) < k else None
            return Draft(tokens)
        row = self._current(history)
        while row is not None and len(tokens) < k:
            tokens.append(draw(row, history.generator))
            rows.append(row)
            context = (context + tokens[-1:])[-self.max_ngram:]
            row = self._row(context, history.sampling) if len(tokens) < k else None
        return Draft(tokens, torch.stack(rows) if rows else None)

    def observe(self, request_id: str, verified: Verified) -> Observation:
        return self.observe_many([(request_id, verified)])[0]

    def observe_many(self, rounds: Sequence[tuple[str, Verified]]) -> list[Observation]:
        """`observe` for a round of each of several requests: the greedy ones' lookups in one
        compiled call (LocalPool scores a vLLM step's rounds together)."""
        greedy = [(request_id, verified) for request_id, verified in rounds if self.requests[request_id].sampling.greedy]
        texts, ends = [], []
        for request_id, verified in greedy:
            history = self.requests[request_id]
            history.tokens += verified.tokens
            m = len(verified.tokens)
            texts.append(history.tokens[-(self.max_ngram + m):])
            # q before each committed token (the first one again: it is what `ready` looked up, or
            # would have), and after the last, the next round's first
            ends.append(range(len(texts[-1]) - m, len(texts[-1]) + 1))
        found = self.store.most_frequent_each(texts, ends, self.min_ngram, self.max_ngram) if greedy else None
        observations, at = {}, 0
        for (request_id, _), looked_up in zip(greedy, ends):
            history = self.requests[request_id]
            tokens, at = found[at:at + len(looked_up)], at + len(looked_up)
            history.next, history.known = (int(tokens[-1]) if tokens[-1] >= 0 else None), True
            observations[request_id] = Observation(None, tokens[:-1] >= 0, tokens[:-1])
        return [observations.get(request_id) or self._observe_sampled(request_id, verified)
                for request_id, verified in rounds]

    def _observe_sampled(self, request_id: str, verified: Verified) -> Observation:
        history = self.requests[request_id]
        probs = torch.zeros(len(verified.tokens), self.vocab)
        awake = torch.zeros(len(verified.tokens), dtype=torch.bool)
        for i, token in enumerate(verified.tokens):
            row = self._current(history)
            if row is not None:
                probs[i], awake[i] = row, True
            history.tokens.append(token)
            history.known = False
        return Observation(probs, awake)

    def extend(self, request_id: str, tokens: list[int]) -> None:
        """Committed tokens taken into the history without proposing at them (no lookups until the next proposal)."""
        history = self.requests[request_id]
        history.tokens.extend(tokens)
        history.known = False

    def release(self, request_id: str) -> None:
        self.requests.pop(request_id, None)
