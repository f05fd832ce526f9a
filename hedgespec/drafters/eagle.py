"""EAGLE-style feature drafting: one-layer heads over the target's own hidden states.

Entry j of a head's cache reads (target hidden state at position j, token j+1) and predicts the
target's hidden state at j+1, i.e. the distribution of token j+2. With committed tokens x_0..x_n
and target states known for positions 0..n-1 (x_n is the target's pending token), the cache holds
entries 0..n-1 and `feature`, the prediction for position n made by entry n-1.

The heads of a pool that share a shape and a draft vocabulary live in one `EagleStack`; each is an
`EagleDrafter`, a view on one row of it. Per request the stack keeps one batched state for the
heads that began it:

- observe: the first head to observe a round feeds the committed tokens with the target's true
  states from verification to every head at once (one batched forward, head_stack.py); those
  outputs are exactly each head's distributions at the committed positions, which the evaluation
  phase compares with p. The other heads read their row of the same result.
- propose: the first draft comes from the head's `feature`; each later step feeds the head its own
  prediction and the token it just drafted (as EAGLE does), on a scratch copy of its cache.

Distributions live on the draft vocabulary and are scattered into full-vocabulary rows (zero for
tokens outside it); processing them on the draft vocabulary equals processing full logits with
-inf outside it, so temperature, top-k and top-p mean the same as for the target.
"""
import threading
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from hedgespec.drafters.feature_head import KV, FeatureHead, Frozen, frozen_from_folder, frozen_from_model, load_head
from hedgespec.drafters.head_stack import Linear, StackedHeads
from hedgespec.interfaces import Draft, Observation, Verified
from hedgespec.models import loading
from hedgespec.sampling import Sampling, draw, process_draft


@dataclass
class _Request:
    sampling: Sampling
    generators: dict[int, torch.Generator]  # per member head: its sampling seed
    prompt: tuple[list[int], Tensor] | None  # fed on first use, once every member has begun
    members: slice | None = None  # the run of stack rows this request holds (set on first use)
    cache: KV | None = None  # [members, kv_heads, length, head_dim]
    length: int = 0  # committed entries in the cache
    feature: Tensor | None = None  # [members, H] predicted target state at the next position
    fed: int = 0  # rounds fed
    observed: dict[int, int] = field(default_factory=dict)  # per member: rounds it has observed
    results: dict[int, tuple[Tensor, Tensor]] = field(default_factory=dict)  # round -> (rows [members, m, V], awake)
    lock: threading.Lock = field(default_factory=threading.Lock)


class EagleStack:
    """Heads of one shape and one draft vocabulary, with the per-request state they share."""

    def __init__(self, heads: list[FeatureHead], frozen: Frozen, int8: bool | None = None):
        """`int8`: the products' precision (head_stack.py; default: int8 where FBGEMM runs). In int8 a
        call quantizes its activations with one scale, so a position scored within a round's batch and
        the same position drafted alone can round differently (the drafts stay exact for losslessness:
        verification only needs the q a draft was drawn from)."""
        if heads[0].spec.hidden != frozen.embed.shape[1]:
            raise ValueError(f"head width {heads[0].spec.hidden} != target width {frozen.embed.shape[1]}")
        self.heads = StackedHeads(heads, int8)
        self.frozen = frozen
        # the target's output head on the draft vocabulary, in the heads' precision (head_stack.Linear)
        self.output = Linear(frozen.rows, self.heads.int8)
        self.requests: dict[str, _Request] = {}
        self.lock = threading.Lock()  # guards `requests`; each request has its own lock

    def begin(self, request_id: str, member: int, tokens: list[int], hidden: Tensor, sampling: Sampling, seed: int) -> None:
        with self.lock:
            request = self.requests.setdefault(request_id, _Request(sampling, {}, (tokens, hidden)))
        with request.lock:
            if request.members is not None:
                raise RuntimeError(f"head {member} began request {request_id} after its heads started")
            request.generators[member] = torch.Generator().manual_seed(seed)
            request.observed[member] = 0

    def _start(self, request: _Request) -> None:
        """Under the request's lock: fix the member run and feed the prompt, once."""
        if request.members is not None:
            return
        rows = sorted(request.generators)
        if rows != list(range(rows[0], rows[-1] + 1)):
            raise ValueError(f"the heads of one request must be a contiguous run of the stack, got {rows}")
        request.members = slice(rows[0], rows[-1] + 1)
        tokens, hidden = request.prompt
        request.prompt = None
        if len(hidden):
            outputs = self._feed(request, hidden, tokens[1:len(hidden) + 1])
            request.feature = outputs[:, -1]

    def _request(self, request_id: str) -> _Request:
        return self.requests[request_id]

    def _feed(self, request: _Request, features: Tensor, tokens: list[int]) -> Tensor:
        """Append entries (features[i], tokens[i]) to every member's committed cache; returns their
        predictions [members, n, H]. `features` is [n, H] (the target's, the same for all heads)."""
        n = request.members.stop - request.members.start
        positions = torch.arange(request.length, request.length + len(tokens))
        embeds = self.frozen.embedding(torch.tensor(tokens))
        out, request.cache = self.heads.forward(request.members, features.float()[None].expand(n, -1, -1),
                                                embeds[None].expand(n, -1, -1), positions, request.cache)
        request.length += len(tokens)
        return out

    def _rows(self, features: Tensor, sampling: Sampling) -> Tensor:
        """[..., H] predicted states -> processed distributions over the full vocabulary [..., V]."""
        probs = process_draft(self.output(features), sampling)
        rows = torch.zeros(*probs.shape[:-1], self.frozen.size)
        rows[..., self.frozen.vocab] = probs
        return rows

    def ready(self, request_id: str) -> bool:
        request = self._request(request_id)
        with request.lock:
            self._start(request)
            return request.feature is not None

    @torch.inference_mode()
    def propose(self, request_id: str, member: int, k: int) -> Draft:
        request = self._request(request_id)
        with request.lock:
            self._start(request)
            if request.feature is None:  # asleep: no target state to draft from yet
                return Draft([])
            row = member - request.members.start
            cache = tuple(t[row:row + 1] for t in request.cache)
            feature, generator = request.feature[row], request.generators[member]
            tokens, rows = [], []
            for step in range(k):
                probs = process_draft(self.output(feature[None]), request.sampling)[0]
                tokens.append(int(self.frozen.vocab[draw(probs, generator)]))
                rows.append(probs)
                if step + 1 < k:  # the head's own prediction and its own token: a scratch cache entry
                    position = torch.tensor([request.length + step])
                    embed = self.frozen.embedding(torch.tensor(tokens[-1:]))[None]
                    out, cache = self.heads.forward(slice(member, member + 1), feature[None, None], embed, position, cache)
                    feature = out[0, -1]
        full = torch.zeros(len(rows), self.frozen.size)
        if rows:
            full[:, self.frozen.vocab] = torch.stack(rows)
        return Draft(tokens, full if rows else None)

    @torch.inference_mode()
    def observe(self, request_id: str, member: int, verified: Verified) -> Observation:
        request = self._request(request_id)
        with request.lock:
            self._start(request)
            round_index = request.observed[member]
            if round_index == request.fed:  # the first head to observe this round feeds all of them
                had_feature = request.feature is not None
                outputs = self._feed(request, verified.hidden, verified.tokens)
                # committed token i was predicted from the state before it: `feature` for the first
                # one, then the outputs of the entries just fed (the last predicts the next round)
                before = outputs[:, :-1] if not had_feature else torch.cat([request.feature[:, None], outputs[:, :-1]], 1)
                if request.sampling.greedy:  # point masses: each head's argmax token, no rows
                    rows = self.frozen.vocab[self.output(before).argmax(-1)]
                else:
                    rows = self._rows(before, request.sampling)
                awake = torch.ones(len(verified.tokens), dtype=torch.bool)
                if not had_feature:  # a one-token prompt: no target state predicted the first token
                    empty = torch.full((rows.shape[0], 1), -1) if request.sampling.greedy else torch.zeros(rows.shape[0], 1, rows.shape[2])
                    rows = torch.cat([empty, rows], 1)
                    awake[0] = False
                request.feature = outputs[:, -1]
                request.results[request.fed] = (rows, awake)
                request.fed += 1
            rows, awake = request.results[round_index]
            request.observed[member] = round_index + 1
            if min(request.observed.values()) > round_index:  # every member has its row: drop the round
                del request.results[round_index]
            row = rows[member - request.members.start]
            if request.sampling.greedy:
                return Observation(None, awake.clone(), row)
            return Observation(row, awake.clone())

    def release(self, request_id: str, member: int) -> None:
        with self.lock:
            request = self.requests.get(request_id)
            if request is None:
                return
            request.generators.pop(member, None)
            request.observed.pop(member, None)
            if not request.generators:
                del self.requests[request_id]


class EagleDrafter:
    """One head of an EagleStack, as the pool sees a drafter."""

    def __init__(self, name: str, stack: EagleStack, member: int):
        self.name, self.stack, self.member = name, stack, member

    @classmethod
    def single(cls, name: str, head: FeatureHead, frozen: Frozen, int8: bool | None = None) -> "EagleDrafter":
        return cls(name, EagleStack([head], frozen, int8), 0)

    @classmethod
    def load_stack(cls, names: list[str], paths: list[Path], vocab: int, target_model=None,
                   target: str = "smollm2") -> list["EagleDrafter"]:
        """Saved heads for a target with `vocab` tokens, as one stack (they must share a shape and a
        draft vocabulary): the frozen tensors are shared with `target_model` when the target lives in
        this process, else read from the `target` folder."""
        loaded = [load_head(path) for path in paths]
        ids = loaded[0][1]
        for name, (_, other) in zip(names, loaded):
            if not torch.equal(other, ids):
                raise ValueError(f"drafter {name!r}: its draft vocabulary differs from {names[0]!r}'s, so they cannot share a stack")
        if int(ids.max()) >= vocab:
            raise ValueError(f"drafter {names[0]!r}: draft vocabulary has ids beyond the target's {vocab} tokens")
        frozen = frozen_from_model(target_model, ids) if target_model is not None else frozen_from_folder(loading.resolve(target), ids)
        stack = EagleStack([head for head, _ in loaded], frozen)
        return [cls(name, stack, j) for j, name in enumerate(names)]

    @property
    def requests(self) -> list[str]:
        """The requests this head holds state for."""
        return [rid for rid, request in list(self.stack.requests.items()) if self.member in request.generators]

    def begin(self, request_id: str, tokens: list[int], hidden: Tensor, sampling: Sampling, seed: int) -> None:
        self.stack.begin(request_id, self.member, tokens, hidden, sampling, seed)

    def ready(self, request_id: str) -> bool:
        return self.stack.ready(request_id)

    def propose(self, request_id: str, k: int) -> Draft:
        return self.stack.propose(request_id, self.member, k)

    def observe(self, request_id: str, verified: Verified) -> Observation:
        return self.stack.observe(request_id, self.member, verified)

    def release(self, request_id: str) -> None:
        self.stack.release(request_id, self.member)
