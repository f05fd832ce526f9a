"""The load gate (hedgespec.load_gate) against simulated engines whose fastest mode is known: a step
of each mode draws its committed tokens and its seconds from that mode's own figures, with noise."""
import numpy as np
import pytest

from hedgespec.load_gate import ALL, COPY, MODES, NONE, LoadGate

# per load and mode: (tokens, seconds) of a step. Alone, a step's fixed cost dominates and accepted
# drafts are nearly free (every request speculating is fastest); at 16 requests the step is
# compute-bound: every request's round costs more than its drafts buy (0.8x the plain step), while
# copies, which cost the proposer next to nothing, pay (1.1x).
ENGINE = {"batch<=1": {ALL: (2.4, 0.034), COPY: (1.3, 0.031), NONE: (1.0, 0.030)},
          "batch<=16": {ALL: (18.0, 0.1406), COPY: (18.0, 0.1023), NONE: (16.0, 0.100)}}


def run(gate: LoadGate, load: str, steps: int, rng: np.random.Generator) -> tuple[dict[str, float], float]:
    """The share of steps the gate played in each mode, and the tokens per second it got."""
    tokens = seconds = 0.0
    played = dict.fromkeys(MODES, 0)
    for _ in range(steps):
        mode = gate.mode(load)
        mean_tokens, mean_seconds = ENGINE[load][mode]
        step_tokens = max(1.0, rng.normal(mean_tokens, 0.2 * mean_tokens))
        step_seconds = rng.normal(mean_seconds, 0.1 * mean_seconds)
        gate.record(step_tokens, step_seconds)
        tokens, seconds, played[mode] = tokens + step_tokens, seconds + step_seconds, played[mode] + 1
    return {mode: n / steps for mode, n in played.items()}, tokens / seconds


def test_the_gate_plays_the_mode_it_measured_fastest_and_explores_the_others_rarely():
    gate, rng = LoadGate(), np.random.default_rng(0)
    fastest = {load: max(modes, key=lambda m: modes[m][0] / modes[m][1]) for load, modes in ENGINE.items()}
    best = {load: modes[fastest[load]][0] / modes[fastest[load]][1] for load, modes in ENGINE.items()}
    assert fastest == {"batch<=1": ALL, "batch<=16": COPY}
    for visit in range(3):  # loads come and go; each keeps its own measurements
        for load in ENGINE:
            shares, rate = run(gate, load, 480, rng)
            if visit == 0:  # the first visit takes turns until every mode is measured
                assert shares[fastest[load]] >= 0.75 and rate >= 0.9 * best[load]
            else:
                assert shares[fastest[load]] >= 1 - 2 / LoadGate.EXPLORE_EVERY
                assert all(share > 0 for share in shares.values())  # the others are still explored
                assert rate >= 0.95 * best[load]
    rates = gate.snapshot()
    assert list(rates) == ["batch<=1", "batch<=16"]
    for load, modes in ENGINE.items():
        measured = sorted(MODES, key=lambda mode: rates[load][mode])
        assert measured == sorted(MODES, key=lambda mode: modes[mode][0] / modes[mode][1])


def test_an_unmeasured_load_takes_the_modes_in_turn_and_the_steps_just_after_a_switch_are_not_measured():
    gate, block, settle = LoadGate(), LoadGate.BLOCK, LoadGate.SETTLE
    tokens = {ALL: 8, COPY: 6, NONE: 4}
    modes = []
    for _ in range(6 * block):
        modes.append(gate.mode("batch<=4"))
        gate.record(tokens[modes[-1]], 0.1 if modes[-1] == ALL else 0.05)
    assert modes == ([ALL] * block + [NONE] * block + [COPY] * block) * 2
    assert all(gate.measured[("batch<=4", mode)] == 2 * (block - settle) for mode in MODES)
    assert gate.rate("batch<=4", ALL) == gate.rate("batch<=4", NONE) == 80.0
    assert gate.rate("batch<=4", COPY) == pytest.approx(120.0)
    assert gate.rate("batch<=8", ALL) is None


def test_a_fixed_gate_plays_its_mode_at_every_load_and_an_unknown_mode_is_refused():
    gate = LoadGate(fixed=COPY)
    assert {gate.mode(f"batch<={b}") for b in (2, 4, 16) for _ in range(20)} == {COPY}
    with pytest.raises(ValueError, match="one of"):
        LoadGate(fixed="sometimes")
