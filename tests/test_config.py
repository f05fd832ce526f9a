"""Typed configs reject what they do not know, and the shipped YAML files validate."""
from pathlib import Path

import pytest
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
                                  ROOT / "configs/serve-tiny.yaml"], ids=lambda p: p.name)
def test_cpu_serve_configs_fit_the_two_core_machine_they_are_documented_for(path):
    """Ray never schedules a replica whose CPUs do not fit: `serve run` would wait forever."""
    config = load_serve_config(path)
    groups = sum(g.num_cpus * g.num_replicas for g in config.drafter_groups())
    assert config.target_num_cpus + groups + 2 * config.small_num_cpus <= 2.0
