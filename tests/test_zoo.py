"""The offline pool on a tiny target and the fixture corpora: features that are the target's own,
resumable extraction and training, and heads/datastores that load as drafters of the real loop."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from hedgespec.config import DrafterConfig, EngineConfig, SelectorConfig, TargetConfig
from hedgespec.drafters.store import Datastore
from hedgespec.drafters.feature_head import load_head, save_head
from hedgespec.engine import Engine
from hedgespec.interfaces import Draft
from hedgespec.sampling import Sampling
from hedgespec.zoo import ExtractSettings, TrainSettings, build_pool, train
from hedgespec.zoo import training
from hedgespec.zoo.bundle import export, install
from hedgespec.zoo.features import load_features
from hedgespec.zoo.layout import checkpoint_path, features_dir, head_path, store_path

FIXTURES = Path(__file__).parent / "fixtures" / "data"
SETTINGS = ExtractSettings(corpus_positions=3000, distill_prompts=2, answer_tokens=24, window=64, shard_positions=1000,
                           prompts_per_shard=2)
QUICK = TrainSettings(max_steps=20, eval_every=5, batch=4, window=32)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    root = tmp_path_factory.mktemp("cache")
    shutil.copytree(FIXTURES, root / "data")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matmuls: more threads only contend on a shared machine
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HEDGESPEC_CACHE", str(root))
        build_pool(["python"], "tiny:0", SETTINGS, store_tokens=20_000, progress=False)
        yield root
    torch.set_num_threads(threads)


def test_features_are_the_targets_states_and_answers(cache):
    engine = Engine(EngineConfig(target=TargetConfig(model="tiny:0", dtype="float32"), drafters=[]))
    features = load_features("python")
    assert features.hidden.dtype.name == "float16" and len(features.tokens) == len(features.hidden)
    answered = [s for s in range(len(features.answers)) if features.answers[s] < features.starts[s + 1] - features.starts[s]]
    assert answered, "the distillation shards hold the target's answers"
    for s in [0, answered[0]]:
        a, b = features.starts[s], features.starts[s + 1]
        engine.target.lm.start("check")
        _, hidden = engine.target.lm.forward("check", features.tokens[a:b].tolist())
        engine.target.lm.release("check")
        torch.testing.assert_close(torch.from_numpy(features.hidden[a:b]).float(), hidden, atol=2e-2, rtol=1e-2)
    # an answer is the target's own greedy continuation of its prompt
    a, b = features.starts[answered[0]], features.starts[answered[0] + 1]
    prompt, answer = features.tokens[a:a + features.answers[answered[0]]], features.tokens[a + features.answers[answered[0]]:b]
    engine.target.prefill("greedy", prompt.tolist(), Sampling(), 0)
    greedy = []
    while len(greedy) < len(answer):
        greedy += engine.target.verify("greedy", Draft([])).tokens
    engine.target.release("greedy")
    assert greedy == answer.tolist()


def test_extraction_resumes_and_refuses_other_settings(cache):
    shards = sorted(features_dir("python").glob("*.npz"))
    stamps = [p.stat().st_mtime_ns for p in shards]
    shards[-1].unlink()  # as if interrupted before the last shard
    build_pool(["python"], "tiny:0", SETTINGS, store_tokens=20_000, progress=False)
    assert [p.stat().st_mtime_ns for p in shards[:-1]] == stamps[:-1] and shards[-1].exists()
    with pytest.raises(ValueError, match="other settings"):
        build_pool(["python"], "tiny:0", ExtractSettings(window=32), progress=False)


def test_training_resumes_after_an_interruption(cache, monkeypatch):
    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(training, "save_head", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train(["python"], "tiny:0", QUICK, QUICK, progress=False)
    assert checkpoint_path("general").exists() and not head_path("general").exists()
    monkeypatch.undo()
    heads = train(["python"], "tiny:0", TrainSettings(**{**QUICK.__dict__, "max_steps": 30}), QUICK, progress=False)
    general = json.loads(heads["general"].with_suffix(".json").read_text())
    assert general["steps"] == 30 and [h["step"] for h in general["history"]] == [5, 10, 15, 20, 25, 30]
    assert general["history"][-1]["loss"] < general["history"][0]["loss"]
    specialist = json.loads(heads["python"].with_suffix(".json").read_text())
    assert specialist["init"] == str(heads["general"]) and not checkpoint_path("general").exists()


def test_pool_artifacts_load_as_drafters_and_keep_greedy_output(cache):
    train(["python"], "tiny:0", QUICK, QUICK, progress=False)
    assert store_path("python").exists()
    drafters = [DrafterConfig(name="general", kind="eagle", artifact="zoo/heads/general.safetensors"),
                DrafterConfig(name="python", kind="eagle", artifact="zoo/heads/python.safetensors"),
                DrafterConfig(name="store", kind="datastore", artifact="zoo/datastores/python.npz", max_ngram=8, min_ngram=2)]
    engine = Engine(EngineConfig(target=TargetConfig(model="tiny:0", dtype="float32"), drafters=drafters, k=4,
                                 selector=SelectorConfig(name="hedgespec-sleeping")))
    for prompt in ["def mean(values):", "Explain the following."]:
        assert engine.generate(prompt, 32).tokens == engine.generate(prompt, 32, speculate=False).tokens


def test_int8_head_keeps_the_heads_predictions(cache, tmp_path):
    train(["python"], "tiny:0", QUICK, QUICK, progress=False)
    head, vocab = load_head(head_path("python"))
    small = tmp_path / "python-int8.safetensors"
    save_head(small, head, vocab, int8=True)
    quantized, same_vocab = load_head(small)
    assert torch.equal(vocab, same_vocab)
    assert small.stat().st_size < 0.6 * head_path("python").stat().st_size
    for (name, w), w8 in zip(head.state_dict().items(), quantized.state_dict().values()):
        bound = w.abs().amax(-1, keepdim=True) / 127 if w.dim() == 2 else 1e-3 * w.abs().max()
        # half a step from rounding to nearest, plus the fp16 scale's own rounding over up to 127 steps
        assert ((w - w8).abs() <= bound * (0.5 + 127 * 2**-11) + 1e-6).all(), name
    features = load_features("python")
    states = torch.from_numpy(features.hidden[None, :64]).float()
    embeds = torch.randn(1, 64, states.shape[-1])
    full, _ = head(states, embeds, torch.arange(64))
    eight, _ = quantized(states, embeds, torch.arange(64))
    cosine = torch.nn.functional.cosine_similarity(full, eight, dim=-1)
    assert cosine.min() > 0.99, cosine.min()


def test_bundle_export_then_install_rebuilds_the_same_datastore(cache, tmp_path, monkeypatch):
    train(["python"], "tiny:0", QUICK, QUICK, progress=False)
    bundle_dir = export(["python"], bundle=tmp_path / "bundle")
    assert sorted(p.name for p in (bundle_dir / "heads").iterdir()) == ["general.safetensors", "python.safetensors"]
    fresh = tmp_path / "fresh-cache"
    shutil.copytree(cache / "data", fresh / "data")
    monkeypatch.setenv("HEDGESPEC_CACHE", str(fresh))
    [installed] = install(["python"], "tiny:0", store_tokens=20_000, bundle=bundle_dir, progress=False)
    built, rebuilt = Datastore.load(store_path("python", cache)), Datastore.load(installed)
    assert np.array_equal(built.stream, rebuilt.stream) and np.array_equal(built.order, rebuilt.order)
    with pytest.raises(FileNotFoundError, match="zoo export"):
        install(["sql"], "tiny:0", bundle=bundle_dir, progress=False)


def test_all_domains_head_trains_on_every_domain(cache, monkeypatch):
    import hedgespec.zoo as zoo
    build_pool(["sql"], "tiny:0", SETTINGS, store_tokens=20_000, progress=False)
    monkeypatch.setattr(zoo, "DOMAINS", ["python", "sql"])
    heads = train(["python"], "tiny:0", QUICK, QUICK, all_domains=True, progress=False)
    report = json.loads(heads["all-domains"].with_suffix(".json").read_text())
    python = json.loads(heads["python"].with_suffix(".json").read_text())["train_windows"]
    sql = len(training.windows(load_features("sql"), QUICK.window, QUICK.holdout, QUICK.seed)[0])
    assert report["train_windows"] > max(python, sql)  # it saw both domains
    assert report["init"] == str(heads["general"])
