"""Losslessness of verification on tiny models, checked against exact enumeration."""

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from hedgespec.drafters.lm import LMDrafter
from hedgespec.models import target as target_module
from hedgespec.models.target import HFTarget
from hedgespec.sampling import Sampling, draw, process
from hedgespec.speculative import verify_greedy, verify_sampling

PROMPT = [3, 5, 2, 7]
VOCAB = 8


def reference_distribution(logits: np.ndarray, sampling: Sampling) -> np.ndarray:
    """Target-only sampling's distribution from raw logits, written apart from sampling.process (in
    float64, one token at a time): softmax at the temperature, the top_k most likely kept, then the
    fewest most likely tokens whose mass reaches top_p, renormalised."""
    z = logits.astype(np.float64) / sampling.temperature
    probs = np.exp(z - z.max())
    probs /= probs.sum()
    ranked = sorted(range(len(probs)), key=lambda t: -probs[t])
    keep = ranked[:sampling.top_k] if sampling.top_k else ranked
    kept_mass = sum(probs[t] for t in keep)
    nucleus, mass = [], 0.0
    for t in keep:  # mass of the top-k renormalised distribution, most likely first
        nucleus.append(t)
        mass += probs[t] / kept_mass
        if mass >= sampling.top_p:
            break
    out = np.zeros(len(probs))
    out[nucleus] = probs[nucleus]
    return out / out.sum()


def exact_first_two(lm, sampling: Sampling) -> np.ndarray:
    """P(x1, x2 | PROMPT) of target-only sampling, by enumeration: [V*V]."""
    with torch.inference_mode():
        def next_token(context):
            return reference_distribution(lm.model(torch.tensor([context])).logits[0, -1].double().numpy(), sampling)
        p1 = next_token(PROMPT)
        probs = np.zeros(VOCAB * VOCAB)
        for x1 in range(VOCAB):
            if p1[x1] == 0:
                continue
            probs[x1 * VOCAB: (x1 + 1) * VOCAB] = p1[x1] * next_token(PROMPT + [x1])
    return probs / probs.sum()


def speculative_first_two(target: HFTarget, drafter: LMDrafter, sampling: Sampling, k: int, trials: int) -> np.ndarray:
    counts = np.zeros(VOCAB * VOCAB)
    for trial in range(trials):
        rid = str(trial)
        target.prefill(rid, PROMPT, sampling, seed=trial)
        drafter.begin(rid, PROMPT, None, sampling, seed=10_000 + trial)
        committed = []
        while len(committed) < 2:
            verified = target.verify(rid, drafter.propose(rid, k))
            drafter.observe(rid, verified)
            committed += verified.tokens
        counts[committed[0] * VOCAB + committed[1]] += 1
        target.release(rid)
        drafter.release(rid)
    return counts


def chi_square_pvalue(counts: np.ndarray, probs: np.ndarray) -> float:
    # cells the target can never produce must stay empty; pool rare cells so expected counts are >= 5
    assert counts[probs == 0].sum() == 0, "sampled a token sequence the target gives probability 0"
    expected = probs * counts.sum()
    order = np.argsort(expected)
    rare = order[np.cumsum(expected[order]) < 5]
    keep = np.setdiff1d(np.nonzero(probs)[0], rare)
    obs = np.append(counts[keep], counts[rare].sum())
    exp = np.append(expected[keep], expected[rare].sum())
    return chisquare(obs[exp > 0], exp[exp > 0]).pvalue


CASES = [(Sampling(1.0), 1), (Sampling(0.7), 2), (Sampling(1.5), 4), (Sampling(1.0, top_k=4), 2),
         (Sampling(0.8, top_p=0.8), 3)]
TRIALS = 800  # at a fixed seed: the wrong verifiers below land at p < 1e-9, the right one well above 1e-3


@pytest.mark.parametrize("sampling,k", CASES, ids=[f"T{s.temperature}-k{s.top_k}-p{s.top_p}-K{k}" for s, k in CASES])
def test_speculative_sampling_matches_target_distribution(tiny_lm, sampling, k):
    target_lm = tiny_lm(0)
    target, drafter = HFTarget(target_lm), LMDrafter("tiny-1", tiny_lm(1))
    counts = speculative_first_two(target, drafter, sampling, k, trials=TRIALS)
    assert chi_square_pvalue(counts, exact_first_two(target_lm, sampling)) > 1e-3


def _wrong_residual(target_probs, draft, draft_probs, generator):
    """A broken verifier: on rejection it resamples from p instead of norm(max(0, p - q))."""
    n, token = verify_sampling(target_probs, draft, draft_probs, generator)
    return (n, draw(target_probs[n], generator)) if n < len(draft) else (n, token)


def _accept_all(target_probs, draft, draft_probs, generator):
    return len(draft), draw(target_probs[len(draft)], generator)


@pytest.mark.parametrize("wrong", [_wrong_residual, _accept_all])
def test_chi_square_detects_a_wrong_verifier(tiny_lm, monkeypatch, wrong):
    monkeypatch.setattr(target_module, "verify_sampling", wrong)
    target_lm = tiny_lm(0)
    target, drafter = HFTarget(target_lm), LMDrafter("tiny-1", tiny_lm(1))
    counts = speculative_first_two(target, drafter, Sampling(1.0), 2, trials=TRIALS)
    assert chi_square_pvalue(counts, exact_first_two(target_lm, Sampling(1.0))) < 1e-6


def test_greedy_verification_accepts_the_argmax_prefix():
    probs = process(torch.tensor([[0.0, 2.0, 1.0], [3.0, 0.0, 1.0], [0.0, 0.0, 5.0]]), Sampling(0.0))
    assert verify_greedy(probs, [1, 0]) == (2, 2)
    assert verify_greedy(probs, [1, 2]) == (1, 0)
    assert verify_greedy(probs, [0, 0]) == (0, 1)
    assert verify_greedy(probs[:1], []) == (0, 1)


def test_point_mass_draft_accepts_with_target_probability():
    """A deterministic drafter's token is accepted with probability p(token), exactly."""
    p = torch.tensor([[0.25, 0.75], [0.5, 0.5]])
    q = torch.tensor([[1.0, 0.0]])
    generator = torch.Generator().manual_seed(0)
    accepted = sum(verify_sampling(p, [0], q, generator)[0] for _ in range(20_000))
    assert abs(accepted / 20_000 - 0.25) < 0.015


def test_kv_rollback_matches_fresh_prefill(tiny_lm):
    """After rounds with rejections, continuing gives the logits of a fresh prefill of the committed text."""
    target, drafter = HFTarget(tiny_lm(0, vocab=32, layers=2)), LMDrafter("d", tiny_lm(5, vocab=32))
    sampling = Sampling(1.0)
    target.prefill("r", PROMPT, sampling, seed=1)
    drafter.begin("r", PROMPT, None, sampling, seed=2)
    committed, rejected_rounds = list(PROMPT), 0
    for _ in range(12):
        draft = drafter.propose("r", 4)
        verified = target.verify("r", draft)
        drafter.observe("r", verified)
        committed += verified.tokens
        rejected_rounds += verified.accepted < len(draft.tokens)
    assert rejected_rounds >= 3, "the test needs rejections to exercise the rollback"
    assert target.lm.length("r") == len(committed) - 1
    logits, _ = target.lm.forward("r", committed[-1:] + [4, 6])
    with torch.inference_mode():
        fresh = target.lm.model(torch.tensor([committed + [4, 6]])).logits[0, -3:]
    torch.testing.assert_close(logits, fresh, atol=1e-5, rtol=1e-5)
    # the drafter's cache was rolled back the same way
    d_logits, _ = drafter.lm.forward("r", committed[-1:])
    with torch.inference_mode():
        d_fresh = drafter.lm.model(torch.tensor([committed])).logits[0, -1:]
    torch.testing.assert_close(d_logits, d_fresh, atol=1e-5, rtol=1e-5)


def test_release_frees_request_state(tiny_lm):
    target, drafter = HFTarget(tiny_lm(0)), LMDrafter("d", tiny_lm(1))
    target.prefill("r", PROMPT, Sampling(), seed=0)
    drafter.begin("r", PROMPT, None, Sampling(), seed=0)
    target.release("r")
    drafter.release("r")
    assert target.active == 0 and target.lm.active == 0 and drafter.lm.active == 0


def test_warm_up_runs_every_verify_size_and_leaves_no_state(tiny_lm, monkeypatch):
    lm = tiny_lm(0, vocab=32, layers=2)
    sizes, decoder_forward = [], lm.decoder.forward

    def counted(input_ids, **kw):
        sizes.append(input_ids.shape[1])
        return decoder_forward(input_ids=input_ids, **kw)

    monkeypatch.setattr(lm.decoder, "forward", counted)
    lm.warm_up(range(1, 6), context=8)
    assert sizes == [8, 1, 2, 3, 4, 5] and lm.active == 0
    # a request afterwards sees the model as if nothing had run: the logits of a plain forward
    lm.start("r")
    logits, _ = lm.forward("r", PROMPT)
    with torch.inference_mode():
        fresh = lm.model(torch.tensor([PROMPT])).logits[0]
    torch.testing.assert_close(logits, fresh, atol=1e-5, rtol=1e-5)


def test_truncated_draft_distributions_stay_lossless(tiny_lm, monkeypatch):
    """Drafters keep only their most likely tokens (sampling.process_draft); with the support cut
    to 3 of 8 tokens the committed text still follows the target's exact distribution."""
    from hedgespec import sampling
    monkeypatch.setattr(sampling, "DRAFT_SUPPORT", 3)
    target_lm = tiny_lm(0)
    target, drafter = HFTarget(target_lm), LMDrafter("tiny-1", tiny_lm(1))
    counts = speculative_first_two(target, drafter, Sampling(1.0), 2, trials=TRIALS)
    assert chi_square_pvalue(counts, exact_first_two(target_lm, Sampling(1.0))) > 1e-3


def test_draft_distributions_travel_small_and_exact(tiny_lm):
    import pickle

    from hedgespec.transport import compact_draft, expand_draft
    drafter = LMDrafter("d", tiny_lm(1, vocab=2048))
    drafter.begin("r", PROMPT, None, Sampling(1.0), seed=3)
    draft = drafter.propose("r", 5)
    assert ((draft.probs > 0).sum(-1) <= 64).all()  # the drafter's own q has a short support
    wire = compact_draft(draft)
    assert len(pickle.dumps(wire)) < 0.1 * len(pickle.dumps(draft))
    assert torch.equal(expand_draft(wire, 2048).probs, draft.probs)


@pytest.mark.parametrize("top_p", [1e-300, 5e-324, 1e-9])
@pytest.mark.parametrize("temperature", [1e-5, 0.7])
def test_any_positive_top_p_keeps_the_most_likely_token(temperature, top_p):
    """A top_p below float32's smallest number (the API accepts any float in (0, 1]) is the most
    likely token alone, as top_p -> 0 would be; found by fuzzing the HTTP API (it gave NaN rows)."""
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(0)) * 5
    probs = process(logits, Sampling(temperature, top_p=top_p))
    assert torch.equal(probs, torch.nn.functional.one_hot(logits.argmax(-1), 50).float())


def test_a_drafted_token_its_distribution_gives_zero_is_refused():
    """p/q with q = 0 would accept the token (and 0/0 is NaN, which compares as accepted too)."""
    target = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])
    for drafted_from in ([[1.0, 0.0, 0.0]], [[0.0, 0.5, 0.5]]):
        with pytest.raises(ValueError, match="probability 0"):
            verify_sampling(target, [2] if drafted_from[0][2] == 0 else [0], torch.tensor(drafted_from),
                            torch.Generator().manual_seed(0))
    accepted, _ = verify_sampling(target, [0], torch.tensor([[1.0, 0.0, 0.0]]), torch.Generator().manual_seed(0))
    assert accepted in (0, 1)
