"""Exact greedy replay and the per-round ceiling, against live decoding and brute force (tiny models)."""
import itertools
import math

import numpy as np
import pytest

from hedgespec.bench.ceiling import fewest_rounds, least_time
from hedgespec.bench.replay import ReplayTarget, acceptance_table, trajectory
from hedgespec.config import SelectorConfig, load_config
from hedgespec.engine import Engine, build_selector

PROMPTS = ["hello there, how are you doing today?", "abc abc abc abc abc", "Write a poem about the sea."]
SELECTORS = [SelectorConfig(name="hedgespec", loss="eal"), SelectorConfig(name="hedgespec", loss="tap", act="sample"),
             SelectorConfig(name="hedgespec-sleeping", loss="eal"), SelectorConfig(name="ucbspec"),
             SelectorConfig(name="ucb1"), SelectorConfig(name="exp3spec"),
             SelectorConfig(name="rule", drafter="prompt-lookup", fallback="other-model")]
MAX_TOKENS = 40


@pytest.fixture(scope="module")
def engine():
    return Engine(load_config("configs/tiny.yaml"))


def recorded(engine, prompts):
    target = ReplayTarget(engine.target.vocab)
    paths = {}
    for prompt in prompts:
        tokens = engine.encode(prompt)
        paths[prompt] = (tokens, *trajectory(engine, prompt, tokens, MAX_TOKENS))
        target.record(tokens, *paths[prompt][1:])
    return target, paths


def run(engine, prompt, config, target=None):
    """A fresh learner and fresh round costs and calibration: live and replay start alike."""
    fresh = engine.with_drafters(engine.drafters)
    selector = build_selector(config, [d.name for d in engine.drafters], engine.config.k, seed=3)
    return fresh.generate(prompt, MAX_TOKENS, selector=selector, selector_config=config, target=target)


def rounds_of(gen):
    return [(r.drafter, r.drafted, r.accepted, r.committed) for r in gen.rounds]


@pytest.mark.parametrize("config", SELECTORS, ids=lambda c: f"{c.name}-{c.loss}")
def test_replay_through_the_decode_loop_equals_live_decoding(engine, config):
    target, _ = recorded(engine, PROMPTS)
    for prompt in PROMPTS:
        live, replayed = run(engine, prompt, config), run(engine, prompt, config, target)
        assert replayed.tokens == live.tokens
        assert rounds_of(replayed) == rounds_of(live)
    assert target.active == 0


def test_eos_inside_an_accepted_draft_ends_the_round_there_live_and_in_replay():
    """The target's own weights draft every token right; make a token in the middle of its second
    round the EOS: the round commits through it, nothing after it is counted or scored."""
    engine = Engine(load_config("configs/tiny.yaml"))
    k, prompt = engine.config.k, PROMPTS[2]
    plain = engine.generate(prompt, MAX_TOKENS, speculate=False).tokens
    eos_at = next(i for i in range(k + 1, len(plain)) if i % (k + 1) < k - 1 and plain[i] not in plain[:i])
    engine.eos_ids = {plain[eos_at]}
    config = SelectorConfig(name="fixed", drafter="same-model")
    target, _ = recorded(engine, [prompt])
    live, replayed = run(engine, prompt, config), run(engine, prompt, config, target)
    assert live.tokens == plain[:eos_at] and live.finish_reason == "stop"
    assert sum(r.committed for r in live.rounds) == eos_at + 1  # the EOS counts; what follows it does not
    assert live.rounds[-1].accepted == live.rounds[-1].committed  # the EOS itself was an accepted draft
    assert rounds_of(replayed) == rounds_of(live)
    assert [m.position for m in live.losses] == list(range(eos_at + 1))  # no loss row beyond the EOS


def brute_force_rounds(table, i=0):
    """Every plan of (drafter, accepted drafts) round by round, without memory."""
    length = table.shape[1]
    if i >= length:
        return 0
    return 1 + min(brute_force_rounds(table, i + 1 + a) for d in range(len(table)) for a in range(max(0, table[d, i]) + 1))


def brute_force_time(table, budgets, cost, i=0):
    length = table.shape[1]
    if i >= length:
        return 0.0
    options = [cost(None, 0) + brute_force_time(table, budgets, cost, i + 1)]
    for d, k in itertools.product(range(len(table)), range(1, budgets[i] + 1)):
        if table[d, i] >= 0:
            options.append(cost(d, k) + brute_force_time(table, budgets, cost, i + 1 + min(table[d, i], k)))
    return min(options)


@pytest.mark.parametrize("seed", range(6))
def test_the_ceiling_is_the_best_plan_of_all(seed):
    rng = np.random.default_rng(seed)
    n, length, k = 3, 9, 3
    table = rng.integers(-1, k + 1, size=(n, length))
    rounds, starts = fewest_rounds(table)
    assert rounds == brute_force_rounds(table) == len(starts) and starts[0] == 0
    budgets = np.minimum(k, length - 1 - np.arange(length))
    table = np.minimum(table, budgets)  # a table never holds more accepted drafts than the budget allows
    draft_ms, verify_ms = rng.uniform(0.1, 5, n), [10, 11, 12.5, 14]
    cost = lambda d, kk: verify_ms[kk] + (0 if d is None else draft_ms[d] * kk)
    seconds, plan = least_time(table, budgets, cost)
    assert seconds == pytest.approx(brute_force_time(table, budgets, cost))
    assert plan[0] == 0


def test_the_ceiling_with_a_perfect_drafter_is_k_plus_one_a_round_and_bounds_every_selector(engine):
    """same-model is the target itself: from every position it would have all K drafts accepted, so
    the ceiling covers a trajectory of L tokens in ceil(L / (K+1)) rounds; no selector needs fewer."""
    k = engine.config.k
    _, paths = recorded(engine, PROMPTS)
    for prompt, (tokens, path, hidden) in paths.items():
        table = np.array([acceptance_table(d, tokens, path, hidden, engine.target.vocab, k, MAX_TOKENS)
                          for d in engine.drafters])
        rounds, _ = fewest_rounds(table)
        assert rounds == math.ceil(len(path) / (k + 1))
        for config in SELECTORS:
            assert len(run(engine, prompt, config).rounds) >= rounds


def test_a_single_drafter_live_walks_its_acceptance_table(engine):
    """Live decoding with one drafter alone (a real target) accepts, in every round it drafts, what
    the drafter's table says it would from that round's start."""
    k = engine.config.k
    _, paths = recorded(engine, PROMPTS)
    drafted = 0
    for drafter in engine.drafters:
        alone = engine.with_drafters([drafter])
        for prompt, (tokens, path, hidden) in paths.items():
            table = acceptance_table(drafter, tokens, path, hidden, engine.target.vocab, k, MAX_TOKENS)
            live = alone.generate(prompt, MAX_TOKENS, selector=build_selector(SelectorConfig(name="fixed", drafter=drafter.name),
                                                                             [drafter.name], k),
                                  selector_config=SelectorConfig(name="fixed", drafter=drafter.name))
            position = 0
            for r in live.rounds:
                # a round offered no draft when the flags, a round stale by design (pool.py), said asleep
                if r.drafter is not None:
                    assert r.accepted == max(0, table[position]), (drafter.name, prompt, position)
                    drafted += 1
                position += r.committed
            assert position == len(path)
    assert drafted > 50  # the comparison covered many drafted rounds
