"""Leakage check: a training document must not share a long span with any evaluation prompt or
reference answer.

Rule: text is normalised to lower-case word tokens (``\\w+``; whitespace, punctuation and markup
do not count, so re-wrapping or re-quoting a passage does not hide a copy). A span is any 12
consecutive tokens inside one paragraph of an eval prompt or reference; a paragraph of 8-11
tokens (a short maths question, a one-line answer) is a span as a whole. Twelve tokens is about
one sentence or two lines of code: long enough that two unrelated texts essentially never share
it by chance, short enough to catch a copied sentence, a definition or a query.

One exception: a span found in more than ``COMMON`` training documents of the same corpus is a
formula of the genre, not a copy of one source (the Gene Ontology writes thousands of definitions
as "Any process that activates or increases the frequency, rate or extent of ..."). Counting such
spans would drop a quarter of GO while removing no evaluation item's source.
"""
import re
from collections import Counter
from typing import Iterable

WINDOW = 12
SHORT = 8
COMMON = 10

_WORD = re.compile(r"\w+")
_PARAGRAPH = re.compile(r"\n\s*\n")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def spans(text: str) -> set[tuple[str, ...]]:
    out = set()
    for para in _PARAGRAPH.split(text):
        toks = words(para)
        if len(toks) >= WINDOW:
            out.update(tuple(toks[i:i + WINDOW]) for i in range(len(toks) - WINDOW + 1))
        elif len(toks) >= SHORT:
            out.add(tuple(toks))
    return out


class LeakIndex:
    """The spans of a set of eval rows, each remembered with the domain of the row it came from."""

    def __init__(self, rows: Iterable[dict]):
        self.owner: dict[tuple[str, ...], str] = {}
        for row in rows:
            for text in (row["prompt"], row.get("reference") or ""):
                for span in spans(text):
                    self.owner.setdefault(span, row.get("domain", "?"))
        self.lengths = sorted({len(s) for s in self.owner})
        # Cheap filter: a span can only start at a token that starts some span.
        self.starts = {s[0] for s in self.owner}

    def hits(self, text: str) -> set[tuple[str, ...]]:
        toks = words(text)
        found = set()
        for i, tok in enumerate(toks):
            if tok not in self.starts:
                continue
            for n in self.lengths:
                span = tuple(toks[i:i + n])
                if span in self.owner:
                    found.add(span)
        return found


def remove_leaks(docs: list[dict], index: LeakIndex, common: int = COMMON) -> tuple[list[dict], Counter]:
    """The documents with no leaked span, and how many were dropped per eval domain."""
    hits = {}
    for i, doc in enumerate(docs):
        found = index.hits(doc["text"])
        if found:
            hits[i] = found
    seen_in = Counter(span for found in hits.values() for span in found)
    dropped = Counter()
    for i, found in list(hits.items()):
        leaked = sorted(span for span in found if seen_in[span] <= common)
        if leaked:
            dropped[index.owner[leaked[0]]] += 1
        else:
            del hits[i]
    return [doc for i, doc in enumerate(docs) if i not in hits], dropped
