"""cluster/: the Ray cluster launcher YAML passes Ray's own schema and offers the custom resources
configs/serve-gpu.yaml pins to; the KubeRay RayService serves the application of serve_config.yaml.
Both start Ray with cluster/serving.env, as `make serve` does."""
import copy
import os
import re
import subprocess
import sys
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


def test_every_launcher_node_starts_ray_with_the_serving_env(tmp_path):
    (tmp_path / "hedgespec").symlink_to(ROOT)  # where file_mounts puts the checkout: ~/hedgespec
    scripts = os.path.dirname(sys.executable)  # where setup_commands' pip puts hedgespec-haproxy
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        [start] = [command for command in launcher()[key] if "ray start" in command]
        shell = start.replace("ray start", "env #")  # what `ray start` would inherit
        env = subprocess.run(["bash", "-c", shell], env={"HOME": str(tmp_path), "PATH": f"{scripts}:/usr/bin:/bin"},
                             capture_output=True, text=True, check=True).stdout.splitlines()
        assert "RAY_SERVE_ENABLE_HA_PROXY=1" in env, key
        assert f"RAY_SERVE_HAPROXY_BINARY_PATH={scripts}/hedgespec-haproxy" in env, key


def test_rayservice_serves_the_serve_config_application():
    text = (ROOT / "cluster/kuberay/rayservice.yaml").read_text()
    manifest = yaml.safe_load(text)
    assert manifest["apiVersion"] == "ray.io/v1" and manifest["kind"] == "RayService"
    serve_config = yaml.safe_load(manifest["spec"]["serveConfigV2"])
    assert serve_config["applications"] == yaml.safe_load((ROOT / "serve_config.yaml").read_text())["applications"]
    assert serve_config["http_options"]["host"] == "0.0.0.0"  # reachable through KubeRay's Service
    cluster = manifest["spec"]["rayClusterConfig"]
    assert cluster["rayVersion"] == ray.__version__
    # the ConfigMap the header's steps create, from an env file that exists
    [(configmap, env_file)] = re.findall(r"kubectl create configmap (\S+) --from-env-file=(\S+)", text)
    assert "RAY_SERVE_ENABLE_HA_PROXY=1" in (ROOT / env_file).read_text().splitlines()
    groups = [cluster["headGroupSpec"]] + cluster["workerGroupSpecs"]
    for group in groups:
        assert group["rayStartParams"]["metrics-export-port"] == "8080"
        [container] = group["template"]["spec"]["containers"]
        assert {"containerPort": 8080, "name": "metrics"} in container["ports"]
        assert {"configMapRef": {"name": configmap}} in container["envFrom"]
