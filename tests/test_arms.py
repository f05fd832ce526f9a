"""The time objective: its arms, the online round costs that price them, and its losses, checked
against values worked out by hand."""
import numpy as np
import pytest

from hedgespec.arms import Arm, Arms, RoundCosts
from hedgespec.feedback import DelayedLosses


def test_arms_of_each_objective():
    timed = Arms(2, 3, cost_aware=True)
    assert timed.arms == [Arm(None, 0), Arm(0, 1), Arm(0, 2), Arm(0, 3), Arm(1, 1), Arm(1, 2), Arm(1, 3)]
    # a sleeping drafter sleeps in all its arms; the plain step never sleeps
    assert timed.awake(np.array([False, True])).tolist() == [True, False, False, False, True, True, True]
    assert timed.awake(np.array([False, False])).tolist() == [True] + [False] * 6
    assert timed.names(["a", "b"])[:3] == ["none", "a@1", "a@2"]
    paper = Arms(2, 3, cost_aware=False)
    assert paper.arms == [Arm(0, 3), Arm(1, 3)] and paper.names(["a", "b"]) == ["a", "b"]


def record(costs: RoundCosts, times: int, *round_) -> None:
    for _ in range(times):
        costs.record(*round_)


def test_round_costs_measure_interpolate_and_start_optimistic():
    costs = RoundCosts(n_drafters=2, k=4)
    assert costs.verify_s(3) == 0.0 and costs.draft_s(0, 2) == 0.0  # nothing measured: everything looks free
    record(costs, 3, None, 0, 0.0, 0.10, 0.11)  # plain steps: verify over 1 token
    record(costs, 3, 0, 3, 0.006, 0.16, 0.18)  # drafter 0 drafted 3: verify over 4 tokens
    assert costs.verify_s(1) == pytest.approx(0.10) and costs.verify_s(4) == pytest.approx(0.16)
    assert costs.verify_s(2) == pytest.approx(0.16)  # one multi-token size known: the nearest
    record(costs, 3, 0, 1, 0.002, 0.12, 0.124)  # now 2 tokens too
    assert costs.verify_s(3) == pytest.approx(0.14)  # the line through (2, 0.12) and (4, 0.16)
    record(costs, 3, 0, 2, 0.004, 0.11, 0.116)  # a noisy 3 below 2: the line stays increasing
    assert costs.verify_s(2) <= costs.verify_s(3) <= costs.verify_s(4)
    assert costs.draft_s(0, 3) == pytest.approx(0.006)
    assert costs.draft_s(0, 1) == pytest.approx(0.002)
    assert costs.draft_s(0, 4) == pytest.approx(0.008)  # 2 ms per drafted token, from k = 1, 2, 3
    assert costs.draft_s(1, 4) == 0.0  # never measured: tried before it is priced
    arms = Arms(2, 4, cost_aware=True)
    priced = costs.arm_costs(arms)
    rest_plain, rest_draft = 0.01, 0.002  # the median of the drafting rounds' rests: three 0.014, six 0.002
    assert priced[0] == pytest.approx(0.10 + rest_plain)
    assert priced[arms.arms.index(Arm(0, 3))] == pytest.approx(0.006 + costs.verify_s(4) + rest_draft)
    record(costs, 6, None, 0, 0.0, 0.10, 0.11)  # nine plain steps of 0.10
    record(costs, 4, None, 0, 0.0, 0.30, 0.31)  # a drift: four slower steps of the latest nine are not half
    assert costs.verify_s(1) == pytest.approx(0.10)
    record(costs, 1, None, 0, 0.0, 0.30, 0.31)  # five are
    assert costs.verify_s(1) == pytest.approx(0.30)


def test_a_slow_first_measurement_does_not_price_an_arm_out():
    """On an H200 the first drafting rounds measured a mean verify of 435 ms against warm ones of
    ~25 ms, and no draft was played again (benchmarks/gpu/README.md)."""
    costs = RoundCosts(n_drafters=1, k=2)
    record(costs, 3, None, 0, 0.0, 0.025, 0.026)
    costs.record(0, 1, 0.001, verify_s=0.435, round_s=0.437)  # the first verify of 2 tokens stalls
    costs.record(0, 1, 0.001, verify_s=0.025, round_s=0.027)
    # untrusted after two: priced as the nearest size measured, so the arm is played again
    assert costs.verify_s(2) == pytest.approx(0.025)
    costs.record(0, 1, 0.001, verify_s=0.026, round_s=0.028)
    assert costs.verify_s(2) == pytest.approx(0.026)  # the median of 0.435, 0.025, 0.026
    costs.record(0, 1, 0.001, verify_s=0.9, round_s=0.902)  # a later stall moves it no further than a warm one
    assert costs.verify_s(2) == pytest.approx(0.026)


def test_time_losses_by_hand():
    """K=2, one drafter. Rows at s and s+1: greedy hit then miss, so a round drafting 1 commits 2 tokens
    and one drafting 2 commits 2 as well; costs: plain 10, k=1 12, k=2 16 (ms, with no other parts)."""
    costs = RoundCosts(1, 2)
    record(costs, 3, None, 0, 0.0, 0.010, 0.010)
    record(costs, 3, 0, 1, 0.0, 0.012, 0.012)
    record(costs, 3, 0, 2, 0.0, 0.016, 0.016)
    window = DelayedLosses(1, 2, "time", costs=costs)
    assert window.push(np.array([1.0]), np.array([1.0]), np.array([True])) == []
    (matured,) = window.push(np.array([0.0]), np.array([0.0]), np.array([True]))
    # time per committed token: plain 10/1, (0,1) 12/2, (0,2) 16/2; over the costliest arm's 16
    assert matured.losses.tolist() == pytest.approx([10 / 16, 6 / 16, 8 / 16])
    assert matured.awake.tolist() == [True, True, True]


def test_time_loss_needs_costs_and_only_it():
    with pytest.raises(ValueError, match="round costs"):
        DelayedLosses(2, 3, "time")
    with pytest.raises(ValueError, match="round costs"):
        DelayedLosses(2, 3, "eal", costs=RoundCosts(2, 3))
