"""Start the Serve application on this machine (a fresh local Ray instance) for tests and benchmarks."""
import contextlib
import os
import socket
import sys
import time
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]


def serve_args(config_path: str) -> dict:
    return yaml.safe_load(open(config_path))["applications"][0].get("args", {})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serving_env() -> dict[str, str]:
    """How Ray Serve serves the app: cluster/serving.env, and RAY_SERVE_HAPROXY_BINARY_PATH on the
    `hedgespec-haproxy` beside this interpreter (cluster/haproxy.py). A variable already set in this
    process's environment keeps its value (`RAY_SERVE_ENABLE_HA_PROXY=0 hedgespec bench load ...`
    runs behind Serve's Python proxy)."""
    lines = (ROOT / "cluster/serving.env").read_text().splitlines()
    settings = dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))
    settings["RAY_SERVE_HAPROXY_BINARY_PATH"] = os.path.join(os.path.dirname(sys.executable), "hedgespec-haproxy")
    return {name: os.environ.get(name, value) for name, value in settings.items()}


@contextlib.contextmanager
def local_app(args: dict, num_cpus: int = 4, timeout_s: float = 300, metrics_export_port: int | None = None,
              env: dict[str, str] | None = None):
    """Yields an httpx client on the running app; shuts down only the Ray instance it started.
    With metrics_export_port, Ray serves the app's metrics there for Prometheus, updated every second
    (Ray's default is every 10 s). `env`: environment variables of every replica (an API key, say),
    inherited from this process by the Ray instance it starts; not through a runtime_env, whose agent
    writes its variables into Ray's logs. The instance is started with serving_env() under `env`."""
    with local_apps({"hedgespec": args}, num_cpus, timeout_s, metrics_export_port, env) as clients:
        yield clients["hedgespec"]


@contextlib.contextmanager
def local_apps(apps: dict[str, dict], num_cpus: int = 4, timeout_s: float = 300, metrics_export_port: int | None = None,
               env: dict[str, str] | None = None):
    """local_app for several apps (name -> args) side by side in one Ray instance; yields a client per app."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a private local instance: no token to distribute
    # ...and no load balancer to deregister from: behind HAProxy (README, "The serving path: HAProxy
    # and gRPC") an ingress replica otherwise stays up 30 s after shutdown begins
    os.environ.setdefault("RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S", "0")
    import ray

    metrics = {"_metrics_export_port": metrics_export_port, "_system_config": {"metrics_report_interval_ms": 1000}}
    env = {**serving_env(), **(env or {})}
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    ray.init(num_cpus=num_cpus, include_dashboard=False, object_store_memory=256 * 2**20, log_to_driver=False,
             **(metrics if metrics_export_port else {}))
    try:
        with running_apps(apps, timeout_s) as clients:
            yield clients
    finally:
        ray.shutdown()
        for name, value in saved.items():
            os.environ.pop(name) if value is None else os.environ.__setitem__(name, value)


@contextlib.contextmanager
def running_app(args: dict, timeout_s: float = 300, **serve_options):
    """Runs the app on the Ray instance this process is connected to, on a free loopback port, until
    it answers /health; yields an httpx client on it and shuts Serve down at the end.
    serve_options go to serve.start (e.g. proxy_location)."""
    with running_apps({"hedgespec": args}, timeout_s, **serve_options) as clients:
        yield clients["hedgespec"]


@contextlib.contextmanager
def running_apps(apps: dict[str, dict], timeout_s: float = 300, **serve_options):
    """running_app for several apps (name -> args): one app is served at /, several each at /<name>;
    yields an httpx client per app once every one answers /health."""
    from ray import serve

    from deployments.app import build_app

    port = free_port()
    prefix = {name: "/" if len(apps) == 1 else f"/{name}" for name in apps}
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port}, **serve_options)
        for name, args in apps.items():
            serve.run(build_app(args), name=name, route_prefix=prefix[name], blocking=False)
        clients = {name: httpx.Client(base_url=f"http://127.0.0.1:{port}{prefix[name].rstrip('/')}", timeout=timeout_s)
                   for name in apps}
        deadline = time.time() + timeout_s
        while not all(_healthy(client) for client in clients.values()):
            if time.time() > deadline:
                raise TimeoutError(f"the Serve apps did not answer /health within {timeout_s:.0f} s")
            time.sleep(1)
        yield clients
    finally:
        serve.shutdown()


def _healthy(client: httpx.Client) -> bool:
    try:
        return client.get("/health").status_code == 200
    except httpx.TransportError:
        return False
