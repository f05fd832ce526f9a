"""The EAGLE-style head and the datastore drafter: lossless in the real decode loop, in sync after
rejections, and honest about when they sleep."""
import numpy as np
import pytest
import torch

from hedgespec.bench.replay import replay
from hedgespec.config import DrafterConfig, EngineConfig, SelectorConfig, TargetConfig
from hedgespec.drafters import artifact_path
from hedgespec.drafters.datastore import Datastore, DatastoreDrafter, suffix_array
from hedgespec.drafters.eagle import EagleDrafter
from hedgespec.drafters.feature_head import FeatureHead, HeadSpec, frozen_from_folder, frozen_from_model, load_head, save_head
from hedgespec.engine import Engine, build_selector
from hedgespec.interfaces import Verified
from hedgespec.models import loading
from hedgespec.models.target import HFTarget
from hedgespec.sampling import Sampling

PROMPT = [3, 1, 4, 1, 5, 9, 2, 6]
PROMPTS = ["hello there, how are you doing today?", "abc abc abc abc abc", "Write a poem about the sea."]


def random_head(model, seed: int = 0) -> FeatureHead:
    torch.manual_seed(seed)
    return FeatureHead(HeadSpec.of(model.config)).eval()


# ---- EAGLE-style head ----

@pytest.mark.parametrize("sampling", [Sampling(), Sampling(1.0)], ids=["greedy", "sampled"])
def test_eagle_rollback_gives_the_distributions_of_a_fresh_run(tiny_lm, sampling):
    """Rounds of propose / verify / observe with rejections leave the head's cache exactly as one
    pass over the committed text would: same rows at every committed position, same next draft."""
    target = HFTarget(tiny_lm(0, vocab=16, layers=2))
    # a head seed whose random drafts get accepted now and then; tokens 12..15 are outside its vocabulary
    head, vocab = random_head(target.lm.model, seed=2), torch.arange(12)
    live, fresh = (EagleDrafter(n, head, frozen_from_model(target.lm.model, vocab)) for n in ("live", "fresh"))
    hidden = target.prefill("r", PROMPT, sampling, seed=1)
    live.begin("r", PROMPT, hidden, sampling, seed=2)
    rounds = []
    for _ in range(16):
        draft = live.propose("r", 4)
        verified = target.verify("r", draft)
        rounds.append((verified, live.observe("r", verified)))
    accepted = [v.accepted for v, _ in rounds]
    assert sum(a < 4 for a in accepted) >= 3 and sum(accepted) >= 1, "needs both acceptances and rejections"
    rows = torch.cat([obs.probs for _, obs in rounds])
    assert all(obs.awake.all() for _, obs in rounds)
    torch.testing.assert_close(rows.sum(-1), torch.ones(len(rows)))
    assert rows[:, 12:].abs().sum() == 0

    whole = Verified([t for v, _ in rounds for t in v.tokens], 0, 0, torch.cat([v.probs for v, _ in rounds]),
                     torch.cat([v.hidden for v, _ in rounds]))
    fresh.begin("f", PROMPT, hidden, sampling, seed=2)
    torch.testing.assert_close(fresh.observe("f", whole).probs, rows, atol=1e-5, rtol=1e-5)
    next_live, next_fresh = live.propose("r", 3), fresh.propose("f", 3)
    torch.testing.assert_close(next_live.probs[0], next_fresh.probs[0], atol=1e-5, rtol=1e-5)
    if sampling.greedy:
        assert next_live.tokens == next_fresh.tokens


def test_eagle_without_a_target_state_sleeps_until_it_has_one(tiny_lm):
    target = HFTarget(tiny_lm(0, vocab=16))
    drafter = EagleDrafter("e", random_head(target.lm.model), frozen_from_model(target.lm.model, torch.arange(16)))
    drafter.begin("r", [3], target.prefill("r", [3], Sampling(), 0), Sampling(), 0)
    assert not drafter.ready("r")
    observation = drafter.observe("r", target.verify("r", drafter.propose("r", 0)))
    assert observation.awake.tolist() == [False] and observation.probs.abs().sum() == 0
    assert drafter.ready("r") and len(drafter.propose("r", 3).tokens) == 3


def test_head_artifact_round_trip_and_frozen_parts_from_the_folder(tmp_path):
    model, _ = loading.load("tiny:0")
    head, vocab = random_head(model), torch.tensor([2, 5, 7, 11, 200])
    save_head(tmp_path / "h.safetensors", head, vocab)
    loaded, loaded_vocab = load_head(tmp_path / "h.safetensors")
    assert loaded_vocab.tolist() == vocab.tolist() and loaded.spec == head.spec
    x = torch.randn(1, 3, head.spec.hidden)
    torch.testing.assert_close(loaded(x, x, torch.arange(3))[0], head(x, x, torch.arange(3))[0], atol=2e-2, rtol=2e-2)
    shared, read = frozen_from_model(model, vocab), frozen_from_folder(loading.resolve("tiny:0"), vocab)
    assert shared.embed.data_ptr() == model.get_input_embeddings().weight.data_ptr()  # shared, not copied
    torch.testing.assert_close(read.rows, shared.rows)
    torch.testing.assert_close(read.embed, shared.embed)


# ---- datastore ----

DOCS = [[5, 6, 7, 8, 9], [5, 6, 7, 8, 3], [1, 6, 7, 2]]


def test_suffix_array_sorts_suffixes_on_their_first_depth_tokens():
    stream = np.random.default_rng(0).integers(-1, 3, size=400).astype(np.int32)
    order = suffix_array(stream, 4)
    keys = [tuple(stream[i:i + 4].tolist()) + (-2,) * max(0, i + 4 - len(stream)) for i in order]
    assert keys == sorted(keys) and sorted(order.tolist()) == list(range(len(stream)))


def test_datastore_counts_continuations_of_the_longest_matching_suffix(tmp_path):
    Datastore.build(DOCS).save(tmp_path / "s.npz")
    store = Datastore.load(tmp_path / "s.npz")
    assert len(store) == 14

    def counts(context, min_ngram=1):
        tokens, n = store.continuations(context, min_ngram, 8)
        return dict(zip(tokens.tolist(), n.tolist()))

    assert counts([5, 6, 7]) == {8: 2}  # the 3-token match, not the 2-token one (which also sees 2)
    assert counts([0, 6, 7]) == {8: 2, 2: 1}  # 0 never occurs: the longest match is [6, 7]
    assert counts([1, 6, 7]) == {2: 1}
    assert store.continuations([7, 8, 9], 1, 8) is None  # 9 ends a document: nothing follows
    assert store.continuations([4, 7], 2, 8) is None  # only a 1-token match: below min_ngram


def test_datastore_drafter_proposes_the_continuation_and_sleeps_on_unseen_text():
    drafter = DatastoreDrafter("store", Datastore.build(DOCS), vocab=16, max_ngram=8, min_ngram=2)
    drafter.begin("r", [0, 5, 6, 7], None, Sampling(), 0)
    assert drafter.ready("r")
    assert drafter.propose("r", 5).tokens == [8, 3]  # 8, then a 1:1 tie broken to the lower id, then nothing follows
    observation = drafter.observe("r", Verified([8, 9, 4, 4], 1, 2, torch.zeros(4, 16), torch.zeros(4, 1)))
    # 8 follows [5, 6, 7]; after [5, 6, 7, 8] greedy q is 3 (the tie); 9 ends a document; [9, 4] is unseen
    assert observation.awake.tolist() == [True, True, False, False]
    assert observation.probs[0, 8] == 1 and observation.probs[1].tolist() == torch.eye(16)[3].tolist()
    assert observation.probs[2:].abs().sum() == 0
    assert not drafter.ready("r") and drafter.propose("r", 4).tokens == []

    drafter.begin("s", [0, 6, 7], None, Sampling(1.0), 0)  # sampled: q is the empirical distribution
    observation = drafter.observe("s", Verified([8], 0, 0, torch.zeros(1, 16), torch.zeros(1, 1)))
    torch.testing.assert_close(observation.probs[0, [8, 2]], torch.tensor([2 / 3, 1 / 3]))
    torch.testing.assert_close(observation.probs.sum(-1), torch.ones(1))


# ---- both in the real decode loop ----

@pytest.fixture(scope="module")
def pool_engine(tmp_path_factory):
    """tiny:0 with a random EAGLE head and a datastore of its own greedy answers."""
    tmp = tmp_path_factory.mktemp("pool")
    model, _ = loading.load("tiny:0")
    save_head(tmp / "head.safetensors", random_head(model), torch.arange(0, 200))
    reference = Engine(EngineConfig(target=TargetConfig(model="tiny:0"), drafters=[]))
    target_only = {p: reference.generate(p, 48, speculate=False) for p in PROMPTS}
    Datastore.build([g.tokens for g in target_only.values()]).save(tmp / "store.npz")
    drafters = [DrafterConfig(name="eagle", kind="eagle", artifact=str(tmp / "head.safetensors")),
                DrafterConfig(name="store", kind="datastore", artifact=str(tmp / "store.npz"), max_ngram=8, min_ngram=2),
                DrafterConfig(name="lookup", kind="prompt_lookup")]
    return Engine(EngineConfig(target=TargetConfig(model="tiny:0"), drafters=drafters, k=4, threads=1)), target_only


@pytest.mark.parametrize("selector", [SelectorConfig(name="fixed", drafter="eagle"), SelectorConfig(name="fixed", drafter="store"),
                                      SelectorConfig(name="hedgespec-sleeping")], ids=lambda s: s.drafter or s.name)
def test_greedy_output_is_byte_identical_with_the_new_drafters(pool_engine, selector):
    engine, target_only = pool_engine
    engine.selector = build_selector(selector, [d.name for d in engine.drafters], engine.config.k)
    for prompt in PROMPTS:
        generation = engine.generate(prompt, 48)
        assert generation.tokens == target_only[prompt].tokens
        if selector.drafter == "store":  # the store holds these very answers: it must be accepted
            assert generation.mat > 2
    assert all(not d.requests for d in engine.drafters)


def test_relative_artifacts_live_in_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HEDGESPEC_CACHE", str(tmp_path))
    assert artifact_path("zoo/heads/general.safetensors") == tmp_path / "zoo/heads/general.safetensors"
    assert artifact_path(str(tmp_path / "x.npz")) == tmp_path / "x.npz"
    with pytest.raises(ValueError, match="needs an artifact"):
        DrafterConfig(name="e", kind="eagle")
    with pytest.raises(ValueError, match="min_ngram"):
        DrafterConfig(name="s", kind="datastore", artifact="s.npz", max_ngram=2, min_ngram=3)


def test_replay_gives_the_mat_of_live_decoding(pool_engine):
    """Replaying the target's greedy trajectory scores each drafter exactly as running it live."""
    engine, _ = pool_engine
    replayed = replay(engine, engine.drafters, PROMPTS, max_tokens=48, k=engine.config.k)
    for drafter in engine.drafters:
        engine.selector = build_selector(SelectorConfig(name="fixed", drafter=drafter.name),
                                         [d.name for d in engine.drafters], engine.config.k)
        live = [engine.generate(prompt, 48).mat for prompt in PROMPTS]
        assert replayed[drafter.name] == pytest.approx(live), drafter.name
    assert len(set(sum(replayed.values(), []))) > 3  # the drafters really differ
