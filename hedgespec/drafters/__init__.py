"""Drafters: every kind proposes up to K tokens and keeps itself in sync with committed text."""
from hedgespec.config import DrafterConfig
from hedgespec.drafters.lm import LMDrafter
from hedgespec.drafters.prompt_lookup import PromptLookupDrafter
from hedgespec.models import loading
from hedgespec.models.runner import CachedLM


def build_drafter(config: DrafterConfig, target, tokenizer):
    """A drafter for `target` (an HFTarget); LM drafters must share its tokenizer and vocabulary."""
    if config.kind == "prompt_lookup":
        return PromptLookupDrafter(config.name, target.vocab, config.max_ngram, config.min_ngram)
    model, drafter_tokenizer = loading.load(config.model, config.dtype, str(target.lm.device))
    if drafter_tokenizer.get_vocab() != tokenizer.get_vocab():
        raise ValueError(f"drafter {config.name!r} ({config.model}) does not share the target's tokenizer")
    lm = CachedLM(model)
    if lm.vocab != target.vocab:
        raise ValueError(f"drafter {config.name!r} has {lm.vocab} output tokens, the target {target.vocab}")
    return LMDrafter(config.name, lm)
