import torch

from hedgespec.evaluation import acceptance, acceptance_children


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


def test_many_drafters_at_once_match_one_at_a_time():
    torch.manual_seed(2)
    p = torch.softmax(torch.randn(5, 7), -1)
    q = torch.softmax(torch.randn(3, 5, 7), -1)
    tokens = torch.multinomial(p, 1).squeeze(-1)
    gamma, ratio = acceptance(p, q, tokens)
    assert gamma.shape == ratio.shape == (3, 5)
    for j in range(3):
        g, a = acceptance(p, q[j], tokens)
        assert torch.allclose(gamma[j], g) and torch.allclose(ratio[j], a)


def test_impossible_token_keeps_ratio_finite():
    p = torch.tensor([[0.0, 1.0]])
    q = torch.tensor([[1.0, 0.0]])
    gamma, ratio = acceptance(p, q, torch.tensor([0]))
    assert gamma.item() == 0.0 and ratio.item() == 1.0


def test_children_sum_target_mass_and_flag_the_committed_token():
    p = torch.tensor([[0.1, 0.4, 0.3, 0.2], [0.7, 0.1, 0.1, 0.1]], dtype=torch.float64)
    children = torch.tensor([[False, True, True, False], [False, True, False, True]])
    gamma, ratio = acceptance_children(p, children, torch.tensor([2, 0]))
    assert torch.allclose(gamma, torch.tensor([0.7, 0.2], dtype=torch.float64))
    assert torch.equal(ratio, torch.tensor([1.0, 0.0], dtype=torch.float64))
    greedy, _ = acceptance_children(one_hot_argmax(p), children, torch.tensor([1, 0]))
    assert torch.equal(greedy, torch.tensor([1.0, 0.0], dtype=torch.float64))  # 1[argmax p in C]
