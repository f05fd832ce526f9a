"""Tiny randomly initialised Llama models (seeded) for fast tests through the real code path.

They are written as ordinary HF folders with a byte-level tokenizer and a ChatML template, so the
loader, the chat formatting and the decode loop are exactly those the real target uses.
"""
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """256 byte tokens (GPT-2 byte-to-unicode alphabet, no merges) plus the ChatML specials."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    for special in SPECIALS:
        vocab[special] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>", bos_token="<|im_start|>",
                                        pad_token="<|endoftext|>", unk_token="<|endoftext|>")
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build(cache: Path, seed: int, layers: int = 2) -> Path:
    """The folder of tiny model (seed, layers), created on first use."""
    out = cache / "models" / f"tiny-{seed}-{layers}"
    if (out / "config.json").exists():
        return out
    tokenizer = byte_tokenizer()
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
                         pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True)
    torch.manual_seed(seed)
    # a larger init than HF's default gives peaked, seed-specific next-token distributions, so tests
    # see real acceptance and rejection rather than near-uniform noise
    config.initializer_range = 0.4
    model = LlamaForCausalLM(config)
    partial = out.with_name(out.name + f".partial-{seed}")
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    try:
        partial.rename(out)
    except OSError:  # another process built the same folder first; both are identical
        pass
    return out
