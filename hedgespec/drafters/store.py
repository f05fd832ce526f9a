"""A token corpus indexed for n-gram continuation lookups: a suffix array over the *reversed* token
stream. The suffixes of the text so far, read backwards, are prefixes there, so matching one more
context token only narrows the range found for the shorter match (two binary searches per token, no
n-gram table). The token that follows an occurrence in the original order sits just before it in the
reversed stream. The searches and the counting are compiled (numba, as vLLM compiles its own n-gram
lookup): every datastore drafter is scored at every committed position of every request in vLLM's
step, and in Python a lookup cost ~35 us; the positions of a whole step go in one call."""
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
from numba import njit, types
from numba.typed import Dict

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
def _most_frequent_each(stream: np.ndarray, order: np.ndarray, text: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                        min_ngram: int, max_ngram: int, known) -> np.ndarray:
    """_most_frequent after text[start:end] (its last max_ngram tokens) for each (start, end): many
    lookups, of many texts laid end to end, in one call."""
    out = np.empty(len(ends), np.int64)
    for i in range(len(ends)):
        out[i] = _most_frequent(stream, order, text[max(starts[i], ends[i] - max_ngram):ends[i]], min_ngram, known)
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

    def most_frequent_each(self, texts: Sequence[Sequence[int]], ends: Sequence[Sequence[int]], min_ngram: int,
                           max_ngram: int) -> np.ndarray:
        """`most_frequent` after texts[t][:e] for each e in ends[t], of every text, in one compiled call
        (the vLLM proposer looks up every position that a step committed to any request at once):
        the answers in that order, -1 where there is none."""
        assert max_ngram <= self.depth, f"the store is sorted on {self.depth} tokens, not {max_ngram}"
        flat, starts, flat_ends = [], [], []
        for text, text_ends in zip(texts, ends):
            starts += [len(flat)] * len(text_ends)
            flat_ends += [len(flat) + end for end in text_ends]
            flat += text
        return _most_frequent_each(self.stream, self.order, np.array(flat, dtype=self.stream.dtype),
                                   np.array(starts, dtype=np.int64), np.array(flat_ends, dtype=np.int64),
                                   min_ngram, max_ngram, self.known)

    def _context(self, context: Sequence[int], max_ngram: int) -> np.ndarray:
        assert max_ngram <= self.depth, f"the store is sorted on {self.depth} tokens, not {max_ngram}"
        return np.asarray(context[-max_ngram:], dtype=self.stream.dtype)
