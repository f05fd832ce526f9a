"""Benchmarks: both sides of every comparison run in one process run and are reported as ratios."""

# the steps of `hedgespec bench paper`, in order (here so that the CLI names them without importing torch)
PAPER_STEPS = ("main-greedy", "main-sampling", "scaling", "shift", "overhead")
