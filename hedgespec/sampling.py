"""Turning logits into the processed distribution that both drafting and verification sample from.

Losslessness needs the target's p and every drafter's q processed identically (temperature, top-k,
top-p); temperature 0 is represented as a point mass at the argmax, so the speculative-sampling
formulas (min(p, q), p/q) reduce exactly to their greedy forms.
"""
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0
    top_k: int = 0  # 0 = no top-k cut
    top_p: float = 1.0

    def __post_init__(self):
        assert self.temperature >= 0, "temperature must be >= 0"
        assert self.top_k >= 0, "top_k must be >= 0"
        assert 0 < self.top_p <= 1, "top_p must be in (0, 1]"

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def process(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """[n, V] logits -> [n, V] float32 probabilities after temperature, top-k and top-p."""
    logits = logits.float()
    if sampling.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    logits = logits / sampling.temperature
    if 0 < sampling.top_k < logits.shape[-1]:
        kth = logits.topk(sampling.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = logits.softmax(-1)
    if sampling.top_p < 1:
        sorted_probs, order = probs.sort(-1, descending=True)
        # keep the smallest prefix whose mass reaches top_p (the first token is always kept)
        drop = sorted_probs.cumsum(-1) - sorted_probs >= sampling.top_p
        drop[..., 0] = False  # explicitly: a top_p below float32's range rounds to 0, and 0 >= 0
        sorted_probs = sorted_probs.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


# a drafter's distribution keeps its most likely tokens only (see process_draft)
DRAFT_SUPPORT = 64


def process_draft(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """A drafter's distribution: processed as the target's is, then cut to its DRAFT_SUPPORT most
    likely tokens and renormalised. Verification stays lossless for any q the draft was really drawn
    from; the short support lets a draft's distributions cross process boundaries as a few KB
    instead of a dense 200 KB row per token, at the price of the cut tail's small acceptance mass."""
    probs = process(logits, sampling)
    if sampling.greedy or probs.shape[-1] <= DRAFT_SUPPORT:
        return probs
    values, indices = probs.topk(DRAFT_SUPPORT, dim=-1)
    return torch.zeros_like(probs).scatter_(-1, indices, values / values.sum(-1, keepdim=True))


def draw(probs: torch.Tensor, generator: torch.Generator) -> int:
    """One token from a [V] distribution (argmax for a point mass, without consuming randomness)."""
    return int(torch.multinomial(probs, 1, generator=generator))
