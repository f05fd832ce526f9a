"""Compact wire forms of what crosses process boundaries each round (Ray deployments).

A round's payload should stay under ~100 KiB (Ray moves larger objects through its object store,
several times slower). Greedy target distributions are point masses at the committed tokens, so
they need no bytes at all; under sampling the target's rows travel as their top-`TOP` entries,
which makes the drafters' gamma exact whenever the target's support is at most TOP tokens (top-k
sampling) and otherwise low by at most the dropped tail mass, and beside them p of each committed
token exactly (float32), so that the likelihood ratio min(1, q/p) of a committed token outside the
top-TOP is not taken as q/0. Hidden states travel in fp16.
Verification itself never uses the compact p: it runs where the full p is. A draft's own
distributions have at most DRAFT_SUPPORT non-zero entries per row (sampling.process_draft), so
they travel as exactly those entries and the target rebuilds the very q the draft was drawn from.
"""
from dataclasses import replace

import torch

from hedgespec.interfaces import Draft, Verified
from hedgespec.sampling import DRAFT_SUPPORT

TOP = 256


def compact(verified: Verified, greedy: bool) -> Verified:
    if greedy:
        probs = None
    else:
        values, indices = verified.probs.topk(min(TOP, verified.probs.shape[-1]), dim=-1)
        committed = verified.probs.gather(-1, torch.tensor(verified.tokens)[:, None])[:, 0]
        probs = (indices.to(torch.int32), values.half(), committed.float())
    return replace(verified, probs=probs, hidden=verified.hidden.half())


def expand(verified: Verified, vocab: int) -> Verified:
    """Back to dense float32 rows over the full vocabulary."""
    if verified.probs is None:
        probs = torch.nn.functional.one_hot(torch.tensor(verified.tokens), vocab).float()
    else:
        indices, values, committed = verified.probs
        probs = torch.zeros(len(indices), vocab).scatter_(-1, indices.long(), values.float())
        probs[torch.arange(len(committed)), torch.tensor(verified.tokens)] = committed
    return replace(verified, probs=probs, hidden=verified.hidden.float())


def compact_draft(draft: Draft) -> Draft:
    if draft.probs is None or draft.probs.shape[-1] <= DRAFT_SUPPORT:
        return draft
    values, indices = draft.probs.topk(DRAFT_SUPPORT, dim=-1)
    return Draft(draft.tokens, (indices.to(torch.int32), values), draft.seconds)


def expand_draft(draft: Draft, vocab: int) -> Draft:
    if not isinstance(draft.probs, tuple):
        return draft
    indices, values = draft.probs
    return Draft(draft.tokens, torch.zeros(len(indices), vocab).scatter_(-1, indices.long(), values), draft.seconds)
