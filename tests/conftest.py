"""Shared fixtures: tiny seeded Llama models that go through the real target/drafter code path."""
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from hedgespec.models.runner import CachedLM


def tiny_llama(seed: int, vocab: int = 8, layers: int = 1, dtype=torch.float32) -> LlamaForCausalLM:
    """A tiny random Llama with a small vocabulary, peaked enough that drafts get both accepted and rejected."""
    config = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                         initializer_range=0.5, tie_word_embeddings=True, bos_token_id=0, eos_token_id=1,
                         pad_token_id=1)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).to(dtype).eval()


@pytest.fixture
def tiny_lm():
    return lambda seed, **kw: CachedLM(tiny_llama(seed, **kw))
