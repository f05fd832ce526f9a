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

Shapes: p and q are [m, V]; tokens [m]. Below `acceptance`: a round's scores for the whole pool
(Scores), from the drafters' observations of the committed tokens.
"""
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from hedgespec.interfaces import Drafter, Observation, Verified


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



@dataclass
class Scores:
    """Per committed position (rows) and drafter (columns): acceptance probability gamma, likelihood
    ratio of the committed token, and whether the drafter was awake there."""
    gamma: np.ndarray
    ratio: np.ndarray
    awake: np.ndarray

    @staticmethod
    def of_columns(columns: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> "Scores":
        """From each drafter's (gamma, ratio, awake) columns, in the pool's order."""
        return Scores(*(np.stack([c[f] for c in columns], axis=1) for f in range(3)))

    @staticmethod
    def concat(parts: Sequence["Scores"]) -> "Scores":
        return Scores(*(np.concatenate([getattr(p, f) for p in parts], axis=1) for f in ("gamma", "ratio", "awake")))


def score(verified: Verified, observation: Observation) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One drafter's (gamma, ratio, awake) columns for a round. A point mass at d has gamma = p(d)
    and ratio = min(1, 1 / p(x)) = 1 where d is the committed token x, else 0 (`acceptance` with q
    one-hot). Without the target's distributions (`verified.probs` None: the vLLM backend, which
    keeps them), gamma is the indicator that d was committed: exact under greedy decoding, and
    under sampling an unbiased estimate of p(d), since x was drawn from p."""
    awake = np.asarray(observation.awake)
    if observation.probs is None:
        # numpy, not torch: this runs for every drafter and request at every vLLM step
        drafted = np.asarray(observation.tokens)
        hit = (drafted == np.asarray(verified.tokens)).astype(np.float32)
        if verified.probs is None:
            return hit, hit, awake
        drafted = torch.as_tensor(np.maximum(drafted, 0))  # asleep positions (-1) are masked by `awake`
        return verified.probs.gather(-1, drafted[:, None])[:, 0].numpy(), hit, awake
    gamma, ratio = acceptance(verified.probs, observation.probs, torch.as_tensor(verified.tokens))
    return gamma.numpy(), ratio.numpy(), awake


def score_wave(rounds: Sequence[Verified], observed: Sequence[Sequence[Observation]]) -> list[Scores]:
    """Every drafter's `score` for each of several rounds (observed[j][i]: drafter j's observation of
    round i), as Scores per round. Where every drafter gives point masses and the target's
    distributions are not at hand (the vLLM backend: every request of a step), the hits of all
    drafters in all rounds are one comparison."""
    if all(v.probs is None for v in rounds) and all(o.probs is None for column in observed for o in column):
        committed = np.concatenate([np.asarray(v.tokens) for v in rounds])
        drafted = np.stack([np.concatenate([np.asarray(o.tokens) for o in column]) for column in observed], axis=1)
        awake = np.stack([np.concatenate([np.asarray(o.awake) for o in column]) for column in observed], axis=1)
        hit = (drafted == committed[:, None]).astype(np.float32)
        bounds = np.cumsum([len(v.tokens) for v in rounds])[:-1]
        return [Scores(h, h, a) for h, a in zip(np.split(hit, bounds), np.split(awake, bounds))]
    return [Scores.of_columns([score(v, column[i]) for column in observed]) for i, v in enumerate(rounds)]


def observe_many(drafter: Drafter, rounds: Sequence[tuple[str, Verified]]) -> list[Observation]:
    """The drafter's observations of one round of each of several requests, in one call where it can
    (Drafter.observe_many)."""
    many = getattr(drafter, "observe_many", None)
    return many(rounds) if many else [drafter.observe(request_id, verified) for request_id, verified in rounds]
