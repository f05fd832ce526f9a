"""A per-domain datastore drafter: continuation counts of n-grams in a token corpus (the domain's
text and, above all, the target's own answers on the domain), looked up by the longest suffix of
the text so far that occurs in the corpus.

The store is a suffix array over the *reversed* token stream: the suffixes of the text so far, read
backwards, are prefixes there, so matching one more context token only narrows the range found
for the shorter match (two binary searches per token, no n-gram table). The token that follows an
occurrence in the original order sits just before it in the reversed stream. The searches and the
counting are compiled (numba, as vLLM compiles its own n-gram lookup): every drafter is scored at
every committed position of every request in vLLM's step, and in Python a lookup cost ~35 us.

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
from numba import njit, types
from numba.typed import Dict

from hedgespec.interfaces import Draft, Observation, Verified
from hedgespec.sampling import Sampling, draw, process_draft

SEPARATOR = -1  # between documents: never matched, never proposed
PAST_END = -2  # what a suffix reads beyond the end of the stream (sorts first, as in the build)
SAMPLE = 4096  # very frequent short n-grams are counted on an even sample of this many occurrences
# A context with this many occurrences or more (a frequent n-gram) keeps its most frequent continuation
# once counted: sorting thousands of continuations cost most of a lookup, and such contexts recur in
# every text
KNOWN_FROM = 256


def suffix_array(stream: np.ndarray, depth: int) -> np.ndarray:
    """Suffix start positions sorted by their first `depth` tokens (prefix doubling: each round
    sorts by twice as many tokens, so log2(depth) argsorts of the whole stream)."""
    n = len(stream)
    rank = np.unique(stream, return_inverse=True)[1].astype(np.int64) + 1  # 0: past the end
    order = np.argsort(rank, kind="stable")
    span = 1
    while span < depth:
        second = np.zeros(n, np.int64)
        second[:max(0, n - span)] = rank[span:]  # a stream shorter than the span: nothing follows
        key = rank * (n + 2) + second
        order = np.argsort(key)
        ordered = key[order]
        rank = np.empty(n, np.int64)
        rank[order] = 1 + np.concatenate([[0], np.cumsum(ordered[1:] != ordered[:-1])])
        span *= 2
    return order


@njit(cache=True)
def _key(stream: np.ndarray, order: np.ndarray, rank: int, offset: int) -> int:
    i = order[rank] + offset
    return stream[i] if i < len(stream) else PAST_END


@njit(cache=True)
def _ranges(stream: np.ndarray, order: np.ndarray, context: np.ndarray) -> np.ndarray:
    """[m, 2]: row j is the suffix-array range [lo, hi) of the (j+1)-token suffix of `context`, for
    every suffix length that occurs (m of them)."""
    out = np.empty((len(context), 2), np.int64)
    lo, hi = 0, len(order)
    for offset in range(len(context)):
        token = context[len(context) - 1 - offset]
        a, b = lo, hi
        while a < b:  # the first rank whose token at `offset` is >= token
            mid = (a + b) // 2
            if _key(stream, order, mid, offset) < token:
                a = mid + 1
            else:
                b = mid
        first, b = a, hi
        while a < b:  # and the first whose token is > token
            mid = (a + b) // 2
            if _key(stream, order, mid, offset) <= token:
                a = mid + 1
            else:
                b = mid
        if first == a:
            return out[:offset]
        lo, hi = first, a
        out[offset, 0], out[offset, 1] = lo, hi
    return out


@njit(cache=True)
def _following(stream: np.ndarray, order: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """The tokens after the range's occurrences (an even sample of at most about SAMPLE), separators left out."""
    stride = max(1, (hi - lo) // SAMPLE)
    out = np.empty((hi - lo + stride - 1) // stride, stream.dtype)
    n = 0
    for rank in range(lo, hi, stride):
        start = order[rank]
        if start > 0 and stream[start - 1] != SEPARATOR:
            out[n] = stream[start - 1]
            n += 1
    return out[:n]


@njit(cache=True)
def _top(stream: np.ndarray, order: np.ndarray, lo: int, hi: int) -> int:
    """The most frequent token after the range's occurrences, the lowest id among equally frequent
    ones; -1 if nothing follows them."""
    following = np.sort(_following(stream, order, lo, hi))
    best, best_count, run = -1, 0, 0
    for i in range(len(following)):
        run = run + 1 if i > 0 and following[i] == following[i - 1] else 1
        if run > best_count:
            best, best_count = following[i], run
    return best


@njit(cache=True)
def _most_frequent(stream: np.ndarray, order: np.ndarray, context: np.ndarray, min_ngram: int, known) -> int:
    """The most frequent token after the longest suffix of `context` (at least min_ngram tokens)
    that has one, the lowest id among equally frequent ones; -1 if none has. `known` holds the
    answers of the ranges of KNOWN_FROM occurrences or more, by range."""
    ranges = _ranges(stream, order, context)
    for n in range(len(ranges), min_ngram - 1, -1):
        lo, hi = ranges[n - 1, 0], ranges[n - 1, 1]
        if hi - lo < KNOWN_FROM:
            best = _top(stream, order, lo, hi)
        else:
            key = lo * (len(order) + 1) + hi
            best = known.get(key, -2)
            if best == -2:
                best = _top(stream, order, lo, hi)
                known[key] = best
        if best >= 0:
            return best
    return -1


@njit(cache=True)
def _most_frequent_each(stream: np.ndarray, order: np.ndarray, text: np.ndarray, ends: np.ndarray,
                        min_ngram: int, max_ngram: int, known) -> np.ndarray:
    """_most_frequent after text[:end] (its last max_ngram tokens) for each end: a round's lookups in one call."""
    out = np.empty(len(ends), np.int64)
    for i in range(len(ends)):
        out[i] = _most_frequent(stream, order, text[max(0, ends[i] - max_ngram):ends[i]], min_ngram, known)
    return out


class Datastore:
    def __init__(self, stream: np.ndarray, order: np.ndarray, depth: int):
        self.stream = stream  # int32, reversed documents between separators
        self.order = order  # suffix array of `stream`, sorted on `depth` tokens
        self.depth = depth
        # frequent contexts' most frequent continuations, by suffix-array range (_most_frequent); at
        # most one per KNOWN_FROM suffixes and context length. The compiled lookups hold the GIL, so
        # threads never write it at once
        self.known = Dict.empty(key_type=types.int64, value_type=types.int64)

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

    def continuations(self, context: Sequence[int], min_ngram: int, max_ngram: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(tokens, counts) following the longest suffix of `context` (min_ngram..max_ngram tokens)
        that occurs with a continuation; None if there is none."""
        ranges = _ranges(self.stream, self.order, self._context(context, max_ngram))
        for lo, hi in ranges[min_ngram - 1:][::-1]:
            following = _following(self.stream, self.order, lo, hi)
            if len(following):
                return np.unique(following, return_counts=True)
        return None

    def most_frequent(self, context: Sequence[int], min_ngram: int, max_ngram: int) -> int | None:
        """The most frequent of `continuations`, the lowest id among equally frequent ones (None: none)."""
        token = _most_frequent(self.stream, self.order, self._context(context, max_ngram), min_ngram, self.known)
        return None if token < 0 else int(token)

    def most_frequent_each(self, text: Sequence[int], ends: Sequence[int], min_ngram: int, max_ngram: int) -> list[int | None]:
        """`most_frequent` after text[:end] for each end, in one compiled call."""
        assert max_ngram <= self.depth, f"the store is sorted on {self.depth} tokens, not {max_ngram}"
        found = _most_frequent_each(self.stream, self.order, np.asarray(text, dtype=self.stream.dtype),
                                    np.asarray(ends, dtype=np.int64), min_ngram, max_ngram, self.known)
        return [None if token < 0 else int(token) for token in found]

    def _context(self, context: Sequence[int], max_ngram: int) -> np.ndarray:
        assert max_ngram <= self.depth, f"the store is sorted on {self.depth} tokens, not {max_ngram}"
        return np.asarray(context[-max_ngram:], dtype=self.stream.dtype)


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
        history = self.requests[request_id]
        if history.sampling.greedy:  # point masses: the most frequent continuation, no rows
            first = self._current_next(history)  # before the first committed token (what `ready` looked up)
            history.tokens.extend(verified.tokens)
            m = len(verified.tokens)
            text = history.tokens[-(self.max_ngram + m):]
            # after each committed token: the proposals before the next ones, and the next round's first
            after = self.store.most_frequent_each(text, range(len(text) - m + 1, len(text) + 1), self.min_ngram,
                                                  self.max_ngram)
            history.next, history.known = after[-1], True
            tokens = np.array([-1 if t is None else t for t in [first] + after[:-1]])
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

    def extend(self, request_id: str, tokens: list[int]) -> None:
        """Committed tokens taken into the history without proposing at them (no lookups until the next proposal)."""
        history = self.requests[request_id]
        history.tokens.extend(tokens)
        history.known = False

    def release(self, request_id: str) -> None:
        self.requests.pop(request_id, None)
