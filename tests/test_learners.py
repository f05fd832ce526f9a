import math

import numpy as np
import pytest

from hedgespec.feedback import MaturedLoss
from hedgespec.learners.bandits import exp3_loss_estimate
from hedgespec.learners.delay import BoldReduction, QueueReduction
from hedgespec.learners.experts import AdaNormalHedge, Hedge, NormalHedge, ada_log_weight, normalhedge_scale

LEARNER_TYPES = [NormalHedge, Hedge, AdaNormalHedge]


def bisected_scale(regret: np.ndarray) -> float:
    """Reference root of mean exp([R]_+^2 / (2c)) = e by plain bisection on the paper's bracket
    (the exponents stay below 1 + ln N there, so the direct form cannot overflow)."""
    positive = np.maximum(regret, 0.0)
    m = positive.max()
    lo, hi = m * m / (2 * (1 + math.log(len(regret)))), m * m / 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if np.mean(np.exp(positive**2 / (2 * mid))) > math.e else (lo, mid)
    return lo


@pytest.mark.parametrize("guess", [None, 1e-6, 1e12])
def test_normalhedge_scale_solves_its_equation(guess):
    rng = np.random.default_rng(0)
    for n in (1, 2, 8, 64):
        for size in (1e-2, 1.0, 30.0, 1e4):
            regret = rng.normal(size=n) * size
            regret[0] = abs(regret[0])
            c = normalhedge_scale(regret, guess=guess)
            positive = np.maximum(regret, 0.0)
            assert math.log(np.mean(np.exp(positive**2 / (2 * c)))) == pytest.approx(1.0, rel=1e-9)
            assert c == pytest.approx(bisected_scale(regret), rel=1e-9)


def test_normalhedge_weights_follow_the_formula():
    learner = NormalHedge(4)
    learner.regret = np.array([3.0, -1.0, 1.5, 0.0])
    c = normalhedge_scale(learner.regret)
    positive = np.maximum(learner.regret, 0.0)
    direct = positive / c * np.exp(positive**2 / (2 * c))
    np.testing.assert_allclose(learner.weights(), direct / direct.sum(), rtol=1e-12)


def test_normalhedge_uniform_without_positive_regret_and_finite_for_huge_regret():
    learner = NormalHedge(5)
    np.testing.assert_array_equal(learner.weights(), np.full(5, 0.2))
    learner.regret = np.array([-3.0, 0.0, -0.5, -1e9, 0.0])
    np.testing.assert_array_equal(learner.weights(), np.full(5, 0.2))
    learner.regret = np.array([1e8, 1e8 - 1, -4.0, 5e7, 0.0])
    w = learner.weights()
    assert np.isfinite(w).all() and w.sum() == pytest.approx(1.0) and w[0] > w[1] > 0


@pytest.mark.parametrize("learner_type", LEARNER_TYPES)
def test_weights_are_distributions_zero_on_sleepers(learner_type):
    rng = np.random.default_rng(1)
    learner = learner_type(6)
    for _ in range(300):
        awake = rng.random(6) < 0.7
        awake[rng.integers(6)] = True
        w = learner.weights(awake)
        assert w.sum() == pytest.approx(1.0, abs=1e-12) and (w >= 0).all() and (w[~awake] == 0).all()
        learner.update(rng.random(6), awake)


@pytest.mark.parametrize("learner_type", LEARNER_TYPES)
def test_regret_sublinear_and_weight_on_best(learner_type):
    n, horizon = 8, 5000
    rng = np.random.default_rng(7)
    means = np.full(n, 0.5)
    means[3] = 0.3
    losses = (rng.random((horizon, n)) < means).astype(float)
    learner, played, cumulative, regret = learner_type(n), 0.0, np.zeros(n), {}
    for t, loss in enumerate(losses, 1):
        played += learner.weights() @ loss
        learner.update(loss)
        cumulative += loss
        regret[t] = played - cumulative.min()
    assert regret[5000] / 5000 < 0.3 * regret[500] / 500
    assert regret[5000] < 0.5 * math.sqrt(horizon * math.log(n))
    assert learner.weights()[3] > 0.9


@pytest.mark.parametrize("learner_type", LEARNER_TYPES)
def test_sleepers_keep_their_state(learner_type):
    learner = learner_type(4)
    learner.update(np.array([0.2, 0.9, 0.5, 0.1]))
    before = {name: np.copy(value) for name, value in vars(learner).items() if isinstance(value, np.ndarray)}
    awake = np.array([True, False, True, False])
    learner.update(np.array([0.0, 1.0, 1.0, 0.0]), awake)
    for name, value in vars(learner).items():
        if name in before and name not in ("prior", "log_prior"):  # fixed by the prior, not state
            np.testing.assert_array_equal(value[~awake], before[name][~awake])
            assert not np.array_equal(value[awake], before[name][awake])


def test_hedge_is_exponential_weights_on_cumulative_loss():
    rng = np.random.default_rng(2)
    learner, cumulative = Hedge(5), np.zeros(5)
    for t in range(1, 40):
        loss = rng.random(5)
        learner.update(loss)
        cumulative += loss
        direct = np.exp(-math.sqrt(8 * math.log(5) / t) * (cumulative - cumulative.min()))
        np.testing.assert_allclose(learner.weights(), direct / direct.sum(), rtol=1e-10)


def test_ada_log_weight_matches_the_potential():
    regret = np.array([-3.0, -1.0, -0.5, 0.0, 0.7, 2.0, 6.0])
    abs_regret = np.array([0.0, 1.0, 2.0, 0.0, 3.0, 5.0, 9.0])
    phi = lambda r, c: np.exp(np.maximum(r, 0.0) ** 2 / (3 * c))  # noqa: E731
    direct = (phi(regret + 1, abs_regret + 1) - phi(regret - 1, abs_regret + 1)) / 2
    with np.errstate(divide="ignore"):
        np.testing.assert_allclose(ada_log_weight(regret, abs_regret), np.log(direct), rtol=1e-12)
    assert np.isfinite(ada_log_weight(np.array([1e6]), np.array([1e6]))).all()


def test_adanormalhedge_all_zero_weights_fall_back_to_prior_over_awake():
    learner = AdaNormalHedge(3, prior=np.array([0.2, 0.3, 0.5]))
    learner.regret = np.array([-2.0, -5.0, 4.0])
    np.testing.assert_allclose(learner.weights(np.array([True, True, False])), [0.4, 0.6, 0.0])


def test_adanormalhedge_trusts_a_specialist_when_it_is_awake():
    """Expert 2 sleeps exactly when it would be bad and is the best when awake: AdaNormalHedge
    should put its weight there when awake, although it loses to the others on average."""
    rng = np.random.default_rng(3)
    learner = AdaNormalHedge(3)
    for t in range(2000):
        specialist_awake = t % 2 == 0
        awake = np.array([True, True, specialist_awake])
        means = np.array([0.4, 0.5, 0.1 if specialist_awake else 0.9])
        learner.update((rng.random(3) < means).astype(float), awake)
    assert learner.weights()[2] > 0.9


def test_prior_tilts_the_start_and_keeps_the_equation():
    prior = np.array([0.7, 0.1, 0.1, 0.1])
    for learner_type in LEARNER_TYPES:
        np.testing.assert_allclose(learner_type(4, prior).weights(), prior)
    regret = np.array([2.0, 3.0, -1.0, 0.5])
    c = normalhedge_scale(regret, prior)
    assert math.log(prior @ np.exp(np.maximum(regret, 0) ** 2 / (2 * c))) == pytest.approx(1.0, rel=1e-9)
    with pytest.raises(ValueError, match="prior"):
        NormalHedge(3, np.array([0.5, 0.5, 0.0]))


def test_exp3_loss_estimate_is_unbiased():
    k, probs = 4, np.array([0.5, 0.2, 0.25, 0.05])
    committed = np.array([2, 5, 1, 3])  # what each arm would commit this round
    expected = sum(probs[i] * exp3_loss_estimate(i, committed[i], k, probs) for i in range(4))
    np.testing.assert_allclose(expected, (k + 1 - committed) / k, rtol=1e-14)


class Recorder:
    """A base learner that logs what it is asked; the loss vector carries its position."""

    def __init__(self, log: list, name: int = 0):
        self.n, self.log, self.name, self.seen = 2, log, name, []

    def weights(self, awake=None):
        self.log.append(("weights", self.name))
        return np.array([0.5, 0.5])

    def update(self, losses, awake=None):
        self.log.append(("update", int(losses[0])))
        self.seen.append(int(losses[0]))


def loss_at(position: int) -> MaturedLoss:
    return MaturedLoss(position, np.array([position, 0.0]), np.ones(2, bool), 0)


def test_queue_applies_matured_losses_in_position_order_before_choosing():
    log = []
    queue = QueueReduction(lambda: Recorder(log))
    queue.receive([loss_at(3), loss_at(1)])
    queue.receive([loss_at(2)])
    assert log == []  # nothing applied until a choice is due
    queue.play(4, None)
    assert log == [("update", 1), ("update", 2), ("update", 3), ("weights", 0)]


def recorded_bold(log: list) -> BoldReduction:
    """BOLD over Recorders named by creation order, logging into `log`."""
    made = []
    return BoldReduction(lambda: made.append(Recorder(log, len(made))) or made[-1])


@pytest.mark.parametrize("delay_rounds", [0, 1, 3])
def test_bold_uses_d_plus_one_copies_each_fed_its_own_decisions(delay_rounds):
    """Round r commits commits[r] positions; their losses arrive right after round r + D is played."""
    commits = np.random.default_rng(delay_rounds).integers(1, 5, size=40)
    log = []
    bold = recorded_bold(log)
    starts, position, decided_by = [], 0, {}
    for r, m in enumerate(commits):
        bold.play(position, None)
        assert log[-1][0] == "weights"
        decided_by.update({p: log[-1][1] for p in range(position, position + m)})
        starts.append(position)
        position += m
        if r >= delay_rounds:
            s = starts[r - delay_rounds]
            bold.receive([loss_at(p) for p in range(s, s + commits[r - delay_rounds])])
    assert len(bold.learners) == delay_rounds + 1
    seen = [p for copy in bold.learners for p in copy.seen]
    assert sorted(seen) == list(range((starts + [position])[len(commits) - delay_rounds]))
    for copy in bold.learners:
        assert all(decided_by[p] == copy.name for p in copy.seen)


def test_bold_opens_a_fresh_copy_only_when_all_wait():
    bold = recorded_bold([])
    for position in range(3):
        bold.play(position, None)  # no feedback yet: every copy waits
    assert len(bold.learners) == 3
    bold.receive([loss_at(0)])  # copy 0 decided the round at position 0 only: it is free again
    bold.play(3, None)
    assert len(bold.learners) == 3 and bold.owners[-1] == 0
    bold.play(4, None)  # copies 1 and 2 still wait, and copy 0 now waits on position 3
    assert len(bold.learners) == 4
    with pytest.raises(ValueError, match="follow"):
        bold.play(4, None)


@pytest.mark.parametrize("kept, copies", [((0, 2), 2), ((0, 1), 3)])
def test_bold_copies_stay_bounded_when_positions_are_dropped(kept, copies):
    """The loop drops positions where every drafter slept; they must not keep a copy waiting for
    ever. Rounds of 3 positions, their losses one round late, the others dropped. A dropped last
    position is known to be missing only when a later one arrives: one more copy, still bounded."""
    bold = recorded_bold([])
    for r in range(30):
        bold.play(3 * r, None)
        if r >= 1:
            bold.receive([loss_at(3 * (r - 1) + i) for i in kept])
    assert len(bold.learners) == copies


def test_bold_drops_rounds_no_copy_decided():
    bold = recorded_bold([])
    bold.skip(0)
    bold.play(2, None)
    bold.receive([loss_at(0), loss_at(1), loss_at(2)])
    assert bold.learners[0].seen == [2]
