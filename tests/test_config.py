"""Typed configs reject what they do not know, and the shipped YAML files validate."""
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from hedgespec.config import EngineConfig, ServeConfig, load_config, load_serve_config

ROOT = Path(__file__).resolve().parents[1]


def test_unknown_keys_are_rejected():
    with pytest.raises(ValidationError, match="Extra inputs"):
        EngineConfig.model_validate({"k": 4, "speculation_length": 4})
    with pytest.raises(ValidationError, match="Extra inputs"):
        EngineConfig.model_validate({"target": {"model": "smollm2", "precision": "fp32"}})


def test_invariants_are_checked():
    with pytest.raises(ValidationError, match="unique"):
        EngineConfig.model_validate({"drafters": [{"name": "a", "kind": "prompt_lookup"}] * 2})
    with pytest.raises(ValidationError, match="needs a model"):
        EngineConfig.model_validate({"drafters": [{"name": "a", "kind": "lm"}]})
    with pytest.raises(ValidationError, match="not in the pool"):
        EngineConfig.model_validate({"selector": {"name": "fixed", "drafter": "ghost"}})
    with pytest.raises(ValidationError):
        EngineConfig.model_validate({"k": 0})


@pytest.mark.parametrize("path", [p for p in sorted((ROOT / "configs").glob("*.yaml")) + [ROOT / "serve_config.yaml"] if p.exists()],
                         ids=lambda p: p.name)
def test_shipped_configs_validate(path):
    assert isinstance(load_config(path), EngineConfig)


def test_custom_resources_pin_deployments_and_are_checked():
    from hedgespec.config import ServeConfig
    config = ServeConfig.model_validate({"target_resources": {"hedgespec_target": 1},
                                         "groups": [{"name": "g", "drafters": ["prompt-lookup"], "resources": {"hedgespec_drafters": 0.5}}]})
    assert config.target_resources == {"hedgespec_target": 1.0} and config.groups[0].resources == {"hedgespec_drafters": 0.5}
    assert ServeConfig().target_resources == {} and ServeConfig().drafter_groups()[0].resources == {}
    for bad, message in (({"GPU": 1}, "num_gpus"), ({"x": -1}, "greater than or equal"), ({"": 1}, "at least 1")):
        with pytest.raises(ValidationError, match=message):
            ServeConfig.model_validate({"target_resources": bad})
    with pytest.raises(ValidationError, match="Extra inputs"):
        ServeConfig.model_validate({"target_resource": {"a": 1}})


def test_group_autoscaling_reaches_the_deployment():
    from deployments.app import build_app
    args = {"groups": [{"name": "lookup", "drafters": ["prompt-lookup"],
                        "autoscaling": {"min_replicas": 1, "max_replicas": 3, "target_ongoing_requests": 4}}]}
    app = build_app(args)
    group = next(d for d in app._bound_deployment.init_args[2] if "DrafterGroup" in d._bound_deployment.name)
    scaling = group._bound_deployment._deployment_config.autoscaling_config
    assert (scaling.min_replicas, scaling.max_replicas, scaling.target_ongoing_requests) == (1, 3, 4)
    with pytest.raises(ValidationError, match="max_replicas < min_replicas"):
        ServeConfig.model_validate({"groups": [{"name": "g", "drafters": ["prompt-lookup"],
                                                "autoscaling": {"min_replicas": 3, "max_replicas": 2}}]})


@pytest.mark.parametrize("path", [p for p in sorted((ROOT / "configs").glob("*.yaml")) + [ROOT / "serve_config.yaml"]
                                  if "bundle:" in p.read_text()], ids=lambda p: p.name)
def test_bundled_heads_named_by_the_configs_are_committed_and_fit_smollm2(path):
    """The committed pool is complete: every `bundle:` head exists, is int8 and has SmolLM2's width
    (576) and a draft vocabulary inside its 49152 tokens (read from the files, no model needed)."""
    from safetensors import safe_open

    from hedgespec.drafters import artifact_path
    from hedgespec.drafters.feature_head import SCALE, load_head
    heads = [d.artifact for d in load_config(path).drafters if d.artifact and d.artifact.startswith("bundle:")]
    assert heads
    for artifact in heads:
        file = artifact_path(artifact)
        assert file.exists(), f"{artifact} is not committed: `hedgespec zoo export`"
        with safe_open(file, "pt") as f:
            assert any(name.endswith(SCALE) for name in f.keys()), f"{artifact} is not int8"
        head, vocab = load_head(file)
        assert head.spec.hidden == 576 and 0 <= int(vocab.min()) and int(vocab.max()) < 49152


@pytest.mark.parametrize("path", [ROOT / "serve_config.yaml", ROOT / "configs/serve-lookup.yaml",
                                  ROOT / "configs/serve-tiny.yaml", ROOT / "configs/serve-hf.yaml"], ids=lambda p: p.name)
def test_cpu_serve_configs_fit_the_two_core_machine_they_are_documented_for(path):
    """Ray never schedules a replica whose CPUs do not fit: `serve run` would wait forever."""
    config = load_serve_config(path)
    groups = sum(g.num_cpus * g.num_replicas for g in config.drafter_groups())
    assert config.target_num_cpus + groups + 2 * config.small_num_cpus <= 2.0


def test_a_pool_file_is_the_one_list_of_drafters(tmp_path, monkeypatch):
    """`pool:` names a file whose drafters come first, `drafters:` adds to them; groups may take the
    pool's drafters by kind. A resolved config validates again unchanged (what replicas receive)."""
    pool = tmp_path / "pool.yaml"
    pool.write_text("drafters:\n  - {name: look, kind: prompt_lookup}\n  - {name: store, kind: datastore, artifact: s.npz}\n")
    config = ServeConfig.model_validate({
        "engine": {"pool": str(pool), "drafters": [{"name": "look-2", "kind": "prompt_lookup", "min_ngram": 2}]},
        "groups": [{"name": "lookups", "kinds": ["prompt_lookup"]}, {"name": "stores", "drafters": ["store"]}]})
    assert [d.name for d in config.engine.drafters] == ["look", "store", "look-2"]
    assert [(g.name, g.drafters) for g in config.drafter_groups()] == [("lookups", ["look", "look-2"]), ("stores", ["store"])]
    assert ServeConfig.model_validate(config.model_dump()) == config
    monkeypatch.chdir(tmp_path)  # a relative pool path falls back to the project root
    assert [d.name for d in EngineConfig.model_validate({"pool": "configs/pool.yaml"}).drafters] == \
        [d["name"] for d in yaml.safe_load((ROOT / "configs/pool.yaml").read_text())["drafters"]]
    with pytest.raises(ValidationError, match="not found"):
        EngineConfig.model_validate({"pool": "nowhere.yaml"})
    with pytest.raises(ValidationError, match="one of the two"):
        ServeConfig.model_validate({"groups": [{"name": "g", "drafters": ["prompt-lookup"], "kinds": ["eagle"]}]})
    with pytest.raises(ValidationError, match="hold no drafter"):
        ServeConfig.model_validate({"groups": [{"name": "g", "drafters": ["prompt-lookup"]}, {"name": "h", "kinds": ["eagle"]}]})


def test_the_served_apps_and_the_experiments_use_the_same_pool():
    experiments = load_config(ROOT / "configs/pool.yaml").drafters
    assert load_serve_config(ROOT / "configs/serve-hf.yaml").engine.drafters == experiments
    # the default app, on vLLM: the pool's drafters that need no hidden states, in the pool's order
    assert load_serve_config(ROOT / "serve_config.yaml").engine.drafters == [
        d for d in experiments if d.kind in ("prompt_lookup", "datastore")]
    assert load_config(ROOT / "configs/matrix.yaml").drafters[:len(experiments)] == experiments


def test_the_vllm_backend_takes_the_pools_token_drafters_and_refuses_the_rest():
    vllm = {"backend": "vllm"}
    cheap = EngineConfig.model_validate({"target": vllm, "pool": "configs/pool.yaml",
                                         "pool_kinds": ["prompt_lookup", "datastore"]})
    pool = yaml.safe_load((ROOT / "configs/pool.yaml").read_text())["drafters"]
    assert [d.name for d in cheap.drafters] == [d["name"] for d in pool if d["kind"] in ("prompt_lookup", "datastore")]
    with pytest.raises(ValidationError, match="need the HF backend"):
        EngineConfig.model_validate({"target": vllm, "pool": "configs/pool.yaml"})  # the heads
    with pytest.raises(ValidationError, match="not a tiny"):
        EngineConfig.model_validate({"target": {"backend": "vllm", "model": "tiny:0"}})
    with pytest.raises(ValidationError, match="name one"):
        EngineConfig.model_validate({"pool_kinds": ["datastore"]})
    with pytest.raises(ValidationError, match="no `groups`"):
        ServeConfig.model_validate({"engine": {"target": vllm}, "groups": [{"name": "g", "kinds": ["prompt_lookup"]}]})
