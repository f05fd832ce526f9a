"""Drafters: every kind proposes up to K tokens and keeps itself in sync with committed text."""
from pathlib import Path

from hedgespec.config import DrafterConfig, TargetConfig
from hedgespec.drafters.datastore import DatastoreDrafter
from hedgespec.drafters.eagle import EagleDrafter
from hedgespec.drafters.lm import LMDrafter
from hedgespec.drafters.prompt_lookup import PromptLookupDrafter
from hedgespec.drafters.store import Datastore
from hedgespec.models import loading
from hedgespec.models.runner import CachedLM
from hedgespec.paths import cache_dir
from hedgespec.zoo.layout import BUNDLE


def build_drafters(configs: list[DrafterConfig], vocab: int, tokenizer, target: TargetConfig, k: int,
                   target_model=None) -> list:
    """The drafters of `configs`, in their order, for drafts of up to `k` tokens; the EAGLE heads among
    them share one EagleStack, so that the evaluation phase runs them all in one batched forward."""
    heads = [c for c in configs if c.kind == "eagle"]
    stacked = iter(EagleDrafter.load_stack([c.name for c in heads], [artifact_path(c.artifact) for c in heads],
                                           vocab, target_model, target.model) if heads else [])
    return [next(stacked) if c.kind == "eagle" else build_drafter(c, vocab, tokenizer, target, k, target_model)
            for c in configs]


def build_drafter(config: DrafterConfig, vocab: int, tokenizer, target: TargetConfig, k: int, target_model=None):
    """A drafter for a target with `vocab` output tokens and `tokenizer`. `target_model` is the target's
    HF model when it lives in this process (drafters that reuse target weights share them); otherwise
    they load what they need from `target.model`."""
    if config.kind == "prompt_lookup":
        return PromptLookupDrafter(config.name, vocab, config.max_ngram, config.min_ngram)
    if config.kind == "datastore":
        store = Datastore.load(artifact_path(config.artifact))
        return DatastoreDrafter(config.name, store, vocab, config.max_ngram, config.min_ngram)
    if config.kind == "eagle":
        return EagleDrafter.load_stack([config.name], [artifact_path(config.artifact)], vocab, target_model, target.model)[0]
    model, drafter_tokenizer = loading.load(config.model, config.dtype, target.device)
    if drafter_tokenizer.get_vocab() != tokenizer.get_vocab():
        raise ValueError(f"drafter {config.name!r} ({config.model}) does not share the target's tokenizer")
    lm = CachedLM(model)
    if lm.vocab != vocab:
        raise ValueError(f"drafter {config.name!r} has {lm.vocab} output tokens, the target {vocab}")
    lm.warm_up(range(1, k + 2))  # it catches up on up to k + 1 committed tokens per round
    return LMDrafter(config.name, lm)


BUNDLE_PREFIX = "bundle:"


def artifact_path(artifact: str) -> Path:
    """`bundle:PATH` is in the committed pool (hedgespec/zoo/bundled); other relative paths are in
    the cache directory, where `hedgespec zoo` writes them."""
    if artifact.startswith(BUNDLE_PREFIX):
        return BUNDLE / artifact[len(BUNDLE_PREFIX):]
    path = Path(artifact).expanduser()
    return path if path.is_absolute() else cache_dir() / path
