"""A request's copy odds (hedgespec.copies): the counts a verified copy adds, and a copy's reach
against the tokens counted one by one."""
import numpy as np
import pytest

from hedgespec.copies import CopyOdds


@pytest.mark.parametrize("drafted, accepted, first, later", [
    (5, 0, [2.0, 1.5], [2.0, 0.5]),  # the first token missed: nothing is known of the later ones
    (5, 3, [3.0, 0.5], [4.0, 1.5]),  # the 2nd and 3rd held given the one before, the 4th broke
    (5, 5, [3.0, 0.5], [6.0, 0.5]),  # all held: no later token broke
    (1, 1, [3.0, 0.5], [2.0, 0.5]),
])
def test_a_verified_copy_counts_its_first_token_and_each_later_one_given_the_one_before(drafted, accepted, first, later):
    odds = CopyOdds()
    odds.record(drafted, accepted)
    assert (odds.first, odds.later) == (first, later)


def test_a_copy_reaches_every_token_whose_chance_beats_the_threshold():
    """Against the chances listed token by token: the i-th is P(first) * P(later)^(i - 1)."""
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(2000):
        odds = CopyOdds(first=list(rng.uniform(0.1, 20, 2)), later=list(rng.uniform(0.1, 20, 2)))
        budget, threshold = int(rng.integers(0, 9)), float(rng.uniform(0.0, 1.0))
        p_first, p_later = odds.first[0] / sum(odds.first), odds.later[0] / sum(odds.later)
        chances = [p_first * p_later ** i for i in range(budget)]
        if any(abs(c - threshold) < 1e-9 for c in chances):
            continue  # a tie with the threshold: rounding decides it
        expected = next((i for i, c in enumerate(chances) if c < threshold), budget)
        assert odds.reach(budget, threshold) == expected
        checked += 1
    assert checked > 1900


def test_free_draft_tokens_copy_as_far_as_the_budget_allows():
    assert CopyOdds(first=[0.1, 50.0], later=[0.1, 50.0]).reach(4, 0.0) == 4
