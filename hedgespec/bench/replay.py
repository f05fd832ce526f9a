"""Exact greedy replay: MAT of many drafters and selectors from one target run per prompt.

Under greedy decoding the committed text does not depend on the drafter, so the target's own
greedy trajectory, with its hidden state at every position from one teacher-forced forward, is
enough to replay each drafter alone: every round it proposes, the longest prefix that matches the
trajectory is accepted, one more token is committed, and it observes exactly what the live target
would have handed it. No target forward per drafter or per round. `ReplayTarget` does the same for
the whole decode loop (any selector, the full pool), and `acceptance_table` gives what every drafter
would commit from every position, the input of the per-round ceiling (bench/ceiling.py).

A trajectory that stopped on EOS ends with that EOS, and a draft may be accepted through it: the
round then commits up to and including the EOS, as the live loop counts it (decode.through_eos).
The features come from one teacher-forced forward instead of the live round-by-round ones: equal up
to float rounding (and, for int8 heads, to the activation scale of each batch, eagle.py).
"""
from collections.abc import Sequence

import torch

from hedgespec.engine import Engine
from hedgespec.interfaces import Drafter, Verified
from hedgespec.sampling import Sampling

GREEDY = Sampling()


def replay(engine: Engine, drafters: Sequence[Drafter], prompts: Sequence[str], max_tokens: int = 96,
           k: int = 5) -> dict[str, list[float]]:
    """Per drafter (by name), its MAT on each prompt when it drafts every round it is awake."""
    mats: dict[str, list[float]] = {d.name: [] for d in drafters}
    for prompt in prompts:
        tokens = engine.encode(prompt)
        path, hidden = trajectory(engine, prompt, tokens, max_tokens)
        for drafter in drafters:
            mats[drafter.name].append(replay_one(drafter, tokens, path, hidden, engine.target.vocab, k, max_tokens))
    return mats


def trajectory(engine: Engine, prompt: str, tokens: list[int], max_tokens: int) -> tuple[list[int], torch.Tensor]:
    """The target's greedy continuation (with its EOS, if it stopped on one) and the target's hidden
    state at every position of prompt + continuation."""
    generation = engine.generate(prompt, max_tokens, speculate=False)
    lm, rid = engine.target.lm, "replay-trajectory"
    lm.start(rid)
    try:
        logits, hidden = lm.forward(rid, tokens + generation.tokens)
    finally:
        lm.release(rid)
    path = list(generation.tokens)
    if generation.finish_reason == "stop":  # the EOS the stream swallowed: it was committed too
        eos = int(logits[-1].argmax())
        assert eos in engine.eos_ids, "a greedy run that stopped must end on an EOS token"
        path.append(eos)
    return path, hidden


def replay_one(drafter: Drafter, prompt: list[int], path: list[int], hidden: torch.Tensor, vocab: int, k: int,
               max_tokens: int) -> float:
    """Committed tokens per target forward for `drafter` alone along the trajectory `path`."""
    rid, base = f"replay-{drafter.name}", len(prompt) - 1  # hidden[base + i] produced path[i]
    drafter.begin(rid, prompt, hidden[:base], GREEDY, 0)
    done = rounds = 0
    try:
        while done < len(path):
            budget = min(k, max_tokens - done - 1)  # as the decode loop: a round commits drafts + 1
            draft = drafter.propose(rid, budget).tokens if budget > 0 and drafter.ready(rid) else []
            verified = commit(path, hidden, base, done, draft, vocab)
            drafter.observe(rid, verified)
            done += len(verified.tokens)
            rounds += 1
    finally:
        drafter.release(rid)
    return len(path) / rounds


def matched(draft: list[int], path: list[int], start: int) -> int:
    """How many leading tokens of `draft` the trajectory continues with from `start`."""
    accepted = 0
    while accepted < len(draft) and start + accepted < len(path) and draft[accepted] == path[start + accepted]:
        accepted += 1
    return accepted


def commit(path: list[int], hidden: torch.Tensor, base: int, done: int, draft: list[int], vocab: int) -> Verified:
    """What greedy verification of `draft` at position `done` commits along the trajectory: the
    matched drafts and the next token, or through the trajectory's final EOS at most."""
    accepted = matched(draft, path, done)
    committed = path[done:done + accepted + 1]
    probs = torch.nn.functional.one_hot(torch.tensor(committed), vocab).float()
    return Verified(committed, min(accepted, len(committed)), len(draft), probs,
                    hidden[base + done:base + done + len(committed)])


def acceptance_table(drafter: Drafter, prompt: list[int], path: list[int], hidden: torch.Tensor, vocab: int,
                     k: int, max_tokens: int) -> list[int]:
    """Per position i of the trajectory: the drafts `drafter` would have accepted in a round starting
    at i with the loop's budget there (-1: asleep). It proposes at every position and then observes
    the one committed token, so its state at i holds exactly the trajectory before i."""
    rid, base = f"table-{drafter.name}", len(prompt) - 1
    drafter.begin(rid, prompt, hidden[:base], GREEDY, 0)
    table = []
    try:
        for i in range(len(path)):
            budget = min(k, max_tokens - i - 1)
            awake = budget > 0 and drafter.ready(rid)
            draft = drafter.propose(rid, budget).tokens if awake else []
            table.append(matched(draft, path, i) if awake else -1)
            drafter.observe(rid, commit(path, hidden, base, i, [], vocab))
    finally:
        drafter.release(rid)
    return table


class ReplayTarget:
    """The Target of the decode loop over recorded greedy trajectories (`record` each prompt's
    first): verification commits what the live target would have (`commit`) without a forward, so
    any selector over the whole pool replays exactly at the cost of the drafters alone."""

    def __init__(self, vocab: int):
        self.vocab = vocab
        self.paths: dict[tuple[int, ...], tuple[list[int], torch.Tensor]] = {}
        self.requests: dict[str, list] = {}  # request -> [path, hidden, base, done]

    def record(self, prompt: list[int], path: list[int], hidden: torch.Tensor) -> None:
        self.paths[tuple(prompt)] = (path, hidden)

    def prefill(self, request_id, tokens, sampling, seed):
        if not sampling.greedy:
            raise ValueError("replay is exact only for greedy decoding")
        path, hidden = self.paths[tuple(tokens)]
        self.requests[request_id] = [path, hidden, len(tokens) - 1, 0]
        return hidden[:len(tokens) - 1]

    def verify(self, request_id, draft):
        state = self.requests[request_id]
        path, hidden, base, done = state
        verified = commit(path, hidden, base, done, draft.tokens, self.vocab)
        state[3] = done + len(verified.tokens)
        verified.draft_seconds = draft.seconds
        return verified

    def release(self, request_id):
        self.requests.pop(request_id, None)

    @property
    def active(self) -> int:
        return len(self.requests)
