"""The load gate (hedgespec.load_gate) against simulated engines whose faster mode is known: a step
of each mode draws its committed tokens and its seconds from that mode's own figures, with noise."""
import numpy as np

from hedgespec.load_gate import LoadGate

# per load: (tokens, seconds) of a step with speculation and of one without, about as bench load
# measured them on 2 cores. Alone, a step's fixed cost dominates and accepted drafts are nearly
# free (speculation 2.1x faster); at 16 requests the step is compute-bound, the drafts' rejected
# tokens cost what decoded ones do, and speculation is 0.8x as fast.
ENGINE = {"batch<=1": {True: (2.4, 0.034), False: (1.0, 0.030)},
          "batch<=16": {True: (18.0, 0.1406), False: (16.0, 0.100)}}


def run(gate: LoadGate, load: str, steps: int, rng: np.random.Generator) -> tuple[float, float]:
    """The share of steps the gate speculated, and the tokens per second it got."""
    tokens = seconds = speculated = 0.0
    for _ in range(steps):
        mode = gate.speculate(load)
        mean_tokens, mean_seconds = ENGINE[load][mode]
        step_tokens = max(1.0, rng.normal(mean_tokens, 0.2 * mean_tokens))
        step_seconds = rng.normal(mean_seconds, 0.1 * mean_seconds)
        gate.record(step_tokens, step_seconds)
        tokens, seconds, speculated = tokens + step_tokens, seconds + step_seconds, speculated + mode
    return speculated / steps, tokens / seconds


def test_the_gate_speculates_where_it_measured_faster_and_explores_the_other_mode_rarely():
    gate, rng = LoadGate(), np.random.default_rng(0)
    best = {load: max(t / s for t, s in modes.values()) for load, modes in ENGINE.items()}
    for visit in range(3):  # loads come and go; each keeps its own measurements
        alone, alone_rate = run(gate, "batch<=1", 320, rng)
        loaded, loaded_rate = run(gate, "batch<=16", 320, rng)
        if visit == 0:  # the first visit alternates the modes until both are measured
            assert alone >= 0.85 and loaded <= 0.3
            assert alone_rate >= 0.9 * best["batch<=1"] and loaded_rate >= 0.9 * best["batch<=16"]
        else:
            assert alone >= 1 - 2 / LoadGate.EXPLORE_EVERY and loaded <= 2 / LoadGate.EXPLORE_EVERY
            assert alone_rate >= 0.92 * best["batch<=1"] and loaded_rate >= 0.92 * best["batch<=16"]
    rates = gate.snapshot()
    assert list(rates) == ["batch<=1", "batch<=16"]
    assert rates["batch<=16"]["plain"] > rates["batch<=16"]["speculating"]
    assert rates["batch<=1"]["plain"] < rates["batch<=1"]["speculating"]


def test_an_unmeasured_load_alternates_blocks_and_the_steps_just_after_a_switch_are_not_measured():
    gate, block, settle = LoadGate(), LoadGate.BLOCK, LoadGate.SETTLE
    modes = []
    for _ in range(4 * block):
        modes.append(gate.speculate("batch<=4"))
        gate.record(4 + 4 * modes[-1], 0.1 if modes[-1] else 0.05)
    assert modes == ([True] * block + [False] * block) * 2
    assert gate.measured[("batch<=4", True)] == gate.measured[("batch<=4", False)] == 2 * (block - settle)
    assert gate.rate("batch<=4", True) == 80.0 and gate.rate("batch<=4", False) == 80.0
    assert gate.rate("batch<=8", True) is None
