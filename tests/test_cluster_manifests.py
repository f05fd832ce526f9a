"""cluster/: the Ray cluster launcher YAML passes Ray's own schema and offers the custom resources
configs/serve-gpu.yaml pins to; the KubeRay RayService serves the application of serve_config.yaml."""
import copy
from pathlib import Path

import jsonschema
import pytest
import ray
import yaml

from hedgespec.config import load_serve_config

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = ROOT / "cluster/ray-cluster.yaml"


def launcher() -> dict:
    return yaml.safe_load(LAUNCHER.read_text())


def validate_launcher(config: dict) -> None:
    from ray.autoscaler._private.util import prepare_config, validate_config  # what `ray up` runs first
    validate_config(prepare_config(copy.deepcopy(config)))


def test_launcher_yaml_passes_rays_schema():
    validate_launcher(launcher())
    broken = launcher()
    broken["available_node_types"]["gpu-target"]["resourcez"] = {"hedgespec_target": 1}
    with pytest.raises(jsonschema.ValidationError):
        validate_launcher(broken)


def test_launcher_nodes_offer_what_the_gpu_app_pins_to():
    nodes = launcher()["available_node_types"]
    config = load_serve_config(ROOT / "configs/serve-gpu.yaml")
    wanted = [config.target_resources] + [g.resources for g in config.groups]
    assert all(wanted), "the GPU app pins the target and every group"
    for resources in wanted:
        offering = [name for name, node in nodes.items() if all(node["resources"].get(r, 0) >= v for r, v in resources.items())]
        assert offering, f"no node type offers {resources}"
    target_nodes = {n for n, node in nodes.items() if set(config.target_resources) <= set(node["resources"])}
    group_nodes = {n for n, node in nodes.items() if any(set(g.resources) <= set(node["resources"]) for g in config.groups)}
    assert target_nodes.isdisjoint(group_nodes), "the target and the drafter groups land on different node types"


def test_rayservice_serves_the_serve_config_application():
    manifest = yaml.safe_load((ROOT / "cluster/kuberay/rayservice.yaml").read_text())
    assert manifest["apiVersion"] == "ray.io/v1" and manifest["kind"] == "RayService"
    serve_config = yaml.safe_load(manifest["spec"]["serveConfigV2"])
    assert serve_config["applications"] == yaml.safe_load((ROOT / "serve_config.yaml").read_text())["applications"]
    assert serve_config["http_options"]["host"] == "0.0.0.0"  # reachable through KubeRay's Service
    cluster = manifest["spec"]["rayClusterConfig"]
    assert cluster["rayVersion"] == ray.__version__
    groups = [cluster["headGroupSpec"]] + cluster["workerGroupSpecs"]
    for group in groups:
        assert group["rayStartParams"]["metrics-export-port"] == "8080"
        [container] = group["template"]["spec"]["containers"]
        assert {"containerPort": 8080, "name": "metrics"} in container["ports"]
