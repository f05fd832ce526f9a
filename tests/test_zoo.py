"""The offline pool on a tiny target and the fixture corpora: features that are the target's own,
resumable extraction and training, and heads/datastores that load as drafters of the real loop."""
import json
import shutil
from pathlib import Path

import pytest
import torch

from hedgespec.config import DrafterConfig, EngineConfig, SelectorConfig, TargetConfig
from hedgespec.engine import Engine
from hedgespec.interfaces import Draft
from hedgespec.sampling import Sampling
from hedgespec.zoo import ExtractSettings, TrainSettings, build_pool, train
from hedgespec.zoo import training
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
    engine = Engine(EngineConfig(target=TargetConfig(model="tiny:0"), drafters=[]))
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
    engine = Engine(EngineConfig(target=TargetConfig(model="tiny:0"), drafters=drafters, k=4,
                                 selector=SelectorConfig(name="hedgespec-sleeping")))
    for prompt in ["def mean(values):", "Explain the following."]:
        assert engine.generate(prompt, 32).tokens == engine.generate(prompt, 32, speculate=False).tokens
