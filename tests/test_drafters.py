"""The EAGLE-style head and the datastore drafter: lossless in the real decode loop, in sync after
rejections, and honest about when they sleep."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hedgespec.bench.replay import replay
from hedgespec.config import DrafterConfig, EngineConfig, SelectorConfig, TargetConfig
from hedgespec.drafters import artifact_path
from hedgespec.drafters.datastore import DatastoreDrafter
from hedgespec.drafters.eagle import EagleDrafter
from hedgespec.drafters.prompt_lookup import PromptLookupDrafter
from hedgespec.drafters.feature_head import FeatureHead, HeadSpec, frozen_from_folder, frozen_from_model, load_head, save_head
from hedgespec.drafters.store import KNOWN_FROM, Datastore, suffix_array
from hedgespec.engine import Engine
from hedgespec.interfaces import Verified
from hedgespec.models import loading
from hedgespec.models.target import HFTarget
from hedgespec.pool import LocalPool
from hedgespec.sampling import Sampling

PROMPT = [3, 1, 4, 1, 5, 9, 2, 6]
PROMPTS = ["hello there, how are you doing today?", "abc abc abc abc abc", "Write a poem about the sea."]


def dense(observation, vocab: int = 16) -> torch.Tensor:
    """An observation's rows over the vocabulary: one-hot where it gives point masses, zero where asleep."""
    if observation.probs is not None:
        return observation.probs
    tokens = torch.as_tensor(observation.tokens)
    rows = torch.zeros(len(tokens), vocab)
    awake = tokens >= 0
    rows[awake.nonzero()[:, 0], tokens[awake]] = 1.0
    return rows


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
    # float32 products: in int8 a batch's shared activation scale rounds a fed block differently
    live, fresh = (EagleDrafter.single(n, head, frozen_from_model(target.lm.model, vocab), int8=False) for n in ("live", "fresh"))
    hidden = target.prefill("r", PROMPT, sampling, seed=1)
    live.begin("r", PROMPT, hidden, sampling, seed=2)
    rounds = []
    for _ in range(16):
        draft = live.propose("r", 4)
        verified = target.verify("r", draft)
        rounds.append((verified, live.observe("r", verified)))
    accepted = [v.accepted for v, _ in rounds]
    assert sum(a < 4 for a in accepted) >= 3 and sum(accepted) >= 1, "needs both acceptances and rejections"
    rows = torch.cat([dense(obs) for _, obs in rounds])
    assert all(obs.awake.all() for _, obs in rounds)
    torch.testing.assert_close(rows.sum(-1), torch.ones(len(rows)))
    assert rows[:, 12:].abs().sum() == 0

    whole = Verified([t for v, _ in rounds for t in v.tokens], 0, 0, torch.cat([v.probs for v, _ in rounds]),
                     torch.cat([v.hidden for v, _ in rounds]))
    fresh.begin("f", PROMPT, hidden, sampling, seed=2)
    torch.testing.assert_close(dense(fresh.observe("f", whole)), rows, atol=1e-5, rtol=1e-5)
    next_live, next_fresh = live.propose("r", 3), fresh.propose("f", 3)
    torch.testing.assert_close(next_live.probs[0], next_fresh.probs[0], atol=1e-5, rtol=1e-5)
    if sampling.greedy:
        assert next_live.tokens == next_fresh.tokens


def test_eagle_without_a_target_state_sleeps_until_it_has_one(tiny_lm):
    target = HFTarget(tiny_lm(0, vocab=16))
    drafter = EagleDrafter.single("e", random_head(target.lm.model), frozen_from_model(target.lm.model, torch.arange(16)))
    drafter.begin("r", [3], target.prefill("r", [3], Sampling(), 0), Sampling(), 0)
    assert not drafter.ready("r")
    observation = drafter.observe("r", target.verify("r", drafter.propose("r", 0)))
    assert observation.awake.tolist() == [False] and dense(observation).abs().sum() == 0
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


def test_datastore_lookups_equal_a_brute_force_scan_of_the_documents():
    """The compiled suffix-array lookups against scanning every document for the context's longest
    suffix (min_ngram..max_ngram tokens) that something follows, on random contexts."""
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 6, size=rng.integers(5, 40)).tolist() for _ in range(30)]
    store = Datastore.build(docs)

    def scan(context, min_ngram, max_ngram):
        for n in range(min(max_ngram, len(context)), min_ngram - 1, -1):
            followers = [doc[i + n] for doc in docs for i in range(len(doc) - n) if doc[i:i + n] == context[-n:]]
            if followers:
                return dict(zip(*np.unique(followers, return_counts=True)))
        return None

    for _ in range(300):
        context = rng.integers(0, 7, size=rng.integers(1, 12)).tolist()  # 6 never occurs in a document
        min_ngram = int(rng.integers(1, 4))
        expected = scan(context, min_ngram, 8)
        found = store.continuations(context, min_ngram, 8)
        assert (found is None) == (expected is None), context
        if expected is not None:
            assert dict(zip(*found)) == expected
            top = max(expected.values())
            assert store.most_frequent(context, min_ngram, 8) == min(t for t, c in expected.items() if c == top)
        else:
            assert store.most_frequent(context, min_ngram, 8) is None

    def top(context, min_ngram):  # the scan's most frequent continuation, the lowest id among equals; -1: none
        counts = scan(context, min_ngram, 8)
        return -1 if counts is None else min(t for t, c in counts.items() if c == max(counts.values()))

    # many texts' positions in one call (a vLLM step's): each lookup sees its own text only
    for min_ngram in (1, 2):
        texts = [rng.integers(0, 7, size=rng.integers(1, 12)).tolist() for _ in range(40)]
        ends = [list(range(1, len(text) + 1)) for text in texts]
        assert store.most_frequent_each(texts, ends, min_ngram, 8).tolist() == [
            top(text[:end], min_ngram) for text, text_ends in zip(texts, ends) for end in text_ends]


def test_frequent_contexts_keep_the_answer_a_scan_gives():
    """Contexts that occur KNOWN_FROM times or more keep their most frequent continuation once
    counted: asked again, and asked inside longer contexts that end in them, the lookups still give
    what scanning the documents gives."""
    rng = np.random.default_rng(1)
    docs = [[1, 2, int(rng.choice(4, p=[0.1, 0.2, 0.3, 0.4]))] for _ in range(3 * KNOWN_FROM)] + [[5, 1, 2, 0]]
    store = Datastore.build(docs)

    def scan(context):  # the most frequent token after the longest of the context's suffixes that occurs
        for n in range(len(context), 0, -1):
            followers = [doc[i + n] for doc in docs for i in range(len(doc) - n) if doc[i:i + n] == context[-n:]]
            if followers:
                tokens, counts = np.unique(followers, return_counts=True)
                return int(tokens[counts == counts.max()].min())
        return None

    for context in ([1, 2], [1, 2], [7, 1, 2], [5, 1, 2], [2, 1, 2], [1, 2]):
        assert store.most_frequent(context, 1, 8) == scan(context), context
    assert len(store.known) >= 1  # the frequent context [1, 2] was kept
    assert store.most_frequent_each([[7, 1, 2, 5, 1, 2]], [[3, 6]], 1, 8).tolist() == [scan([7, 1, 2]), scan([5, 1, 2])]


def test_datastore_drafter_proposes_the_continuation_and_sleeps_on_unseen_text():
    drafter = DatastoreDrafter("store", Datastore.build(DOCS), vocab=16, max_ngram=8, min_ngram=2)
    drafter.begin("r", [0, 5, 6, 7], None, Sampling(), 0)
    assert drafter.ready("r")
    assert drafter.propose("r", 5).tokens == [8, 3]  # 8, then a 1:1 tie broken to the lower id, then nothing follows
    observation = drafter.observe("r", Verified([8, 9, 4, 4], 1, 2, torch.zeros(4, 16), torch.zeros(4, 1)))
    # 8 follows [5, 6, 7]; after [5, 6, 7, 8] greedy q is 3 (the tie); 9 ends a document; [9, 4] is unseen
    assert observation.awake.tolist() == [True, True, False, False]
    assert observation.tokens.tolist() == [8, 3, -1, -1]  # greedy: point masses, no rows
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
    reference = Engine(EngineConfig(target=TargetConfig(model="tiny:0", dtype="float32"), drafters=[]))
    target_only = {p: reference.generate(p, 48, speculate=False) for p in PROMPTS}
    Datastore.build([g.tokens for g in target_only.values()]).save(tmp / "store.npz")
    drafters = [DrafterConfig(name="eagle", kind="eagle", artifact=str(tmp / "head.safetensors")),
                DrafterConfig(name="store", kind="datastore", artifact=str(tmp / "store.npz"), max_ngram=8, min_ngram=2),
                DrafterConfig(name="lookup", kind="prompt_lookup")]
    return Engine(EngineConfig(target=TargetConfig(model="tiny:0", dtype="float32"), drafters=drafters, k=4, threads=1)), target_only


@pytest.mark.parametrize("selector", [SelectorConfig(name="fixed", drafter="eagle"), SelectorConfig(name="fixed", drafter="store"),
                                      SelectorConfig(name="hedgespec-sleeping")], ids=lambda s: s.drafter or s.name)
def test_greedy_output_is_byte_identical_with_the_new_drafters(pool_engine, selector):
    engine, target_only = pool_engine
    engine.use_selector(selector)
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
        engine.use_selector(SelectorConfig(name="fixed", drafter=drafter.name))
        live = [engine.generate(prompt, 48).mat for prompt in PROMPTS]
        assert replayed[drafter.name] == pytest.approx(live), drafter.name
    assert len(set(sum(replayed.values(), []))) > 3  # the drafters really differ


# ---- the scores credit each drafter with what it would have drafted ----

def test_prompt_lookup_drafts_the_chain_its_scores_credit():
    """On [1, 2, 1, 2, 1, 2] the scores give every position a hit, so a round with K = 5 must draft
    five tokens: re-matching after each drafted token goes on past the end of the history."""
    drafter = PromptLookupDrafter("lookup", vocab=8)
    drafter.begin("r", [1, 2, 1, 2, 1, 2], None, Sampling(), 0)
    assert drafter.propose("r", 5).tokens == [1, 2, 1, 2, 1]
    assert drafter.propose("r", 5).tokens == [1, 2, 1, 2, 1]  # proposing left the history as it was
    observation = drafter.observe("r", Verified([1, 2, 1], 2, 5, torch.zeros(3, 8), torch.zeros(3, 1)))
    assert observation.tokens.tolist() == [1, 2, 1] and observation.awake.all()


@pytest.mark.parametrize("background", [False, True])
def test_the_awake_flags_offered_are_current_when_scoring_is_synchronous(background):
    """Prompt lookup has nothing to copy after the prompt [1, 2, 3, 4]; once a round commits 1, it has
    (1 was followed by 2). Scored synchronously (the vLLM proposer) the next choice sees that at
    once; scored on the worker, the flags stay a round behind (decode.Learning's fixed lag)."""
    pool = LocalPool([PromptLookupDrafter("lookup", vocab=16)], background=background)
    pool.begin("r", [1, 2, 3, 4], None, Sampling(), 0)
    assert pool.awake("r").tolist() == [False]
    pool.evaluate("r", Verified([1], 0, 0, None, torch.zeros(1, 1))).result()
    assert pool.awake("r").tolist() == [not background]
    pool.evaluate("r", Verified([9], 0, 0, None, torch.zeros(1, 1))).result()  # 9 is new: nothing to copy
    assert pool.awake("r").tolist() == [False] if not background else [True]
    pool.release("r")


@pytest.mark.parametrize("background", [False, True])
def test_tokens_taken_in_without_scoring_move_the_drafters_and_their_flags(background):
    """LocalPool.extend (the vLLM proposer's held-back tokens): no round is scored, and the drafters'
    next proposals and flags are those after the tokens. After [1, 2, 3, 4] prompt lookup has nothing
    to copy; after [1, 2, 3, 4] + [9, 1] it copies what followed 1 (2, 3, 4, 9, 1, ...); the store's
    only document follows [9, 1] with 7, 7 and nothing follows [4, 9] there."""
    lookup = PromptLookupDrafter("lookup", vocab=16)
    store = DatastoreDrafter("store", Datastore.build([[8, 9, 1, 7, 7]]), vocab=16, max_ngram=8, min_ngram=2)
    pool = LocalPool([lookup, store], background=background)
    pool.begin("r", [1, 2, 3, 4], None, Sampling(), 0)
    assert pool.awake("r").tolist() == [False, False]
    pool.extend("r", [9, 1])
    assert pool.awake("r").tolist() == [True, True]
    assert pool.evaluated("r") == 0  # nothing was scored
    assert pool.propose("r", 0, 5).tokens == [2, 3, 4, 9, 1]
    assert pool.propose("r", 1, 5).tokens == [7, 7]
    scores = pool.evaluate("r", Verified([2, 5], 1, 0, None, torch.zeros(2, 1))).result()
    # at 2: lookup drafted 2 (a hit), the store 7; at 5, after [.., 1, 2]: lookup 3, the store sleeps ([1, 2] unseen)
    assert scores.gamma.tolist() == [[1.0, 0.0], [0.0, 0.0]]
    assert scores.awake.tolist() == [[True, True], [True, False]]
    pool.release("r")


def test_rounds_of_many_requests_scored_together_equal_each_position_looked_up_afresh():
    """Without the worker (the vLLM proposer) the rounds handed over are queued and scored together at
    the first read, each drafter observing one round per request in one call; a request's second
    round, queued behind its first, is scored after it. Reference: at each committed position a
    datastore drafter begun afresh on the text before it, its flag and its one-token proposal."""
    rng = np.random.default_rng(2)
    docs = [rng.integers(0, 5, size=30).tolist() for _ in range(6)]
    make = lambda: [DatastoreDrafter("long", Datastore.build(docs), vocab=8, max_ngram=8, min_ngram=3),  # noqa: E731
                    DatastoreDrafter("short", Datastore.build(docs[:3]), vocab=8, max_ngram=2, min_ngram=1)]
    pool = LocalPool(make(), background=False)
    prompts = {r: rng.integers(0, 6, size=rng.integers(1, 9)).tolist() for r in "abcd"}  # 5 occurs in no document
    rounds = {r: [rng.integers(0, 6, size=rng.integers(1, 6)).tolist() for _ in range(1 + (r in "ac"))] for r in "abcd"}
    for r, prompt in prompts.items():
        pool.begin(r, prompt, None, Sampling(), 0)
    pool.extend("d", [0, 1])  # taken in unscored (the gate's held-back tokens): its round starts after them
    prompts["d"] += [0, 1]
    futures = {r: [pool.evaluate(r, Verified(t, len(t) - 1, 0, None, torch.zeros(len(t), 1))) for t in ts]
               for r, ts in rounds.items()}
    assert len(pool.queued) == 6  # nothing scored before the first read
    for r in "abcd":
        text = list(prompts[r])
        for tokens, future in zip(rounds[r], futures[r]):
            scores = future.result()
            for i, token in enumerate(tokens):
                for j, fresh in enumerate(make()):
                    fresh.begin("x", text, None, Sampling(), 0)
                    proposal = fresh.propose("x", 1).tokens
                    assert scores.awake[i, j] == bool(proposal) and scores.gamma[i, j] == (proposal == [token]), (r, i, j)
                text.append(token)
    for r in "abcd":
        pool.release(r)
    assert pool.active == 0


class ScriptedTarget:
    """A target whose greedy continuation is a fixed script: verification accepts the draft's
    longest prefix that follows the script and commits one more scripted token."""

    def __init__(self, script: list[int], vocab: int):
        self.script, self.vocab, self.position = script, vocab, {}

    def prefill(self, request_id, tokens, sampling, seed):
        self.position[request_id] = len(tokens)
        return torch.zeros(len(tokens) - 1, 4)

    def verify(self, request_id, draft):
        at = self.position[request_id]
        truth = self.script[at:at + len(draft.tokens) + 1]
        accepted = next((i for i, (d, t) in enumerate(zip(draft.tokens, truth)) if d != t), len(draft.tokens))
        committed = truth[:accepted + 1]
        self.position[request_id] += len(committed)
        return Verified(committed, accepted, len(draft.tokens), torch.nn.functional.one_hot(torch.tensor(committed), self.vocab).float(),
                        torch.zeros(len(committed), 4))

    def release(self, request_id):
        self.position.pop(request_id, None)


# periods of 3 and 4 tokens, with breaks: chains of every length get accepted and rejected
SCRIPT = [5, 6, 7, 5, 6, 7, 5, 6] + [7, 5, 6, 7, 5, 9, 8, 9, 8, 9, 8, 9, 10, 11, 12, 13, 10, 11, 12, 13, 10, 11, 5, 6, 7,
                                     5, 6, 9, 8, 10, 11, 12, 13, 10, 11, 12, 14, 5, 6, 7, 5, 6, 7, 5, 6, 7, 5, 12] * 2


@pytest.mark.parametrize("kind", ["prompt_lookup", "datastore"])
def test_scored_acceptance_length_equals_what_the_round_committed(kind):
    """Greedy: at the start of every round the drafter played with the full budget, the acceptance
    length its scores give there (the EAL loss of that position) equals the tokens the target's
    verification committed in that round."""
    from hedgespec.decode import Request, decode
    from hedgespec.feedback import DelayedLosses
    from hedgespec.learners.selectors import make_selector
    from hedgespec.text import TextStream
    k, vocab, prompt = 5, 16, SCRIPT[:8]
    drafter = (PromptLookupDrafter("d", vocab, max_ngram=3, min_ngram=1) if kind == "prompt_lookup" else
               DatastoreDrafter("d", Datastore.build([SCRIPT[:40]]), vocab, max_ngram=4, min_ngram=1))
    stream = TextStream(loading.load_tokenizer("tiny:0"), len(SCRIPT) - len(prompt), [], set())
    generation = decode(Request(prompt, stream.max_tokens), ScriptedTarget(SCRIPT, vocab), LocalPool([drafter]),
                        make_selector("fixed", 1, k, index=0), stream, k, DelayedLosses(1, k, "eal"))
    assert generation.tokens == SCRIPT[len(prompt):]
    losses = {m.position: m for m in generation.losses}
    start, committed = 0, []
    for r in generation.rounds:
        if r.drafted and start + k + 1 < len(generation.tokens):  # drafted, and its window ends inside the text
            assert (1 - losses[start].losses[0]) * (k + 1) == pytest.approx(r.committed), start
            committed.append(r.committed)
        start += r.committed
    assert len(committed) >= 8 and len(set(committed)) >= 3, committed  # short and long acceptances both seen


def test_stacked_heads_compute_what_each_head_computes(tiny_lm):
    """One call over three heads gives each head's own forward, with and without a cache (float32
    products: exact up to rounding; int8 ones are checked for agreement in the next test)."""
    from hedgespec.drafters.head_stack import StackedHeads
    model = tiny_lm(0, vocab=16).model
    heads = [random_head(model, seed) for seed in (1, 2, 3)]
    stack = StackedHeads(heads, int8=False)
    h = heads[0].spec.hidden
    features, embeds = torch.randn(5, h), torch.randn(5, h)
    out, cache = stack.forward(slice(0, 3), features.expand(3, -1, -1), embeds.expand(3, -1, -1), torch.arange(5), None)
    more, _ = stack.forward(slice(0, 3), features[:2].expand(3, -1, -1), embeds[:2].expand(3, -1, -1),
                            torch.arange(5, 7), cache)
    for j, head in enumerate(heads):
        with torch.inference_mode():
            alone, alone_cache = head(features[None], embeds[None], torch.arange(5))
            alone_more, _ = head(features[None, :2], embeds[None, :2], torch.arange(5, 7), alone_cache)
        torch.testing.assert_close(out[j], alone[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(more[j], alone_more[0], atol=1e-5, rtol=1e-5)
    one, _ = stack.forward(slice(1, 2), features[None], embeds[None], torch.arange(5), None)
    torch.testing.assert_close(one[0], out[1], atol=1e-5, rtol=1e-5)
    quantized = StackedHeads(heads, int8=True)
    if quantized.int8:  # int8 products: the same predictions up to quantisation
        approx, _ = quantized.forward(slice(0, 3), features.expand(3, -1, -1), embeds.expand(3, -1, -1), torch.arange(5), None)
        cosine = F.cosine_similarity(approx.flatten(1), out.flatten(1))
        assert (cosine > 0.99).all(), cosine


def test_heads_of_one_stack_keep_their_own_drafts_and_state(tiny_lm):
    """Heads sharing a stack draft and score exactly as each head alone does."""
    from hedgespec.drafters.eagle import EagleStack
    target = HFTarget(tiny_lm(0, vocab=16, layers=2))
    heads, vocab = [random_head(target.lm.model, seed) for seed in (2, 4)], torch.arange(12)
    frozen = frozen_from_model(target.lm.model, vocab)
    stack = EagleStack(heads, frozen, int8=False)
    together = [EagleDrafter(f"h{j}", stack, j) for j in range(2)]
    alone = [EagleDrafter.single(f"a{j}", head, frozen, int8=False) for j, head in enumerate(heads)]
    hidden = target.prefill("r", PROMPT, Sampling(), seed=1)
    for drafter in together + alone:
        drafter.begin("r", PROMPT, hidden, Sampling(), 0)
    for _ in range(6):
        drafts = [d.propose("r", 3) for d in together + alone]
        assert drafts[0].tokens == drafts[2].tokens and drafts[1].tokens == drafts[3].tokens
        verified = target.verify("r", drafts[0])
        rows = [dense(d.observe("r", verified)) for d in together + alone]
        torch.testing.assert_close(rows[0], rows[2], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(rows[1], rows[3], atol=1e-5, rtol=1e-5)
    for drafter in together:
        drafter.release("r")
    assert not stack.requests
