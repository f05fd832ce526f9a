"""The offline drafter pool ("zoo"), everything under <cache>/zoo (configs/pool.yaml names it):

    hedgespec zoo build  ->  build_pool(): target features of the general corpus and of every
                             domain (corpus text and the target's own answers), then one datastore
                             per domain
    hedgespec zoo train  ->  train(): the draft vocabulary, the generalist head (general corpus
                             only), then one specialist per domain fine-tuned from it (and,
                             with --all-domains, one head fine-tuned on all domains at once)

Both resume where an interrupted run stopped and skip what is finished.
"""
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from hedgespec.data.domains import DOMAINS
from hedgespec.drafters.feature_head import HeadSpec, frozen_from_model
from hedgespec.models import loading
from hedgespec.zoo.features import ExtractSettings, documents, extract, load_features
from hedgespec.zoo.layout import ALL_DOMAINS, GENERAL, checkpoint_path, head_path, vocab_path, zoo_dir
from hedgespec.zoo.stores import build_store
from hedgespec.zoo.training import TrainSettings, draft_vocab, train_head

__all__ = ["ExtractSettings", "TrainSettings", "build_pool", "train"]


def build_pool(domains: Sequence[str] | None = None, target: str = "smollm2",
               settings: ExtractSettings = ExtractSettings(), store_tokens: int = 4_000_000,
               cache: Path | None = None, progress: bool = True) -> Path:
    """Features for the general corpus and `domains` (default: all seven), then their datastores."""
    domains = list(domains or DOMAINS)
    model, tokenizer = loading.load(target, cache=cache)
    eos = loading.eos_ids(target, cache)
    for name in [GENERAL, *domains]:
        extract(name, model, tokenizer, eos, settings, cache, progress)
    for domain in domains:
        answers = load_features(domain, cache=cache, states=False).target_answers()
        build_store(domain, answers, tokenizer, store_tokens, settings.seed, cache, progress)
    return zoo_dir(cache)


def train(domains: Sequence[str] | None = None, target: str = "smollm2",
          general: TrainSettings = TrainSettings(max_minutes=60), specialist: TrainSettings = TrainSettings(max_minutes=20),
          vocab_size: int = 16_384, all_domains: bool = False, cache: Path | None = None,
          progress: bool = True) -> dict[str, Path]:
    """The generalist and one specialist per domain (default: all seven); returns their head files.
    `all_domains` adds ALL_DOMAINS: one head fine-tuned from the generalist on every domain's data at
    once, with a specialist's budget (the baseline a specialist must beat to be worth its keep)."""
    domains = list(domains or DOMAINS)
    model, tokenizer = loading.load(target, cache=cache)
    frozen = frozen_from_model(model, torch.from_numpy(vocabulary(model, tokenizer, vocab_size, cache)))
    spec = HeadSpec.of(model.config)

    def fit(name: str, corpora: Sequence[str], settings: TrainSettings, init: Path | None) -> Path:
        out = head_path(name, cache)
        if out.exists():  # finished earlier: never retrained (delete the file to retrain)
            return out
        return train_head(name, load_features(*corpora, cache=cache), frozen, spec, out, checkpoint_path(name, cache),
                          settings, init, model.get_decoder().norm.weight.detach(), progress)

    heads = {GENERAL: fit(GENERAL, [GENERAL], general, None)}
    for domain in domains:
        heads[domain] = fit(domain, [domain], specialist, heads[GENERAL])
    if all_domains:
        heads[ALL_DOMAINS] = fit(ALL_DOMAINS, DOMAINS, specialist, heads[GENERAL])
    return heads


def vocabulary(model, tokenizer, size: int, cache: Path | None = None) -> np.ndarray:
    """The draft vocabulary every head shares: the most frequent tokens over the training text of
    the general corpus and all seven domains. It depends on the corpora only, so the generalist can
    train while other domains' features are still being extracted; chosen on the first `train` and
    kept (delete vocab.npy to choose again)."""
    path = vocab_path(cache)
    if not path.exists():
        tokens = [np.concatenate(tokenizer(documents(name, cache), add_special_tokens=False)["input_ids"])
                  for name in (GENERAL, *DOMAINS)]
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, draft_vocab(tokens, model.get_input_embeddings().weight.shape[0], size).astype(np.int64))
    return np.load(path)
