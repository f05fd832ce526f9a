"""`hedgespec bench proposer`: what the vLLM backend's proposer adds to every engine step, measured
without vLLM, at several batch sizes.

A stand-in for vLLM's model runner drives the real proposer (the config's pool, learner and K)
over the target's own greedy texts of the prompts, recorded once with the HF target alone, with
`batch` requests in every step: each step it hands every request of the batch what greedy
verification commits (the draft's longest
prefix that the text goes on with, and one token more, as vLLM's rejection sampler does) and times
the proposer's call. The step itself is simulated on the proposer's clock, fixed + per token, so
that the time objective prices its arms as in an engine (defaults: about a compiled step of
SmolLM2 on 2 cores, batched; `hedgespec bench load` measures the real thing). Per batch size (and
load-gate mode, where --modes holds every batched step in one): the proposer's own milliseconds per
step and per request-step, the tokens committed per step and request (what the steps' drafts
bought), the tokens per second of the simulated steps plus the proposer's own time, and the
batched steps played in each mode with the gate's own readings (where the gate decides: what its
exploration costs against the best mode held throughout)."""
import os
import time
from collections import Counter
from types import SimpleNamespace

import numpy as np

from hedgespec.config import EngineConfig, SelectorConfig
from hedgespec.engine import Engine
from hedgespec.load_gate import ALL, COPY, MODES, NONE, LoadGate
from hedgespec.models import loading
from hedgespec.vllm_engine import PROPOSER_ENV, speculation_args


class StandInRunner:
    """What the proposer reads of vLLM's model runner: the batch's request ids and their SamplingParams."""

    def __init__(self):
        self.input_batch = SimpleNamespace(req_ids=[])
        self.requests = {}

    def attach(self, proposer) -> None:
        proposer.load_model(None)  # the proposer finds this runner among its callers' frames

    def add(self, request_id: str, max_tokens: int, speculate: bool = True, selector: SelectorConfig | None = None) -> None:
        params = SimpleNamespace(max_tokens=max_tokens, seed=0, ignore_eos=False,
                                 extra_args=speculation_args(speculate, selector, None))
        self.requests[request_id] = SimpleNamespace(sampling_params=params)
        self.input_batch.req_ids.append(request_id)

    def remove(self, request_id: str) -> None:
        self.input_batch.req_ids.remove(request_id)
        del self.requests[request_id]


def verify_greedy(draft: list[int], text: list[int], position: int) -> list[int]:
    """What vLLM's greedy verification of `draft` at `position` of `text` commits: the matching
    prefix of the draft, and the next token."""
    accepted = 0
    while accepted < len(draft) and position + accepted < len(text) and draft[accepted] == text[position + accepted]:
        accepted += 1
    return text[position:position + accepted + 1]


def proposer_for(config: EngineConfig, clock=time.perf_counter, max_model_len: int = 4096):
    """The vLLM backend's proposer for `config`, built as vLLM's worker builds it (from the
    environment), with no vLLM."""
    from hedgespec.vllm_proposer import HedgeSpecProposer
    os.environ[PROPOSER_ENV] = config.model_dump_json()
    vocab = loading.vocab_size(config.target.model)
    return HedgeSpecProposer(SimpleNamespace(model_config=SimpleNamespace(get_vocab_size=lambda: vocab,
                                                                          max_model_len=max_model_len)), clock)


class StepClock:
    """Real time, plus the simulated steps' time."""

    def __init__(self):
        self.simulated = 0.0

    def __call__(self) -> float:
        return self.simulated + time.perf_counter()


def greedy_texts(config: EngineConfig, prompts: list[str], max_tokens: int) -> list[tuple[list[int], list[int]]]:
    """(prompt tokens, the target's greedy continuation with the EOS it ended on) per prompt, from the
    HF target alone."""
    engine = Engine(EngineConfig(target=config.target.model_copy(update={"backend": "hf"}), drafters=[]))
    eos = min(engine.eos_ids)
    texts = []
    for prompt in prompts:
        generation = engine.generate(prompt, max_tokens, speculate=False)
        texts.append((engine.encode(prompt), generation.tokens + ([eos] if generation.finish_reason == "stop" else [])))
    return texts


def one_batch_size(config: EngineConfig, texts: list[tuple[list[int], list[int]]], batch: int, max_tokens: int,
                   step_fixed_s: float, step_token_s: float, mode: str | None = None, requests: int | None = None) -> dict:
    """`batch` requests in every step, as under continuous batching: one that ends is replaced by
    the next text (cycling), until `requests` have run (None: max(len(texts), 2 * batch)). `mode`: the
    load gate's mode played in every batched step (None: the gate decides)."""
    clock = StepClock()
    proposer, runner = proposer_for(config, clock), StandInRunner()
    proposer.gate = LoadGate(fixed=mode)
    runner.attach(proposer)
    waiting = [texts[i % len(texts)] for i in range(requests or max(len(texts), 2 * batch))]
    prompts, full, history, sampled = {}, {}, {}, {}
    own, steps, request_steps, committed, rounds, started = 0.0, 0, 0, 0, 0, 0
    by_mode = Counter()  # batched steps per gate mode
    while waiting or runner.input_batch.req_ids:
        while waiting and len(runner.input_batch.req_ids) < batch:
            r, (prompt, path) = f"r{started}", waiting.pop(0)
            started += 1
            runner.add(r, max_tokens)
            prompts[r], full[r] = prompt, prompt + path
            history[r] = full[r][:len(prompt) + 1]  # the prefill step committed the first token
            sampled[r] = history[r][-1:]
        batch_ids = list(runner.input_batch.req_ids)
        token_ids = np.zeros((len(batch_ids), max(len(history[r]) for r in batch_ids) + 1), dtype=np.int64)
        for i, r in enumerate(batch_ids):
            token_ids[i, :len(history[r])] = history[r]
        start = time.perf_counter()
        drafts = proposer.propose([sampled[r] for r in batch_ids], np.array([len(history[r]) for r in batch_ids]),
                                  token_ids)
        own += time.perf_counter() - start
        if proposer.drafting_s is not None:  # the gate decided this step (it decides batched steps only)
            by_mode[proposer.gate.decided[-1]] += 1
        steps += 1
        request_steps += len(batch_ids)
        verified = 0
        for r, draft in zip(batch_ids, drafts):
            if r not in proposer.live or len(history[r]) >= len(full[r]):
                runner.remove(r)  # it ended at the last step (EOS or max_tokens): vLLM drops it
                played = proposer.release([r]).get(r, [])  # decode.Round's fields: committed is the fourth
                committed += sum(fields[3] for fields in played)
                rounds += len(played)
                continue
            sampled[r] = verify_greedy(draft, full[r], len(history[r]))
            history[r] += sampled[r]
            verified += len(draft) + 1
        clock.simulated += step_fixed_s + step_token_s * verified
    return {"batch": batch, "mode": mode or "gate", "requests": started, "mean_batch": request_steps / steps, "steps": steps,
            "proposer_ms_per_step": 1e3 * own / steps, "proposer_ms_per_request_step": 1e3 * own / request_steps,
            "tokens_per_step_and_request": committed / rounds, "tokens_per_s": committed / (clock.simulated + own),
            "steps_by_mode": {m: by_mode[m] for m in MODES}, "gate_tokens_per_s": proposer.gate.snapshot()}


def run(config: EngineConfig, prompts: list[str], max_tokens: int, batches: list[int], requests: int | None,
        step_fixed_s: float, step_token_s: float, modes: list[str | None]) -> dict:
    texts = greedy_texts(config, prompts, max_tokens)
    one_batch_size(config, texts[:1], 1, 16, step_fixed_s, step_token_s)  # warm-up: the compiled lookups load
    rows = [one_batch_size(config, texts, batch, max_tokens, step_fixed_s, step_token_s, mode, requests)
            for batch in batches for mode in modes]
    return {"target": config.target.model, "dtype": loading.resolve_dtype(config.target.dtype, config.target.device),
            "drafters": [d.name for d in config.drafters], "k": config.k, "selector": config.selector.model_dump(),
            "prompts": len(prompts), "max_tokens": max_tokens, "step_fixed_s": step_fixed_s,
            "step_token_s": step_token_s, "rows": rows}


def main(config: EngineConfig, prompts: list[str], max_tokens: int, batches: list[int], requests: int | None,
         step_fixed_s: float, step_token_s: float, modes: list[str | None]) -> dict:
    result = run(config, prompts, max_tokens, batches, requests, step_fixed_s, step_token_s, modes)
    print(f"the vLLM backend's proposer, {len(result['drafters'])} drafters, K={result['k']}, "
          f"{result['selector']['name']} ({result['selector']['loss']}); {len(prompts)} prompts, greedy texts of "
          f"{result['target']} ({result['dtype']}) up to {max_tokens} tokens; steps simulated as "
          f"{1e3 * step_fixed_s:.0f} ms + {1e3 * step_token_s:.1f} ms per token")
    print("| batch | gate mode | mean batch | steps | proposer ms per step | per request-step | tokens per step and request "
          "| tokens/s (simulated steps) | batched steps all / copy / none |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in result["rows"]:
        print(f"| {row['batch']} | {row['mode']} | {row['mean_batch']:.1f} | {row['steps']} | {row['proposer_ms_per_step']:.2f} | "
              f"{row['proposer_ms_per_request_step']:.3f} | {row['tokens_per_step_and_request']:.3f} | {row['tokens_per_s']:.0f} | "
              f"{' / '.join(str(row['steps_by_mode'][m]) for m in (ALL, COPY, NONE))} |")
    return result
