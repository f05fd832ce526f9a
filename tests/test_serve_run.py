"""`serve run serve_config.yaml` on the real SmolLM2 target answers a completion (slow: starts the
vLLM engine, compiled, 2.5-3 minutes on 2 cores). Needs `make setup` (vLLM and the converted target)."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_serve_run_answers_a_completion():
    serve = Path(sys.executable).with_name("serve")
    env = dict(os.environ, RAY_AUTH_MODE="disabled")
    process = subprocess.Popen([str(serve), "run", "serve_config.yaml"], cwd=ROOT, env=env, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = httpx.Client(base_url="http://127.0.0.1:8000", timeout=120)
        deadline = time.time() + 600
        while True:
            assert process.poll() is None, "serve run exited"
            try:
                if client.get("/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.time() < deadline, "serve run did not come up in 600 s"
            time.sleep(2)
        body = {"model": "hedgespec", "prompt": "Repeat: the cat sat on the mat. the cat sat", "max_tokens": 24,
                "temperature": 0}
        out = client.post("/v1/completions", json=body).json()
        assert out["usage"]["completion_tokens"] > 0 and out["choices"][0]["text"]
        assert out["hedgespec"]["mat"] >= 1
    finally:
        os.killpg(process.pid, signal.SIGINT)  # serve run shuts down the Ray instance it started
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
