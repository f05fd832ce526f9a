"""The full-information step: how well each drafter would have done at each committed position.

After a round, the target has its processed distribution p(.|x_<s) at every committed position s,
and every drafter j can give its own q_j(.|x_<s) there. Two numbers per drafter and position feed
the losses (feedback.py):

- gamma = sum_x min(p(x), q(x)): the chance that a token drafted from q is accepted;
- ratio = min(1, q(x_s) / p(x_s)) at the committed token x_s: the likelihood ratio that turns the
  target's own trajectory into a sample of the accepted drafts (the corrected EAL estimator).

Greedy decoding needs no branch: the caller passes point masses (one-hot argmax) for p and q, and
then gamma = 1[argmax q == argmax p] and ratio = 1[argmax q == x_s] fall out of the same formulas.
A drafter that abstains at a position is the caller's awake mask; its values here are ignored.

Shapes: p and q are [m, V]; tokens [m].
"""
import torch
from torch import Tensor


def _at_tokens(dist: Tensor, tokens: Tensor) -> Tensor:
    """dist[s, tokens[s]] for every position s."""
    return dist.gather(-1, torch.as_tensor(tokens, device=dist.device)[:, None])[:, 0]


def acceptance(p: Tensor, q: Tensor, tokens: Tensor) -> tuple[Tensor, Tensor]:
    """(gamma, ratio) of a drafter with distributions q against the target p at committed tokens."""
    gamma = torch.minimum(p, q).sum(-1)
    p_token = _at_tokens(p, tokens)
    q_token = _at_tokens(q, tokens)
    # x_s was drawn from p, so p(x_s) > 0 (over Ray it travels exactly, hedgespec.transport); the
    # guard only keeps a bad caller's input finite.
    safe = p_token.clamp_min(torch.finfo(p.dtype).tiny)
    ratio = torch.where(p_token > 0, (q_token / safe).clamp(max=1.0), torch.ones_like(q_token))
    return gamma, ratio

