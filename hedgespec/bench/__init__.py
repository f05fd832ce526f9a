"""Benchmarks: both sides of every comparison run in one process run and are reported as ratios."""
import statistics

# the steps of `hedgespec bench paper`, in order (here so that the CLI names them without importing torch)
PAPER_STEPS = ("main-greedy", "main-sampling", "scaling", "shift", "overhead")


def rotated(sides: list, by: int) -> list:
    """The sides in turn, starting from the `by`-th (cycling): the order that benches taking turns
    rotate, so that no side always runs first or right after another."""
    return sides[by % len(sides):] + sides[:by % len(sides)]


def paired_ratio(rates: list[float], baseline: list[float]) -> float:
    """A side's tokens/s against the baseline's, over repeats: the median of the ratios of the runs of
    the same repeat (minutes apart at most, so that the machine's drift between repeats cancels)."""
    return statistics.median(rate / max(base, 1e-9) for rate, base in zip(rates, baseline))
