"""cluster/haproxy.py, the HAProxy that Ray Serve starts, on its own: it serves with splice off, and
it ends when the process that started it is killed (left behind, it holds Serve's ports)."""
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

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
