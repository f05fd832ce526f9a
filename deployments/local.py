"""Start the Serve application on this machine (a fresh local Ray instance) for tests and benchmarks."""
import contextlib
import os
import socket
import time

import httpx
import yaml


def serve_args(config_path: str) -> dict:
    return yaml.safe_load(open(config_path))["applications"][0].get("args", {})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def local_app(args: dict, num_cpus: int = 4, timeout_s: float = 300):
    """Yields an httpx client on the running app; shuts down only the Ray instance it started."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a private local instance: no token to distribute
    import ray
    from ray import serve

    from deployments.app import build_app

    port = free_port()
    ray.init(num_cpus=num_cpus, include_dashboard=False, object_store_memory=256 * 2**20, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(build_app(args), name="hedgespec", route_prefix="/", blocking=False)
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=timeout_s)
        deadline = time.time() + timeout_s
        while not _healthy(client):
            if time.time() > deadline:
                raise TimeoutError(f"the Serve app did not answer /health within {timeout_s:.0f} s")
            time.sleep(1)
        yield client
    finally:
        serve.shutdown()
        ray.shutdown()


def _healthy(client: httpx.Client) -> bool:
    try:
        return client.get("/health").status_code == 200
    except httpx.TransportError:
        return False
