"""The vLLM backend's proposer driven as vLLM's model runner drives it (hedgespec.vllm_proposer), with
no vLLM: a stand-in runner names the batch's requests, and a greedy stand-in target commits, each
step, the longest prefix of the draft that matches its own fixed text, and one token more (vLLM's
rule). Runs in the default suite; tests/test_vllm.py runs the real engine."""
from types import SimpleNamespace

import numpy as np
import pytest

from hedgespec import vllm_control, vllm_proposer
from hedgespec.arms import StepCosts
from hedgespec.bench.proposer import StandInRunner, verify_greedy
from hedgespec.config import EngineConfig, SelectorConfig
from hedgespec.load_gate import ALL, COPY, NONE
from hedgespec.models import loading
from hedgespec.vllm_engine import PROPOSER_ENV

K = 4
PERIOD = [5, 6, 7]


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def proposer(monkeypatch):
    config = EngineConfig.model_validate({"target": {"model": "tiny:0"}, "k": K,
                                          "drafters": [{"name": "lookup", "kind": "prompt_lookup", "max_ngram": 3}],
                                          "selector": {"name": "hedgespec", "loss": "eal"}})
    monkeypatch.setenv(PROPOSER_ENV, config.model_dump_json())
    clock = Clock()
    monkeypatch.setattr(vllm_proposer.time, "perf_counter", clock)  # the pool's draft timings too
    vocab = loading.vocab_size("tiny:0")
    made = vllm_proposer.HedgeSpecProposer(SimpleNamespace(
        model_config=SimpleNamespace(get_vocab_size=lambda: vocab, max_model_len=512)), clock)
    runner = StandInRunner()
    runner.attach(made)
    return made, runner, clock


def drive(proposer, runner, clock, texts: dict[str, list[int]], prompt_len: int, steps: int,
          step_s=lambda tokens: 0.1, log: list | None = None):
    """vLLM's steps over the batch: returns every draft the proposer gave, per request. A step
    takes step_s(the tokens it verifies) on the clock (`log` gets each step's batch and those
    tokens per request). A request leaves the batch after the step that committed its EOS or its
    max_tokens-th token, as vLLM's scheduler drops it (the proposer has seen that step)."""
    eos = loading.eos_ids("tiny:0")
    histories = {r: t[:prompt_len + 1] for r, t in texts.items()}  # the prefill step committed one token
    sampled = {r: [t[prompt_len]] for r, t in texts.items()}
    drafts = {r: [] for r in texts}
    for _ in range(steps):
        batch = list(runner.input_batch.req_ids)
        if not batch:
            break
        width = max(len(histories[r]) for r in batch)
        token_ids = np.zeros((len(batch), width + 8), dtype=np.int64)
        for i, r in enumerate(batch):
            token_ids[i, :len(histories[r])] = histories[r]
        out = proposer.propose([sampled[r] for r in batch], np.array([len(histories[r]) for r in batch]), token_ids)
        verifying = {}
        for r, draft in zip(batch, out):
            if eos & set(sampled[r]) or len(histories[r]) - prompt_len >= runner.requests[r].sampling_params.max_tokens:
                runner.remove(r)
                continue
            verifying[r] = len(draft) + 1
        clock.now += step_s(sum(verifying.values()))
        if log is not None:
            log.append(verifying)
        for r, draft in zip(batch, out):
            if r not in verifying:
                continue
            drafts[r].append(draft)
            sampled[r] = verify_greedy(draft, texts[r], len(histories[r]))
            histories[r] += sampled[r]
    return drafts, histories


def test_drafts_are_prompt_lookups_and_rounds_account_for_every_token(proposer):
    proposer, runner, clock = proposer
    truth = PERIOD * 40
    runner.add("a-00000001", max_tokens=200)
    drafts, histories = drive(proposer, runner, clock, {"a-00000001": truth}, prompt_len=9, steps=6)
    # a periodic text: prompt lookup's next K tokens are the text's own next K, so every draft is whole and right
    position = 10
    for draft in drafts["a-00000001"]:
        assert draft == truth[position:position + K]
        position += K + 1
    assert proposer.active > 0
    runner.remove("a-00000001")
    rounds = proposer.release(["a"])["a"]  # vLLM's id carries a suffix after the caller's
    assert proposer.active == 0
    committed = [r[3] for r in rounds]
    # the prefill's token, then the first five steps' rounds (the sixth step's commitment was not yet handed back)
    assert sum(committed) == len(histories["a-00000001"]) - 9 - (K + 1)
    assert committed == [1] + [K + 1] * 5 and [r[2] for r in rounds] == [0] + [K] * 5


def test_a_step_that_commits_nothing_to_a_request_leaves_no_draft_in_its_next_round(proposer):
    proposer, runner, clock = proposer
    truth, prompt_len = PERIOD * 40, 9
    runner.add("a", max_tokens=200)
    history = truth[:prompt_len]

    def step(committed: list[int]) -> list[int]:
        history.extend(committed)
        token_ids = np.zeros((1, 400), dtype=np.int64)
        token_ids[0, :len(history)] = history
        clock.now += 0.1
        return proposer.propose([committed], np.array([len(history)]), token_ids)[0]

    draft = step(truth[prompt_len:prompt_len + 1])  # the prefill's token
    assert len(draft) == K
    draft = step(verify_greedy(draft, truth, len(history)))  # K accepted and one more
    assert step([]) == []  # vLLM committed nothing to it in this step (its draft went unverified)
    draft = step(verify_greedy([], truth, len(history)))  # so this step verified no draft: one token
    assert len(draft) == K
    runner.remove("a")
    rounds = proposer.release(["a"])["a"]
    # (drafted, accepted, committed) per round: the last round drafted nothing (not the unverified K)
    assert [r[1:4] for r in rounds] == [(0, 0, 1), (K, K, K + 1), (0, 0, 1)]


def test_step_costs_recover_a_linear_step_and_share_its_fixed_part():
    costs = StepCosts()
    for tokens in (6, 1, 11, 3, 16):
        costs.record(tokens, 0.040 + 0.002 * tokens)
    assert costs.line() == pytest.approx((0.040, 0.002))
    assert costs.share(6, batch=4) == pytest.approx(0.040 / 4 + 0.002 * 6)
    same = StepCosts()
    same.record(6, 0.05)
    same.record(6, 0.05)
    assert same.line() == pytest.approx((0.05, 0.0))  # one size seen: no slope yet


def test_a_stalled_step_counts_as_twice_the_line_once_it_is_settled():
    costs = StepCosts()
    sizes = [6, 1, 11, 3, 16] * 3
    for tokens in sizes:
        costs.record(tokens, 0.040 + 0.002 * tokens)
    costs.record(6, 1.0)  # another process held the core: 19x the step's 0.052 s
    # the reference: a weighted least-squares line through the steps, the stalled one at 2 x 0.052 s
    x = np.array(sizes + [6])
    y = np.append(0.040 + 0.002 * x[:-1], 2 * 0.052)
    weights = StepCosts.DECAY ** np.arange(len(x))[::-1]
    slope, intercept = np.polyfit(x, y, 1, w=np.sqrt(weights))
    assert costs.line() == pytest.approx((intercept, slope))
    assert costs.line()[1] == pytest.approx(0.002, abs=0.001)  # uncapped, the slope would turn negative and read 0


def test_a_step_is_charged_its_fixed_part_shared_and_each_request_its_own_tokens(proposer):
    proposer, runner, clock = proposer
    fixed, per_token = 0.2, 0.01
    runner.add("a", max_tokens=12)  # its drafts, then its end, change the step's size and the batch's
    runner.add("b", max_tokens=200, speculate=False)
    runner.add("c", max_tokens=200)
    texts = {"a": PERIOD * 40, "b": list(range(8, 60)), "c": PERIOD * 40}
    log = []
    drafts, _ = drive(proposer, runner, clock, texts, prompt_len=9, steps=6,
                      step_s=lambda tokens: fixed + per_token * tokens, log=log)
    assert all(d == [] for d in drafts["b"]), "a request that asked for no speculation is never drafted for"
    rounds = {r: proposer.release([r])[r] for r in ("a", "c")}
    assert proposer.release(["b"]) == {}
    # plain values only: vLLM's RPC encoder refuses a numpy scalar, and that kills the engine's output thread
    assert {type(v) for rs in rounds.values() for x in rs for v in x} <= {str, int, float, type(None)}
    sizes = [sum(step.values()) for step in log]
    assert len(set(sizes)) > 1
    fitted = next(i for i in range(len(sizes)) if len(set(sizes[:i + 1])) > 1)  # two sizes: the line is exact
    for r in ("a", "c"):
        assert rounds[r][0][6] == 0.0  # the prefill step prices no arm
        # round i + 1 of a request was verified in step i
        for step, round_ in zip(log[fitted:], rounds[r][fitted + 1:]):
            assert round_[6] == pytest.approx(fixed / len(step) + per_token * step[r])


def test_a_request_ends_at_its_eos_and_at_max_tokens(proposer):
    proposer, runner, clock = proposer
    eos = min(loading.eos_ids("tiny:0"))
    ends_at_eos = PERIOD * 4 + [eos] + PERIOD * 10
    runner.add("eos", max_tokens=200)
    runner.add("short", max_tokens=6)
    drive(proposer, runner, clock, {"eos": ends_at_eos, "short": PERIOD * 40}, prompt_len=6, steps=5)
    # both ended in the proposer at their last step, before vLLM dropped them from the batch
    assert not proposer.live and not runner.input_batch.req_ids
    rounds = proposer.release(["eos", "short"])
    assert sum(r[3] for r in rounds["eos"]) == len(PERIOD * 4) + 1 - 6  # up to and with the EOS
    assert sum(r[3] for r in rounds["short"]) == 6
    assert proposer.active == 0


def test_a_request_that_leaves_the_batch_unfinished_is_ended_at_the_next_step(proposer):
    proposer, runner, clock = proposer
    runner.add("stays", max_tokens=200)
    runner.add("aborted", max_tokens=200)
    texts = {"stays": PERIOD * 40, "aborted": PERIOD * 40}
    drive(proposer, runner, clock, texts, prompt_len=9, steps=2)
    assert set(proposer.live) == {"stays", "aborted"}
    runner.remove("aborted")  # vLLM aborted it (the client went away): no EOS, no max_tokens
    drive(proposer, runner, clock, {"stays": PERIOD * 40}, prompt_len=9, steps=1)
    assert set(proposer.live) == {"stays"} and "aborted" in proposer.finished
    assert proposer.release(["aborted"])["aborted"] and "aborted" not in proposer.finished


def test_what_ended_requests_learned_is_handed_out_and_a_merged_prior_adopted(proposer):
    """The worker RPCs behind the Selector's sharing (deployments/vllm_target.py): a warm-starting
    request that ended is this engine's share; a merged prior is what the next request starts from."""
    proposer, runner, clock = proposer
    worker = type("Worker", (vllm_control.ProposerControl,), {"model_runner": SimpleNamespace(drafter=proposer)})()
    warm = SelectorConfig(name="hedgespec", loss="eal", warm_start=True)
    runner.add("a", max_tokens=12, selector=warm)
    drive(proposer, runner, clock, {"a": PERIOD * 40}, prompt_len=9, steps=6)
    proposer.release(["a"])
    [(key, (count, mean))] = worker.hedgespec_learned().items()
    assert count == 1 and mean == [1.0]  # one drafter, the MAT objective: one arm
    worker.hedgespec_adopt({key: (7, [1.0])})
    runner.add("b", max_tokens=12, selector=warm)
    drive(proposer, runner, clock, {"b": PERIOD * 40}, prompt_len=9, steps=1)
    assert proposer.live["b"].speculation.learning.selector.queries == 7
    assert worker.hedgespec_learned()[key][0] == 1  # still only its own


def test_a_warm_start_prior_is_kept_per_load(proposer):
    """Requests that ran two at a time leave a prior for requests that start two at a time, not for
    one that starts alone: what pays under load (the time objective's prices) is not what pays alone."""
    proposer, runner, clock = proposer
    warm = SelectorConfig(name="hedgespec", loss="eal", warm_start=True)
    for request_id in ("a", "b"):
        runner.add(request_id, max_tokens=12, selector=warm)
    drive(proposer, runner, clock, {"a": PERIOD * 40, "b": PERIOD * 40}, prompt_len=9, steps=6)
    proposer.release(["a", "b"])
    runner.add("alone", max_tokens=12, selector=warm)
    drive(proposer, runner, clock, {"alone": PERIOD * 40}, prompt_len=9, steps=1)
    assert proposer.live["alone"].speculation.learning.selector.queries == 0
    runner.remove("alone")  # aborted: it ends in the proposer at the next step
    for request_id in ("c", "d"):
        runner.add(request_id, max_tokens=12, selector=warm)
    drive(proposer, runner, clock, {"c": PERIOD * 40, "d": PERIOD * 40}, prompt_len=9, steps=1)
    assert proposer.live["c"].speculation.learning.selector.queries == 2


def test_steps_the_gate_holds_back_are_caught_up_at_the_next_round_played(proposer, monkeypatch):
    """A step without speculation runs no round; its tokens are caught up when the next round is
    played (the last K + 1 are scored; the drafters take the ones before in unscored: the next
    test), so the drafter's next draft is the text's own continuation (drafting from a history
    that missed them would be off the period), and the rounds still account for every token."""
    proposer, runner, clock = proposer
    # seven steps held back in a row: more tokens than a round holds (K + 1) wait for the next round
    played = [True, False, False, True, False, True, True] + [False] * 7 + [True, True]
    schedule = iter(played + [True] * 20)
    monkeypatch.setattr(proposer.gate, "mode", lambda load: ALL if next(schedule) else NONE)
    truth = PERIOD * 40
    runner.add("a", max_tokens=60)
    runner.add("b", max_tokens=60)  # the gate decides for batches of two or more
    drafts, histories = drive(proposer, runner, clock, {"a": truth, "b": truth}, prompt_len=9, steps=len(played))
    position = 10
    for draft in drafts["a"]:
        assert draft == truth[position:position + len(draft)]
        position += len(draft) + 1
    assert [len(d) > 0 for d in drafts["a"]] == played
    rounds = proposer.release(["a", "b"])["a"]
    assert sum(r[3] for r in rounds) == len(histories["a"]) - 9 - (len(drafts["a"][-1]) + 1)
    assert [r[0] is None for r in rounds[1:]] == [len(d) == 0 for d in drafts["a"][:-1]]


def test_a_long_stretch_held_back_is_not_scored_and_the_drafters_keep_up(proposer, monkeypatch):
    """Held back for many steps, a request's drafters take the tokens in without observing and
    scoring them (their next draft is still the text's continuation), the learner gets no loss for
    the positions whose windows need the skipped tokens, and the last K + 1 are scored."""
    proposer, runner, clock = proposer
    held = 40
    played = [True, True] + [False] * held + [True] * 4
    schedule = iter(played + [True] * 20)
    monkeypatch.setattr(proposer.gate, "mode", lambda load: ALL if next(schedule) else NONE)
    truth = PERIOD * 60
    runner.add("a", max_tokens=200)
    runner.add("b", max_tokens=200)
    drafts, histories = drive(proposer, runner, clock, {"a": truth, "b": truth}, prompt_len=9, steps=len(played))
    position = 10
    for draft in drafts["a"]:
        assert draft == truth[position:position + len(draft)]
        position += len(draft) + 1
    speculation = proposer.live["a"].speculation
    delivered = [m.position for m in speculation.learning.delivered]
    gaps = np.diff(delivered)
    assert (gaps >= 1).all() and gaps.max() >= held - (K + 1)  # the skipped positions, and the window before them
    assert delivered[-1] >= speculation.position - (K + 1) - K  # the scored tail and the rounds after it
    rounds = proposer.release(["a", "b"])["a"]
    assert sum(r[3] for r in rounds) == len(histories["a"]) - 9 - (len(drafts["a"][-1]) + 1)


def test_a_request_alone_is_not_gated(proposer, monkeypatch):
    """Alone, a request's learner prices its whole step (no shared part): the gate is not asked."""
    proposer, runner, clock = proposer
    monkeypatch.setattr(proposer.gate, "mode", lambda load: NONE)
    runner.add("a", max_tokens=60)
    drafts, _ = drive(proposer, runner, clock, {"a": PERIOD * 40}, prompt_len=9, steps=6)
    assert all(drafts["a"])


def test_copy_steps_draft_each_text_s_own_repeats_without_rounds_and_the_next_round_catches_up(proposer, monkeypatch):
    """In COPY steps no round is played (the learners are not asked); a request drafts what followed
    the latest earlier occurrence of its text's last n-gram (vLLM's n-gram settings, min 2 tokens):
    a periodic text drafts every step, one whose first 30 tokens are distinct drafts nothing until
    its text starts over. Back in ALL steps the rounds resume on the whole text; the rounds report
    the copies and account for every token."""
    proposer, runner, clock = proposer
    schedule = iter([COPY] * 30 + [ALL] * 10)
    monkeypatch.setattr(proposer.gate, "mode", lambda load: next(schedule))
    asked = []
    original = vllm_proposer.Speculation.draft
    monkeypatch.setattr(vllm_proposer.Speculation, "draft",
                        lambda speculation, budget: asked.append(speculation.request_id) or original(speculation, budget))
    fresh = list(range(8, 38))  # 30 distinct tokens, then the same 30 again
    texts = {"copy": PERIOD * 100, "fresh": fresh * 5}
    for request_id in texts:  # both stay in the batch for the 40 steps: a request alone is not gated
        runner.add(request_id, max_tokens=250)
    drafts, histories = drive(proposer, runner, clock, texts, prompt_len=9, steps=40)
    assert asked.count("copy") == asked.count("fresh") == 10  # the ALL steps' rounds only
    assert all(drafts["copy"])
    drafted_at, position = [], 10
    for draft in drafts["fresh"]:
        assert draft == texts["fresh"][position:position + len(draft)]  # every draft is the text's continuation
        drafted_at.append(position)
        position += len(draft) + 1
    first = next(i for i, d in enumerate(drafts["fresh"]) if d)
    assert drafted_at[first] == 30 + proposer.config.target.vllm.ngram_min and all(drafts["fresh"][first:])
    for request_id in texts:
        rounds = proposer.release([request_id])[request_id]
        assert sum(r[3] for r in rounds) == len(histories[request_id]) - 9 - (len(drafts[request_id][-1]) + 1)
        copied = [r for r in rounds[1:31] if r[1]]  # the rounds of the steps that verified COPY's drafts
        assert copied and all(r[0] == COPY and r[2] == r[1] for r in copied)
    assert proposer.active == 0


@pytest.mark.parametrize("regime", ["fixed", "compute"])
def test_the_gate_stops_speculating_where_steps_are_compute_bound_and_drafts_miss(proposer, regime):
    """Against a stand-in engine whose faster mode is known from its step time alone: a step that
    costs mostly a fixed part (two requests, a periodic text every draft of which is accepted) pays
    for drafts; a step that costs only its tokens, over a text where most drafts miss, does not."""
    proposer, runner, clock = proposer
    rng = np.random.default_rng(0)
    if regime == "fixed":
        texts, step_s = {"a": PERIOD * 200, "b": PERIOD * 200}, lambda tokens: 0.05 + 0.001 * tokens
    else:  # the period, broken every fourth token: prompt lookup drafts, and is rejected after a token or two
        noisy = [t if i % 4 else int(rng.integers(8, 200)) for i, t in enumerate(PERIOD * 200)]
        texts, step_s = {r: noisy for r in "abcd"}, lambda tokens: 0.01 * tokens
    for request_id in texts:
        runner.add(request_id, max_tokens=400)
    drafts, _ = drive(proposer, runner, clock, texts, prompt_len=9, steps=96, step_s=step_s)
    later = [len(d) > 0 for request_drafts in drafts.values() for d in request_drafts[48:]]
    share = sum(later) / len(later)
    assert share >= 0.85 if regime == "fixed" else share <= 0.15


@pytest.mark.parametrize("regime", ["fixed", "compute"])
def test_a_copy_reaches_as_far_as_its_tokens_pay_for_the_step_they_lengthen(proposer, monkeypatch, regime):
    """COPY steps against a stand-in engine. Where a step's time is all fixed part, a draft token
    costs nothing, and every copy reaches as far as the text's repeat allows. Where each token costs
    compute (0.05 s a step and 0.01 s a token, two requests: a draft token pays where its chance of
    acceptance beats about 0.55), a text whose copies always hold still copies K tokens, and one whose
    copies break every few tokens (its period broken every fourth token) copies less."""
    proposer, runner, clock = proposer
    monkeypatch.setattr(proposer.gate, "mode", lambda load: COPY)
    rng = np.random.default_rng(0)
    texts = {"periodic": PERIOD * 200, "noisy": [t if i % 4 else int(rng.integers(8, 200)) for i, t in enumerate(PERIOD * 200)]}
    step_s = (lambda tokens: 0.1) if regime == "fixed" else (lambda tokens: 0.05 + 0.01 * tokens)
    for request_id in texts:
        runner.add(request_id, max_tokens=500)
    drafts, _ = drive(proposer, runner, clock, texts, prompt_len=9, steps=80, step_s=step_s)
    later = {request_id: [len(d) for d in request_drafts[40:]] for request_id, request_drafts in drafts.items()}
    assert later["periodic"] == [K] * len(later["periodic"])
    if regime == "fixed":
        assert later["noisy"].count(K) >= len(later["noisy"]) // 3  # wherever its repeat holds for K tokens
    else:
        assert np.mean(later["noisy"]) <= 1.0


@pytest.mark.parametrize("mode", [COPY, NONE])
def test_bench_proposer_counts_the_batched_steps_of_the_mode_it_holds(mode, monkeypatch):
    """`hedgespec bench proposer --modes`: every batched step is counted in the mode held (no other),
    and what the steps commit follows the mode: a copy of a periodic text's own repeat commits more
    than one token a step, a step without drafts exactly one."""
    from hedgespec.bench.proposer import one_batch_size
    config = EngineConfig.model_validate({"target": {"model": "tiny:0"}, "k": K,
                                          "drafters": [{"name": "lookup", "kind": "prompt_lookup", "max_ngram": 3}]})
    monkeypatch.setenv(PROPOSER_ENV, config.model_dump_json())  # the bench sets it as vLLM's worker reads it
    texts = [(PERIOD * 3, PERIOD * 20), ([9, 8] + PERIOD * 3, PERIOD * 20)]
    row = one_batch_size(config, texts, batch=2, max_tokens=48, step_fixed_s=0.03, step_token_s=0.002, mode=mode)
    others = [m for m in (ALL, COPY, NONE) if m != mode]
    assert row["steps_by_mode"][mode] > 0 and all(row["steps_by_mode"][m] == 0 for m in others)
    if mode == NONE:
        assert row["tokens_per_step_and_request"] == 1.0
    else:
        assert row["tokens_per_step_and_request"] > 2.0
