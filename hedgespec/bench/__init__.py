"""Benchmarks: both sides of every comparison run in one process run and are reported as ratios."""
