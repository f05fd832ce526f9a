import pytest
import torch

from hedgespec.evaluation import acceptance
from hedgespec.interfaces import Verified
from hedgespec.transport import compact, expand


def one_hot_argmax(dist: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.one_hot(dist.argmax(-1), dist.shape[-1]).to(dist.dtype)


def test_gamma_and_ratio_by_hand():
    p = torch.tensor([[0.5, 0.3, 0.2], [0.5, 0.3, 0.2]], dtype=torch.float64)
    q = torch.tensor([[0.2, 0.6, 0.2], [0.2, 0.6, 0.2]], dtype=torch.float64)
    gamma, ratio = acceptance(p, q, torch.tensor([0, 1]))
    assert torch.allclose(gamma, torch.tensor([0.7, 0.7], dtype=torch.float64))
    assert torch.allclose(ratio, torch.tensor([0.4, 1.0], dtype=torch.float64))  # min(1, 0.2/0.5), min(1, 2)


def test_gamma_is_one_minus_total_variation():
    torch.manual_seed(0)
    p = torch.softmax(torch.randn(6, 11, dtype=torch.float64), -1)
    q = torch.softmax(torch.randn(6, 11, dtype=torch.float64), -1)
    gamma, ratio = acceptance(p, q, torch.multinomial(p, 1).squeeze(-1))
    assert torch.allclose(gamma, 1 - 0.5 * (p - q).abs().sum(-1))
    assert ((ratio > 0) & (ratio <= 1)).all()


def test_greedy_point_masses_give_argmax_agreement():
    torch.manual_seed(1)
    p_logits, q_logits = torch.randn(50, 4), torch.randn(50, 4)
    p, q = one_hot_argmax(p_logits), one_hot_argmax(q_logits)
    tokens = p_logits.argmax(-1)  # greedy commits the target's argmax
    gamma, ratio = acceptance(p, q, tokens)
    agree = (q_logits.argmax(-1) == p_logits.argmax(-1)).float()
    assert torch.equal(gamma, agree)
    assert torch.equal(ratio, agree)
    assert 0 < agree.sum() < 50  # both outcomes occur


def test_a_committed_token_outside_the_wire_top_k_keeps_its_exact_ratio():
    """Over Ray the target's rows travel as their top entries; the committed token's own p must travel
    exactly beside them, or min(1, q/p) of a token outside them is taken as q/0 and forced to 1."""
    vocab, tail = 1000, 900
    p = torch.full((1, vocab), 0.5 / (vocab - 1))
    p[0, 0] = 0.5  # one likely token, and a flat tail of tiny ones: token `tail` ranks far below the top 256
    q = torch.full((1, vocab), 0.1 / (vocab - 1))
    q[0, 0] = 0.9
    verified = Verified([tail], 0, 0, p, torch.zeros(1, 4))
    wire = expand(compact(verified, greedy=False), vocab)
    _, ratio = acceptance(wire.probs, q, torch.tensor([tail]))
    by_hand = min(1.0, (0.1 / 999) / (0.5 / 999))  # q(x) / p(x) at the committed token
    assert ratio.item() == pytest.approx(by_hand, rel=1e-6)
    assert wire.probs[0, tail].item() == pytest.approx(p[0, tail].item(), rel=1e-6)
