"""The one decode loop on tiny models: lossless whatever drafts and whoever selects, and no state left behind."""
import pytest

from hedgespec.config import SelectorConfig, load_config
from hedgespec.engine import Engine
from hedgespec.sampling import Sampling

PROMPTS = ["hello there, how are you doing today?", "abc abc abc abc abc", "Write a poem about the sea."]
SELECTORS = [SelectorConfig(name="fixed", drafter="same-model"), SelectorConfig(name="fixed", drafter="other-model"),
             SelectorConfig(name="fixed", drafter="prompt-lookup"), SelectorConfig(name="hedgespec"),
             SelectorConfig(name="hedgespec", act="sample", delay="bold"), SelectorConfig(name="hedgespec-sleeping"),
             SelectorConfig(name="hedge"), SelectorConfig(name="ucbspec"), SelectorConfig(name="exp3spec"),
             SelectorConfig(name="rule", drafter="prompt-lookup", fallback="other-model")]


@pytest.fixture(scope="module")
def engine():
    return Engine(load_config("configs/tiny.yaml"))


@pytest.fixture(scope="module")
def target_only(engine):
    return {p: engine.generate(p, 48, speculate=False) for p in PROMPTS}


def assert_released(engine):
    assert engine.target.active == 0 and engine.target.lm.active == 0
    for drafter in engine.drafters:
        assert not drafter.requests


@pytest.mark.parametrize("selector", SELECTORS, ids=lambda s: f"{s.name}-{s.drafter or s.delay}")
def test_greedy_is_byte_identical_to_target_only(engine, target_only, selector):
    engine.use_selector(selector)
    for prompt in PROMPTS:
        forwards_before = engine.target.forwards
        gen = engine.generate(prompt, 48)
        assert gen.tokens == target_only[prompt].tokens
        assert gen.text == target_only[prompt].text
        # the evaluation phase scores every drafter without one extra target forward
        assert engine.target.forwards - forwards_before == gen.target_forwards == len(gen.rounds)
        # every committed token is shown, but for a final EOS: nothing after it is counted
        assert sum(r.committed for r in gen.rounds) == len(gen.tokens) + (gen.finish_reason == "stop")
    assert_released(engine)


def test_a_perfect_drafter_commits_k_plus_one_per_forward(engine):
    engine.use_selector(SelectorConfig(name="fixed", drafter="same-model"))
    gen = engine.generate(PROMPTS[0], 40)
    assert all(r.accepted == r.drafted for r in gen.rounds)
    assert gen.mat == pytest.approx(40 / 8)  # K=4: 5 tokens per forward, 8 forwards


def test_selector_learns_the_good_drafter_within_a_query(engine):
    engine.use_selector(SelectorConfig(name="hedgespec", loss="eal"))
    gen = engine.generate(PROMPTS[2], 160)
    late = [r.drafter for r in gen.rounds[len(gen.rounds) // 2:]]
    assert late.count("same-model") > 0.8 * len(late)
    # every committed position's loss reached the learner, once and in order
    assert [m.position for m in gen.losses] == list(range(sum(r.committed for r in gen.rounds)))


def test_sampling_is_seeded(engine):
    a = engine.generate(PROMPTS[0], 32, Sampling(0.9, top_p=0.95), seed=7)
    b = engine.generate(PROMPTS[0], 32, Sampling(0.9, top_p=0.95), seed=7)
    c = engine.generate(PROMPTS[0], 32, Sampling(0.9, top_p=0.95), seed=8)
    assert a.tokens == b.tokens and a.tokens != c.tokens


def test_stop_strings_and_streaming(engine, target_only):
    full = target_only[PROMPTS[0]].text
    stop = full[10:13]
    pieces = []
    gen = engine.generate(PROMPTS[0], 48, stop=(stop,), on_text=pieces.append)
    assert gen.finish_reason == "stop" and gen.text == full[:full.index(stop)]
    assert "".join(pieces) == gen.text


def test_state_is_freed_when_a_drafter_fails(engine, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("drafter crashed")
    engine.use_selector(SelectorConfig(name="fixed", drafter="other-model"))
    monkeypatch.setattr(engine.drafters[1], "propose", broken)
    with pytest.raises(RuntimeError, match="drafter crashed"):
        engine.generate(PROMPTS[0], 16)
    assert_released(engine)


def test_bfloat16_greedy_leaves_target_only_text_only_at_near_ties():
    """In bfloat16 the batched verify and one-token decoding round differently: every divergence of
    speculative from target-only greedy text must sit where the target's top-2 margin is within
    twice the measured logit gap between the two ways of computing (hedgespec.bench.ties)."""
    from hedgespec.bench import ties
    from hedgespec.config import DrafterConfig, EngineConfig, TargetConfig
    engine = Engine(EngineConfig(target=TargetConfig(model="tiny:0", dtype="bfloat16"), k=5,
                                 drafters=[DrafterConfig(name="same-model", kind="lm", model="tiny:0", dtype="bfloat16"),
                                           DrafterConfig(name="lookup", kind="prompt_lookup")]))
    result = ties.run(engine, PROMPTS + ["one two three one two three one two three"], 48)
    assert result["dtype"] == "bfloat16" and result["bound"] > 0  # bfloat16 really rounds differently here
    assert result["unexplained"] == [], result


def test_a_lossy_verifier_is_caught_by_the_near_tie_check(monkeypatch):
    """The same check on a verifier that accepts every draft token: its divergences are no near-ties."""
    from hedgespec.bench import ties
    from hedgespec.config import DrafterConfig, EngineConfig, TargetConfig
    from hedgespec.models import target as target_module
    monkeypatch.setattr(target_module, "verify_greedy", lambda probs, draft: (len(draft), int(probs[len(draft)].argmax())))
    engine = Engine(EngineConfig(target=TargetConfig(model="tiny:0", dtype="bfloat16"), k=5,
                                 drafters=[DrafterConfig(name="other-model", kind="lm", model="tiny:1", dtype="bfloat16")]))
    assert ties.run(engine, PROMPTS, 32)["unexplained"]
