"""How far a request's copy of its own text should reach: the load gate's COPY steps draft, as
vLLM's n-gram rule does, what followed the last earlier occurrence of the text's last n-gram, and
each copy token is worth its compute only where it is likely enough to be accepted."""
import math
from dataclasses import dataclass, field


@dataclass
class CopyOdds:
    """A request's copies so far, as hits and misses: their first tokens accepted and rejected, and
    their later tokens (given the one before was accepted). A copy's first token is its gamble; once
    a text copies, it goes on. Priors of 4 in 5 accepted: optimism, so that a new request tries its
    copies (one that drafts none learns nothing)."""
    first: list[float] = field(default_factory=lambda: [2.0, 0.5])
    later: list[float] = field(default_factory=lambda: [2.0, 0.5])

    def record(self, drafted: int, accepted: int) -> None:
        """A verified copy of `drafted` tokens, of which the first `accepted` were."""
        self.first[accepted == 0] += 1
        if accepted:
            self.later[0] += accepted - 1
            self.later[1] += accepted < drafted

    def reach(self, budget: int, threshold: float) -> int:
        """The copy's length, at most `budget`: its tokens whose chance of acceptance is at least
        `threshold`. The proposer's threshold: a step's time is the line a + b t over its t tokens,
        so one more draft token adds b seconds, and pays where its chance beats b times the tokens
        per second the steps commit now (the rate it would otherwise dilute): nearly always in a
        small batch, where b is small against a, and only for likely tokens in a compute-bound one.
        The i-th token's chance is the rate of accepted first tokens times the rate of accepted
        later ones to the power i - 1."""
        first, later = (hits / (hits + misses) for hits, misses in (self.first, self.later))
        if threshold <= 0.0:
            return budget
        if first < threshold:
            return 0
        # the priors keep both rates strictly between 0 and 1
        return min(budget, 1 + int(math.log(threshold / first) / math.log(later)))
