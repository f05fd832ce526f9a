"""The embedded pool as committed in the repository (hedgespec/zoo/bundled/): what takes hours of
CPU to rebuild, small enough to commit.

- heads/<name>.safetensors: every trained head, int8 (hedgespec.drafters.feature_head.save_head),
  including the all-domains baseline when it was trained;
- answers/<domain>.npz: the target's own greedy answers to the domain's distillation prompts
  (token ids), the part of each datastore that needs the target to run.

`export` writes the bundle from a trained zoo (after `hedgespec zoo build` and `zoo train`);
`install` builds what the bundle leaves out, in minutes: one datastore per domain from the bundled
answers plus the domain's corpus text (from `hedgespec data build`). configs/pool.yaml names bundled
heads as `bundle:heads/<name>.safetensors` and datastores by their path in the cache.
"""
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from hedgespec.data.domains import DOMAINS
from hedgespec.drafters.feature_head import load_head, save_head
from hedgespec.models import loading
from hedgespec.zoo.features import load_features
from hedgespec.zoo.layout import ALL_DOMAINS, BUNDLE, GENERAL, head_path
from hedgespec.zoo.stores import build_store


def bundled_answers(domain: str, bundle: Path = BUNDLE) -> list[np.ndarray]:
    path = bundle / "answers" / f"{domain}.npz"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: export it with `hedgespec zoo export` after `hedgespec zoo build`")
    with np.load(path) as data:
        tokens, starts = data["tokens"], data["starts"]
    return [tokens[a:b] for a, b in zip(starts[:-1], starts[1:])]


def export(domains: Sequence[str] | None = None, cache: Path | None = None, bundle: Path = BUNDLE) -> Path:
    """Writes the int8 heads (the generalist and each domain's specialist) and each domain's answers."""
    domains = list(domains or DOMAINS)
    for name in [GENERAL, *domains, ALL_DOMAINS]:
        if name == ALL_DOMAINS and not head_path(name, cache).exists():
            continue  # the optional baseline head
        head, vocab = load_head(head_path(name, cache))
        save_head(bundle / "heads" / f"{name}.safetensors", head, vocab, int8=True)
    for domain in domains:
        answers = load_features(domain, cache=cache, states=False).target_answers()
        out = bundle / "answers" / f"{domain}.npz"
        out.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(out, tokens=np.concatenate(answers).astype(np.int32),
                            starts=np.cumsum([0] + [len(a) for a in answers]))
    return bundle


def install(domains: Sequence[str] | None = None, target: str = "smollm2", store_tokens: int = 4_000_000,
            seed: int = 0, cache: Path | None = None, bundle: Path = BUNDLE, progress: bool = True) -> list[Path]:
    """The datastores of the bundled pool (skipped where they exist); returns their paths."""
    tokenizer = loading.load_tokenizer(target, cache)
    return [build_store(domain, bundled_answers(domain, bundle), tokenizer, store_tokens, seed, cache, progress)
            for domain in (domains or DOMAINS)]
