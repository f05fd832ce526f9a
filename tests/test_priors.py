"""Warm-start priors shared between engines (hedgespec.learners.priors): each engine's own finished
queries, merged by the Selector deployment into the prior every engine's new learners start from.
Checked against means worked out from each query's own final weights."""
import asyncio

import numpy as np
import pytest

from deployments.selector import SelectorDeployment
from hedgespec.learners import make_selector
from hedgespec.learners.priors import WarmStarts, merge
from test_selectors import K, RATES, simulate

KEY = "hedgespec:5"


def test_an_engine_shares_its_own_queries_and_adopts_everyones():
    a, b = WarmStarts(), WarmStarts()
    finals_a = []
    for seed in (1, 2):
        selector = make_selector("hedgespec", len(RATES), K, act="argmax", warm_start=True, seed=seed)
        a.start(selector, KEY)
        simulate_without_end(selector, seed)
        a.end(selector, KEY)
        finals_a.append(selector.final.copy())
    selector = make_selector("hedgespec", len(RATES), K, act="argmax", warm_start=True, seed=3)
    b.start(selector, KEY)
    simulate_without_end(selector, 3)
    b.end(selector, KEY)
    final_b = selector.final.copy()

    count, mean = a.learned()[KEY]
    assert count == 2 and np.allclose(mean, (finals_a[0] + finals_a[1]) / 2)
    merged = merge([a.learned(), b.learned()])
    count, mean = merged[KEY]
    assert count == 3 and np.allclose(mean, (finals_a[0] + finals_a[1] + final_b) / 3)
    a.adopt(merged)
    fresh = make_selector("hedgespec", len(RATES), K, act="argmax", warm_start=True)
    a.start(fresh, KEY)
    assert fresh.queries == 3 and np.allclose(fresh.mean_final, mean)
    assert a.learned()[KEY][0] == 2  # what it shares is still its own two queries, not the merge


def simulate_without_end(selector, seed: int) -> None:
    """simulate()'s rounds, leaving the end to the WarmStarts under test."""
    end, selector.end = selector.end, lambda: None
    try:
        simulate(selector, rounds=40, seed=seed)
    finally:
        selector.end = end


def test_the_selector_deployment_merges_every_replicas_share_and_keeps_a_replaced_ones():
    selector = SelectorDeployment.func_or_class({"name": "hedgespec-sleeping"}, ["a", "b"], 5)
    one = {KEY: (2, [0.2, 0.8])}
    two = {KEY: (1, [0.5, 0.5]), "other": (4, [1.0, 0.0])}
    assert asyncio.run(selector.share("replica-1", one)) == {KEY: (2, pytest.approx([0.2, 0.8]))}
    merged = asyncio.run(selector.share("replica-2", two))
    assert merged[KEY] == (3, pytest.approx([0.3, 0.7])) and merged["other"] == (4, [1.0, 0.0])
    assert asyncio.run(selector.shared()) == {"replicas": 2, "requests": 7}
    # replica-1 shares again after two more queries: its entry is replaced, not added to
    merged = asyncio.run(selector.share("replica-1", {KEY: (4, [0.25, 0.75])}))
    assert merged[KEY] == (5, pytest.approx([0.3, 0.7]))
