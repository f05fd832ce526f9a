"""EAGLE-style feature drafting: a one-layer head over the target's own hidden states.

Entry j of the head's cache reads (target hidden state at position j, token j+1) and predicts the
target's hidden state at j+1, i.e. the distribution of token j+2. With committed tokens x_0..x_n
and target states known for positions 0..n-1 (x_n is the target's pending token), the cache holds
entries 0..n-1 and `feature`, the prediction for position n made by entry n-1.

- propose: the first draft comes from `feature`; each later step feeds the head its own
  prediction and the token it just drafted (as EAGLE does), appending draft entries.
- observe: cuts the draft entries away and feeds the committed tokens with the target's true
  states from verification in one forward; that forward's outputs are exactly the head's
  distributions at the committed positions, which the evaluation phase compares with p.

Distributions live on the draft vocabulary and are scattered into full-vocabulary rows (zero for
tokens outside it); processing them on the draft vocabulary equals processing full logits with
-inf outside it, so temperature, top-k and top-p mean the same as for the target.
"""
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from hedgespec.drafters.feature_head import KV, FeatureHead, Frozen, frozen_from_folder, frozen_from_model, load_head
from hedgespec.interfaces import Draft, Observation, Verified
from hedgespec.models import loading
from hedgespec.sampling import Sampling, draw, process_draft


@dataclass
class _Request:
    sampling: Sampling
    generator: torch.Generator
    cache: KV | None
    length: int  # committed entries in the cache
    feature: Tensor | None  # [H] predicted target state at the next position (None: no target state yet)


class EagleDrafter:
    def __init__(self, name: str, head: FeatureHead, frozen: Frozen):
        if head.spec.hidden != frozen.embed.shape[1]:
            raise ValueError(f"drafter {name!r}: head width {head.spec.hidden} != target width {frozen.embed.shape[1]}")
        self.name = name
        self.head = head.eval()
        self.frozen = frozen
        self.requests: dict[str, _Request] = {}

    @classmethod
    def load(cls, name: str, path: Path, vocab: int, target_model=None, target: str = "smollm2") -> "EagleDrafter":
        """A saved head for a target with `vocab` tokens: its frozen tensors are shared with
        `target_model` when the target lives in this process, else read from the `target` folder."""
        head, ids = load_head(path)
        if int(ids.max()) >= vocab:
            raise ValueError(f"drafter {name!r}: draft vocabulary has ids beyond the target's {vocab} tokens")
        if target_model is not None:
            return cls(name, head, frozen_from_model(target_model, ids))
        return cls(name, head, frozen_from_folder(loading.resolve(target), ids))

    def begin(self, request_id: str, tokens: list[int], hidden: torch.Tensor, sampling: Sampling, seed: int) -> None:
        request = _Request(sampling, torch.Generator().manual_seed(seed), None, 0, None)
        self.requests[request_id] = request
        if len(hidden):
            outputs = self._feed(request, hidden, tokens[1:len(hidden) + 1])
            request.feature = outputs[-1]

    @torch.inference_mode()
    def _feed(self, request: _Request, features: Tensor, tokens: list[int]) -> Tensor:
        """Append entries (features[i], tokens[i]) after the committed ones, dropping any provisional
        draft entries first; returns their predictions [n, H]."""
        if request.cache is not None:
            request.cache = tuple(t[:, :, :request.length] for t in request.cache)
        positions = torch.arange(request.length, request.length + len(tokens))
        embeds = self.frozen.embedding(torch.tensor(tokens))
        out, request.cache = self.head(features.float()[None], embeds[None], positions, request.cache)
        request.length += len(tokens)
        return out[0]

    def _probs(self, features: Tensor, sampling: Sampling) -> Tensor:
        """[n, H] predicted states -> processed distributions on the draft vocabulary [n, R]."""
        return process_draft(features @ self.frozen.rows.T, sampling)

    def _full(self, probs: Tensor) -> Tensor:
        rows = torch.zeros(len(probs), self.frozen.size)
        rows[:, self.frozen.vocab] = probs
        return rows

    def ready(self, request_id: str) -> bool:
        return self.requests[request_id].feature is not None

    @torch.inference_mode()
    def propose(self, request_id: str, k: int) -> Draft:
        request = self.requests[request_id]
        if request.feature is None:  # asleep: no target state to draft from yet
            return Draft([])
        committed = request.length
        feature, tokens, rows = request.feature, [], []
        for step in range(k):
            probs = self._probs(feature[None], request.sampling)[0]
            tokens.append(int(self.frozen.vocab[draw(probs, request.generator)]))
            rows.append(probs)
            if step + 1 < k:
                feature = self._feed(request, feature[None], tokens[-1:])[0]
        # the draft entries are provisional: the next feed cuts them away
        request.length = committed
        return Draft(tokens, self._full(torch.stack(rows)) if rows else None)

    def observe(self, request_id: str, verified: Verified) -> Observation:
        request = self.requests[request_id]
        outputs = self._feed(request, verified.hidden, verified.tokens)
        # committed token i was predicted from the state before it: `feature` for the first one,
        # then the outputs of the entries just fed (the last output predicts the next round)
        before = outputs[:-1] if request.feature is None else torch.cat([request.feature[None], outputs[:-1]])
        probs = self._full(self._probs(before, request.sampling))
        awake = torch.ones(len(verified.tokens), dtype=torch.bool)
        if request.feature is None:  # a one-token prompt: no target state predicted the first token
            probs = torch.cat([torch.zeros(1, self.frozen.size), probs])
            awake[0] = False
        request.feature = outputs[-1]
        return Observation(probs, awake)

    def release(self, request_id: str) -> None:
        self.requests.pop(request_id, None)
