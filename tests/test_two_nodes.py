"""The application across a two-node Ray cluster on this machine: `ray start --head` and a second
`ray start --address` worker, each offering one custom resource; the target is pinned to the head's,
the LM drafter group to the worker's. It answers a request, and Ray's state API shows the target and
that group on different nodes. Run: pytest -m cluster (about 1.5 minutes).

Teardown stops only this cluster's processes (those with files open in its own --temp-dir), never
`ray stop`, which would end every Ray instance on the machine."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from deployments.local import free_port, running_app, serve_args

pytestmark = pytest.mark.cluster
CONFIG = "configs/serve-tiny.yaml"
MODEL = "hedgespec-tiny"
RAY = str(Path(sys.executable).with_name("ray"))
HEAD, WORKER = {"hedgespec_target": 1}, {"hedgespec_drafters": 2}
NODE_FLAGS = ["--num-cpus=2", f"--object-store-memory={128 * 2**20}", "--disable-usage-stats"]


class LocalCluster:
    def __init__(self):
        self.temp_dir = tempfile.mkdtemp(prefix="hsray-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
        self.port = free_port()
        self.env = dict(os.environ, RAY_AUTH_MODE="disabled")

    def _start(self, *flags: str, resources: dict) -> None:
        # each node gets its own agent port: two nodes on one machine would both take Ray's default
        subprocess.run([RAY, "start", *flags, *NODE_FLAGS, f"--temp-dir={self.temp_dir}", f"--resources={json.dumps(resources)}",
                        f"--dashboard-agent-listen-port={free_port()}"],
                       env=self.env, check=True, timeout=180, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def start(self) -> None:
        self._start("--head", f"--port={self.port}", "--dashboard-host=127.0.0.1", f"--dashboard-port={free_port()}",
                    f"--ray-client-server-port={free_port()}", resources=HEAD)
        self._start(f"--address=127.0.0.1:{self.port}", resources=WORKER)

    def processes(self) -> list[int]:
        """Every process holding a file under this cluster's temp dir (logs, sockets): its GCS, raylets,
        agents and workers, and nothing of any other Ray instance."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                if any(os.readlink(fd).startswith(self.temp_dir) for fd in (entry / "fd").iterdir()):
                    found.append(int(entry.name))
            except OSError:  # gone meanwhile, or not ours to read
                continue
        return found

    def stop(self, grace_s: float = 5) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in self.processes():
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.time() + grace_s
            while self.processes() and time.time() < deadline:
                time.sleep(0.5)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster():
    nodes = LocalCluster()
    try:
        nodes.start()
        yield nodes
    finally:
        nodes.stop()
        assert not nodes.processes()


@pytest.fixture(scope="module")
def app(cluster):
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    args = serve_args(CONFIG)
    args["target_resources"] = {"hedgespec_target": 1}
    args["groups"] = [g | {"resources": {"hedgespec_drafters": 1}} if g["name"] == "lm" else g for g in args["groups"]]
    ray.init(address=f"127.0.0.1:{cluster.port}", log_to_driver=False)
    try:
        # one proxy, on the head: a proxy per node would make both bind the same port on this machine
        with running_app(args, proxy_location="HeadOnly") as client:
            yield client
    finally:
        ray.shutdown()


def test_target_and_a_drafter_group_run_on_different_nodes(app):
    from ray.util.state import list_actors, list_nodes

    answer = app.post("/v1/completions", json={"model": MODEL, "prompt": "one two three one two three",
                                               "max_tokens": 24, "temperature": 0}).json()
    assert answer["usage"]["completion_tokens"] == 24 and answer["hedgespec"]["mat"] >= 1
    assert sum(answer["hedgespec"]["rounds_by_drafter"].values()) == answer["hedgespec"]["rounds"]

    nodes = {n.node_id: n.resources_total for n in list_nodes()}
    assert len(nodes) == 2
    replicas = {}
    for actor in list_actors(filters=[("state", "=", "ALIVE")], limit=1000):
        deployment = actor.class_name.rsplit(":", 1)[-1]  # ServeReplica:<app>:<deployment>
        replicas.setdefault(deployment, set()).add(actor.node_id)
    [target_node] = replicas["Target"]
    [group_node] = replicas["DrafterGroup-lm"]  # both replicas: where its resource is
    assert target_node != group_node
    assert "hedgespec_target" in nodes[target_node] and "hedgespec_drafters" in nodes[group_node]
