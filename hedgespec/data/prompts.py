"""Reading evaluation prompts, one domain at a time or as a mixed stream over domains."""
import json
import random
from pathlib import Path

from ..paths import cache_dir
from .domains import DOMAINS


def data_dir(cache: Path | None = None) -> Path:
    """Where ``build`` writes: ``<cache>/data``, the cache being $HEDGESPEC_CACHE by default."""
    return Path(cache or cache_dir()) / "data"


def load_prompts(path_or_domain: str | Path, reworded: bool = False, cache: Path | None = None) -> list[dict]:
    """Rows of a JSON-lines file that have a ``prompt`` (and optionally a ``domain``); a domain name
    reads that domain's built eval set (or its reworded variant)."""
    name = str(path_or_domain)
    if name in DOMAINS and not Path(name).exists():
        path = data_dir(cache) / name / ("eval_reworded.jsonl" if reworded else "eval.jsonl")
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist: build it with `hedgespec data build`")
    else:
        path = Path(path_or_domain)
    rows = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
                raise ValueError(f"{path}:{number}: expected a JSON object with a string 'prompt'")
            rows.append(row)
    return rows


def mixed_stream(domains: list[str] | None, n: int, seed: int, reworded: bool = False,
                 cache: Path | None = None) -> list[dict]:
    """``n`` prompts drawn from the given domains' eval sets (all seven by default), shuffled with
    ``seed``.

    Each pass over the pool shuffles every domain and interleaves them in proportion to their
    size (the i-th prompt of a domain of size m lands near position i/m of the pass), so any
    window of the stream sees every domain about as often as the pool holds it, and the first
    ``len(domains)`` prompts cover all domains when they are the same size. Past the pool's size,
    prompts repeat in a fresh order.
    """
    rng = random.Random(seed)
    pools = [load_prompts(d, reworded=reworded, cache=cache) for d in (domains or DOMAINS)]
    pools = [pool for pool in pools if pool]
    if n > 0 and not pools:
        raise ValueError("no prompts to draw from")
    out: list[dict] = []
    while len(out) < n:
        keyed = []
        for pool in pools:
            order = rng.sample(pool, len(pool))
            keyed += [((i + rng.random()) / len(order), row) for i, row in enumerate(order)]
        keyed.sort(key=lambda pair: pair[0])
        out += [dict(row) for _, row in keyed]
    return out[:n]
