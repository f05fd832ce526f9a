"""Shared fixtures: tiny seeded Llama models that go through the real target/drafter code path,
and the system tools the integration tests drive."""
import os
import shutil

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


@pytest.fixture(scope="session")
def system_binary():
    """A Debian tool an integration test drives (prometheus, chromium): the test is skipped where the
    tool is missing, except in CI (CI=true), where .ci/run installs it and a missing one is a failure."""
    def find(name: str) -> str:
        path = shutil.which(name)
        if path is None:
            message = f"{name} is not installed (apt-get install {name}; .ci/run installs it)"
            pytest.fail(message) if os.environ.get("CI") else pytest.skip(message)
        return path
    return find
