import itertools

import numpy as np
import pytest
import torch

from hedgespec.evaluation import acceptance
from hedgespec.feedback import DelayedLosses, RoundFeedback, acceptance_length, eal_loss

V = 3


class ToyModel:
    """A context-dependent toy LM: a seeded table from the last two tokens to a distribution."""

    def __init__(self, seed: int, temperature: float, greedy: bool = False):
        logits = torch.randn(V, V, V, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        self.table = torch.softmax(logits / temperature, -1)
        if greedy:
            self.table = torch.nn.functional.one_hot(self.table.argmax(-1), V).to(torch.float64)

    def __call__(self, prefix: tuple) -> torch.Tensor:
        return self.table[prefix[-2], prefix[-1]]


def true_committed(p: ToyModel, q: ToyModel, prefix: tuple, k: int) -> float:
    """Expected tokens committed by one speculative-sampling round, enumerating every draft chain:
    the drafter samples K tokens from q, step j is accepted with min(1, p/q); the first rejection
    commits j accepted drafts plus one resampled token, and K acceptances add the bonus token."""
    expected = 0.0
    for chain in itertools.product(range(V), repeat=k):
        chance, reach, committed, context = 1.0, 1.0, 0.0, prefix
        for j, y in enumerate(chain):
            qy, py = q(context)[y].item(), p(context)[y].item()
            chance *= qy
            accept = min(1.0, py / qy) if qy > 0 else 0.0
            committed += reach * (1 - accept) * (j + 1)
            reach *= accept
            context += (y,)
        expected += chance * (committed + reach * (k + 1))
    return expected


def estimated_committed(p: ToyModel, drafters: list, prefix: tuple, k: int, estimator: str) -> np.ndarray:
    """E over the target's own continuation x_s..x_{s+K-1} ~ p of AL_s, for every drafter, computed
    through acceptance() and DelayedLosses exactly as the decode loop feeds them."""
    expected = np.zeros(len(drafters))
    for continuation in itertools.product(range(V), repeat=k):
        contexts = [prefix + continuation[:j] for j in range(k)]
        target = torch.stack([p(c) for c in contexts])
        chance = float(np.prod([target[j, x].item() for j, x in enumerate(continuation)]))
        scored = [acceptance(target, torch.stack([d(c) for c in contexts]), torch.tensor(continuation)) for d in drafters]
        gamma, ratio = (torch.stack([column[f] for column in scored]) for f in range(2))
        window = DelayedLosses(len(drafters), k, "eal", estimator)
        awake = np.ones(len(drafters), bool)
        matured = [m for j in range(k) for m in window.push(gamma[:, j].numpy(), ratio[:, j].numpy(), awake)]
        assert [m.position for m in matured] == [0] and matured[0].delay == k - 1
        expected += chance * (k + 1) * (1 - matured[0].losses)
    return expected


CASES = [(seed, temperature) for seed in range(3) for temperature in (0.5, 1.0, 2.0)]


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_estimators_against_exact_enumeration(k):
    gaps = []
    for seed, temperature in CASES:
        p = ToyModel(100 + seed, temperature)
        drafters = [ToyModel(200 + 10 * seed + j, temperature) for j in range(2)]
        prefix = (seed % V, (seed + 1) % V)
        true = np.array([true_committed(p, q, prefix, k) for q in drafters])
        corrected = estimated_committed(p, drafters, prefix, k, "corrected")
        paper = estimated_committed(p, drafters, prefix, k, "paper")
        np.testing.assert_allclose(corrected, true, rtol=0, atol=1e-9)
        if k == 1:
            np.testing.assert_allclose(paper, true, rtol=0, atol=1e-9)
        gaps.append(np.abs(paper - true).max())
    if k >= 2:
        assert max(gaps) > 0.05  # the paper's estimator is biased under sampling


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_paper_estimator_exact_under_greedy(k):
    for seed in range(4):
        p = ToyModel(300 + seed, 1.0, greedy=True)
        drafters = [ToyModel(400 + 10 * seed + j, 1.0, greedy=True) for j in range(3)]
        true = np.array([true_committed(p, q, (0, 1), k) for q in drafters])
        for estimator in ("paper", "corrected"):
            np.testing.assert_allclose(estimated_committed(p, drafters, (0, 1), k, estimator), true, rtol=0, atol=1e-12)


def test_acceptance_length_formulas_by_hand():
    gamma = np.array([[0.8], [0.5], [0.6]])
    ratio = np.array([[0.9], [0.4], [0.3]])
    assert acceptance_length(gamma, ratio, "paper") == pytest.approx(1 + 0.8 + 0.8 * 0.5 + 0.8 * 0.5 * 0.6)
    assert acceptance_length(gamma, ratio, "corrected") == pytest.approx(1 + 0.8 + 0.9 * 0.5 + 0.9 * 0.4 * 0.6)
    assert eal_loss(gamma, ratio)[0] == pytest.approx(1 - (1 + 0.8 + 0.9 * 0.5 + 0.9 * 0.4 * 0.6) / 4)
    with pytest.raises(ValueError, match="estimator"):
        acceptance_length(gamma, ratio, "exact")


@pytest.mark.parametrize("k", [1, 2, 3, 5])
@pytest.mark.parametrize("loss", ["eal", "tap"])
def test_every_position_delivered_once_in_order(k, loss):
    rng = np.random.default_rng(k)
    window = DelayedLosses(4, k, loss)
    rows = [(rng.random(4), rng.random(4), rng.random(4) < 0.8) for _ in range(23)]
    matured = []
    for s, row in enumerate(rows):
        now = window.push(*row)
        matured += now
        assert all(m.position + m.delay == s for m in now)  # delivered as soon as complete
    flushed = window.flush()
    assert [m.position for m in matured + flushed] == list(range(23))
    expected_delay = k - 1 if loss == "eal" else 0
    assert all(m.delay == expected_delay for m in matured)
    assert window.max_delay == expected_delay <= 2 * k
    assert all(m.delay == 22 - m.position <= expected_delay for m in flushed)
    for m in matured + flushed:
        assert np.array_equal(m.awake, rows[m.position][2])
        assert ((m.losses >= 0) & (m.losses <= 1)).all()


def test_flush_treats_gamma_past_the_end_as_zero():
    """Four positions, K = 3: the last two windows reach past the end, where nothing can be accepted.
    Expected by hand, corrected estimator: AL_s = 1 + g_s + a_s g_{s+1} + a_s a_{s+1} g_{s+2}."""
    g, a = [0.9, 0.5], [0.8, 0.7]  # per drafter, the same at every position
    window = DelayedLosses(2, 3)
    rows = [(np.array(g), np.array(a), np.ones(2, bool)) for _ in range(4)]
    out = [m for row in rows for m in window.push(*row)] + window.flush()
    assert [m.position for m in out] == [0, 1, 2, 3]
    for m in out:
        left = 4 - m.position  # positions that exist from s on (3 or more: the whole window)
        for j in range(2):
            terms = [1.0, g[j], a[j] * g[j], a[j] * a[j] * g[j]][:1 + min(3, left)]
            assert m.losses[j] == pytest.approx(1 - sum(terms) / 4), (m.position, j)


def test_skipped_positions_drop_the_open_windows_and_the_rest_count_on_past_them():
    """K = 3, paper estimator, one drafter with gamma g at every position: positions 0-4 pushed,
    7 skipped, 12-15 pushed. The windows of 0-2 were complete before the gap; those of 3 and 4
    needed skipped rows and are never delivered; from 12 on every window holds rows after the gap
    only (by hand)."""
    window = DelayedLosses(1, 3, estimator="paper")
    g = [0.5, 0.5, 0.5, 0.5, 0.5, 0.9, 0.9, 0.9, 0.9]  # before the gap, then after it
    row = lambda x: (np.array([x]), np.array([x]), np.array([True]))  # noqa: E731
    out = [m for x in g[:5] for m in window.push(*row(x))]
    window.skip(7)
    out += [m for x in g[5:] for m in window.push(*row(x))] + window.flush()
    assert [m.position for m in out] == [0, 1, 2, 12, 13, 14, 15]
    assert out[0].losses[0] == pytest.approx(1 - (1 + 0.5 + 0.25 + 0.125) / 4)
    assert out[2].losses[0] == out[0].losses[0]
    assert out[3].losses[0] == pytest.approx(1 - (1 + 0.9 + 0.81 + 0.729) / 4)
    assert out[-1].losses[0] == pytest.approx(1 - (1 + 0.9) / 4)  # flushed: nothing past the end


def test_sleeping_drafter_accepts_nothing_inside_its_window():
    window = DelayedLosses(2, 2, estimator="paper")
    window.push(np.array([0.5, 0.5]), np.ones(2), np.array([True, True]))
    (m,) = window.push(np.array([0.5, 0.5]), np.ones(2), np.array([True, False]))
    np.testing.assert_allclose(m.losses, [1 - (1 + 0.5 + 0.25) / 3, 1 - (1 + 0.5) / 3])
    (tap,) = DelayedLosses(2, 2, "tap").push(np.array([0.3, 0.9]), np.ones(2), np.array([True, False]))
    np.testing.assert_allclose(tap.losses, [0.7, 1.0])
    assert tap.awake.tolist() == [True, False]


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="loss"):
        DelayedLosses(2, 3, loss="length")
    with pytest.raises(ValueError, match="shape"):
        DelayedLosses(2, 3).push(np.ones(3), np.ones(3), np.ones(3, bool))
    with pytest.raises(ValueError, match="committed"):
        RoundFeedback(0, 5, 3)
