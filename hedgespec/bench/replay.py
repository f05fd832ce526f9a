"""Exact MAT of many drafters from one target run per prompt (greedy only).

Under greedy decoding the committed text does not depend on the drafter, so the target's own
greedy trajectory, with its hidden state at every position from one teacher-forced forward, is
enough to replay each drafter alone: every round it proposes, the longest prefix that matches the
trajectory is accepted, one more token is committed, and it observes exactly what the live target
would have handed it. No target forward per drafter or per round.
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
            accepted = 0
            while (accepted < len(draft) and done + accepted < len(path) - 1
                   and draft[accepted] == path[done + accepted]):
                accepted += 1
            committed = path[done:done + accepted + 1]
            probs = torch.nn.functional.one_hot(torch.tensor(committed), vocab).float()
            drafter.observe(rid, Verified(committed, accepted, len(draft), probs,
                                          hidden[base + done:base + done + accepted + 1]))
            done += accepted + 1
            rounds += 1
    finally:
        drafter.release(rid)
    return len(path) / rounds
