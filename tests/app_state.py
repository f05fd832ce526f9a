"""A running app's /stats as the HTTP tests read it: once its requests have ended, no part of the app
holds state for any of them; clients that leave, mid-stream or before a plain answer; the HAProxy
processes in front of it; and waiting for a change of any of these."""
import json
import socket
import time
from pathlib import Path


def holds_no_state(stats: dict) -> bool:
    """Nothing in flight at the ingress (which also holds the callers' slots), nor in the target, the
    selector or a drafter group. On vLLM the target counts its requests and its proposer's apart."""
    target = stats["target"]
    held_by_target = any(target.values()) if isinstance(target, dict) else target
    return not (stats["in_flight"] or held_by_target or stats["selector"] or any(stats["groups"].values()))


def no_state(server, timeout: float = 30.0, headers: dict | None = None) -> dict:
    """/stats once no request holds state; fails when some still does after `timeout` seconds.
    `headers`: an app behind API keys wants one."""
    deadline = time.time() + timeout
    while not holds_no_state(stats := server.get("/stats", headers=headers).json()):
        assert time.time() < deadline, f"per-request state still held: {stats}"
        time.sleep(0.2)
    return stats


def wait_until(condition, timeout: float, what: str) -> None:
    """Polls `condition` until it holds; fails after `timeout` seconds, naming `what` it waited for."""
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def leave_a_stream(client, body: dict, events: int, path: str = "/v1/completions") -> None:
    """Opens a streamed request, reads its first `events` text events and leaves mid-stream (the
    response closes at the end of the block: the client disconnects)."""
    with client.stream("POST", path, json=body) as response:
        texts = (line for line in response.iter_lines() if line.startswith("data: {"))
        for _ in range(events):
            next(texts)


def leave_a_plain_request(client, body: dict, path: str = "/v1/completions") -> None:
    """Sends a plain (not streamed) request with its body in a write of its own after the headers, as
    httpx (the OpenAI client's transport) may send it, and closes the connection, before the answer,
    as soon as the app's /stats shows the request in flight. Leaving after a fixed delay raced the
    tiny models, which finish 240 tokens in about half a second. Behind HAProxy with splice() on,
    the replica never heard of such a close (cluster/haproxy.py)."""
    payload = json.dumps(body).encode()
    host, port = client.base_url.host, client.base_url.port
    head = (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n").encode()
    with socket.create_connection((host, port)) as connection:
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # the headers go out alone
        connection.sendall(head)
        time.sleep(0.05)
        connection.sendall(payload)
        deadline = time.time() + 10.0
        while not client.get("/stats").json()["in_flight"]:
            assert time.time() < deadline, "the request never showed in /stats"
            time.sleep(0.01)


def haproxy_command_lines() -> list[list[str]]:
    """The command lines of the HAProxy processes running on this machine (Ray Serve starts one per
    node when RAY_SERVE_ENABLE_HA_PROXY=1)."""
    lines = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().decode().split("\0")
        except OSError:  # the process ended
            continue
        if args[0].endswith("/haproxy"):
            lines.append(args)
    return lines
