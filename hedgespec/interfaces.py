"""The small interfaces the decode loop is written against.

The in-process engine passes plain objects; the Ray deployments pass adapters around deployment
handles that satisfy the same protocols, so `engine.decode` never knows where it runs.
"""
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
import torch

from hedgespec.sampling import Sampling


@dataclass
class Draft:
    """Up to K proposed tokens. `probs[i]` is the processed distribution `tokens[i]` was drawn from;
    None means point masses (a deterministic drafter such as prompt lookup)."""
    tokens: list[int]
    probs: torch.Tensor | None = None
    seconds: float = 0.0  # what proposing it took, measured where it was drafted


@dataclass
class Verified:
    """What one target forward committed.

    Row i of `probs` / `hidden` belongs to the position that produced `tokens[i]`: the target's
    processed distribution there and its last hidden state (the feature EAGLE-style drafters read).
    """
    tokens: list[int]
    accepted: int
    drafted: int
    probs: torch.Tensor
    hidden: torch.Tensor
    seconds: float = 0.0  # the target's forward, measured where it ran
    draft_seconds: float = 0.0  # the verified draft's own `seconds`, carried back to the loop

    def first(self, n: int) -> "Verified":
        """Only the first n committed tokens, with their rows (dense, or in a wire form of
        hedgespec.transport: a tuple of row-aligned tensors, or None for greedy point masses)."""
        def rows(x):
            return None if x is None else tuple(t[:n] for t in x) if isinstance(x, tuple) else x[:n]
        return replace(self, tokens=self.tokens[:n], accepted=min(self.accepted, n), probs=rows(self.probs),
                       hidden=self.hidden[:n])


@dataclass
class Observation:
    """A drafter's view of committed positions: its processed distribution at each one and whether
    it would have proposed there at all (an abstaining drafter is asleep; its row is zero).

    A drafter whose q is a point mass at every position (prompt lookup always; any drafter under
    greedy decoding) gives `tokens`, the token it would draft at each position (-1: asleep), and no
    `probs`: its scores then need no full-vocabulary rows at all (evaluation.score). Those two may be numpy
    arrays, which the drafters scored at every vLLM step for every request use (tiny tensors cost
    more to make than the lookups that fill them)."""
    probs: torch.Tensor | None
    awake: torch.Tensor | np.ndarray
    tokens: torch.Tensor | np.ndarray | None = None


class Target(Protocol):
    def prefill(self, request_id: str, tokens: list[int], sampling: Sampling, seed: int) -> torch.Tensor:
        """Cache the prompt; returns the hidden states of tokens[:-1] (tokens[-1] is fed by the first verify)."""

    def verify(self, request_id: str, draft: Draft) -> Verified: ...

    def release(self, request_id: str) -> None: ...


class Drafter(Protocol):
    """A drafter may also have `observe_many(rounds)`, `observe` for a list of (request_id, Verified),
    one round per request, in one call (the datastores: one compiled lookup for a vLLM step)."""
    name: str

    def begin(self, request_id: str, tokens: list[int], hidden: torch.Tensor, sampling: Sampling, seed: int) -> None: ...

    def ready(self, request_id: str) -> bool:
        """Whether it has a proposal now (cheap): abstaining drafters sleep when they have none."""

    def propose(self, request_id: str, k: int) -> Draft: ...

    def observe(self, request_id: str, verified: Verified) -> Observation:
        """Consume the committed tokens (staying in sync) and return its view of those positions."""

    def release(self, request_id: str) -> None: ...
