"""`hedgespec bench ties`: what "lossless" means in a reduced precision, measured.

In bfloat16 a forward over several tokens and the same tokens fed one at a time do not give
bit-identical logits, so a verified draft can commit a different argmax than target-only decoding
would where the target is nearly tied. The bound is measured, not assumed: the largest gap between
the logits of one batched forward over a text and of feeding it token by token, over the runs'
own texts. A divergence between speculative and target-only greedy text is then explained only if
the target's top-2 logit margin at the first differing position is at most twice that bound (each
side may be off by the bound, in opposite directions). Any other divergence is a bug.
"""
import torch

from hedgespec.engine import Engine

DRAFT = 6  # tokens per batched forward, as a verify of K = 5 feeds


def logit_gap(engine: Engine, tokens: list[int]) -> float:
    """max |logits of forwards over DRAFT tokens at a time - logits of one token at a time| over `tokens`."""
    lm, rid = engine.target.lm, "ties"
    rows = {}
    for step in (1, DRAFT):
        lm.start(rid)
        try:
            rows[step] = torch.cat([lm.forward(rid, tokens[i:i + step])[0] for i in range(0, len(tokens), step)])
        finally:
            lm.release(rid)
    return float((rows[1] - rows[DRAFT]).abs().max())


def margin_at(engine: Engine, tokens: list[int]) -> float:
    """The target's top-2 logit margin for the token after `tokens` (token-by-token, as target-only decodes)."""
    lm, rid = engine.target.lm, "ties"
    lm.start(rid)
    try:
        for token in tokens[:-1]:
            lm.forward(rid, [token])
        top = lm.forward(rid, tokens[-1:])[0][-1].topk(2).values
    finally:
        lm.release(rid)
    return float(top[0] - top[1])


def first_difference(plain: list[int], spec: list[int]) -> int | None:
    """Where two greedy texts part (the shorter one's end, if one goes on); None if identical."""
    first = next((i for i, (a, b) in enumerate(zip(plain, spec)) if a != b), None)
    if first is None and len(plain) != len(spec):
        first = min(len(plain), len(spec))
    return first


def near_tie(margin: float | None, bound: float) -> bool:
    """A divergence is explained where the target's top-2 margin is within twice the bound."""
    return margin is not None and margin <= 2 * bound


def verdict(dtype, bound: float, rows: list[dict]) -> dict:
    """The run's bound, its rows, and those of its divergences that are no near-ties."""
    return {"dtype": dtype, "bound": bound, "prompts": rows,
            "identical_share": sum(r["identical"] for r in rows) / len(rows),
            "unexplained": [r for r in rows if not r["identical"] and not near_tie(r["margin"], bound)]}


def report(measured: dict) -> int:
    """Prints every divergence, near-tie or not; 1 if any is not."""
    for row in measured["prompts"]:
        if not row["identical"]:
            margin = "unknown" if row["margin"] is None else f"{row['margin']:.4f}"
            print(f"  differs at token {row['first_difference']}: target margin {margin} "
                  f"({'a near-tie' if near_tie(row['margin'], measured['bound']) else 'NOT a near-tie'}): {row['prompt']!r}")
    return 1 if measured["unexplained"] else 0


def run(engine: Engine, prompts: list[str], max_tokens: int) -> dict:
    rows, bound = [], 0.0
    for prompt in prompts:
        tokens = engine.encode(prompt)
        plain = engine.generate(prompt, max_tokens, speculate=False).tokens
        spec = engine.generate(prompt, max_tokens).tokens
        bound = max(bound, logit_gap(engine, tokens + plain), logit_gap(engine, tokens + spec))
        first = first_difference(plain, spec)
        rows.append({"prompt": prompt[:60], "identical": first is None, "first_difference": first,
                     "margin": None if first is None else margin_at(engine, tokens + plain[:first])})
    return verdict(engine.dtype, bound, rows)


def main(engine: Engine, prompts: list[str], max_tokens: int) -> int:
    measured = run(engine, prompts, max_tokens)
    print(f"target {engine.config.target.model} in {measured['dtype']}: logit gap between batched and one-token forwards "
          f"<= {measured['bound']:.4f}; {100 * measured['identical_share']:.0f}% of {len(prompts)} prompts byte-identical")
    return report(measured)
