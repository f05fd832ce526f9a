"""A per-domain datastore drafter: continuation counts of n-grams in a token corpus (the domain's
text and, above all, the target's own answers on the domain), looked up by the longest suffix of
the text so far that occurs in the corpus.

The store is a suffix array over the *reversed* token stream: the suffixes of the text so far, read
backwards, are prefixes there, so matching one more context token only narrows the range found
for the shorter match (two binary searches per token, no n-gram table). The token that follows an
occurrence in the original order sits just before it in the reversed stream.

q at a position is the empirical next-token distribution of the longest match (at least
`min_ngram`, at most `max_ngram` tokens) that has a continuation, processed like the target's
(log-counts as logits); greedy drafting therefore proposes the most frequent continuation chain.
With no such match the drafter sleeps: it proposes nothing and its evaluation rows are zero.
"""
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from hedgespec.interfaces import Draft, Observation, Verified
from hedgespec.sampling import Sampling, draw, process_draft

SEPARATOR = -1  # between documents: never matched, never proposed
PAST_END = -2  # what a suffix reads beyond the end of the stream (sorts first, as in the build)
SAMPLE = 4096  # very frequent short n-grams are counted on an even sample of this many occurrences


def suffix_array(stream: np.ndarray, depth: int) -> np.ndarray:
    """Suffix start positions sorted by their first `depth` tokens (prefix doubling: each round
    sorts by twice as many tokens, so log2(depth) argsorts of the whole stream)."""
    n = len(stream)
    rank = np.unique(stream, return_inverse=True)[1].astype(np.int64) + 1  # 0: past the end
    order = np.argsort(rank, kind="stable")
    span = 1
    while span < depth:
        second = np.zeros(n, np.int64)
        second[:n - span] = rank[span:]
        key = rank * (n + 2) + second
        order = np.argsort(key)
        ordered = key[order]
        rank = np.empty(n, np.int64)
        rank[order] = 1 + np.concatenate([[0], np.cumsum(ordered[1:] != ordered[:-1])])
        span *= 2
    return order


class Datastore:
    def __init__(self, stream: np.ndarray, order: np.ndarray, depth: int):
        self.stream = stream  # int32, reversed documents between separators
        self.order = order  # suffix array of `stream`, sorted on `depth` tokens
        self.depth = depth
        self.leading = stream[order]  # every suffix's first token, sorted: the first narrowing is one search

    @classmethod
    def build(cls, documents: Iterable[Sequence[int]], depth: int = 16) -> "Datastore":
        pieces = [np.array([SEPARATOR], np.int32)]
        for doc in documents:
            pieces += [np.asarray(doc, np.int32), np.array([SEPARATOR], np.int32)]
        stream = np.ascontiguousarray(np.concatenate(pieces)[::-1])
        order = suffix_array(stream, depth)
        return cls(stream, order.astype(np.int32 if len(stream) < 2**31 else np.int64), depth)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        with open(partial, "wb") as f:
            np.savez(f, stream=self.stream, order=self.order, depth=np.int64(self.depth))
        partial.rename(path)

    @classmethod
    def load(cls, path: Path) -> "Datastore":
        with np.load(path) as data:
            return cls(data["stream"], data["order"], int(data["depth"]))

    def __len__(self) -> int:
        return int((self.stream != SEPARATOR).sum())

    def _at(self, rank: int, offset: int) -> int:
        i = int(self.order[rank]) + offset
        return int(self.stream[i]) if i < len(self.stream) else PAST_END

    def _narrow(self, lo: int, hi: int, offset: int, token: int) -> tuple[int, int]:
        """Within [lo, hi) (suffixes sharing their first `offset` tokens), those whose next is `token`."""
        if offset == 0:  # the whole array's first tokens, sorted: two searches in C (bisection below is
            # faster for the narrower ranges that follow, where gathering their keys would cost more)
            token = self.leading.dtype.type(token)  # a Python int would make numpy cast (copy) the array
            return (lo + int(np.searchsorted(self.leading[lo:hi], token, "left")),
                    lo + int(np.searchsorted(self.leading[lo:hi], token, "right")))
        a, b = lo, hi
        while a < b:
            mid = (a + b) // 2
            a, b = (mid + 1, b) if self._at(mid, offset) < token else (a, mid)
        first, b = a, hi
        while a < b:
            mid = (a + b) // 2
            a, b = (mid + 1, b) if self._at(mid, offset) <= token else (a, mid)
        return first, a

    def continuations(self, context: Sequence[int], min_ngram: int, max_ngram: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(tokens, counts) following the longest suffix of `context` (min_ngram..max_ngram tokens)
        that occurs with a continuation; None if there is none."""
        assert max_ngram <= self.depth, f"the store is sorted on {self.depth} tokens, not {max_ngram}"
        ranges, lo, hi = [], 0, len(self.order)
        for offset, token in enumerate(reversed(context[-max_ngram:])):
            lo, hi = self._narrow(lo, hi, offset, token)
            if lo == hi:
                break
            ranges.append((lo, hi))
        for lo, hi in reversed(ranges[min_ngram - 1:]):
            starts = self.order[lo:hi:max(1, (hi - lo) // SAMPLE)].astype(np.int64)
            following = self.stream[starts[starts > 0] - 1]
            following = following[following != SEPARATOR]
            if len(following):
                return np.unique(following, return_counts=True)
        return None


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
        found = self.store.continuations(context, self.min_ngram, self.max_ngram)
        return None if found is None else int(found[0][np.argmax(found[1])])

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
        history = self.requests[request_id]
        if history.sampling.greedy:  # point masses: the most frequent continuation, no rows
            proposals = []
            for token in verified.tokens:
                proposed = self._current_next(history)
                proposals.append(-1 if proposed is None else proposed)
                history.tokens.append(token)
                history.known = False
            tokens = torch.tensor(proposals)
            return Observation(None, tokens >= 0, tokens)
        probs = torch.zeros(len(verified.tokens), self.vocab)
        awake = torch.zeros(len(verified.tokens), dtype=torch.bool)
        for i, token in enumerate(verified.tokens):
            row = self._current(history)
            if row is not None:
                probs[i], awake[i] = row, True
            history.tokens.append(token)
            history.known = False
        return Observation(probs, awake)

    def release(self, request_id: str) -> None:
        self.requests.pop(request_id, None)
