"""Verification of a drafted chain: greedy and speculative sampling (Leviathan et al., Chen et al.).

Both return (number of accepted drafts n, the token the target commits after them). The committed
tokens of a round are draft[:n] + [token]: n + 1 tokens for one target forward.
"""
import torch

from hedgespec.sampling import draw


def verify_greedy(target_probs: torch.Tensor, draft: list[int]) -> tuple[int, int]:
    """Accept while the draft equals the target's argmax, then emit the target's own token."""
    target_tokens = target_probs.argmax(-1).tolist()
    n = 0
    while n < len(draft) and draft[n] == target_tokens[n]:
        n += 1
    return n, target_tokens[n]


def verify_sampling(target_probs: torch.Tensor, draft: list[int], draft_probs: torch.Tensor,
                    generator: torch.Generator) -> tuple[int, int]:
    """Accept draft i with probability min(1, p_i(d_i) / q_i(d_i)); on the first rejection resample
    from norm(max(0, p_i - q_i)); if all are accepted, a bonus token from p_K. The committed
    tokens are then distributed exactly as sampling from the target alone."""
    k = len(draft)
    if k:
        index = torch.arange(k)
        tokens = torch.tensor(draft)
        q = draft_probs[index, tokens]
        # a token its own distribution could not have drawn: p/0 would accept it, 0/0 (NaN) too
        if not bool((q > 0).all()):
            raise ValueError(f"drafted tokens {tokens[q <= 0].tolist()} have probability 0 under the draft's distribution")
        ratio = target_probs[index, tokens] / q
        rejected = (torch.rand(k, generator=generator) >= ratio).nonzero()
        if len(rejected):
            n = int(rejected[0])
            residual = (target_probs[n] - draft_probs[n]).clamp_min(0)
            # p == q leaves no residual mass; rejection then had probability 0 up to rounding
            return n, draw(residual if residual.sum() > 0 else target_probs[n], generator)
    return k, draw(target_probs[k], generator)


def point_masses(tokens: list[int], vocab: int) -> torch.Tensor:
    """The distributions of a deterministic drafter that proposed `tokens`."""
    return torch.nn.functional.one_hot(torch.tensor(tokens, dtype=torch.long), vocab).float()
